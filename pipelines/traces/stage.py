"""The thinking-trace stage: queries → K candidates each → strict parse → verifiers (+ judge) →
best of K above a per-domain threshold → an SFT set.

Selection (documented combination): a parsed candidate's score is its verifier score `v`; with a
judge, `(1 − w)·v + w·j` where `j` is the judge's mean criterion mapped to [0, 1] and `w` the judge
weight (a candidate the judge could not grade keeps `v`, or is rejected when the judge is
`required`). The best candidate of a query is the highest score (ties: the lowest candidate
index); the query yields an SFT row only when that score reaches its domain's threshold.
Rejected candidates (unparsable, failed, judged invalid when required) never reach the SFT set;
every candidate, kept or not, is in `candidates.parquet` with its reason and scores.

Output directory (files written under a temporary name, then renamed into place; the manifest last):

    sft.jsonl.zst      chat JSON lines: messages (world-model form, assistant = <think>…</think>
                       <predicted_observation>…</predicted_observation>) + provenance
    sft.parquet        the same rows
    candidates.parquet every candidate: text, parse status and reason, scores, selected/kept
    queries.parquet    every query: split, stratum, weight, template, best score, kept
    summary.json       counts, retention and score distributions per domain and source
    manifest.json      config, fingerprint, corpus state, files with rows and sha256
    cache.sqlite       the generation cache (kept across runs; `cache_path` may share one)

The corpus gets a `traces` side table (one row per query), which the report plots.

Checked before anything is written: the corpus exists, and OUT is neither the corpus nor inside it.
A run in which no candidate could be generated at all (every request failed: the endpoint is down
or wrong) raises `EndpointError` naming the endpoint and writes neither outputs nor the side table
(a new OUT is removed again), so it cannot pass for a finished run that kept nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import os
import shutil
import sqlite3
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from collectors.policies import EndpointError
from pipelines.query import connect
from pipelines.redact import Redactor, recorded_config
from pipelines.render import Conversation, messages
from pipelines.side import corpus_state, write_side_table
from pipelines.sources import sha256_file
from pipelines.store import Corpus, refuse_output_in_corpus, write_json_atomic
from pipelines.traces.engine import ChatRequest
from pipelines.traces.form import REJECT_REASONS, assistant_content, parse_candidate
from pipelines.traces.generate import GenerationCache, Generator, Sampling, cache_key, generate_cached
from pipelines.traces.prompts import (
    RUBRIC_VERSION,
    TEMPLATES,
    TEMPLATES_VERSION,
    PromptLimits,
    PromptQuery,
    candidate_seed,
    choose_template,
    judge_messages,
    parse_judgement,
)
from pipelines.traces.queries import Query, QueryConfig, load_queries, select_queries
from pipelines.traces.verify import DOMAIN_VERIFIERS, verify
from schemas.options import at_least
from schemas.tables import _f, check_domains, side_table_schema

SFT_FORMAT = "worldline-traces/1"


@dataclass(frozen=True)
class JudgeConfig:
    weight: float = 0.3
    required: bool = False  # a candidate the judge cannot grade is rejected (else: verifier score only)
    max_tokens: int = 160
    history_turns: int = 2

    def __post_init__(self) -> None:
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"judge weight {self.weight} is not in [0, 1]")
        at_least("--judge-max-tokens", self.max_tokens, 1)

    def changed(self) -> list[str]:
        """The fields set to other than their defaults, sorted: what a run without a judge must not be given."""
        default = JudgeConfig()
        return sorted(f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name))


@dataclass(frozen=True)
class TracesConfig:
    queries: QueryConfig = QueryConfig()
    k: int = 4
    sampling: Sampling = Sampling()
    templates: tuple[str, ...] = tuple(TEMPLATES)
    limits: PromptLimits = PromptLimits()
    prefill: str = ""  # e.g. "<think>\n": sent as a final assistant message to continue (vLLM, SGLang)
    seed: int = 0
    threshold: float = 0.5
    thresholds: tuple[tuple[str, float], ...] = ()  # per-domain overrides of `threshold`
    verifiers: tuple[tuple[str, str], ...] = tuple(DOMAIN_VERIFIERS.items())
    judge: JudgeConfig | None = None
    write_side_table: bool = True
    cache_path: str | None = None  # default: OUT/cache.sqlite
    lock_wait_s: float = 600.0

    def __post_init__(self) -> None:
        at_least("-k", self.k, 1)
        choose_template(self.templates, 0, "")  # validates the names
        check_domains("--domain-threshold", (d for d, _ in self.thresholds))
        at_least("--threshold", self.threshold, 0)  # above 1 is allowed (selected, never kept)
        for d, t in self.thresholds:
            if not t >= 0:
                raise ValueError(f"--domain-threshold {d}={t}: a threshold must be at least 0")

    def threshold_for(self, domain: str) -> float:
        return dict(self.thresholds).get(domain, self.threshold)

    def fingerprint(self, generator: str = "", judge: str = "") -> str:
        d = asdict(self)
        for k in ("write_side_table", "cache_path", "lock_wait_s"):
            d.pop(k)
        d.update(generator=generator, judge=judge, templates_version=TEMPLATES_VERSION, rubric=RUBRIC_VERSION)
        return hashlib.sha256(orjson.dumps(d, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


@dataclass
class TracesSummary:
    corpus: str
    out: str
    fingerprint: str = ""
    generator: str = ""
    judge: str | None = None
    weighting: str = ""
    eligible: int = 0
    excluded_split: int = 0
    queries: int = 0
    candidates: int = 0
    parsed: int = 0
    kept: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    by_domain: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_source: dict[str, dict[str, Any]] = field(default_factory=dict)
    generations: dict[str, Any] = field(default_factory=dict)
    judge_calls: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def retention(self) -> float:
        return self.kept / self.queries if self.queries else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "retention": round(self.retention, 6)}

    def render(self) -> str:
        g = self.generations
        lines = [
            f"traces → {self.out}: {self.queries} queries, {self.candidates} candidates (K per query) in {self.seconds:.1f} s "
            f"(generator {self.generator}{', judge ' + self.judge if self.judge else ''})",
            f"  queries from {self.eligible} eligible turns ({self.weighting}); {self.excluded_split} turns left out "
            f"for their split",
            f"  generations: {g.get('generated', 0)} new, {g.get('cached', 0)} from cache, {g.get('failed', 0)} failed",
            *([f"  judge calls: {j.get('generated', 0)} new, {j.get('cached', 0)} from cache, {j.get('failed', 0)} failed; "
               f"{j.get('invalid', 0)} candidates without a valid grading"] if (j := self.judge_calls) else []),
            f"  candidates: {self.parsed} parsed, {self.candidates - self.parsed} rejected"
            + (": " + ", ".join(f"{r} {n}" for r, n in sorted(self.rejected.items(), key=lambda x: (-x[1], x[0]))) if self.rejected else ""),
            f"  kept {self.kept} of {self.queries} queries ({100 * self.retention:.1f} %)",
            f"  {'domain':<10} {'queries':>7} {'kept':>5} {'retention':>9} {'best p50':>8}  threshold",
        ]
        for d, s in sorted(self.by_domain.items()):
            p50 = "-" if s["best_p50"] is None else f"{s['best_p50']:.3f}"
            lines.append(f"  {d:<10} {s['queries']:>7} {s['kept']:>5} {100 * s['retention']:>8.1f}% {p50:>8}  {s['threshold']}")
        return "\n".join(lines)


def _quantile(xs: list[float], q: float) -> float | None:
    """Nearest-rank quantile (no interpolation: the value is one that occurred)."""
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _group_stats(rows: list[dict[str, Any]], key: str, cfg: TracesConfig) -> dict[str, dict[str, Any]]:
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r[key]].append(r)
    out = {}
    for k, rs in sorted(by.items()):
        best = [r["best_score"] for r in rs if r["best_score"] is not None]
        kept = sum(1 for r in rs if r["kept"])
        out[k] = {"queries": len(rs), "kept": kept, "retention": round(kept / len(rs), 6),
                  "best_p25": _quantile(best, 0.25), "best_p50": _quantile(best, 0.5), "best_p75": _quantile(best, 0.75)}
        if key == "domain":
            out[k]["threshold"] = cfg.threshold_for(k)
    return out


def _prompt_query(q: Query) -> PromptQuery:
    return PromptQuery(q.domain, q.system, q.history, q.user)


def build_requests(q: Query, cfg: TracesConfig, model: str) -> tuple[str, list[tuple[str, int, ChatRequest]]]:
    """The template of a query and its K (cache key, seed, request)."""
    name = choose_template(cfg.templates, cfg.seed, q.query_id)
    msgs = TEMPLATES[name](_prompt_query(q), cfg.limits)
    if cfg.prefill:
        msgs = [*msgs, {"role": "assistant", "content": cfg.prefill}]
    out = []
    for k in range(cfg.k):
        seed = candidate_seed(cfg.seed, q.query_id, k)
        req = ChatRequest(msgs, cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.sampling.top_p, seed,
                          list(cfg.sampling.stop), continue_final_message=bool(cfg.prefill))
        out.append((cache_key(model, msgs, cfg.sampling, seed), seed, req))
    return name, out


def _judge_sampling(j: JudgeConfig) -> Sampling:
    return Sampling(max_tokens=j.max_tokens, temperature=0.0, top_p=1.0)


def _no_queries(con: Any, q: QueryConfig, eligible: int) -> str:
    """Why no turn was chosen, with what the corpus does have."""
    have = con.sql("SELECT t.domain, count(*) FROM turns u JOIN trajectories t USING (trajectory_id) "
                   "WHERE u.kind = 'env' AND u.observation IS NOT NULL GROUP BY 1 ORDER BY 1").fetchall()
    corpus = ", ".join(f"{d} {n}" for d, n in have) or "none"
    wanted = (f"env turns with an observation of {q.min_target_chars}-{q.max_target_chars} characters, "
              f"in split(s) {', '.join(q.query_splits)}" + (f", domain(s) {', '.join(q.domains)}" if q.domains else ""))
    return (f"no turn to ask about ({eligible} eligible: {wanted}); the corpus's env turns by domain: {corpus}; "
            "nothing written")


def traces(
    corpus_dir: Path | str,
    out_dir: Path | str,
    generator: Generator,
    config: TracesConfig = TracesConfig(),
    judge: Generator | None = None,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> TracesSummary:
    """Run the stage; returns the summary (also in OUT/summary.json)."""
    t0 = time.monotonic()
    echo = echo or (lambda m: print(m, file=sys.stderr))
    if config.judge is not None and judge is None:
        raise ValueError("config.judge is set but no judge generator was given")
    corpus = Corpus(corpus_dir).require()  # before anything is created: a wrong path leaves nothing behind
    out = Path(out_dir)
    refuse_output_in_corpus(out, corpus.root, "traces --out")
    con = connect(corpus.root)
    sel = select_queries(corpus.root, config.queries, con)
    if not sel.queries:  # before anything is written: an empty SFT set would look like a finished run
        raise ValueError(_no_queries(con, config.queries, sel.candidates))
    _refuse_foreign_out(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    judge_model = judge.model if (judge is not None and config.judge is not None) else None
    fp = config.fingerprint(generator.model, judge_model or "")
    # absolute: the manifest's corpus is where `no_eval_split_queries` recomputes the splits, from any directory
    summary = TracesSummary(corpus=str(corpus.root.resolve()), out=str(out), fingerprint=fp, generator=generator.model,
                            judge=judge_model)
    state = corpus_state(corpus)

    redactor = Redactor(recorded_config(corpus))  # as clean was told (`--ip-addresses`), as export does
    queries = load_queries(corpus.root, sel.queries, config.queries, con, redactor)
    summary.weighting, summary.eligible, summary.excluded_split = sel.weighting, sel.candidates, sel.excluded_split
    summary.queries, summary.candidates = len(queries), len(queries) * config.k
    if progress:
        echo(f"traces: {len(queries)} queries from {sel.candidates} eligible turns in {len(sel.strata)} strata; "
             f"{summary.candidates} candidates")

    try:
        cache = GenerationCache(config.cache_path or out / "cache.sqlite")
    except (sqlite3.Error, OSError) as e:  # `--cache` a folder, or somewhere unwritable: nothing of use written
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise ValueError(f"traces --cache {config.cache_path or out / 'cache.sqlite'}: cannot open it as a "
                         f"SQLite file ({e})") from None
    try:
        plan = []
        for q in queries:
            name, reqs = build_requests(q, config, generator.model)
            plan.append((q, name, reqs))
        try:
            results, gstats = generate_cached(generator, ((key, req) for _, _, reqs in plan for key, _, req in reqs),
                                              cache, "traces: generate", progress)
            if plan and gstats.generated + gstats.cached == 0:
                raise EndpointError(_nothing_generated(generator, results, gstats))
        except EndpointError:
            # a new output directory holding nothing of use: no cache in it, or an empty one
            cache_inside = config.cache_path is None or out.resolve() in Path(config.cache_path).resolve().parents
            if created and (not cache_inside or not len(cache)):
                cache.close()
                shutil.rmtree(out, ignore_errors=True)
            raise
        summary.generations = asdict(gstats)

        cands: list[dict[str, Any]] = []
        for q, name, reqs in plan:
            for k, (key, seed, _) in enumerate(reqs):
                res = results[key]
                c: dict[str, Any] = {
                    "query_id": q.query_id, "trajectory_id": q.trajectory_id, "turn_index": q.turn_index,
                    "domain": q.domain, "source_format": q.source_format, "template": name, "candidate": k,
                    "seed": seed, "cache_key": key, "text": res.get("text"), "finish_reason": res.get("finish_reason"),
                    "error": res.get("error"), "ok": False, "reject_reason": None, "reasoning": None, "prediction": None,
                    "verifier": None, "verifier_score": None, "components": None, "judge_score": None,
                    "judge_criteria": None, "judge_status": None, "score": None, "selected": False, "kept": False,
                }
                if c["error"] is not None:
                    c["reject_reason"] = "generation_error"
                else:
                    p = parse_candidate(c["text"], c["finish_reason"])
                    if not p.ok:
                        c["reject_reason"] = p.reason
                    else:
                        assert p.reasoning is not None and p.prediction is not None
                        c["ok"] = c["parsed"] = True  # (a required judge may still reject it: `ok`, not `parsed`)
                        c["reasoning"], c["prediction"] = redactor(p.reasoning), redactor(p.prediction)
                        v = verify(q.domain, c["prediction"], q.observation, q.exit_code, q.is_error, dict(config.verifiers))
                        c["verifier"], c["verifier_score"], c["components"] = v.verifier, v.score, v.components
                        c["score"] = v.score
                cands.append(c)

        if config.judge is not None and judge is not None:
            _judge(cands, {q.query_id: q for q in queries}, config, judge, cache, summary, progress)
    finally:
        cache.close()

    # best of K, threshold per domain
    by_q: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in cands:
        by_q[c["query_id"]].append(c)
    qrows: list[dict[str, Any]] = []
    sft: list[dict[str, Any]] = []
    for q, name, _ in plan:
        cs = by_q[q.query_id]
        ok = [c for c in cs if c["ok"]]
        parsed = sum(1 for c in cs if c.get("parsed"))
        best = max(ok, key=lambda c: (c["score"], -c["candidate"])) if ok else None
        thr = config.threshold_for(q.domain)
        kept = best is not None and best["score"] >= thr
        if best is not None:
            best["selected"] = True
            best["kept"] = kept
        reasons = Counter(c["reject_reason"] for c in cs if c["reject_reason"])
        qrows.append({
            "query_id": q.query_id, "trajectory_id": q.trajectory_id, "turn_index": q.turn_index, "domain": q.domain,
            "source_format": q.source_format, "split": q.split, "stratum": q.stratum, "rank": q.rank,
            "category": q.category, "weight": q.weight, "template": name, "candidates": len(cs), "parsed": parsed,
            "best_candidate": best["candidate"] if best else None, "best_score": best["score"] if best else None,
            "threshold": thr, "kept": kept, "reject_reasons": orjson.dumps(dict(sorted(reasons.items()))).decode(),
        })
        if kept:
            assert best is not None
            msgs = messages(Conversation(q.system), q.history)
            msgs += [{"role": "user", "content": q.user},
                     {"role": "assistant", "content": assistant_content(best["reasoning"], best["prediction"])}]
            sft.append({
                "query_id": q.query_id, "trajectory_id": q.trajectory_id, "turn_index": q.turn_index,
                "domain": q.domain, "source_format": q.source_format, "split": q.split, "messages": msgs,
                "reasoning": best["reasoning"], "prediction": best["prediction"], "score": best["score"],
                "verifier": best["verifier"], "verifier_score": best["verifier_score"], "judge_score": best["judge_score"],
                "scores": {**(best["components"] or {}), **({"judge": best["judge_criteria"]} if best["judge_criteria"] else {})},
                "generator": generator.model, "judge": judge_model if best["judge_score"] is not None else None,
                "template": name, "candidate": best["candidate"],
                "seed": best["seed"], "candidates": len(cs), "parsed": parsed, "threshold": thr, "fingerprint": fp,
            })

    summary.parsed = sum(1 for c in cands if c.get("parsed"))
    summary.kept = len(sft)
    summary.rejected = dict(sorted(Counter(c["reject_reason"] for c in cands if c["reject_reason"]).items()))
    summary.by_domain = _group_stats(qrows, "domain", config)
    summary.by_source = _group_stats(qrows, "source_format", config)
    summary.seconds = time.monotonic() - t0
    _write_outputs(out, sft, cands, qrows, summary, config, fp, state, sel.views)
    if config.write_side_table:
        _write_side(corpus, qrows, config, fp, state, summary, generator.model)
    return summary


def _refuse_foreign_out(out: Path) -> None:
    """`--out` holding another tool's manifest (an export's, a corpus): writing ours over it would lose it."""
    m = out / "manifest.json"
    if not m.exists():
        return
    try:
        fmt = orjson.loads(m.read_bytes()).get("format")
    except (orjson.JSONDecodeError, AttributeError, OSError):
        fmt = None
    if fmt != SFT_FORMAT:
        raise ValueError(f"traces --out {out}: its manifest.json is not a traces output's (format {fmt!r}); "
                         "choose a new or empty directory, or an earlier traces --out")


def _nothing_generated(generator: Generator, results: dict[str, dict[str, Any]], stats: Any, what: str = "generated",
                       kept: str = "") -> str:
    """Why a run where every generation failed stops: no outputs and no side table are written, so
    it cannot pass for a finished run that kept nothing."""
    where = getattr(generator, "base_url", None) or f"the {generator.kind} generator"
    first = next((r["error"] for r in results.values() if "error" in r), "no answer")
    return (f"no candidate could be {what}: all {stats.failed} requests to {where} (model {generator.model}) "
            f"failed, the first with {first}; nothing written{kept}")


def _judge(cands: list[dict[str, Any]], qs: dict[str, Query], cfg: TracesConfig, judge: Generator,
           cache: GenerationCache, summary: TracesSummary, progress: bool) -> None:
    """Grade every parsed candidate's prediction (never its reasoning) and combine the scores."""
    assert cfg.judge is not None
    samp = _judge_sampling(cfg.judge)
    jobs = []
    for c in cands:
        if not c["ok"]:
            continue
        q = qs[c["query_id"]]
        msgs = judge_messages(_prompt_query(q), q.observation, c["prediction"], cfg.limits, cfg.judge.history_turns)
        key = cache_key(judge.model, msgs, samp, 0, kind="judge")
        c["_judge_key"] = key
        jobs.append((key, ChatRequest(msgs, samp.max_tokens, samp.temperature, samp.top_p, 0)))
    results, stats = generate_cached(judge, jobs, cache, "traces: judge", progress)
    if jobs and stats.generated + stats.cached == 0:
        # every grading failed: a run that went on would label its rows judged (or, judge required, reject
        # every candidate) and exit 0; the generations stay in the cache for the rerun
        raise EndpointError(_nothing_generated(judge, results, stats, "judged", " (the generations are cached)"))
    summary.judge_calls = asdict(stats)
    invalid = 0
    for c in cands:
        key = c.pop("_judge_key", None)
        if key is None:
            continue
        res = results[key]
        j = parse_judgement(res.get("text")) if "error" not in res else None
        if j is not None and j.ok:
            c["judge_score"], c["judge_criteria"], c["judge_status"] = j.score, j.criteria, "ok"
            c["score"] = round((1 - cfg.judge.weight) * c["verifier_score"] + cfg.judge.weight * j.score, 6)
        else:
            invalid += 1
            c["judge_status"] = "error" if j is None else f"invalid: {j.reason}"
            if cfg.judge.required:
                c["ok"], c["reject_reason"] = False, "judge_invalid"
    summary.judge_calls["invalid"] = invalid


