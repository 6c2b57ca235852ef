"""How much a second process slows the first on this machine: the ceiling of `workers=auto`.

    .venv/bin/python bench/two_cores.py [--rounds 4] [--no-doc]

`bench/ingest.py`'s baseline is one process, the project's `workers=auto` one per core, so the
ratio it reports is the project's speed per CPU second times what a second core adds. On a VM
whose vCPUs share a physical core (or a busy host), that is well under 2. This measures it with
no ingest code at all: a pure-Python loop with a tiny working set (no memory traffic), run alone
and then as two copies at once, alternating for `--rounds` rounds. Each figure is CPU seconds of
one copy; "paired / alone" above 1 is the slowdown each process pays for its neighbour, and
2 / that slowdown is what two processes deliver against one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, cpu_model, write_section  # noqa: E402

SECTION = "## Two processes on this machine (bench/two_cores.py)"
LOOP = """
import time
t = time.process_time()
s = 0
for i in range({n}):
    s += i * i % 7
print(time.process_time() - t)
"""


def _run(copies: int, n: int) -> list[float]:
    """CPU seconds of each of `copies` loops started together."""
    procs = [subprocess.Popen([sys.executable, "-c", LOOP.format(n=n)], stdout=subprocess.PIPE, text=True)
             for _ in range(copies)]
    out = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit("two_cores: a loop process failed")
    return [float(o) for o in out]


def measure(rounds: int, iterations: int, echo: bool = True) -> tuple[list[float], list[float], float]:
    """(CPU s of each lone loop, of each paired loop, median paired / median alone), alternating."""
    alone: list[float] = []
    paired: list[float] = []
    for r in range(rounds):
        alone += _run(1, iterations)
        paired += _run(2, iterations)
        if echo:
            print(f"round {r + 1}: alone {alone[-1]:.2f} s, paired {paired[-2]:.2f} / {paired[-1]:.2f} s", flush=True)
    return alone, paired, statistics.median(paired) / statistics.median(alone)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--iterations", type=int, default=30_000_000)
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)
    alone, paired, slowdown = measure(a.rounds, a.iterations)
    body = (
        f"Measured {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on {cpu_model()}; "
        f"rerun: `.venv/bin/python bench/two_cores.py --rounds {a.rounds}`.\n\n"
        "| run | CPU s per copy (median) | all |\n|---|---:|---|\n"
        f"| alone | {statistics.median(alone):.2f} | {' / '.join(f'{x:.2f}' for x in alone)} |\n"
        f"| two at once | {statistics.median(paired):.2f} | {' / '.join(f'{x:.2f}' for x in paired)} |\n\n"
        f"- paired / alone: {slowdown:.2f}; two processes deliver {2 / slowdown:.2f}x one process, "
        "so `bench/ingest.py`'s `workers=auto` ratio is at most its `workers=1` ratio times that"
    )
    print(body)
    if not a.no_doc:
        write_section(DOC, SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
