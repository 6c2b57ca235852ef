"""Contracts of a thinking-trace output directory: what the Dagster asset checks and the tests run.

Each check reads only the output (and, for the split check, the corpus it names), so it catches a
damaged or hand-edited set as well as a bug in the stage.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pyarrow.parquet as pq

from pipelines.contracts import ContractResult, run_named
from pipelines.sources import sha256_file
from pipelines.traces.form import assistant_content, parse_candidate

CheckResult = ContractResult  # the traces checks are contracts like the other stages' (severity included)


def read_sft_jsonl(path: Path | str) -> list[dict[str, Any]]:
    import zstandard

    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().stream_reader(f).read()
    return [orjson.loads(line) for line in io.BytesIO(data).read().splitlines() if line]


class _Out:
    def __init__(self, out: Path, corpus: Path | None = None):
        self.out = out
        self.corpus = corpus  # the corpus the output came from, when the caller knows it (`worldline check`)
        self.manifest = orjson.loads((out / "manifest.json").read_bytes())
        self.sft = pq.read_table(out / "sft.parquet").to_pylist()
        self.cands = pq.read_table(out / "candidates.parquet").to_pylist()
        self.queries = pq.read_table(out / "queries.parquet").to_pylist()


def check_files(o: _Out) -> CheckResult:
    """Every file the manifest lists exists with its sha256."""
    bad = [f["path"] for f in o.manifest["files"]
           if not (o.out / f["path"]).exists() or sha256_file(o.out / f["path"]) != f["sha256"]]
    return CheckResult("files_match_manifest", not bad, check_files.__doc__ or "", {"mismatched": bad})


def check_rows(o: _Out) -> CheckResult:
    """SFT rows are complete chats in the world-model form ending in a strictly parsable answer."""
    bad: list[str] = []
    for r in o.sft:
        qid = r.get("query_id")
        missing = [k for k in ("trajectory_id", "turn_index", "messages", "prediction", "score", "reasoning",
                               "generator", "template") if r.get(k) is None]
        if missing:
            bad.append(f"{qid}: missing {missing}")
            continue
        roles = [m["role"] for m in r["messages"]]
        if roles[0] != "system" or roles[1:] != ["user", "assistant"] * ((len(roles) - 1) // 2) or len(roles) % 2 == 0:
            bad.append(f"{qid}: roles {roles} are not system, (user, assistant)+")
            continue
        last = r["messages"][-1]["content"]
        p = parse_candidate(last)
        if not p.ok or p.prediction != r["prediction"] or last != assistant_content(r["reasoning"], r["prediction"]):
            bad.append(f"{qid}: the assistant message is not the published form of its reasoning and prediction")
    return CheckResult("sft_rows_well_formed", not bad, check_rows.__doc__ or "", {"bad_rows": bad[:50]})


def check_no_rejected(o: _Out) -> CheckResult:
    """Every SFT row is the selected, parsed candidate of its query, scored at or above its threshold."""
    by = {(c["query_id"], c["candidate"]): c for c in o.cands}
    bad: list[str] = []
    for r in o.sft:
        c = by.get((r["query_id"], r["candidate"]))
        if c is None or not c["ok"] or not c["selected"] or not c["kept"] or c["reject_reason"] is not None:
            bad.append(f"{r['query_id']}#{r['candidate']}: not an accepted, selected candidate")
        elif c["score"] != r["score"] or r["score"] < r["threshold"] or c["prediction"] != r["prediction"]:
            bad.append(f"{r['query_id']}#{r['candidate']}: score {r['score']} / threshold {r['threshold']} / prediction mismatch")
    kept = sum(1 for c in o.cands if c["kept"])
    if kept != len(o.sft):
        bad.append(f"{kept} candidates marked kept but {len(o.sft)} SFT rows")
    # within a query: two queries may well get the same text, accepted for one and rejected for the other
    rejected_texts = {(c["query_id"], c["text"]) for c in o.cands if not c["ok"] and c["text"]}
    leaked = [r["query_id"] for r in o.sft if (r["query_id"], r["messages"][-1]["content"]) in rejected_texts]
    bad += [f"{q}: a rejected candidate's text is in the SFT set" for q in leaked]
    return CheckResult("no_rejected_in_sft", not bad, check_no_rejected.__doc__ or "", {"problems": bad[:50]})


def check_splits(o: _Out) -> CheckResult:
    """No query comes from a trajectory outside the query splits (the evaluation splits stay unseen)."""
    qcfg = o.manifest["config"]["queries"]
    allowed = set(qcfg["query_splits"])
    bad = [q["query_id"] for q in o.queries if q["split"] not in allowed]
    meta: dict[str, Any] = {"query_splits": sorted(allowed)}
    corpus = o.corpus or Path(o.manifest["corpus"])
    if not (corpus / "manifest.json").exists():  # the splits cannot be recomputed: not a pass by default
        bad.append(f"the corpus {corpus} is not there to recompute the splits from; check with `worldline check CORPUS "
                   "--traces DIR`")
    else:
        from pipelines.export import SplitConfig
        from pipelines.query import connect
        from pipelines.traces.queries import trajectory_splits

        s = qcfg["split"]
        split = SplitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in s.items()})
        now, source = trajectory_splits(corpus, connect(corpus), split)
        bad += [q["query_id"] for q in o.queries if now.get(q["trajectory_id"]) not in allowed]
        meta["recomputed_from"] = source
    return CheckResult("no_eval_split_queries", not bad, check_splits.__doc__ or "", {**meta, "bad": sorted(set(bad))[:50]})


def check_counts(o: _Out) -> CheckResult:
    """Counts reconcile: candidates = queries × K; parsed + rejected = candidates; kept queries = SFT rows."""
    k = o.manifest["config"]["k"]
    parsed = sum(1 for c in o.cands if c["ok"])
    rejected = sum(1 for c in o.cands if c["reject_reason"] is not None)
    kept_q = sum(1 for q in o.queries if q["kept"])
    jsonl = read_sft_jsonl(o.out / "sft.jsonl.zst")
    meta = {"queries": len(o.queries), "k": k, "candidates": len(o.cands), "parsed": parsed, "rejected": rejected,
            "kept_queries": kept_q, "sft_rows": len(o.sft), "jsonl_rows": len(jsonl)}
    ok = (len(o.cands) == len(o.queries) * k and parsed + rejected == len(o.cands) and kept_q == len(o.sft)
          and [r["query_id"] for r in jsonl] == [r["query_id"] for r in o.sft]
          and all(a["messages"] == b["messages"] for a, b in zip(jsonl, o.sft, strict=False)))
    return CheckResult("counts_reconcile", ok, check_counts.__doc__ or "", meta)


def check_retention(o: _Out, min_retention: float) -> CheckResult:
    """Retention (queries that yield a trace) is at or above the floor (a warning: a weak generator)."""
    n = len(o.queries)
    r = sum(1 for q in o.queries if q["kept"]) / n if n else 0.0
    return CheckResult("retention_floor", r >= min_retention, check_retention.__doc__ or "",
                       {"retention": round(r, 6), "min_retention": min_retention}, severity="warn")


TRACE_CHECKS: dict[str, Callable[..., CheckResult]] = {
    "files_match_manifest": check_files,
    "sft_rows_well_formed": check_rows,
    "no_rejected_in_sft": check_no_rejected,
    "no_eval_split_queries": check_splits,
    "counts_reconcile": check_counts,
    "retention_floor": check_retention,
}


def check_traces(out_dir: Path | str, min_retention: float = 0.0, corpus: Path | str | None = None) -> list[CheckResult]:
    """Run every check over an output directory (a missing or unreadable output fails them all); `corpus`:
    where the output came from (default: the path its manifest records)."""
    out = Path(out_dir)
    try:
        o = _Out(out, Path(corpus) if corpus is not None else None)
    except (OSError, orjson.JSONDecodeError) as e:
        return [CheckResult(n, False, (fn.__doc__ or n).strip(), {"error": f"{out}: {e}"}) for n, fn in TRACE_CHECKS.items()]
    return run_named({**TRACE_CHECKS, "retention_floor": lambda x: check_retention(x, min_retention)}, o)
