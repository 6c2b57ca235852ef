"""AndroidControl (Google Research): human demonstrations of Android tasks, as TFRecord shards.

Sources read (google-research/google-research `android_control/README.md`): each episode is one
`tf.train.Example` in TFRecord files written with compression `GZIP` (published as
`android_control-000NN-of-00020`, no extension), with features
  `episode_id`          int64_list, one value
  `goal`                bytes_list, one UTF-8 instruction for the whole episode
  `screenshots`         bytes_list, one PNG per observation
  `screenshot_widths`, `screenshot_heights`   int64_list, one per screenshot
  `accessibility_trees` bytes_list, one serialized android_env `AndroidAccessibilityForest` per observation
  `actions`             bytes_list, JSON objects with `action_type` (click, long_press, scroll,
                        open_app, input_text, navigate_home, navigate_back, wait; older README: type)
  `step_instructions`   bytes_list, one per action (repeated when one instruction takes several actions)
"The actions are performed between consecutive screenshots, so there are len(screenshots) - 1 of
them"; public loaders of the data read `accessibility_trees` in step with `screenshots` (N) and
`actions`/`step_instructions` as N - 1 (one appends a final "status" action to pair the last
screen), so that is what is checked here: no published deviation from the README was found. The
wire formats and field numbers are in `collectors.protowire` (tensorflow/tensorflow
`tensorflow/core/example/{example,feature}.proto`, google-deepmind/android_env
`android_env/proto/a11y/*.proto`).

One trajectory per Example: native id = `episode_id`, task = `goal`, initial state = the first
forest rendered. One turn per action: `action` is the action's JSON text as given, `tool_name` its
`action_type`, `tool_args` the other fields; the observation is the forest *after* the action (tree
i + 1), rendered by `collectors.android_views.render_tree` as DroidBot and uiautomator screens are,
under one `window <i> "<title>" <TYPE> [active] [focused]` line per window, as uiautomator's
`--windows` dumps are. Turn `state` holds the after-state's packages, screenshot size and window
attributes. The step instruction is kept in turn metadata (`step_instruction`): it is the rater's
low-level instruction, not the agent's reasoning (`thought`) nor environment output, and it repeats
across the actions it covers. Screenshots are not stored; their count, sizes and bytes are metadata.

Required features: `goal`, `accessibility_trees`, `actions` (a trees-only copy of the data, with
screenshots stripped to save space, is read too); the others are checked when present. Counts that
disagree, an action that is not a JSON object with an `action_type`, a tree that does not decode:
the episode is quarantined with a message naming the step (locator `record:N/step:K`, N and K from
0 as `tf.data` and `actions` count them). Corrupt framing: see `collectors.protowire.read_tfrecords`;
a record is never larger than the run's record limit (`ctx.limits.max_record_bytes`).
"""

from __future__ import annotations

import json
from typing import IO, Any

from collectors.android_views import View, render_tree, walk
from collectors.base import ImportContext, Importer, loose_json
from collectors.protowire import (
    HEADER_BYTES,
    WINDOW_TYPES,
    Feature,
    FramingError,
    FramingProblem,
    TFRecord,
    WireError,
    decode_example,
    decode_forest,
    peek_feature_keys,
    read_tfrecords,
    tfrecord_length,
)
from schemas.records import RecordError, Trajectory, Turn, dumps

# Feature names only AndroidControl uses (`episode_id` is shared with Android in the Wild's shards,
# which hold one step per Example and are not this format).
_DISTINCT = frozenset(
    {
        "goal",
        "screenshots",
        "screenshot_widths",
        "screenshot_heights",
        "accessibility_trees",
        "actions",
        "step_instructions",
    }
)
_KNOWN = _DISTINCT | {"episode_id"}

_FLAGS = {
    "is_clickable": "clickable",
    "is_long_clickable": "long-clickable",
    "is_checkable": "checkable",
    "is_checked": "checked",
    "is_scrollable": "scrollable",
    "is_editable": "editable",
    "is_focusable": "focusable",
    "is_focused": "focused",
    "is_selected": "selected",
    "is_password": "password",
}


