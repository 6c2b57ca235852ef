"""What the live collectors' YAML specs share (MCP servers, browser sites, Android apps): checking a
mapping's keys and a step's, the spec files a folder stands for, the `--session` names a run selects,
unique session names, `--faults`, and the progress echo.

Each collector keeps its own `SpecError` (a ValueError) and passes it in, so its messages keep saying
whose spec is wrong."""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol


class _Spec(Protocol):
    name: str
    path: Path
    sessions: Sequence[Any]  # each with a `name`


def check_keys(where: str, obj: Any, allowed: set[str], error: type[ValueError], required: set[str] = frozenset()) -> dict:
    """`obj` as a mapping with only `allowed` keys and every `required` one; `error(...)` naming `where` otherwise."""
    if not isinstance(obj, dict):
        raise error(f"{where}: expected a mapping, got {type(obj).__name__}")
    unknown = set(obj) - allowed
    if unknown:
        raise error(f"{where}: unknown keys {sorted(unknown)}; known: {sorted(allowed)}")
    missing = required - set(obj)
    if missing:
        raise error(f"{where}: missing keys {sorted(missing)}")
    return obj


def spec_files(paths: list[Path | str], what: str, error: type[ValueError]) -> list[Path]:
    """The spec files named: a directory stands for its `*.yaml` / `*.yml` files; one without any is an
    error (`... a directory without {what} (*.yaml) in it`), not a run of no sessions. A path that is
    not there is left to the spec loader, which says it cannot read it."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
            if not found:
                raise error(f"{p}: a directory without {what} (*.yaml) in it")
            out += found
        else:
            out.append(p)
    # a spec named twice (itself and its folder) runs once: twice gave two trajectories of one id
    seen: set[Path] = set()
    return [p for p in out if not (p.resolve() in seen or seen.add(p.resolve()))]


def integer(where: str, v: Any, error: type[ValueError], least: int) -> int:
    """A YAML integer of at least `least`."""
    if isinstance(v, bool) or not isinstance(v, int):
        raise error(f"{where}: expected an integer, got {v!r}")
    if v < least:
        raise error(f"{where}: must be at least {least}, got {v}")
    return v


def number(where: str, v: Any, error: type[ValueError], positive: bool = True) -> float:
    """A finite YAML number, above 0 (`positive`) or at least 0."""
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise error(f"{where}: expected a finite number, got {v!r}")
    if v < 0 or (positive and v == 0):
        raise error(f"{where}: must be {'above' if positive else 'at least'} 0, got {v}")
    return float(v)


def text(where: str, v: Any, error: type[ValueError], default: str = "") -> str:
    """A YAML scalar as text; left blank (null), `default`."""
    if v is None:
        return default
    if isinstance(v, dict | list):
        raise error(f"{where}: expected text, got {type(v).__name__}")
    return str(v)


def text_list(where: str, v: Any, error: type[ValueError]) -> list[str]:
    """A YAML list of scalars (one argument per item) as text."""
    if v is None:
        return []
    if not isinstance(v, list) or any(isinstance(x, dict | list) or x is None for x in v):
        raise error(f"{where}: expected a list of arguments (one per item), got {v!r:.80}")
    return [str(x) for x in v]


def text_map(where: str, v: Any, error: type[ValueError]) -> dict[str, str]:
    """A YAML mapping of names to scalars, as text."""
    if v is None:
        return {}
    if not isinstance(v, dict) or any(isinstance(x, dict | list) for x in v.values()):
        raise error(f"{where}: expected a mapping of names to values, got {v!r:.80}")
    return {str(k): "" if x is None else str(x) for k, x in v.items()}


def check_sessions(specs: Sequence[_Spec], only: list[str] | None) -> None:
    """No two specs share a name (the trajectories' ids and `spec/session` go by it: two copies of a
    spec gave duplicate ids), and every `--session` names a session of the specs (`name` or `spec/name`)."""
    first: dict[str, Path] = {}
    for spec in specs:
        if spec.name in first and first[spec.name] != spec.path:
            raise ValueError(f"{first[spec.name]} and {spec.path} are both named {spec.name!r}: give each spec its own name")
        first.setdefault(spec.name, spec.path)
    known = [f"{spec.name}/{s.name}" for spec in specs for s in spec.sessions]
    names = set(known) | {k.split("/", 1)[1] for k in known}
    unknown = [o for o in only or [] if o not in names]
    if unknown:
        raise ValueError(f"--session {', '.join(unknown)}: no such session in {', '.join(str(s.path) for s in specs)}; "
                         f"the sessions are {', '.join(known) or 'none'}")


def selected(spec_name: str, session_name: str, only: list[str] | None) -> bool:
    """Whether a run with `--session` names `only` (none: every session) runs this session."""
    return not only or session_name in only or f"{spec_name}/{session_name}" in only


def step_mapping(where: str, raw: Any, step_keys: dict[str, set[str]], error: type[ValueError]) -> tuple[str, dict]:
    """A scripted step `{do: KIND, ...}`: its kind (a key of `step_keys`) and the mapping, holding only
    the keys that kind takes."""
    if not isinstance(raw, dict) or raw.get("do") not in step_keys:
        raise error(f"{where}: `do` must be one of {list(step_keys)}, got {raw!r:.80}")
    return raw["do"], check_keys(where, raw, step_keys[raw["do"]] | {"do"}, error)


def check_unique_sessions(path: Path, sessions: Sequence[Any], error: type[ValueError]) -> None:
    """No two sessions of one spec share a name (`--session` and the trajectories' ids go by it)."""
    names = [s.name for s in sessions]
    if len(set(names)) != len(names):
        raise error(f"{path}: session names repeat: {sorted({n for n in names if names.count(n) > 1})}")


def fault_kinds(text: str | None, known: Sequence[str]) -> tuple[str, ...]:
    """`--faults` as names: comma-separated, `all` (every known kind), or empty / `none` (no faults).
    Unknown names are the caller's to refuse (it says which kinds it has)."""
    if not text or text.strip().lower() in ("none", ""):
        return ()
    if text.strip().lower() == "all":
        return tuple(sorted(known))
    return tuple(k.strip() for k in text.split(",") if k.strip())


def stderr_echo(msg: str) -> None:
    """A collector's per-session progress line."""
    print(msg, file=sys.stderr, flush=True)
