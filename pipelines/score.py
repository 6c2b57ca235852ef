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
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.progress import StatusLine
from pipelines.query import connect, parquet_list, spill_workspace, sql_str, views
from pipelines.render import cut_bound
from pipelines.score_model import MODEL_FIELDS, MODEL_SCHEMA, Plan  # no torch at import time
from pipelines.score_surface import (
    CATEGORIES,
    SURFACE_FIELDS,
    SURFACE_SCHEMA,
    SurfaceConfig,
    score_surface,
)
from pipelines.shell import worldline_command
from pipelines.side import (
    SideTableWriter,
    corpus_state,
    side_fingerprints,
    side_path,
    side_schema,
    stale_side_tables,
)
from pipelines.store import Corpus
from schemas.options import INT_LIMIT, check_memory_limit
from schemas.tables import side_table_schema

TABLE = "turn_scores"
TIERS = ("surface", "model", "both")


@dataclass(frozen=True)
class MaskPolicy:
    min_ifd: float = 0.1  # below: a near-copy of the context
    min_uncond_nll: float = 0.5  # below (nats/token): generic text, predictable with no context
    max_ifd: float = math.inf  # above: context does not help at all (off by default)

    def __post_init__(self) -> None:
        """A NaN bound turned its test off without a word."""
        for name, v in (("min_ifd", self.min_ifd), ("min_uncond_nll", self.min_uncond_nll), ("max_ifd", self.max_ifd)):
            if math.isnan(v):
                raise ValueError(f"MaskPolicy.{name} is NaN")

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
    batch_rows: int = 8_192  # turns per batch read for the surface tier: the stage's memory follows these two,
    batch_bytes: int = 8 << 20  # and at most this much action and observation text scored at once (not the corpus)
    memory_limit: str = "128MB"  # DuckDB's limit: its sorts, joins and groupings spill to a temporary directory beyond it
    threads: int = 0  # DuckDB threads (0: its default)
    sort_bytes: int = 32 << 20  # model tier: trajectories are sorted by priority in ranges of about this much data

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"--tier {self.tier!r}: use one of {', '.join(TIERS)}")
        if self.max_tokens is not None and not 0 < self.max_tokens < INT_LIMIT:
            raise ValueError(f"--max-tokens {self.max_tokens}: must be positive and below 2**63")
        if min(self.batch_rows, self.batch_bytes, self.sort_bytes) <= 0:
            raise ValueError(f"batch_rows {self.batch_rows}, batch_bytes {self.batch_bytes}, sort_bytes {self.sort_bytes}: "
                             "must be positive")
        check_memory_limit(self.memory_limit)

    def model_config(self) -> Any:
        from pipelines.score_model import ModelScoreConfig

        return self.model if self.model is not None else ModelScoreConfig()



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


