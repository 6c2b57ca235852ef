"""The score stage: per-turn information scores and loss masks, written as the `turn_scores`
side table (`CORPUS/side/turn_scores/`, DuckDB view `turn_scores`).

Two tiers (see `pipelines.score_surface` and `pipelines.score_model`); raw scores are stored and
the mask is derived from them by `MaskPolicy`, so a policy change is `apply_policy` over stored
columns, never a recomputation. Running one tier carries the other tier's columns over from the
existing table (a surface re-run keeps the GPU's model scores).

Default mask policy, and why:

- `keep` (the surface tier's seeded draw by category) is the base: echo and boilerplate turns
  stay as context but mostly carry no loss, as published;
- where the model tier ran, a kept turn is masked when the observation is a near-copy of the
  context (`ifd < 0.1`: history and action explain over 90 % of its information; the surface
  tier compares with the current action only and misses copies of earlier observations) or when
  it is generic text the model predicts with no context at all (`uncond_nll < 0.5` nats/token);
- a high IFD (the context does not help) is *not* masked: novel environment output is what a
  world model has to learn; `max_ifd` can be set for Cherry-style filtering;
- turns with no observation (`context`) never carry loss.

`loss_weight` is the soft form for frameworks that weight the loss per token: the category's keep
ratio (the expected value of the draw) times the model-tier pass (0 or 1).
"""

from __future__ import annotations

import hashlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.progress import CountProgress
from pipelines.query import connect, views
from pipelines.render import cut_bound
from pipelines.score_model import MODEL_FIELDS, MODEL_SCHEMA, Plan  # no torch at import time
from pipelines.score_surface import CATEGORIES, SURFACE_FIELDS, SURFACE_SCHEMA, SurfaceConfig, score_surface
from pipelines.side import SideTableWriter, corpus_state, side_fingerprints, side_path
from pipelines.store import Corpus
from schemas.tables import side_table_schema

TABLE = "turn_scores"
TIERS = ("surface", "model", "both")


@dataclass(frozen=True)
class MaskPolicy:
    min_ifd: float = 0.1  # below: a near-copy of the context
    min_uncond_nll: float = 0.5  # below (nats/token): generic text, predictable with no context
    max_ifd: float = math.inf  # above: context does not help at all (off by default)

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


MASK_FIELDS = [
    pa.field("loss_mask", pa.bool_(), metadata={"doc": "train on this observation: keep, and the model tier's tests (policy)"}),
    pa.field("loss_weight", pa.float32(), metadata={"doc": "soft mask: keep ratio of the category × model-tier pass"}),
]


@dataclass(frozen=True)
class ScoreConfig:
    tier: str = "both"
    surface: SurfaceConfig = SurfaceConfig()
    model: Any = None  # ModelScoreConfig; None: the default (imported lazily: torch only when needed)
    policy: MaskPolicy = MaskPolicy()
    max_tokens: int | None = None  # cap on model-tier tokens (conditional + unconditional rows)
    skip_dropped: bool = True  # model tier scores only `kept_trajectories` (cleaning, dedup) when that view exists
    chunk_batches: int = 64  # plan this many batches' worth of tokens at a time (length sorting within)
    lock_wait_s: float = 600.0

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"--tier {self.tier!r}: use one of {', '.join(TIERS)}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"--max-tokens {self.max_tokens}: must be positive")

    def model_config(self) -> Any:
        from pipelines.score_model import ModelScoreConfig

        return self.model if self.model is not None else ModelScoreConfig()

    def fingerprint(self) -> str:
        d = {"surface": self.surface.fingerprint(), "policy": self.policy.fingerprint(), "max_tokens": self.max_tokens,
             "skip_dropped": self.skip_dropped}
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


def turn_scores_schema() -> pa.Schema:
    return side_table_schema(SURFACE_FIELDS + MODEL_FIELDS + MASK_FIELDS)


# ---------------------------------------------------------------------------------------------
# the mask


