"""Python records that importers and collectors yield, and their columnar conversion to Arrow.

Records are plain dataclasses (cheap, picklable); `RowBuffer` keeps their values in one flat list
in schema column order, so a batch of many thousand turns becomes Arrow arrays without an
intermediate list of dicts or of row tuples.
"""

from __future__ import annotations

import hashlib
import json
import operator
from dataclasses import dataclass, field, fields
from datetime import datetime
from itertools import chain
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from schemas.tables import QUARANTINE, SCHEMA_VERSION, TRAJECTORIES, TURNS


def dumps(obj: Any) -> str | None:
    """Deterministic compact JSON (sorted keys) for the JSON-valued string columns. A string is taken
    as JSON text already; one that does not parse (a model's malformed tool arguments, say) is kept,
    unchanged, as a JSON string, so that every value of these columns parses."""
    if obj is None:
        return None
    if isinstance(obj, str):
        try:
            orjson.loads(obj)
            return obj
        except orjson.JSONDecodeError:
            return orjson.dumps(obj).decode()
    return value_json(obj)


def value_json(obj: Any) -> str | None:
    """`dumps` for a decoded JSON value (MCP `arguments`): a string is a value and is quoted, never
    taken for JSON text. An integer past 64 bits (a JSON Schema `maximum` of 2**128 - 1, a factorial
    in a tool result), which orjson refuses, is written exactly by the standard library instead."""
    if obj is None:
        return None
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except TypeError:  # "Integer exceeds 64-bit range"
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def digest(*parts: str | bytes) -> str:
    """sha256 of each part's bytes (text as UTF-8), each followed by a NUL byte.

    Two of these per imported trajectory (its record digest and its id): text parts are joined and
    encoded once and hashed in one call, which takes half the time of an update per part."""
    if not parts:
        return _EMPTY_SHA256
    try:
        data = "\0".join(parts).encode("utf-8", "surrogatepass") + b"\0"  # type: ignore[arg-type]
    except TypeError:  # a bytes part
        data = b"".join((p.encode("utf-8", "surrogatepass") if isinstance(p, str) else p) + b"\0" for p in parts)
    return hashlib.sha256(data).hexdigest()


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def trajectory_id(source_format: str, record_digest: str) -> str:
    """Stable id from the format and the record's digest. An imported record's digest is its input's
    sha256 and its locator (`ImportContext.record_digest`; a tar member's input is the archive's sha256
    and the member's path): the same input gives the same ids wherever
    it lies or whatever it is called, and an edited input gives all its records new ids (the records
    are not re-serialised to hash them one by one; dedup finds equal content across inputs)."""
    return digest(source_format, record_digest)[:32]


@dataclass(slots=True)
class Turn:
    kind: str = "env"
    action: str | None = None
    observation: str | None = None
    observation_kind: str | None = None
    tool_name: str | None = None
    tool_args: str | None = None
    tool_call_id: str | None = None
    thought: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    exit_code: int | None = None
    is_error: bool | None = None
    reward: float | None = None
    started_at: datetime | None = None
    duration_s: float | None = None
    perturbation: str | None = None
    state: str | None = None
    locator: str | None = None
    metadata: str | None = None


@dataclass(slots=True)
class Trajectory:
    domain: str
    source_format: str
    native_id: str | None
    record_digest: str
    turns: list[Turn] = field(default_factory=list)
    task: str | None = None
    action_space: str | None = None
    initial_state: str | None = None
    agent: str | None = None
    model: str | None = None
    outcome: str | None = None
    reward: float | None = None
    env_fingerprint: str | None = None
    collected_at: datetime | None = None
    license: str | None = None
    metadata: str | None = None
    locator: str = "$"
    source: str | None = None  # set by the reader: the file (or archive member) it came from

    @property
    def trajectory_id(self) -> str:
        return trajectory_id(self.source_format, self.record_digest)


@dataclass(slots=True)
class QuarantineRecord:
    source: str
    locator: str
    reason: str
    detail: str | None = None
    importer: str | None = None
    input_sha256: str | None = None
    excerpt: str | None = None


class RecordError(ValueError):
    """A record that cannot be converted; the message names the record and turn."""

    def __init__(self, reason: str, detail: str, locator: str | None = None):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.locator = locator


_TURN_FIELDS = [f.name for f in fields(Turn)]


class RowBuffer:
    """Rows of one table flattened into a single list in schema column order; `take()` slices each
    column out with a strided copy. Appending a row is one C-level `list +=` of a tuple, and there
    is no transposition of row tuples (`zip(*rows)` cost more than building the Arrow arrays)."""

    def __init__(self, schema: pa.Schema, keys: int = 0):
        self.schema = schema
        self.keys = keys  # the first `keys` columns are not in `values`: a subclass supplies them (TurnBuffer)
        self.width = len(schema) - keys
        self.values: list = []
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.values) // self.width

    def columns(self) -> list[pa.Array]:
        """The columns held in `values` (all but the first `keys`), in schema order."""
        w, v, k = self.width, self.values, self.keys
        return [pa.array(v[j::w], type=self.schema.field(k + j).type) for j in range(w)]

    def take(self) -> pa.RecordBatch:
        arrays = self.columns()
        self.values = []
        self.nbytes = 0
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)


