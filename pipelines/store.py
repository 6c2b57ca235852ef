"""The corpus directory: Parquet (zstd) tables partitioned by domain, a manifest, and a lock.

Layout::

    CORPUS/
      manifest.json                 inputs (sha256, counts, importer versions) and batches (files + checksums)
      trajectories/domain=D/part-<batch>-<n>.parquet
      turns/domain=D/part-<batch>-<n>.parquet
      quarantine/part-<batch>-<n>.parquet
      .lock                         held (flock) by the one writer

A batch is written into `.staging-<batch>/`, recorded in the manifest as `committing`, moved into
place file by file (rename), then marked `committed`. A crash at any point leaves either an
unfinished batch that the next writer completes or removes, never a half-visible one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.sources import sha256_file
from schemas.records import TrajectoryBuffer, quarantine_batch
from schemas.tables import QUARANTINE, SCHEMA_VERSION, TRAJECTORIES, TURNS

CORPUS_FORMAT = "worldline-corpus/1"
TABLE_SCHEMAS = {"trajectories": TRAJECTORIES, "turns": TURNS, "quarantine": QUARANTINE}


class CorpusLocked(RuntimeError):
    pass


class CorpusError(RuntimeError):
    pass


def refuse_output_in_corpus(out: Path | str, corpus_dir: Path | str, what: str) -> None:
    """A stage's output (`what`: "export --out", ...) must not be the corpus or lie inside it: its own
    manifest.json, or its cleaning of old outputs, would destroy the corpus's."""
    o, c = Path(out).resolve(), Path(corpus_dir).resolve()
    if o == c or o.is_relative_to(c):
        raise CorpusError(f"{what} {out} is the corpus {corpus_dir} or inside it; write it elsewhere (beside the corpus, say)")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write then rename; the temporary name is unique even for two threads of one process."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def publish_dir(tmp: Path, out: Path) -> Path:
    """Rename a finished directory into place; when another process got there first, keep
    theirs (the same content) and drop ours."""
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, out)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not out.is_dir():  # not a lost race: a real failure (another device, no space, no access)
            raise
    return out


_INPUT_COUNTS = ("records", "trajectories", "turns", "quarantined")


def manifest_problem(m: dict) -> str | None:
    """What in a corpus manifest's structure every stage relies on is missing or of the wrong type
    (a hand edit, a bad merge), or None: checked on every read, so that no stage fails half-way
    with a Python error deep in its own code."""
    inputs, batches, side = m.get("inputs"), m.get("batches"), m.get("side", {})
    if not isinstance(inputs, dict):
        return f"'inputs' must be an object, got {type(inputs).__name__}"
    if not isinstance(batches, list):
        return f"'batches' must be a list, got {type(batches).__name__}"
    if not isinstance(side, dict):
        return f"'side' must be an object, got {type(side).__name__}"
    for sha, e in inputs.items():
        if not isinstance(e, dict) or not all(type(e.get(k)) is int for k in _INPUT_COUNTS):
            return f"input {sha[:16]}: not an object with the counts {', '.join(_INPUT_COUNTS)}"
    for i, b in enumerate(batches):
        if not isinstance(b, dict) or not isinstance(b.get("id"), str) or not isinstance(b.get("files"), list):
            return f"batches[{i}]: not an object with an 'id' and its 'files'"
        if not all(isinstance(f, dict) and isinstance(f.get("path"), str) for f in b["files"]):
            return f"batches[{i}] ({b['id']}): a file entry without its 'path'"
    for name, e in side.items():
        if not isinstance(e, dict):
            return f"side table {name!r}: its entry must be an object, got {type(e).__name__}"
    return None


def _manifest_format(path: Path) -> str | None:
    """The `format` of the manifest.json in `path`, if there is a readable one."""
    m = path / "manifest.json"
    try:
        fmt = orjson.loads(m.read_bytes()).get("format") if m.is_file() else None
    except (OSError, ValueError, AttributeError):
        return None
    return fmt if isinstance(fmt, str) else None


