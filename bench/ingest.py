"""Ingest throughput and peak memory: the project's `ingest` against the simplest correct baseline.

    .venv/bin/python bench/ingest.py --gb 1 2

What it does, in one run:

1. Generates a corpus of at least N GiB per `--gb` value under `build/bench/ingest/` (git-ignored)
   by replicating the sample's JSON-document and JSON-lines trace files
   (`data/sample/corpus`: `.json`, `.jsonl`, `.traj` outside directories that a directory importer
   claims) that the registered importers currently convert without quarantine. Each copy is
   varied so that every file has its own sha256 and the importers see distinct records: string
   `instance_id` / `task_id` values get a per-copy suffix (also inside JSON-in-a-string, as in
   SWE-agent's `replay_config`), integer ones a per-copy offset, and about one space-delimited
   lowercase word per 4 KiB (at least 3) is swapped for another word of the same file, chosen by
   a seeded RNG. Every file is copied equally often, so the per-format byte mix is the sample's.
   Each template is checked once: a varied copy must give the same trajectory and turn counts as
   the original. Generation is skipped when the directory already holds the same request
   (size, seed, template list and contents).

2. Runs, each in its own subprocess (the parent polls the process tree's summed RSS with psutil
   every 50 ms, listing the tree's processes again every 0.5 s, and reports its own CPU; the child
   also reports `ru_maxrss` of itself and of its largest child):

   - baseline: the simplest correct importer. Single process. For each file in sorted order:
     read the bytes (sha256 of them gives the same content-addressed ids as the project),
     `.jsonl` files are split on newlines and each non-blank line parsed with the standard
     library's `json.loads`, every other file is parsed whole with `json.loads`; the first
     registered importer whose `sniff` accepts the document (or the first line) is used, with the
     project's own `split` and `convert` (so row content and counts are the project's by
     construction); each trajectory and each turn becomes a Python dict with the schema's columns;
     a record whose `convert` raises becomes a quarantine dict. Every 64 MiB of input
     (`--baseline-flush-mb`, the project's task size; 0 = once at the end) the accumulated dicts
     become tables with `pyarrow.Table.from_pylist(rows, schema=...)` and are appended to one
     Parquet file per table (zstd level 3, the project's setting). What it does not do, unlike
     the project: no decompression, archives, directory formats or bounded reads, no domain
     partitions, no manifest or atomic commit, no parallelism.
   - project auto: `ingest([data_dir], corpus, IngestConfig(workers=0))` (one process per core
     when the input exceeds one 64 MiB task);
   - project w1: the same with `IngestConfig(workers=1)`.

   Before and after the runs, `--host-rounds` rounds of `bench/two_cores.py`'s loop (no ingest
   code) say what a second process costs the first on this host: on 2 cores the ratio of
   `workers=auto` is its per-CPU-second ratio times what the second core is worth, and that
   varies with the host, hour by hour.

3. Checks that trajectories, turns and quarantined counts agree between the baseline, each
   project run and the generator's expectation, and that the trajectory id sets are equal.
   Prints a Markdown table and writes it, with the machine, load and rerun command, into
   `docs/benchmarks.md` under "## Ingest (bench/ingest.py)" (other sections are kept).

Inputs are read from the page cache after generation (the machine has RAM to spare), so this
measures CPU cost, not the disk.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, cpu_model, write_section  # noqa: E402

SAMPLE = ROOT / "data" / "sample" / "corpus"
DEFAULT_WORKDIR = ROOT / "build" / "bench" / "ingest"
SECTION = "## Ingest (bench/ingest.py)"
GIB = 1 << 30
MIB = 1 << 20
GENERATOR_VERSION = "1"
SUFFIXES = (".json", ".jsonl", ".traj")
RUNS = {
    "baseline": ("baseline", None),
    "auto": ("project", 0),
    "w1": ("project", 1),
}


# ---------------------------------------------------------------------------------------------
# generator


@dataclass
class Template:
    rel: str  # path under the sample corpus
    data: bytes
    trajectories: int
    turns: int
    id_edits: list[tuple[int, int, bytes, bool]] = field(default_factory=list)  # start, end, value, is_int
    words: list[tuple[int, int]] = field(default_factory=list)  # spans of swappable words
    vocab: list[bytes] = field(default_factory=list)

    def render(self, copy: int, seed: int) -> bytes:
        rng = random.Random(f"{seed}:{copy}:{self.rel}")
        edits: list[tuple[int, int, bytes]] = []
        for start, end, value, is_int in self.id_edits:
            if is_int:
                edits.append((start, end, str(int(value) + (copy + 1) * 1_000_000).encode()))
            else:
                edits.append((start, end, value + b"-v%06d" % copy))
        if self.words:
            n = min(len(self.words), max(3, len(self.data) // 4096))
            for i in rng.sample(range(len(self.words)), n):
                s, e = self.words[i]
                edits.append((s, e, rng.choice(self.vocab)))
        edits.sort()
        out, pos = [], 0
        for s, e, rep in edits:
            out += [self.data[pos:s], rep]
            pos = e
        out.append(self.data[pos:])
        return b"".join(out)


_ID_PLAIN = re.compile(rb'"(?:instance_id|task_id)"\s*:\s*(?:"((?:[^"\\\n]|\\.)*)"|(-?\d+)(?![\d.eE]))')
_ID_ESCAPED = re.compile(rb'\\"(?:instance_id|task_id)\\"\s*:\s*\\"([^"\\\n]*)\\"')
# A lowercase word with a space on each side: never a JSON key, literal or escape sequence.
SPACED_WORD = rb"(?<= )[a-z]{6,12}(?= )"  # also bench/export.py's careful variation
_WORD = re.compile(SPACED_WORD)


def _prepare(rel: str, data: bytes, trajectories: int, turns: int) -> Template:
    t = Template(rel, data, trajectories, turns)
    taken: list[tuple[int, int]] = []
    for m in _ID_PLAIN.finditer(data):
        if m.group(1) is not None:
            t.id_edits.append((m.start(1), m.end(1), m.group(1), False))
            taken.append((m.start(1), m.end(1)))
        else:
            t.id_edits.append((m.start(2), m.end(2), m.group(2), True))
            taken.append((m.start(2), m.end(2)))
    for m in _ID_ESCAPED.finditer(data):
        t.id_edits.append((m.start(1), m.end(1), m.group(1), False))
        taken.append((m.start(1), m.end(1)))
    for m in _WORD.finditer(data):
        if not any(s < m.end() and m.start() < e for s, e in taken):
            t.words.append(m.span())
    t.vocab = sorted({data[s:e] for s, e in t.words})
    return t


def reader_counts(path: Path) -> tuple[int, int, int]:
    """(trajectories, turns, quarantined) that the reader finds under `path`."""
    from pipelines.reader import read_path
    from schemas.records import QuarantineRecord

    trajs = turns = quarantined = 0
    for rec in read_path(path):
        if isinstance(rec, QuarantineRecord):
            quarantined += 1
        else:
            trajs += 1
            turns += len(rec.turns)
    return trajs, turns, quarantined


def select_templates(sample: Path, seed: int) -> tuple[list[Template], list[str]]:
    """The sample's JSON / JSON-lines files that import cleanly now, prepared for varying."""
    from pipelines.reader import discover

    templates, skipped = [], []
    for unit in discover([sample]):
        if unit.is_dir or unit.path.suffix not in SUFFIXES:
            continue
        rel = str(unit.path.relative_to(sample))
        trajs, turns, q = reader_counts(unit.path)
        if q or not trajs:
            skipped.append(
                f"{rel} (no importer converts it cleanly yet: {trajs} trajectories, {q} quarantined)"
            )
            continue
        t = _prepare(rel, unit.path.read_bytes(), trajs, turns)
        # a varied copy must parse to the same counts, with a different sha256
        with tempfile.TemporaryDirectory() as tmp:
            for copy in (0, 1):
                p = Path(tmp) / f"{copy}{unit.path.suffix}"
                p.write_bytes(t.render(copy, seed))
                got = reader_counts(p)
                if got != (trajs, turns, 0) or p.read_bytes() == t.data:
                    raise RuntimeError(
                        f"bench generator: varied copy {copy} of {rel} gives {got}, "
                        f"expected ({trajs}, {turns}, 0) and different bytes"
                    )
        templates.append(t)
    return templates, skipped


