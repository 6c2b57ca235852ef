"""Run Android app specs on a device into a corpus: the core behind `worldline collect android`.

Each session starts its app afresh (`am start -S`), and ends as an `android` trajectory (source format
`android-live`) committed through `CollectionSink`. The observation after each action is the screen's
view hierarchy, rendered as the DroidBot and uiautomator importers render theirs, so live and
imported Android data read alike. A step whose target the screen does not show ends its session
early (outcome `policy_error`: the script no longer fits the app), with the turns it had; an action
the screen cannot take (an index that is not there, a view with no area, text `input` cannot type) is
an error turn, as an agent sees it. An adb command that fails ends the session as `device_error`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.android.device import ActionRefused, AdbDevice, DeviceError, Screen, text_arg
from collectors.android.spec import ACTION_SPACE, AppSpec, Session, Step, load_spec, spec_files, step_of_call
from collectors.android_views import describe
from collectors.live import SessionSummary, check_session_options, run_agent
from collectors.policies import Action, OpenAIChatPolicy, Policy
from collectors.specs import check_sessions, selected
from pipelines.sink import CollectionSink
from schemas.records import Trajectory, Turn, digest, dumps

COLLECTOR = "AndroidLiveCollector"
COLLECTOR_VERSION = "1"
SOURCE_FORMAT = "android-live"
FAILED_OUTCOMES = ("policy_error", "agent_error", "device_error")
MAX_DUMPS = 4  # dumps after an action until two in a row agree (the screen has settled)


def collect(spec_paths: list[Path | str], out: Path | str, *, serial: str | None = None,
            adb: Path | str | None = None, repeat: int = 1, only: list[str] | None = None,
            policy: str = "scripted", openai: dict[str, Any] | None = None, max_turns: int = 20,
            settle_s: float | None = None, commit_every: int = 25, echo: Callable[[str], None] | None = None) -> SessionSummary:
    """Record every session of every spec (a folder stands for its `*.yaml`) on the device into the
    corpus at `out`. `policy` `openai`: an agent behind an OpenAI-compatible endpoint chooses the
    actions; `settle_s` replaces the specs' wait after each action. Specs and options are checked
    before adb is called; adb and the device before anything is written."""
    from pipelines.store import Corpus

    agent = check_session_options(repeat, max_turns, policy, openai)
    Corpus(out).check_writable("--out")
    if settle_s is not None and settle_s < 0:
        raise ValueError(f"--settle must be 0 seconds or more, got {settle_s}")
    specs = [load_spec(f) for f in spec_files(spec_paths)]
    for spec in specs if settle_s is not None else []:
        spec.settle_s = settle_s
    check_sessions(specs, only)
    jobs = [(spec, s, r) for spec in specs for s in spec.sessions for r in range(repeat)
            if selected(spec.name, s.name, only)]
    run_id = uuid.uuid4().hex[:12]
    summary = SessionSummary("collect android", SOURCE_FORMAT, FAILED_OUTCOMES, str(out), run_id)
    t0 = time.monotonic()
    with AdbDevice(serial, adb) as device:
        summary.environment = f"device: {device.description}"
        info = {"collector": "android", "device": device.serial, "specs": [str(s.path) for s in specs]}
        with CollectionSink(out, run_key=f"android:{run_id}", source=",".join(str(s.path) for s in specs),
                            commit_every=commit_every, info=info) as sink:
            for n, (spec, session, rep) in enumerate(jobs, 1):
                agent_policy = OpenAIChatPolicy(max_turns=max_turns, **agent) if policy == "openai" else None
                traj, meta = record(device, spec, session, rep, run_id, agent_policy)
                sink.add(traj, COLLECTOR, COLLECTOR_VERSION)
                summary.count(f"{spec.name}/{session.name}#{rep}", traj, meta.get("failure"))
                if echo:
                    echo(f"[{n}/{len(jobs)}] {spec.name}/{session.name}#{rep}: {len(traj.turns)} turns, {traj.outcome}")
    summary.seconds = time.monotonic() - t0
    return summary


class _Run:
    """One session on the device: the screen it shows now, and the turns so far."""

    def __init__(self, device: AdbDevice, spec: AppSpec):
        self.device, self.spec = device, spec
        self.screen: Screen | None = None
        self.turns: list[Turn] = []

    def settle(self) -> Screen:
        """The screen once two dumps in a row agree (at most MAX_DUMPS): the first `settle_s` after the
        action, the others half that apart."""
        time.sleep(self.spec.settle_s)
        last = self.device.dump()
        for _ in range(MAX_DUMPS - 1):
            time.sleep(self.spec.settle_s / 2)
            now = self.device.dump()
            if now.xml == last.xml:
                break
            last = now
        self.screen = last
        return last

    def act(self, step: Step, index: int | None, locator: str, thought: str | None = None,
            call_id: str | None = None) -> Turn:
        """Take one step (on view `index` where it names one) and record the turn."""
        before = self.screen
        assert before is not None
        args: dict[str, Any] = {"index": index} if "index" in _PARAMS[step.do] else {}
        if step.do == "type":
            args["text"] = step.text
        if step.do == "swipe":
            args["direction"] = step.direction
        action = f"{step.do}({', '.join(repr(v) if isinstance(v, str) else str(v) for v in args.values())})"
        meta: dict[str, Any] = {"target": str(step.target) if step.target is not None else None}
        started, t0 = datetime.now(UTC), time.monotonic()
        error = None
        try:
            error = self._send(step, index, before, meta)
        except ActionRefused as e:
            error = str(e)
        if error is None:
            screen = self.settle()
            meta["unchanged"] = screen.text == before.text or None  # as clean compares: the rendering
        return self.record(action, step.do, args, error, locator, started, t0, thought, call_id, meta)

    def record(self, action: str, tool_name: str | None, args: dict[str, Any], error: str | None, locator: str,
               started: datetime, t0: float, thought: str | None = None, call_id: str | None = None,
               meta: dict[str, Any] | None = None) -> Turn:
        """Add the turn of an action: the screen now, or, for one that was refused (`error`), the error
        and the screen it was refused on (nothing was sent)."""
        screen = self.screen
        assert screen is not None
        turn = Turn(
            kind="env", action=action, observation=screen.text if error is None else f"error: {error}\n{screen.text}",
            observation_kind="view_hierarchy", tool_name=tool_name, tool_args=dumps(args), tool_call_id=call_id,
            thought=thought, is_error=error is not None, started_at=started,
            duration_s=round(time.monotonic() - t0, 6),
            state=dumps({"packages": screen.packages, "views": len(screen.views)}), locator=locator,
            metadata=dumps(kept) if (kept := {k: v for k, v in (meta or {}).items() if v is not None}) else None,
        )
        self.turns.append(turn)
        return turn

    def _send(self, step: Step, index: int | None, screen: Screen, meta: dict[str, Any]) -> str | None:
        """Send the step to the device; why it could not be sent, or None."""
        d = self.device
        if index is not None:
            at = screen.center(index)
            if isinstance(at, str):
                return at
            meta["view"], meta["at"] = describe(screen.views[index]), list(at)
            if step.do == "tap":
                d.tap(*at)
            elif step.do == "long_press":
                d.long_press(*at)
            else:  # type: focus the field, then type (text it cannot type refused before the tap)
                text_arg(step.text or "")
                d.tap(*at)
                d.type_text(step.text or "")
        elif step.do == "swipe":  # a third of the window, across its middle
            (x1, y1), (x2, y2) = screen.area
            w, h = x2 - x1, y2 - y1
            mid_x, mid_y = (x1 + x2) // 2, (y1 + y2) // 2
            dx, dy = {"up": (0, -h // 3), "down": (0, h // 3), "left": (-w // 3, 0), "right": (w // 3, 0)}[step.direction or "up"]
            d.swipe(mid_x - dx // 2, mid_y - dy // 2, mid_x + dx // 2, mid_y + dy // 2)
        elif step.do == "launch":
            d.launch(self.spec.component)
        else:
            d.key(step.do)
        return None


_PARAMS = {t["name"]: set(t["inputSchema"]["properties"]) for t in ACTION_SPACE}


def record(device: AdbDevice, spec: AppSpec, session: Session, rep: int, run_id: str,
           policy: Policy | None = None) -> tuple[Trajectory, dict[str, Any]]:
    """One session as a trajectory, with its metadata (also in the trajectory, as JSON), its steps or
    `policy` choosing the actions."""
    key = f"{session.name}#{rep}"
    collected = datetime.now(UTC)
    run = _Run(device, spec)
    failure = None
    initial = None
    try:
        device.launch(spec.component)
        initial = run.settle().text
        if policy is not None:
            failure = _agent_turns(run, policy, f"{session.task}\n\n{initial}")
        for i, step in enumerate(session.steps if policy is None else []):
            index = step.index
            if step.target is not None:
                assert run.screen is not None
                index = run.screen.find(step.target, step.nth)
                if index is None:
                    failure = f"step {i}: the screen shows no {step.target}" + (f" (#{step.nth})" if step.nth > 1 else "")
                    break
            run.act(step, index, f"step:{i}")
        outcome = ("agent_error" if policy is not None else "policy_error") if failure else _judge(session, run.screen)
    except DeviceError as e:
        failure, outcome = str(e), "device_error"
    meta = {"spec": spec.name, "session": session.name, "repetition": rep, "run_id": run_id,
            "package": spec.package, "device": device.serial, "failure": failure}
    traj = Trajectory(
        domain="android", source_format=SOURCE_FORMAT, native_id=f"{spec.name}/{key}@{run_id}",
        record_digest=digest(run_id, spec.name, key, spec.sha256), turns=run.turns, task=session.task,
        action_space=dumps(ACTION_SPACE), initial_state=initial, agent=policy.name if policy else "scripted",
        model=getattr(policy, "model", None),
        outcome=outcome, reward=None if outcome in FAILED_OUTCOMES else float(outcome == "success"),
        env_fingerprint=dumps({"device": {k: v for k, v in device.props.items() if v}, "package": spec.package, "spec_sha256": spec.sha256}),
        collected_at=collected, license=spec.license,
        metadata=dumps({k: v for k, v in meta.items() if v is not None}),
        locator=f"session:{key}", source=str(spec.path),
    )
    return traj, meta


def _agent_turns(run: _Run, policy: Policy, task: str) -> str | None:
    """The agent's session (`run_agent`): it sees the task with the first screen, then each observation."""

    def act(a: Action, locator: str) -> Turn:
        step = step_of_call(a.tool_name, a.tool_args)
        if not isinstance(step, str):
            return run.act(step, step.index, locator, a.thought or None, a.tool_call_id)
        return run.record(a.text, a.tool_name, a.tool_args or {}, step, locator, datetime.now(UTC), time.monotonic(),
                          a.thought or None, a.tool_call_id)

    return run_agent(policy, task, ACTION_SPACE, act)


def _judge(session: Session, screen: Screen | None) -> str:
    if session.expect is None:
        return "unjudged"
    return "success" if screen is not None and screen.find(session.expect) is not None else "failure"
