"""Queries for the thinking-trace stage: (history, action) → the real observation.

Chosen from the turns the earlier stages keep (`kept_turns` when cleaning/dedup ran: not dropped,
not a non-representative duplicate, counted for training once), with an observation to predict
of a bounded length, and never from a trajectory whose split is not in `query_splits` (the
evaluation splits stay unseen). Splits are the export stage's (`pipelines.export.split_of` over
`group_key`: normalized task, else source): the `export_assignments` side table when export ran
(the split each trajectory was really exported to), with the export's recorded `SplitConfig` for
trajectories it does not cover; the same function otherwise.

Weighting toward informative turns: a turn's weight is the weight of its surface category (echo
and boilerplate turns teach little), times `1 + info_gain_weight · min(info_gain, 2)` where the
model tier measured how much the context tells about the observation; when `turn_scores` exists
only turns its loss mask trains on are taken. Without `turn_scores` every turn weighs 1.

Sampling is weighted without replacement by Efraimidis–Spirakis keys (`-ln(u) / w`, smallest
first) with `u` from blake2b(seed, trajectory, turn): deterministic, independent of row order and
of what else is in the corpus. Balance: the turns are grouped into strata (by default domain ×
source format) and taken round-robin by rank across strata, so a source with 500 trajectories does
not crowd out one with 3; `per_stratum` caps any stratum.

Text is redacted (`pipelines.redact`) before anything is built from it: nothing secret reaches
a hosted generator or the SFT set.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from pipelines.export import SplitConfig, group_key, split_of
from pipelines.query import connect, views
from pipelines.redact import (
    RENDERED_TRAJECTORY_TEXTS,
    RENDERED_TURN_TEXTS,
    Redactor,
    recorded_config,
    redact_fields,
)
from pipelines.render import Group, RenderConfig, conversation
from pipelines.side import side_info
from pipelines.store import Corpus
from schemas.options import at_least
from schemas.tables import check_domains

SPLITS = ("train", "validation", "test")
CATEGORY_WEIGHTS: tuple[tuple[str, float], ...] = (
    ("retrieval", 1.0), ("expansion", 1.0), ("action", 1.0), ("other", 0.75), ("transform", 0.5),
    ("boilerplate", 0.1), ("echo", 0.05), ("context", 0.0),
)


@dataclass(frozen=True)
class QueryConfig:
    max_queries: int = 1000
    balance: tuple[str, ...] = ("domain", "source_format")  # strata; () for none
    domains: tuple[str, ...] = ()  # only these domains (empty: all)
    per_stratum: int = 0  # cap per stratum (0: none)
    category_weights: tuple[tuple[str, float], ...] = CATEGORY_WEIGHTS
    info_gain_weight: float = 1.0
    require_loss_mask: bool = True  # with turn_scores: only turns the mask trains on
    min_target_chars: int = 1
    max_target_chars: int = 4000  # longer observations do not fit a generation budget
    history_turns: int = 8  # earlier environment turns shown (teacher prompt and SFT row)
    split: SplitConfig = SplitConfig()  # used where the export's own assignment is not recorded
    query_splits: tuple[str, ...] = ("train",)
    seed: int = 0
    render: RenderConfig = RenderConfig()

    def __post_init__(self) -> None:
        """Reject what would select no query at all (a run that does nothing and says it finished)."""
        at_least("--max-queries", self.max_queries, 1)
        check_domains("--domains", self.domains)
        at_least("--per-stratum", self.per_stratum, 0)
        at_least("--history-turns", self.history_turns, 0)
        if self.max_target_chars < max(1, self.min_target_chars):
            raise ValueError(f"--max-target-chars must be at least {max(1, self.min_target_chars)} (got {self.max_target_chars})")
        bad = set(self.balance) - {"domain", "source_format"}
        if bad:
            raise ValueError(f"balance by {sorted(bad)}: only domain and source_format are known")
        if not set(self.query_splits) <= set(SPLITS):
            raise ValueError(f"query_splits {self.query_splits} are not among the splits {list(SPLITS)}")

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


@dataclass
class Query:
    query_id: str
    trajectory_id: str
    turn_index: int
    domain: str
    source_format: str
    split: str
    stratum: str
    category: str | None
    weight: float
    rank: int  # position within its stratum
    system: str = ""  # world-model system prompt (redacted)
    history: list[Group] = field(default_factory=list)  # the window before the target (redacted)
    user: str = ""  # the target's user message: context + action (redacted)
    observation: str = ""  # the real observation (redacted)
    observation_kind: str | None = None
    exit_code: int | None = None
    is_error: bool | None = None


@dataclass
class Selection:
    queries: list[Query]
    candidates: int  # turns eligible before sampling
    excluded_split: int  # eligible turns left out because of their trajectory's split
    strata: dict[str, int]  # eligible turns per stratum
    weighting: str  # what the weights came from
    views: dict[str, str]


def trajectory_splits(corpus_dir: Path | str, con: duckdb.DuckDBPyConnection, split: SplitConfig,
                      traj_view: str = "trajectories", have: set[str] | None = None) -> tuple[dict[str, str], str]:
    """The split of every trajectory of `traj_view`, and where it came from."""
    have = views(con) if have is None else have
    recorded: dict[str, str] = {}
    source = "pipelines.export.split_of (computed)"
    if "export_assignments" in have:
        recorded = dict(con.sql("SELECT trajectory_id, split FROM export_assignments").fetchall())
        info = side_info(Corpus(corpus_dir), "export_assignments") or {}
        s = (info.get("config") or {}).get("split")
        if isinstance(s, dict):
            split = SplitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in s.items()})
        source = "export_assignments (+ the export's SplitConfig for the rest)"
    out: dict[str, str] = {}
    # the columns the split groups by (the export's `group_by`, any trajectory column), as export reads them
    cols = ", ".join(dict.fromkeys(["trajectory_id", *(f'"{c}"' for c in split.group_by)]))
    for r in _arrow(con.sql(f"SELECT {cols} FROM {traj_view}")).to_pylist():
        tid = r["trajectory_id"]
        out[tid] = recorded.get(tid) or split_of(group_key(r, split), split)
    return out, source


def _u01(seed: int, tid: str, idx: int) -> float:
    h = hashlib.blake2b(f"{seed}\x1f{tid}\x1f{idx}".encode(), digest_size=8).digest()
    return (int.from_bytes(h, "big") >> 11) / float(1 << 53)


def _arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    t = rel.arrow()
    return t.read_all() if isinstance(t, pa.RecordBatchReader) else t


def select_queries(corpus_dir: Path | str, cfg: QueryConfig = QueryConfig(),
                   con: duckdb.DuckDBPyConnection | None = None) -> Selection:
    """Choose the queries (ids and provenance only; `load_queries` fills in the texts)."""
    con = con or connect(corpus_dir)
    have = views(con)
    base = "kept_turns" if "kept_turns" in have else "(SELECT *, true AS counts_for_training FROM turns)"
    traj = "kept_trajectories" if "kept_trajectories" in have else "trajectories"
    scored = "turn_scores" in have
    used = {"turns": "kept_turns" if "kept_turns" in have else "turns",
             "trajectories": traj, "scores": "turn_scores" if scored else "none"}

    split_of_traj, used["splits"] = trajectory_splits(corpus_dir, con, cfg.split, traj, have)
    allowed = [tid for tid, sp in split_of_traj.items() if sp in cfg.query_splits]
    con.register("_wl_allowed", pa.table({"trajectory_id": pa.array(allowed, pa.string())}))

    dom = ""
    if cfg.domains:
        dom = "AND t.domain IN (" + ", ".join("'" + d.replace("'", "''") + "'" for d in cfg.domains) + ")"
    score_cols = "s.category, s.loss_mask, s.info_gain" if scored else "NULL::VARCHAR AS category, NULL::BOOLEAN AS loss_mask, NULL::DOUBLE AS info_gain"
    score_join = "LEFT JOIN turn_scores s USING (trajectory_id, turn_index)" if scored else ""
    sql = f"""
        SELECT u.trajectory_id, u.turn_index, t.domain, t.source_format, {score_cols},
               u.trajectory_id IN (SELECT trajectory_id FROM _wl_allowed) AS allowed
        FROM {base} u JOIN {traj} t USING (trajectory_id) {score_join}
        WHERE u.kind = 'env' AND u.observation IS NOT NULL AND coalesce(u.counts_for_training, true)
          AND length(u.observation) BETWEEN {int(cfg.min_target_chars)} AND {int(cfg.max_target_chars)} {dom}
        ORDER BY u.trajectory_id, u.turn_index"""
    rows = con.sql(sql).fetchall()
    cw = dict(cfg.category_weights)
    eligible: dict[str, list[tuple[float, str, int, str, str, str | None, float]]] = defaultdict(list)
    for tid, idx, domain, sf, category, loss_mask, info_gain in ((r[0], r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows if r[7]):
        if cfg.require_loss_mask and loss_mask is False:
            continue
        w = cw.get(category, 1.0) if category is not None else 1.0
        if info_gain is not None and not math.isnan(info_gain):
            w *= 1.0 + cfg.info_gain_weight * min(max(info_gain, 0.0), 2.0)
        if w <= 0:
            continue
        key = -math.log(max(_u01(cfg.seed, tid, idx), 1e-300)) / w
        stratum = "/".join(str({"domain": domain, "source_format": sf}[b]) for b in cfg.balance) or "all"
        eligible[stratum].append((key, tid, int(idx), domain, sf, category, w))
    excluded = sum(1 for r in rows if not r[7])
    for v in eligible.values():
        v.sort()
    queries: list[Query] = []
    strata = sorted(eligible)
    depth = 0
    while len(queries) < cfg.max_queries:
        took = False
        for s in strata:
            if len(queries) >= cfg.max_queries:
                break
            v = eligible[s]
            if depth < len(v) and (cfg.per_stratum <= 0 or depth < cfg.per_stratum):
                _, tid, idx, domain, sf, category, w = v[depth]
                queries.append(Query(f"{tid}:{idx}", tid, idx, domain, sf, "", s, category, round(w, 6), depth))
                took = True
        if not took:
            break
        depth += 1
    for q in queries:
        q.split = split_of_traj[q.trajectory_id]
    weighting = ("turn_scores: category weights" + (", info gain" if cfg.info_gain_weight else "") +
                 (", loss mask" if cfg.require_loss_mask else "")) if scored else "uniform (no turn_scores)"
    return Selection(queries, sum(len(v) for v in eligible.values()), excluded,
                     {s: len(v) for s, v in sorted(eligible.items())}, weighting, used)


def load_queries(corpus_dir: Path | str, queries: list[Query], cfg: QueryConfig = QueryConfig(),
                 con: duckdb.DuckDBPyConnection | None = None, redactor: Redactor | None = None) -> list[Query]:
    """Fill in the texts of the queries: the world-model conversation of each trajectory
    (`pipelines.render`, the export stage's form), redacted (`redactor`, default: with the settings
    clean was given, `redact.recorded_config`), cut at the target turn."""
    if not queries:
        return queries
    redactor = redactor or Redactor(recorded_config(Corpus(corpus_dir)))
    con = con or connect(corpus_dir)
    have = views(con)
    base = "kept_turns" if "kept_turns" in have else "turns"
    tids = sorted({q.trajectory_id for q in queries})
    con.register("_wl_q", pa.table({"trajectory_id": pa.array(tids, pa.string())}))
    trajs = {r["trajectory_id"]: redact_fields(r, RENDERED_TRAJECTORY_TEXTS, redactor) for r in _arrow(con.sql(
        "SELECT trajectory_id, domain, task, action_space, initial_state FROM trajectories "
        "SEMI JOIN _wl_q USING (trajectory_id)")).to_pylist()}
    turns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in _arrow(con.sql(
            f"SELECT trajectory_id, turn_index, kind, action, tool_name, tool_args, thought, observation, observation_kind, "
            f"exit_code, is_error FROM {base} SEMI JOIN _wl_q USING (trajectory_id) ORDER BY trajectory_id, turn_index")).to_pylist():
        turns[r["trajectory_id"]].append(redact_fields(r, RENDERED_TURN_TEXTS, redactor))
    for q in queries:
        ts = turns[q.trajectory_id]
        conv = conversation(trajs[q.trajectory_id], ts, cfg.render)
        gi = next(i for i, g in enumerate(conv.groups) if g.turn_index == q.turn_index)
        target = conv.groups[gi]
        turn = next(t for t in ts if t["turn_index"] == q.turn_index)
        q.system = conv.system
        q.history = conv.groups[max(0, gi - cfg.history_turns) : gi] if cfg.history_turns > 0 else []
        q.user, q.observation = target.user, target.observation
        q.observation_kind, q.exit_code, q.is_error = turn["observation_kind"], turn["exit_code"], turn["is_error"]
    return queries