class AndroidControlImporter(Importer):
    name = "android-control"
    container = "text"

    def sniff(self, head: bytes) -> bool:
        length = tfrecord_length(head)
        if length is None:
            return False
        keys = peek_feature_keys(head[HEADER_BYTES : HEADER_BYTES + length])
        return any(k in _DISTINCT for k in keys)

    def split(self, stream: IO[bytes], ctx: ImportContext):
        try:
            for item in read_tfrecords(stream, ctx.limits.max_record_bytes):
                loc = f"record:{item.index}"
                if isinstance(item, FramingProblem):
                    yield loc, RecordError(item.reason, item.detail, loc)
                else:
                    yield loc, item
        except FramingError as e:
            raise RecordError(e.reason, e.detail, f"record:{e.index}") from None

    def convert(self, record: TFRecord, locator: str, ctx: ImportContext) -> Trajectory:
        try:
            features = decode_example(record.data)
        except WireError as e:
            raise RecordError("invalid_protobuf", f"not a tf.train.Example: {e}") from None
        ep = _Episode(features, locator)
        forests = [ep.forest(j) for j in range(len(ep.trees))]
        turns = [self._turn(ep, i, forests[i + 1]) for i in range(len(ep.actions))]
        packages = sorted({p for f in forests for p in f.packages})
        meta = {
            "episode_id": ep.episode_id,
            "screenshots": ep.screenshot_meta(),
            "packages": packages or None,
            "other_features": {
                k: {"kind": f.kind, "count": len(f.values)}
                for k, f in sorted(features.items())
                if k not in _KNOWN
            }
            or None,
        }
        return Trajectory(
            domain="android",  # the environment the format records: `--domain` does not change it
            source_format=self.name,
            native_id=None if ep.episode_id is None else str(ep.episode_id),
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=ep.goal,
            initial_state=forests[0].text,
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
            locator=locator,
        )

    @staticmethod
    def _turn(ep: _Episode, i: int, after: _Forest) -> Turn:
        text, action = ep.action(i)
        state = {
            "packages": after.packages or None,
            "screenshot_size": ep.screenshot_size(i + 1),
            "windows": after.windows or None,
        }
        return Turn(
            kind="env",
            action=text,
            tool_name=action["action_type"],
            tool_args=dumps({k: v for k, v in action.items() if k != "action_type"}),
            observation=after.text,
            observation_kind="view_hierarchy",
            state=dumps({k: v for k, v in state.items() if v is not None}),
            locator=f"{ep.locator}/step:{i}",
            metadata=dumps({"step_instruction": ep.step_instructions[i]})
            if ep.step_instructions is not None
            else None,
        )


class _Forest:
    """One rendered observation and the facts about it that go to `state`."""

    def __init__(self, text: str, packages: list[str], windows: list[dict]):
        self.text, self.packages, self.windows = text, packages, windows


class _Episode:
    """The features of one Example, type- and count-checked (RecordError otherwise)."""

    def __init__(self, features: dict[str, Feature], locator: str):
        self.features, self.locator = features, locator
        self.goal = self._text(self._one("goal", "bytes_list", required=True), "goal")
        eid = features.get("episode_id")
        self.episode_id: int | str | None = None
        if eid is not None and eid.kind == "bytes_list" and len(eid.values) == 1:
            self.episode_id = self._text(eid.values[0], "episode_id")  # lenient: the README says integer
        elif eid is not None:
            self.episode_id = self._one("episode_id", "int64_list")
        self.trees: list = self._list("accessibility_trees", "bytes_list", required=True) or []
        self.actions = [
            self._text(v, f"actions[{i}]", step=i)
            for i, v in enumerate(self._list("actions", "bytes_list", required=True) or [])
        ]
        instructions = self._list("step_instructions", "bytes_list")
        self.step_instructions = (
            None
            if instructions is None
            else [self._text(v, f"step_instructions[{i}]", step=i) for i, v in enumerate(instructions)]
        )
        self.screenshots = self._list("screenshots", "bytes_list")
        self.widths = self._list("screenshot_widths", "int64_list")
        self.heights = self._list("screenshot_heights", "int64_list")
        self._check_counts()

    def _err(self, reason: str, detail: str, step: int | None = None) -> RecordError:
        return RecordError(reason, detail, self.locator if step is None else f"{self.locator}/step:{step}")

    def _list(self, name: str, kind: str, required: bool = False) -> list | None:
        f = self.features.get(name)
        if f is None:
            if required:
                raise self._err("missing_field", f"feature {name!r} is missing")
            return None
        if f.kind != kind and f.values:
            raise self._err("malformed_record", f"feature {name!r} is a {f.kind}, expected a {kind}")
        return f.values

    def _one(self, name: str, kind: str, required: bool = False) -> Any:
        values = self._list(name, kind, required)
        if values is None:
            return None
        if len(values) != 1:
            raise self._err("malformed_record", f"feature {name!r} has {len(values)} values, expected 1")
        return values[0]

    def _text(self, value: Any, what: str, step: int | None = None) -> str:
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError as e:
            where = f"step {step}: " if step is not None else ""
            raise self._err("invalid_utf8", f"{where}{what}: invalid UTF-8 at byte {e.start}", step) from None

    def _check_counts(self) -> None:
        n_actions = len(self.actions)
        expected = n_actions + 1
        per_observation = [
            ("accessibility trees", self.trees),
            ("screenshots", self.screenshots),
            ("screenshot widths", self.widths),
            ("screenshot heights", self.heights),
        ]
        for what, values in per_observation:
            if values is not None and len(values) != expected:
                step = min(len(values) - 1, n_actions) if values else 0
                raise self._err(
                    "count_mismatch",
                    f"step {step}: {len(values)} {what} for {n_actions} actions "
                    f"(AndroidControl has one per observation: len(actions) + 1 = {expected})",
                    step,
                )
        if self.step_instructions is not None and len(self.step_instructions) != n_actions:
            step = min(len(self.step_instructions), n_actions)
            raise self._err(
                "count_mismatch",
                f"step {step}: {len(self.step_instructions)} step instructions for "
                f"{n_actions} actions (AndroidControl has one per action)",
                step,
            )

    def action(self, i: int) -> tuple[str, dict]:
        """Step i's action text and its parsed object (JSON; a Python dict literal is read too)."""
        text = self.actions[i]
        obj = loose_json(text)
        if not isinstance(obj, dict) or not isinstance(obj.get("action_type"), str):
            raise self._err(
                "malformed_record",
                f"step {i}: action is not a JSON object with an 'action_type': {text[:200]!r}",
                i,
            )
        return text, obj

    def forest(self, j: int) -> _Forest:
        """Tree j rendered (tree 0 is the initial state, tree j > 0 the state after step j - 1)."""
        step = max(j - 1, 0)
        state = "the initial state" if j == 0 else f"the state after step {j - 1}"
        try:
            windows = decode_forest(self.trees[j])
        except WireError as e:
            raise self._err(
                "invalid_protobuf",
                f"step {step}: accessibility_trees[{j}] ({state}) is not an AndroidAccessibilityForest: {e}",
                step,
            ) from None
        return render_forest(windows)

    def screenshot_size(self, j: int) -> list[int] | None:
        if self.widths is None or self.heights is None:
            return None
        return [self.widths[j], self.heights[j]]

    def screenshot_meta(self) -> dict | None:
        if self.screenshots is None:
            return None
        sizes = None
        if self.widths is not None and self.heights is not None:
            sizes = [list(p) for p in zip(self.widths, self.heights, strict=True)]
        return {
            "count": len(self.screenshots),
            "sizes": sizes,
            "bytes": sum(len(s) for s in self.screenshots),
        }


