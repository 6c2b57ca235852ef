"""Model-tier scoring throughput: one pass per trajectory in token-budget batches (the project's
`TurnScorer`) against the naive way (one forward pass per turn over history + action +
observation, batch size 1), in one run, on the same trajectories.

    .venv/bin/python bench/score.py                      # CPU: SmolLM2-135M, fp32 and bf16
    .venv/bin/python bench/score.py --quick              # a few minutes
    .venv/bin/python bench/score.py --device cuda        # GPU: random-weight Qwen2-0.5B, bf16

What is measured:

- sets: `sample` = the first N trajectories of the ingested sample corpus in md5(trajectory_id)
  order whose rendering fits `--max-render` tokens; `20-turn` and `50-turn` = sessions stitched
  from the sample's InterCode bash turns (real actions and observations, consecutive turns of
  several trajectories under the first one's task), because the sample has too few real
  sessions that long. On CUDA the sample set is the whole sample corpus, repeated `--repeat`
  times, so that the GPU is fed.
- naive: for every turn, one batch-1 forward over the rendered tokens up to the end of its
  observation, plus one batch-1 forward over the observation alone (unconditional); the hidden
  states at the observation's positions go through the LM head (the same head code as the
  project, so the comparison isolates one pass per window, batching and scoring a repeated
  observation alone only once, `shared_unconditional`: the naive way runs every row).
- project: `TurnScorer.score_plans` (conditional windows and unconditional rows, length-sorted
  into `--batch-tokens` batches).
- both are timed over execution only; rendering and tokenization (identical work for both) are
  timed separately. Both must agree: the max |Δ| of per-turn mean NLL is reported.
- tokens/s counts real (unpadded) tokens through the model; turns/s counts scored turns;
  MFU = FLOPs the method needs / time / measured peak matmul FLOP/s of the dtype. Needed FLOPs
  per row of L tokens with T scored positions: 2·(layer weights)·L + 4·layers·heads·head_dim ·
  L(L+1)/2 (causal attention) + 2·d·vocab·T (the LM head at the scored positions only); padding
  is not counted. Peak: the best of repeated square matmuls (2048 on CPU, 8192 on CUDA),
  measured before and after each set.

Writes a Markdown table with the machine, load and rerun command into `docs/benchmarks.md`
under "## Scoring (bench/score.py)", one subsection per device (other sections are kept).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.benchdoc import DOC, cpu_model, load_note, section_body, write_section  # noqa: E402

SECTION = "## Scoring (bench/score.py)"
PREFACE = (
    "One pass per trajectory (`pipelines.score_model.TurnScorer`) against one forward pass per turn, in one run.\n"
    "CPU: `.venv/bin/python bench/score.py` (about 25 minutes on 2 cores; `--quick`: about 8). "
    "GPU: `.venv/bin/python bench/score.py --device cuda` (a random-weight Qwen2-0.5B built from its config, bf16, "
    "the whole sample corpus repeated 8 times; `--model llama-1.1b` for a 1.1B Llama; `--quick` for a short run). "
    "Each run replaces its own device's subsection below."
)
SAMPLE = ROOT / "data" / "sample" / "corpus"
WORKDIR = ROOT / "build" / "bench" / "score"

# Architectures built from a config with random weights (speed does not depend on the weights).
ARCHS: dict[str, dict[str, Any]] = {
    "qwen2-0.5b": {"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                   "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                   "max_position_embeddings": 32768, "tie_word_embeddings": True, "rope_theta": 1000000.0},
    "llama-1.1b": {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
                   "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
                   "max_position_embeddings": 8192, "tie_word_embeddings": False},
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# data


def load_corpus() -> tuple[list[dict], dict[str, list[dict]]]:
    from pipelines.ingest import ingest
    from pipelines.query import connect

    out = WORKDIR / "corpus"
    if not (out / "manifest.json").exists():
        ingest([SAMPLE], out, progress=False)
    con = connect(out)
    trajs = con.sql("""SELECT trajectory_id, domain, source_format, task, action_space, initial_state, num_turns
                       FROM trajectories ORDER BY md5(trajectory_id)""").to_arrow_reader().read_all().to_pylist()
    turns = con.sql("""SELECT trajectory_id, turn_index, kind, action, tool_name, tool_args, thought, observation
                       FROM turns ORDER BY trajectory_id, turn_index""").to_arrow_reader().read_all().to_pylist()
    by: dict[str, list[dict]] = {}
    for t in turns:
        by.setdefault(t["trajectory_id"], []).append(t)
    return trajs, by


def rendered_len(tok: Any, traj: dict, turns: list[dict]) -> int:
    from pipelines.render import conversation, render_groups

    conv = conversation(traj, turns)
    return len(render_groups(tok, conv, conv.groups).ids) if conv.groups else 0


def sample_set(tok: Any, trajs: list[dict], by: dict, n: int, max_render: int) -> list[tuple[dict, list[dict]]]:
    """`n` trajectories whose rendering fits `max_render` tokens, taken round-robin over the
    source formats (each in md5 order), so that the mix is not all short search sessions."""
    queues: dict[str, list[dict]] = {}
    for t in trajs:
        queues.setdefault(t["source_format"], []).append(t)
    out: list[tuple[dict, list[dict]]] = []
    while len(out) < n and any(queues.values()):
        for fmt in sorted(queues):
            while queues[fmt]:
                t = queues[fmt].pop(0)
                turns = by.get(t["trajectory_id"], [])
                if 0 < rendered_len(tok, t, turns) <= max_render:
                    out.append((t, turns))
                    break
            if len(out) == n:
                break
    return out


def stitched_set(trajs: list[dict], by: dict, n_turns: int, count: int, max_obs_chars: int = 400) -> list[tuple[dict, list[dict]]]:
    """Sessions of exactly `n_turns` env turns stitched from InterCode bash trajectories."""
    pool = [u for t in trajs if t["source_format"] == "intercode" for u in by.get(t["trajectory_id"], [])
            if u["kind"] == "env" and u["observation"] is not None and len(u["observation"]) <= max_obs_chars]
    heads = [t for t in trajs if t["source_format"] == "intercode"]
    out = []
    for k in range(count):
        start = (k * n_turns) % max(len(pool) - n_turns, 1)
        turns = [dict(u, trajectory_id=f"stitched-{n_turns}-{k}", turn_index=i) for i, u in enumerate(pool[start:start + n_turns])]
        head = dict(heads[k % len(heads)], trajectory_id=f"stitched-{n_turns}-{k}")
        out.append((head, turns))
    return out


# ---------------------------------------------------------------------------------------------
# measurement


def peak_matmul(torch: Any, dtype: Any, device: str, n: int, reps: int) -> float:
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(reps):
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(3):
            a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / 3)
    return 2.0 * n**3 / best


def needed_flops(cfg: Any, rows: list[tuple[int, int]]) -> float:
    from pipelines.score_model import flops_per_token

    lin, att = flops_per_token(cfg)
    d = getattr(cfg, "hidden_size", None) or cfg.n_embd
    head = 2.0 * d * cfg.vocab_size
    return float(sum(lin * L + att * L * (L + 1) / 2 + head * T for L, T in rows))


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_project(scorer: Any, items: list[tuple[dict, list[dict]]], torch: Any) -> dict:
    t0 = time.perf_counter()
    plans, slot = [], 0
    for traj, turns in items:
        p = scorer.plan(traj, turns, slot)
        slot += len(p.turns)
        plans.append(p)
    plan_s = time.perf_counter() - t0
    from pipelines.score_model import shared_unconditional

    # the rows the project really runs: a repeated observation is scored alone once
    jobs, _ = shared_unconditional([j for p in plans for j in p.jobs])
    rows = [(len(j.ids), sum(max(e - max(s, 1), 0) for _, s, e in j.targets)) for j in jobs]
    _sync(torch, scorer.device)
    t0 = time.perf_counter()
    table = scorer.score_plans(plans)
    _sync(torch, scorer.device)
    run_s = time.perf_counter() - t0
    return {"seconds": run_s, "plan_seconds": plan_s, "rows": rows, "turns": table.num_rows,
            "cond": dict(zip(zip(table["trajectory_id"].to_pylist(), table["turn_index"].to_pylist(), strict=True),
                             table["cond_nll"].to_pylist(), strict=True)),
            "padded": scorer.stats["padded_tokens"]}


def run_naive(scorer: Any, items: list[tuple[dict, list[dict]]], torch: Any, stride: int = 1, lean: bool = False) -> dict:
    """One batch-1 forward per turn over the rendered tokens up to the end of its observation,
    and one over the observation alone, on every `stride`-th turn. Plain (`lean=False`):
    `model(ids).logits` at every position, as a plain forward gives them, log-softmax in fp32 over
    the observation's positions. Lean: the project's head (hidden states at the observation's
    positions only through the LM head), so only the one-pass-and-batching difference remains."""
    from pipelines.render import conversation, render_groups
    from pipelines.score_model import Job

    t0 = time.perf_counter()
    work = []
    prefix = scorer.uncond_prefix()
    for traj, turns in items:
        conv = conversation(traj, turns)
        if not conv.groups:
            continue
        r = render_groups(scorer.tokenizer, conv, conv.groups)
        for k, (ti, s, e) in enumerate(r.spans):
            if k % stride == stride // 2:
                work.append(((traj["trajectory_id"], ti), r.ids[:e], s, np.concatenate([prefix, r.ids[s:e]]), len(prefix)))
    plan_s = time.perf_counter() - t0
    model = scorer.replicas[0]
    dev = scorer.device

    def nll(ids: np.ndarray, s: int) -> Any:
        if lean:
            return torch.from_numpy(scorer._forward(model, [Job(ids, [(0, s, len(ids))])], dev)[0][2])
        x = torch.from_numpy(ids).unsqueeze(0).to(dev)
        lp = model(input_ids=x, use_cache=False).logits[0, s - 1:-1].float().log_softmax(-1)
        return -lp.gather(1, x[0, s:, None])[:, 0]

    rows, cond = [], {}
    _sync(torch, dev)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for key, ids, s, u_ids, us in work:
            c = nll(ids, s)
            nll(u_ids, us)
            cond[key] = float(c.mean())
            rows += [(len(ids), len(ids) - s), (len(u_ids), len(u_ids) - us)]
    _sync(torch, dev)
    return {"seconds": time.perf_counter() - t0, "plan_seconds": plan_s, "rows": rows, "turns": len(work), "cond": cond}


def machine(device: str, torch: Any) -> str:
    if device.startswith("cuda"):
        p = torch.cuda.get_device_properties(0)
        return f"{torch.cuda.device_count()}× {p.name} ({p.total_memory / 2**30:.0f} GiB), torch {torch.__version__}"
    return f"{len(os.sched_getaffinity(0))} cores ({cpu_model()}), torch {torch.__version__} ({torch.get_num_threads()} threads)"


def write_doc(path: Path, sub: str, body: str) -> None:
    """Replace (or add) subsection `### sub` of the scoring section; other sections are kept."""
    sec = section_body(path, SECTION) or PREFACE
    head = f"### {sub}"
    block = f"{head}\n\n{body.strip()}\n\n"
    if head in sec:
        i = sec.index(head)
        j = re.search(r"^### ", sec[i + len(head):], flags=re.M)
        sec = sec[:i] + block + (sec[i + len(head) + j.start():] if j else "")
    else:
        sec = sec.rstrip("\n") + "\n\n" + block
    write_section(path, SECTION, sec)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--quick", action="store_true", help="fewer trajectories (a few minutes on 2 cores)")
    p.add_argument("--dtypes", default="", help="comma list (default: float32,bfloat16 on CPU, bfloat16 on CUDA)")
    p.add_argument("--model", default="", help="model: smollm2 (CPU default) or an architecture built with random weights: "
                   + ", ".join(ARCHS) + " (CUDA default qwen2-0.5b)")
    p.add_argument("--batch-tokens", type=int, default=0, help="project batch budget (default 2048 CPU, 65536 CUDA)")
    p.add_argument("--sample", type=int, default=0, help="sample trajectories (default 50; --quick 12)")
    p.add_argument("--max-render", type=int, default=2048, help="sample trajectories longer than this are skipped")
    p.add_argument("--repeat", type=int, default=0, help="CUDA: copies of the whole sample corpus (default 8)")
    p.add_argument("--naive-max-turns", type=int, default=0, help="cap on naive turns per set (default: all on CPU, 2000 on CUDA)")
    p.add_argument("--naive-stride", type=int, default=0,
                   help="naive runs every k-th turn of the stitched sets (its cost per turn does not depend on the others; default 5)")
    p.add_argument("--no-doc", action="store_true")
    a = p.parse_args(argv)

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from pipelines.score_model import ModelScoreConfig, TurnScorer, resolve_model

    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        log("--device cuda: no CUDA device visible to torch")
        return 2
    dtypes = [d for d in (a.dtypes or ("bfloat16" if cuda else "float32,bfloat16")).split(",") if d]
    model_name = a.model or ("qwen2-0.5b" if cuda else "smollm2")
    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2"), local_files_only=True)
    trajs, by = load_corpus()
    n_sample = a.sample or (12 if a.quick else 50)
    sets: dict[str, list] = {}
    if cuda:
        reps = a.repeat or (2 if a.quick else 8)
        base = [(t, by[t["trajectory_id"]]) for t in trajs if t["trajectory_id"] in by]
        sets["sample"] = [(dict(t, trajectory_id=f"{t['trajectory_id']}-{r}"), [dict(u, trajectory_id=f"{t['trajectory_id']}-{r}") for u in us])
                          for r in range(reps) for t, us in base]
        sets["20-turn"] = stitched_set(trajs, by, 20, 64 if not a.quick else 16)
        sets["50-turn"] = stitched_set(trajs, by, 50, 32 if not a.quick else 8)
    else:
        sets["sample"] = sample_set(tok, trajs, by, n_sample, a.max_render)
        sets["20-turn"] = stitched_set(trajs, by, 20, 1 if a.quick else 3)
        sets["50-turn"] = stitched_set(trajs, by, 50, 1 if a.quick else 2)
    naive_cap = a.naive_max_turns or (2000 if cuda else 10**9)
    stride = a.naive_stride or 5  # stitched sets only; the sample set runs every turn

    results = []
    budget = 0
    proj_cond: dict[str, dict[str, dict]] = {}
    size_note = ""
    load0 = os.getloadavg()
    for dt in dtypes:
        tdtype = getattr(torch, dt)
        if model_name in ARCHS:
            spec = dict(ARCHS[model_name])
            cfg = AutoConfig.for_model(spec.pop("model_type"), **spec)
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(cfg, dtype=tdtype, attn_implementation="sdpa")
            n_params = sum(q.numel() for q in model.parameters())
            size_note = f"{model_name} architecture with random weights, {n_params / 1e6:,.0f} M parameters"
        else:
            model = AutoModelForCausalLM.from_pretrained(resolve_model(model_name), dtype=tdtype, attn_implementation="sdpa",
                                                         local_files_only=True)
            n_params = sum(q.numel() for q in model.parameters())
            size_note = f"SmolLM2-135M-Instruct (real weights, {n_params / 1e6:,.0f} M parameters)"
        scfg = ModelScoreConfig(device=a.device, dtype=dt, max_batch_tokens=a.batch_tokens, max_context=8192)
        scorer = TurnScorer(scfg, model, tok)
        scorer.setup()
        budget = scorer.batch_tokens
        peak = peak_matmul(torch, tdtype, scorer.replicas[0].device.type if not cuda else a.device, 8192 if cuda else 2048, 5)
        for name, items in sets.items():
            if not items:
                continue
            log(f"{dt} {name}: {len(items)} trajectories, {sum(len(t) for _, t in items)} turns")
            scorer.stats["padded_tokens"] = 0
            proj = run_project(scorer, items, torch)
            naive_items, n_turns = [], 0
            for it in items:
                if n_turns >= naive_cap:
                    break
                naive_items.append(it)
                n_turns += len(it[1])
            st = 1 if name == "sample" else stride
            runs = [("naive plain (per turn, batch 1)", run_naive(scorer, naive_items, torch, st)),
                    ("naive lean (per turn, batch 1, head at targets)", run_naive(scorer, naive_items, torch, st, lean=True)),
                    ("project (one pass, batched)", proj)]
            peak = max(peak, peak_matmul(torch, tdtype, scorer.replicas[0].device.type if not cuda else a.device,
                                         8192 if cuda else 2048, 3))
            proj_cond.setdefault(name, {})[dt] = proj["cond"]
            for label, r in runs:
                diffs = [abs(v - proj["cond"][k]) for k, v in r["cond"].items() if v == v and proj["cond"].get(k) is not None]
                toks = sum(L for L, _ in r["rows"])
                fl = needed_flops(model.config, r["rows"])
                results.append({
                    "dtype": dt, "set": name, "method": label, "trajectories": len(items) if r is proj else len(naive_items),
                    "turns": r["turns"], "tokens": toks, "seconds": r["seconds"], "plan_seconds": r["plan_seconds"],
                    "tok_s": toks / r["seconds"], "turn_s": r["turns"] / r["seconds"],
                    "tflops": fl / r["seconds"] / 1e12, "mfu": fl / r["seconds"] / peak, "peak_tflops": peak / 1e12,
                    "padding": (r.get("padded", toks) - toks) / max(r.get("padded", toks), 1),
                    "maxdiff": max(diffs) if diffs else float("nan"),
                })
                log(f"  {label}: {r['turns']} turns, {toks:,} tokens in {r['seconds']:.1f} s → {toks / r['seconds']:,.0f} tok/s, "
                    f"{r['turns'] / r['seconds']:.2f} turns/s, MFU {fl / r['seconds'] / peak:.0%}")
        scorer.teardown()
        del model, scorer
        if cuda:
            torch.cuda.empty_cache()

    head = ("| dtype | set | method | traj | turns | tokens | s | tokens/s | turns/s | × plain | × lean | × plain fp32 | "
            "TFLOP/s | MFU | peak TFLOP/s | padding | max Δ cond NLL |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        def ratio(prefix: str, r: dict = r, dtype: str = "") -> float:
            base = next((x for x in results if x["dtype"] == (dtype or r["dtype"]) and x["set"] == r["set"]
                         and x["method"].startswith(prefix)), None)
            return r["turn_s"] / base["turn_s"] if base else float("nan")

        lines.append(
            f"| {r['dtype']} | {r['set']} | {r['method']} | {r['trajectories']} | {r['turns']} | {r['tokens']:,} | "
            f"{r['seconds']:.1f} | {r['tok_s']:,.0f} | {r['turn_s']:.2f} | {ratio('naive plain'):.1f} | {ratio('naive lean'):.1f} | "
            f"{ratio('naive plain', dtype='float32'):.1f} | {r['tflops']:.3f} | "
            f"{r['mfu']:.0%} | {r['peak_tflops']:.3f} | {r['padding']:.1%} | {r['maxdiff']:.1e} |")
    agree = []
    for name, by_dt in proj_cond.items():
        if "float32" in by_dt and "bfloat16" in by_dt:
            d = [abs(v - by_dt["float32"][k]) for k, v in by_dt["bfloat16"].items() if v == v and by_dt["float32"].get(k) is not None]
            rel = [abs(v - by_dt["float32"][k]) / max(by_dt["float32"][k], 1e-9) for k, v in by_dt["bfloat16"].items()
                   if v == v and by_dt["float32"].get(k)]
            agree.append(f"{name}: max {max(d):.3f} nats, median {statistics.median(d):.3f} nats ({statistics.median(rel):.1%} relative)")
    dtype_note = ("bf16 weights vs fp32, per-turn mean conditional NLL of the project's way: " + "; ".join(agree) + ".") if agree else ""
    cmd = " ".join([".venv/bin/python", "bench/score.py", *argv])
    sub = f"{'CUDA' if cuda else 'CPU'}: {machine(a.device, torch)}"
    body = f"""Rerun: `{cmd}`. Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; model: {size_note};
