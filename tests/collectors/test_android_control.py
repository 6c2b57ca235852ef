"""AndroidControl TFRecord shards, read through `pipelines.reader.read_path`, and the wire decoder under it.

No published shard is on this machine. The files in tests/data/android-control are written by its
make_fixtures.py with the official google.protobuf encoder, from descriptors that restate the
published .proto files (tests/collectors/android_control_support.py), and framed with a CRC32C
computed bit by bit there. Every expected value below comes from that construction (the episodes,
nodes and actions as written in the support module; record offsets read from the headers with
struct), not from running the importer.
"""

from __future__ import annotations

import gzip
import json
import random
import struct
from pathlib import Path

import pytest

from collectors import protowire as pw
from collectors.android_control import AndroidControlImporter
from pipelines.reader import read_path
from pipelines.sources import ReadLimits
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors import android_control_support as S
from tests.collectors.support import assert_schema_valid

DATA = Path(__file__).resolve().parents[1] / "data" / "android-control"
SHARD = DATA / S.SHARD_NAME
MIXED = DATA / S.MIXED_NAME


def _read(path: Path, limits: ReadLimits | None = None) -> list[Trajectory | QuarantineRecord]:
    return list(read_path(path, limits=limits or ReadLimits()))


def _summary(recs: list) -> list[tuple]:
    """(native id, locator, turns) for trajectories and (locator, reason) for quarantine rows, in order."""
    return [
        (r.native_id, r.locator, len(r.turns)) if isinstance(r, Trajectory) else (r.locator, r.reason)
        for r in recs
    ]


MIXED_SUMMARY = [
    ("501", "record:0", 2),
    ("record:1/step:1", "count_mismatch"),  # 2 trees for 2 actions: step 1 has no state after it
    ("record:2", "invalid_protobuf"),  # an Example cut after 100 bytes
    ("record:3", "bad_data_crc"),
    ("record:4/step:0", "malformed_record"),  # {"direction": "down"}: no action_type
    ("506", "record:5", 1),
]


# ---------------------------------------------------------------------------------------------
# CRC32C


def test_crc32c_standard_check_value() -> None:
    assert pw.crc32c(b"123456789") == 0xE3069283
    assert pw.crc32c_py(b"123456789") == 0xE3069283
    assert S.crc32c_bitwise(b"123456789") == 0xE3069283  # the fixtures' own CRC
    assert pw.crc32c(b"") == 0 and pw.crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


@pytest.mark.parametrize("n", [1, 255, 256, 4095, 4097, 4096 + 255, pw._NUMPY_FROM - 1, pw._NUMPY_FROM,
                               pw._NUMPY_FROM + 1, 70_001, (1 << 20) + 3])
def test_crc32c_numpy_lanes_equal_the_byte_loop(n: int) -> None:
    data = random.Random(n).randbytes(n)
    assert pw._crc32c_lanes(data) == pw.crc32c_py(data)  # the lane path at every size, not only above the switch
    assert pw.crc32c(data) == pw.crc32c_py(data)
    if n <= 70_001:
        assert pw.masked_crc32c(data) == S.masked(data)


# ---------------------------------------------------------------------------------------------
# The gzip shard


