"""Same-run A/B of two versions of the project's ingest: do they write the same rows, and which is faster.

    .venv/bin/python bench/ingest_ab.py --old HEAD~1                 # the working tree against a commit
    .venv/bin/python bench/ingest_ab.py --old dccb191 --new HEAD --gb 0.25 --workers 1 --repeat 6

Why a separate script: on these shared 2-core machines one run of the same code varies by 10-20%
from one minute to the next, so a change worth a few percent disappears between two runs of
`bench/ingest.py` made at different times. Here the two versions alternate (old, new, old, new,
...), each run a fresh process (imports not timed, inputs in the page cache) measured by
`bench.ingest.measure`, and the fastest and the median run of each side are compared.

Before any run is timed, each version ingests the input once (untimed: it also compiles a fresh
worktree's bytecode) and the two corpora are compared table by table, rows sorted by their key
(`trajectory_id`, `turn_index`; quarantine by source, locator, reason): a speed-up must not change
the output, and the script stops with exit code 1 when it does, naming the first differing column
and row.

`--old` / `--new` take a directory holding the project code (`pipelines/`, `schemas/`,
`collectors/`) or a git revision, checked out for the run into a temporary worktree under
`build/bench/ingest-ab/` and removed at the end. `--new` defaults to the working tree. The input is
`bench/ingest.py`'s generated corpus of `--gb` GiB (made once, then reused). Prints a Markdown
table; `--doc` also writes it into docs/benchmarks.md under "## Ingest A/B (bench/ingest_ab.py)".
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, write_section  # noqa: E402
from bench.ingest import DEFAULT_WORKDIR, git_state, helper, machine, measure  # noqa: E402

SECTION = "## Ingest A/B (bench/ingest_ab.py)"
WORK = ROOT / "build" / "bench" / "ingest-ab"
KEYS = {
    "trajectories": ["trajectory_id"],
    "turns": ["trajectory_id", "turn_index"],
    "quarantine": ["source", "locator", "reason", "detail"],
}


class Side:
    """One version of the project code: a directory, or a git revision checked out for the run."""

    def __init__(self, name: str, spec: str | None, work: Path = WORK):
        self.name, self.spec = name, spec
        self.worktree: Path | None = None
        if spec is None:
            self.root: Path | None = None  # this working tree
            self.label = f"working tree at {git_state()}"
        elif Path(spec).is_dir():
            self.root = Path(spec).resolve()
            self.label = f"`{spec}`"
        else:
            rev = _git("rev-parse", "--verify", "--short", f"{spec}^{{commit}}")
            self.worktree = work / f"{name}-{rev}"
            if self.worktree.exists():
                _git("worktree", "remove", "--force", str(self.worktree))
            self.worktree.parent.mkdir(parents=True, exist_ok=True)
            _git("worktree", "add", "--detach", str(self.worktree), rev)
            self.root = self.worktree
            self.label = f"`{rev}`" + (f" ({spec})" if spec != rev else "")

    def close(self) -> None:
        if self.worktree is not None and self.worktree.exists():
            _git("worktree", "remove", "--force", str(self.worktree))


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"git {' '.join(args)}: {e.stderr.strip()}") from e


def read_tables(corpus: Path) -> dict:
    """Each table of a corpus as one Arrow table, rows sorted by the table's key."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = {}
    for table, keys in KEYS.items():
        # ParquetFile, not read_table: that would add a `domain` column from the `domain=` folder
        parts = [pq.ParquetFile(f).read() for f in sorted((corpus / table).rglob("*.parquet"))]
        if parts:
            t = pa.concat_tables(parts)
            out[table] = t.sort_by([(k, "ascending") for k in keys])
    return out


