"""Two costs that shaped ingest's design, measured on the bundled sample corpus.

    .venv/bin/python bench/ingest_parts.py [--repeat 3]

1. Checking every record against the schema (`schemas.records.record_problem`) against reading and
   converting the same records (`pipelines.reader.read_unit`): why ingest checks records only in a
   group whose Arrow batch was refused (`pipelines.ingest.process_group`).
2. A worker's first group with and without pyarrow's lazy pandas import done beforehand
   (`pipelines.ingest.preload_for_workers`, run in the parent before the pool forks): each run is a
   fresh process, as a forked worker is; the group is the whole sample.
3. Where the CPU goes, stage by stage, in `bench/ingest.py`'s baseline and in the project's worker,
   on one task's worth (64 MiB, `--split-mb`) of that script's generated corpus: each stage runs
   over all of the input before the next (so that it can be timed alone; in the real runs they
   interleave record by record). The importers' `convert` is timed in both, on records parsed by
   each side's parser; in the project it is part of `read_unit`, and timed alone once more. The
   baseline runs with the garbage collector's default thresholds, the project's stages under
   `fewer_gc_passes` (as `process_group` does); the baseline is then timed once more under
   `fewer_gc_passes`, which says what the default collector (traversing everything alive again and
   again) costs it. This is the arithmetic behind
   `bench/ingest.py`'s ratio: the importers are shared, so mostly the rest makes the difference.

Each figure is the fastest of `--repeat` runs (CPU seconds of this process). Results go to
`docs/benchmarks.md` under "## Ingest parts (bench/ingest_parts.py)".
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, cpu_model, write_section  # noqa: E402

SAMPLE = ROOT / "data" / "sample" / "corpus"
SECTION = "## Ingest parts (bench/ingest_parts.py)"


def check_cost(repeat: int) -> tuple[int, float, float]:
    """(trajectories, seconds to read and convert them, seconds to check them all)."""
    from pipelines.reader import discover, read_unit
    from schemas.records import Trajectory, record_problem

    units = [(u, u.sha256()) for u in discover([SAMPLE])]
    read = check = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        trajs = [r for u, sha in units for r, _ in read_unit(u, sha) if isinstance(r, Trajectory)]
        read = min(read, time.process_time() - t0)
        t0 = time.process_time()
        problems = [p for t in trajs if (p := record_problem(t)) is not None]
        check = min(check, time.process_time() - t0)
    if problems:
        raise SystemExit(f"the sample has records the schema cannot hold: {problems[:3]}")
    return len(trajs), read, check


def first_group(preload: bool) -> tuple[float, float]:
    """In a fresh process: (first process_group call, second call), CPU seconds."""
    code = f"""
import json, sys, tempfile, time
sys.path.insert(0, {str(ROOT)!r})
import pyarrow.parquet, collectors.registry, pipelines.ingest as I
from pathlib import Path
from pipelines.reader import discover
group = [(u, u.sha256()) for u in discover([Path({str(SAMPLE)!r})])]
if {preload}:
    I.preload_for_workers()
times = []
for i in range(2):
    t0 = time.process_time()
    I.process_group(group, tempfile.mkdtemp(), f"t{{i}}", I.IngestConfig(workers=1))
    times.append(time.process_time() - t0)
print(json.dumps(times))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    first, second = json.loads(out.stdout)
    return first, second


def _timed(times: dict[str, float], name: str, fn):
    t0 = time.process_time()
    out = fn()
    times[name] = min(times.get(name, float("inf")), time.process_time() - t0)
    return out


CONVERT = "convert the records (the importers: shared)"
CONVERT_ALONE = f"of which: {CONVERT}"  # the project's convert, timed again outside `read_unit`


def _read(files: list[Path]) -> list[tuple[Path, bytes, str]]:
    return [(p, data, hashlib.sha256(data).hexdigest()) for p in files for data in [p.read_bytes()]]


def _parse(inputs: list[tuple[Path, bytes, str]], loads) -> list[tuple[Path, str, object]]:
    """Each file parsed whole with `loads` (JSON lines: each line, with its `line:N` locator)."""
    return [
        (p, sha, [(f"line:{i}", loads(line)) for i, line in enumerate(data.split(b"\n"), 1) if line.strip()]
         if p.suffix == ".jsonl" else loads(data))
        for p, data, sha in inputs
    ]


def _split(parsed: list[tuple[Path, str, object]]) -> list[tuple]:
    """(importer, locator, record, context) of every record, sniffed the baseline's way."""
    from bench.ingest import baseline_sniff
    from collectors.base import ImportContext

    records: list[tuple] = []
    for p, sha, obj in parsed:
        ctx = ImportContext(str(p), sha, None, p)
        if p.suffix == ".jsonl":
            imp = baseline_sniff("jsonl", obj[0][1])
            records += [(imp, loc, rec, ctx) for loc, rec in obj]
        else:
            imp = baseline_sniff("json", obj)
            records += [(imp, loc, rec, ctx) for loc, rec in imp.split(obj, ctx)]
    return records


