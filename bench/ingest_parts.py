"""Two costs that shaped ingest's design, measured on the bundled sample corpus.

    .venv/bin/python bench/ingest_parts.py [--repeat 3]

1. Checking every record against the schema (`schemas.records.record_problem`) against reading and
   converting the same records (`pipelines.reader.read_unit`): why ingest checks records only in a
   group whose Arrow batch was refused (`pipelines.ingest.process_group`).
2. A worker's first group with and without pyarrow's lazy pandas import done beforehand
   (`pipelines.ingest.preload_for_workers`, run in the parent before the pool forks): each run is a
   fresh process, as a forked worker is; the group is the whole sample.

Each figure is the fastest of `--repeat` runs (CPU seconds of this process). Results go to
`docs/benchmarks.md` under "## Ingest parts (bench/ingest_parts.py)".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)
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
there instead of once per worker."""
    print(body)
    if not a.no_doc:
        write_section(DOC, SECTION, body)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