REJECT_REASONS_ALL = {**REJECT_REASONS, "judge_invalid": "the judge's reply was not a valid grading (judge required)"}

_MSG = pa.list_(pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())]))
SFT_SCHEMA = pa.schema([
    ("query_id", pa.string()), ("trajectory_id", pa.string()), ("turn_index", pa.int32()), ("domain", pa.string()),
    ("source_format", pa.string()), ("split", pa.string()), ("messages", _MSG), ("reasoning", pa.string()),
    ("prediction", pa.string()), ("score", pa.float64()), ("verifier", pa.string()), ("verifier_score", pa.float64()),
    ("judge_score", pa.float64()), ("scores", pa.string()), ("generator", pa.string()), ("judge", pa.string()),
    ("template", pa.string()), ("candidate", pa.int32()), ("seed", pa.int64()), ("candidates", pa.int32()),
    ("parsed", pa.int32()), ("threshold", pa.float64()), ("fingerprint", pa.string()),
])
CANDIDATES_SCHEMA = pa.schema([
    ("query_id", pa.string()), ("trajectory_id", pa.string()), ("turn_index", pa.int32()), ("domain", pa.string()),
    ("source_format", pa.string()), ("template", pa.string()), ("candidate", pa.int32()), ("seed", pa.int64()),
    ("cache_key", pa.string()), ("text", pa.string()), ("finish_reason", pa.string()), ("error", pa.string()),
    ("ok", pa.bool_()), ("reject_reason", pa.string()), ("reasoning", pa.string()), ("prediction", pa.string()),
    ("verifier", pa.string()), ("verifier_score", pa.float64()), ("components", pa.string()),
    ("judge_score", pa.float64()), ("judge_criteria", pa.string()), ("judge_status", pa.string()),
    ("score", pa.float64()), ("selected", pa.bool_()), ("kept", pa.bool_()),
])
QUERIES_SCHEMA = pa.schema([
    ("query_id", pa.string()), ("trajectory_id", pa.string()), ("turn_index", pa.int32()), ("domain", pa.string()),
    ("source_format", pa.string()), ("split", pa.string()), ("stratum", pa.string()), ("rank", pa.int32()),
    ("category", pa.string()), ("weight", pa.float64()), ("template", pa.string()), ("candidates", pa.int32()),
    ("parsed", pa.int32()), ("best_candidate", pa.int32()), ("best_score", pa.float64()), ("threshold", pa.float64()),
    ("kept", pa.bool_()), ("reject_reasons", pa.string()),
])
TRACES_SIDE_SCHEMA = side_table_schema([
    _f("domain", pa.string(), "the turn's domain"),
    _f("source_format", pa.string(), "the trajectory's source format"),
    _f("template", pa.string(), "prompt template used for the query"),
    _f("candidates", pa.int32(), "candidates generated (K)"),
    _f("parsed", pa.int32(), "candidates that parsed strictly"),
    _f("best_score", pa.float64(), "score of the best parsed candidate (null: none parsed)"),
    _f("threshold", pa.float64(), "the domain's threshold"),
    _f("kept", pa.bool_(), "the query yielded an SFT row"),
    _f("reject_reasons", pa.string(), "JSON: rejected candidates by reason"),
    _f("generator", pa.string(), "model that generated the candidates"),
])


