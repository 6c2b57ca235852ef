"""MCP server specs (YAML): how to start a server, prepare its world, and what sessions to run.

A spec names the command, arguments, environment and working directory of one server, the setup
that builds its per-session working directory (e.g. a git repository with fixed dates), the
timeouts of the health check and the calls, and a list of sessions: scripted tool calls (with an
optional forced fault per step), or tasks for an agent behind an OpenAI-compatible endpoint.

Placeholders in strings: `{workdir}` (a fresh temporary directory per session, removed after it),
`{venv_bin}` (the directory of the running Python), `{repo_root}`, `{spec_dir}`, `{port}` (a free
TCP port, for HTTP servers). Anything else in braces is left alone (JSON in arguments is safe).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import sys
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from collectors import specs
from collectors.mcp.faults import FAULTS
from collectors.policies import Action
from schemas.records import dumps

REPO_ROOT = Path(__file__).resolve().parents[2]
SPECS_DIR = REPO_ROOT / "sandboxes" / "mcp"
_PLACEHOLDER = re.compile(r"\{(workdir|venv_bin|repo_root|spec_dir|port)\}")

_SPEC_KEYS = {"name", "description", "transport", "command", "args", "env", "cwd", "url", "setup",
              "timeouts", "sessions", "package", "install_hint", "strict_jsonrpc", "license"}
_SESSION_KEYS = {"name", "task", "steps", "policy", "max_turns", "repeat"}
_STEP_KEYS = {"tool", "args", "resource", "prompt", "fault", "thought"}
_TIMEOUT_KEYS = {"start_s", "initialize_s", "call_s", "stop_grace_s"}
# The environment a server inherits (like the SDK's default), plus the spec's `env`.
_INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR")


class SpecError(ValueError):
    """A spec that cannot be used; the message names the file and the key."""


@dataclass
class Timeouts:
    start_s: float = 15.0  # HTTP servers: until the port accepts connections
    initialize_s: float = 15.0  # the health check: `initialize` must answer within this
    call_s: float = 30.0  # each request after that
    stop_grace_s: float = 1.0  # after closing stdin, before SIGTERM


@dataclass
class StepSpec:
    """One scripted action; `fault` forces that fault on its response."""

    kind: str  # tool | resource | prompt
    name: str  # tool or prompt name, or resource URI
    args: dict[str, Any] = field(default_factory=dict)
    fault: str | None = None
    thought: str | None = None

    def action(self, values: dict[str, str]) -> Action:
        args = expand(self.args, values)
        if self.kind == "resource":
            uri = expand(self.name, values)
            return Action(text=f"resources/read({dumps({'uri': uri})})", tool_name="resources/read",
                          tool_args={"uri": uri}, thought=self.thought)
        if self.kind == "prompt":
            a = {"name": self.name, "arguments": args}
            return Action(text=f"prompts/get({dumps(a)})", tool_name="prompts/get", tool_args=a, thought=self.thought)
        return Action(text=f"{self.name}({dumps(args)})", tool_name=self.name, tool_args=args, thought=self.thought)


@dataclass
class SessionSpec:
    name: str
    task: str
    steps: list[StepSpec] | None = None
    policy: str = "scripted"  # scripted | openai | replay
    max_turns: int = 20
    repeat: int = 1
    replay_of: str | None = None  # the trajectory a replay session re-executes
    replay_actions: list[Action] | None = None
    replay_workdir: str | None = None  # the recorded session's workdir, re-pointed at the new one


@dataclass
class ServerSpec:
    name: str
    path: Path
    transport: str
    command: str | None
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    url: str | None
    setup: list[Any]
    timeouts: Timeouts
    sessions: list[SessionSpec]
    description: str = ""
    package: dict[str, str] = field(default_factory=dict)
    install_hint: str | None = None
    strict_jsonrpc: bool = True
    license: str | None = None
    sha256: str = ""

    def values(self, workdir: str, port: int | None = None) -> dict[str, str]:
        v = {"workdir": workdir, "venv_bin": str(Path(sys.executable).parent), "repo_root": str(REPO_ROOT),
             "spec_dir": str(self.path.parent)}
        if port is not None:
            v["port"] = str(port)
        return v

    def server_env(self, values: dict[str, str]) -> dict[str, str]:
        env = {k: os.environ[k] for k in _INHERITED_ENV if k in os.environ}
        env.update({k: str(expand(v, values)) for k, v in self.env.items()})
        return env

    def package_version(self) -> str | None:
        """`name==version` of the server package, for the environment fingerprint."""
        if "pypi" in self.package:
            try:
                return f"{self.package['pypi']}=={importlib.metadata.version(self.package['pypi'])}"
            except importlib.metadata.PackageNotFoundError:
                return f"{self.package['pypi']} (not installed)"
        if "npm" in self.package:
            root = Path(expand(self.package.get("dir", "{repo_root}/sandboxes/mcp-node"), self.values("")))
            pj = root / "node_modules" / self.package["npm"] / "package.json"
            try:
                return f"{self.package['npm']}@{json.loads(pj.read_text())['version']}"
            except (OSError, ValueError, KeyError):
                return f"{self.package['npm']} (not installed)"
        return None


def expand(value: Any, values: dict[str, str]) -> Any:
    """Replace the known placeholders in every string inside `value`."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [expand(v, values) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, values) for k, v in value.items()}
    return value


