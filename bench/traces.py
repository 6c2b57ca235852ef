"""Thinking-trace throughput: queries/s of the whole stage against the loopback server, with
concurrency 1 and 8 in the same run (the same server process, the same queries, a fresh cache each).

    .venv/bin/python bench/traces.py [--queries 8] [-k 2] [--max-tokens 32] [--threads 1]

What it does:

1. Ingests the sample corpus (`data/sample/corpus`) into `build/bench/traces/corpus` (once).
2. Starts `python -m pipelines.serve_local` (SmolLM2-135M-Instruct through transformers, batching
   up to 8 requests) on a free loopback port, as a child with default signal handling, and stops
   it by its PID at the end.
3. Runs `pipelines.traces.traces` over the same queries with `EndpointGenerator(concurrency=1)`
   and then `concurrency=8`, each with an empty generation cache (so every candidate is
   generated), no judge, and records wall time, candidates, completion tokens and the server's
   batches (from `GET /stats`).
4. Writes the table under "## Thinking traces (bench/traces.py)" in `docs/benchmarks.md` (other
   sections are kept).

Concurrency helps because the server decodes the requests that arrive together as one batch:
the per-step cost of a 135M model on a CPU grows much less than linearly with the batch.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, load_note, write_section  # noqa: E402

SECTION = "## Thinking traces (bench/traces.py)"
WORK = ROOT / "build" / "bench" / "traces"


def _default_signals() -> None:
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


def start_server(threads: int, max_batch: int, port_file: Path) -> subprocess.Popen:
    port_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pipelines.serve_local", "--port", "0", "--threads", str(threads),
           "--max-batch", str(max_batch), "--port-file", str(port_file)]
    proc = subprocess.Popen(cmd, cwd=ROOT, preexec_fn=_default_signals, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while not port_file.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"serve_local exited with {proc.returncode} before serving")
        if time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError("serve_local did not start within 600 s")
        time.sleep(0.5)
    return proc


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stats(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats") as r:
        return json.loads(r.read())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=8)
    p.add_argument("-k", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server (1 on a shared CPU)")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    p.add_argument("--no-doc", action="store_true", help="print only; do not touch docs/benchmarks.md")
    a = p.parse_args()

    import pyarrow.parquet as pq

    from pipelines.ingest import ingest
    from pipelines.store import Corpus
    from pipelines.traces.engine import ChatRequest
    from pipelines.traces.generate import EndpointGenerator, Sampling
    from pipelines.traces.prompts import PromptLimits
    from pipelines.traces.queries import QueryConfig
    from pipelines.traces.stage import TracesConfig, traces

    WORK.mkdir(parents=True, exist_ok=True)
    corpus = WORK / "corpus"
    if not Corpus(corpus).exists():
        ingest([ROOT / "data" / "sample" / "corpus"], corpus, progress=False)
    cfg = TracesConfig(
        queries=QueryConfig(max_queries=a.queries, max_target_chars=300, history_turns=1),
        k=a.k, sampling=Sampling(max_tokens=a.max_tokens, temperature=0.7, top_p=0.95), templates=("chat",),
        limits=PromptLimits(max_system_chars=300, max_observation_chars=300, max_history_chars=600),
        prefill="<think>\n", threshold=0.0, write_side_table=False)
    proc = start_server(a.threads, a.max_batch, WORK / "url")
    rows = []
    try:
        url = (WORK / "url").read_text().strip()
        warm = ChatRequest([{"role": "user", "content": "hi"}], max_tokens=1)  # first-call costs out of the rows
        EndpointGenerator(url, "smollm2").complete_many([warm], lambda i, r: None)
        for c in a.concurrency:
            out = WORK / f"out-c{c}"
            shutil.rmtree(out, ignore_errors=True)
            s0 = stats(url)
            t0 = time.monotonic()
            s = traces(corpus, out, EndpointGenerator(url, "smollm2", concurrency=c), cfg, progress=False)
            wall = time.monotonic() - t0
            s1 = stats(url)
            batches = s1["batches"] - s0["batches"]
            g = s.generations
            rows.append({"concurrency": c, "queries": s.queries, "candidates": s.candidates, "seconds": wall,
                         "queries_per_s": s.queries / wall, "candidates_per_s": s.candidates / wall,
                         "completion_tokens": g["completion_tokens"], "prompt_tokens": g["prompt_tokens"],
                         "tokens_per_s": g["completion_tokens"] / wall, "batches": batches,
                         "mean_batch": (s1["completed"] - s0["completed"]) / max(batches, 1), "kept": s.kept,
                         "parsed": s.parsed, "rejected": s.rejected,
                         "texts": pq.read_table(out / "candidates.parquet", columns=["text"]).column("text").to_pylist()})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "texts"}), flush=True)
    finally:
        stop_server(proc)
    base = rows[0]["queries_per_s"]
    lines = [
        "The whole stage (query selection, prompts, generation through the HTTP client, strict parse, verifiers, "
        "selection, writing the SFT set) against `pipelines.serve_local` serving SmolLM2-135M-Instruct "
        f"(float32, CPU, {a.threads} torch thread(s), batches of up to {a.max_batch}); the same server process and "
        f"queries for every row, an empty cache each time. {a.queries} queries × K={a.k} candidates of at most "
        f"{a.max_tokens} tokens; template `chat` with the `<think>` prefill; one history turn.",
        "",
        "| concurrency | queries | candidates | seconds | queries/s | candidates/s | completion tokens/s | server batches (mean size) | speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['concurrency']} | {r['queries']} | {r['candidates']} | {r['seconds']:.1f} | "
                     f"{r['queries_per_s']:.3f} | {r['candidates_per_s']:.3f} | {r['tokens_per_s']:.2f} | "
                     f"{r['batches']} ({r['mean_batch']:.1f}) | {r['queries_per_s'] / base:.2f}× |")
    lines += [
        "",
        f"Prompt tokens per run: {rows[0]['prompt_tokens']:,}, completion tokens {rows[0]['completion_tokens']:,} "
        "(each prompt is prefilled alone, without padding; on a CPU prefill is most of the time and batches least). "
        "Every row generated the same candidates"
        + ("" if all(r["texts"] == rows[0]["texts"] for r in rows) else " — NOT: the texts differ between rows")
        + f" (per-request seeds). Parsed {rows[0]['parsed']} of {rows[0]['candidates']}; rejected: "
        + ", ".join(f"{k} {v}" for k, v in sorted(rows[0]["rejected"].items(), key=lambda x: -x[1]))
        + f" (SmolLM2-135M with a {a.max_tokens}-token budget rarely closes both blocks; throughput, not quality, "
        "is what this measures).",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}; "
        f"{load_note(own_cores=float(a.threads))}; measured {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}.",
        "",
        f"Rerun: `.venv/bin/python bench/traces.py --queries {a.queries} -k {a.k} --max-tokens {a.max_tokens} "
        f"--threads {a.threads}`",
    ]
    body = "\n".join(lines)
    print(body)
    if not a.no_doc:
        write_section(DOC, SECTION, body)


if __name__ == "__main__":
    main()
