"""Parquet inputs: the shards of datasets published on the Hugging Face Hub (and any other Parquet
file of trajectories), each row one record, read as a JSON line with the same fields would be.

Parquet cannot leave a field out: a struct column has every key that any row has, null where a row
had none (a dataset made from JSON lines, as the Hub's are, turns each absent key into a null). Null
fields are therefore read as absent, at every depth, so that a row reaches the importers as the JSON
line it was made from most likely was; null list elements stay, their place counts.

Rows are read in batches of 64, page by page, so memory follows the largest row, not the file or its
row groups. A Parquet file needs random access (its footer comes last): plain
files are read in place, compressed ones and archive members are first copied to a temporary file.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from collectors.base import ImportContext
from pipelines.sources import InputError, ReadLimits, stream_problem

MAGIC = b"PAR1"
BATCH_ROWS = 64


def is_parquet(head: bytes) -> bool:
    return head.startswith(MAGIC)


@dataclass(frozen=True)
class Row:
    """One row of a Parquet input: its 0-based index in the file and its values."""

    index: int
    value: dict[str, Any]


@dataclass(frozen=True)
class BadRows:
    """Rows that cannot be read: one quarantine row stands for `first`..`last`."""

    first: int
    last: int
    reason: str
    detail: str

    @property
    def locator(self) -> str:
        return f"row:{self.first}" if self.first == self.last else f"rows:{self.first}-{self.last}"


def parquet_rows(stream: IO[bytes], ctx: ImportContext, limits: ReadLimits) -> Iterator[Row | BadRows]:
    """Every row of the Parquet file in `stream`, in order. A file that is not readable Parquet at all, or
    holds no rows, raises `InputError`; rows past `--max-record-mb`, and the rest of a file that breaks off midway,
    come as `BadRows`."""
    with _seekable(stream) as f:
        try:
            # buffered, not pre-buffered: column chunks are read a page at a time, so a row group of any
            # size costs a few pages of memory (docs/benchmarks.md, "Parquet input")
            pf = pq.ParquetFile(f, page_checksum_verification=True, buffer_size=1 << 20, pre_buffer=False)
        except (pa.ArrowException, OSError) as e:
            raise InputError("corrupt_input", f"{ctx.source}: not a readable Parquet file: {e}") from e
        total = pf.metadata.num_rows
        if total == 0:
            raise InputError("empty_input", f"{ctx.source}: the Parquet file holds no rows")
        done = 0
        try:
            for batch in pf.iter_batches(batch_size=BATCH_ROWS):
                yield from _batch_rows(batch, done, ctx, limits)
                done += batch.num_rows
        except (pa.ArrowException, OSError) as e:
            yield BadRows(done, max(done, total - 1), "corrupt_input",
                          f"{ctx.source}: the Parquet data breaks off at row {done} of {total} "
                          f"({type(e).__name__}: {e}); the rows before it are read")


def _batch_rows(batch: pa.RecordBatch, start: int, ctx: ImportContext, limits: ReadLimits) -> Iterator[Row | BadRows]:
    limit = limits.max_record_bytes
    if batch.nbytes <= limit:
        for i, value in enumerate(batch.to_pylist(maps_as_pydicts="lossy")):
            yield Row(start + i, without_nulls(value))
        return
    for i in range(batch.num_rows):  # only a batch that holds a huge row pays for row-sized slices
        one = batch.slice(i, 1)
        if one.nbytes > limit:
            yield BadRows(start + i, start + i, "record_too_large",
                          f"{ctx.source} row {start + i}: {one.nbytes} bytes, larger than the {limit}-byte record limit")
        else:
            yield Row(start + i, without_nulls(one.to_pylist(maps_as_pydicts="lossy")[0]))


def without_nulls(value: Any) -> Any:
    """`value` with every null field of every object left out (list elements kept)."""
    if type(value) is dict:
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if type(value) is list:
        return [without_nulls(v) for v in value]
    return value


@contextmanager
def _seekable(stream: IO[bytes]) -> Iterator[IO[bytes]]:
    """The input as a seekable file: the plain file itself, or a temporary copy of a decompressed stream."""
    if getattr(stream, "_worldline_raw", None) is None and stream.seekable():
        stream.seek(0)
        yield stream
        return
    with tempfile.TemporaryFile(prefix="worldline-parquet-") as copy:
        shutil.copyfileobj(stream, copy, 1 << 20)  # the stream's own guards bound what it gives
        if (problem := stream_problem(stream)) is not None:
            raise InputError("corrupt_input", f"{problem}; a Parquet file cut short cannot be read")
        copy.seek(0)
        yield copy