def apply_policy(t: pa.Table, policy: MaskPolicy, keep_ratios: dict[str, float]) -> pa.Table:
    """(Re)derive `loss_mask` and `loss_weight` from the stored raw scores."""
    n = t.num_rows
    keep = np.asarray(pc.fill_null(t["keep"], False).to_numpy(zero_copy_only=False), dtype=bool)
    cats = t["category"].to_pylist()
    ratio = np.array([keep_ratios.get(c, 0.0) for c in cats], dtype=np.float64) if n else np.zeros(0)
    has_model = np.asarray(pc.is_valid(t["cond_nll"]).to_numpy(zero_copy_only=False), dtype=bool)
    ifd = np.asarray(pc.fill_null(t["ifd"], np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    un = np.asarray(pc.fill_null(t["uncond_nll"], np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        fail = has_model & ((ifd < policy.min_ifd) | (un < policy.min_uncond_nll) | (ifd > policy.max_ifd))
    mask = keep & ~fail
    weight = np.where(fail, 0.0, ratio).astype(np.float32)
    t = t.drop_columns([c for c in ("loss_mask", "loss_weight") if c in t.column_names])
    return t.append_column(MASK_FIELDS[0], pa.array(mask, pa.bool_())).append_column(MASK_FIELDS[1], pa.array(weight, pa.float32()))


# ---------------------------------------------------------------------------------------------
# summary and progress


def _hist(values: np.ndarray, edges: list[float]) -> list[tuple[str, int]]:
    v = values[~np.isnan(values)]
    out = []
    for i in range(len(edges) - 1):
        lo, hi = edges[i], edges[i + 1]
        n = int(((v >= lo) & (v < hi)).sum()) if i < len(edges) - 2 else int((v >= lo).sum())
        out.append((f"[{lo:g}, {hi:g})" if i < len(edges) - 2 else f"≥ {lo:g}", n))
    below = int((v < edges[0]).sum())
    if below:
        out.insert(0, (f"< {edges[0]:g}", below))
    return out


@dataclass
class ScoreSummary:
    corpus: str
    tier: str
    turns: int = 0
    categories: dict[str, list[int]] = field(default_factory=dict)  # category -> [turns, kept, masked-in]
    domains: dict[str, list[int]] = field(default_factory=dict)  # domain -> [turns, loss_mask]
    model_trajectories: int = 0
    model_trajectories_total: int = 0
    model_turns: int = 0
    model_tokens: int = 0  # tokens the model forwarded (the cap counts planned rows, shared ones too)
    model_seconds: float = 0.0
    model_id: str = ""
    device: str = ""
    dtype: str = ""
    window_tokens: int = 0
    windowed_trajectories: int = 0
    uncond_shared: int = 0  # turns whose observation-alone score came from an identical observation
    truncated_turns: int = 0
    skipped_dropped: int = 0
    passed_over: int = 0  # model tier: trajectories too large for what was left of the token cap
    max_tokens: int | None = None
    fingerprint: str = ""  # the settings' (`ScoreConfig.fingerprint`), as recorded with the side table
    histograms: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(asdict(self)))

    def render(self) -> str:
        lines = [f"score → {self.corpus}: {self.turns} turns, tier {self.tier}, in {self.seconds:.1f} s"
                 + (f" (carried over: {', '.join(self.carried)})" if self.carried else "")]
        lines.append(f"  {'category':<12} {'turns':>8} {'keep':>8} {'loss on':>8}")
        for c in CATEGORIES:
            if c in self.categories:
                n, k, m = self.categories[c]
                lines.append(f"  {c:<12} {n:>8} {k:>8} {m:>8}")
        lines.append("  loss on / turns by domain: " + ", ".join(
            f"{d} {m}/{n} ({100.0 * m / max(n, 1):.0f}%)" for d, (n, m) in sorted(self.domains.items())))
        if self.model_trajectories_total:
            rate = self.model_tokens / max(self.model_seconds, 1e-9)
            cap = f", cap {self.max_tokens:,} tokens" if self.max_tokens else ""
            lines.append(
                f"  model tier: {self.model_id} on {self.device} ({self.dtype}); {self.model_trajectories}/"
                f"{self.model_trajectories_total} trajectories, {self.model_turns} turns, {self.model_tokens:,} tokens in "
                f"{self.model_seconds:.1f} s ({rate:,.0f} tokens/s, {self.model_turns / max(self.model_seconds, 1e-9):.1f} turns/s)"
                f"{cap}; window {self.window_tokens} ({self.windowed_trajectories} trajectories windowed, "
                f"{self.truncated_turns} turns truncated, {self.uncond_shared} repeated observations scored alone once)"
                + (f"; {self.skipped_dropped} dropped by cleaning/dedup skipped" if self.skipped_dropped else ""))
        for name, h in self.histograms.items():
            total = max(sum(n for _, n in h), 1)
            lines.append(f"  {name}:")
            for label, n in h:
                lines.append(f"    {label:>14} {n:>7} {'█' * round(30 * n / total)}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the stage


def _existing(corpus: Corpus) -> pa.Table | None:
    p = side_path(corpus, TABLE)
    return pq.read_table(p) if p.exists() else None


def _surface_all(con: Any, cfg: SurfaceConfig) -> pa.Table:
    reader = con.sql("""SELECT trajectory_id, turn_index, domain, kind, action, observation FROM turns
                        ORDER BY trajectory_id, turn_index""").to_arrow_reader(65_536)
    parts = [score_surface(b, cfg) for b in reader]
    return pa.concat_tables(parts) if parts else SURFACE_SCHEMA.empty_table()


def _model_scores(con: Any, cfg: ScoreConfig, summary: ScoreSummary, scorer: Any, progress: bool,
                  echo: Callable[[str], None]) -> pa.Table:
    """Model-tier rows for every scored turn (up to the token cap), in priority order."""
    seed = cfg.surface.seed
    skip = ""
    if cfg.skip_dropped and "kept_trajectories" in views(con):
        # model compute only where training can use it: not on trajectories cleaning or dedup drop
        # (their turns keep surface scores and get no loss anyway)
        skip = "WHERE tr.trajectory_id IN (SELECT trajectory_id FROM kept_trajectories)"
        summary.skipped_dropped = con.sql(
            "SELECT count(*) FROM trajectories WHERE trajectory_id NOT IN (SELECT trajectory_id FROM kept_trajectories)"
        ).fetchall()[0][0]
    total = con.sql(f"SELECT count(*) FROM trajectories tr {skip}").fetchall()[0][0]
    summary.model_trajectories_total = total
    # priority = md5(seed:trajectory_id): under a token cap, a deterministic sample of the corpus
    reader = con.sql(f"""
        SELECT md5('{int(seed)}:' || tr.trajectory_id) AS prio, tr.trajectory_id, tr.domain, tr.task,
               tr.action_space, tr.initial_state,
               list({{'turn_index': u.turn_index, 'kind': u.kind, 'action': u.action, 'tool_name': u.tool_name,
                      'tool_args': u.tool_args, 'thought': u.thought, 'observation': u.observation}}
                    ORDER BY u.turn_index) AS turns
        FROM trajectories tr JOIN turns u ON u.trajectory_id = tr.trajectory_id {skip}
        GROUP BY ALL ORDER BY prio""").to_arrow_reader(256)
    bar = CountProgress("score (model)", total, "trajectories", progress)
    out: list[pa.Table] = []
    chunk: list[Plan] = []
    chunk_tokens = chunk_slots = 0  # result slots of the chunk's plans so far
    used = 0
    chunk_limit = cfg.chunk_batches * scorer.batch_tokens
    t0 = time.monotonic()
    stop = False

    def flush() -> None:
        nonlocal chunk, chunk_tokens, chunk_slots
        if chunk:
            out.append(scorer.score_plans(chunk, lambda n, tok: bar(0, tok)))
            bar(len(chunk))
        chunk, chunk_tokens, chunk_slots = [], 0, 0

    windows0, shared0, run0 = scorer.stats["windows"], scorer.stats["uncond_shared"], scorer.stats["real_tokens"]
    # under the cap, a trajectory too large for what is left is passed over and the next ones tried
    # (the sample used to end at the first one)
    misses = 0
    bound = text_bound(scorer)
    for batch in reader:
        for row in batch.to_pylist():
            row = cut_long_texts(row, bound)
            counted = dict(scorer.stats) if cfg.max_tokens is not None else None
            p = scorer.plan(row, row["turns"], chunk_slots)
            if counted is not None:
                if p.tokens > cfg.max_tokens - used:
                    scorer.stats.update(counted)  # planning counts windows: not for a trajectory left out
                    summary.passed_over += 1
                    misses += 1
                    stop = misses >= MAX_CAP_MISSES  # nothing of the usual size fits any more
                    if stop:
                        break
                    continue
                misses = 0
            used += p.tokens
            chunk.append(p)
            chunk_tokens += p.tokens
            chunk_slots += len(p.turns)
            summary.model_trajectories += 1
            if chunk_tokens >= chunk_limit:
                flush()
        if stop:
            break
    flush()
    bar.finish()
    summary.model_seconds = time.monotonic() - t0
    summary.model_tokens = scorer.stats["real_tokens"] - run0  # forwarded: shared observation-alone rows run once
    summary.windowed_trajectories = scorer.stats["windows"] - windows0
    summary.uncond_shared = scorer.stats["uncond_shared"] - shared0
    t = pa.concat_tables(out) if out else MODEL_SCHEMA.empty_table()
    summary.model_turns = t.num_rows
    summary.truncated_turns = int(pc.sum(t["truncated"]).as_py() or 0) if t.num_rows else 0
    if cfg.max_tokens is not None and summary.model_trajectories < total:
        how = (f"stopped after {MAX_CAP_MISSES} in a row did not fit" if stop else "went through them all")
        echo(f"score: model tier capped at {cfg.max_tokens:,} tokens: {summary.model_trajectories} of {total} trajectories "
             f"scored, in md5(seed:trajectory_id) order ({summary.passed_over} too large for what was left passed over; "
             f"{how}); the rest have null model columns")
    return t


def text_bound(scorer: Any) -> int:
    """Characters of one text past which no token can reach a scored window (`render.cut_bound`; a
    turn longer than the window is truncated to it). No cut for a tokenizer without a fast backend."""
    backend = getattr(scorer.tokenizer, "backend_tokenizer", None)
    return sys.maxsize if backend is None else cut_bound(backend, scorer.window)


_ROW_TEXTS = ("task", "action_space", "initial_state")
_TURN_TEXTS = ("action", "tool_name", "tool_args", "thought", "observation")


def cut_long_texts(row: dict[str, Any], bound: int) -> dict[str, Any]:
    """The row with each text longer than `bound` cut there, before it is rendered and tokenized
    (a 20 MB observation took minutes and gigabytes to plan, for the window's tokens)."""
    def cut(d: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
        long = [k for k in keys if isinstance(d.get(k), str) and len(d[k]) > bound]
        return {**d, **{k: d[k][:bound] for k in long}} if long else d

    turns = [cut(u, _TURN_TEXTS) for u in row["turns"]]
    return {**cut(row, _ROW_TEXTS), "turns": turns}


def kept_verdicts(corpus: Corpus) -> dict[str, Any] | None:
    """The cleaning and dedup verdicts `kept_trajectories` stands on now, or None when neither ran."""
    return side_fingerprints(corpus, ("cleaning", "duplicates")) or None


MAX_CAP_MISSES = 64  # trajectories in a row that do not fit what is left of --max-tokens: the sample is full


def score(
    corpus_dir: Path | str,
    config: ScoreConfig = ScoreConfig(),
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    scorer: Any = None,
) -> ScoreSummary:
    """Score every turn of the corpus and (re)write the `turn_scores` side table.

    `scorer` may be a `TurnScorer` already set up (Dagster resources, tests); otherwise one is
    built from `config.model` and torn down at the end."""
    t0 = time.monotonic()
    echo = echo or (lambda m: print(m, file=sys.stderr))
    corpus = Corpus(corpus_dir)
    con = connect(corpus.root)
    state = corpus_state(corpus)
    summary = ScoreSummary(corpus=str(corpus.root), tier=config.tier, max_tokens=config.max_tokens)
    old = _existing(corpus)
    schema = turn_scores_schema()
    surface_names = [f.name for f in SURFACE_FIELDS]
    model_names = [f.name for f in MODEL_FIELDS]
    keys = ["trajectory_id", "turn_index"]
    meta_old = (old.schema.metadata or {}) if old is not None else {}
    old_cfg = orjson.loads(meta_old.get(b"worldline.config", b"{}"))

    if config.tier in ("surface", "both") or old is None or "category" not in (old.column_names if old is not None else []):
        surf = _surface_all(con, config.surface)
        surface_cfg = asdict(config.surface)
    else:
        surf = old.select(keys + surface_names)
        surface_cfg = old_cfg.get("surface", asdict(config.surface))
        summary.carried.append("surface")
    if config.tier in ("model", "both"):
        own = scorer is None
        if own:
            from pipelines.score_model import TurnScorer

            scorer = TurnScorer(config.model_config())
            scorer.setup()
        try:
            model = _model_scores(con, config, summary, scorer, progress, echo)
        finally:
            if own:
                scorer.teardown()
        summary.model_id, summary.device, summary.dtype = scorer.model_id, scorer.device, scorer.dtype_name
        summary.window_tokens = scorer.window
        model_cfg = {**orjson.loads(orjson.dumps(asdict(scorer.config), default=str)), "fingerprint": scorer.fingerprint,
                     "model_id": scorer.model_id, "dtype": scorer.dtype_name, "max_tokens": config.max_tokens,
                     "kept_from": kept_verdicts(corpus) if config.skip_dropped else "all trajectories"}
    elif old is not None and "cond_nll" in old.column_names:
        model = old.select(keys + model_names).filter(pc.is_valid(old["cond_nll"]))
        model_cfg = old_cfg.get("model")
        summary.carried.append("model")
    else:
        model = None
        model_cfg = None

    if model is not None and model.num_rows:
        t = surf.join(model, keys=keys, join_type="left outer")
    else:
        t = surf
        for f in MODEL_FIELDS:
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    t = t.sort_by([("trajectory_id", "ascending"), ("turn_index", "ascending")])
    t = apply_policy(t, config.policy, config.surface.keep_ratio if "surface" not in summary.carried
                     else dict(tuple(x) for x in surface_cfg.get("keep_ratios", config.surface.keep_ratios)))
    t = t.select(schema.names).cast(schema)
    _summarize(t, summary)
    cfg_doc = {"tier": config.tier, "surface": orjson.loads(orjson.dumps(surface_cfg, default=str)), "model": model_cfg,
               "policy": orjson.loads(orjson.dumps(asdict(config.policy), default=str)),
               "surface_fingerprint": config.surface.fingerprint(), "policy_fingerprint": config.policy.fingerprint()}
    summary.seconds = time.monotonic() - t0
    summary.fingerprint = config.fingerprint()
    with SideTableWriter(corpus, TABLE, schema, "score", summary.fingerprint, cfg_doc, state) as w:
        w.write(t)
        w.commit(_manifest_summary(summary), lock_wait_s=config.lock_wait_s)
    summary.seconds = time.monotonic() - t0
    return summary


def _manifest_summary(s: ScoreSummary) -> dict[str, Any]:
    d = s.as_dict()
    d.pop("histograms")
    return d


def _summarize(t: pa.Table, summary: ScoreSummary) -> None:
    summary.turns = t.num_rows
    cats = t["category"].to_pylist()
    keep = t["keep"].to_pylist()
    mask = t["loss_mask"].to_pylist()
    doms = t["domain"].to_pylist()
    for c, k, m, d in zip(cats, keep, mask, doms, strict=True):
        e = summary.categories.setdefault(c, [0, 0, 0])
        e[0] += 1
        e[1] += bool(k)
        e[2] += bool(m)
        dd = summary.domains.setdefault(d, [0, 0])
        dd[0] += 1
        dd[1] += bool(m)

    def arr(name: str) -> np.ndarray:
        return np.asarray(pc.fill_null(t[name].cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False), dtype=np.float64)

    scored = np.array([c != "context" for c in cats], dtype=bool)
    summary.histograms["novelty (surface)"] = _hist(arr("novelty")[scored], [0, 0.2, 0.4, 0.6, 0.8, 1.0])
    if summary.model_turns or pc.sum(pc.is_valid(t["cond_nll"]).cast(pa.int64())).as_py():
        summary.histograms["cond_nll (nats/token)"] = _hist(arr("cond_nll"), [0, 0.5, 1, 2, 3, 4, 6])
        summary.histograms["info_gain (nats/token)"] = _hist(arr("info_gain"), [0, 0.25, 0.5, 1, 2, 4])
        summary.histograms["ifd"] = _hist(arr("ifd"), [0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25])


# ---------------------------------------------------------------------------------------------
# data contracts over the written table (`worldline check`-style; Dagster asset checks)


def score_contracts(corpus_dir: Path | str) -> list[Any]:
    """Contracts of `turn_scores`: one row per turn, values consistent with the stored config, and
    the table computed from the corpus as it is now."""
    from pipelines.contracts import ContractResult

    corpus = Corpus(corpus_dir)
    if not side_path(corpus, TABLE).exists():
        return [ContractResult(n, False, "no turn_scores table; run `worldline score CORPUS`")
                for n in ("turn_scores_cover_turns", "turn_scores_valid", "turn_scores_current")]
    con = connect(corpus.root)
    q = lambda sql: con.sql(sql).fetchall()  # noqa: E731
    missing = q("SELECT count(*) FROM turns u ANTI JOIN turn_scores s USING (trajectory_id, turn_index)")[0][0]
    orphans = q("SELECT count(*) FROM turn_scores s ANTI JOIN turns u USING (trajectory_id, turn_index)")[0][0]
    dups = q("SELECT count(*) - count(DISTINCT (trajectory_id, turn_index)) FROM turn_scores")[0][0]
    cover = ContractResult("turn_scores_cover_turns", not (missing or orphans or dups),
                           "exactly one turn_scores row per turn", {"missing": missing, "orphans": orphans, "duplicates": dups})
    meta = pq.read_schema(side_path(corpus, TABLE)).metadata or {}
    cfg = orjson.loads(meta.get(b"worldline.config", b"{}"))
    ratios = dict(tuple(x) for x in (cfg.get("surface") or {}).get("keep_ratios", SurfaceConfig().keep_ratios))
    con.register("_ratios", pa.table({"category": list(ratios), "ratio": list(ratios.values())}))
    cats = ", ".join(f"'{c}'" for c in CATEGORIES)
    checks = {
        "unknown_category": f"SELECT count(*) FROM turn_scores WHERE category NOT IN ({cats})",
        "keep_disagrees_with_draw": """SELECT count(*) FROM turn_scores s JOIN _ratios r USING (category)
                                       WHERE s.keep <> (s.keep_draw < r.ratio)""",
        "loss_without_keep": "SELECT count(*) FROM turn_scores WHERE loss_mask AND NOT keep",
        "loss_on_context": "SELECT count(*) FROM turn_scores WHERE category = 'context' AND (loss_mask OR loss_weight > 0)",
        "ratios_out_of_range": """SELECT count(*) FROM turn_scores WHERE NOT (overlap BETWEEN 0 AND 1 AND novelty BETWEEN 0 AND 1
                                  AND jaccard BETWEEN 0 AND 1 AND length_ratio >= 0 AND keep_draw >= 0 AND keep_draw < 1)""",
        "bad_model_scores": """SELECT count(*) FROM turn_scores WHERE cond_nll IS NOT NULL AND (tokens < 1
                               OR NOT isfinite(cond_nll) OR NOT isfinite(uncond_nll) OR cond_nll < 0 OR uncond_nll < 0
                               OR abs(cond_nll_sum - cond_nll * tokens) > 1e-6 * greatest(1, cond_nll_sum)
                               OR abs(info_gain - (uncond_nll - cond_nll)) > 1e-9)""",
    }
    bad = {k: q(v)[0][0] for k, v in checks.items()}
    valid = ContractResult("turn_scores_valid", not any(bad.values()),
                           "known categories; keep = draw < ratio; loss only on kept turns; model scores finite and consistent",
                           bad)
    entry = corpus.manifest().get("side", {}).get(TABLE) or {}
    now = corpus_state(corpus)
    # the model tier skipped what cleaning and dedup dropped when it ran: are those verdicts still the ones?
    used = (cfg.get("model") or {}).get("kept_from", "all trajectories")
    kept_now = used == "all trajectories" or used == kept_verdicts(corpus)
    current = ContractResult("turn_scores_current", entry.get("corpus_state") == now and kept_now,
                             "computed from the corpus batches present now (and the model tier from the current "
                             "cleaning and dedup verdicts)",
                             {"scored_batches": (entry.get("corpus_state") or {}).get("batches"), "corpus_batches": now["batches"],
                              "model_tier_verdicts_current": kept_now, "rerun": f"worldline score {corpus.root}"}, severity="warn")
    return [cover, valid, current]
