"""Side tables: what a stage says about the corpus, keyed by (`trajectory_id`, `turn_index`).

Each side table is one Parquet file, `CORPUS/side/<name>/data.parquet`, written under a temporary
name in the same directory and renamed into place, so a reader sees the old table or the new one,
never half of one. The file's key-value metadata and the manifest entry `side.<name>` record the
stage, its config fingerprint and the corpus batches it was computed from, so a later run (or a
data contract) can tell whether the table is current.
"""

from __future__ import annotations

import base64
import datetime as dt
import fcntl
import hashlib
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.query import STALE_UNLOCKED_S, abandoned
from pipelines.store import Corpus, write_json_atomic

SIDE_FILE = "data.parquet"


def side_dir(corpus: Corpus, name: str) -> Path:
    return corpus.root / "side" / name


def side_path(corpus: Corpus, name: str) -> Path:
    return side_dir(corpus, name) / SIDE_FILE


def corpus_state(corpus: Corpus, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The committed batches a stage read: a digest to compare later runs against. `manifest`: the one
    the stage's views were made from (`Corpus.committed_files`), so that the state is exactly what it read."""
    m = corpus.manifest() if manifest is None else manifest
    ids = committed_batch_ids(m)
    return {"batches": len(ids), "batches_digest": batches_digest(ids)}


def committed_batch_ids(manifest: dict[str, Any]) -> list[str]:
    """The committed batches' ids, sorted: in the order they were made (an id begins with its time)."""
    return sorted(b["id"] for b in manifest["batches"] if b.get("state") == "committed")


def batches_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def side_schema(corpus: Corpus, name: str) -> pa.Schema | None:
    """The schema (columns and metadata) of a side table's file, or None when there is none or it
    cannot be read: a stage then computes the table again and writes over a damaged file."""
    p = side_path(corpus, name)
    try:
        return pq.read_schema(p) if p.exists() else None
    except (pa.ArrowInvalid, OSError):
        return None


def side_info(corpus: Corpus, name: str) -> dict[str, Any] | None:
    """The manifest entry of a side table, or None if it was never written (or its file is gone)."""
    if not corpus.exists() or not side_path(corpus, name).exists():
        return None
    return corpus.manifest().get("side", {}).get(name)


STAGE_OF = {"cleaning": "clean", "redactions": "clean", "duplicates": "dedup", "shared_prefixes": "dedup",
            "turn_scores": "score"}


def side_entries(corpus: Corpus) -> dict[str, dict[str, Any]]:
    """The manifest entries of the side tables whose files exist, from one read of the manifest."""
    if not corpus.exists():
        return {}
    side = corpus.manifest().get("side", {})
    return {name: e for name, e in side.items() if side_path(corpus, name).exists()}


def verdicts_identity(entry: dict[str, Any] | None) -> str | None:
    """What a stage that filters by another stage's verdicts (dedup by cleaning's) records of them:
    what they leave out (`verdicts_digest`; the settings' fingerprint for a table written without
    one) and the corpus state they judged. Settings that change no verdict (a redaction option)
    leave it the same; the settings alone missed a rerun on a grown corpus."""
    if entry is None or entry.get("fingerprint") is None:
        return None
    what = (entry.get("summary") or {}).get("verdicts_digest") or entry["fingerprint"]
    return f"{what}@{(entry.get('corpus_state') or {}).get('batches_digest')}"


def side_fingerprints(corpus: Corpus, names: tuple[str, ...]) -> dict[str, Any]:
    """Settings fingerprint and judged corpus state of each of `names` that exists: what a stage that
    reads them records, to tell later whether they changed."""
    side = side_entries(corpus)
    return {name: {"fingerprint": side[name].get("fingerprint"), "corpus_state": side[name].get("corpus_state")}
            for name in names if name in side}


def stale_side_tables(corpus: Corpus, names: tuple[str, ...] = tuple(STAGE_OF)) -> dict[str, str]:
    """Why each of `names` no longer describes the corpus (table -> what to rerun), for the side
    tables that exist: computed before later ingests, or (dedup) against other cleaning verdicts
    than the current ones. A stage reading a stale table still works, on yesterday's verdicts."""
    side = side_entries(corpus)
    state = corpus_state(corpus)
    out: dict[str, str] = {}
    for name in names:
        if name in side and side[name].get("corpus_state") != state:
            out[name] = f"computed before the corpus last changed; rerun `worldline {STAGE_OF[name]}`"
    cfg = side.get("dedup_signatures", {}).get("config")
    if cfg is not None:
        want = verdicts_identity(side.get("cleaning")) if cfg.get("use_cleaning") else None
        if cfg.get("cleaning_fingerprint") != want:
            for name in ("duplicates", "shared_prefixes"):
                if name in names and name in side:
                    out.setdefault(name, "computed against other cleaning verdicts than the current ones; "
                                         "rerun `worldline dedup`")
    return out


def drop_orphaned_tmp(d: Path, unlocked_after_s: float = STALE_UNLOCKED_S) -> list[Path]:
    """Remove the temporary files of side-table writers that ended before committing (a killed stage):
    a live writer holds a lock on its file (`SideTableWriter`), so they are the `abandoned` ones.
    Returns what was removed."""
    dropped = [p for p in sorted(d.glob(f".{SIDE_FILE}.tmp-*")) if abandoned(p, unlocked_after_s)]
    for p in dropped:
        p.unlink(missing_ok=True)
    return dropped


class SideTableWriter:
    """Streams record batches into a temporary file; `commit()` renames it into place and records
    the manifest entry under the corpus lock. Use as a context manager: an exception discards the
    temporary file and leaves the previous table untouched."""

    def __init__(self, corpus: Corpus, name: str, schema: pa.Schema, stage: str, fingerprint: str,
                 config: dict[str, Any], state: dict[str, Any] | None = None, row_group_rows: int = 65_536,
                 compression: str | dict[str, str] = "zstd"):
        self.corpus, self.name, self.stage = corpus, name, stage
        self.fingerprint, self.config = fingerprint, config
        self.state = state if state is not None else corpus_state(corpus)
        self.row_group_rows = row_group_rows
        d = side_dir(corpus, name)
        d.mkdir(parents=True, exist_ok=True)
        drop_orphaned_tmp(d)
        self.tmp = d / f".{SIDE_FILE}.tmp-{os.getpid()}-{id(self):x}"
        meta = {
            b"worldline.stage": stage.encode(),
            b"worldline.fingerprint": fingerprint.encode(),
            b"worldline.config": orjson.dumps(config, option=orjson.OPT_SORT_KEYS),
            b"worldline.corpus_state": orjson.dumps(self.state, option=orjson.OPT_SORT_KEYS),
        }
        self.schema = schema.with_metadata({**(schema.metadata or {}), **meta})
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(self.tmp, self.schema, compression=compression)
        self._lock: int | None = os.open(self.tmp, os.O_RDONLY)  # held while this writer lives: `drop_orphaned_tmp` skips it
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.rows = 0
        self.committed = False

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        if data.num_rows == 0:
            return
        if data.schema.remove_metadata() != self.schema.remove_metadata():
            data = data.select(self.schema.names).cast(self.schema) if isinstance(data, pa.Table) else \
                pa.Table.from_batches([data]).select(self.schema.names).cast(self.schema)
        assert self._writer is not None
        if isinstance(data, pa.RecordBatch):
            self._writer.write_batch(data, row_group_size=self.row_group_rows)
        else:
            self._writer.write_table(data, row_group_size=self.row_group_rows)
        self.rows += data.num_rows

    def close(self) -> Path:
        """Finish the temporary file (e.g. to validate it with DuckDB before committing)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        return self.tmp

    def commit(self, summary: dict[str, Any] | None = None, lock_wait_s: float = 600.0) -> dict[str, Any]:
        self.close()
        entry = {
            "path": str(side_path(self.corpus, self.name).relative_to(self.corpus.root)),
            # its columns, for a view that still binds (and names the damage) if the file is ever unreadable
            "arrow_schema": base64.b64encode(self.schema.remove_metadata().serialize().to_pybytes()).decode(),
            "stage": self.stage,
            "fingerprint": self.fingerprint,
            "config": self.config,
            "rows": self.rows,
            "corpus_state": self.state,
            "written_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "summary": summary or {},
        }
        with self.corpus.writer(wait_s=lock_wait_s):
            os.replace(self.tmp, side_path(self.corpus, self.name))
            m = self.corpus.manifest()
            if self.state is not None and corpus_state(self.corpus, m) != self.state:
                # another writer (an ingest) committed while this stage ran, or while it waited for the lock
                print(f"{self.stage}: warning: the corpus {self.corpus.root} changed while {self.stage} ran (another "
                      f"process committed to it); `{self.name}` covers the corpus as it was: run {self.stage} again",
                      file=sys.stderr)
            m.setdefault("side", {})[self.name] = entry
            write_json_atomic(self.corpus.manifest_path, m)
        self.committed = True
        self._release()
        return entry

    def abort(self) -> None:
        self.close()
        self.tmp.unlink(missing_ok=True)
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None

    def __enter__(self) -> SideTableWriter:
        return self

    def __exit__(self, et, ev, tb) -> None:  # noqa: ANN001 - the context-manager protocol
        if not self.committed:  # an error, or the caller decided not to commit
            self.abort()


def remove_side_table(corpus: Corpus, name: str, lock_wait_s: float = 600.0) -> bool:
    """Remove a side table that a rerun of its stage no longer writes (clean's `contamination` after a
    run without an evaluation set): its rows would describe verdicts that are gone. Whether one was there."""
    if not corpus.exists() or name not in corpus.manifest().get("side", {}):
        return False
    with corpus.writer(wait_s=lock_wait_s):
        m = corpus.manifest()
        if m.get("side", {}).pop(name, None) is None:
            return False
        write_json_atomic(corpus.manifest_path, m)  # the entry first: no view names a file that is gone
        side_path(corpus, name).unlink(missing_ok=True)
    return True


def write_side_table(corpus: Corpus, name: str, table: pa.Table, schema: pa.Schema, stage: str,
                     fingerprint: str, config: dict[str, Any], state: dict[str, Any] | None = None,
                     summary: dict[str, Any] | None = None, lock_wait_s: float = 600.0) -> dict[str, Any]:
    """Write a whole (small) side table at once."""
    with SideTableWriter(corpus, name, schema, stage, fingerprint, config, state) as w:
        w.write(table)
        return w.commit(summary, lock_wait_s=lock_wait_s)