class TurnBuffer(RowBuffer):
    """Turn rows without their first three columns (trajectory_id, turn_index, domain): those are
    the same for every turn of a trajectory, so they are kept once per trajectory and expanded
    in Arrow on `take()`. A trajectory's turns are then appended with no Python loop per turn."""

    def __init__(self) -> None:
        super().__init__(TURNS, keys=3)
        self.ids: list[str] = []
        self.domains: list[str] = []
        self.counts: list[int] = []

    def add(self, tid: str, domain: str, turns: list[Turn]) -> None:
        self.ids.append(tid)
        self.domains.append(domain)
        self.counts.append(len(turns))
        self.values += chain.from_iterable(map(_TURN_GET, turns))
        # the flush trigger counts the large text columns only
        self.nbytes += sum(map(len, filter(None, chain.from_iterable(map(_TEXT_GET, turns)))))

    def columns(self) -> list[pa.Array]:
        counts = np.asarray(self.counts, dtype=np.int64)
        owner = pa.array(np.repeat(np.arange(len(counts)), counts))
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        index = (np.arange(int(counts.sum()), dtype=np.int64) - starts).astype(np.int32)
        return [
            pa.array(self.ids, type=pa.string()).take(owner),
            pa.array(index, type=pa.int32()),
            pa.array(self.domains, type=pa.string()).take(owner),
            *super().columns(),
        ]

    def take(self) -> pa.RecordBatch:
        batch = super().take()
        self.ids, self.domains, self.counts = [], [], []
        return batch


_TURN_COLS = TURNS.names
if _TURN_COLS[:3] != ["trajectory_id", "turn_index", "domain"] or sorted(_TURN_COLS[3:]) != sorted(_TURN_FIELDS):
    raise RuntimeError("schemas.tables.TURNS no longer matches the Turn record; update TurnBuffer")
_TURN_GET = operator.attrgetter(*_TURN_COLS[3:])
_TEXT_GET = operator.attrgetter("action", "thought", "observation")
# TrajectoryBuffer.add fills the first five and the last four trajectory columns itself; the
# ones between are the Trajectory record's fields of the same names
_TRAJ_COLS = TRAJECTORIES.names
if (_TRAJ_COLS[:5] != ["trajectory_id", "schema_version", "domain", "source_format", "source"]
        or _TRAJ_COLS[-4:] != ["num_turns", "importer", "importer_version", "metadata"]
        or not set(_TRAJ_COLS[5:-4]) <= {f.name for f in fields(Trajectory)}):
    raise RuntimeError("schemas.tables.TRAJECTORIES no longer matches TrajectoryBuffer.add; update it")
_TRAJ_MID = operator.attrgetter(*_TRAJ_COLS[5:-4])
_Q_GET = operator.attrgetter(*QUARANTINE.names)


class TrajectoryBuffer:
    """Buffers for the trajectories and turns of one domain (see `RowBuffer`, `TurnBuffer`)."""

    def __init__(self) -> None:
        self.traj = RowBuffer(TRAJECTORIES)
        self.turns = TurnBuffer()

    def add(self, t: Trajectory, source: str, importer: str, importer_version: str) -> None:
        tid = t.trajectory_id
        dom = t.domain
        turns = t.turns
        self.traj.values += (tid, SCHEMA_VERSION, dom, t.source_format, source, *_TRAJ_MID(t), len(turns), importer,
                             importer_version, t.metadata)
        self.turns.add(tid, dom, turns)


def _checker(typ: pa.DataType) -> tuple[str, Any]:
    if pa.types.is_string(typ):
        return "text", lambda v: type(v) is str
    if pa.types.is_int32(typ):
        return "a 32-bit integer", lambda v: type(v) is int and -(1 << 31) <= v < (1 << 31)
    if pa.types.is_boolean(typ):
        return "true or false", lambda v: type(v) is bool
    if pa.types.is_floating(typ):
        return "a number", lambda v: type(v) in (float, int)
    if pa.types.is_timestamp(typ):
        return "a datetime", lambda v: isinstance(v, datetime)
    raise TypeError(f"no check for Arrow type {typ}")


_TURN_CHECKS = [(name, *_checker(TURNS.field(name).type)) for name in _TURN_FIELDS]
_TRAJ_CHECKS = [(name, *_checker(TRAJECTORIES.field(name).type)) for name in [*_TRAJ_COLS[5:-4], "metadata"]]


def record_problem(t: Trajectory) -> str | None:
    """What in `t` the Arrow schema cannot hold (a field of the wrong type or range, naming the
    turn), or None. Too costly to run on every record (`bench/ingest_parts.py`); ingest runs it on a
    group whose batch Arrow refused, to find the records to quarantine (`pipelines.ingest.process_group`)."""
    if type(t.domain) is not str or type(t.source_format) is not str:
        return "domain and source_format must be text"
    for name, what, ok in _TRAJ_CHECKS:
        v = getattr(t, name)
        if v is not None and not ok(v):
            return f"{name} must be {what}, got {type(v).__name__} {v!r:.80}"
    for i, turn in enumerate(t.turns):
        for name, what, ok in _TURN_CHECKS:
            v = getattr(turn, name)
            if v is not None and not ok(v):
                return f"turn {i} ({turn.locator}): {name} must be {what}, got {type(v).__name__} {v!r:.80}"
    return None


def quarantine_batch(records: list[QuarantineRecord]) -> pa.RecordBatch:
    buf = RowBuffer(QUARANTINE)
    buf.values = list(chain.from_iterable(map(_Q_GET, records)))
    return buf.take()