def _step(where: str, raw: Any) -> StepSpec:
    d = _check_keys(where, raw, _STEP_KEYS)
    kinds = [k for k in ("tool", "resource", "prompt") if k in d]
    if len(kinds) != 1:
        raise SpecError(f"{where}: a step needs exactly one of tool, resource, prompt (got {kinds or 'none'})")
    fault = d.get("fault")
    if fault is not None and fault not in FAULTS:
        raise SpecError(f"{where}: unknown fault {fault!r}; known: {sorted(FAULTS)}")
    if fault is not None and kinds[0] != "tool":
        raise SpecError(f"{where}: faults apply to tool calls only")
    args = d.get("args") or {}
    if not isinstance(args, dict):
        raise SpecError(f"{where}: args must be a mapping")
    return StepSpec(kinds[0], str(d[kinds[0]]), args, fault, d.get("thought"))


def spec_files(paths: list[Path | str]) -> list[Path]:
    """The spec files named: a directory stands for its `*.yaml` / `*.yml` specs (as the default,
    `sandboxes/mcp/`, does); one without any is an error, not a run of no sessions."""
    return specs.spec_files(paths, "MCP server specs", SpecError)


def _check_keys(where: str, obj: Any, allowed: set[str]) -> dict:
    return specs.check_keys(where, obj, allowed, SpecError)