load average (1 min) {load0[0]:.1f} at start; {load_note(own_cores=float(torch.get_num_threads()))}.

Sets: `sample` = {len(sets['sample'])} trajectories ({sum(len(t) for _, t in sets['sample'])} turns) of the sample corpus
({'the whole corpus repeated' if cuda else f'round-robin over source formats in md5 order, rendering ≤ {a.max_render} tokens'}); `20-turn`/`50-turn` = sessions stitched
from the sample's InterCode bash turns. Naive = one batch-1 forward per turn over history + action + observation and one
over the observation alone{f" (on every {stride}th turn of the stitched sets)" if stride > 1 else ""}: plain = `model(ids).logits` at every
position as a plain forward gives them, lean = the project's head at the observation's positions only; project = `TurnScorer` (one pass per trajectory, length-sorted batches of
{budget:,} tokens, right padding, LM head only at scored positions, fp32 log-softmax, an observation that recurs in the set scored alone once; its tokens and FLOPs count the rows it runs). Times cover
execution only (rendering and tokenization are the same for both). MFU counts the FLOPs each method needs
(no padding) against the best measured square-matmul rate of the dtype; max Δ = largest per-turn difference of mean
conditional NLL between the method and the project's way (nats). {dtype_note}

{chr(10).join(lines)}
"""
    print(body)
    if not a.no_doc:
        write_doc(DOC, sub, body)
        log(f"updated {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
