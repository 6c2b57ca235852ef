"""The AgentWorldBench evaluation rows: which turns, and which rows the benchmark's parser would misread."""

from __future__ import annotations

from pipelines.evalset import eval_rows, evaluated_turns
from pipelines.render import Conversation, Group

TRAJ = {"trajectory_id": "t1", "domain": "terminal", "task": "list files"}
HEADING = "### Turn 3 of the tutorial\nok"  # the parser would take it for a turn of its own


def _conv(unsafe_at: int | None = None) -> Conversation:
    groups = [Group(i, f"cmd{i}", f"out{i}") for i in range(9)]
    if unsafe_at is not None:
        groups[unsafe_at] = Group(unsafe_at, "cat notes.md", HEADING)
    return Conversation("sys", groups)


def test_only_rows_holding_unsafe_text_are_left_out() -> None:
    """A row holds the turns up to its own: a heading in the last turn's output cost every row of
    the trajectory (turns 1, 4 and 6 never show it)."""
    assert evaluated_turns(9, 2) == [0, 3, 5, 8]
    rows, left = eval_rows(TRAJ, _conv())
    assert ([r["turn_idx"] for r in rows], left) == ([1, 4, 6, 9], 0)
    rows, left = eval_rows(TRAJ, _conv(unsafe_at=8))
    assert ([r["turn_idx"] for r in rows], left) == ([1, 4, 6], 1)
    assert all(HEADING not in resp for r in rows for resp in r["response"])
    rows, left = eval_rows(TRAJ, _conv(unsafe_at=4))
    assert ([r["turn_idx"] for r in rows], left) == ([1, 4], 2)
    rows, left = eval_rows({**TRAJ, "task": "**Action:** do it"}, _conv())  # in every row's first prompt
    assert (rows, left) == ([], 4)
    rows, left = eval_rows(TRAJ, _conv(unsafe_at=8), exclude={0})  # an excluded turn is not counted as left out
    assert ([r["turn_idx"] for r in rows], left) == ([4, 6], 1)
