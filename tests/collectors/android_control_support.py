"""Writing AndroidControl-shaped TFRecord files with the official protobuf library, for the importer's tests.

The message classes are built here from descriptors (descriptor_pb2) that restate the published
.proto files, field numbers included:
  tensorflow/tensorflow  tensorflow/core/example/feature.proto, tensorflow/core/example/example.proto
  google-deepmind/android_env  android_env/proto/a11y/{rect,android_accessibility_action,
      android_accessibility_node_info_clickable_span,android_accessibility_node_info,
      android_accessibility_tree,android_accessibility_window_info,android_accessibility_forest}.proto
so that the bytes the tests read come from google.protobuf's encoder, not from the decoder under
test. The TFRecord framing and its CRC32C are written here too, with a bit-at-a-time CRC that
shares nothing with `collectors.protowire`'s table and numpy versions.

`FIXTURES` describes every episode of the committed files; `make_fixtures.py` in
tests/data/android-control writes them from it.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "int32": F.TYPE_INT32,
    "int64": F.TYPE_INT64,
    "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING,
    "bytes": F.TYPE_BYTES,
    "float": F.TYPE_FLOAT,
}


def _field(
    msg: descriptor_pb2.DescriptorProto,
    name: str,
    number: int,
    kind: str,
    repeated: bool = False,
    packed: bool = False,
    oneof: int | None = None,
) -> None:
    f = msg.field.add(name=name, number=number, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if kind in _SCALARS:
        f.type = _SCALARS[kind]
    elif kind.startswith("enum:"):
        f.type, f.type_name = F.TYPE_ENUM, kind[5:]
    else:
        f.type, f.type_name = F.TYPE_MESSAGE, kind
    if packed:
        f.options.packed = True
    if oneof is not None:
        f.oneof_index = oneof


def _file(name: str, package: str, deps: tuple[str, ...] = ()) -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(
        name=name, package=package, syntax="proto3", dependency=list(deps)
    )


def _tensorflow_files() -> list[descriptor_pb2.FileDescriptorProto]:
    feature = _file("tensorflow/core/example/feature.proto", "tensorflow")
    for name, kind, packed in (
        ("BytesList", "bytes", False),
        ("FloatList", "float", True),
        ("Int64List", "int64", True),
    ):
        _field(feature.message_type.add(name=name), "value", 1, kind, repeated=True, packed=packed)
    feat = feature.message_type.add(name="Feature")
    feat.oneof_decl.add(name="kind")
    _field(feat, "bytes_list", 1, ".tensorflow.BytesList", oneof=0)
    _field(feat, "float_list", 2, ".tensorflow.FloatList", oneof=0)
    _field(feat, "int64_list", 3, ".tensorflow.Int64List", oneof=0)
    features = feature.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, "string")
    _field(entry, "value", 2, ".tensorflow.Feature")
    _field(features, "feature", 1, ".tensorflow.Features.FeatureEntry", repeated=True)
    example = _file(
        "tensorflow/core/example/example.proto", "tensorflow", ("tensorflow/core/example/feature.proto",)
    )
    _field(example.message_type.add(name="Example"), "features", 1, ".tensorflow.Features")
    return [feature, example]


_A11Y = "android_env/proto/a11y/"


def _android_env_files() -> list[descriptor_pb2.FileDescriptorProto]:
    rect = _file(_A11Y + "rect.proto", "android_env")
    r = rect.message_type.add(name="ProtoRect")
    for number, name in enumerate(("left", "top", "right", "bottom"), start=1):
        _field(r, name, number, "int32")

    action = _file(_A11Y + "android_accessibility_action.proto", "android_env")
    a = action.message_type.add(name="AndroidAccessibilityAction")
    _field(a, "id", 1, "int32")
    _field(a, "label", 2, "string")

    span_file = _file(_A11Y + "android_accessibility_node_info_clickable_span.proto", "android_env")
    span = span_file.message_type.add(name="AndroidAccessibilityNodeInfoClickableSpan")
    source = span.enum_type.add(name="SpanSource")
    for number, name in enumerate(("UNKNOWN_TYPE", "TEXT", "CONTENT_DESCRIPTION")):
        source.value.add(name=name, number=number)
    _field(span, "text", 1, "string")
    _field(span, "url", 2, "string")
    _field(span, "source", 3, "enum:.android_env.AndroidAccessibilityNodeInfoClickableSpan.SpanSource")
    _field(span, "start", 4, "int32")
    _field(span, "node_id", 5, "int32")

    node_file = _file(
        _A11Y + "android_accessibility_node_info.proto",
        "android_env",
        (action.name, span_file.name, rect.name),
    )
    n = node_file.message_type.add(name="AndroidAccessibilityNodeInfo")
    for number, name, kind in (
        (1, "unique_id", "int32"),
        (2, "bounds_in_screen", ".android_env.ProtoRect"),
        (3, "class_name", "string"),
        (4, "content_description", "string"),
        (5, "hint_text", "string"),
        (6, "package_name", "string"),
        (7, "text", "string"),
        (8, "text_selection_start", "int64"),
        (9, "text_selection_end", "int64"),
        (10, "view_id_resource_name", "string"),
        (11, "window_id", "int32"),
        (12, "is_checkable", "bool"),
        (13, "is_checked", "bool"),
        (14, "is_clickable", "bool"),
        (15, "is_editable", "bool"),
        (16, "is_enabled", "bool"),
        (17, "is_focusable", "bool"),
        (18, "is_focused", "bool"),
        (19, "is_long_clickable", "bool"),
        (20, "is_password", "bool"),
        (21, "is_scrollable", "bool"),
        (22, "is_selected", "bool"),
        (23, "is_visible_to_user", "bool"),
        (27, "depth", "int32"),
        (28, "labeled_by_id", "int32"),
        (29, "label_for_id", "int32"),
        (30, "drawing_order", "int32"),
        (31, "tooltip_text", "string"),
    ):
        _field(n, name, number, kind)
    _field(n, "actions", 24, ".android_env.AndroidAccessibilityAction", repeated=True)
    _field(n, "child_ids", 25, "int32", repeated=True, packed=True)
    _field(n, "clickable_spans", 26, ".android_env.AndroidAccessibilityNodeInfoClickableSpan", repeated=True)

    tree = _file(_A11Y + "android_accessibility_tree.proto", "android_env", (node_file.name,))
    _field(
        tree.message_type.add(name="AndroidAccessibilityTree"),
        "nodes",
        1,
        ".android_env.AndroidAccessibilityNodeInfo",
        repeated=True,
    )

    window = _file(_A11Y + "android_accessibility_window_info.proto", "android_env", (tree.name, rect.name))
    w = window.message_type.add(name="AndroidAccessibilityWindowInfo")
    wtype = w.enum_type.add(name="WindowType")
    for number, name in enumerate(
        (
            "UNKNOWN_TYPE",
            "TYPE_APPLICATION",
            "TYPE_INPUT_METHOD",
            "TYPE_SYSTEM",
            "TYPE_ACCESSIBILITY_OVERLAY",
            "TYPE_SPLIT_SCREEN_DIVIDER",
        )
    ):
        wtype.value.add(name=name, number=number)
    for number, name, kind in (
        (1, "bounds_in_screen", ".android_env.ProtoRect"),
        (2, "display_id", "int32"),
        (3, "id", "int32"),
        (4, "layer", "int32"),
        (5, "title", "string"),
        (6, "window_type", "enum:.android_env.AndroidAccessibilityWindowInfo.WindowType"),
        (7, "is_accessibility_focused", "bool"),
        (8, "is_active", "bool"),
        (9, "is_focused", "bool"),
        (10, "is_in_picture_in_picture_mode", "bool"),
        (11, "tree", ".android_env.AndroidAccessibilityTree"),
    ):
        _field(w, name, number, kind)

    forest = _file(_A11Y + "android_accessibility_forest.proto", "android_env", (window.name,))
    _field(
        forest.message_type.add(name="AndroidAccessibilityForest"),
        "windows",
        1,
        ".android_env.AndroidAccessibilityWindowInfo",
        repeated=True,
    )
    return [rect, action, span_file, node_file, tree, window, forest]


_POOL = descriptor_pool.DescriptorPool()
for _fd in _tensorflow_files() + _android_env_files():
    _POOL.Add(_fd)


def message_class(full_name: str) -> Any:
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(full_name))


Example = message_class("tensorflow.Example")
Forest = message_class("android_env.AndroidAccessibilityForest")
NodeInfo = message_class("android_env.AndroidAccessibilityNodeInfo")
Rect = message_class("android_env.ProtoRect")


# ---------------------------------------------------------------------------------------------
# TFRecord framing, with its own CRC32C


def crc32c_bitwise(data: bytes) -> int:
    """CRC32C (Castagnoli, reflected polynomial 0x82F63B78) one bit at a time, from the definition."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c_bitwise(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data: bytes, bad_data_crc: bool = False, declared_length: int | None = None) -> bytes:
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    length = struct.pack("<Q", len(data) if declared_length is None else declared_length)
    footer = masked(data) ^ (1 if bad_data_crc else 0)
    return length + struct.pack("<I", masked(length)) + data + struct.pack("<I", footer)


