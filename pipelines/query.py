"""DuckDB over the corpus: one view per table, so every query sees the same names.

Views: `trajectories`, `turns`, `quarantine`, and one per side table that later stages write
under `CORPUS/side/<name>/` (Parquet files keyed by `trajectory_id`, `turn_index`), and the views
derived from those (`kept_turns`, `kept_trajectories`: see `pipelines.views`).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import decimal
import fcntl
import io
import math
import os
import re
import shutil
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import orjson
import pyarrow as pa

from pipelines.store import FAILED_READS, TABLE_SCHEMAS, Corpus, superseded_quarantine
from pipelines.views import define_derived_views

T = TypeVar("T")


def views(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Names of the views and tables a connection has (which corpus tables exist)."""
    return {r[0] for r in con.sql("SELECT table_name FROM information_schema.tables").fetchall()}


def sql_str(s: str) -> str:
    """A SQL string literal (DuckDB strings have no backslash escapes: only quotes need care)."""
    return "'" + s.replace("'", "''") + "'"


def parquet_list(paths: list[Path]) -> str:
    """A SQL list of file names, for `read_parquet`."""
    return "[" + ", ".join(sql_str(str(p)) for p in paths) + "]"


WORK_OWNER = ".owner"  # in each work folder: locked (flock) by the run using it, for as long as it does
STALE_UNLOCKED_S = 60.0  # an unlocked owner file this old is a dead run's (a new run locks it at once)
STALE_UNOWNED_S = 3600.0  # a work folder without an owner file this old is a killed run's (or an older version's)