def generate(workdir: Path, gib: float, seed: int, templates: list[Template]) -> dict:
    """Write copies until at least `gib` GiB; reuse the directory if it holds the same request."""
    per_copy = sum(len(t.data) for t in templates)
    copies = math.ceil(gib * GIB / per_copy)
    key = hashlib.sha256(
        repr(
            (
                GENERATOR_VERSION,
                seed,
                copies,
                [(t.rel, hashlib.sha256(t.data).hexdigest()) for t in templates],
            )
        ).encode()
    ).hexdigest()[:12]
    spec = {
        "gib": gib,
        "seed": seed,
        "copies": copies,
        "key": key,
        "files": copies * len(templates),
        "bytes": 0,
        "trajectories": copies * sum(t.trajectories for t in templates),
        "turns": copies * sum(t.turns for t in templates),
        "templates": {t.rel: [len(t.data), t.trajectories, t.turns] for t in templates},
    }
    target = workdir / f"input-{gib:g}gib"
    marker = target / "generated.json"
    if marker.exists():
        try:
            old = json.loads(marker.read_text())
        except ValueError:
            old = {}
        if old.get("key") == key:
            print(
                f"generate: {target} already holds {old['bytes'] / 1e6:,.0f} MB ({old['files']} files); reusing it",
                file=sys.stderr,
            )
            # the files are the same; the expected counts come from the importers as they are now
            return {**spec, "bytes": old["bytes"], "dir": str(target / "data"), "reused": True}
    shutil.rmtree(target, ignore_errors=True)
    data_dir = target / "data"
    t0 = time.monotonic()
    total = 0
    for copy in range(copies):
        base = data_dir / f"c{copy:05d}"
        for t in templates:
            p = base / t.rel
            p.parent.mkdir(parents=True, exist_ok=True)
            blob = t.render(copy, seed)
            p.write_bytes(blob)
            total += len(blob)
    spec["bytes"] = total
    marker.write_text(json.dumps(spec, indent=1))
    print(
        f"generate: wrote {total / 1e6:,.0f} MB, {spec['files']} files in {time.monotonic() - t0:.1f} s "
        f"to {data_dir}",
        file=sys.stderr,
    )
    return {**spec, "dir": str(data_dir), "reused": False}