def record_spans(blob: bytes) -> list[tuple[int, int]]:
    """(offset, data length) of each record of a well-framed TFRecord blob, read with struct alone."""
    spans, pos = [], 0
    while pos < len(blob):
        (length,) = struct.unpack_from("<Q", blob, pos)
        spans.append((pos, length))
        pos += 12 + length + 4
    return spans


# ---------------------------------------------------------------------------------------------
# Episodes


def png(width: int, height: int) -> bytes:
    """A real, all-black 1-bit PNG of the given size (a few hundred bytes at phone resolution)."""
    row = b"\x00" + bytes((width + 7) // 8)

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(row * height, 9))
        + chunk(b"IEND", b"")
    )


def node(
    uid: int, cls: str, bounds: tuple[int, int, int, int], children: tuple[int, ...] = (), **fields: Any
) -> Any:
    """One NodeInfo; enabled and visible unless said otherwise (proto3: an absent bool is false)."""
    left, top, right, bottom = bounds
    fields.setdefault("is_enabled", True)
    fields.setdefault("is_visible_to_user", True)
    return NodeInfo(
        unique_id=uid,
        class_name=cls,
        bounds_in_screen=Rect(left=left, top=top, right=right, bottom=bottom),
        child_ids=list(children),
        **fields,
    )


