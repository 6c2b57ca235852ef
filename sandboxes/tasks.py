"""Task specs (YAML): what a sandbox starts with, what the agent does, how success is judged.

    id: count-errors                 # [a-z0-9][a-z0-9-]*, unique in a suite
    domain: terminal                 # terminal | os | swe
    image: terminal                  # an image recipe in sandboxes/images/
    task: Count the ERROR lines in app.log and write the number to count.txt.
    timeout_s: 20                    # per-action timeout (default 20)
    workdir: /work                   # the writable working directory (default /work)
    limits: {memory_mb: 512, cpus: 1.0, pids: 256, work_kb: 65536, tmp_kb: 65536}
    setup:
      files: {app.log: "...", "src/x.py": "..."}    # relative to the work dir
      commands: [git init -q, git add -A]          # run in order, must succeed
    service:                         # optional: an HTTP mirror at http://mirror:8080/ on a
      files: {data.csv: "..."}       # private network (tasks that fetch things)
    actions:                         # what a scripted run does; a string or {command, timeout_s}
      - grep -c ERROR app.log > count.txt
    checks:                          # after the actions; a string or a mapping
      - {command: cat count.txt, stdout: "3\\n"}    # exit (default 0), stdout, stdout_contains
    perturbations:                   # optional per-task parameters for perturbations
      oom_kill: {memory_mb: 32}

Every error names the file and the field (`tasks/x.yaml: actions[2].timeout_s: ...`).
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sandboxes.perturb import PARAM_KINDS, PERTURBATIONS, canonical

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
SANDBOX_DOMAINS = ("terminal", "os", "swe")
LIMIT_KEYS = ("memory_mb", "cpus", "pids", "work_kb", "tmp_kb")
_ID = re.compile(r"[a-z0-9][a-z0-9-]*")


class SpecError(ValueError):
    """An invalid task spec; the message is `FILE: FIELD: what is wrong`."""


@dataclass(frozen=True)
class ActionSpec:
    command: str
    timeout_s: float | None = None


@dataclass(frozen=True)
class CheckSpec:
    command: str
    exit: int = 0
    stdout: str | None = None
    stdout_contains: str | None = None


@dataclass
class TaskSpec:
    id: str
    task: str
    path: Path
    domain: str = "terminal"
    image: str = "terminal"
    timeout_s: float = 20.0
    workdir: str = "/work"
    limits: dict[str, float] = field(default_factory=dict)
    setup_files: dict[str, str] = field(default_factory=dict)
    setup_commands: list[str] = field(default_factory=list)
    service_files: dict[str, str] | None = None
    actions: list[ActionSpec] = field(default_factory=list)
    checks: list[CheckSpec] = field(default_factory=list)
    perturbations: dict[str, dict[str, Any]] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)
    digest: str = ""

    @property
    def commands(self) -> list[str]:
        return [a.command for a in self.actions]


def _err(path: Path, where: str, msg: str) -> SpecError:
    return SpecError(f"{path}: {where}: {msg}")


def _type(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _str(path: Path, where: str, v: Any, allow_empty: bool = False) -> str:
    if not isinstance(v, str) or (not allow_empty and not v.strip()):
        raise _err(path, where, f"expected a non-empty string, got {_type(v)}" + (f" {v!r}" if isinstance(v, str | int | float) else ""))
    return v


def _num(path: Path, where: str, v: Any, positive: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or (positive and v <= 0):
        raise _err(path, where, f"expected a {'positive ' if positive else ''}number, got {_type(v)} {v!r}")
    if not math.isfinite(v):  # YAML's .nan, .inf: a NaN timeout failed in the engine, an infinite memory limit crashed
        raise _err(path, where, f"expected a finite number, got {v!r}")
    return float(v)


def _param(path: Path, where: str, key: str, v: Any) -> Any:
    """A perturbation parameter of the kind it is applied as: `bytes: 5.9` was recorded as 5.9 and cut
    at 5, `size_kb: abc` failed at collection naming no file."""
    kind = PARAM_KINDS.get(key, str)
    if kind is str:
        return _str(path, where, v)
    if kind is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _err(path, where, f"expected an integer, got {_type(v)} {v!r}")
        return v
    return canonical(key, _num(path, where, v, positive=False))


def _mapping(path: Path, where: str, v: Any, known: tuple[str, ...]) -> dict:
    if not isinstance(v, dict):
        raise _err(path, where, f"expected a mapping, got {_type(v)}")
    for k in v:
        if k not in known:
            raise _err(path, f"{where}.{k}" if where != "(top level)" else str(k), f"unknown field; known: {', '.join(known)}")
    return v


def _files(path: Path, where: str, v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise _err(path, where, f"expected a mapping of relative path to content, got {_type(v)}")
    out = {}
    for k, content in v.items():
        if not isinstance(k, str) or not k or k.startswith("/") or ".." in Path(k).parts:
            raise _err(path, f"{where}[{k!r}]", "expected a relative path inside the work dir")
        if not isinstance(content, str):
            raise _err(path, f"{where}[{k!r}]", f"expected the file's text content, got {_type(content)}")
        out[k] = content
    return out


def _colon_hint(path: Path, where: str, v: Any, known: tuple[str, ...]) -> None:
    """A command with ': ' in it, unquoted, is read by YAML as a one-key mapping: say so."""
    if isinstance(v, dict) and len(v) == 1 and next(iter(v)) not in known:
        k = next(iter(v))
        raise _err(path, where, f"YAML read this as a mapping with key {str(k)!r}: a command containing ': ' must be "
                                "quoted or written as a block scalar (`- |-` and the command on the next line)")


_TOP = ("id", "domain", "image", "task", "timeout_s", "workdir", "limits", "setup", "service", "actions", "checks",
        "perturbations", "tags")


def parse_task(doc: Any, path: Path) -> TaskSpec:
    d = _mapping(path, "(top level)", doc, _TOP)
    tid = _str(path, "id", d.get("id"))
    if not _ID.fullmatch(tid):
        raise _err(path, "id", f"expected lowercase letters, digits and '-', got {tid!r}")
    spec = TaskSpec(id=tid, task=_str(path, "task", d.get("task")), path=path)
    domain = d.get("domain", "terminal")
    if domain not in SANDBOX_DOMAINS:
        raise _err(path, "domain", f"expected one of {', '.join(SANDBOX_DOMAINS)}, got {domain!r}")
    spec.domain = domain
    spec.image = _str(path, "image", d.get("image", "terminal"))
    from sandboxes.images import recipe_names

    if spec.image not in recipe_names():
        raise _err(path, "image", f"no image recipe {spec.image!r}; known: {', '.join(recipe_names())}")
    if "timeout_s" in d:
        spec.timeout_s = _num(path, "timeout_s", d["timeout_s"])
    if "workdir" in d:
        wd = _str(path, "workdir", d["workdir"])
        top = "/" + wd.strip("/").split("/")[0]
        # not in a system dir, nor in /run (the harness's own state, /run/wl), nor the tmpfs mounts it would shadow
        if (not re.fullmatch(r"/[A-Za-z0-9_./-]*", wd) or ".." in wd or top in ("/", "/etc", "/usr", "/bin", "/sbin", "/lib",
                                                                               "/run", "/proc", "/sys", "/dev", "/var")
                or wd.rstrip("/") in ("/tmp", "/home/agent")):
            raise _err(path, "workdir", f"expected an absolute path of plain characters outside system dirs, got {wd!r}")
        spec.workdir = wd.rstrip("/")
    if "limits" in d:
        lim = _mapping(path, "limits", d["limits"], LIMIT_KEYS)
        spec.limits = {k: _num(path, f"limits.{k}", v) for k, v in lim.items()}
        for k, v in spec.limits.items():  # Docker and tmpfs read 0 as "no limit": `memory_mb: 0.5` was none at all
            if k != "cpus" and (v != int(v) or v < 1):
                raise _err(path, f"limits.{k}", f"expected a whole number of at least 1, got {v:g}")
            if k == "cpus" and v * 1e9 < 1:
                raise _err(path, "limits.cpus", f"expected at least one billionth of a CPU, got {v:g}")
    if "setup" in d:
        s = _mapping(path, "setup", d["setup"], ("files", "commands"))
        if "files" in s:
            spec.setup_files = _files(path, "setup.files", s["files"])
        cmds = s.get("commands", [])
        if not isinstance(cmds, list):
            raise _err(path, "setup.commands", f"expected a list of shell commands, got {_type(cmds)}")
        spec.setup_commands = [_str(path, f"setup.commands[{i}]", c) for i, c in enumerate(cmds)]
    if "service" in d:
        svc = _mapping(path, "service", d["service"], ("files",))
        spec.service_files = _files(path, "service.files", svc.get("files", {}))
    acts = d.get("actions")
    if not isinstance(acts, list) or not acts:
        raise _err(path, "actions", f"expected a non-empty list of commands, got {_type(acts)}")
    for i, a in enumerate(acts):
        if isinstance(a, str):
            spec.actions.append(ActionSpec(_str(path, f"actions[{i}]", a)))
        elif isinstance(a, dict):
            _colon_hint(path, f"actions[{i}]", a, ("command", "timeout_s"))
            m = _mapping(path, f"actions[{i}]", a, ("command", "timeout_s"))
            t = _num(path, f"actions[{i}].timeout_s", m["timeout_s"]) if "timeout_s" in m else None
            spec.actions.append(ActionSpec(_str(path, f"actions[{i}].command", m.get("command")), t))
        else:
            raise _err(path, f"actions[{i}]", f"expected a command string or a mapping with 'command', got {_type(a)}")
    checks = d.get("checks", [])
    if not isinstance(checks, list):
        raise _err(path, "checks", f"expected a list, got {_type(checks)}")
    for i, c in enumerate(checks):
        if isinstance(c, str):
            spec.checks.append(CheckSpec(_str(path, f"checks[{i}]", c)))
            continue
        _colon_hint(path, f"checks[{i}]", c, ("command", "exit", "stdout", "stdout_contains"))
        m = _mapping(path, f"checks[{i}]", c, ("command", "exit", "stdout", "stdout_contains"))
        ex = m.get("exit", 0)
        if isinstance(ex, bool) or not isinstance(ex, int):
            raise _err(path, f"checks[{i}].exit", f"expected an integer exit code, got {_type(ex)} {ex!r}")
        for k in ("stdout", "stdout_contains"):
            if k in m and not isinstance(m[k], str):
                raise _err(path, f"checks[{i}].{k}", f"expected a string, got {_type(m[k])}")
        spec.checks.append(CheckSpec(_str(path, f"checks[{i}].command", m.get("command")), ex, m.get("stdout"),
                                     m.get("stdout_contains")))
    if "perturbations" in d:
        perts = _mapping(path, "perturbations", d["perturbations"], tuple(PERTURBATIONS))
        for name, params in perts.items():
            pm = _mapping(path, f"perturbations.{name}", params or {}, tuple(PERTURBATIONS[name].defaults))
            spec.perturbations[name] = {k: _param(path, f"perturbations.{name}.{k}", k, v) for k, v in pm.items()}
    tags = d.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _err(path, "tags", "expected a list of strings")
    spec.tags = list(tags)
    spec.digest = hashlib.sha256(yaml.safe_dump(doc, sort_keys=True).encode()).hexdigest()[:16]
    return spec


def load_tasks(path: Path | str) -> list[TaskSpec]:
    """Tasks of one YAML file (a mapping, or a list of mappings) or of every *.yaml in a dir."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.yaml")) + sorted(path.glob("*.yml"))
        if not files:
            raise SpecError(f"{path}: no *.yaml task specs in this directory")
        out = [t for f in files for t in load_tasks(f)]
    else:
        if not path.is_file():
            raise SpecError(f"{path}: no such task spec file")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise SpecError(f"{path}: not valid YAML: {e}") from e
        except UnicodeDecodeError as e:  # the message named no file
            raise SpecError(f"{path}: not UTF-8 text: byte {e.object[e.start]:#04x} at offset {e.start}") from e
        docs = doc if isinstance(doc, list) else [doc]
        out = []
        for i, d in enumerate(docs):
            try:
                out.append(parse_task(d, path))
            except SpecError as e:
                if isinstance(doc, list):
                    raise SpecError(str(e).replace(f"{path}: ", f"{path}: [{i}] ", 1)) from e
                raise
    seen: dict[str, Path] = {}
    for t in out:
        if t.id in seen:
            raise SpecError(f"{t.path}: id: {t.id!r} is already used by a task in {seen[t.id]}")
        seen[t.id] = t.path
    return out


def load_many(paths: list[Path | str]) -> list[TaskSpec]:
    tasks = [t for p in paths for t in load_tasks(p)]
    seen: dict[str, Path] = {}
    for t in tasks:
        if t.id in seen:
            raise SpecError(f"{t.path}: id: {t.id!r} is already used by a task in {seen[t.id]}")
        seen[t.id] = t.path
    return tasks
