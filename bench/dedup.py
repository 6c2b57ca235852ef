"""Near-duplicate detection: the project's dedup against datasketch's MinHashLSH used directly and
datatrove's MinHash pipeline, on one generated workload with known duplicates.

    .venv/bin/python bench/dedup.py                       # 100k for all three, 1M for the project
    .venv/bin/python bench/dedup.py --n 20000 --big 0     # a quick run

What it does, in one run:

1. Ingests the sample corpus (`data/sample/corpus`) into `build/bench/dedup/sample/` and generates,
   with `pipelines.dedup_workload` (seeded), a workload of N trajectories: real steps recombined
   into base trajectories, 30% of all trajectories copies of a base (exact; timestamps, PIDs,
   durations, UUIDs, addresses and temp paths redrawn; ~1 word in 100 edited; a small step
   dropped; two steps swapped). Each workload is one corpus committed like an ingest batch, plus
   `texts.parquet` (trajectory_id, text: each turn's action and observation in order — what the
   baselines read) and `truth.parquet`. Generation is skipped when the directory already holds the
   same request.
2. Runs, each in its own fresh process (peak memory is that process's `ru_maxrss`, children
   included; time is wall-clock from the start of reading to the last cluster written; the
   project and datasketch run `--repeat` times, alternating, and the fastest run counts):
   - project: `pipelines.dedup.dedup(corpus)` with default settings (threshold 0.7, 128
     permutations, 5-word shingles, LSH bands from datasketch's optimum, candidates verified),
     reading the corpus' turns Parquet and writing its side tables;
   - datasketch: for each trajectory of `texts.parquet`, lower-cased `\\w+` tokens, the set of
     5-word shingles, `MinHash(num_perm=128).update_batch(...)`, `MinHashLSH(threshold=0.7,
     num_perm=128)`: `query` then `insert`; every candidate is a duplicate (union-find);
   - datatrove 0.10.1 (its own virtual environment under `build/bench/dedup/datatrove-venv`,
     created by this script: datatrove's dependencies do not fit the project's pins): its
     documented four-stage MinHash pipeline reduced to the three stages that find clusters
     (signatures, buckets, clusters with `save_cluster_id`), default `MinhashConfig` (5-grams, 14
     buckets x 8 hashes: threshold ~0.72), `ParquetReader` on `texts.parquet`, one task/worker.
3. Scores every system against the truth: precision and recall over all pairs of trajectories
   (a pair is predicted when both are in one cluster; true when they copy the same base), and
   recall per copy kind (share of copies put in their base's cluster).
4. Runs the project alone on the `--big` workload (default 1M) and compares its peak memory with
   the 100k run. Prints a Markdown table and writes it, with the machine, load and this command,
   to `docs/benchmarks.md` under "## Dedup (bench/dedup.py)" (other sections are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, cpu_model, load_note, write_section  # noqa: E402

WORK = ROOT / "build" / "bench" / "dedup"
SECTION = "## Dedup (bench/dedup.py)"
DATATROVE_PINS = ["datatrove==0.10.1", "spacy", "xxhash<4", "regex", "tokenizers", "pyarrow"]
GENERATOR_VERSION = 3


# ---------------------------------------------------------------------------------------------
# children (each runs in a fresh process and prints one JSON line)
# ---------------------------------------------------------------------------------------------


def _peak_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, kids) / 1024.0


def _cpu_s() -> float:
    """CPU seconds of this process and its children: less sensitive than wall time to other
    people's work on a shared machine (but it adds up all threads)."""
    r, k = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + k.ru_utime + k.ru_stime


def child_project(d: Path) -> dict:
    import pyarrow.parquet as pq

    from pipelines.dedup import DedupConfig, dedup
    from pipelines.query import connect

    shutil.rmtree(d / "corpus" / "side", ignore_errors=True)
    t0, cpu0 = time.perf_counter(), _cpu_s()
    s = dedup(d / "corpus", DedupConfig(reuse_signatures=False), progress=False)
    seconds = time.perf_counter() - t0
    pred = connect(d / "corpus").sql("SELECT trajectory_id, cluster_id FROM duplicates").arrow().read_all()
    pq.write_table(pred, d / "pred-project.parquet")
    return {"seconds": seconds, "cpu_s": _cpu_s() - cpu0, "peak_mb": _peak_mb(), "n": s.considered, "detail": {
        "signatures_s": round(s.seconds_signatures, 1), "verdicts_s": round(s.seconds_verdicts, 1),
        "bands": s.bands, "rows": s.rows, "candidates": s.candidate_pairs, "verified": s.verified_pairs}}