def _convert(records: list[tuple]) -> list[tuple]:
    return [(imp, imp.convert(rec, loc, ctx), ctx) for imp, loc, rec, ctx in records]


def baseline_stages(files: list[Path], times: dict[str, float]) -> tuple[int, int]:
    """`bench/ingest.py`'s baseline, a stage at a time; (trajectories, turns)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.ingest import BaselineRows
    from schemas.tables import TRAJECTORIES, TURNS

    def rows(converted):
        to_rows = BaselineRows().of
        trajs, turns = [], []
        for imp, t, ctx in converted:
            row, turn_rows = to_rows(t, imp, ctx.source)
            trajs.append(row)
            turns += turn_rows
        return trajs, turns

    def write(tables):
        for table in tables:
            w = pq.ParquetWriter(io.BytesIO(), table.schema, compression="zstd", compression_level=3)
            w.write_table(table)
            w.close()

    inputs = _timed(times, "read the files and sha256 them", lambda: _read(files))
    parsed = _timed(times, "parse (`json.loads`; the project: orjson, in `read_unit`)", lambda: _parse(inputs, json.loads))
    records = _timed(times, "sniff and split into records", lambda: _split(parsed))
    converted = _timed(times, CONVERT, lambda: _convert(records))
    trajs, turns = _timed(times, "rows as dicts", lambda: rows(converted))
    tables = _timed(times, "`Table.from_pylist`", lambda: [pa.Table.from_pylist(trajs, schema=TRAJECTORIES),
                                                          pa.Table.from_pylist(turns, schema=TURNS)])
    n = (len(trajs), len(turns))
    _timed(times, "Parquet (zstd 3)", lambda: write(tables))
    return n


def project_stages(files: list[Path], times: dict[str, float], staging: Path) -> tuple[int, int]:
    """The project's worker (`pipelines.ingest.process_group`), a stage at a time; (trajectories, turns).
    `convert` is also timed alone, on orjson-parsed records, for the line that both sides share."""
    import orjson

    from pipelines.reader import discover, read_unit
    from pipelines.sources import ReadLimits
    from pipelines.store import PartWriter
    from schemas.records import Trajectory, TrajectoryBuffer

    units = list(discover(files))
    shas = _timed(times, "sha256 pass (`InputUnit.sha256`)", lambda: [u.sha256() for u in units])
    limits = ReadLimits()
    items = _timed(times, "read, parse, sniff, convert (`read_unit`)",
                   lambda: [(rec, imp, u) for u, sha in zip(units, shas, strict=True) for rec, imp in read_unit(u, sha, limits)])
    if any(type(rec) is not Trajectory for rec, _, _ in items):
        raise SystemExit("ingest_parts: the split's input has records the project quarantines")

    def add():
        bufs: dict[str, TrajectoryBuffer] = {}
        for rec, imp, u in items:
            buf = bufs.get(rec.domain)
            if buf is None:
                buf = bufs[rec.domain] = TrajectoryBuffer()
            buf.add(rec, rec.source or u.source, type(imp).__name__, imp.version)
        return bufs

    def write(batches):
        w = PartWriter(staging, "split")
        for domain, traj, turns in batches:
            w.write("trajectories", domain, traj)
            w.write("turns", domain, turns)
        w.abort()  # written, closed and checksummed is what counts; the files go

    n = (len(items), sum(len(rec.turns) for rec, _, _ in items))
    bufs = _timed(times, "buffer the records (`TrajectoryBuffer.add`)", add)
    batches = _timed(times, "Arrow arrays (`take`)",
                     lambda: [(d, b.traj.take(), b.turns.take()) for d, b in sorted(bufs.items())])
    _timed(times, "Parquet (zstd 3; `PartWriter`, checksums included)", lambda: write(batches))
    records = _split(_parse(_read(files), orjson.loads))
    _timed(times, CONVERT_ALONE, lambda: _convert(records))
    return n


def cpu_split(files: list[Path], repeat: int, staging: Path) -> dict:
    """Stage CPU seconds of both sides (fastest of `repeat`) and what each side counted."""
    import gc

    from pipelines.gcpause import fewer_gc_passes
    from pipelines.ingest import preload_for_workers

    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    preload_for_workers()  # pyarrow's pandas import, paid once by either side, not in a stage
    base: dict[str, float] = {}
    base_fewer_gc: dict[str, float] = {}
    proj: dict[str, float] = {}
    for _ in range(repeat):
        counts_b = baseline_stages(files, base)  # with the collector's default thresholds, as in bench/ingest.py
        gc.collect()
        with fewer_gc_passes():  # what the baseline would cost with the project's collector setting
            baseline_stages(files, base_fewer_gc)
        gc.collect()
        with fewer_gc_passes():  # as in process_group
            counts_p = project_stages(files, proj, staging)
        gc.collect()
    return {"baseline": base, "baseline_fewer_gc": base_fewer_gc, "project": proj,
            "counts": {"baseline": counts_b, "project": counts_p}}


def split_input(mb: float, seed: int) -> tuple[list[Path], dict]:
    """The first `mb` MiB of `bench/ingest.py`'s generated corpus (copies of the sample in its mix)."""
    from bench.ingest import DEFAULT_WORKDIR, GIB, generate, select_templates

    templates, _ = select_templates(SAMPLE, seed)
    spec = generate(DEFAULT_WORKDIR.parent / "ingest-parts", mb * (1 << 20) / GIB, seed, templates)
    return sorted(p for p in Path(spec["dir"]).rglob("*") if p.is_file()), spec