def load_spec(path: Path | str) -> ServerSpec:
    """Read and check a spec; errors name the file and the offending key."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: a directory, not an MCP server spec (collect reads the *.yaml specs in it)")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such MCP server spec") from None
    try:
        d = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML ({e})") from e
    d = _check_keys(str(path), d, _SPEC_KEYS)
    if not d.get("name"):
        raise SpecError(f"{path}: `name` is required")
    transport = d.get("transport", "stdio")
    if transport not in ("stdio", "http"):
        raise SpecError(f"{path}: transport {transport!r} is not stdio or http")
    if transport == "stdio" and not d.get("command"):
        raise SpecError(f"{path}: a stdio server needs `command`")
    if transport == "http" and not d.get("url"):
        raise SpecError(f"{path}: an http server needs `url` (and `command` to start it locally)")
    t = _check_keys(f"{path}: timeouts", d.get("timeouts") or {}, _TIMEOUT_KEYS)
    timeouts = Timeouts(**{k: specs.number(f"{path}: timeouts.{k}", v, SpecError, positive=k != "stop_grace_s")
                           for k, v in t.items()})
    raw_sessions = d.get("sessions") or []
    if not isinstance(raw_sessions, list):
        raise SpecError(f"{path}: sessions: expected a list of sessions, got {type(raw_sessions).__name__}")
    setup = d.get("setup") or []
    if not isinstance(setup, list):
        raise SpecError(f"{path}: setup: expected a list of steps, got {type(setup).__name__}")
    for i, step in enumerate(setup):
        _setup_step(f"{path}: setup[{i}]", step)
    sessions = []
    for i, s in enumerate(raw_sessions):
        where = f"{path}: sessions[{i}]"
        s = _check_keys(where, s, _SESSION_KEYS)
        if "steps" in s and not isinstance(s["steps"], list):
            raise SpecError(f"{where}.steps: expected a list of steps, got {s['steps']!r:.80}")
        steps = [_step(f"{where}.steps[{j}]", st) for j, st in enumerate(s["steps"])] if "steps" in s else None
        policy = s.get("policy", "scripted" if steps is not None else "openai")
        if policy not in ("scripted", "openai"):
            raise SpecError(f"{where}: policy {policy!r} is not scripted or openai")
        if policy == "scripted" and not steps:
            raise SpecError(f"{where}: a scripted session needs `steps`")
        sessions.append(SessionSpec(specs.text(f"{where}.name", s.get("name"), SpecError) or f"session-{i}",
                                    specs.text(f"{where}.task", s.get("task"), SpecError), steps, policy,
                                    specs.integer(f"{where}.max_turns", s.get("max_turns", 20), SpecError, 1),
                                    specs.integer(f"{where}.repeat", s.get("repeat", 1), SpecError, 1)))
    specs.check_unique_sessions(path, sessions, SpecError)
    return ServerSpec(
        name=str(d["name"]), path=path.resolve(), transport=transport, command=d.get("command"),
        args=specs.text_list(f"{path}: args", d.get("args"), SpecError), env=specs.text_map(f"{path}: env", d.get("env"), SpecError),
        cwd=d.get("cwd"), url=d.get("url"), setup=setup, timeouts=timeouts, sessions=sessions,
        description=specs.text(f"{path}: description", d.get("description"), SpecError),
        package=specs.text_map(f"{path}: package", d.get("package"), SpecError),
        install_hint=d.get("install_hint"), strict_jsonrpc=bool(d.get("strict_jsonrpc", True)),
        license=d.get("license"), sha256=hashlib.sha256(text.encode()).hexdigest(),
    )


def _setup_step(where: str, step: Any) -> None:
    """A setup step as `run_setup` takes it: an argv list, or `{write: {path, text}}`."""
    if isinstance(step, list) and step and not any(isinstance(a, dict | list) or a is None for a in step):
        return
    if isinstance(step, dict) and set(step) == {"write"} and isinstance(step["write"], dict):
        w = _check_keys(f"{where}.write", step["write"], {"path", "text"})
        if isinstance(w.get("path"), str) and w["path"] and isinstance(w.get("text", ""), str):
            return
        raise SpecError(f"{where}.write: needs `path` (text) and optional `text` (text), got {w!r:.80}")
    hint = f" ({step.split()!r})" if isinstance(step, str) else ""
    raise SpecError(f"{where}: expected a command as a list of arguments{hint} or {{write: {{path, text}}}}, got {step!r:.80}")


SETUP_STEP_S = 60.0  # one setup command's time limit


async def run_setup(spec: ServerSpec, values: dict[str, str], env: dict[str, str]) -> None:
    """Build the session's world in `{workdir}`: argv lists run there; `{write: {path, text}}` writes a file.

    The commands run as subprocesses of the event loop (in their own process group, signals reset):
    a blocking run held up every other session's calls and timeouts, and SIGTERM/Ctrl-C, for as long
    as it took. Cancelled, the command's group is killed and nothing is reported.
    Raises `SpecError` naming the step and showing the command's output."""
    import asyncio
    import signal

    import anyio

    from collectors.mcp.wire import _reset_signals

    workdir = Path(values["workdir"])
    for i, step in enumerate(spec.setup):
        step = expand(step, values)
        where = f"{spec.path}: setup[{i}]"
        if isinstance(step, dict) and set(step) == {"write"}:
            w = step["write"]
            target = workdir / w["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(w.get("text", ""))
            continue
        if not (isinstance(step, list) and step):
            raise SpecError(f"{where}: expected a command list or {{write: {{path, text}}}}, got {step!r}")
        try:
            proc = await asyncio.create_subprocess_exec(
                *(str(a) for a in step), cwd=workdir, env={**os.environ, **env}, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True,
                preexec_fn=_reset_signals)
        except OSError as e:
            raise SpecError(f"{where}: {step} failed: {e}") from e
        try:
            with anyio.fail_after(SETUP_STEP_S):
                out, err = await proc.communicate()
        except TimeoutError:
            raise SpecError(f"{where}: {step} failed: timed out after {SETUP_STEP_S:g} s") from None
        finally:
            if proc.returncode is None:
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with anyio.CancelScope(shield=True), suppress(Exception):
                    await proc.wait()
        if proc.returncode != 0:
            text = (err or out).decode("utf-8", errors="replace").strip()
            raise SpecError(f"{where}: {step} exited with {proc.returncode}: {text[:500]}")


def default_specs() -> list[Path]:
    """The specs shipped in `sandboxes/mcp/`."""
    return sorted(SPECS_DIR.glob("*.yaml"))