def child_datasketch(d: Path) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from datasketch import MinHash, MinHashLSH

    word = re.compile(r"\w+")
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            parent[x] = parent.get(parent[x], parent[x])
            x = parent[x]
        return x

    t0, cpu0 = time.perf_counter(), _cpu_s()
    lsh = MinHashLSH(threshold=0.7, num_perm=128)
    n = 0
    for batch in pq.ParquetFile(d / "texts.parquet").iter_batches(batch_size=4096):
        for tid, text in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            toks = word.findall(text.lower())
            shingles = {" ".join(toks[i : i + 5]) for i in range(max(1, len(toks) - 4))}
            m = MinHash(num_perm=128)
            m.update_batch([s.encode("utf-8") for s in shingles])
            for other in lsh.query(m):
                a, b = find(tid), find(other)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            lsh.insert(tid, m)
            n += 1
    ids = list(parent)
    pred = pa.table({"trajectory_id": ids, "cluster_id": [find(i) for i in ids]})
    seconds = time.perf_counter() - t0
    pq.write_table(pred, d / "pred-datasketch.parquet")
    return {"seconds": seconds, "cpu_s": _cpu_s() - cpu0, "peak_mb": _peak_mb(), "n": n, "detail": {}}


DATATROVE_CHILD = r'''
import json, resource, struct, sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster, MinhashDedupSignature
from datatrove.pipeline.readers import ParquetReader


d = Path(sys.argv[1])
w = d / "datatrove-work"
cfg = MinhashConfig()
def cpu():
    r, k = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime + k.ru_utime + k.ru_stime
t0, cpu0 = time.perf_counter(), cpu()
reader = ParquetReader(str(d), glob_pattern="texts.parquet", text_key="text", id_key="trajectory_id")
LocalPipelineExecutor(pipeline=[reader, MinhashDedupSignature(output_folder=str(w / "sigs"), config=cfg)], tasks=1, workers=1,
                      logging_dir=str(w / "logs1")).run()
LocalPipelineExecutor(pipeline=[MinhashDedupBuckets(input_folder=str(w / "sigs"), output_folder=str(w / "buckets"), config=cfg)],
                      tasks=cfg.num_buckets, workers=1, logging_dir=str(w / "logs2")).run()
LocalPipelineExecutor(pipeline=[MinhashDedupCluster(input_folder=str(w / "buckets"), output_folder=str(w / "remove"), config=cfg,
                                                    save_cluster_id=True)], tasks=1, workers=1, logging_dir=str(w / "logs3")).run()
seconds = time.perf_counter() - t0
raw = (w / "remove" / "000000.clusters").read_bytes() if (w / "remove" / "000000.clusters").exists() else b""
pairs = struct.unpack(f"<{len(raw) // 4}I", raw)
ids = pq.read_table(d / "texts.parquet", columns=["trajectory_id"]).column(0).to_pylist()
pred = pa.table({"trajectory_id": [ids[i] for i in pairs[0::2]], "cluster_id": [f"c{c}" for c in pairs[1::2]]})
pq.write_table(pred, d / "pred-datatrove.parquet")
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
print(json.dumps({"seconds": seconds, "cpu_s": cpu() - cpu0, "peak_mb": peak, "n": len(ids), "detail": {}}))
'''


# ---------------------------------------------------------------------------------------------
# the driver
# ---------------------------------------------------------------------------------------------


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, **kw)


def ensure_datatrove() -> Path:
    venv = WORK / "datatrove-venv"
    py = venv / "bin" / "python"
    marker = venv / ".pins"
    if not (py.exists() and marker.exists() and marker.read_text() == "\n".join(DATATROVE_PINS)):
        shutil.rmtree(venv, ignore_errors=True)
        sh([sys.executable, "-m", "venv", str(venv)])
        sh([str(py), "-m", "pip", "install", "-q", *DATATROVE_PINS], stdout=subprocess.DEVNULL)
        marker.write_text("\n".join(DATATROVE_PINS))
    return py


