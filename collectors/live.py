"""What the live collectors that run sessions one after another (browser, Android) share: their
option checks and command-line options, the agent's loop, and the counts of a run with its
one-screen summary."""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pipelines.shell import query_command
from schemas.options import int_option

if TYPE_CHECKING:  # the commands register their options with this module at start-up: nothing heavy here
    from collections.abc import Callable

    from collectors.policies import Action, Policy
    from schemas.records import Trajectory, Turn


def check_session_options(repeat: int, max_turns: int, policy: str, openai: dict[str, Any] | None) -> dict[str, Any]:
    """The run's options checked before anything starts; the agent endpoint's settings (for
    `OpenAIChatPolicy`) with `policy` openai, which needs an endpoint."""
    from collectors.policies import OpenAIChatPolicy
    from schemas.options import at_least

    at_least("--repeat", repeat, 1)
    at_least("--max-turns", max_turns, 1)
    if policy not in ("scripted", "openai"):
        raise ValueError(f"--policy {policy}: use scripted or openai")
    agent = dict(openai or {})
    if policy == "openai":
        try:
            OpenAIChatPolicy(max_turns=max_turns, **agent)
        except ValueError:
            raise ValueError("--policy openai needs an agent endpoint: --agent-base-url and --agent-model, "
                             "or WORLDLINE_AGENT_BASE_URL and WORLDLINE_AGENT_MODEL") from None
    return agent


def run_agent(policy: Policy, task: str, action_space: list[dict], act: Callable[[Action, str], Turn]) -> str | None:
    """An agent's session: it gets the task and the actions as tools, then each turn's observation;
    `act(action, locator)` takes its action on the environment and returns the recorded turn. Returns
    why the session ended early (the agent's endpoint failed), or None when the agent finished."""
    from collectors.policies import EndpointError
    from collectors.policies import Step as PolicyStep

    policy.reset(task, action_space)
    history: list[PolicyStep] = []
    while True:
        try:
            a = policy.next_action(history)
        except EndpointError as e:
            return f"agent endpoint: {e}"
        if a is None:
            return None
        turn = act(a, f"turn:{len(history)}")
        history.append(PolicyStep(a, turn.observation or "", bool(turn.is_error)))


def add_session_arguments(s: argparse.ArgumentParser, what: str) -> None:
    """The options every session collector's command takes: --repeat, --session, the agent's, --quiet
    (`what`: the spec kind in `--session`'s help, `site` or `app`)."""
    s.add_argument("--repeat", type=int_option, default=1, help="run each session this many times")
    s.add_argument("--session", action="append", help=f"only this session (`name` or `{what}/name`); repeatable")
    s.add_argument("--policy", choices=["scripted", "openai"], default="scripted",
                   help="who acts: the spec's steps (default), or an agent behind an OpenAI-compatible endpoint")
    s.add_argument("--agent-base-url", help="OpenAI-compatible endpoint (default: $WORLDLINE_AGENT_BASE_URL)")
    s.add_argument("--agent-model", help="model name at the endpoint (default: $WORLDLINE_AGENT_MODEL)")
    s.add_argument("--max-turns", type=int_option, default=20, help="actions an agent may take per session (default 20)")
    s.add_argument("--quiet", action="store_true", help="no per-session progress lines")


EXIT_SOME_FAILED = 3
EXIT_INTERRUPTED = 130


def run_session_command(name: str, run: Callable[[], SessionSummary], unavailable: type[Exception]) -> int:
    """A session collector's command: `run()` the collection and print its summary. Exit codes: 0 every
    session ran to its end, 3 some could not (listed), 1 `unavailable` (what drives the sessions is
    missing: the message says what to install or start), 130 interrupted by SIGINT or SIGTERM (`timeout`,
    a job scheduler): the finished sessions are written, as the other collectors do."""
    import signal
    import sys
    import threading

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    main = threading.current_thread() is threading.main_thread()  # only there can a handler be set
    old = signal.signal(signal.SIGTERM, stop) if main else None  # the default ends the process, nothing written
    try:
        summary = run()
    except unavailable as e:
        print(f"worldline {name}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"worldline {name}: interrupted (finished sessions are written)", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if main:
            signal.signal(signal.SIGTERM, old if old is not None else signal.SIG_DFL)
    print(summary.render())
    return EXIT_SOME_FAILED if summary.failed else 0


def agent_endpoint(a: argparse.Namespace) -> dict[str, str]:
    """The agent endpoint settings given on the command line (the rest come from the environment)."""
    return {k: v for k, v in {"base_url": a.agent_base_url, "model": a.agent_model}.items() if v}


@dataclass
class SessionSummary:
    """Counts of one run; `render()` is the one-screen summary. `failed_outcomes` are the outcomes
    of sessions that could not run to their end (the command then exits 3)."""

    command: str  # `collect browser`
    source_format: str
    failed_outcomes: tuple[str, ...]
    corpus: str
    run_id: str
    environment: str = ""  # the line that says what ran the sessions (`chromium 140.0`)
    sessions: int = 0
    turns: int = 0
    error_turns: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    perturbations: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    trajectory_ids: list[str] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return sum(self.outcomes[o] for o in self.failed_outcomes)

    def count(self, name: str, traj: Trajectory, failure: str | None) -> None:
        """Add one recorded session (`name`: spec/session#repetition; `failure`: why it ended early)."""
        self.sessions += 1
        self.turns += len(traj.turns)
        self.error_turns += sum(1 for t in traj.turns if t.is_error)
        self.outcomes[traj.outcome or "none"] += 1
        self.perturbations.update(t.perturbation for t in traj.turns if t.perturbation)
        self.trajectory_ids.append(traj.trajectory_id)
        if traj.outcome in self.failed_outcomes:
            self.failures.append(f"{name}: {failure}")

    def note_lines(self) -> list[str]:
        """Collector-specific lines after the outcomes (none here)."""
        return []

    def render(self) -> str:
        lines = [
            f"worldline {self.command}: {self.sessions} sessions, {self.turns} turns "
            f"({self.error_turns} error turns) in {self.seconds:.1f}s -> {self.corpus}",
            f"  {self.environment}; run {self.run_id}",
            "  outcomes: " + (", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"),
        ]
        if self.perturbations:
            lines.append("  perturbed turns: " + ", ".join(f"{k} {v}" for k, v in sorted(self.perturbations.items())))
        lines += [f"  {n}" for n in self.note_lines()]
        for f in self.failures[:20]:
            lines.append(f"  failed: {f}")
        lines.append("  see: " + query_command(self.corpus, f"SELECT * FROM trajectories WHERE source_format = '{self.source_format}'"))
        return "\n".join(lines)