def window(wid: int, wtype: int, title: str, nodes: list, layer: int = 0, **flags: Any) -> dict:
    return {
        "id": wid,
        "window_type": wtype,
        "title": title,
        "layer": layer,
        "bounds_in_screen": Rect(left=0, top=0, right=1080, bottom=2400 if wtype != 3 else 63),
        "tree": {"nodes": nodes},
        **flags,
    }


def forest(*windows: dict) -> bytes:
    return Forest(windows=list(windows)).SerializeToString()


def example(features: dict[str, tuple[str, list]]) -> bytes:
    """A serialized tf.train.Example from {name: (list kind, values)}."""
    ex = Example()
    for name, (kind, values) in features.items():
        getattr(ex.features.feature[name], kind).value.extend(values)
    return ex.SerializeToString(deterministic=True)  # map entries sorted by key: the same bytes every run


def episode(
    episode_id: int,
    goal: str,
    trees: list[bytes],
    actions: list[dict | str],
    instructions: list[str] | None,
    screenshots: bool = True,
) -> bytes:
    feats: dict[str, tuple[str, list]] = {
        "episode_id": ("int64_list", [episode_id]),
        "goal": ("bytes_list", [goal.encode()]),
    }
    if screenshots:
        feats["screenshots"] = ("bytes_list", [png(1080, 2400)] * len(trees))
        feats["screenshot_widths"] = ("int64_list", [1080] * len(trees))
        feats["screenshot_heights"] = ("int64_list", [2400] * len(trees))
    feats["accessibility_trees"] = ("bytes_list", trees)
    feats["actions"] = (
        "bytes_list",
        [(a if isinstance(a, str) else json.dumps(a, separators=(",", ":"))).encode() for a in actions],
    )
    if instructions is not None:
        feats["step_instructions"] = ("bytes_list", [s.encode() for s in instructions])
    return example(feats)