def first_difference(a: Path, b: Path) -> str | None:
    """None when the corpora at `a` and `b` hold the same rows; else where they first differ."""
    ta, tb = read_tables(a), read_tables(b)
    if sorted(ta) != sorted(tb):
        return f"tables {sorted(ta)} vs {sorted(tb)}"
    for name in ta:
        x, y = ta[name], tb[name]
        if x.schema.remove_metadata() != y.schema.remove_metadata():
            return f"{name}: schemas differ:\n{x.schema}\nvs\n{y.schema}"
        if x.num_rows != y.num_rows:
            return f"{name}: {x.num_rows} rows vs {y.num_rows}"
        for col in x.column_names:
            if not x[col].equals(y[col]):
                u, v = x[col].to_pylist(), y[col].to_pylist()
                i = next(i for i, (p, q) in enumerate(zip(u, v, strict=True)) if p != q)
                key = {k: x[k][i].as_py() for k in KEYS[name]}
                return f"{name}.{col} differs first at sorted row {i} {key}: {u[i]!r:.120} vs {v[i]!r:.120}"
    return None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", required=True, help="directory or git revision of the version to compare against")
    p.add_argument("--new", default=None, help="directory or git revision (default: this working tree)")
    p.add_argument("--gb", type=float, default=0.25, help="input size in GiB (default 0.25)")
    p.add_argument("--workers", type=int, default=1, help="IngestConfig.workers (0 = auto; default 1)")
    p.add_argument("--repeat", type=int, default=6, help="timed runs per side, alternating (default 6)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--doc", action="store_true", help="also write the result into docs/benchmarks.md")
    a = p.parse_args(argv)
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    t_start = time.monotonic()
    gen = helper("_generate", "--workdir", str(DEFAULT_WORKDIR), "--seed", str(a.seed), "--gb", str(a.gb))["gens"][0]
    data = Path(gen["dir"])
    sides = [Side("old", a.old), Side("new", a.new)]
    try:
        outs = {s.name: WORK / f"out-{s.name}" for s in sides}
        for s in sides:
            print(f"check: {s.name} = {s.label}, untimed run ...", file=sys.stderr, flush=True)
            measure("project", a.workers, data, outs[s.name], 0, s.root)
        diff = first_difference(outs["old"], outs["new"])
        for o in outs.values():
            shutil.rmtree(o, ignore_errors=True)
        if diff is not None:
            print(f"the two versions write different rows: {diff}", file=sys.stderr)
            return 1
        runs: dict[str, list[dict]] = {s.name: [] for s in sides}
        for rep in range(a.repeat):
            for s in sides if rep % 2 == 0 else sides[::-1]:  # neither side always runs first
                r = measure("project", a.workers, data, outs[s.name], 0, s.root)
                shutil.rmtree(outs[s.name], ignore_errors=True)
                runs[s.name].append(r)
                print(f"  [{rep + 1}/{a.repeat}] {s.name}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} CPU s, "
                      f"other processes {r['others_cores']:.2f} cores", file=sys.stderr, flush=True)
    finally:
        for s in sides:
            s.close()
    body = report(a, argv, gen, sides, runs, time.monotonic() - t_start)
    print(body)
    if a.doc:
        write_section(DOC, SECTION, body)
        print(f"updated {DOC}", file=sys.stderr)
    return 0


def report(a: argparse.Namespace, argv: list[str], gen: dict, sides: list[Side], runs: dict[str, list[dict]],
           seconds: float) -> str:
    def stat(name: str, key: str) -> tuple[float, float]:
        v = [r[key] for r in runs[name]]
        return min(v), statistics.median(v)

    lines = ["| version | code | wall s min / median | CPU s min / median | all walls |", "|---|---|---|---|---|"]
    for s in sides:
        (wmin, wmed), (cmin, cmed) = stat(s.name, "wall_s"), stat(s.name, "cpu_s")
        walls = " / ".join(f"{r['wall_s']:.2f}" for r in runs[s.name])
        lines.append(f"| {s.name} | {s.label} | {wmin:.2f} / {wmed:.2f} | {cmin:.2f} / {cmed:.2f} | {walls} |")
    (owmin, owmed), (nwmin, nwmed) = stat("old", "wall_s"), stat("new", "wall_s")
    (ocmin, ocmed), (ncmin, ncmed) = stat("old", "cpu_s"), stat("new", "cpu_s")
    busy = max(r["others_cores"] for rs in runs.values() for r in rs)
    workers = "auto" if a.workers == 0 else a.workers
    return f"""Rerun: `{" ".join([".venv/bin/python", "bench/ingest_ab.py", *argv])}` ({seconds / 60:.0f} minutes).
The script's docstring says what it does. Measured {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())} on {machine()};
input {gen["bytes"] / 1e9:.2f} GB ({gen["files"]:,} files, {gen["trajectories"]:,} trajectories, {gen["turns"]:,} turns;
`bench/ingest.py`'s generated corpus); `IngestConfig(workers={workers})`; {a.repeat} timed runs per side, alternating.

{chr(10).join(lines)}

- output: both versions write the same rows in every table (compared sorted by key, column by column)
- new / old: wall {nwmin / owmin:.3f} (fastest runs), {nwmed / owmed:.3f} (medians); CPU {ncmin / ocmin:.3f} (fastest), {ncmed / ocmed:.3f} (medians)
- other processes used up to {busy:.2f} cores during the runs
"""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
