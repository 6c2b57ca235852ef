"""Helpers shared by the importer tests."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from pipelines.reader import read_path
from schemas import validate
from schemas.records import Trajectory, TrajectoryBuffer


def one_trajectory(path: Path) -> Trajectory:
    """The single trajectory `path` imports to (fails with the quarantine details otherwise)."""
    recs = list(read_path(path))
    assert len(recs) == 1 and isinstance(recs[0], Trajectory), [getattr(r, "detail", r) for r in recs]
    return recs[0]


def assert_schema_valid(trajs: list[Trajectory]) -> None:
    """The records convert to Arrow tables with no schema violations."""
    buf = TrajectoryBuffer()
    for t in trajs:
        buf.add(t, "test", "test", "1")
    assert validate(pa.Table.from_batches([buf.traj.take()]), "trajectories") == []
    assert validate(pa.Table.from_batches([buf.turns.take()]), "turns") == []
