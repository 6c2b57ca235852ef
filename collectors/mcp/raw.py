"""The raw JSON-RPC messages of MCP sessions: side table `mcp_raw` (zstd inside Parquet).

Layout: `CORPUS/side/mcp_raw/part-<run>-<seq>.parquet`, one row per (trajectory_id, turn_index):
the messages of that turn (request, notifications, the server's response, and what the fault
proxy delivered instead); `turn_index` null holds the session's own traffic (initialize, the
listings, shutdown). Each row's `messages_zstd` is a zstd frame of JSON lines
`{"dir": "c2s"|"s2c"|"p2c", "t": seconds since session start, "raw": "<message text>", "note"?}`.
DuckDB sees the table as the view `mcp_raw` (pipelines.query makes a view per side folder).

Why a side table and not turn metadata: raw traffic is several times the size of the observation
and most readers never want it; here it compresses well (zstd over a whole row) and stays out of
the `turns` scans. Files are written after the turns they belong to have been committed, each
under a temporary name and renamed into place.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from collectors.mcp.wire import WireMessage
from schemas.tables import _f, side_table_schema

TABLE = "mcp_raw"

MCP_RAW = side_table_schema([
    _f("messages_zstd", pa.binary(), "zstd frame of JSON lines {dir, t, raw, note?}: the turn's raw JSON-RPC", False),
    _f("n_messages", pa.int32(), "number of messages in the frame", False),
    _f("raw_bytes", pa.int64(), "uncompressed size of the JSON lines", False),
    _f("methods", pa.string(), "comma-separated methods of the client requests in the row"),
])


@dataclass(slots=True)
class RawRow:
    trajectory_id: str
    turn_index: int | None
    messages: list[WireMessage]


def encode(messages: list[WireMessage]) -> bytes:
    out = bytearray()
    for m in messages:
        d: dict[str, Any] = {"dir": m.dir, "t": round(m.t, 6), "raw": m.raw}
        if m.note:
            d["note"] = m.note
        out += orjson.dumps(d)
        out += b"\n"
    return bytes(out)


def _methods(messages: list[WireMessage]) -> str | None:
    names = [getattr(m.msg, "method", None) for m in messages if m.dir == "c2s" and hasattr(m.msg, "id")]
    return ",".join(n for n in names if n) or None


class RawWriter:
    """Buffers raw rows and writes them as one Parquet file per flush."""

    def __init__(self, corpus_dir: Path | str, run_id: str, level: int = 3):
        self.dir = Path(corpus_dir) / "side" / TABLE
        self.run_id = run_id
        self.cctx = zstandard.ZstdCompressor(level=level)
        self.rows: list[RawRow] = []
        self.seq = 0
        self.files: list[Path] = []
        self.bytes_in = 0
        self.bytes_out = 0

    def add(self, rows: list[RawRow]) -> None:
        self.rows.extend(rows)

    def flush(self) -> Path | None:
        if not self.rows:
            return None
        cols: dict[str, list] = {f.name: [] for f in MCP_RAW}
        for r in self.rows:
            data = encode(r.messages)
            z = self.cctx.compress(data)
            self.bytes_in += len(data)
            self.bytes_out += len(z)
            cols["trajectory_id"].append(r.trajectory_id)
            cols["turn_index"].append(r.turn_index)
            cols["messages_zstd"].append(z)
            cols["n_messages"].append(len(r.messages))
            cols["raw_bytes"].append(len(data))
            cols["methods"].append(_methods(r.messages))
        self.rows = []
        table = pa.table({f.name: pa.array(cols[f.name], f.type) for f in MCP_RAW}, schema=MCP_RAW)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seq += 1
        final = self.dir / f"part-{self.run_id}-{self.seq:05d}.parquet"
        tmp = self.dir / f".{final.name}.tmp-{os.getpid()}"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, final)
        self.files.append(final)
        return final


def decode(blob: bytes) -> list[dict[str, Any]]:
    """The messages of one row, as dicts."""
    data = zstandard.ZstdDecompressor().decompress(blob)
    return [orjson.loads(line) for line in data.splitlines() if line]


def read_raw(corpus_dir: Path | str, trajectory_id: str, turn_index: int | None) -> list[dict[str, Any]]:
    """The raw messages of one turn (or, with `turn_index=None`, of the session's own traffic)."""
    from pipelines.query import run_query

    tid = trajectory_id.replace("'", "''")
    cond = "turn_index IS NULL" if turn_index is None else f"turn_index = {int(turn_index)}"
    _, rows = run_query(corpus_dir, f"SELECT messages_zstd FROM {TABLE} WHERE trajectory_id = '{tid}' AND {cond}")
    out: list[dict[str, Any]] = []
    for (blob,) in rows:
        out.extend(decode(blob))
    return out
