"""DroidBot output directories (`events/event_<tag>.json` + `states/state_<tag>.json`).

A DroidBot report is one exploration session of one app, so a directory is one trajectory. A turn
is one input event (ordered by its `tag`, the time it was sent) and the screen it led to: the
event's `stop_state` hash looked up among the saved states by `state_str`.

DroidBot saves a state only the first time it sees it, so the state an event leads to is usually
saved under an earlier or later tag, and sometimes not at all (the hash was computed but the
screen was never dumped, e.g. the launcher before the app starts). Decision: look the hash up
across all saved states, wherever they sit in time; when it is not there, the turn keeps the
action with `observation=None`, `observation_kind="none"` and `metadata.missing_state=true`
(the turn still says which state it reached in `state.state_str`). `metadata.unchanged=true`
marks events whose stop state equals their start state (the "GUI turn with no change" that the
clean stage filters).

Timestamps: DroidBot tags are the device host's naive local time (`%Y-%m-%d_%H%M%S`), so they
are kept verbatim in `metadata.tag` and not converted to `started_at` (the zone is unknown).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from collectors.android_views import View, describe, parse_bounds_pairs, render_tree, walk
from collectors.base import ImportContext, Importer, load_json_file, require
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps

_MAX_JSON_BYTES = 64 << 20  # one event or state file; larger ones are not DroidBot's
_SNIFF_BYTES = 1 << 20
# Files DroidBot writes next to events/ and states/ (report page, UTG, environment, logs).
_TOP_FILES = ("utg.js", "index.html", "droidbot_env.json", "logcat.txt", "droidbot.log", "user_input.txt")
_TOP_GLOBS = ("dumpsys_package_*.txt",)  # DroidBot's dump of the app under test, one per report
_SUBDIRS = ("events", "states", "views", "stylesheets", "temp")

_FLAGS = {
    "clickable": "clickable",
    "long_clickable": "long-clickable",
    "checkable": "checkable",
    "checked": "checked",
    "scrollable": "scrollable",
    "editable": "editable",
    "focusable": "focusable",
    "focused": "focused",
    "selected": "selected",
    "is_password": "password",
}


def _str(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s if s else None


def view_from_dict(d: dict) -> View:
    """One DroidBot view dict as a childless `View` (children are linked by the caller)."""
    flags = {name for key, name in _FLAGS.items() if d.get(key) is True}
    if d.get("enabled") is False:
        flags.add("disabled")
    if d.get("visible") is False:
        flags.add("invisible")
    return View(
        cls=_str(d.get("class")),
        resource_id=_str(d.get("resource_id")),
        text=_str(d.get("text")),
        content_desc=_str(d.get("content_description")),
        bounds=parse_bounds_pairs(d.get("bounds")),
        flags=frozenset(flags),
    )


def views_to_tree(views: list, where: str) -> list[View]:
    """DroidBot's flat view list (children/parent given as `temp_id`s) as a forest of roots."""
    if not isinstance(views, list):
        raise RecordError("malformed_record", f"{where}: 'views' is not a list")
    by_id: dict[int, tuple[dict, View]] = {}
    order: list[int] = []
    for pos, d in enumerate(views):
        if not isinstance(d, dict):
            raise RecordError("malformed_record", f"{where}: views[{pos}] is not an object")
        tid = d.get("temp_id")
        tid = tid if isinstance(tid, int) else pos  # the list position is the id when none is given
        tid = tid if tid not in by_id else -(pos + 1)  # a duplicate id: keep the view, unlinked
        by_id[tid] = (d, view_from_dict(d))
        order.append(tid)
    attached: set[int] = set()
    if any(isinstance(d.get("children"), list) for d, _ in by_id.values()):
        for tid in order:
            d, v = by_id[tid]
            for k in d.get("children") or []:
                if isinstance(k, int) and k in by_id and k != tid and k not in attached:
                    v.children.append(by_id[k][1])
                    attached.add(k)
    else:  # older dumps: parent pointers only
        for tid in order:
            d, v = by_id[tid]
            p = d.get("parent")
            if isinstance(p, int) and p in by_id and p != tid:
                by_id[p][1].children.append(v)
                attached.add(tid)
    roots = [by_id[t][1] for t in order if t not in attached]
    # Views caught in a parent/child cycle are reachable from no root: keep them as roots too.
    reached = {id(v) for r in roots for _, v in walk(r)}
    for t in order:
        v = by_id[t][1]
        if id(v) not in reached:
            roots.append(v)
            reached.update(id(x) for _, x in walk(v))
    return roots