STATUS_BAR = window(
    7,
    3,
    "StatusBar",
    [
        node(0, "android.widget.FrameLayout", (0, 0, 1080, 63), (1,), package_name="com.android.systemui"),
        node(
            1, "android.widget.TextView", (24, 0, 140, 63), text="9:41", package_name="com.android.systemui"
        ),
    ],
    layer=2,
)
_NOTES = "com.example.notes"


def _launcher() -> bytes:
    return forest(
        STATUS_BAR,
        window(
            3,
            1,
            "Launcher",
            [
                node(
                    0,
                    "android.widget.FrameLayout",
                    (0, 63, 1080, 2400),
                    (1,),
                    package_name="com.android.launcher3",
                ),
                node(
                    1,
                    "android.widget.TextView",
                    (60, 1800, 300, 2040),
                    text="Notes",
                    content_description="Notes",
                    is_clickable=True,
                    is_long_clickable=True,
                    is_focusable=True,
                    package_name="com.android.launcher3",
                ),
            ],
            layer=1,
            is_active=True,
            is_focused=True,
        ),
    )


def _notes_list() -> bytes:
    # listed out of pre-order: the children are found through child_ids, not by position
    return forest(
        STATUS_BAR,
        window(
            11,
            1,
            "Notes",
            [
                node(0, "android.widget.FrameLayout", (0, 63, 1080, 2400), (2, 1), package_name=_NOTES),
                node(
                    1,
                    "android.widget.ImageButton",
                    (900, 2100, 1040, 2240),
                    view_id_resource_name=f"{_NOTES}:id/add",
                    content_description="Add note",
                    is_clickable=True,
                    is_focusable=True,
                    package_name=_NOTES,
                ),
                node(
                    2,
                    "androidx.recyclerview.widget.RecyclerView",
                    (0, 200, 1080, 2000),
                    (3,),
                    is_scrollable=True,
                    view_id_resource_name=f"{_NOTES}:id/list",
                    package_name=_NOTES,
                ),
                node(
                    3,
                    "android.widget.TextView",
                    (40, 240, 1040, 330),
                    text="No notes yet",
                    package_name=_NOTES,
                ),
            ],
            layer=1,
            is_active=True,
            is_focused=True,
        ),
    )


def _editor(title: str, keyboard: bool) -> bytes:
    app = window(
        11,
        1,
        "Notes",
        [
            node(0, "android.widget.FrameLayout", (0, 63, 1080, 2400), (1, 2), package_name=_NOTES),
            node(
                1,
                "android.widget.EditText",
                (40, 200, 1040, 320),
                view_id_resource_name=f"{_NOTES}:id/title",
                text=title,
                hint_text="Title",
                is_editable=True,
                is_focusable=True,
                is_focused=True,
                is_clickable=True,
                package_name=_NOTES,
            ),
            node(
                2,
                "android.widget.Button",
                (760, 2200, 1040, 2340),
                text="Save",
                is_clickable=True,
                is_enabled=bool(title),
                package_name=_NOTES,
            ),
        ],
        layer=1,
        is_active=True,
        is_focused=not keyboard,
    )
    windows = [STATUS_BAR, app]
    if keyboard:
        windows.append(
            window(
                19,
                2,
                "",
                [
                    node(
                        0,
                        "android.inputmethodservice.KeyboardView",
                        (0, 1500, 1080, 2400),
                        package_name="com.google.android.inputmethod.latin",
                    )
                ],
                layer=3,
            )
        )
    return forest(*windows)


