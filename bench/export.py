"""Export throughput (tokens/s) against a one-sample-at-a-time Python baseline, and the reader's samples/s.

    .venv/bin/python bench/export.py [--corpus DIR] [--seq-len 2048] [--repeat 3]

In one run, over the same corpus (default: the bundled sample `data/sample/corpus`, ingested,
cleaned, deduplicated and surface-scored into `build/bench/export/corpus-v2` once), with the tokenizer loaded once
beforehand (loading is not timed) and a fresh segment cache per run:

- baseline: the simplest correct exporter. For each trajectory: redact its texts, build the
  world-model conversation (`pipelines.render.conversation`), render and tokenize it with
  `pipelines.render.render` (the Hugging Face tokenizer call and the chat template, per
  trajectory), and for a trajectory longer than the sequence length the same windows as the
  project, each rendered and tokenized the same way; masks, labels and position ids are built
  with Python loops over tokens; documents are packed with the project's best-fit-decreasing
  (`pipelines.pack.best_fit_decreasing`), samples become Python lists and Parquet is written with
  `pyarrow.Table.from_pylist`. It writes Parquet only and no manifest, eval set or checksums.
- project (parquet): `pipelines.export.export` with `formats=("parquet",)`, in one process, and
  with `--workers` processes building documents (byte-identical output);
- project (all formats): Parquet, chat JSONL.zst and Megatron binaries, in one process.

Both must produce the same number of tokens and loss tokens (checked). Each is run `--repeat`
times and the best time kept (the machine is shared and noisy). Then the reader: samples/s of
`pipelines.loader.PackedShards` over the train split in one process, and through a DataLoader with
2 workers. Results go to `docs/benchmarks.md` under "## Export (bench/export.py)" (other sections
are kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from bench.benchdoc import DOC, load_note, write_section  # noqa: E402

SECTION = "## Export (bench/export.py)"
def baseline(corpus: Path, out: Path, cfg: Any, tok: Any) -> tuple[int, int, int]:
    """(tokens, loss tokens, samples): one trajectory at a time, Python lists, per-call HF tokenizer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.export import _trajectory_reader, group_key, split_of, turn_trains
    from pipelines.pack import best_fit_decreasing, group_lengths, next_window
    from pipelines.query import connect, views
    from pipelines.redact import Redactor
    from pipelines.render import conversation, messages, render

    con = connect(corpus)
    red = Redactor(cfg.redact)
    L = cfg.seq_len
    docs: dict[str, list[tuple[list[int], list[int]]]] = {"train": [], "validation": [], "test": []}

    def document(r: Any, train: list[bool]) -> tuple[list[int], list[int]]:
        ids = [int(x) for x in r.ids]
        mask = [0] * len(ids)
        for (_, s, e), t in zip(r.spans, train, strict=True):
            if t:
                for i in range(s, e):
                    mask[i] = 1
        ids, mask = ids[:L], mask[:L]
        if mask:
            mask[0] = 0
        return ids, mask

    have = views(con)
    scored = "turn_scores" in have

    for batch in _trajectory_reader(con, have, 256):
        for row in batch.to_pylist():
            traj = {k: row[k] for k in ("trajectory_id", "domain", "source_format", "source")}
            for k in ("task", "action_space", "initial_state"):
                traj[k] = red(row[k])
            turns = [{**u, **{k: red(u[k]) for k in ("action", "tool_name", "tool_args", "thought", "observation")}}
                     for u in row["turns"]]
            conv = conversation(traj, turns, cfg.render)
            if not conv.groups:
                continue
            split = split_of(group_key(row, cfg.split), cfg.split)
            n = len(conv.groups)
            by_index = {u["turn_index"]: u for u in turns}
            train = [turn_trains(by_index[g.turn_index], scored, cfg.unscored) for g in conv.groups]
            r = render(tok.hf, messages(conv), list(range(n)))
            if len(r.ids) <= L:
                out_docs = [document(r, train)]
            else:
                system = conv.system
                sys_ids = tok.hf(system, add_special_tokens=False)["input_ids"]
                if len(sys_ids) > L // 2:
                    system = tok.hf.decode(sys_ids[: L // 2])
                full_sys = len(render(tok.hf, [{"role": "system", "content": conv.system}], []).ids)
                sys_len = len(render(tok.hf, [{"role": "system", "content": system}], []).ids)
                glen = group_lengths([e for _, _, e in r.spans], full_sys)
                out_docs, s = [], 0
                while s < n:
                    j, e = next_window(glen, L - sys_len, s, cfg.history_fraction)
                    while True:
                        w = render(tok.hf, messages(conv, conv.groups[j:e], system), list(range(e - j)))
                        if len(w.ids) <= L or (j == s and e == s + 1):
                            break
                        if j < s:
                            j += 1
                        else:
                            e -= 1
                    out_docs.append(document(w, [i >= s - j and train[j + i] for i in range(e - j)]))
                    s = e
            docs[split] += [d for d in out_docs if sum(d[1])]
    tokens = loss = samples = 0
    for split, ds in docs.items():
        bins = best_fit_decreasing([len(d[0]) for d in ds], L)
        rows = []
        for b in bins:
            ids, mask, pos, cu = [], [], [], [0]
            for i in b:
                ids += ds[i][0]
                mask += ds[i][1]
                pos += list(range(len(ds[i][0])))
                cu.append(len(ids))
            labels = [t if m else -100 for t, m in zip(ids, mask, strict=True)]
            rows.append({"input_ids": ids, "labels": labels, "loss_mask": mask, "position_ids": pos, "cu_seqlens": cu})
            tokens += len(ids)
            loss += sum(mask)
        samples += len(rows)
        if rows:
            pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet", compression="zstd")
    return tokens, loss, samples


def ensure_corpus(path: Path | None) -> Path:
    """The bundled sample corpus as the pipeline leaves it before export: ingested, cleaned (with
    its redaction scan), deduplicated and scored by the surface tier (the model tier takes too long
    on a CPU to run here). Built once under build/bench/export/, and again when its redaction scan
    no longer matches the rules (an edit of `pipelines/redact.py`): a stale scan would make the
    export redact every text, which is not what a pipeline run does."""
    if path is not None:
        return path
    from pipelines.clean import clean
    from pipelines.dedup import dedup
    from pipelines.export import ExportConfig, scan_usable
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score import ScoreConfig, score
    from pipelines.store import Corpus

    corpus = ROOT / "build" / "bench" / "export" / "corpus-v2"
    done = (corpus / "side" / "turn_scores" / "data.parquet").exists()  # the last step's committed table
    if not done or not scan_usable(Corpus(corpus), ExportConfig().redact):
        shutil.rmtree(corpus, ignore_errors=True)
        ingest([ROOT / "data" / "sample" / "corpus"], corpus, IngestConfig(), progress=False)
        clean(corpus, progress=False, echo=lambda m: None)
        dedup(corpus, progress=False)
        score(corpus, ScoreConfig(tier="surface"), progress=False)
    return corpus


def best_of(n: int, fn: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(n):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def reader_rates(out: Path) -> tuple[int, float, float]:
    from torch.utils.data import DataLoader

    from pipelines.loader import PackedShards

    ds = PackedShards(out, "train", seed=0)
    t0 = time.perf_counter()
    n = sum(1 for _ in ds)
    one = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    m = sum(len(b) for b in DataLoader(ds, batch_size=8, num_workers=2, collate_fn=_as_list))
    two = m / (time.perf_counter() - t0)
    assert m == n
    return n, one, two


class TimedBackend:
    """The Rust tokenizer with the seconds spent in its encode calls: the part of an export that
    no Python-side work can remove (every distinct text must be encoded once)."""

    def __init__(self, real: Any):
        self.real, self.seconds = real, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def _timed(self, fn: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            self.seconds += time.perf_counter() - t0

    def encode(self, *a: Any, **k: Any) -> Any:
        return self._timed(self.real.encode, *a, **k)

    def encode_batch(self, *a: Any, **k: Any) -> Any:
        return self._timed(self.real.encode_batch, *a, **k)

    def encode_batch_fast(self, *a: Any, **k: Any) -> Any:
        return self._timed(self.real.encode_batch_fast, *a, **k)


def bpe_share(corpus: Path, out: Path, cfg: Any, tok: Any, repeat: int) -> tuple[float, float, float]:
    """(seconds of the whole export, seconds inside the Rust encoder, CPU seconds of the process,
    every thread) of the fastest of `repeat` runs."""
    from pipelines.export import ExportTokenizer, export

    best = (float("inf"), 0.0, 0.0)
    for _ in range(repeat):
        et = ExportTokenizer(tok.hf, "smollm2")
        et.backend = TimedBackend(et.backend)
        t0, c0 = time.perf_counter(), time.process_time()
        export(corpus, out, cfg, progress=False, tokenizer=et, force=True)
        best = min(best, (time.perf_counter() - t0, et.backend.seconds, time.process_time() - c0))
    return best


def _as_list(batch: list) -> list:
    return batch


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="processes for the parallel run")
    p.add_argument("--doc", type=Path, default=DOC)
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)
    from pipelines.export import ExportConfig, ExportTokenizer, export

    corpus = ensure_corpus(a.corpus)
    tok = ExportTokenizer.load("smollm2")
    cfg = ExportConfig(seq_len=a.seq_len, formats=("parquet",), record_in_corpus=False, workers=1)
    with tempfile.TemporaryDirectory(prefix="wl-bench-export-") as tmp:
        work = Path(tmp)
        (work / "base").mkdir()
        t_base, (b_tokens, b_loss, b_samples) = best_of(a.repeat, lambda: baseline(corpus, work / "base", cfg, tok))

        def project(c: ExportConfig, name: str) -> Any:
            return export(corpus, work / name, c, progress=False, tokenizer=ExportTokenizer(tok.hf, "smollm2"), force=True)

        t_proj, s = best_of(a.repeat, lambda: project(cfg, "proj"))
        par_cfg = ExportConfig(seq_len=a.seq_len, formats=("parquet",), record_in_corpus=False, workers=a.workers)
        t_par, _ = best_of(a.repeat, lambda: project(par_cfg, "par"))
        all_cfg = ExportConfig(seq_len=a.seq_len, record_in_corpus=False, workers=1)
        t_all, s_all = best_of(a.repeat, lambda: project(all_cfg, "all"))
        p_tokens = sum(x.tokens for x in s.splits.values())
        p_loss = sum(x.loss_tokens for x in s.splits.values())
        if (p_tokens, p_loss) != (b_tokens, b_loss):
            print(f"MISMATCH: project {p_tokens}/{p_loss} tokens/loss, baseline {b_tokens}/{b_loss}", file=sys.stderr)
            return 1
        n, r1, r2 = reader_rates(work / "proj")
        t_prof, t_bpe, cpu_prof = bpe_share(corpus, work / "bpe", cfg, tok, a.repeat)
    rows = [
        ("baseline (one sample at a time, Python lists)", t_base, b_tokens),
        ("project, Parquet, 1 process", t_proj, p_tokens),
        (f"project, Parquet, {a.workers} worker processes", t_par, p_tokens),
        ("project, Parquet + chat JSONL.zst + Megatron, 1 process", t_all, p_tokens),
    ]
    lines = [
        f"Corpus `{corpus.relative_to(ROOT) if corpus.is_relative_to(ROOT) else corpus}`: "
        f"{s.trajectories_total} trajectories → {p_tokens:,} tokens ({p_loss:,} with loss) in "
        f"{sum(x.samples for x in s.splits.values())} samples of ≤{a.seq_len} tokens (baseline: {b_samples} samples, "
        "same tokens and loss tokens, checked). Tokenizer SmolLM2-135M-Instruct, loaded before timing. "
        f"Best of {a.repeat} runs each.",
        "",
        "| run | seconds | tokens/s | vs baseline |",
        "|---|---:|---:|---:|",
    ]
    for name, t, tokens in rows:
        lines.append(f"| {name} | {t:.2f} | {tokens / t:,.0f} | {t_base / t:.1f}x |")
    lines += [
        "",
        f"Reader (`pipelines.loader.PackedShards`, train split, {n} samples, seeded shuffle): "
        f"{r1:,.0f} samples/s in one process, {r2:,.0f} samples/s through a DataLoader with 2 workers.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
        f"{load_note(own_cores=float(os.cpu_count() or 1))}. Rerun: `.venv/bin/python bench/export.py`.",  # the encoder uses every core
        "",
        "Where the speed comes from: the project cuts each rendered text at the chat template's special "
        "tokens and encodes every distinct segment once, in one multi-threaded Rust call per batch of "
        "trajectories (a long trajectory's windows re-use the segments of its whole rendering instead of "
        "re-tokenizing the history they carry), asks the encoder for ids only (no offsets: with byte-level BPE "
        "each token's bytes follow from its id, so observation spans are found in byte positions), runs each batch's "
        "encoding in a thread while the next batch is rendered and the previous one packed, "
        "redacts only the texts `clean`'s scan flagged "
        "(the side table `redactions`, when it is current; otherwise every text), builds masks, labels and "
        "positions with numpy, and hands Arrow whole buffers; the baseline pays the Hugging Face call and the "
        "chat template per trajectory and per window, redacts every text, and loops over tokens in Python.",
        "",
        f"What bounds it: in a separate run of the project (1 process, Parquet; {t_prof:.2f} s) {t_bpe:.2f} s "
        f"were spent inside the Rust encoder's calls (on all {os.cpu_count()} cores, in a thread, while the main "
        "thread reads the corpus through DuckDB, redacts, renders, finds spans, packs and writes): every distinct "
        "text has to be encoded once, so with every other cost at zero the ratio could be at most "
        f"{t_base / t_bpe:.1f}x on this machine and corpus. The run used {cpu_prof:.2f} CPU-seconds, so on "
        f"{os.cpu_count()} cores it cannot take less than {cpu_prof / (os.cpu_count() or 1):.2f} s "
        f"({t_base / (cpu_prof / (os.cpu_count() or 1)):.1f}x) even with perfect overlap; worker processes gain "
        "nothing here because the encoder already uses every core. "
        + ("The 5x target is met." if t_base / t_proj >= 5 else "The 5x target is not reached on this machine.")
        + " The DataLoader figure is dominated by starting two worker processes for a few hundred samples.",
    ]
    body = "\n".join(lines)
    print(body)
    if not a.no_doc:
        write_section(a.doc, SECTION, body)
        print(f"\nwritten to {a.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