@contextmanager
def spill_workspace(con: duckdb.DuckDBPyConnection, root: Path, stage: str, memory_limit: str) -> Iterator[Path]:
    """DuckDB bounded by `memory_limit`, spilling beyond it to a work folder `root/.STAGE-work-PID-HEX`
    (also the stage's own scratch space), removed afterwards.

    A run that is killed (SIGKILL, out of memory, a lost machine) cannot remove its folder, which
    may hold gigabytes of spilled data; so each run holds a lock on its folder's owner file, and
    the next run of any stage removes the work folders whose lock is free (`remove_stale_workspaces`)."""
    work = root / f".{stage}-work-{os.getpid()}-{os.urandom(3).hex()}"
    work.mkdir(parents=True)  # DuckDB creates its spill folder in it, not the folders above
    owner = os.open(work / WORK_OWNER, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(owner, fcntl.LOCK_EX)  # released by the kernel however this process ends
        remove_stale_workspaces(root)
        con.execute(f"SET memory_limit = {sql_str(memory_limit)}")
        con.execute(f"SET temp_directory = {sql_str(str(work / 'duckdb'))}")
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        os.close(owner)


def abandoned(lock_file: Path, unlocked_after_s: float = STALE_UNLOCKED_S, now: float | None = None) -> bool:
    """Whether the process that made `lock_file` and locked it (flock, released by the kernel however
    the process ends) is gone: nobody holds the lock, and the file was made over `unlocked_after_s`
    ago (its maker takes the lock a moment after making it). A file that is gone is not abandoned."""
    try:
        fd = os.open(lock_file, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if (time.time() if now is None else now) - os.fstat(fd).st_mtime < unlocked_after_s:
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def remove_stale_workspaces(root: Path, unlocked_after_s: float = STALE_UNLOCKED_S,
                            unowned_after_s: float = STALE_UNOWNED_S) -> list[Path]:
    """Remove the work folders (`.STAGE-work-*`) under `root` that no live run holds: nobody holds
    the lock on their owner file, made over `unlocked_after_s` ago (a run that has just made it
    takes the lock a moment later), or they have no owner file and are over `unowned_after_s`
    old. Returns what was removed."""
    removed = []
    now = time.time()
    for work in sorted(root.glob(".*-work-*")):
        owner = work / WORK_OWNER
        if owner.is_file():
            if not abandoned(owner, unlocked_after_s, now):
                continue  # a live run's, or one just made (or removed meanwhile by its run)
        else:
            try:
                if not work.is_dir() or now - work.stat().st_mtime < unowned_after_s:
                    continue
            except FileNotFoundError:
                continue  # removed meanwhile by its run
        shutil.rmtree(work, ignore_errors=True)
        removed.append(work)
    return removed


_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]*")  # a side table's name: its folder under side/, its view


def connect(corpus_dir: Path | str, con: duckdb.DuckDBPyConnection | None = None,
            committed: dict[str, list[Path]] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the corpus views defined, over the committed batches' files
    (`committed`: the stage's own list of them, `Corpus.committed_files`): one state of the corpus,
    whatever a writer does meanwhile."""
    corpus = Corpus(corpus_dir)
    m = corpus.require_manifest() if committed is None else corpus.manifest()  # read once: side tables below too
    if committed is None:  # else the caller read the manifest (and so checked the corpus) already
        committed = corpus.committed_files(m)
    entries: dict = m.get("side") or {}
    con = con or duckdb.connect()
    gone = superseded_quarantine(m)  # failed reads of inputs read since: no longer missing data
    for name, schema in TABLE_SCHEMAS.items():
        if committed[name]:
            where = ""
            if name == "quarantine" and gone:
                where = (f" WHERE NOT (reason IN {tuple(FAILED_READS)!r} AND input_sha256 IN "
                         f"({', '.join(sql_str(s) for s in gone)}))")
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({parquet_list(committed[name])}, "
                        f"hive_partitioning=false, union_by_name=true){where}")
        else:
            con.register(f"_empty_{name}", pa.table({f.name: pa.array([], f.type) for f in schema}))
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _empty_{name}")
    side = corpus.root / "side"
    side_names = []
    blind: dict[str, str] = {}  # damaged side tables whose columns are not known: message
    if side.is_dir():
        # a table name only: a copy such as `cleaning.bak`, `cleaning-old` or `Cleaning` (DuckDB's names
        # ignore case) would be another schema's view, a syntax error, or would replace `cleaning`
        for d in sorted(p for p in side.iterdir() if p.is_dir() and _TABLE_NAME.fullmatch(p.name)):
            # the files listed, not a glob pattern: a corpus path may hold `[` or `*`, which a pattern would read as such
            files = sorted(f for f in d.rglob("*.parquet") if not f.name.startswith("."))
            if not files:
                continue
            try:
                con.execute(f"CREATE OR REPLACE VIEW {d.name} AS SELECT * FROM read_parquet({parquet_list(files)}, "
                            "hive_partitioning=false, union_by_name=true)")
            except duckdb.Error as e:
                reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
                if (message := _damaged_side_view(con, d.name, entries.get(d.name) or {}, f"cannot be read ({reason})")) is not None:
                    blind[d.name] = message
                    continue
            side_names.append(d.name)
    # a table the manifest records whose file is gone: as a damaged one (`kept_*` without the cleaning
    # verdicts would silently keep everything clean dropped)
    for name, entry in entries.items():
        if name not in side_names and name not in blind and isinstance(entry, dict) and _TABLE_NAME.fullmatch(name):
            if (message := _damaged_side_view(con, name, entry, "is recorded in the manifest but its file is gone")) is not None:
                blind[name] = message
            else:
                side_names.append(name)  # its view fails when read, and so do the `kept_*` built on it
    define_derived_views(con, side_names)  # kept_turns, kept_trajectories (pipelines.views)
    for name in KEPT_INPUTS & set(blind):  # they would silently leave that table's verdicts out
        for view in ("kept_turns", "kept_trajectories"):
            con.execute(_failing_view(view, blind[name]))
    return con


KEPT_INPUTS = {"cleaning", "duplicates", "shared_prefixes"}  # the side tables `kept_*` are built from


def _failing_view(name: str, message: str, rows_of: str | None = None) -> str:
    """A view whose every read fails with `message` (a filter, so that `count(*)` evaluates it too); with
    the columns of the registered table `rows_of`, else one column."""
    cols, source = ("e.*", f"{rows_of} e, ") if rows_of else ("d AS damaged", "")
    return f"CREATE OR REPLACE VIEW {name} AS SELECT {cols} FROM {source}(SELECT error({sql_str(message)}) AS d) WHERE d IS NULL"


def _damaged_side_view(con: duckdb.DuckDBPyConnection, name: str, entry: dict, what: str) -> str | None:
    """A side table whose file DuckDB cannot read (or that is gone: `what` says which): a view with its
    columns (from the manifest) that fails, naming the table and the stage that rewrites it, when a
    query reads it; the corpus's other views work as before. Without its columns in the manifest
    (written before they were recorded) the view has one column, and the message is returned
    (`kept_*` cannot be built on it)."""
    message = f"side table {name} {what}; run `worldline {entry.get('stage') or 'the stage that wrote it'}` again to rewrite it"
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(entry["arrow_schema"])))
    except (KeyError, TypeError, ValueError, pa.ArrowInvalid):
        con.execute(_failing_view(name, message))
        return message
    con.register(f"_damaged_{name}", pa.table({f.name: pa.array([], f.type) for f in schema}))
    con.execute(_failing_view(name, message, f"_damaged_{name}"))
    return None


def run_query(corpus_dir: Path | str, sql: str) -> tuple[list[str], list[tuple]]:
    con = connect(corpus_dir)
    rel = con.sql(sql)
    if rel is None:  # a statement without a result
        return [], []
    return list(rel.columns), rel.fetchall()


def write_query(corpus_dir: Path | str, sql: str, fmt: str, out: Any, batch_rows: int = 10_000,
                con: duckdb.DuckDBPyConnection | None = None) -> int:
    """Run `sql` and write its result to the text stream `out` as `render` would (plus a newline).
    csv and json are written batch by batch, so memory does not grow with the result; a table needs
    every row for its column widths. Returns the number of rows. `con`: the corpus's connection,
    when the caller made it (`connect`)."""
    if fmt not in ("table", "csv", "json"):
        raise ValueError(f"unknown format {fmt!r}; use table, csv or json")
    if not sql.strip():
        raise ValueError("the SQL is empty: give a statement, e.g. \"SELECT count(*) FROM trajectories\"")
    cur = (con or connect(corpus_dir)).execute(sql)
    # None (only a comment) or no description (a statement without a result): no rows
    columns = [d[0] for d in cur.description] if cur is not None and cur.description is not None else []
    floats = [i for i, d in enumerate(cur.description or []) if str(d[1]) == "FLOAT"] if columns else []
    if fmt == "table":
        rows = _as_float32(cur.fetchall(), floats) if columns else []
        out.write(render(columns, rows, fmt) + "\n")
        return len(rows)
    batches = iter(lambda: _as_float32(cur.fetchmany(batch_rows), floats), []) if columns else []
    return _write_rows(out, columns, batches, fmt)


def _as_float32(rows: list[tuple], floats: list[int]) -> list[tuple]:
    """FLOAT columns' values as the shortest decimal that reads back as the same float32 (`0.1`, as
    DuckDB prints it), not the float64 they widen to (`0.10000000149011612`)."""
    if not floats or not rows:
        return rows
    out = []
    for r in rows:
        r = list(r)
        for i in floats:
            if r[i] is not None and math.isfinite(r[i]):
                r[i] = float(str(np.float32(r[i])))
        out.append(tuple(r))
    return out


def is_interrupted(e: BaseException) -> bool:
    """DuckDB's answer to Ctrl-C during a query (a RuntimeError): an interruption to pass on (exit 130), not an
    error to report as a failed check or a damaged table."""
    return isinstance(e, RuntimeError) and str(e) == "Query interrupted"


def interruptible(con: duckdb.DuckDBPyConnection, work: Callable[[], T]) -> T:
    """`work()` (which uses `con`) in a helper thread, so that Ctrl-C always stops it: DuckDB polls for
    SIGINT only while the main thread drives the query, and now and then does not (a query went on
    for minutes through repeated Ctrl-C). The main thread waits, and on KeyboardInterrupt interrupts
    the connection and raises it again."""
    box: dict[str, Any] = {}

    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e
        finally:
            done.set()

    # waited for with an Event, not `Thread.join`: a KeyboardInterrupt inside `join` can leave the thread
    # marked as ended while DuckDB still runs in it (bpo-45274), and the interpreter's exit then aborts
    t = threading.Thread(target=run, name="worldline-query", daemon=True)
    t.start()
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        con.interrupt()
        done.wait(10)  # DuckDB stops at its next check; a daemon thread cannot hold the exit up
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]


def _write_rows(out: Any, columns: list[str], batches: Iterable[list[tuple]], fmt: str) -> int:
    """csv or json of the rows in `batches`, each batch written as it comes, ending with a newline."""
    n = 0
    if fmt == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(columns)
        for batch in batches:
            w.writerows([_csv_cell(v) for v in r] for r in batch)
            n += len(batch)
        return n
    keys = unique_names(columns)
    out.write("[")
    for batch in batches:
        if batch:
            text = orjson.dumps([{c: _jsonable(v) for c, v in zip(keys, r, strict=True)} for r in batch], default=str).decode()
            out.write(("," if n else "") + text[1:-1])
            n += len(batch)
    out.write("]\n")
    return n


def _jsonable(v: Any) -> Any:
    """JSON for any DuckDB value, losing nothing: NaN and ±inf as the strings "NaN", "Infinity",
    "-Infinity" (JSON has no such numbers; null would read as a missing value), bytes as base64,
    dates and times ISO 8601, lists and structs recursively."""
    if isinstance(v, float):
        if v != v:
            return "NaN"
        if v in (math.inf, -math.inf):
            return "Infinity" if v > 0 else "-Infinity"
        return v
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if type(v) is int and not _INT64_MIN <= v <= _UINT64_MAX:  # HUGEINT: a JSON number still, past orjson's 64 bits
        return orjson.Fragment(str(v))
    if isinstance(v, decimal.Decimal):  # DECIMAL: the number exactly, not a string (nor a float's rounding)
        return orjson.Fragment(str(v))
    if isinstance(v, dt.timedelta):  # INTERVAL: an ISO 8601 duration, not Python's "3 days, 0:00:05"
        return _iso_duration(v)
    return v


def _iso_duration(d: dt.timedelta) -> str:
    sign, d = ("-", -d) if d < dt.timedelta(0) else ("", d)
    secs = f"{d.seconds}.{d.microseconds:06d}".rstrip("0") if d.microseconds else str(d.seconds)
    time = f"T{secs}S" if d.seconds or d.microseconds else ""
    return f"{sign}P{d.days}D{time}" if d.days or not time else f"{sign}P{time}"


_INT64_MIN, _UINT64_MAX = -(1 << 63), (1 << 64) - 1


def _csv_cell(v: Any) -> Any:
    """Lists and structs as JSON text, bytes as base64 (not Python's reprs); the rest as csv writes it."""
    if isinstance(v, list | tuple | dict):
        return orjson.dumps(_jsonable(v), default=str).decode()
    if isinstance(v, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(v)).decode()
    if isinstance(v, dt.timedelta):  # as in JSON: an ISO 8601 duration
        return _iso_duration(v)
    if isinstance(v, decimal.Decimal):  # as DuckDB prints it: 0.0000000000, not 0E-10
        return format(v, "f")
    return v


# what a terminal would act on instead of showing: C0/C1 controls and the bidirectional overrides
_CONTROL = {c: f"\\u{c:04x}" for c in [*range(0x20), *range(0x7F, 0xA0), 0x200E, 0x200F, *range(0x202A, 0x202F),
                                         *range(0x2066, 0x206A)]}
_CONTROL.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})


def unique_names(columns: list[str]) -> list[str]:
    """Column names as JSON object keys: a repeated name (`SELECT t.domain, s.domain`) gets `_1`, `_2`, ...
    as DuckDB names the columns of such a subquery, instead of one value overwriting the other."""
    taken = set(columns)
    out: list[str] = []
    seen: set[str] = set()
    for c in columns:
        name, k = c, 0
        while name in seen or (k and name in taken):  # not a name another column has
            k += 1
            name = f"{c}_{k}"
        seen.add(name)
        out.append(name)
    return out


def _columns(s: str) -> int:
    """Terminal columns of `s`: two for a wide (CJK) character."""
    if s.isascii():
        return len(s)
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in s)