def ensure_workload(n: int, seed: int, texts: bool) -> Path:
    from pipelines.dedup_workload import StepPool, generate, write_corpus
    from pipelines.ingest import ingest

    sample = WORK / "sample" / "corpus"
    if not (sample / "manifest.json").exists():
        shutil.rmtree(sample.parent, ignore_errors=True)
        ingest([ROOT / "data" / "sample" / "corpus"], sample, progress=False)
    d = WORK / f"n{n}-seed{seed}"
    want = {"n": n, "seed": seed, "texts": texts, "generator": GENERATOR_VERSION}
    marker = d / "request.json"
    if marker.exists() and json.loads(marker.read_text()) == want:
        return d
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    t0 = time.perf_counter()
    pool = StepPool.from_corpus(sample)
    write_corpus(generate(pool, n, seed=seed), d / "corpus", d / "texts.parquet" if texts else None, d / "truth.parquet")
    marker.write_text(json.dumps(want))
    print(f"generated {n:,} trajectories in {time.perf_counter() - t0:.0f} s → {d}", file=sys.stderr)
    return d


def run_child(system: str, d: Path, dt_python: Path | None = None) -> dict:
    if system == "datatrove":
        assert dt_python is not None
        script = d / "datatrove_child.py"
        script.write_text(DATATROVE_CHILD)
        shutil.rmtree(d / "datatrove-work", ignore_errors=True)
        out = sh([str(dt_python), str(script), str(d)], capture_output=True)
    else:
        out = sh([sys.executable, __file__, "--child", system, "--dir", str(d)], capture_output=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def score(d: Path, system: str) -> dict:
    import duckdb
    import numpy as np

    from pipelines.dedup_workload import COPY_KINDS, pairwise_scores

    con = duckdb.connect()
    t, p = str(d / "truth.parquet"), str(d / f"pred-{system}.parquet")
    rows = con.sql(f"""SELECT t.cluster, coalesce(p.cluster_id, t.trajectory_id) FROM read_parquet('{t}') t
                       LEFT JOIN read_parquet('{p}') p USING (trajectory_id)""").fetchall()
    truth = np.array([r[0] for r in rows])
    _, pred = np.unique([r[1] for r in rows], return_inverse=True)
    prec, rec, tp, pp, tt = pairwise_scores(pred, truth)
    by_kind = dict(con.sql(f"""
        WITH x AS (SELECT t.cluster, t.kind, coalesce(p.cluster_id, t.trajectory_id) AS pc FROM read_parquet('{t}') t
                   LEFT JOIN read_parquet('{p}') p USING (trajectory_id)),
             b AS (SELECT cluster, pc AS bpc FROM x WHERE kind = 'base')
        SELECT kind, avg((pc = bpc)::DOUBLE) FROM x JOIN b USING (cluster) WHERE kind <> 'base' GROUP BY 1""").fetchall())
    return {"precision": prec, "recall": rec, "pairs": [tp, pp, tt], "recall_by_kind": {k: by_kind.get(k) for k in COPY_KINDS}}


def machine() -> str:
    return f"{cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}; {load_note()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="workload for all three systems")
    ap.add_argument("--big", type=int, default=1_000_000, help="workload for the project alone (0: skip)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--systems", default="project,datasketch,datatrove")
    ap.add_argument("--repeat", type=int, default=2, help="runs of project and datasketch (alternating; fastest counts)")
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--dir", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        res = {"project": child_project, "datasketch": child_datasketch}[a.child](a.dir)
        print(json.dumps(res))
        return 0

    systems = a.systems.split(",")
    dt_python = ensure_datatrove() if "datatrove" in systems else None
    d = ensure_workload(a.n, a.seed, texts=True)
    results: dict[str, dict] = {}
    # the fast systems run `--repeat` times, alternating, and the fastest run counts (the machine
    # is shared: other people's work comes and goes); datatrove, ten times slower, runs once
    for rep in range(a.repeat):
        for system in systems:
            if system == "datatrove" and rep:
                continue
            print(f"running {system} on {a.n:,} trajectories (round {rep + 1}) …", file=sys.stderr)
            r = run_child(system, d, dt_python)
            r.update(score(d, system))
            print(f"  {system}: {a.n / r['seconds']:,.0f} traj/s, {r['cpu_s']:,.0f} CPU s, peak {r['peak_mb']:,.0f} MB, "
                  f"P {r['precision']:.4f} R {r['recall']:.4f}", file=sys.stderr)
            prev = results.get(system)
            r["runs"] = (prev["runs"] if prev else []) + [round(a.n / r["seconds"])]
            if prev is None or r["seconds"] < prev["seconds"]:
                results[system] = r
            results[system]["runs"] = r["runs"]
    big = None
    if a.big:
        db = ensure_workload(a.big, a.seed, texts=False)
        print(f"running project on {a.big:,} trajectories …", file=sys.stderr)
        big = run_child("project", db)
        big.update(score(db, "project"))
        big["runs"] = [round(a.big / big["seconds"])]
        print(f"  project @ {a.big:,}: {a.big / big['seconds']:,.0f} traj/s, peak {big['peak_mb']:,.0f} MB, "
              f"P {big['precision']:.4f} R {big['recall']:.4f}", file=sys.stderr)

    kinds = ["exact", "volatile", "edit", "drop", "swap"]
    lines = [
        f"Workload: {a.n:,} generated trajectories (seed {a.seed}; `pipelines.dedup_workload`), 30% of them copies of a base "
        "(exact, volatile values redrawn, ~1% of words edited, a small step dropped, two steps swapped). "
        "Precision/recall over all pairs of trajectories; recall per kind = share of copies put in their base's cluster.",
        "",
        "| system | trajectories/s (runs) | CPU s | peak memory (MB) | precision | recall | " + " | ".join(f"recall {k}" for k in kinds) + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(kinds),
    ]

    def row(name: str, n: int, r: dict) -> str:
        rk = " | ".join(f"{r['recall_by_kind'][k]:.3f}" if r["recall_by_kind"].get(k) is not None else "–" for k in kinds)
        runs = ", ".join(f"{x:,}" for x in r.get("runs", []))
        return (f"| {name} | {n / r['seconds']:,.0f} ({runs}) | {r['cpu_s']:,.0f} | {r['peak_mb']:,.0f} | {r['precision']:.4f} | "
                f"{r['recall']:.4f} | {rk} |")

    names = {"project": "project (`worldline dedup`)", "datasketch": "datasketch MinHashLSH, direct",
             "datatrove": "datatrove 0.10.1 MinHash (3 stages)"}
    for system, r in results.items():
        lines.append(row(f"{names[system]} @ {a.n:,}", a.n, r))
    if big:
        lines.append(row(f"{names['project']} @ {a.big:,}", a.big, big))
    lines.append("")
    base = [results[s] for s in ("datasketch", "datatrove") if s in results]
    if "project" in results and base:
        fastest = max(a.n / r["seconds"] for r in base)
        ours = a.n / results["project"]["seconds"]
        lines.append(f"- throughput vs the faster baseline: {ours / fastest:.2f}x (target ≥ 2x); "
                     f"precision {results['project']['precision']:.4f} vs best baseline "
                     f"{max(r['precision'] for r in base):.4f}, recall {results['project']['recall']:.4f} vs "
                     f"{max(r['recall'] for r in base):.4f}")
    if big and "project" in results:
        lines.append(f"- project peak memory at {a.big:,} / at {a.n:,}: {big['peak_mb'] / results['project']['peak_mb']:.2f}x (target ≤ 2x)")
    if "project" in results:
        lines.append(f"- project phases @ {a.n:,}: {json.dumps(results['project']['detail'])}")
    if big:
        lines.append(f"- project phases @ {a.big:,}: {json.dumps(big['detail'])}")
    lines += ["", f"Machine: {machine()}.", "",
              "Each system runs in a fresh process; trajectories/s is wall-clock (the fastest of the alternating runs listed "
              "in parentheses), CPU s adds up all threads of that run, peak memory is its `ru_maxrss`.", "",
              f"Rerun: `.venv/bin/python bench/dedup.py --n {a.n} --big {a.big}` (workloads are cached under `build/bench/dedup/`)."]
    body = "\n".join(lines)
    print(body)
    if not a.no_doc:
        write_section(DOC, SECTION, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