def is_corpus_dir(path: Path) -> bool:
    """Whether `path` holds a Worldline corpus manifest (an export's manifest.json is not one)."""
    return _manifest_format(path) == CORPUS_FORMAT


EXPORT_MARKER = ".worldline-export"  # marks a directory as an export's (`pipelines.export`)
# the formats of what the pipeline's other stages write (an export, thinking traces): data, not traces
_OUTPUT_FORMATS = ("worldline-export/", "worldline-traces/")


def holds_worldline_data(path: Path) -> bool:
    """Whether `path` is a corpus, or an export's or the traces stage's output folder (the export's
    marker, or a manifest of one of their formats): ingesting it would read the pipeline's own data
    (an evaluation set's held-out rows among it) as new traces. The manifest is read once."""
    fmt = _manifest_format(path)
    return fmt == CORPUS_FORMAT or (fmt or "").startswith(_OUTPUT_FORMATS) or (path / EXPORT_MARKER).is_file()


# what an ingest writes into a corpus folder besides manifest.json
_CORPUS_DATA = ("trajectories", "turns", "quarantine", "side")


class Corpus:
    """A corpus directory. Reading needs no lock; writing goes through `writer()`."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    def exists(self) -> bool:
        return self.manifest_path.exists()

    def require(self) -> Corpus:
        """This corpus, or a CorpusError that says how to make one (for stages that only read)."""
        self.require_manifest()
        return self

    def require_manifest(self) -> dict:
        """The manifest of this corpus, read once, or `require`'s CorpusError."""
        if not self.exists():
            raise CorpusError(f"{self.root} is not a corpus (no manifest.json); create one with `worldline ingest`")
        return self.manifest()  # raises for a manifest that is not a corpus's (an export's, say), or a damaged one

    def manifest(self) -> dict:
        if not self.manifest_path.exists():
            return {"format": CORPUS_FORMAT, "schema_version": SCHEMA_VERSION, "inputs": {}, "batches": []}
        try:
            m = orjson.loads(self.manifest_path.read_bytes())
        except orjson.JSONDecodeError as e:
            raise CorpusError(f"{self.manifest_path}: manifest is not valid JSON ({e})") from e
        if not isinstance(m, dict) or m.get("format") != CORPUS_FORMAT:
            fmt = m.get("format") if isinstance(m, dict) else type(m).__name__
            raise CorpusError(f"{self.manifest_path}: not a Worldline corpus manifest (format {fmt!r})")
        if (problem := manifest_problem(m)) is not None:
            raise CorpusError(f"{self.manifest_path}: damaged corpus manifest ({problem}); restore it from a copy, "
                              "or ingest the inputs again into a new folder")
        return m

    def check_writable(self, what: str = "") -> Corpus:
        """Refuse, before any work, a place this corpus cannot be written: a file, a folder inside
        another corpus, one holding corpus data without its manifest, a manifest that is not a
        corpus's (`what` names the option in the message, e.g. "--out")."""
        if self.root.exists() and not self.root.is_dir():
            raise CorpusError(f"{what} {self.root} is a file, not a corpus directory".lstrip())
        if self.exists():
            self.manifest()
        else:
            self._refuse_misplaced()
        self._probe_write(what)
        return self

    def _probe_write(self, what: str) -> None:
        """Create and remove a file where the corpus goes (its folder, or the nearest that exists): a
        read-only or immutable folder was found only at the first commit, after all the work."""
        place = self.root
        while not place.is_dir() and place != place.parent:
            place = place.parent
        try:
            fd, probe = tempfile.mkstemp(prefix=".worldline-probe-", dir=place)
        except OSError as e:
            raise CorpusError(f"{what} {self.root}: cannot write in {place}: {e.strerror or e}".lstrip()) from None
        os.close(fd)
        os.unlink(probe)

    def _refuse_misplaced(self) -> None:
        root = self.root.resolve()
        for parent in root.parents:
            if is_corpus_dir(parent):
                raise CorpusError(f"{self.root} is inside the corpus {parent}; write a corpus into a folder of its own")
        if root.is_dir():
            held = [d for d in _CORPUS_DATA if (root / d).is_dir() and any((root / d).rglob("*.parquet"))]
            if held:
                raise CorpusError(f"{self.root} holds corpus data ({', '.join(d + '/' for d in held)}) but no manifest.json; "
                                  "restore the manifest, or write the corpus into a new folder")

    def committed_files(self, manifest: dict | None = None) -> dict[str, list[Path]]:
        """The data files of the committed batches, by table: what readers read. A batch that is being
        committed (its files moved into place one by one), or that a crashed writer left committing
        until the next writer finishes it, is not among them, so no reader sees part of one; and a
        reader that lists the files once reads one state of the corpus however long it takes."""
        m = self.manifest() if manifest is None else manifest
        files: dict[str, list[Path]] = {t: [] for t in TABLE_SCHEMAS}
        for b in m["batches"]:
            if b.get("state") == "committed":
                for f in b.get("files") or []:
                    if f.get("table") in files:
                        files[f["table"]].append(self.root / f["path"])
        return {t: sorted(ps) for t, ps in files.items()}

    @contextmanager
    def writer(self, wait_s: float = 0.0) -> Iterator[CorpusWriter]:
        """Exclusive write access; a second writer waits up to `wait_s` (saying so on stderr, once),
        then gets `CorpusLocked` saying who holds it. Refuses a folder inside another corpus, and one that holds a corpus's
        data without its manifest (a new manifest there would hide the old rows, not replace them):
        checked when the corpus is created, not at every write."""
        if not self.exists():
            self._refuse_misplaced()
        self.root.mkdir(parents=True, exist_ok=True)
        lock_path = self.root / ".lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            deadline = time.monotonic() + wait_s
            said = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                    if time.monotonic() < deadline:
                        if not said:  # a wait of minutes is not silent
                            said = True
                            print(f"corpus {self.root} is being written by another process ({_holder(fd)}); "
                                  f"waiting up to {wait_s:g} s for it to finish", file=sys.stderr, flush=True)
                        time.sleep(0.2)
                        continue
                raise CorpusLocked(
                    f"corpus {self.root} is being written by another process ({_holder(fd)}); "
                    "wait for it to finish (the lock is released when that process exits)"
                )
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}".encode(), 0)
            w = CorpusWriter(self, waited=said)
            w.recover()
            yield w
        finally:
            os.close(fd)