def render_forest(windows: list[dict]) -> _Forest:
    """The forest as text: each window's line, then its tree (view indices restart per window)."""
    parts, packages, attrs = [], set(), []
    for i, w in enumerate(windows):
        nodes = (w["tree"] or {}).get("nodes") or []
        roots = _roots(nodes)
        packages.update(n["package_name"] for n in nodes if n["package_name"])
        kind = WINDOW_TYPES.get(w["window_type"], f"WINDOW_TYPE_{w['window_type']}")
        flags = "".join(
            f" {name}" for key, name in (("is_active", "active"), ("is_focused", "focused")) if w[key]
        )
        line = f"window {i} {json.dumps(w['title'], ensure_ascii=False)} {kind}{flags}"
        parts.append(line + ("\n" + render_tree(roots) if roots else ""))
        attrs.append(_window_attrs(w, kind))
    return _Forest("\n".join(parts), sorted(packages), attrs)


def _window_attrs(w: dict, kind: str) -> dict:
    b = w["bounds_in_screen"]
    out: dict[str, Any] = {
        "id": w["id"],
        "type": kind,
        "layer": w["layer"],
        "display_id": w["display_id"],
        "title": w["title"] or None,
        "bounds": [b["left"], b["top"], b["right"], b["bottom"]] if b is not None else None,
    }
    for key in ("is_active", "is_focused", "is_accessibility_focused", "is_in_picture_in_picture_mode"):
        if w[key]:
            out[key.removeprefix("is_")] = True
    return {k: v for k, v in out.items() if v is not None}


def _view(n: dict) -> View:
    flags = {name for key, name in _FLAGS.items() if n[key]}
    if not n["is_enabled"]:
        flags.add("disabled")
    if not n["is_visible_to_user"]:
        flags.add("invisible")
    b = n["bounds_in_screen"]
    return View(
        cls=n["class_name"] or None,
        resource_id=n["view_id_resource_name"] or None,
        text=n["text"] or None,
        content_desc=n["content_description"] or None,
        hint=n["hint_text"] or None,
        bounds=((b["left"], b["top"]), (b["right"], b["bottom"])) if b is not None else None,
        flags=frozenset(flags),
    )


def _roots(nodes: list[dict]) -> list[View]:
    """The window's nodes linked by `child_ids` (which name `unique_id`s) into a forest: the nodes no
    one lists as a child are roots, in list order (the proto's root is id 0); a node listed by two
    parents stays with the first; nodes caught in a cycle become roots too, so none is lost."""
    views = [_view(n) for n in nodes]
    by_id: dict[int, int] = {}
    for pos, n in enumerate(nodes):
        by_id.setdefault(n["unique_id"], pos)  # a repeated id: the later node stays unlinked
    attached: set[int] = set()
    for pos, n in enumerate(nodes):
        for cid in n["child_ids"]:
            k = by_id.get(cid)
            if k is not None and k != pos and k not in attached:
                views[pos].children.append(views[k])
                attached.add(k)
    roots = [v for pos, v in enumerate(views) if pos not in attached]
    reached = {id(x) for r in roots for _, x in walk(r)}
    for v in views:
        if id(v) not in reached:
            roots.append(v)
            reached.update(id(x) for _, x in walk(v))
    return roots