class _Hist:
    """Counts of values in the half-open bins between `edges` (the last bin open above, a `< first`
    bin only when something falls there; NaN left out), added up batch by batch."""

    def __init__(self, edges: list[float]):
        self.edges = edges
        self.counts = np.zeros(len(edges) - 1, dtype=np.int64)
        self.below = 0

    def add(self, values: np.ndarray) -> None:
        v = values[~np.isnan(values)]
        e = self.edges
        for i in range(len(e) - 1):
            self.counts[i] += int(((v >= e[i]) & (v < e[i + 1])).sum()) if i < len(e) - 2 else int((v >= e[i]).sum())
        self.below += int((v < e[0]).sum())

    def result(self) -> list[tuple[str, int]]:
        e = self.edges
        out = [(f"[{e[i]:g}, {e[i + 1]:g})" if i < len(e) - 2 else f"≥ {e[i]:g}", int(self.counts[i]))
               for i in range(len(e) - 1)]
        if self.below:
            out.insert(0, (f"< {e[0]:g}", self.below))
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
    truncated_systems: int = 0  # windowed trajectories whose system prompt was cut to half the window
    skipped_dropped: int = 0
    passed_over: int = 0  # model tier: trajectories too large for what was left of the token cap
    model_runner: str = ""  # a distributed model tier's runner (e.g. "Beam DirectRunner"), and its units
    model_units: int = 0
    max_tokens: int | None = None
    fingerprint: str = ""  # of the table: the surface, policy and model settings its columns hold, as recorded with it
    histograms: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    carried: list[str] = field(default_factory=list)
    model_stale: bool = False  # the carried model columns are of an earlier corpus (newer turns have none)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return orjson.loads(orjson.dumps(asdict(self)))

    def render(self) -> str:
        lines = [f"score → {self.corpus}: {self.turns} turns, tier {self.tier}, in {self.seconds:.1f} s"
                 + (f" (carried over: {', '.join(self.carried)})" if self.carried else "")]
        if self.model_stale:
            lines.append("  model tier: carried over from an earlier corpus; the turns added since have no model scores "
                         "(run --tier model)")
        lines.append(f"  {'category':<12} {'turns':>8} {'keep':>8} {'loss on':>8}")
        for c in CATEGORIES:
            if c in self.categories:
                n, k, m = self.categories[c]
                lines.append(f"  {c:<12} {n:>8} {k:>8} {m:>8}")
        lines.append("  loss on / turns by domain: " + ", ".join(
            f"{d} {m}/{n} ({100.0 * m / max(n, 1):.0f}%)" for d, (n, m) in sorted(self.domains.items())))
        if not self.model_trajectories_total and self.tier in ("model", "both"):
            lines.append("  model tier: nothing to score"
                         + (f" ({self.skipped_dropped} dropped by cleaning/dedup skipped)" if self.skipped_dropped else "")
                         + ("; the model was not loaded" if not self.device else ""))
        if self.model_trajectories_total:
            rate = self.model_tokens / max(self.model_seconds, 1e-9)
            cap = f", cap {self.max_tokens:,} tokens" if self.max_tokens else ""
            lines.append(
                f"  model tier: {self.model_id} on {self.device} ({self.dtype})"
                + (f" via {self.model_runner}, {self.model_units} units" if self.model_runner else "")
                + f"; {self.model_trajectories}/"
                f"{self.model_trajectories_total} trajectories, {self.model_turns} turns, {self.model_tokens:,} tokens in "
                f"{self.model_seconds:.1f} s ({rate:,.0f} tokens/s, {self.model_turns / max(self.model_seconds, 1e-9):.1f} turns/s)"
                f"{cap}; window {self.window_tokens} ({self.windowed_trajectories} trajectories windowed, "
                f"{self.truncated_turns} turns truncated, {self.uncond_shared} repeated observations scored alone once"
                + (f", {self.truncated_systems} system prompts cut to half the window" if self.truncated_systems else "")
                + ")"
                + (f"; {self.skipped_dropped} dropped by cleaning/dedup skipped" if self.skipped_dropped else ""))
        for name, h in self.histograms.items():
            total = max(sum(n for _, n in h), 1)
            lines.append(f"  {name}:")
            for label, n in h:
                lines.append(f"    {label:>14} {n:>7} {'█' * round(30 * n / total)}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# the stage


class _Status:
    """One phase's progress line (`pipelines.progress.StatusLine`, as the other stages): redrawn in
    place on a terminal, a plain line every 10 s in a log, and a last line when the phase ends."""

    def __init__(self, phase: str, enabled: bool):
        self.phase = phase
        self.line = StatusLine(enabled, width=110)

    def __call__(self, msg: str | Callable[[], str], force: bool = False) -> None:
        if self.line.due(force):
            self.line.show(f"score ({self.phase}) {msg() if callable(msg) else msg} · {self.line.elapsed:,.0f} s")

    def finish(self, msg: str | Callable[[], str]) -> None:
        self(msg, force=True)
        self.line.finish()


def _surface_pass(con: Any, cfg: ScoreConfig, path: Path, progress: bool) -> int:
    """Surface scores of every turn into the Parquet file `path`, `cfg.batch_rows` turns at a time
    in the order DuckDB reads them (the scores of a turn depend on that turn only; the rows are
    sorted when the table is written). Returns the number of rows."""
    total = con.sql("SELECT count(*) FROM turns").fetchall()[0][0]
    st = _Status("surface", progress)
    reader = con.sql("SELECT trajectory_id, turn_index, domain, kind, action, observation FROM turns").to_arrow_reader(
        cfg.batch_rows)
    done = 0

    def line() -> str:
        return f"{done:,}/{total:,} turns · {done / st.line.elapsed:,.0f} turns/s"

    st(line())
    with pq.ParquetWriter(path, SURFACE_SCHEMA, compression="lz4") as w:
        for b in reader:
            for part in _text_slices(b, cfg.batch_bytes):
                w.write_table(score_surface(part, cfg.surface))
                done += part.num_rows
                st(line)
    st.finish(line)
    return done


def _text_slices(b: pa.RecordBatch, budget: int) -> list[pa.RecordBatch]:
    """`b` cut into consecutive slices of at most `budget` bytes of action and observation text
    each (a longer single turn alone): word sets take several times their text in memory, and a
    batch of long observations would otherwise set the stage's peak."""
    n = b.num_rows
    size = np.zeros(n, dtype=np.int64)
    for c in ("action", "observation"):
        size += np.asarray(pc.fill_null(pc.binary_length(b.column(c)), 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    cum = np.cumsum(size)
    out, start = [], 0
    while start < n:
        before = cum[start - 1] if start else 0
        end = max(int(np.searchsorted(cum, before + budget, side="right")), start + 1)
        out.append(b.slice(start, end - start))
        start = end
    return out


def _kept_relation(con: Any, cfg: ScoreConfig, work: Path, summary: ScoreSummary) -> str | None:
    """The trajectories the model tier scores, as SQL over a file of (trajectory_id, prio), or None
    for all of them: not the ones cleaning or dedup drop (their turns keep surface scores and get
    no loss anyway). The view's joins run once, into a file (a table would stay in DuckDB's memory)."""
    if not (cfg.skip_dropped and "kept_trajectories" in views(con)):
        return None
    path = sql_str(str(work / "kept.parquet"))
    con.execute(f"COPY (SELECT DISTINCT trajectory_id, {_priority(int(cfg.surface.seed))} AS prio FROM kept_trajectories) "
                f"TO {path} (FORMAT parquet)")
    kept = f"read_parquet({path})"
    summary.skipped_dropped = con.sql(  # not those with no turn at all: nothing dropped them
        f"SELECT count(*) FROM trajectories WHERE num_turns > 0 AND trajectory_id NOT IN (SELECT trajectory_id FROM {kept})"
    ).fetchall()[0][0]
    return kept


def _model_total(con: Any, kept: str | None) -> int:
    """The trajectories the model tier would score: those with an observation to score (an environment
    turn that recorded one: `render.conversation`'s groups), kept ones only with `kept`."""
    skip = f"AND tr.trajectory_id IN (SELECT trajectory_id FROM {kept})" if kept else ""
    return con.sql(f"SELECT count(*) FROM trajectories tr WHERE EXISTS (SELECT 1 FROM turns u "
                   f"WHERE u.trajectory_id = tr.trajectory_id AND u.kind = 'env' AND u.observation IS NOT NULL) {skip}"
                   ).fetchall()[0][0]


_COUNTED = {"model_tokens": "real_tokens", "windowed_trajectories": "windows", "uncond_shared": "uncond_shared",
            "truncated_systems": "truncated_system"}


def _add_scorer_counts(summary: ScoreSummary, before: dict[str, int], after: dict[str, int]) -> None:
    """What the scorer counted between `before` and `after` (its `stats`), into the summary: tokens
    forwarded (shared observation-alone rows run once), trajectories windowed, observations shared."""
    for mine, theirs in _COUNTED.items():
        setattr(summary, mine, getattr(summary, mine) + after[theirs] - before[theirs])


class _ModelPass:
    """Plans and scores trajectories in the order they come, a chunk of about `chunk_batches`
    batches' tokens at a time, under the token cap; the counts go into `summary`, each scored chunk
    to `sink`. The same loop for the local run (every range, in priority order) and for one unit of
    a distributed run (one range)."""

    def __init__(self, cfg: ScoreConfig, scorer: Any, summary: ScoreSummary, sink: Callable[[pa.Table], None],
                 status: _Status | None = None, total: int = 0):
        self.cfg, self.scorer, self.summary, self.sink, self.status, self.total = cfg, scorer, summary, sink, status, total
        self.seen = self.scored = self.tokens = 0

    def line(self) -> str:
        elapsed = self.status.line.elapsed if self.status else 1.0
        return (f"{self.seen:,}/{self.total:,} trajectories · {self.scored:,} scored · {self.tokens:,} tokens · "
                f"{self.tokens / max(elapsed, 1e-9):,.0f} tokens/s")

    def _show(self) -> None:
        if self.status:
            self.status(self.line)

    def run(self, rows: Iterator[dict[str, Any]]) -> bool:
        """Score `rows` (closed at the end); True when the token cap stopped the pass early."""
        cfg, scorer, summary = self.cfg, self.scorer, self.summary
        chunk: list[Plan] = []
        chunk_tokens = chunk_slots = 0  # result slots of the chunk's plans so far
        used = 0
        chunk_limit = cfg.chunk_batches * scorer.batch_tokens

        def on_batch(n: int, tok: int) -> None:
            self.tokens += tok
            self._show()

        def flush() -> None:
            nonlocal chunk, chunk_tokens, chunk_slots
            if chunk:
                t = scorer.score_plans(chunk, on_batch)
                summary.model_turns += t.num_rows
                summary.truncated_turns += int(pc.sum(t["truncated"]).as_py() or 0) if t.num_rows else 0
                self.sink(t)
                self.scored += len(chunk)
                self._show()
            chunk, chunk_tokens, chunk_slots = [], 0, 0

        # under the cap, a trajectory too large for what is left is passed over and the next ones tried
        # (the sample used to end at the first one)
        misses = 0
        stop = False
        bound = text_bound(scorer)
        for row in rows:
            self.seen += 1
            self._show()
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
            summary.model_trajectories += bool(p.turns)  # (one without an observation to score is not one scored)
            if chunk_tokens >= chunk_limit:
                flush()
        close = getattr(rows, "close", None)
        if close is not None:
            close()  # DuckDB's reader goes before the last chunk is scored
        flush()
        return stop


def _model_scores(con: Any, cfg: ScoreConfig, summary: ScoreSummary, scorer: Any, progress: bool,
                  echo: Callable[[str], None], sink: Callable[[pa.Table], None], kept: str | None,
                  ranges: int = 1) -> None:
    """Model-tier rows for every scored turn (up to the token cap), in priority order, handed to
    `sink` a chunk at a time; the trajectories (`kept`: `_kept_relation`) are read sorted in `ranges`
    parts (`_prioritized`)."""
    total = summary.model_trajectories_total
    st = _Status("model", progress)
    st(f"sorting the turns of {total:,} trajectories by md5(seed:trajectory_id)")
    rows = _prioritized(con, int(cfg.surface.seed), kept, ranges)
    t0 = time.monotonic()
    before = dict(scorer.stats)
    loop = _ModelPass(cfg, scorer, summary, sink, st, total)
    stop = loop.run(rows)
    st.finish(loop.line)
    summary.model_seconds = time.monotonic() - t0
    _add_scorer_counts(summary, before, scorer.stats)
    if cfg.max_tokens is not None and summary.model_trajectories < total:
        how = (f"stopped after {MAX_CAP_MISSES} in a row did not fit" if stop else "went through them all")
        echo(f"score: model tier capped at {cfg.max_tokens:,} tokens: {summary.model_trajectories} of {total} trajectories "
             f"scored, in md5(seed:trajectory_id) order ({summary.passed_over} too large for what was left passed over; "
             f"{how}); the rest have null model columns")


_TRAJ_COLS = ("domain", "task", "action_space", "initial_state")
_TURN_COLS = ("turn_index", "kind", "action", "tool_name", "tool_args", "thought", "observation", "exit_code")


def _ranges(committed: dict[str, list[Path]], con: Any, sort_bytes: int) -> int:
    """How many md5 ranges to sort the trajectories and turns in: their data (Parquet, uncompressed)
    over `sort_bytes`; `committed`: the files the views read."""
    size = 0
    for name in ("trajectories", "turns"):
        if committed[name]:
            size += con.sql(f"SELECT coalesce(sum(total_uncompressed_size), 0) "
                            f"FROM parquet_metadata({parquet_list(committed[name])})").fetchall()[0][0]
    return max(1, min(4096, -(-int(size) // sort_bytes)))


def _priority(seed: int) -> str:
    """The model tier's order as SQL: md5(seed:trajectory_id), the same for every corpus size and
    worker count, so a token cap scores the same trajectories whatever else the corpus holds."""
    return f"md5('{int(seed)}:' || trajectory_id)"


def _prioritized(con: Any, seed: int, kept: str | None = None, ranges: int = 1) -> Iterator[dict[str, Any]]:
    """Each trajectory that has turns (and, with `kept`, is in that relation of (trajectory_id,
    prio)), in md5(seed:trajectory_id) order, as {prio, trajectory_id, domain, task,
    action_space, initial_state, turns: [{turn_index, kind, action, tool_name, tool_args, thought,
    observation}, ...] by turn_index}.

    Sorted streams, one per range of md5 prefixes (`ranges` of them, each about as large: the md5
    is uniform): a trajectory's row, then its turns, grouped here one trajectory at a time. DuckDB
    sorts one range in memory (and reads only what falls in it; `kept` filters the trajectories'
    rows, and their turns go with them: a semi-join of the turns had DuckDB build its hash table
    on the turns' text, over its memory limit); sorting a whole corpus's text at
    once failed under a memory limit, and grouping every trajectory's turns into lists in one query
    held all of it in memory before the first row came out. Under a token cap the first range
    usually suffices."""
    for lo, hi in md5_ranges(ranges):
        yield from _range_rows(con, seed, kept, lo, hi)


def md5_ranges(n: int) -> list[tuple[str, str | None]]:
    """`n` ranges of md5 hex prefixes, [lo, hi) (None: to the end), each about as large."""
    bounds = [f"{(i * 65536) // n:04x}" for i in range(n)]
    return [(lo, bounds[i + 1] if i + 1 < n else None) for i, lo in enumerate(bounds)]


def _range_rows(con: Any, seed: int, kept: str | None, lo: str, hi: str | None) -> Iterator[dict[str, Any]]:
    """`_prioritized`'s rows of the trajectories whose priority falls in [lo, hi)."""
    prio = _priority(seed)
    nulls_t = ", ".join(f"NULL AS {c}" for c in _TRAJ_COLS)
    nulls_u = ", ".join(f"NULL AS {c}" for c in _TURN_COLS)

    def within(x: str) -> str:
        return f"{x} >= '{lo}'" + (f" AND {x} < '{hi}'" if hi else "")

    skip = f"AND trajectory_id IN (SELECT trajectory_id FROM {kept} WHERE {within('prio')})" if kept else ""
    reader = con.sql(f"""
        SELECT {prio} AS prio, trajectory_id, 0 AS part, {", ".join(_TRAJ_COLS)}, {nulls_u}
        FROM trajectories WHERE {within(prio)} {skip}
        UNION ALL BY NAME
        SELECT {prio} AS prio, trajectory_id, 1 AS part, {nulls_t}, {", ".join(_TURN_COLS)}
        FROM turns WHERE {within(prio)}
        ORDER BY prio, trajectory_id, part, turn_index""").to_arrow_reader(1024)
    head: dict[str, Any] | None = None
    turns: list[dict[str, Any]] = []
    for batch in reader:
        for r in batch.to_pylist():
            if r["part"] == 0:
                if head is not None and turns:
                    yield {**head, "turns": turns}
                head = {"prio": r["prio"], "trajectory_id": r["trajectory_id"], **{c: r[c] for c in _TRAJ_COLS}}
                turns = []
            elif head is not None and r["trajectory_id"] == head["trajectory_id"]:
                turns.append({c: r[c] for c in _TURN_COLS})
            # else: turns of a trajectory not in `trajectories` (the join left them out) or not kept
    reader.close()
    if head is not None and turns:
        yield {**head, "turns": turns}


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


def check_distributable(config: ScoreConfig) -> None:
    """Refuse settings a distributed model tier cannot honour, before anything is read."""
    if config.tier == "surface":
        raise ValueError("--beam runs the model tier on Beam's workers; --tier surface has none (drop --beam)")
    if config.max_tokens is not None:
        raise ValueError("--max-tokens takes trajectories in one order across the whole corpus until the cap, "
                         "which units scored apart cannot follow: drop --beam or --max-tokens")


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
    runner: ModelRunner | None = None,
) -> ScoreSummary:
    """Score every turn of the corpus and (re)write the `turn_scores` side table.

    `scorer` may be a `TurnScorer` already set up (Dagster resources, tests); otherwise one is
    built from `config.model` and torn down at the end. `runner` (e.g.
    `pipelines.beam_score.BeamModelRunner`) runs the model tier as units of one md5 range each on
    its workers, each with its own copy of the scorer, instead of here.

    Memory does not follow the corpus: the surface tier scores `batch_rows` turns (at most
    `batch_bytes` of text) at a time into a temporary file; the model tier reads the trajectories
    in priority order one md5 range (about `sort_bytes` of data) at a time and writes each scored
    chunk to another file; the table is written from DuckDB's join of the two (or of the columns
    carried over from the previous table, read by DuckDB, never whole; its surface columns only when
    it was written for the same committed batches, else the surface tier runs again) in (trajectory_id,
    turn_index) order, a batch at a time, the summary counted on the way. DuckDB works under
    `memory_limit`, spilling to a temporary directory in the corpus (removed at the end)."""
    t0 = time.monotonic()
    echo = echo or (lambda m: print(m, file=sys.stderr))
    if runner is not None:
        check_distributable(config)
    if config.tier != "surface" and scorer is None and config.model is not None:
        from pipelines.score_model import check_model_source

        try:
            check_model_source(config.model.model)
        except FileNotFoundError as e:
            raise ValueError(str(e)) from None
    if config.tier != "surface" and scorer is None:
        from pipelines.score_model import check_scoring_window

        check_scoring_window(config.model_config())
    corpus = Corpus(corpus_dir)
    manifest = corpus.require_manifest()  # one state: the views and the state recorded
    state = corpus_state(corpus, manifest)
    committed = corpus.committed_files(manifest)
    if config.tier != "surface" and config.skip_dropped:  # the model tier skips what cleaning and dedup drop
        for name, why in stale_side_tables(corpus, ("cleaning", "duplicates")).items():
            echo(f"score: side table {name} is stale: {why} (the model tier skips by it as it is)")
    con = connect(corpus.root, committed=committed)
    try:
        with spill_workspace(con, corpus.root, "score", config.memory_limit) as work:
            _stage_settings(con, config)
            return _score(corpus, con, work, config, progress, echo, scorer, t0, state, committed, runner)
    finally:
        con.close()


def _stage_settings(con: Any, config: ScoreConfig) -> None:
    """The stage's DuckDB settings, in the driver and in each unit of a distributed model tier."""
    if config.threads:
        con.execute(f"SET threads = {int(config.threads)}")
    # a scan's batches as they come (the order is ORDER BY's); kept in order, they queue up in memory
    con.execute("SET preserve_insertion_order = false")
    con.execute("SET enable_progress_bar = false")  # the stage's own line says how far it got


def _score(corpus: Corpus, con: Any, work: Path, config: ScoreConfig, progress: bool, echo: Callable[[str], None],
           scorer: Any, t0: float, state: dict[str, Any], committed: dict[str, list[Path]],
           runner: ModelRunner | None = None) -> ScoreSummary:
    summary = ScoreSummary(corpus=str(corpus.root), tier=config.tier, max_tokens=config.max_tokens)
    old = side_schema(corpus, TABLE)  # the table written last; DuckDB reads its rows column by column, streaming
    old_sql = f"read_parquet({sql_str(str(side_path(corpus, TABLE)))})"
    old_names = old.names if old is not None else []
    schema = turn_scores_schema()
    surface_names = [f.name for f in SURFACE_FIELDS]
    model_names = [f.name for f in MODEL_FIELDS]
    keys = ["trajectory_id", "turn_index"]
    meta_old = (old.metadata or {}) if old is not None else {}
    old_cfg = orjson.loads(meta_old.get(b"worldline.config", b"{}"))
    # the old surface rows decide which turns the table holds: reused only when they are of this corpus
    # state (turns ingested since would get no row); recomputing them takes seconds
    old_current = orjson.loads(meta_old.get(b"worldline.corpus_state", b"null")) == state

    if config.tier in ("surface", "both") or "category" not in old_names or not old_current:
        path = work / "surface.parquet"
        rows = _surface_pass(con, config, path, progress)
        surf = f"read_parquet({sql_str(str(path))})"
        surface_cfg = asdict(config.surface)
    else:
        surf = f"(SELECT {', '.join(keys + surface_names)} FROM {old_sql})"
        rows = pq.ParquetFile(side_path(corpus, TABLE)).metadata.num_rows
        surface_cfg = old_cfg.get("surface", asdict(config.surface))
        summary.carried.append("surface")
        if old_cfg.get("surface_fingerprint") not in (None, config.surface.fingerprint()):  # e.g. --seed: not applied
            now = orjson.loads(orjson.dumps(asdict(config.surface), default=str))  # as recorded: lists, not tuples
            asked = {k: v for k, v in now.items() if surface_cfg.get(k, v) != v}
            echo(f"score: --tier model keeps the surface columns (category, keep) computed with other settings "
                 f"({', '.join(f'{k} {surface_cfg.get(k)!r}, not {v!r}' for k, v in sorted(asked.items())) or 'other rules'}); "
                 "--tier surface or both applies this run's")
    if config.tier in ("model", "both"):
        # the verdicts the model tier skips by, read before it runs (a clean or dedup may commit meanwhile)
        kept_from = kept_verdicts(corpus) if config.skip_dropped else "all trajectories"
        ranges = _ranges(committed, con, config.sort_bytes)
        if runner is None:
            info, files = _local_model_tier(con, config, summary, scorer, progress, echo, work, ranges)
        else:
            info, files = _distributed_model_tier(corpus, committed, con, config, summary, scorer, runner, progress,
                                                  work, ranges)
        summary.model_id, summary.device, summary.dtype = info["model_id"], info["device"], info["dtype"]
        summary.window_tokens = info["window"]
        model_cfg = {**info["config"], "fingerprint": info["fingerprint"], "model_id": info["model_id"],
                     "dtype": info["dtype"], "max_tokens": config.max_tokens,
                     # under a cap, the seed picks which trajectories get model scores (`_priority`)
                     "sample_seed": int(config.surface.seed) if config.max_tokens is not None else None,
                     "kept_from": kept_from, "batches_digest": state.get("batches_digest")}
        model = f"read_parquet({parquet_list(files)})" if summary.model_turns else None
    elif "cond_nll" in old_names and old_cfg.get("model") is not None:  # (the columns are there, null, without)
        model = f"(SELECT {', '.join(keys + model_names)} FROM {old_sql} WHERE cond_nll IS NOT NULL)"
        model_cfg = old_cfg.get("model")
        summary.carried.append("model")
        if model_cfg.get("batches_digest", state.get("batches_digest")) != state.get("batches_digest"):
            # the model tier ran on an earlier corpus: the turns ingested since have no model scores
            summary.model_stale = True
            echo("score: the model tier's columns are carried over from a run on an earlier corpus: turns ingested "
                 "since have no model scores (their loss follows the surface tier alone); run `worldline score "
                 f"{corpus.root} --tier model`")
    else:
        model = None
        model_cfg = None

    keep_ratios = config.surface.keep_ratio if "surface" not in summary.carried else \
        dict(tuple(x) for x in surface_cfg.get("keep_ratios", config.surface.keep_ratios))
    cfg_doc = {"tier": config.tier, "surface": orjson.loads(orjson.dumps(surface_cfg, default=str)), "model": model_cfg,
               "policy": orjson.loads(orjson.dumps(asdict(config.policy), default=str)),
               "surface_fingerprint": old_cfg.get("surface_fingerprint") if "surface" in summary.carried
               else config.surface.fingerprint(),  # of the settings the surface columns were computed with
               "policy_fingerprint": config.policy.fingerprint()}
    # of what the table holds (a carried tier's columns with their own settings), not of this run's options:
    # a model tier added under the same options is another table to the export and traces that read it
    model_fp = None if model_cfg is None else {k: model_cfg.get(k) for k in ("fingerprint", "model_id", "dtype", "max_tokens",
                                                                              "kept_from")}
    if model_fp is not None and model_cfg.get("sample_seed") is not None:  # (absent without a cap: fingerprints as before)
        model_fp["sample_seed"] = model_cfg["sample_seed"]
    summary.fingerprint = hashlib.sha256(orjson.dumps(
        {"surface": cfg_doc["surface_fingerprint"], "policy": cfg_doc["policy_fingerprint"], "model": model_fp,
         "skip_dropped": config.skip_dropped}, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()[:16]
    cols = ", ".join([f"s.{c}" for c in keys + surface_names] + ([f"m.{c}" for c in model_names] if model else []))
    join = f"LEFT JOIN {model} m ON m.trajectory_id = s.trajectory_id AND m.turn_index = s.turn_index" if model else ""
    tally = _Tally(summary)
    st = _Status("write", progress)
    done = 0

    def line() -> str:
        return f"{done:,}/{rows:,} turns"

    st(f"sorting {rows:,} turns")
    reader = con.sql(f"SELECT {cols} FROM {surf} s {join} ORDER BY s.trajectory_id, s.turn_index").to_arrow_reader(
        WRITE_ROWS)
    with SideTableWriter(corpus, TABLE, schema, "score", summary.fingerprint, cfg_doc, state) as w:
        for b in reader:
            t = pa.Table.from_batches([b])
            if not model:
                for f in MODEL_FIELDS:
                    t = t.append_column(f, pa.nulls(t.num_rows, f.type))
            t = apply_policy(t, config.policy, keep_ratios).select(schema.names).cast(schema)
            tally.add(t)
            w.write(t)
            done += t.num_rows
            st(line)
        st.finish(line)
        tally.finish()
        summary.seconds = time.monotonic() - t0
        w.commit(_manifest_summary(summary), lock_wait_s=config.lock_wait_s)
    return summary


def _scorer_info(scorer: Any) -> dict[str, Any]:
    """What the table's metadata and the summary say of the model that scored."""
    return {"model_id": scorer.model_id, "device": scorer.device, "dtype": scorer.dtype_name, "window": scorer.window,
            "fingerprint": scorer.fingerprint, "config": orjson.loads(orjson.dumps(asdict(scorer.config), default=str))}


def _scorable(con: Any, config: ScoreConfig, summary: ScoreSummary, work: Path) -> str | None:
    """The kept trajectories' relation (`_kept_relation`), with the summary's counts of them."""
    kept = _kept_relation(con, config, work, summary)
    summary.model_trajectories_total = _model_total(con, kept)
    return kept


def _unloaded_info(scorer: Any, config: ScoreConfig) -> dict[str, Any]:
    """`_scorer_info` of a model tier with nothing to score: the model is not loaded for it (minutes
    on a large one), so device and window are unknown and the dtype is the one asked for."""
    if scorer is not None and scorer.model is not None:  # injected (tests, benchmarks): as it is
        return _scorer_info(scorer)
    if scorer is None:
        from pipelines.score_model import TurnScorer

        scorer = TurnScorer(config.model_config())
    dtype = scorer.config.dtype
    return {**_scorer_info(scorer), "device": "", "dtype": dtype, "window": 0,
            "fingerprint": scorer.config.fingerprint(scorer.model_id, dtype)}


def _local_model_tier(con: Any, config: ScoreConfig, summary: ScoreSummary, scorer: Any, progress: bool,
                      echo: Callable[[str], None], work: Path, ranges: int) -> tuple[dict[str, Any], list[Path]]:
    kept = _scorable(con, config, summary, work)
    if not summary.model_trajectories_total:
        return _unloaded_info(scorer, config), []
    own = scorer is None
    if own:
        from pipelines.score_model import TurnScorer

        scorer = TurnScorer(config.model_config())
        scorer.setup()
    path = work / "model.parquet"
    try:
        with pq.ParquetWriter(path, MODEL_SCHEMA, compression="lz4") as mw:
            _model_scores(con, config, summary, scorer, progress, echo, mw.write_table, kept, ranges)
        return _scorer_info(scorer), [path]
    finally:
        if own:
            scorer.teardown()


@dataclass(frozen=True)
class ModelUnit:
    """One md5 range of a distributed model tier: everything a worker needs to score it alone
    (the files of the corpus state the driver read, the kept trajectories' file, where to write)."""

    index: int
    lo: str
    hi: str | None
    root: str
    committed: str  # a JSON file of the corpus files the driver read ({view: [absolute paths]}), once for all units
    kept: str | None  # SQL: read_parquet of (trajectory_id, prio), or None for every trajectory
    out: str
    config: ScoreConfig


# A runner of units (`pipelines.beam_score.BeamModelRunner`): scores each unit with a copy of the scorer
# (`score_unit`) and returns their results, one per unit, whatever the order.
ModelRunner = Callable[[list[ModelUnit], Any], list[dict[str, Any]]]
MIN_UNITS = 8  # a distributed model tier's units at least (more when the corpus is larger: `_ranges`)
# what a unit counts, summed into the driver's summary
UNIT_COUNTS = ("model_trajectories", "model_turns", "truncated_turns", "model_tokens", "windowed_trajectories",
               "uncond_shared", "truncated_systems")


def score_unit(unit: ModelUnit, scorer: Any) -> dict[str, Any]:
    """Score one unit (`scorer` set up) into a Parquet file of its own in `unit.out`, written then
    renamed, and return the file's name with the counts. Another attempt at the same unit (a
    retried bundle) writes another file; the driver reads only the ones the results name."""
    import shutil

    import duckdb

    cfg = unit.config
    tag = f"{unit.index:05d}-{os.urandom(4).hex()}"
    out = Path(unit.out)
    spill = out / f"duckdb-{tag}"
    final = out / f"model-{tag}.parquet"
    tmp = out / f".model-{tag}.parquet.tmp"
    summary = ScoreSummary(corpus=unit.root, tier=cfg.tier)
    con = duckdb.connect()
    try:
        committed = {k: [Path(p) for p in v] for k, v in orjson.loads(Path(unit.committed).read_bytes()).items()}
        connect(unit.root, con, committed=committed)
        con.execute(f"SET memory_limit = {sql_str(cfg.memory_limit)}")  # as `spill_workspace`, in the unit's folder
        con.execute(f"SET temp_directory = {sql_str(str(spill))}")
        _stage_settings(con, cfg)
        before = dict(scorer.stats)
        with pq.ParquetWriter(tmp, MODEL_SCHEMA, compression="lz4") as w:
            _ModelPass(cfg, scorer, summary, w.write_table).run(
                _range_rows(con, int(cfg.surface.seed), unit.kept, unit.lo, unit.hi))
        os.replace(tmp, final)
        _add_scorer_counts(summary, before, scorer.stats)
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)
        tmp.unlink(missing_ok=True)
    return {"index": unit.index, "file": final.name, "counts": {n: getattr(summary, n) for n in UNIT_COUNTS},
            "scorer": _scorer_info(scorer)}


def _distributed_model_tier(corpus: Corpus, committed: dict[str, list[Path]], con: Any, config: ScoreConfig,
                            summary: ScoreSummary, scorer: Any, runner: ModelRunner, progress: bool, work: Path,
                            ranges: int) -> tuple[dict[str, Any], list[Path]]:
    """The model tier as units of one md5 range each, scored by `runner`'s workers (each sets up its
    own copy of `scorer`: the model loads once per worker, not per unit); the rows are the local
    run's in float32 (a turn's scores depend on its trajectory only); in bfloat16 they differ in the
    last bits, as batches hold other turns, and a repeated observation is scored alone once per unit,
    not once in all (more `model_tokens`). The work folder must be reachable by every worker, as
    ingest's staging is for `--beam`."""
    work = work.resolve()  # workers elsewhere have another working directory
    kept = _scorable(con, config, summary, work)
    total = summary.model_trajectories_total
    if not total:
        return _unloaded_info(scorer, config), []
    out = work / "model-units"
    out.mkdir()
    listing = out / "committed.json"
    listing.write_bytes(orjson.dumps({k: [str(Path(p).resolve()) for p in v] for k, v in committed.items()}))
    units = [ModelUnit(i, lo, hi, str(corpus.root.resolve()), str(listing), kept, str(out), config)
             for i, (lo, hi) in enumerate(md5_ranges(max(ranges, MIN_UNITS)))]
    if scorer is None:
        from pipelines.score_model import TurnScorer

        scorer = TurnScorer(config.model_config())  # each worker sets up its copy
    summary.model_runner, summary.model_units = getattr(runner, "name", type(runner).__name__), len(units)
    st = _Status("model", progress)
    st(f"{total:,} trajectories in {len(units)} units on {summary.model_runner}", force=True)
    t0 = time.monotonic()
    results = {r["index"]: r for r in runner(units, scorer)}
    missing = sorted(set(range(len(units))) - set(results))
    if missing:
        raise RuntimeError(f"score: the model tier's units {missing} returned no result")
    summary.model_seconds = time.monotonic() - t0
    for r in results.values():
        for n in UNIT_COUNTS:
            setattr(summary, n, getattr(summary, n) + r["counts"][n])
    files = [out / results[i]["file"] for i in range(len(units))]
    fingerprints = {(r["scorer"]["model_id"], r["scorer"]["dtype"], r["scorer"]["fingerprint"]) for r in results.values()}
    if len(fingerprints) > 1:
        raise RuntimeError(f"score: the workers scored with different models or dtypes: {sorted(fingerprints)}")
    info = {**results[0]["scorer"], "device": ", ".join(sorted({r["scorer"]["device"] for r in results.values()}))}
    st.finish(f"{summary.model_trajectories:,}/{total:,} trajectories · {summary.model_turns:,} turns · "
              f"{summary.model_tokens:,} tokens in {len(units)} units")
    return info, files


WRITE_ROWS = 65_536  # rows per batch (and Parquet row group) of the written table


def _manifest_summary(s: ScoreSummary) -> dict[str, Any]:
    d = s.as_dict()
    d.pop("histograms")
    return d


class _Tally:
    """The summary's counts and histograms, added up over the batches of the table as it is written."""

    def __init__(self, summary: ScoreSummary):
        self.summary = summary
        self.novelty = _Hist([0, 0.2, 0.4, 0.6, 0.8, 1.0])
        self.model = {"cond_nll (nats/token)": ("cond_nll", _Hist([0, 0.5, 1, 2, 3, 4, 6])),
                      "info_gain (nats/token)": ("info_gain", _Hist([0, 0.25, 0.5, 1, 2, 4])),
                      "ifd": ("ifd", _Hist([0, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25]))}
        self.model_rows = 0

    @staticmethod
    def _groups(col: pa.ChunkedArray) -> list[tuple[Any, np.ndarray]]:
        """(value, rows holding it) for each distinct value, in the order of first appearance."""
        out = []
        for v in pc.unique(col).to_pylist():
            eq = pc.is_null(col) if v is None else pc.fill_null(pc.equal(col, v), False)
            out.append((v, np.asarray(eq.to_numpy(zero_copy_only=False), dtype=bool)))
        return out

    def add(self, t: pa.Table) -> None:
        s = self.summary
        s.turns += t.num_rows
        keep = np.asarray(pc.fill_null(t["keep"], False).to_numpy(zero_copy_only=False), dtype=bool)
        mask = np.asarray(pc.fill_null(t["loss_mask"], False).to_numpy(zero_copy_only=False), dtype=bool)
        for c, rows in self._groups(t["category"]):
            e = s.categories.setdefault(c, [0, 0, 0])
            e[0] += int(rows.sum())
            e[1] += int((keep & rows).sum())
            e[2] += int((mask & rows).sum())
        for d, rows in self._groups(t["domain"]):
            dd = s.domains.setdefault(d, [0, 0])
            dd[0] += int(rows.sum())
            dd[1] += int((mask & rows).sum())

        def arr(name: str) -> np.ndarray:
            return np.asarray(pc.fill_null(t[name].cast(pa.float64()), np.nan).to_numpy(zero_copy_only=False),
                              dtype=np.float64)

        scored = np.asarray(pc.fill_null(pc.not_equal(t["category"], "context"), True).to_numpy(zero_copy_only=False),
                            dtype=bool)
        self.novelty.add(arr("novelty")[scored])
        self.model_rows += t.num_rows - t["cond_nll"].null_count
        for name, h in self.model.values():
            h.add(arr(name))

    def finish(self) -> None:
        s = self.summary
        s.histograms["novelty (surface)"] = self.novelty.result()
        if s.model_turns or self.model_rows:
            for title, (_, h) in self.model.items():
                s.histograms[title] = h.result()


# ---------------------------------------------------------------------------------------------
# data contracts over the written table (`worldline check`-style; Dagster asset checks)


SCORE_CONTRACTS = ("turn_scores_cover_turns", "turn_scores_valid", "turn_scores_current")


def score_contracts(corpus_dir: Path | str) -> list[Any]:
    """Contracts of `turn_scores`: one row per turn, values consistent with the stored config, and
    the table computed from the corpus as it is now."""
    from pipelines.contracts import ContractResult

    corpus = Corpus(corpus_dir)
    if not side_path(corpus, TABLE).exists():
        return [ContractResult(n, False, "no turn_scores table; run `worldline score CORPUS`")
                for n in SCORE_CONTRACTS]
    con = connect(corpus.root)
    q = lambda sql: con.sql(sql).fetchall()  # noqa: E731
    missing = q("SELECT count(*) FROM turns u ANTI JOIN turn_scores s USING (trajectory_id, turn_index)")[0][0]
    orphans = q("SELECT count(*) FROM turn_scores s ANTI JOIN turns u USING (trajectory_id, turn_index)")[0][0]
    dups = q("SELECT count(*) - count(DISTINCT (trajectory_id, turn_index)) FROM turn_scores")[0][0]
    entry = corpus.manifest().get("side", {}).get(TABLE) or {}
    now = corpus_state(corpus)
    stale = entry.get("corpus_state") != now
    # turns ingested since score ran have no rows yet (export trains them unscored): a warning, as
    # turn_scores_current is; a missing row with the corpus unchanged, or a stray or doubled one, is broken
    cover = ContractResult("turn_scores_cover_turns", not (missing or orphans or dups),
                           "exactly one turn_scores row per turn" + (" (turns added since score ran have none yet)"
                                                                     if missing and stale else ""),
                           {"missing": missing, "orphans": orphans, "duplicates": dups},
                           severity="warn" if stale and not (orphans or dups) else "error")
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
    # the model tier skipped what cleaning and dedup dropped when it ran: are those verdicts still the ones?
    used = (cfg.get("model") or {}).get("kept_from", "all trajectories")
    kept_now = used == "all trajectories" or used == kept_verdicts(corpus)
    # a surface rerun carries the model columns over: they may be of an earlier corpus than the table
    model_digest = (cfg.get("model") or {}).get("batches_digest", now.get("batches_digest"))
    model_now = model_digest == now.get("batches_digest")
    current = ContractResult("turn_scores_current", entry.get("corpus_state") == now and kept_now and model_now,
                             "computed from the corpus batches present now (and the model tier from them and the "
                             "current cleaning and dedup verdicts)",
                             {"scored_batches": (entry.get("corpus_state") or {}).get("batches"), "corpus_batches": now["batches"],
                              "model_tier_verdicts_current": kept_now, "model_tier_corpus_current": model_now,
                              "rerun": worldline_command("score", corpus.root, *(() if model_now else ("--tier", "model")))},
                             severity="warn")
    return [cover, valid, current]