def _utg(path: Path) -> dict | None:
    """`utg.js` is `var utg = {...}`: the JSON after the first brace, if it parses."""
    if not path.is_file() or path.stat().st_size > _MAX_JSON_BYTES:
        return None
    text = path.read_text("utf-8", errors="replace")
    start = text.find("{")
    if start < 0:
        return None
    body = text[start:].rstrip().rstrip(";")
    try:
        obj = parse_json(body)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def _looks_like_event(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("event"), dict)
        and isinstance(obj["event"].get("event_type"), str)
        and ("stop_state" in obj or "start_state" in obj)
    )


class DroidBotImporter(Importer):
    name = "droidbot"
    container = "dir"

    def sniff(self, directory: Path) -> bool:
        events = directory / "events"
        if not events.is_dir():
            return False
        for p in sorted(events.glob("*.json")):
            if not p.is_file():
                continue
            with open(p, "rb") as f:
                head = f.read(_SNIFF_BYTES + 1)
            if len(head) > _SNIFF_BYTES:
                return False
            try:
                return _looks_like_event(parse_json(head))
            except orjson.JSONDecodeError:
                return False
        return False

    def consumes(self, directory: Path) -> list[Path]:
        files = [directory / n for n in _TOP_FILES if (directory / n).is_file()]
        files += [p for g in _TOP_GLOBS for p in directory.glob(g) if p.is_file()]
        for sub in _SUBDIRS:
            if (directory / sub).is_dir():
                files.extend(p for p in (directory / sub).rglob("*") if p.is_file())
        return sorted(files)

    def split(self, directory: Path, ctx: ImportContext):
        yield "$", directory

    def convert(self, directory: Path, locator: str, ctx: ImportContext) -> Trajectory:
        states = self._states(directory)
        events = []
        for p in sorted((directory / "events").glob("*.json")):
            rel = f"events/{p.name}"
            rec = load_json_file(p, rel, _MAX_JSON_BYTES)
            if not _looks_like_event(rec):
                raise RecordError(
                    "malformed_record",
                    f"{rel}: not a DroidBot event (needs event.event_type and start/stop_state)",
                )
            events.append((str(rec.get("tag") or p.stem), p.name, rel, rec))
        if not events:
            raise RecordError("no_turns", "events/: no event files")
        events.sort(key=lambda e: (e[0], e[1]))

        rendered: dict[str, str] = {}

        def render(state_str: str) -> str:
            if state_str not in rendered:
                rel, st = states[state_str]
                rendered[state_str] = render_tree(views_to_tree(st.get("views") or [], rel))
            return rendered[state_str]

        turns = []
        for i, (tag, _, rel, rec) in enumerate(events):
            turns.append(self._turn(rec, tag, rel, i, states, render))

        first_start = events[0][3].get("start_state")
        initial = render(first_start) if first_start in states else None
        utg = _utg(directory / "utg.js") or {}
        env = None
        if (directory / "droidbot_env.json").is_file():
            env = load_json_file(directory / "droidbot_env.json", "droidbot_env.json", _MAX_JSON_BYTES)
        package = utg.get("app_package") or self._package_from_intents(events)
        fingerprint = {
            k: utg[k]
            for k in (
                "device_serial",
                "device_model_number",
                "device_sdk_version",
                "app_sha256",
                "app_main_activity",
            )
            if k in utg
        }
        if env is not None:
            fingerprint["droidbot_env"] = env
        meta = {
            "app_package": package,
            "num_states_saved": len(states),
            "utg": {k: v for k, v in utg.items() if k not in ("nodes", "edges")} or None,
            "initial_state_str": first_start,
        }
        return Trajectory(
            domain="android",  # the environment the format records: `--domain` does not change it
            source_format=self.name,
            native_id=directory.name,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=None,
            initial_state=initial,
            agent="droidbot",
            env_fingerprint=dumps(fingerprint) if fingerprint else None,
            metadata=dumps(meta),
            locator=locator,
        )

    def _states(self, directory: Path) -> dict[str, tuple[str, dict]]:
        states: dict[str, tuple[str, dict]] = {}
        sdir = directory / "states"
        if not sdir.is_dir():
            return states
        for p in sorted(sdir.glob("*.json")):
            rel = f"states/{p.name}"
            st = load_json_file(p, rel, _MAX_JSON_BYTES)
            key = require(st, "state_str", rel)
            if not isinstance(key, str):
                raise RecordError("malformed_record", f"{rel}: state_str is not a string")
            states.setdefault(key, (rel, st))  # first (earliest) save wins
        return states

    def _turn(self, rec: dict, tag: str, rel: str, i: int, states: dict, render) -> Turn:
        where = f"{rel} turn {i}"
        ev = rec["event"]
        etype = ev["event_type"]
        stop = rec.get("stop_state")
        start = rec.get("start_state")
        found = isinstance(stop, str) and stop in states
        state: dict[str, Any] = {"state_str": stop}
        if found:
            st = states[stop][1]
            state["foreground_activity"] = st.get("foreground_activity")
            state["activity_stack"] = st.get("activity_stack")
        meta = {
            "tag": tag,
            "event_str": rec.get("event_str"),
            "start_state": start,
            "stop_state": stop,
            "unchanged": stop is not None and stop == start,
            "missing_state": not found,
            "state_file": states[stop][0] if found else None,
        }
        try:
            observation = render(stop) if found else None
        except RecordError as e:
            raise RecordError(e.reason, f"{where}: {e.detail}") from None
        return Turn(
            kind="env",
            action=self._action(ev),
            tool_name=etype,
            tool_args=dumps({k: v for k, v in ev.items() if k != "event_type"}),
            observation=observation,
            observation_kind="view_hierarchy" if found else "none",
            state=dumps(state),
            locator=rel + (f"+{states[stop][0]}" if found else ""),
            metadata=dumps(meta),
        )

    @staticmethod
    def _action(ev: dict) -> str:
        """Readable, deterministic action text: `key(BACK)`, `touch(view=..., x=.., y=..)`."""
        etype = ev["event_type"]
        if etype == "key" and ev.get("name") is not None:
            return f"key({ev['name']})"
        if etype == "intent" and ev.get("intent") is not None:
            return f"intent({ev['intent']})"
        args = []
        for k in sorted(ev, key=lambda k: (k not in ("view", "start_view", "end_view"), k)):
            v = ev[k]
            if k == "event_type" or v is None:
                continue
            if isinstance(v, dict) and k.endswith("view"):
                args.append(f"{k}=<{describe(view_from_dict(v))}>")
            elif isinstance(v, str):
                args.append(f"{k}={json.dumps(v, ensure_ascii=False)}")
            elif isinstance(v, int | float | bool):
                args.append(f"{k}={v}")
            else:
                args.append(f"{k}={dumps(v)}")
        return f"{etype}({', '.join(args)})"

    @staticmethod
    def _package_from_intents(events: list) -> str | None:
        for *_, rec in events:
            intent = rec["event"].get("intent")
            if isinstance(intent, str) and " start " in f" {intent} ":
                comp = intent.split()[-1]
                if "/" in comp:
                    return comp.split("/", 1)[0]
        return None
