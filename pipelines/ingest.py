"""The ingest stage: inputs → schema-valid rows in the corpus, bad input → quarantine.

Inputs are hashed before any is read (by the pool's workers while the walk still lists them, when
the input is large enough for a pool), so that re-ingesting the same content is a no-op and identical
files under two names are read once. New inputs are grouped into tasks of roughly `task_bytes` and
read by `workers` processes, each writing its own Parquet parts into the batch's staging
directory; the batch is committed atomically at the end (see `pipelines.store`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow as pa

from pipelines.gcpause import fewer_gc_passes
from pipelines.inflight import OpenInputs, Watch
from pipelines.procs import die_with_parent
from pipelines.progress import StatusLine
from pipelines.reader import InputUnit, discover, read_unit, remove_stale_extractions
from pipelines.shell import query_command
from pipelines.sources import ReadLimits
from pipelines.store import (
    EXTRACTION_FAILED,
    UNREADABLE,
    Corpus,
    CorpusError,
    DomainBuffers,
    PartWriter,
    ReadNow,
    failed_read,
    open_failed_reads,
)
from schemas.options import process_count
from schemas.records import QuarantineRecord, Trajectory, digest, record_problem
from schemas.tables import DOMAINS, SCHEMA_VERSION

MAX_MESSAGES = 1000  # one-line messages per run (and so per task); every quarantined record still gets its row


@dataclass(frozen=True)
class IngestConfig:
    domain_override: str | None = None
    workers: int = 0  # 0: one per core when the input is large enough to pay for processes
    task_bytes: int = 64 << 20
    lock_wait_s: float = 0.0  # how long to wait for another writer before giving up
    limits: ReadLimits = ReadLimits()

    def __post_init__(self) -> None:
        if self.task_bytes <= 0:
            raise ValueError(f"--task-mb must be positive (task_bytes={self.task_bytes})")
        process_count("--workers", self.workers)

    def fingerprint(self) -> str:
        d = asdict(self)
        d.pop("workers")  # parallelism does not change the output
        d.pop("task_bytes")
        d.pop("lock_wait_s")
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


@dataclass
class InputStats:
    source: str
    bytes: int
    records: int = 0
    trajectories: int = 0
    turns: int = 0
    quarantined: int = 0
    importers: dict[str, str] = field(default_factory=dict)
    domains: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    # a read that failed, recorded under a key of its own (`read-failed`): the sha256 its quarantine row carries
    read_sha256: str | None = None
    # of an input nothing could be read of and no content known (`store.failed_read`): its absolute path, a file's or a
    # folder's, for a later run to find it read (`store.supersede_failed_reads`)
    path: str | None = None
    folder: str | None = None


@dataclass
class IngestSummary:
    corpus: str
    inputs: int = 0
    new_inputs: int = 0
    skipped_inputs: int = 0  # inputs not read: their content is in the corpus, or another input of the run has it
    duplicate_inputs: int = 0  # of those, the ones whose content another input of this run has
    bytes: int = 0
    records: int = 0
    trajectories: int = 0
    turns: int = 0
    quarantined: int = 0
    seconds: float = 0.0
    batch_id: str | None = None
    config_fingerprint: str = ""
    by_domain: dict[str, list[int]] = field(default_factory=dict)  # domain -> [trajectories, turns]
    reasons: dict[str, int] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    corpora_skipped: list[str] = field(default_factory=list)  # Worldline corpora among the inputs: not read
    messages: list[str] = field(default_factory=list)

    @property
    def already_ingested(self) -> int:
        """Inputs skipped because the corpus holds their content (not those another input of the run has)."""
        return self.skipped_inputs - self.duplicate_inputs

    @property
    def reconciles(self) -> bool:
        return self.records == self.trajectories + self.quarantined

    def render(self) -> str:
        mb = self.bytes / 1e6
        lines = [
            f"ingest → {self.corpus}: {self.inputs} inputs ({mb:.1f} MB) in {self.seconds:.1f} s; "
            f"{self.new_inputs} new, {self.already_ingested} already ingested"
            + (f", {self.duplicate_inputs} the same content as another input of this run (read once)"
               if self.duplicate_inputs else ""),
            f"  records in {self.records} = accepted {self.trajectories} + quarantined {self.quarantined}"
            + ("" if self.reconciles else "   ← DOES NOT RECONCILE"),
            f"  turns {self.turns}",
        ]
        if self.corpora_skipped:
            lines.append(f"  not read: {len(self.corpora_skipped)} folder(s) that are Worldline corpora or outputs, not traces: "
                         + ", ".join(self.corpora_skipped[:5]) + (" ..." if len(self.corpora_skipped) > 5 else ""))
        if not self.inputs:
            lines.append("  nothing to read: the paths given hold no files")
        for dom in sorted(self.by_domain):
            t, u = self.by_domain[dom]
            lines.append(f"  {dom:<9} {t:>7} trajectories {u:>9} turns")
        if self.reasons:
            lines.append("  quarantined by reason: " + ", ".join(f"{r} {n}" for r, n in sorted(self.reasons.items(), key=lambda x: (-x[1], x[0]))))
            lines.append("  see: " + query_command(self.corpus, "SELECT source, locator, reason, detail FROM quarantine"))
        return "\n".join(lines)


Group = list[tuple[InputUnit, str]]  # input files with their sha256: one conversion task
GroupResult = tuple[list[dict], dict[str, InputStats], list[str]]  # part files, counts per input, messages


def process_group(units: Group, staging: str, tag: str, config: IngestConfig) -> GroupResult:
    """Read a group of inputs into Parquet parts under `staging` (runs in a worker: a process of the
    pool, or a Beam worker).

    Records are not type-checked one by one (that would add about a tenth to reading and converting
    them: `bench/ingest_parts.py`): when Arrow refuses a batch (an importer passed a value of the
    wrong type or range, e.g. an integer tool-call id), the group's files are deleted and the group
    is read again with every record checked (`schemas.records.record_problem`), those Arrow cannot
    hold going to quarantine."""
    with fewer_gc_passes():
        writer = PartWriter(Path(staging), tag)
        try:
            return _convert_group(units, writer, config, careful=False)
        except (pa.ArrowException, OverflowError, TypeError):
            writer.abort()
            return _convert_group(units, PartWriter(Path(staging), tag), config, careful=True)


_ONE_LINE = {ord("\n"): "\\n", ord("\r"): "\\r"}


def _convert_group(units: Group, writer: PartWriter, config: IngestConfig, careful: bool) -> GroupResult:
    out = DomainBuffers(writer)
    stats: dict[str, InputStats] = {}
    messages: list[str] = []
    for unit, sha in units:
        try:
            size = unit.size()
        except OSError:  # gone since it was found (moved, deleted): reading it says so, as a quarantine row
            size = 0
        st = stats[sha] = InputStats(unit.source, size)
        domains: dict[str, int] = {}
        reasons: Counter[str] = Counter()
        records = trajectories = turns = quarantined = 0  # counted in locals, stored once per input
        last_imp = None
        add = out.add
        for rec, imp in read_unit(unit, sha, config.limits, config.domain_override):
            records += 1
            if careful and isinstance(rec, Trajectory) and (problem := record_problem(rec)) is not None:
                source = rec.source or unit.source
                rec = QuarantineRecord(source, rec.locator, "bad_value", f"{source} {rec.locator}: {problem}",
                                       imp.name, sha)
            if type(rec) is QuarantineRecord:
                quarantined += 1
                reasons[rec.reason] += 1
                out.quarantine(rec)
                if len(messages) < MAX_MESSAGES:
                    # one line: a file name may hold a newline (and then what could pass for another message)
                    messages.append(f"quarantined {rec.locator}: {rec.reason}: {rec.detail}"[:400].translate(_ONE_LINE))
                continue
            assert imp is not None
            trajectories += 1
            turns += len(rec.turns)
            domains[rec.domain] = domains.get(rec.domain, 0) + 1
            if imp is not last_imp:
                st.importers[imp.name] = imp.version
                last_imp = imp
            add(rec, rec.source or unit.source, type(imp).__name__, imp.version)
        st.records, st.trajectories, st.turns, st.quarantined = records, trajectories, turns, quarantined
        st.domains, st.reasons = domains, dict(reasons)
        if records == 1 and (reasons.get(EXTRACTION_FAILED) == 1
                             or (reasons.get(UNREADABLE) == 1 and not unit.is_dir and sha != unit.sha256())):
            # hashed, then unreadable when read (its permissions changed, it went away), or an archive this machine
            # could not extract (no space left): recorded under a key of its own, so that the next run, finding the
            # content again, reads it instead of skipping it
            # (a key per attempt: a second failed attempt's row is the manifest's too)
            stats[digest("read-failed", sha, writer.tag)] = stats.pop(sha)
            st.read_sha256 = sha
        elif failed_read(vars(st)):  # nothing of it known but where it is
            if unit.unreadable is not None and os.path.isdir(unit.path):
                st.folder = os.path.abspath(unit.path)
            else:
                st.path = os.path.abspath(unit.path)
    files = out.close()
    return files, stats, messages


def _groups(
    units: list[tuple[InputUnit, str, int]], task_bytes: int, workers: int = 1
) -> list[Group]:
    """Tasks of about `task_bytes`, shrinking towards the end (each at most a 2*workers-th of what is
    left, not under 4 MiB) so that the last tasks finish together instead of one worker running a
    full-size task alone while the others idle."""
    groups: list[Group] = []
    cur: Group = []
    size = 0
    left = sum(n for _, _, n in units)
    target = task_bytes if workers <= 1 else min(task_bytes, max(4 << 20, left // (2 * workers)))
    for unit, sha, n in units:
        cur.append((unit, sha))
        size += n
        left -= n
        if size >= target:
            groups.append(cur)
            cur, size = [], 0
            if workers > 1:
                target = min(task_bytes, max(4 << 20, left // (2 * workers)))
    if cur:
        groups.append(cur)
    return groups


class Progress:
    """Bytes read of the total, with the rate: the inputs finished, and how far the ones being read
    now are (`in_flight`, from `pipelines.inflight`)."""

    def __init__(self, total_bytes: int, enabled: bool = True):
        self.total, self.done, self.shown_done, self.label = total_bytes, 0, 0, ""
        self.finished: set[str] = set()  # real paths of the inputs finished
        self.flight: dict[str, int] = {}
        self.line = StatusLine(enabled, width=110)
        self._lock = threading.Lock()  # the watch's thread draws too

    def advance(self, nbytes: int, label: str = "", path: Path | None = None) -> None:
        with self._lock:
            self.done += nbytes
            self.label = label
            if path is not None and self.line.enabled:  # (a realpath per input: only for a line drawn)
                self.finished.add(os.path.realpath(path))
            if self.line.due():
                self._show()

    def in_flight(self, read: dict[str, int]) -> None:
        with self._lock:
            self.flight = read
            if self.line.due():
                self._show()

    def _show(self) -> None:
        done = min(self.total, self.done + sum(n for p, n in self.flight.items() if p not in self.finished))
        rate = done / self.line.elapsed / 1e6
        pct = 100.0 * done / max(self.total, 1)
        if self.done < self.total:  # read to the end is not finished (an archive's members come after it)
            pct = min(pct, 99.9)
        self.line.show(f"ingest {pct:5.1f}% {done / 1e6:,.1f}/{self.total / 1e6:,.1f} MB {rate:,.1f} MB/s {self.label[-60:]}")
        self.shown_done = done

    def finish(self) -> None:
        with self._lock:
            if self.line.shown and self.shown_done != self.done:  # the last line drawn said less than was done
                self.flight = {}
                self._show()
            self.line.finish()


# Runs `process_group(group, staging, group_tag(batch_id, i), config)` for every group, anywhere,
# and yields the results (in any order): a process pool here, a Beam pipeline in beam_ingest.
GroupRunner = Callable[[list[Group], str, str, "IngestConfig"], Iterable[GroupResult]]


def ingest(
    paths: Iterable[Path | str],
    corpus_dir: Path | str,
    config: IngestConfig = IngestConfig(),
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    runner: GroupRunner | None = None,
) -> IngestSummary:
    """Import `paths` into the corpus at `corpus_dir`; returns the counts (also in the manifest).

    `runner`: where the conversion groups run (default: this process, or a process pool of
    `config.workers`); `pipelines.beam_ingest.beam_runner` runs them as a Beam pipeline."""
    if config.domain_override is not None and config.domain_override not in DOMAINS:
        raise ValueError(f"--domain {config.domain_override!r} is not one of {list(DOMAINS)}")
    t0 = time.monotonic()
    corpus = Corpus(corpus_dir)
    corpus.check_writable()
    remove_stale_extractions()  # an interrupted run's workers could not clean up after themselves
    summary = IngestSummary(corpus=str(corpus.root), config_fingerprint=config.fingerprint())
    paths = [Path(p) for p in paths]
    # realpath: `Path.resolve` raises on a symbolic link in a loop, which `discover` quarantines
    inside = [p for p in paths if Path(os.path.realpath(p)).is_relative_to(corpus.root.resolve())]
    if inside:  # the corpus's own files are not inputs (an input folder may hold the corpus, though)
        raise CorpusError(f"input {inside[0]} is the corpus --out {corpus.root} or inside it; "
                          "write the corpus elsewhere (inside the input folder is fine)")
    corpora: list[Path] = []
    listed: set[str] = set()  # the folders listed: what a folder's earlier failed read waits for
    hashes = InputHashes(config, progress)  # hashing starts during the walk once the input is large enough for a pool
    try:
        for unit in discover(paths, skip=[corpus.root], corpora=corpora, listed=listed):  # not its own output
            # the corpus's own report (`worldline report`'s default place, beside it) when the corpus lies in an input
            # folder: output, as the corpus is, so skipped as the corpus is (a report made since would be a new input
            # each time)
            if not is_corpus_report(unit.path, corpus.root):
                hashes.add(unit)
        hashes.end_walk()
        summary.corpora_skipped = [str(c) for c in corpora]
        if not hashes.units and corpora:  # every input a corpus: an empty corpus written would look like a result
            raise CorpusError(f"nothing to ingest: {', '.join(map(str, corpora[:5]))}{' ...' if len(corpora) > 5 else ''} "
                              f"{'is a Worldline corpus' if len(corpora) == 1 else 'are Worldline corpora'}, not traces; "
                              "`worldline query` reads a corpus, and `collect mcp --replay` replays one")
        result = _ingest(hashes, corpus, summary, config, progress, echo, t0, runner, listed)
    except BaseException:
        hashes.stop()  # an interrupt or an error: the hashing and the groups still running are not wanted
        hashes.line.finish()  # a line left open would take the error's message
        raise
    hashes.shutdown()
    return result


def is_corpus_report(path: Path, corpus_root: Path) -> bool:
    """Whether `path` is the report `worldline report` writes beside the corpus by default."""
    if path.name != "report.html":
        return False
    try:
        if path.resolve() != corpus_root.resolve().parent / "report.html":
            return False
        from pipelines.report_html import is_report_file

        return is_report_file(path)
    except (OSError, RuntimeError):  # RuntimeError: a symbolic link in a loop (`resolve`)
        return False


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued groups and kill the running ones (their staging is dropped by the next writer)."""
    procs = list((getattr(pool, "_processes", None) or {}).values())  # the executor has no public kill
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        p.kill()
    for p in procs:
        p.join(5)