def _home_screen() -> bytes:
    return forest(
        window(
            3,
            1,
            "Launcher",
            [
                node(
                    0,
                    "android.widget.FrameLayout",
                    (0, 0, 1080, 2400),
                    (1, 2),
                    package_name="com.android.launcher3",
                ),
                node(
                    1,
                    "android.widget.TextView",
                    (60, 200, 1020, 300),
                    text='Café "Bonjour"',
                    package_name="com.android.launcher3",
                ),
                node(
                    2,
                    "android.view.View",
                    (0, 0, 1, 1),
                    is_visible_to_user=False,
                    package_name="com.android.launcher3",
                ),
            ],
            is_active=True,
            is_focused=True,
        )
    )


def _settings(wifi_on: bool) -> bytes:
    settings = "com.android.settings"
    return forest(
        window(
            5,
            1,
            "Settings",
            [
                node(0, "android.widget.FrameLayout", (0, 0, 1080, 2400), (1, 2), package_name=settings),
                node(1, "android.widget.TextView", (40, 360, 600, 440), text="Wi-Fi", package_name=settings),
                node(
                    2,
                    "android.widget.Switch",
                    (880, 360, 1040, 440),
                    view_id_resource_name="android:id/switch_widget",
                    is_checkable=True,
                    is_checked=wifi_on,
                    is_clickable=True,
                    package_name=settings,
                ),
            ],
            is_active=True,
            is_focused=True,
        )
    )


def shard_episodes() -> list[bytes]:
    """The gzip shard: two good episodes."""
    notes = episode(
        7021,
        "Add a note titled Groceries in the Notes app",
        [_launcher(), _notes_list(), _editor("", keyboard=True), _editor("Groceries", keyboard=True)],
        [
            {"action_type": "open_app", "app_name": "Notes"},
            {"action_type": "click", "x": 970, "y": 2170},
            {"action_type": "input_text", "text": "Groceries"},
        ],
        ["Open the Notes app", "Tap the add note button", "Type Groceries as the title"],
    )
    home = episode(
        13452,
        "Go to the home screen",
        [_notes_list(), _home_screen()],
        [{"action_type": "navigate_home"}],
        ["Go to the home screen"],
    )
    return [notes, home]


def mixed_records() -> list[bytes]:
    """The uncompressed file: framed records, good and bad, in this order."""
    good = episode(
        501,
        "Turn on Wi-Fi",
        [_home_screen(), _settings(False), _settings(True)],
        [{"action_type": "open_app", "app_name": "Settings"}, {"action_type": "click", "x": 960, "y": 400}],
        ["Open the Settings app", "Turn on Wi-Fi"],
    )
    short = episode(
        502,
        "Turn on Wi-Fi",
        [_home_screen(), _settings(False)],  # 2 trees for 2 actions
        [{"action_type": "open_app", "app_name": "Settings"}, {"action_type": "click", "x": 960, "y": 400}],
        ["Open the Settings app", "Turn on Wi-Fi"],
    )
    truncated_example = episode(
        503,
        "Go to the home screen",
        [_notes_list(), _home_screen()],
        [{"action_type": "navigate_home"}],
        ["Go to the home screen"],
    )[:100]
    corrupt = episode(
        504,
        "Go to the home screen",
        [_notes_list(), _home_screen()],
        [{"action_type": "navigate_home"}],
        ["Go to the home screen"],
    )
    no_type = episode(
        505, "Scroll the list", [_notes_list(), _notes_list()], [{"direction": "down"}], ["Scroll down"]
    )
    trees_only = episode(
        506,
        "Wait for the list",
        [_notes_list(), _notes_list()],
        [{"action_type": "wait"}],
        ["Wait"],
        screenshots=False,
    )
    return [
        frame(good),
        frame(short),
        frame(truncated_example),
        frame(corrupt, bad_data_crc=True),
        frame(no_type),
        frame(trees_only),
    ]


SHARD_NAME = "android_control-00000-of-00001"
MIXED_NAME = "mixed_records.tfrecord"


def write_fixtures(directory: Path) -> list[Path]:
    shard = directory / SHARD_NAME
    shard.write_bytes(gzip.compress(b"".join(frame(e) for e in shard_episodes()), compresslevel=9, mtime=0))
    mixed = directory / MIXED_NAME
    mixed.write_bytes(b"".join(mixed_records()))
    return [shard, mixed]