UNREADABLE = "unreadable"  # an input, or an entry of an input folder, the user may not read
EXTRACTION_FAILED = "extraction_failed"  # an archive this machine could not extract (no room): retried by the next ingest
FAILED_READS = (UNREADABLE, EXTRACTION_FAILED)  # quarantine reasons that say nothing of the data: retried


def failed_read(entry: dict) -> bool:
    """An input recorded with nothing but failed reads (nothing of it is in the corpus)."""
    reasons = entry.get("reasons") or {}
    return bool(reasons) and entry.get("trajectories") == 0 and set(reasons) <= set(FAILED_READS)


def open_failed_reads(inputs: dict[str, dict]) -> list[dict]:
    """The failed reads nothing has superseded yet: each names its content (`read_sha256`), its file
    (`path`) or its folder (`folder`)."""
    return [e for e in inputs.values()
            if not e.get("superseded_by") and (e.get("read_sha256") or e.get("path") or e.get("folder")) and failed_read(e)]


@dataclass
class ReadNow:
    """What one ingest run read fine, new or in the corpus already: content keys, the absolute paths of
    the files (path -> key; left empty when no open failed read waits for a file) and of the folders it listed."""

    keys: set[str] = field(default_factory=set)
    paths: dict[str, str] = field(default_factory=dict)
    folders: set[str] = field(default_factory=set)