def preload_for_workers() -> None:
    """Do once, before the pool forks, what every worker would otherwise do on its first batch:
    pyarrow imports pandas lazily the first time it converts Python objects (`pa.array`), which
    slows each worker's first group (`bench/ingest_parts.py`); a forked worker inherits the import
    instead. With a start method other than fork this only costs the parent the import."""
    pa.array([], pa.int32())


def _unit_shas(units: list[InputUnit]) -> list[str]:
    return [u.sha256() for u in units]


def worker_count(config: IngestConfig, total_bytes: int, inputs: int, cores: int) -> int:
    """Processes for `inputs` of `total_bytes` in all: `config.workers`, or (0) one per core when the input is
    large enough to pay for processes; never more than there are inputs."""
    workers = config.workers or (
        min(cores, -(-total_bytes // config.task_bytes)) if total_bytes > config.task_bytes else 1
    )
    return max(1, min(workers, inputs))


class InputHashes:
    """The sha256 of each input, taken while the walk goes on by the pool that later converts them: once
    the inputs found so far settle the worker count (it only grows with the input, up to the cores or
    `--workers`), the pool starts and hashes them in chunks while the parent lists the rest. Hashing
    after the walk kept one core idle for the walk: on `bench/ingest.py`'s 1 GiB input (5,696 files) the
    first group was sent 0.82 s after the start instead of 0.90 s (five runs each, alternating). A walk or
    hashing that takes longer than one interval of the progress line draws one."""

    CHUNK = 16  # inputs per hashing task

    def __init__(self, config: IngestConfig, progress: bool = False):
        self.config = config
        self.cores = os.cpu_count() or 1  # once (it reads /sys each time), not per input found
        self.cap = config.workers or self.cores
        self.units: list[InputUnit] = []
        self.sizes: list[int] = []
        self.total = 0
        self._pool: ProcessPoolExecutor | None = None
        self._sent = 0  # units handed to the pool
        self._futures: list[tuple[Future[list[str]], int]] = []  # a hashing task, and the bytes of its inputs
        # a line once the walk or the hashing takes longer than one interval (a folder of millions of files,
        # terabytes to hash): the ingest's own progress line starts only after both
        self.line = StatusLine(progress, first_at_once=False, width=110)

    def add(self, unit: InputUnit) -> None:
        self.units.append(unit)
        size = unit.size()
        self.sizes.append(size)
        self.total += size
        if self._pool is None and self.cap > 1 and self.workers() == self.cap:
            self._start(self.cap)
        if self._pool is not None and len(self.units) - self._sent >= self.CHUNK:
            self._send()
        if self.line.due():
            self.line.show(self._listing())

    def _listing(self) -> str:
        return f"listing inputs: {len(self.units):,} found, {self.total / 1e6:,.1f} MB"

    @property
    def started(self) -> bool:
        """Whether the pool is hashing (it starts during the walk, or at `pool()`)."""
        return self._pool is not None

    def workers(self) -> int:
        return worker_count(self.config, self.total, len(self.units), self.cores)

    def end_walk(self) -> None:
        """The walk's line, if one was drawn, ends on what was found, on a line of its own (before an error,
        the wait for the corpus lock, or the hashing's line)."""
        self.line.finish(self._listing())

    def pool(self) -> ProcessPoolExecutor | None:
        """The pool of `workers()` processes (None for one), started now if the walk did not start it."""
        if self._pool is None and self.workers() > 1:
            self._start(self.workers())
        return self._pool

    def result(self) -> tuple[list[str], list[int]]:
        """(sha256, size) of every input, in the order they were found."""
        shas: list[str] = []
        hashed = 0
        if self._pool is None:
            for unit, size in zip(self.units, self.sizes, strict=True):
                shas.append(unit.sha256())
                hashed += size
                if self.line.due():
                    self.line.show(self._hashing(len(shas), hashed))
        else:
            self._send()
            for future, nbytes in self._futures:
                shas += future.result()
                hashed += nbytes
                if self.line.due():
                    self.line.show(self._hashing(len(shas), hashed))
        self.line.finish(self._hashing(len(shas), hashed))  # a line drawn ends on what was done, on a line of its own
        return shas, self.sizes

    def rehash(self) -> None:
        """Hash every input again (the hashing tasks not yet begun are dropped)."""
        for future, _ in self._futures:
            future.cancel()
        self._futures, self._sent = [], 0

    def stop(self) -> None:
        if self._pool is not None:
            stop_pool(self._pool)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    def _start(self, workers: int) -> None:
        preload_for_workers()
        self._pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent, initargs=(os.getpid(),))

    def _send(self) -> None:
        assert self._pool is not None
        for i in range(self._sent, len(self.units), self.CHUNK):
            self._futures.append((self._pool.submit(_unit_shas, self.units[i:i + self.CHUNK]),
                                  sum(self.sizes[i:i + self.CHUNK])))
        self._sent = len(self.units)

    def _hashing(self, done: int, hashed: int) -> str:
        pct = 100.0 * hashed / max(self.total, 1)
        return f"hashing {pct:5.1f}% {hashed / 1e6:,.1f}/{self.total / 1e6:,.1f} MB, {done:,}/{len(self.units):,} inputs"


def group_tag(batch_id: str, index: int) -> str:
    """The name part of the Parquet files one group writes (unique within the batch)."""
    return f"{batch_id}-{index:05d}"


def _pool_runner(pool: ProcessPoolExecutor | None) -> GroupRunner:
    def run(groups: list[Group], staging: str, batch_id: str, config: IngestConfig) -> Iterator[GroupResult]:
        if pool is None or len(groups) <= 1:
            for i, g in enumerate(groups):
                yield process_group(g, staging, group_tag(batch_id, i), config)
            return
        futs = [pool.submit(process_group, g, staging, group_tag(batch_id, i), config) for i, g in enumerate(groups)]
        for fut in as_completed(futs):
            yield fut.result()

    return run


def _ingest(
    hashes: InputHashes,
    corpus: Corpus,
    summary: IngestSummary,
    config: IngestConfig,
    progress: bool,
    echo: Callable[[str], None] | None,
    t0: float,
    runner: GroupRunner | None = None,
    listed: set[str] | None = None,
) -> IngestSummary:
    pool = hashes.pool()  # (started during the walk when the input was large enough)
    with corpus.writer(config.lock_wait_s) as w:  # first: a corpus another writer holds is said after the walk, not after hashing
        units, workers = hashes.units, hashes.workers()
        if w.waited:  # hashed during the walk, then a wait for another writer: what was hashed may have changed since
            hashes.rehash()
        shas, sizes = hashes.result()
        known = w.known_inputs()
        todo: list[tuple[InputUnit, str, int]] = []
        seen: dict[str, str] = {}
        for unit, sha, size in zip(units, shas, sizes, strict=True):
            summary.inputs += 1
            summary.bytes += size
            if sha in known or sha in seen:
                summary.skipped_inputs += 1
                summary.duplicate_inputs += sha not in known
                first = known[sha]["source"] if sha in known else seen[sha]
                summary.skipped.append(f"{unit.source} (same content as {first})")
                continue
            seen[sha] = unit.source
            todo.append((unit, sha, size))
        summary.new_inputs = len(todo)
        failed = open_failed_reads(known)  # earlier failed reads that this run may supersede

        def read_now(inputs: dict[str, dict]) -> ReadNow:
            """What this run read fine (new, or in the corpus already); file paths only when a failed read waits for one."""
            now = ReadNow(folders=listed or set())
            want_paths = any(e.get("path") for e in failed)
            for unit, sha in zip(units, shas, strict=True):
                entry = inputs.get(sha) or known.get(sha)
                if entry is not None and not failed_read(entry):
                    now.keys.add(sha)
                    if want_paths:
                        now.paths[os.path.abspath(unit.path)] = sha
            return now

        if not todo:
            w.ensure_manifest()
            if failed:
                w.supersede(read_now({}), f"the run of {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}")
            summary.seconds = time.monotonic() - t0
            return summary
        batch_id = w.new_batch_id()
        staging = w.staging(batch_id)
        groups = _groups(todo, config.task_bytes, workers)
        total = sum(n for _, _, n in todo)
        bar = Progress(total, progress)
        files: list[dict] = []
        inputs: dict[str, dict] = {}
        paths = {sha: u.path for u, sha, _ in todo if not u.is_dir} if progress else {}

        shown = 0  # quarantine messages said, MAX_MESSAGES at most in a run; the rest in one line at the end

        def take(result: GroupResult) -> None:
            nonlocal shown
            part_files, stats, messages = result
            files.extend(part_files)
            if echo is not None:
                for m in messages[:max(0, MAX_MESSAGES - shown)]:
                    echo(m)
                    shown += 1
            for sha, st in stats.items():
                # `vars`, not `asdict`: a deep copy per input is parent CPU taken from the workers, and the
                # counters are this result's own already (unpickled, or made for it)
                inputs[sha] = entry = {**vars(st), "schema_version": SCHEMA_VERSION}
                for k in ("read_sha256", "path", "folder"):
                    if entry[k] is None:
                        del entry[k]
                bar.advance(st.bytes, st.source, paths.get(st.read_sha256 or sha))

        # (not built without a line to draw: it resolves every input's path; Beam's workers are not ours to watch)
        watch = Watch(OpenInputs((u.path, n) for u, _, n in todo if not u.is_dir), bar.in_flight, bar.line.interval) \
            if progress and runner is None else contextlib.nullcontext()
        try:
            with watch:
                for result in (runner or _pool_runner(pool))(groups, str(staging), batch_id, config):
                    take(result)
        except BaseException:
            bar.line.finish()  # a line left open would take the error's message (Ctrl-C, a failed group)
            raise
        bar.finish()
        info = {
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "schema_version": SCHEMA_VERSION,
            "config_fingerprint": config.fingerprint(),
            "domain_override": config.domain_override,
        }
        for st in inputs.values():
            summary.records += st["records"]
            summary.trajectories += st["trajectories"]
            summary.turns += st["turns"]
            summary.quarantined += st["quarantined"]
            for r, n in st["reasons"].items():
                summary.reasons[r] = summary.reasons.get(r, 0) + n
        if echo is not None and summary.quarantined > shown:
            echo(f"... and {summary.quarantined - shown:,} more quarantined records not shown here "
                 "(each has its row in the quarantine view)")
        info["counts"] = {k: getattr(summary, k) for k in ("records", "trajectories", "turns", "quarantined")}
        batch = w.commit(batch_id, files, inputs, info, read_now(inputs) if failed else None)
        summary.batch_id = batch["id"]
        for f in batch["files"]:
            if f["table"] in ("trajectories", "turns") and f["domain"]:
                d = summary.by_domain.setdefault(f["domain"], [0, 0])
                d[0 if f["table"] == "trajectories" else 1] += f["rows"]
    summary.seconds = time.monotonic() - t0
    return summary