def render(columns: list[str], rows: list[tuple], fmt: str = "table", max_width: int = 60) -> str:
    if fmt in ("csv", "json"):
        buf = io.StringIO()
        _write_rows(buf, columns, [rows], fmt)
        return buf.getvalue().removesuffix("\n")
    if fmt != "table":
        raise ValueError(f"unknown format {fmt!r}; use table, csv or json")

    def cell(v: Any) -> str:
        s = "NULL" if v is None else str(_csv_cell(v))  # lists, structs, bytes, intervals as csv writes them
        s = s.translate(_CONTROL)
        return s if len(s) <= max_width else s[: max_width - 1] + "…"

    def pad(s: str, width: int) -> str:  # by the columns a terminal gives it: a CJK character takes two
        return s + " " * (width - _columns(s))

    cells = [[cell(v) for v in r] for r in rows]
    columns = [c.translate(_CONTROL) for c in columns]  # a column named after data (PIVOT) may hold escapes too
    widths = [max([_columns(c)] + [_columns(r[i]) for r in cells]) for i, c in enumerate(columns)]
    out = [" │ ".join(pad(c, w) for c, w in zip(columns, widths, strict=True)), "─┼─".join("─" * w for w in widths)]
    out += [" │ ".join(pad(v, w) for v, w in zip(r, widths, strict=True)) for r in cells]
    out.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(out)