# ---------------------------------------------------------------------------------------------
# the measured runs (each in a child process)


def baseline_sniff(container: str, sample):
    """The baseline's format choice: the first registered importer of the container that accepts."""
    from collectors.registry import IMPORTERS

    for imp in IMPORTERS:
        if imp.container == container:
            try:
                if imp.sniff(sample):
                    return imp
            except Exception:  # noqa: BLE001 - a sniffer must not stop the run
                continue
    return None


class BaselineRows:
    """The baseline's rows: a dict per trajectory and per turn, keyed by the schema's column names."""

    def __init__(self) -> None:
        from schemas.records import Trajectory, Turn
        from schemas.tables import SCHEMA_VERSION, TRAJECTORIES

        traj_cols = [f.name for f in TRAJECTORIES]
        self.turn_attrs = [f for f in Turn.__slots__]  # type: ignore[attr-defined]
        self.traj_attrs = [n for n in Trajectory.__slots__ if n in traj_cols]  # type: ignore[attr-defined]
        self.schema_version = SCHEMA_VERSION

    def of(self, t, imp, source: str) -> tuple[dict, list[dict]]:
        tid = t.trajectory_id
        row = {name: getattr(t, name) for name in self.traj_attrs}
        row.update(
            trajectory_id=tid,
            schema_version=self.schema_version,
            source=source,
            num_turns=len(t.turns),
            importer=type(imp).__name__,
            importer_version=imp.version,
        )
        turn_rows = []
        for i, turn in enumerate(t.turns):
            trow = {name: getattr(turn, name) for name in self.turn_attrs}
            trow.update(trajectory_id=tid, turn_index=i, domain=t.domain)
            turn_rows.append(trow)
        return row, turn_rows


