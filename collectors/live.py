"""What the scripted live collectors that run sessions one after another (browser, Android) share:
the counts of a run and its one-screen summary."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from schemas.records import Trajectory


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
    notes: list[str] = field(default_factory=list)  # collector-specific lines after the outcomes

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

    def render(self) -> str:
        lines = [
            f"worldline {self.command}: {self.sessions} sessions, {self.turns} turns "
            f"({self.error_turns} error turns) in {self.seconds:.1f}s -> {self.corpus}",
            f"  {self.environment}; run {self.run_id}",
            "  outcomes: " + (", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())) or "none"),
        ]
        if self.perturbations:
            lines.append("  perturbed turns: " + ", ".join(f"{k} {v}" for k, v in sorted(self.perturbations.items())))
        lines += [f"  {n}" for n in self.notes]
        for f in self.failures[:20]:
            lines.append(f"  failed: {f}")
        lines.append(f'  see: worldline query {self.corpus} "SELECT * FROM trajectories WHERE source_format = '
                     f"'{self.source_format}'\"")
        return "\n".join(lines)