def test_gzip_shard_episodes() -> None:
    recs = _read(SHARD)
    assert _summary(recs) == [("7021", "record:0", 3), ("13452", "record:1", 1)]
    notes, home = recs
    assert notes.source_format == "android-control" and notes.domain == "android"
    assert notes.task == "Add a note titled Groceries in the Notes app"
    assert [t.tool_name for t in notes.turns] == ["open_app", "click", "input_text"]
    assert [t.action for t in notes.turns] == [
        '{"action_type":"open_app","app_name":"Notes"}',
        '{"action_type":"click","x":970,"y":2170}',
        '{"action_type":"input_text","text":"Groceries"}',
    ]
    assert [json.loads(t.tool_args) for t in notes.turns] == [
        {"app_name": "Notes"},
        {"x": 970, "y": 2170},
        {"text": "Groceries"},
    ]
    assert [t.locator for t in notes.turns] == ["record:0/step:0", "record:0/step:1", "record:0/step:2"]
    assert {t.observation_kind for t in notes.turns} == {"view_hierarchy"}
    assert [json.loads(t.metadata)["step_instruction"] for t in notes.turns] == [
        "Open the Notes app",
        "Tap the add note button",
        "Type Groceries as the title",
    ]
    assert notes.initial_state.split("\n") == [
        'window 0 "StatusBar" TYPE_SYSTEM',
        "[0] android.widget.FrameLayout bounds=[0,0][1080,63]",
        '  [1] android.widget.TextView text="9:41" bounds=[24,0][140,63]',
        'window 1 "Launcher" TYPE_APPLICATION active focused',
        "[0] android.widget.FrameLayout bounds=[0,63][1080,2400]",
        '  [1] android.widget.TextView text="Notes" desc="Notes" bounds=[60,1800][300,2040] '
        "clickable long-clickable focusable",
    ]
    # the state after step 0 is the notes list; its nodes are listed 0, ImageButton 1, RecyclerView 2,
    # TextView 3 with child_ids (2, 1): the rendering follows child_ids, not list order
    assert notes.turns[0].observation.split("\n")[3:] == [
        'window 1 "Notes" TYPE_APPLICATION active focused',
        "[0] android.widget.FrameLayout bounds=[0,63][1080,2400]",
        "  [1] androidx.recyclerview.widget.RecyclerView id=com.example.notes:id/list "
        "bounds=[0,200][1080,2000] scrollable",
        '    [2] android.widget.TextView text="No notes yet" bounds=[40,240][1040,330]',
        '  [3] android.widget.ImageButton id=com.example.notes:id/add desc="Add note" '
        "bounds=[900,2100][1040,2240] clickable focusable",
    ]
    after_typing = notes.turns[2].observation.split("\n")
    assert (
        '  [1] android.widget.EditText id=com.example.notes:id/title text="Groceries" hint="Title" '
        "bounds=[40,200][1040,320] clickable editable focusable focused"
    ) in after_typing
    assert after_typing[-2:] == [
        'window 2 "" TYPE_INPUT_METHOD',
        "[0] android.inputmethodservice.KeyboardView bounds=[0,1500][1080,2400]",
    ]
    # the Save button is disabled before a title is typed (is_enabled false)
    assert '  [2] android.widget.Button text="Save" bounds=[760,2200][1040,2340] clickable disabled' in (
        notes.turns[1].observation.split("\n")
    )
    assert json.loads(notes.metadata) == {
        "episode_id": 7021,
        "packages": [
            "com.android.launcher3",
            "com.android.systemui",
            "com.example.notes",
            "com.google.android.inputmethod.latin",
        ],
        "screenshots": {"count": 4, "sizes": [[1080, 2400]] * 4, "bytes": 4 * len(S.png(1080, 2400))},
    }
    assert json.loads(notes.turns[0].state) == {
        "packages": ["com.android.systemui", "com.example.notes"],
        "screenshot_size": [1080, 2400],
        "windows": [
            {
                "id": 7,
                "type": "TYPE_SYSTEM",
                "layer": 2,
                "display_id": 0,
                "title": "StatusBar",
                "bounds": [0, 0, 1080, 63],
            },
            {
                "id": 11,
                "type": "TYPE_APPLICATION",
                "layer": 1,
                "display_id": 0,
                "title": "Notes",
                "bounds": [0, 0, 1080, 2400],
                "active": True,
                "focused": True,
            },
        ],
    }
    assert home.task == "Go to the home screen"
    (turn,) = home.turns
    assert (turn.action, turn.tool_name, turn.tool_args) == (
        '{"action_type":"navigate_home"}',
        "navigate_home",
        "{}",
    )
    assert turn.observation.split("\n") == [
        'window 0 "Launcher" TYPE_APPLICATION active focused',
        "[0] android.widget.FrameLayout bounds=[0,0][1080,2400]",
        '  [1] android.widget.TextView text="Café \\"Bonjour\\"" bounds=[60,200][1020,300]',
        "  [2] android.view.View bounds=[0,0][1,1] invisible",
    ]
    assert home.initial_state == notes.turns[0].observation  # the same forest, rendered the same way
    assert_schema_valid(recs)


def test_the_shard_is_claimed_by_content() -> None:
    head = gzip.decompress(SHARD.read_bytes())[:65536]
    assert AndroidControlImporter().sniff(head)
    assert not AndroidControlImporter().sniff(head[:8] + bytes([head[8] ^ 1]) + head[9:])  # length CRC off


# ---------------------------------------------------------------------------------------------
# Bad records: each one quarantined with its reason and locator, the good ones of the file kept


