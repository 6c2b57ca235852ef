"""Replay: re-execute the shell actions of imported trajectories in a sandbox, for fresh observations.

The recorded action text is kept verbatim (`turns.action` of the replay equals the original's),
the command actually run is in `tool_args.command`: InterCode ReAct runs write `execute[CMD]`,
which runs CMD; `submit` (InterCode's end-of-episode marker, not a shell command) is skipped.
OpenHands `execute_bash`/`bash` tool calls run their `command` argument; their other tools
(editors, browsing) are skipped. SWE-agent commands that are its own tools (`open`, `edit`,
`submit`, ...) are skipped, plain shell commands run.

InterCode bash trajectories act on /testbed, so they replay in a sandbox whose work dir is
/testbed, set up by `replay/intercode-testbed.yaml` (our own stand-in for InterCode's file system).
Every replayed trajectory names its original in metadata `replay_of`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from collectors.policies import Action, ReplayPolicy
from sandboxes.collect import Job
from sandboxes.tasks import TaskSpec, load_tasks
from schemas.options import at_least
from schemas.records import Trajectory

FIXTURES = Path(__file__).resolve().parent / "replay"
_EXECUTE = re.compile(r"^\s*execute\[(.*)\]\s*$", re.S)
_SWE_AGENT_TOOLS = {"open", "goto", "scroll_up", "scroll_down", "create", "edit", "search_dir", "search_file",
                    "find_file", "submit", "exit_forfeit", "decompile", "disassemble", "debug_start", "debug_stop",
                    "connect_start", "connect_stop", "connect_sendline", "debug_add_breakpoint", "debug_continue",
                    "debug_step", "debug_exec", "str_replace_editor", "filemap"}
_OPENHANDS_SHELL = {"execute_bash", "bash", "cmd_run", "run", "CmdRunAction"}


def shell_actions(traj: Trajectory) -> list[Action]:
    """The replayable shell actions of an imported trajectory, original text kept."""
    out: list[Action] = []
    for t in traj.turns:
        if t.kind != "env" or not t.action:
            continue
        text = t.action
        if traj.source_format == "intercode":
            if text.strip() == "submit" or text.strip().startswith("submit["):
                continue
            m = _EXECUTE.match(text)
            cmd = m.group(1) if m else text
        elif t.tool_name in _OPENHANDS_SHELL:
            import json

            try:
                cmd = json.loads(t.tool_args or "{}").get("command") or ""
            except ValueError:
                cmd = ""
            if not cmd.strip():
                continue
        elif t.tool_name is None and traj.source_format.startswith("swe-agent"):
            first = text.strip().split(maxsplit=1)[0] if text.strip() else ""
            if first in _SWE_AGENT_TOOLS:
                continue
            cmd = text
        else:
            continue
        out.append(Action(text=text, tool_name="bash", tool_args={"command": cmd}, thought=t.thought))
    return out


def _fixture(name: str) -> TaskSpec:
    return load_tasks(FIXTURES / f"{name}.yaml")[0]


def replay_job(traj: Trajectory, fixture: TaskSpec | None = None, timeout_s: float = 10.0) -> Job | None:
    """A collection job that replays `traj`, or None when it has no shell actions."""
    actions = shell_actions(traj)
    if not actions:
        return None
    fx = fixture or (_fixture("intercode-testbed") if traj.source_format == "intercode" else None)
    src = Path(traj.source or ".")
    spec = TaskSpec(
        id=f"replay-{traj.source_format}", task=traj.task or "", path=src, domain=traj.domain if traj.domain in ("terminal", "os", "swe") else "terminal",
        image=fx.image if fx else "terminal", timeout_s=timeout_s, workdir=fx.workdir if fx else "/work",
        setup_files=dict(fx.setup_files) if fx else {}, setup_commands=list(fx.setup_commands) if fx else [],
        digest=traj.trajectory_id[:16],
    )
    native = f"replay:{traj.source_format}:{src.name}:{traj.native_id}"
    return Job(task=spec, policy_factory=lambda _t, a=actions, s=f"{src}#{traj.locator}": ReplayPolicy(a, source=s),
               native_id=native,
               extra_meta={"replay_of": {"trajectory_id": traj.trajectory_id, "source": str(src), "locator": traj.locator,
                                         "source_format": traj.source_format, "native_id": traj.native_id,
                                         "fixture": fx.id if fx else None}})


def replay_jobs(paths: Iterable[Path | str], limit: int | None = None) -> tuple[list[Job], list[Trajectory]]:
    """Jobs replaying every replayable trajectory under `paths` (imported with the ingest reader),
    at most `limit` (≥ 1) of them."""
    from pipelines.reader import read_path

    if limit is not None:  # 0 would still replay one: the count is checked after appending
        at_least("--limit", limit, 1)

    jobs: list[Job] = []
    originals: list[Trajectory] = []
    fx = _fixture("intercode-testbed")
    for p in paths:
        for rec in read_path(Path(p)):
            if not isinstance(rec, Trajectory):
                continue
            j = replay_job(rec, fx if rec.source_format == "intercode" else None)
            if j is None:
                continue
            jobs.append(j)
            originals.append(rec)
            if limit is not None and len(jobs) >= limit:
                return jobs, originals
    return jobs, originals