def split_table(res: dict) -> str:
    b, p = res["baseline"], res["project"]
    shared_b, shared_p = b[CONVERT], p[CONVERT_ALONE]
    tb = sum(b.values())
    tp = sum(v for k, v in p.items() if not k.startswith("of which"))
    lines = ["| baseline stage | CPU s | % | project stage | CPU s | % |", "|---|---:|---:|---|---:|---:|"]
    for i in range(max(len(b), len(p))):
        cells = []
        for side, total in ((b, tb), (p, tp)):
            items = list(side.items())
            if i < len(items):
                k, v = items[i]
                cells += [k, f"{v:.3f}", f"{100 * v / total:.0f}"]
            else:
                cells += ["", "", ""]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append(f"| **total** | **{tb:.3f}** | 100 | **total** | **{tp:.3f}** | 100 |")
    lines.append("")
    lines.append(f"- baseline / project CPU: {tb / tp:.2f}; outside the importers' `convert`: "
                 f"{tb - shared_b:.3f} s against {tp - shared_p:.3f} s ({(tb - shared_b) / (tp - shared_p):.2f}x)")
    lines.append(f"- the importers' `convert`: {shared_b:.3f} s in the baseline ({100 * shared_b / tb:.0f}% of its CPU), "
                 f"{shared_p:.3f} s in the project ({100 * shared_p / tp:.0f}%)")
    g = res["baseline_fewer_gc"]
    tg = sum(g.values())
    lines.append(f"- the baseline again under `fewer_gc_passes` (the project's collector setting): {tg:.3f} s in all, "
                 f"{g[CONVERT]:.3f} s of it `convert`; the default collector costs the baseline {tb - tg:.3f} s "
                 f"({100 * (tb - tg) / tb:.0f}%), and against that run the project's ratio is {tg / tp:.2f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--split-mb", type=float, default=64.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)
    files, spec = split_input(a.split_mb, a.seed)
    with tempfile.TemporaryDirectory() as tmp:
        split = cpu_split(files, a.repeat, Path(tmp))
    (nt, nu), (pt, pu) = split["counts"]["baseline"], split["counts"]["project"]
    if (nt, nu) != (pt, pu) or (nt, nu) != (spec["trajectories"], spec["turns"]):
        raise SystemExit(f"ingest_parts: baseline counted {nt} trajectories / {nu} turns, the project {pt} / {pu}, "
                         f"the generator expects {spec['trajectories']} / {spec['turns']}")
    n, read, check = check_cost(a.repeat)
    cold = min((first_group(False) for _ in range(a.repeat)), key=lambda x: x[0])
    warm = min((first_group(True) for _ in range(a.repeat)), key=lambda x: x[0])
    body = f"""Sample corpus ({n:,} trajectories); CPU seconds, fastest of {a.repeat}; {cpu_model()}.
Rerun: `.venv/bin/python bench/ingest_parts.py`.

| what | seconds | |
|---|---:|---:|
| read and convert every record (`read_unit`) | {read:.3f} | 1.00 |
| check every record against the schema (`record_problem`) | {check:.3f} | {check / read:.2f} |
| a fresh worker's first group, pandas not yet imported | {cold[0]:.3f} | 1.00 |
| the same, pyarrow's pandas import done before (`preload_for_workers`) | {warm[0]:.3f} | {warm[0] / cold[0]:.2f} |
| its second group (both) | {min(cold[1], warm[1]):.3f} | {min(cold[1], warm[1]) / cold[0]:.2f} |

Checking every record would add {100 * check / read:.0f}% to reading and converting, so ingest checks only
a group whose Arrow batch was refused; the import that the preload moves into the parent is paid once
there instead of once per worker.

Where the CPU goes: {spec['bytes'] / 1e6:.1f} MB of `bench/ingest.py`'s generated corpus ({len(files)} files,
{nt:,} trajectories, {nu:,} turns; {spec['copies']} copies of the sample's {len(spec['templates'])} JSON and JSON-lines
files), CPU seconds per stage, fastest of {a.repeat}, one process; each stage over all of the input before the next.
Rerun: `.venv/bin/python bench/ingest_parts.py` (this part: `--split-mb`).

{split_table(split)}"""
    print(body)
    if not a.no_doc:
        write_section(DOC, SECTION, body)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