def test_mixed_file_quarantines_each_bad_record() -> None:
    recs = _read(MIXED)
    assert _summary(recs) == MIXED_SUMMARY
    rows = {r.locator: r for r in recs if isinstance(r, QuarantineRecord)}
    assert all(r.importer == "android-control" and r.source == str(MIXED) for r in rows.values())
    assert rows["record:1/step:1"].detail == (
        f"{MIXED} record:1: step 1: 2 accessibility trees for 2 actions "
        "(AndroidControl has one per observation: len(actions) + 1 = 3)"
    )
    assert (
        "not a tf.train.Example" in rows["record:2"].detail and "runs past the end" in rows["record:2"].detail
    )
    offset3 = S.record_spans(MIXED.read_bytes())[3][0]
    assert f"record 3 at byte {offset3}: the data CRC does not match" in rows["record:3"].detail
    assert "step 0: action is not a JSON object with an 'action_type'" in rows["record:4/step:0"].detail
    trees_only = recs[-1]
    assert json.loads(trees_only.metadata) == {
        "episode_id": 506,
        "packages": ["com.android.systemui", "com.example.notes"],
    }
    assert "screenshot_size" not in json.loads(trees_only.turns[0].state)


def test_truncated_file(tmp_path: Path) -> None:
    blob = MIXED.read_bytes()
    last = S.record_spans(blob)[-1][0]
    for cut, part in ((len(blob) - 10, "inside the record"), (last + 5, "inside the record header")):
        path = tmp_path / f"cut_{cut}.tfrecord"
        path.write_bytes(blob[:cut])
        recs = _read(path)
        assert _summary(recs) == [*MIXED_SUMMARY[:-1], ("record:5", "truncated_record")]
        assert f"record 5 at byte {last}: the input ends {part}" in recs[-1].detail


def test_bad_length_crc_loses_the_rest_of_the_file(tmp_path: Path) -> None:
    blob = bytearray(MIXED.read_bytes())
    offset3 = S.record_spans(bytes(blob))[3][0]
    blob[offset3 + 8] ^= 0xFF  # the first byte of record 3's length CRC
    path = tmp_path / "bad_length_crc.tfrecord"
    path.write_bytes(bytes(blob))
    recs = _read(path)
    assert _summary(recs) == [*MIXED_SUMMARY[:3], ("record:3", "bad_length_crc")]  # 505 and 506 are not read
    assert "framing is lost and the rest of the input is not read" in recs[-1].detail


def test_record_above_the_limit_is_skipped() -> None:
    lengths = [n for _, n in S.record_spans(MIXED.read_bytes())]
    limit = lengths[0] - 1
    assert max(lengths[1:]) <= limit  # only record 0 is above it
    recs = _read(MIXED, ReadLimits(max_record_bytes=limit))  # the run's limit (`ingest --max-record-mb`)
    assert _summary(recs) == [("record:0", "record_too_large"), *MIXED_SUMMARY[1:]]
    assert f"{lengths[0]} bytes, above the {limit}-byte record limit (skipped)" in recs[0].detail


def test_declared_length_above_the_default_limit(tmp_path: Path) -> None:
    """A header that checks but announces 100 MiB: never allocated, and the file ends inside it."""
    path = tmp_path / "huge.tfrecord"
    path.write_bytes(gzip.decompress(SHARD.read_bytes()) + S.frame(b"x" * 64, declared_length=100 << 20)[:-4])
    recs = _read(path)
    assert _summary(recs) == [
        ("7021", "record:0", 3),
        ("13452", "record:1", 1),
        ("record:2", "record_too_large"),
    ]
    assert (
        f"{100 << 20} bytes, above the {64 << 20}-byte record limit, and the input ends inside it"
        in recs[-1].detail
    )


def test_truncated_gzip_stream(tmp_path: Path) -> None:
    """A shard whose download stopped: the records decompressed before the cut are kept. (The first MiB
    is read before any importer is chosen, so the episode after it is a large one.)"""
    big = S.example(
        {
            "goal": ("bytes_list", [b"big"]),
            "accessibility_trees": ("bytes_list", [S.forest()]),
            "actions": ("bytes_list", []),
            "screenshots": ("bytes_list", [random.Random(1).randbytes(3 << 20)]),
        }
    )
    shard = gzip.decompress(SHARD.read_bytes()) + S.frame(big)
    path = tmp_path / "android_control-00000-of-00001"
    path.write_bytes(gzip.compress(shard, mtime=0)[:-1000])
    recs = _read(path)
    assert _summary(recs) == [
        ("7021", "record:0", 3),
        ("13452", "record:1", 1),
        ("record:2", "truncated_record"),  # the framing: the record is cut short
        ("$", "corrupt_input"),  # the reader: why (the gzip stream breaks off)
    ]
    assert "the input ends inside the record" in recs[-2].detail
    assert "the gzip data breaks off after" in recs[-1].detail and "(EOFError: " in recs[-1].detail