def supersede_failed_reads(inputs: dict[str, dict], now: ReadNow, batch: str) -> bool:
    """Mark `superseded_by` each failed read whose data is in the corpus now: an input hashed, then not
    read (unreadable by then, an archive this machine could not extract) once its content is read;
    a file that could not even be hashed once that file is read; a folder that could not be listed
    once a run lists it (`batch`: that run). Its quarantine row then no longer stands for missing data:
    the `quarantine` view (`superseded_quarantine`) and the quarantine rate leave it out. Returns
    whether any was marked."""
    marked = False
    for e in open_failed_reads(inputs):
        if e.get("read_sha256"):
            by = e["read_sha256"] if e["read_sha256"] in now.keys else None
        elif e.get("folder"):
            by = f"listed by {batch}" if e["folder"] in now.folders else None
        else:
            by = now.paths.get(e["path"])
        if by is not None:
            e["superseded_by"] = by
            marked = True
    return marked


def superseded_quarantine(manifest: dict) -> list[str]:
    """The `input_sha256` of the quarantine rows of superseded failed reads (`supersede_failed_reads`)."""
    return sorted(e.get("read_sha256") or k for k, e in manifest["inputs"].items() if e.get("superseded_by"))


def _holder(lock_fd: int) -> str:
    """What the process holding the corpus lock wrote into the lock file (its pid and since when)."""
    return os.pread(lock_fd, 200, 0).decode(errors="replace").strip() or "unknown"