def _json_col(v: Any) -> str | None:
    return None if v is None else orjson.dumps(v, option=orjson.OPT_SORT_KEYS).decode()


def _write_outputs(out: Path, sft: list[dict[str, Any]], cands: list[dict[str, Any]], qrows: list[dict[str, Any]],
                   summary: TracesSummary, cfg: TracesConfig, fp: str, state: dict[str, Any], views: dict[str, str]) -> None:
    import zstandard

    tag = f".tmp-{os.getpid()}-{os.urandom(3).hex()}"
    staged: list[tuple[Path, Path, int]] = []

    def stage(name: str, rows: int) -> Path:
        tmp = out / f".{name}{tag}"
        staged.append((tmp, out / name, rows))
        return tmp

    sft_rows = [{**r, "scores": _json_col(r["scores"])} for r in sft]
    pq.write_table(pa.Table.from_pylist(sft_rows, schema=SFT_SCHEMA), stage("sft.parquet", len(sft)), compression="zstd")
    with open(stage("sft.jsonl.zst", len(sft)), "wb") as f, zstandard.ZstdCompressor(level=10).stream_writer(f) as w:
        for r in sft:
            w.write(orjson.dumps(r) + b"\n")
    crow = [{**c, "components": _json_col(c["components"]), "judge_criteria": _json_col(c["judge_criteria"])} for c in cands]
    pq.write_table(pa.Table.from_pylist(crow, schema=CANDIDATES_SCHEMA), stage("candidates.parquet", len(cands)), compression="zstd")
    pq.write_table(pa.Table.from_pylist(qrows, schema=QUERIES_SCHEMA), stage("queries.parquet", len(qrows)), compression="zstd")
    write_json_atomic(stage("summary.json", 1), summary.as_dict())
    files = []
    for tmp, dst, rows in staged:
        os.replace(tmp, dst)
        files.append({"path": dst.name, "rows": rows, "sha256": sha256_file(dst)})
    manifest = {
        "format": SFT_FORMAT, "fingerprint": fp, "corpus": summary.corpus, "corpus_state": state, "views": views,
        "generator": summary.generator, "judge": summary.judge,
        "config": orjson.loads(orjson.dumps(asdict(cfg), default=str)),
        "reject_reasons": REJECT_REASONS_ALL, "files": files,
        "counts": {"queries": summary.queries, "candidates": summary.candidates, "parsed": summary.parsed, "kept": summary.kept},
        "written_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    write_json_atomic(out / "manifest.json", manifest)


def _write_side(corpus: Corpus, qrows: list[dict[str, Any]], cfg: TracesConfig, fp: str, state: dict[str, Any],
                summary: TracesSummary, model: str) -> None:
    rows = sorted(qrows, key=lambda r: (r["trajectory_id"], r["turn_index"]))
    t = pa.table({
        "trajectory_id": [r["trajectory_id"] for r in rows], "turn_index": [r["turn_index"] for r in rows],
        "domain": [r["domain"] for r in rows], "source_format": [r["source_format"] for r in rows],
        "template": [r["template"] for r in rows], "candidates": [r["candidates"] for r in rows],
        "parsed": [r["parsed"] for r in rows], "best_score": [r["best_score"] for r in rows],
        "threshold": [r["threshold"] for r in rows], "kept": [r["kept"] for r in rows],
        "reject_reasons": [r["reject_reasons"] for r in rows], "generator": [model] * len(rows),
    }, schema=TRACES_SIDE_SCHEMA)
    cfg_doc = {**orjson.loads(orjson.dumps(asdict(cfg), default=str)), "out": summary.out}
    write_side_table(corpus, "traces", t, TRACES_SIDE_SCHEMA, "traces", fp, cfg_doc, state,
                     summary={"queries": summary.queries, "kept": summary.kept, "retention": round(summary.retention, 6)},
                     lock_wait_s=cfg.lock_wait_s)

