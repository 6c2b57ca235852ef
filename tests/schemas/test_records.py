"""The row buffers that turn records into Arrow batches (schemas.records)."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pytest

from schemas.records import (
    QuarantineRecord,
    Trajectory,
    TrajectoryBuffer,
    Turn,
    digest,
    quarantine_batch,
    trajectory_id,
)
from schemas.tables import SCHEMA_VERSION, TRAJECTORIES, TURNS
from schemas.validate import validate


def _traj(domain: str, digest: str, turns: list[Turn], **kw) -> Trajectory:
    return Trajectory(domain=domain, source_format="fmt", native_id=None, record_digest=digest, turns=turns, **kw)


def test_turn_keys_are_expanded_per_trajectory() -> None:
    """trajectory_id and domain repeat over a trajectory's turns, turn_index restarts at 0 for each,
    and a trajectory with no turns adds a trajectory row and no turn row."""
    a = _traj("terminal", "a", [Turn(action="ls", observation="x", exit_code=0), Turn(action="pwd", observation="/")])
    empty = _traj("swe", "e", [], task="nothing")
    b = _traj("web", "b", [Turn(kind="message", thought="hm"), Turn(action="c", is_error=True), Turn(action="d")])
    buf = TrajectoryBuffer()
    for t in (a, empty, b):
        buf.add(t, "src", "Imp", "7")
    assert (len(buf.traj), len(buf.turns)) == (3, 5)
    assert buf.turns.nbytes == len("ls" "x" "pwd" "/" "hm" "c" "d")
    traj, turns = buf.traj.take(), buf.turns.take()
    assert traj.schema == TRAJECTORIES and turns.schema == TURNS
    assert validate(pa.Table.from_batches([traj]), "trajectories") == []
    assert validate(pa.Table.from_batches([turns]), "turns") == []
    ids = [a.trajectory_id, empty.trajectory_id, b.trajectory_id]
    assert traj.column("trajectory_id").to_pylist() == ids
    assert traj.column("num_turns").to_pylist() == [2, 0, 3]
    assert traj.column("schema_version").to_pylist() == [SCHEMA_VERSION] * 3
    assert traj.column("task").to_pylist() == [None, "nothing", None]
    assert traj.column("importer").to_pylist() == ["Imp"] * 3
    rows = turns.to_pylist()
    assert [(r["trajectory_id"], r["turn_index"], r["domain"]) for r in rows] == [
        (ids[0], 0, "terminal"), (ids[0], 1, "terminal"),
        (ids[2], 0, "web"), (ids[2], 1, "web"), (ids[2], 2, "web"),
    ]
    assert [r["action"] for r in rows] == ["ls", "pwd", None, "c", "d"]
    assert [r["kind"] for r in rows] == ["env", "env", "message", "env", "env"]
    assert [r["exit_code"] for r in rows] == [0, None, None, None, None]
    assert [r["is_error"] for r in rows] == [None, None, None, True, None]
    # take() empties the buffer; the next batch starts again at the first trajectory
    assert (len(buf.traj), len(buf.turns), buf.turns.nbytes) == (0, 0, 0)
    buf.add(b, "src", "Imp", "7")
    again = buf.turns.take()
    assert again.column("turn_index").to_pylist() == [0, 1, 2]
    assert again.column("trajectory_id").to_pylist() == [ids[2]] * 3


def test_empty_buffer_takes_empty_batches() -> None:
    buf = TrajectoryBuffer()
    assert buf.traj.take().num_rows == 0
    turns = buf.turns.take()
    assert turns.num_rows == 0 and turns.schema == TURNS


def test_a_value_arrow_cannot_hold_raises() -> None:
    """ingest relies on this to re-read a group with every record checked (process_group)."""
    buf = TrajectoryBuffer()
    buf.add(_traj("mcp", "x", [Turn(action="a", tool_call_id=7)]), "src", "Imp", "1")  # type: ignore[arg-type]
    with pytest.raises((pa.ArrowException, TypeError)):
        buf.turns.take()


def test_quarantine_batch_rows() -> None:
    recs = [QuarantineRecord("f.json", "line:3", "invalid_json", "f.json line 3: bad", None, "s" * 64, "{"),
            QuarantineRecord("g.json", "$", "empty_input")]
    batch = quarantine_batch(recs)
    assert batch.to_pylist() == [
        {"source": "f.json", "locator": "line:3", "reason": "invalid_json", "detail": "f.json line 3: bad",
         "importer": None, "input_sha256": "s" * 64, "excerpt": "{"},
        {"source": "g.json", "locator": "$", "reason": "empty_input", "detail": None,
         "importer": None, "input_sha256": None, "excerpt": None},
    ]


@pytest.mark.parametrize("parts, data", [
    (("abc", "line:7"), b"abc\0line:7\0"),
    (("",), b"\0"),
    ((), b""),
    (("a\0b", "\u00e9", "\udc80"), b"a\0b\0\xc3\xa9\0\xed\xb2\x80\0"),  # a lone surrogate passes through
    ((b"\xff", "x"), b"\xff\0x\0"),
])
def test_digest_hashes_each_part_then_a_nul(parts: tuple, data: bytes) -> None:
    """The ids of every corpus depend on these bytes: text and bytes parts, each followed by NUL."""
    assert digest(*parts) == hashlib.sha256(data).hexdigest()


def test_trajectory_id_is_the_digest_of_format_and_record() -> None:
    assert trajectory_id("fireact-chat", "d" * 64) == hashlib.sha256(b"fireact-chat\0" + b"d" * 64 + b"\0").hexdigest()[:32]
