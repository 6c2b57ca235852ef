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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from collectors.android_views import View, describe, parse_bounds_pairs, render_tree, walk
from collectors.base import SNIFF_RECORDS, FolderRecord, ImportContext, Importer, load_json_file
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


_ENV_FILE = "droidbot_env.json"


@dataclass
class _Report(FolderRecord):
    """One session's readable files, read once by `split`."""

    events: list[tuple[str, str, str, dict]]  # (tag, file name, relative path, event), in tag order
    states: dict[str, tuple[str, dict]]  # state_str -> (relative path, state)
    env: Any
    unreadable: list[str]


def _json_files(directory: Path, sub: str) -> Iterator[tuple[str, Any]]:
    """(relative path, parsed JSON or the RecordError that names it) of each `sub/*.json`."""
    folder = directory / sub
    if not folder.is_dir():
        return
    for p in sorted(folder.glob("*.json")):
        rel = f"{sub}/{p.name}"
        try:
            yield rel, load_json_file(p, rel, _MAX_JSON_BYTES)
        except RecordError as e:
            yield rel, e


class DroidBotImporter(Importer):
    name = "droidbot"
    container = "dir"

    def sniff(self, directory: Path) -> bool:
        """The first readable `events/*.json` (of the first few) decides: an unreadable one (a killed run
        leaves a cut-off file) is skipped, so that it costs only itself (`split`), not the session."""
        events = directory / "events"
        if not events.is_dir():
            return False
        tried = 0
        for p in sorted(events.glob("*.json")):
            if not p.is_file():
                continue
            tried += 1
            if tried > SNIFF_RECORDS:
                return False
            with open(p, "rb") as f:
                head = f.read(_SNIFF_BYTES + 1)
            if len(head) > _SNIFF_BYTES:
                continue
            try:
                return _looks_like_event(parse_json(head))
            except orjson.JSONDecodeError:
                continue
        return False

    def consumes(self, directory: Path) -> list[Path]:
        files = [directory / n for n in _TOP_FILES if (directory / n).is_file()]
        files += [p for g in _TOP_GLOBS for p in directory.glob(g) if p.is_file()]
        for sub in _SUBDIRS:
            if (directory / sub).is_dir():
                files.extend(p for p in (directory / sub).rglob("*") if p.is_file())
        # `split` reads every `events/*.json` and `states/*.json`, a dangling link or a pipe too (each then
        # a row of its own): not offered again as an input
        files += [p for sub in ("events", "states") for p in (directory / sub).glob("*.json") if not p.is_file()]
        return sorted(set(files))

    def split(self, directory: Path, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        """The session, after a RecordError for each event, state or environment file that cannot be read
        (quarantined by name): the session keeps the other files' turns and lists the lost ones in
        `metadata.unreadable_files`; an event whose screen was in a lost state file has `missing_state`."""
        unreadable: list[str] = []
        states: dict[str, tuple[str, dict]] = {}
        for rel, st in _json_files(directory, "states"):
            if not isinstance(st, RecordError):
                key = st.get("state_str") if isinstance(st, dict) else None
                if isinstance(key, str):
                    states.setdefault(key, (rel, st))  # first (earliest) save wins
                    continue
                st = RecordError("malformed_record", f"{rel}: not a DroidBot state (needs a string state_str)", rel)
            unreadable.append(rel)
            yield rel, st
        events: list[tuple[str, str, str, dict]] = []
        for rel, rec in _json_files(directory, "events"):
            if not isinstance(rec, RecordError):
                if _looks_like_event(rec):
                    events.append((str(rec.get("tag") or Path(rel).stem), Path(rel).name, rel, rec))
                    continue
                rec = RecordError("malformed_record", f"{rel}: not a DroidBot event (needs event.event_type and "
                                  "start/stop_state)", rel)
            unreadable.append(rel)
            yield rel, rec
        env = None
        if (directory / _ENV_FILE).is_file():
            try:
                env = load_json_file(directory / _ENV_FILE, _ENV_FILE, _MAX_JSON_BYTES)
            except RecordError as e:
                unreadable.append(_ENV_FILE)
                yield _ENV_FILE, e
        if not events:
            yield "$", RecordError("no_turns", "events/: no readable event files" if unreadable else "events/: no event files")
            return
        events.sort(key=lambda e: (e[0], e[1]))
        yield "$", _Report(directory, events, states, env, unreadable)

    def convert(self, report: _Report, locator: str, ctx: ImportContext) -> Trajectory:
        directory, events, states, env = report.folder, report.events, report.states, report.env
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
        meta: dict[str, Any] = {
            "app_package": package,
            "num_states_saved": len(states),
            "utg": {k: v for k, v in utg.items() if k not in ("nodes", "edges")} or None,
            "initial_state_str": first_start,
        }
        if report.unreadable:
            meta["unreadable_files"] = report.unreadable
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