def run_baseline(data_dir: Path, out: Path, flush_bytes: int) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from collectors.base import ImportContext
    from schemas.tables import QUARANTINE, TRAJECTORIES, TURNS

    schemas = {"trajectories": TRAJECTORIES, "turns": TURNS, "quarantine": QUARANTINE}
    rows: dict[str, list[dict]] = {name: [] for name in schemas}
    writers: dict[str, pq.ParquetWriter] = {}
    counts = {"trajectories": 0, "turns": 0, "quarantined": 0, "records": 0, "bytes": 0, "files": 0}
    out.mkdir(parents=True, exist_ok=True)
    to_rows = BaselineRows().of

    def flush() -> None:
        for name, schema in schemas.items():
            if rows[name]:
                table = pa.Table.from_pylist(rows[name], schema=schema)
                if name not in writers:
                    writers[name] = pq.ParquetWriter(
                        out / f"{name}.parquet", schema, compression="zstd", compression_level=3
                    )
                writers[name].write_table(table)
                rows[name] = []

    def quarantine(source: str, locator: str, reason: str, detail: str, sha: str) -> None:
        counts["quarantined"] += 1
        rows["quarantine"].append(
            {
                "source": source,
                "locator": locator,
                "reason": reason,
                "detail": detail,
                "importer": None,
                "input_sha256": sha,
                "excerpt": None,
            }
        )

    pending = 0
    for path in sorted(p for p in data_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        counts["bytes"] += len(data)
        counts["files"] += 1
        pending += len(data)
        sha = hashlib.sha256(data).hexdigest()
        source = str(path)
        ctx = ImportContext(source, sha, None, path)
        records = []
        try:
            if path.suffix == ".jsonl":
                imp = None
                for lineno, line in enumerate(data.split(b"\n"), 1):
                    if line.strip():
                        obj = json.loads(line)
                        imp = imp or baseline_sniff("jsonl", obj)
                        records.append((imp, f"line:{lineno}", obj))
            else:
                doc = json.loads(data)
                imp = baseline_sniff("json", doc)
                records = [(imp, loc, rec) for loc, rec in imp.split(doc, ctx)] if imp else [(None, "$", doc)]
        except (ValueError, UnicodeDecodeError) as e:
            counts["records"] += 1
            quarantine(source, "$", "invalid_json", f"{source}: {e}", sha)
            continue
        for imp, loc, rec in records:
            counts["records"] += 1
            if imp is None:
                quarantine(source, loc, "unknown_format", f"{source} {loc}: no importer", sha)
                continue
            try:
                t = imp.convert(rec, loc, ctx)
            except Exception as e:  # noqa: BLE001
                quarantine(source, loc, "malformed_record", f"{source} {loc}: {type(e).__name__}: {e}", sha)
                continue
            row, turn_rows = to_rows(t, imp, source)
            rows["trajectories"].append(row)
            rows["turns"] += turn_rows
            counts["trajectories"] += 1
            counts["turns"] += len(t.turns)
        if flush_bytes and pending >= flush_bytes:
            flush()
            pending = 0
    flush()
    for w in writers.values():
        w.close()
    return counts


def run_project(data_dir: Path, out: Path, workers: int) -> dict:
    from pipelines.ingest import IngestConfig, ingest

    s = ingest([data_dir], out, IngestConfig(workers=workers), progress=False)
    return {
        "trajectories": s.trajectories,
        "turns": s.turns,
        "quarantined": s.quarantined,
        "records": s.records,
        "bytes": s.bytes,
        "files": s.inputs,
        "new_inputs": s.new_inputs,
    }


def child_main(argv: list[str]) -> None:
    import resource

    p = argparse.ArgumentParser()
    p.add_argument("impl", choices=["baseline", "project"])
    p.add_argument("--input", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--flush-bytes", type=int, default=64 * MIB)
    p.add_argument("--result", type=Path, required=True)
    p.add_argument("--root", type=Path, default=None)
    a = p.parse_args(argv)
    if a.root is not None:
        sys.path.insert(0, str(a.root.resolve()))
    # import what the run needs before the clock starts
    import pyarrow.parquet  # noqa: F401

    import collectors.registry  # noqa: F401
    import pipelines.ingest  # noqa: F401

    if a.root is not None and not pipelines.ingest.__file__.startswith(str(a.root.resolve())):
        raise SystemExit(f"--root {a.root}: pipelines.ingest was imported from {pipelines.ingest.__file__}")
    c0 = os.times()
    t0 = time.perf_counter()
    if a.impl == "baseline":
        res = run_baseline(a.input, a.out, a.flush_bytes)
    else:
        res = run_project(a.input, a.out, a.workers)
    wall = time.perf_counter() - t0
    c1 = os.times()
    res["wall_s"] = wall
    res["cpu_s"] = (
        (c1.user - c0.user)
        + (c1.system - c0.system)
        + (c1.children_user - c0.children_user)
        + (c1.children_system - c0.children_system)
    )
    res["maxrss_self_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    res["maxrss_children_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    a.result.write_text(json.dumps(res))


def measure(
    impl: str, workers: int | None, data_dir: Path, out: Path, flush_bytes: int, root: Path | None = None
) -> dict:
    """Run one measurement in a subprocess; poll the tree's summed RSS every 50 ms; account the
    CPU that other processes used meanwhile (this machine is shared)."""
    import resource

    import psutil

    shutil.rmtree(out, ignore_errors=True)
    result = out.parent / f"{out.name}.result.json"
    result.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "_child",
        impl,
        "--input",
        str(data_dir),
        "--out",
        str(out),
        "--result",
        str(result),
        "--flush-bytes",
        str(flush_bytes),
    ]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    if root is not None and impl == "project":
        cmd += ["--root", str(root)]
    load0 = os.getloadavg()[0]
    ct0, ru0, t0 = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    proc = subprocess.Popen(cmd, cwd=ROOT)
    ps = psutil.Process(proc.pid)
    peak, totals = 0, []
    procs: list = [ps]
    polls = 0
    while proc.poll() is None:
        # The process tree is listed again every 10th poll only: `children(recursive=True)` reads
        # every process's /proc entry, CPU that a single-process baseline never feels (it leaves a
        # core idle) but a run using every core pays for; reading the RSS of known processes is
        # cheap. The pool's workers start once, at the beginning, and live to the end. What the
        # poller costs is measured and reported (`poller_cores`).
        if polls % 10 == 0:
            try:
                procs = [ps, *ps.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
        polls += 1
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        peak = max(peak, total)
        totals.append(total)
        time.sleep(0.05)
    rc = proc.wait()
    ct1, ru1, t1 = psutil.cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    if rc != 0:
        raise RuntimeError(f"bench run {impl} (workers={workers}) on {data_dir} failed with exit code {rc}")
    res = json.loads(result.read_text())
    result.unlink()
    res["peak_rss_tree_mb"] = peak / 1e6
    res["median_rss_tree_mb"] = sorted(totals)[len(totals) // 2] / 1e6 if totals else 0.0
    res["load_start"], res["load_end"] = load0, os.getloadavg()[0]
    busy = (sum(ct1) - ct1.idle - getattr(ct1, "iowait", 0)) - (
        sum(ct0) - ct0.idle - getattr(ct0, "iowait", 0)
    )
    ours = (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)
    poller = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    res["poller_cores"] = poller / (t1 - t0)
    res["others_cores"] = max(busy - ours - poller, 0.0) / (t1 - t0)
    return res


def ids_digest(out: Path) -> tuple[int, str]:
    """(number of distinct trajectory ids, sha256 of the sorted ids) of a run's output."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for f in sorted(out.rglob("*.parquet")):
        if "trajectories" in f.parts or f.name == "trajectories.parquet":
            ids.update(pq.read_table(f, columns=["trajectory_id"]).column(0).to_pylist())
    return len(ids), hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()


def helper(*args: str) -> dict:
    """Run a heavy step (generation, output checks) in a child so this process stays small: a
    child's ru_maxrss starts at its parent's RSS at fork."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    out = subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# reporting


def machine() -> str:
    cpu = cpu_model()
    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / GIB:.0f} GiB RAM"
    except ImportError:
        mem = "? RAM"
    return f"{os.cpu_count()} cores ({cpu}), {mem}, Python {platform.python_version()}"


def git_state() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "pipelines", "schemas", "collectors"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return f"`{head}`" + (
            " plus uncommitted changes in pipelines/, schemas/ or collectors/" if dirty else ""
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(results: list[dict]) -> str:
    head = (
        "| input | run | wall s | MB/s | turns/s | traj/s | x baseline | MB per CPU-s | x baseline per CPU-s | CPU util | "
        "peak / median RSS tree MB | ru_maxrss main / largest child MB | other processes (cores) | RSS poller (cores) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        walls = r.get("walls", [r["wall_s"]])
        wall = f"{r['wall_s']:.1f}" + (
            f" ({' / '.join(f'{w:.1f}' for w in walls)})" if len(walls) > 1 else ""
        )
        lines.append(
            f"| {r['gen_bytes'] / 1e9:.2f} GB | {r['label']} | {wall} | {r['mbps']:.1f} | "
            f"{r['turns_s']:,.0f} | {r['traj_s']:,.0f} | **{r['ratio']:.2f}** | {r['gen_bytes'] / 1e6 / r['cpu_s']:.1f} | {r['cpu_ratio']:.2f} | "
            f"{r['cpu_s'] / r['wall_s']:.2f} | {r['peak_rss_tree_mb']:,.0f} / {r['median_rss_tree_mb']:,.0f} | "
            f"{r['maxrss_self_mb']:,.0f} / {r['maxrss_children_mb']:,.0f} | {r['others_cores']:.2f} | "
            f"{r.get('poller_cores', float('nan')):.3f} |"
        )
    return "\n".join(lines)


def generate_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--gb", type=float, nargs="+", required=True)
    a = p.parse_args(argv)
    from collectors.registry import IMPORTERS

    templates, skipped = select_templates(SAMPLE, a.seed)
    gens = [generate(a.workdir, gib, a.seed, templates) for gib in a.gb] if templates else []
    print(json.dumps({"gens": gens, "skipped": skipped, "importers": [i.name for i in IMPORTERS]}))


def second_process_cost(rounds: int) -> float:
    """Median CPU s of a pure-Python loop run beside a second copy over run alone (`bench/two_cores.py`)."""
    from bench.two_cores import measure as two_cores

    print(f"host: {rounds} rounds of bench/two_cores.py's loop ...", file=sys.stderr, flush=True)
    slowdown = two_cores(rounds, 15_000_000, echo=False)[2]
    print(f"  a second process: x{slowdown:.2f}", file=sys.stderr, flush=True)
    return slowdown


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--gb", type=float, nargs="+", default=[1.0, 2.0], help="input sizes in GiB (default: 1 2)"
    )
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runs", default="baseline,auto,w1", help="comma-separated subset of baseline,auto,w1")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure each run this many times, interleaved; report the fastest",
    )
    p.add_argument(
        "--baseline-flush-mb",
        type=float,
        default=64.0,
        help="baseline turns its dict rows into Arrow every this many MiB of input (0: once at the end)",
    )
    p.add_argument(
        "--doc", type=Path, default=DOC, help="Markdown file to update (section replaced in place)"
    )
    p.add_argument("--no-doc", action="store_true", help="print only")
    p.add_argument(
        "--project-root",
        type=Path,
        default=None,
        help="measure the project code (pipelines/, schemas/, collectors/) in this directory instead: "
        "a worktree or a copy holding a proposed change",
    )
    p.add_argument("--keep-output", action="store_true", help="keep the Parquet outputs under WORKDIR/out")
    p.add_argument("--host-rounds", type=int, default=2,
                   help="rounds of bench/two_cores.py's loop before and after the runs: what a second process "
                        "costs the first on this host, which bounds workers=auto (0: skip)")
    a = p.parse_args(argv)
    runs = [r.strip() for r in a.runs.split(",") if r.strip()]
    for r in runs:
        if r not in RUNS:
            p.error(f"--runs: unknown run {r!r} (known: {', '.join(RUNS)})")
    flush_bytes = int(a.baseline_flush_mb * MIB)
    t_start = time.monotonic()

    g = helper("_generate", "--workdir", str(a.workdir), "--seed", str(a.seed), "--gb", *map(str, a.gb))
    gens, skipped, importers = g["gens"], g["skipped"], g["importers"]
    if not gens:
        print("no sample file imports cleanly; nothing to benchmark", file=sys.stderr)
        return 1

    host: list[float] = []  # paired / alone of the two-process loop, before and after the runs
    if a.host_rounds > 0:
        host.append(second_process_cost(a.host_rounds))
    results: list[dict] = []
    problems: list[str] = []
    for gen in gens:
        gib = gen["gib"]
        data_dir = Path(gen["dir"])
        best: dict[str, dict] = {}
        digests: dict[str, tuple[int, str]] = {}
        for rep in range(a.repeat):
            for run in runs:
                impl, workers = RUNS[run]
                out = a.workdir / "out" / f"{gib:g}gib-{run}"
                label = (
                    "baseline (json + dicts + from_pylist)"
                    if impl == "baseline"
                    else (f"project workers={'auto' if workers == 0 else workers}")
                )
                print(f"run: {gib:g} GiB {label} [{rep + 1}/{a.repeat}] ...", file=sys.stderr, flush=True)
                r = measure(impl, workers, data_dir, out, flush_bytes, a.project_root)
                print(
                    f"  {r['wall_s']:.1f} s ({r['cpu_s']:.1f} CPU s), {gen['bytes'] / 1e6 / r['wall_s']:.1f} MB/s, "
                    f"{r['turns']} turns, peak {r['peak_rss_tree_mb']:,.0f} MB, "
                    f"other processes {r['others_cores']:.2f} cores",
                    file=sys.stderr,
                )
                want = (gen["trajectories"], gen["turns"], 0)
                got = (r["trajectories"], r["turns"], r["quarantined"])
                if got != want:
                    problems.append(
                        f"{gib:g} GiB {run}: (trajectories, turns, quarantined) = {got}, generator expects {want}"
                    )
                if run not in digests:
                    d = helper("_ids", str(out))
                    digests[run] = (d["count"], d["sha256"])
                    if d["count"] != r["trajectories"]:
                        problems.append(
                            f"{gib:g} GiB {run}: {d['count']} distinct trajectory ids for "
                            f"{r['trajectories']} trajectories"
                        )
                if not a.keep_output:
                    shutil.rmtree(out, ignore_errors=True)
                walls = best[run]["walls"] + [r["wall_s"]] if run in best else [r["wall_s"]]
                if run not in best or r["wall_s"] < best[run]["wall_s"]:
                    best[run] = {**r, "label": label, "run": run, "gib": gib, "gen_bytes": gen["bytes"]}
                best[run]["walls"] = walls
        base = best.get("baseline")
        for run in runs:
            r = best[run]
            r["mbps"] = gen["bytes"] / 1e6 / r["wall_s"]
            r["turns_s"] = r["turns"] / r["wall_s"]
            r["traj_s"] = r["trajectories"] / r["wall_s"]
            r["ratio"] = r["mbps"] / (gen["bytes"] / 1e6 / base["wall_s"]) if base else float("nan")
            r["cpu_ratio"] = base["cpu_s"] / r["cpu_s"] if base else float("nan")
            results.append(r)
        if len({v[1] for v in digests.values()}) > 1:
            problems.append(
                f"{gib:g} GiB: the runs' trajectory id sets differ: "
                + ", ".join(f"{k} {v[0]} ids sha256 {v[1][:12]}" for k, v in digests.items())
            )

    if a.host_rounds > 0:
        host.append(second_process_cost(a.host_rounds))
    raw = a.workdir / f"results-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}.json"
    raw.parent.mkdir(parents=True, exist_ok=True)
    raw.write_text(
        json.dumps({"argv": argv, "gens": gens, "results": results, "problems": problems, "host": host}, indent=1)
    )
    md = table(results)
    verdict = []
    for run in ("auto", "w1"):
        rs = [r for r in results if r["run"] == run]
        if rs and "baseline" in runs:
            ratios = ", ".join(
                f"{r['ratio']:.2f}x at {r['gib']:g} GiB ({r['cpu_ratio']:.2f}x per CPU-s)" for r in rs
            )
            verdict.append(
                f"- project workers={'auto' if run == 'auto' else 1}: throughput {ratios} the baseline's (target: 3x)"
            )
        if len(rs) >= 2:
            lo, hi = rs[0], rs[-1]
            verdict.append(
                f"  - peak RSS tree {lo['peak_rss_tree_mb']:,.0f} MB at {lo['gib']:g} GiB, "
                f"{hi['peak_rss_tree_mb']:,.0f} MB at {hi['gib']:g} GiB "
                f"(x{hi['peak_rss_tree_mb'] / lo['peak_rss_tree_mb']:.2f}; target: flat); median "
                f"{lo['median_rss_tree_mb']:,.0f} MB and {hi['median_rss_tree_mb']:,.0f} MB "
                f"(x{hi['median_rss_tree_mb'] / max(lo['median_rss_tree_mb'], 1e-9):.2f})"
            )
    busy = max(r["others_cores"] for r in results)
    if busy > 0.3:
        verdict.append(
            f"- the machine was busy: other processes used up to {busy:.2f} of {os.cpu_count()} cores during "
            "the runs, so wall-clock throughput and its ratios are noisy and `workers=auto` cannot show its "
            "parallelism; the per-CPU-second ratio (how much less CPU the project spends per input byte) is "
            "the steadier number, and on idle cores `workers=auto` approaches it times the core count"
        )
    if host:
        verdict.append(
            f"- host: a second process made the first {host[0]:.2f}x as slow before the runs and {host[-1]:.2f}x after "
            f"(`bench/two_cores.py`'s loop, {a.host_rounds} rounds each): at 1.00 the second core is a whole one and "
            "`workers=auto` can run up to 2x as fast as `workers=1`; a slowdown of s caps that at 2/s"
        )
    bl = [r for r in results if r["run"] == "baseline"]
    if len(bl) >= 2:
        verdict.append(
            f"- baseline peak RSS tree {bl[0]['peak_rss_tree_mb']:,.0f} MB at {bl[0]['gib']:g} GiB, "
            f"{bl[-1]['peak_rss_tree_mb']:,.0f} MB at {bl[-1]['gib']:g} GiB"
        )
    checks = (
        "- counts: every run gives the generator's trajectories and turns, nothing quarantined, and the "
        "same set of trajectory ids"
        if not problems
        else "- COUNT MISMATCHES:\n" + "\n".join(f"  - {x}" for x in problems)
    )
    g0 = gens[0]
    mix = ", ".join(f"`{rel}` {v[0] / 1e3:,.0f} kB" for rel, v in g0["templates"].items())
    cmd = " ".join([".venv/bin/python", "bench/ingest.py", *argv])
    try:
        wd = a.workdir.resolve().relative_to(ROOT)
    except ValueError:
        wd = a.workdir
    minutes = (time.monotonic() - t_start) / 60
    body = f"""Rerun: `{cmd}` ({minutes:.0f} minutes for this run, generation included; the generated input
stays under `{wd}/` and is reused). The script's docstring says exactly what each run does.

Measured {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())} on {machine()}; code at {git_state()}{f" (project code from `{a.project_root}`)" if a.project_root else ""};
importers registered: {", ".join(importers)}.

Input: {"; ".join(f"{x['bytes'] / 1e9:.2f} GB = {x['files']:,} files, {x['trajectories']:,} trajectories, {x['turns']:,} turns" for x in gens)}.
Each is {g0["copies"]:,}+ copies of the sample's JSON / JSON-lines trace files that import cleanly now,
with ids and a few words varied per copy ({len(g0["templates"])} files per copy: {mix}).{(" Left out (no importer converts them yet): " + "; ".join(skipped) + ".") if skipped else ""}

- baseline: one process; each file read whole and parsed with stdlib `json` (`.jsonl` line by line);
  the project's own importers' `sniff`/`split`/`convert`; one Python dict per trajectory and per turn;
  `pyarrow.Table.from_pylist` every {a.baseline_flush_mb:g} MiB of input; one Parquet file per table (zstd 3).
- project: `ingest([dir], corpus, IngestConfig(workers=...))`, the whole stage (sha256 of every
  input, sniffing, bounded reads, domain partitions, manifest, atomic commit).

Each run is its own process, started cold (imports not timed); inputs are in the page cache.
wall s is the fastest of the repeats (all in brackets); MB/s counts input bytes (10^6);
**x baseline** is MB/s over the baseline's MB/s at the same size, in this run; MB per CPU-s uses
user+system time of the whole process tree; CPU util = CPU s / wall s; peak RSS tree sums RSS over
the process and its children, polled every 50 ms (the process tree listed again every 0.5 s; forked
workers share pages, so the sum overstates; the peak of one run varies by some 50 MB with allocator
timing, the median much less); ru_maxrss of the main process includes its parent's RSS at fork
(small here); other processes = average cores that the rest of the machine used during the run,
this script's RSS poller not included (a shared machine: on 2 cores anything above ~0.2 slows the
runs, most of all `workers=auto`); RSS poller = the cores the measuring script itself used (CPU that
the single-process baseline never feels, as it leaves a core idle, and a run on every core does).

{md}

{chr(10).join(verdict)}
{checks}
"""
    print(body)
    if not a.no_doc:
        write_section(a.doc, SECTION, body)
        print(f"updated {a.doc}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        child_main(sys.argv[2:])
    elif len(sys.argv) > 1 and sys.argv[1] == "_generate":
        generate_main(sys.argv[2:])
    elif len(sys.argv) > 2 and sys.argv[1] == "_ids":
        n, digest = ids_digest(Path(sys.argv[2]))
        print(json.dumps({"count": n, "sha256": digest}))
    else:
        sys.exit(main(sys.argv[1:]))