class PartWriter:
    """Writes one worker's rows into staging: one Parquet file per (table, domain), rolled over
    at `rows_per_file` rows so files stay coarse but bounded."""

    def __init__(self, staging: Path, tag: str, rows_per_file: int = 2_000_000, row_group_rows: int = 32_768):
        self.staging, self.tag = staging, tag
        self.rows_per_file, self.row_group_rows = rows_per_file, row_group_rows
        self._writers: dict[tuple[str, str], tuple[pq.ParquetWriter, Path, int]] = {}
        self._seq = 0
        self.files: list[dict] = []

    def write(self, table: str, domain: str | None, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        key = (table, domain or "")
        if key not in self._writers:
            self._seq += 1
            rel = Path(table) / (f"domain={domain}" if domain else "") / f"part-{self.tag}-{self._seq:04d}.parquet"
            path = self.staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            w = pq.ParquetWriter(path, TABLE_SCHEMAS[table], compression="zstd", compression_level=3)
            self._writers[key] = (w, rel, 0)
        w, rel, n = self._writers[key]
        w.write_batch(batch, row_group_size=self.row_group_rows)
        n += batch.num_rows
        self._writers[key] = (w, rel, n)
        if n >= self.rows_per_file:
            self._close(key)

    def _close(self, key: tuple[str, str]) -> None:
        w, rel, n = self._writers.pop(key)
        w.close()
        # checksummed here, in the worker, while the file is in the page cache, not serially at commit
        self.files.append({"path": str(rel), "rows": n, "table": key[0], "domain": key[1] or None,
                           "sha256": sha256_file(self.staging / rel)})

    def close(self) -> list[dict]:
        for key in list(self._writers):
            self._close(key)
        return self.files

    def abort(self) -> None:
        """Close and delete every file this writer made (a group that will be written again)."""
        for w, rel, _ in self._writers.values():
            try:
                w.close()
            except Exception:  # noqa: BLE001 - the file goes anyway
                pass
            (self.staging / rel).unlink(missing_ok=True)
        self._writers = {}
        for f in self.files:
            (self.staging / f["path"]).unlink(missing_ok=True)
        self.files = []


class DomainBuffers:
    """Per-domain row buffers (`TrajectoryBuffer`) that flush to a PartWriter when they grow large."""

    def __init__(self, out: PartWriter, flush_rows: int = 16_384, flush_bytes: int = 64 << 20):
        self.out, self.flush_rows, self.flush_bytes = out, flush_rows, flush_bytes
        self.buffers: dict[str, TrajectoryBuffer] = {}
        self.quarantined: list = []

    def add(self, traj, source: str, importer: str, importer_version: str) -> None:
        buf = self.buffers.get(traj.domain)
        if buf is None:
            buf = self.buffers[traj.domain] = TrajectoryBuffer()
        buf.add(traj, source, importer, importer_version)
        if len(buf.turns) >= self.flush_rows or buf.turns.nbytes >= self.flush_bytes:
            self._flush(traj.domain, buf)

    def quarantine(self, rec) -> None:
        self.quarantined.append(rec)
        if len(self.quarantined) >= 4096:
            self.out.write("quarantine", None, quarantine_batch(self.quarantined))
            self.quarantined = []

    def _flush(self, domain: str, buf: TrajectoryBuffer) -> None:
        self.out.write("trajectories", domain, buf.traj.take())
        self.out.write("turns", domain, buf.turns.take())

    def close(self) -> list[dict]:
        for domain, buf in sorted(self.buffers.items()):
            if len(buf.traj):
                self._flush(domain, buf)
        if self.quarantined:
            self.out.write("quarantine", None, quarantine_batch(self.quarantined))
            self.quarantined = []
        return self.out.close()


class CorpusWriter:
    """Batches of new rows, committed atomically into the corpus under the lock."""

    def __init__(self, corpus: Corpus, waited: bool = False):
        self.corpus = corpus
        self.waited = waited  # whether the lock was held by another writer at first (inputs may have changed meanwhile)

    def known_inputs(self) -> dict[str, dict]:
        return self.corpus.manifest()["inputs"]

    def new_batch_id(self) -> str:
        return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + f"-{os.getpid()}-{os.urandom(3).hex()}"

    def staging(self, batch_id: str) -> Path:
        p = self.corpus.root / f".staging-{batch_id}"
        p.mkdir(parents=True, exist_ok=True)
        return p

    def ensure_manifest(self) -> None:
        """An empty corpus for a run that added nothing (no inputs, or none new): the later stages
        then read an empty corpus instead of saying that there is none."""
        if not self.corpus.exists():
            write_json_atomic(self.corpus.manifest_path, self.corpus.manifest())

    def supersede(self, now: ReadNow, run: str) -> None:
        """`supersede_failed_reads` for a run that commits no batch (its inputs were all in the corpus)."""
        m = self.corpus.manifest()
        if supersede_failed_reads(m["inputs"], now, run):
            write_json_atomic(self.corpus.manifest_path, m)

    def commit(self, batch_id: str, files: list[dict], inputs: dict[str, dict], info: dict,
               read_now: ReadNow | None = None) -> dict:
        """Record the batch as committing, move its staged files (`PartWriter.close()`'s entries,
        checksummed by the writer) into place, mark it committed. Returns the batch entry.
        `read_now`: see `supersede_failed_reads`."""
        m = self.corpus.manifest()
        batch = {"id": batch_id, "state": "committing", "files": sorted(files, key=lambda f: f["path"]), **info}
        m["batches"].append(batch)
        if read_now is not None:
            supersede_failed_reads(m["inputs"], read_now, batch_id)
        for sha, entry in inputs.items():
            m["inputs"][sha] = {**entry, "batch": batch_id}
        write_json_atomic(self.corpus.manifest_path, m)
        self._move_into_place(batch_id, batch["files"])
        batch["state"] = "committed"
        write_json_atomic(self.corpus.manifest_path, m)
        return batch

    def _move_into_place(self, batch_id: str, files: list[dict]) -> None:
        staging = self.corpus.root / f".staging-{batch_id}"
        for f in files:
            src, dst = staging / f["path"], self.corpus.root / f["path"]
            if src.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                os.replace(src, dst)
        shutil.rmtree(staging, ignore_errors=True)

    def recover(self) -> None:
        """Finish batches a crashed writer left `committing`; drop staging it never recorded."""
        if not self.corpus.exists() and not any(self.corpus.root.glob(".staging-*")):
            return
        m = self.corpus.manifest()
        changed = False
        recorded = set()
        for b in m["batches"]:
            recorded.add(b["id"])
            if b.get("state") == "committing":
                self._move_into_place(b["id"], b["files"])
                b["state"] = "committed"
                changed = True
        for stale in self.corpus.root.glob(".staging-*"):
            if stale.name.removeprefix(".staging-") not in recorded:
                shutil.rmtree(stale, ignore_errors=True)
        if changed:
            write_json_atomic(self.corpus.manifest_path, m)