def _one_episode_file(tmp_path: Path, **overrides: tuple[str, list]) -> Path:
    trees = [S.forest(), S.forest(), S.forest()]
    feats: dict[str, tuple[str, list]] = {
        "episode_id": ("int64_list", [9]),
        "goal": ("bytes_list", [b"g"]),
        "accessibility_trees": ("bytes_list", trees),
        "screenshots": ("bytes_list", [b"png"] * 3),
        "screenshot_widths": ("int64_list", [1080] * 3),
        "screenshot_heights": ("int64_list", [2400] * 3),
        "actions": ("bytes_list", [b'{"action_type":"wait"}'] * 2),
        "step_instructions": ("bytes_list", [b"a", b"b"]),
    }
    feats.update(overrides)
    path = tmp_path / "one.tfrecord"
    path.write_bytes(S.frame(S.example(feats)))
    return path


@pytest.mark.parametrize(
    ("overrides", "locator", "reason", "detail"),
    [
        ({}, None, None, None),
        (
            {"step_instructions": ("bytes_list", [b"a"])},
            "record:0/step:1",
            "count_mismatch",
            "step 1: 1 step instructions for 2 actions",
        ),
        (
            {"screenshots": ("bytes_list", [b"png"] * 2)},
            "record:0/step:1",
            "count_mismatch",
            "step 1: 2 screenshots for 2 actions",
        ),
        (
            {"screenshot_heights": ("int64_list", [2400] * 4)},
            "record:0/step:2",
            "count_mismatch",
            "step 2: 4 screenshot heights for 2 actions",
        ),
        (
            {"accessibility_trees": ("bytes_list", [S.forest()] * 2 + [b"\x0a\x05\x08"])},
            "record:0/step:1",
            "invalid_protobuf",
            "step 1: accessibility_trees[2] (the state after step 1) is not an AndroidAccessibilityForest",
        ),
        ({"goal": ("int64_list", [1])}, "record:0", "malformed_record", "feature 'goal' is a int64_list"),
        (
            {"actions": ("bytes_list", [b'{"action_type":"wait"}', b"\xff"])},
            "record:0/step:1",
            "invalid_utf8",
            "step 1: actions[1]: invalid UTF-8 at byte 0",
        ),
    ],
)
def test_inconsistent_episode(
    tmp_path: Path, overrides: dict, locator: str | None, reason: str | None, detail: str | None
) -> None:
    (rec,) = _read(_one_episode_file(tmp_path, **overrides))
    if reason is None:  # the unchanged episode is good: each case below breaks one thing
        assert isinstance(rec, Trajectory) and len(rec.turns) == 2
        return
    assert isinstance(rec, QuarantineRecord), rec
    assert (rec.locator, rec.reason) == (locator, reason)
    assert detail in rec.detail


def test_missing_goal(tmp_path: Path) -> None:
    path = tmp_path / "no_goal.tfrecord"
    path.write_bytes(
        S.frame(
            S.example({"accessibility_trees": ("bytes_list", [S.forest()]), "actions": ("bytes_list", [])})
        )
    )
    (rec,) = _read(path)
    assert (rec.locator, rec.reason, rec.detail) == (
        "record:0",
        "missing_field",
        f"{path} record:0: feature 'goal' is missing",
    )


def test_other_tfrecords_are_not_claimed(tmp_path: Path) -> None:
    """Android in the Wild also has `episode_id`, but one step per Example: not this format."""
    aitw = S.example(
        {
            "episode_id": ("bytes_list", [b"123"]),
            "image/encoded": ("bytes_list", [b"raw"]),
            "step_id": ("int64_list", [0]),
        }
    )
    path = tmp_path / "aitw.tfrecord"
    path.write_bytes(S.frame(aitw))
    (rec,) = _read(path)
    assert (rec.locator, rec.reason) == ("$", "unknown_format")


