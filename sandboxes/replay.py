"""Replay: re-execute the shell actions of imported trajectories in a sandbox, for fresh observations.

The recorded action text is kept verbatim (`turns.action` of the replay equals the original's),
the command actually run is in `tool_args.command`: InterCode ReAct runs write `execute[CMD]`,
which runs CMD; `submit` (InterCode's end-of-episode marker, not a shell command) is skipped.
OpenHands `execute_bash`/`bash` tool calls run their `command` argument; their other tools
(editors, browsing) are skipped. SWE-agent commands that are its own tools (`open`, `edit`,
`submit`, ...) are skipped, plain shell commands run.

InterCode's other environments (`ic_sql`, `ic_python`, ...) are not a shell: counted
without shell actions. InterCode bash trajectories act on /testbed, so they replay in a sandbox whose work dir is
/testbed, set up by `replay/intercode-testbed.yaml` (our own stand-in for InterCode's file system).
Every replayed trajectory names its original in metadata `replay_of`.

A replay is only as good as its environment. A trajectory that acted on files the sandbox does not
have (a SWE task's repository, a CTF challenge's files: any `swe` trajectory, InterCode's `ic_ctf`, and any
trajectory whose turns record a working directory, as OpenHands and SWE-agent do) would record "No such file or
directory" where the original saw its repository, and a world model would learn that. Such
trajectories are left out and counted, unless `allow_missing_env` (`--allow-missing-env`) asks for them
anyway: they then start in the original's working directory (created empty) and say so in
`replay_of.environment = "missing"`. `ReplayPlan.render` accounts for every trajectory read.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
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
            if re.match(r"\s*submit(?:$|[\s\[])", text):  # `submit`, `submit[...]`, CTF's `submit FLAG`
                continue
            m = _EXECUTE.match(text)
            cmd = m.group(1) if m else text
        elif t.tool_name in _OPENHANDS_SHELL:
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


def intercode_environment(traj: Trajectory) -> str | None:
    """The InterCode environment of an InterCode trajectory: `ic_bash` (replayed in our /testbed stand-in),
    `ic_ctf` (a bash shell among a challenge's files, which no fixture has), `ic_sql`, `ic_python`, ...
    (not a shell); None for another format. A record that does not name it was a bash run."""
    if traj.source_format != "intercode":
        return None
    try:
        env = json.loads(traj.metadata or "{}").get("environment")
    except (ValueError, AttributeError):
        env = None
    return env if isinstance(env, str) and env else "ic_bash"


def _fixture(name: str) -> TaskSpec:
    return load_tasks(FIXTURES / f"{name}.yaml")[0]


def original_workdir(traj: Trajectory) -> str | None:
    """The working directory the original recorded first (OpenHands `working_dir`, SWE-agent `state`)."""
    for t in traj.turns:
        if not t.state:
            continue
        try:
            wd = json.loads(t.state).get("working_dir")
        except (ValueError, AttributeError):
            continue
        if isinstance(wd, str) and wd.startswith("/"):
            return wd
    return None


def _replay_job(traj: Trajectory, actions: list[Action], fx: TaskSpec | None, missing_workdir: str | None,
                timeout_s: float = 10.0) -> Job:
    """The collection job that replays `traj`: in the fixture's sandbox, else in an empty one (in
    `missing_workdir`, the original's, when its environment is missing)."""
    src = Path(traj.source or ".")
    spec = TaskSpec(
        id=f"replay-{traj.source_format}", task=traj.task or "", path=src, domain=traj.domain if traj.domain in ("terminal", "os", "swe") else "terminal",
        image=fx.image if fx else "terminal", timeout_s=timeout_s, workdir=fx.workdir if fx else (missing_workdir or "/work"),
        setup_files=dict(fx.setup_files) if fx else {}, setup_commands=list(fx.setup_commands) if fx else [],
        # the original and the fixture it runs in: an edited fixture (its files, commands, image) makes a new job
        digest=hashlib.sha256(f"{traj.trajectory_id}\0{fx.digest if fx else ''}".encode()).hexdigest()[:16],
    )
    # the original's id names the replay: file names repeat (`output.jsonl`, `events.json`) and native ids may be absent
    native = f"replay:{traj.source_format}:{traj.native_id or traj.locator}:{traj.trajectory_id[:12]}"
    return Job(task=spec, policy_factory=lambda _t, a=actions, s=f"{src}#{traj.locator}": ReplayPolicy(a, source=s),
               native_id=native,
               extra_meta={"replay_of": {"trajectory_id": traj.trajectory_id, "source": str(src), "locator": traj.locator,
                                         "source_format": traj.source_format, "native_id": traj.native_id,
                                         "fixture": fx.id if fx else None,
                                         "environment": "missing" if missing_workdir is not None else "sandbox"}})


@dataclass
class ReplayPlan:
    """The jobs of a replay, and what became of every record read (they add up to `records`)."""

    jobs: list[Job] = field(default_factory=list)
    originals: list[Trajectory] = field(default_factory=list)
    records: int = 0
    unreadable: int = 0  # records the reader quarantined
    no_shell: int = 0  # trajectories without a replayable shell action
    missing_env: Counter[str] = field(default_factory=Counter)  # left out, by original working dir
    beyond_limit: bool = False  # reading stopped at `limit` jobs

    def render(self) -> str:
        skipped = sum(self.missing_env.values())
        parts = [f"replay: {self.records} records read: {len(self.jobs)} to replay"]
        if self.no_shell:
            parts.append(f"{self.no_shell} without shell actions")
        if skipped:
            where = ", ".join(f"{d} ({n})" for d, n in self.missing_env.most_common(3))
            more = ", ..." if len(self.missing_env) > 3 else ""
            parts.append(f"{skipped} left out: they acted on files the sandbox lacks ({where}{more}; "
                         "--allow-missing-env replays them anyway)")
        if self.unreadable:
            parts.append(f"{self.unreadable} unreadable (`worldline ingest` names them)")
        return "; ".join(parts) + ("; stopped at --limit" if self.beyond_limit else "")


def plan_replay(paths: Iterable[Path | str], limit: int | None = None, allow_missing_env: bool = False) -> ReplayPlan:
    """Jobs replaying every replayable trajectory under `paths` (imported with the ingest reader),
    at most `limit` (≥ 1) of them."""
    from pipelines.reader import read_path

    if limit is not None:  # 0 would still replay one: the count is checked after appending
        at_least("--limit", limit, 1)
    plan = ReplayPlan()
    fx = _fixture("intercode-testbed")
    for p in paths:
        for rec in read_path(Path(p)):
            plan.records += 1
            if not isinstance(rec, Trajectory):
                plan.unreadable += 1
                continue
            env = intercode_environment(rec)
            fixture = fx if env == "ic_bash" else None
            actions = shell_actions(rec) if env in (None, "ic_bash", "ic_ctf") else []  # SQL, Python: no shell
            if not actions:
                plan.no_shell += 1
                continue
            # the original acted on files a sandbox lacks (see the module docstring)
            workdir = original_workdir(rec)
            missing = fixture is None and (rec.domain == "swe" or workdir is not None or env == "ic_ctf")
            if missing and not allow_missing_env:
                plan.missing_env[workdir or f"({env or rec.domain} task)"] += 1
                continue
            if limit is not None and len(plan.jobs) >= limit:  # one more to replay: the limit stopped the reading
                plan.records -= 1  # (not accounted for: as if not read)
                plan.beyond_limit = True
                return plan
            plan.jobs.append(_replay_job(rec, actions, fixture, (workdir or "/work") if missing else None))
            plan.originals.append(rec)
    return plan