# ---------------------------------------------------------------------------------------------
# The wire decoder against the official encoder


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def test_node_packed_and_unpacked_child_ids_and_unknown_fields() -> None:
    n = S.node(
        5,
        "android.widget.Button",
        (-10, 2, 30, 40),
        (1, 300, -1),
        text="OK",
        is_checked=True,
        text_selection_end=-(1 << 40),
    )
    n.actions.add(id=16, label="click")  # field 24, not decoded
    n.clickable_spans.add(text="OK", url="https://example.com", source=1)  # field 26, not decoded
    packed = n.SerializeToString()
    node = pw.decode(pw.NODE, packed)
    assert node["child_ids"] == [1, 300, -1]
    assert node["bounds_in_screen"] == {"left": -10, "top": 2, "right": 30, "bottom": 40}
    assert (
        node["unique_id"],
        node["class_name"],
        node["text"],
        node["is_checked"],
        node["is_clickable"],
    ) == (5, "android.widget.Button", "OK", True, False)
    assert node["text_selection_end"] == -(1 << 40)
    n.ClearField("child_ids")
    unpacked = n.SerializeToString() + b"".join(_varint(25 << 3 | 0) + _varint(v) for v in (1, 300, -1))
    assert pw.decode(pw.NODE, unpacked) == node
    unknown = (
        _varint(99 << 3 | 0)
        + _varint(7)
        + _varint(99 << 3 | 1)
        + bytes(8)
        + _varint(99 << 3 | 2)
        + b"\x03abc"
        + _varint(99 << 3 | 5)
        + bytes(4)
        + _varint(99 << 3 | 3)
        + _varint(1 << 3 | 0)
        + b"\x01"
        + _varint(99 << 3 | 4)
    )
    assert pw.decode(pw.NODE, unknown + packed) == node


def test_example_lists_packed_and_unpacked() -> None:
    blob = S.example(
        {
            "f": ("float_list", [1.5, -2.25]),
            "i": ("int64_list", [-3, 1 << 40]),
            "b": ("bytes_list", [b"a", b""]),
        }
    )
    ex = pw.decode_example(blob)
    assert (ex["f"].kind, ex["f"].values) == ("float_list", [1.5, -2.25])
    assert (ex["i"].kind, ex["i"].values) == ("int64_list", [-3, 1 << 40])
    assert ex["b"].kind == "bytes_list" and [bytes(v) for v in ex["b"].values] == [b"a", b""]

    def entry(key: bytes, feature: bytes) -> bytes:
        body = b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(len(feature)) + feature
        return b"\x0a" + _varint(len(body)) + body

    ints = b"".join(b"\x08" + _varint(v) for v in (-3, 1 << 40))  # Int64List.value unpacked
    floats = b"".join(b"\x0d" + struct.pack("<f", v) for v in (1.5, -2.25))  # FloatList.value unpacked
    features = entry(b"i", b"\x1a" + _varint(len(ints)) + ints) + entry(
        b"f", b"\x12" + _varint(len(floats)) + floats
    )
    ex2 = pw.decode_example(b"\x0a" + _varint(len(features)) + features)
    assert ex2["i"].values == [-3, 1 << 40] and ex2["f"].values == [1.5, -2.25]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (S.forest(S.STATUS_BAR)[:-1], "runs past the end"),
        (b"\x0e", "invalid wire type 6"),
        (b"\x08" + b"\xff" * 11, "varint longer than 10 bytes"),
        (b"\x08\xff", "truncated varint"),
        (b"\x0c", "end-group tag without a start-group"),
        (b"\x0b\x08\x01", r"truncated \(no end-group tag\)"),
        (b"\x00\x01", "field number 0"),
    ],
)
def test_wire_errors(data: bytes, message: str) -> None:
    with pytest.raises(pw.WireError, match=message):
        pw.decode_forest(data)


def test_invalid_utf8_in_a_string_field_names_the_field() -> None:
    bad = b"\x1a\x02\xc3\x28"  # class_name = invalid UTF-8
    tree = b"\x0a" + _varint(len(bad)) + bad
    win = b"\x5a" + _varint(len(tree)) + tree
    with pytest.raises(
        pw.WireError, match=r"windows\[0\]\.tree\.nodes\[0\]\.class_name at byte 0: invalid UTF-8"
    ):
        pw.decode_forest(b"\x0a" + _varint(len(win)) + win)
