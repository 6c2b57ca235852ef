"""Surface tier of turn scoring: the published word-set classifier, no model needed.

For each (action, observation) the lowercased, de-duplicated word sets A and O (a word is a
maximal run of Unicode letters, digits and `_`) give

- overlap   |A∩O| / |A|        how much of the action the observation repeats
- novelty   |O∖A| / |O|        how much of the observation is new
- jaccard   |A∩O| / |A∪O|
- length_ratio  |obs| / max(|act|, 1) in characters

(a ratio with an empty denominator is 0). Each turn then gets the first category whose rule holds,
in this order (thresholds are `SurfaceConfig` fields):

| category    | rule                                                      | keep |
|-------------|-----------------------------------------------------------|------|
| context     | no observation to predict (agent/user message, or none recorded) | 0 %  |
| echo        | overlap ≥ 0.70 and novelty < 0.30 (published)             | 5 %  |
| boilerplate | O has no words, or every new word is a stock acknowledgement (`ok`, `done`, `successfully`, ...) | 10 % |
| retrieval   | novelty ≥ 0.60 and length_ratio > 1 (published): new material, longer than the request (file contents, search results, listings) | 100 % |
| action      | novelty ≥ 0.60 and length_ratio ≤ 1: a short, new response (a status, a short answer, an error) | 100 % |
| expansion   | novelty ≥ 0.30 and length_ratio > 2: builds on the action's words and adds much more | 100 % |
| transform   | overlap ≥ 0.30: reshapes the action's material (a selection, a reformatting) | 50 % |
| other       | anything else                                             | 100 % |

Echo comes before boilerplate because it is the more specific (and lower-kept) rule; `context` is
outside the published seven because the published method only classifies (action, observation)
pairs. The keep decision is a seeded draw per turn: `keep_draw` is a uniform number in [0, 1)
from blake2b(seed, trajectory_id, turn_index), `keep = keep_draw < keep_ratio[category]`; the draw
is stored, so changing a ratio needs no recomputation and the same seed always keeps the same turns.

Word sets are computed with Arrow kernels over a whole batch (regex split, hash group-by and hash
joins on (row, word)), so the cost is linear in the text length and needs no Python loop over words.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from schemas.options import check_seed
from schemas.tables import side_table_schema

CATEGORIES: tuple[str, ...] = ("retrieval", "expansion", "action", "transform", "boilerplate", "echo", "other", "context")
WORD_SPLIT = r"[^\pL\pN_]+"
CJK_CHAR = r"([\p{Han}\p{Hiragana}\p{Katakana}])"
SURFACE_VERSION = 2  # in the fingerprint: bump when the same settings classify otherwise (2: CJK characters are words)
STOCK_WORDS: tuple[str, ...] = (
    "ok", "okay", "done", "success", "successful", "successfully", "succeeded", "complete", "completed",
    "created", "updated", "saved", "written", "wrote", "deleted", "removed", "executed", "applied",
    "command", "operation", "changes", "file", "at", "to", "the", "a", "an", "is", "was", "has", "been",
)


@dataclass(frozen=True)
class SurfaceConfig:
    seed: int = 0
    echo_min_overlap: float = 0.70
    echo_max_novelty: float = 0.30  # strict: novelty < this
    retrieval_min_novelty: float = 0.60
    retrieval_min_ratio: float = 1.0  # strict: length_ratio > this
    expansion_min_novelty: float = 0.30
    expansion_min_ratio: float = 2.0  # strict
    transform_min_overlap: float = 0.30
    stock_words: tuple[str, ...] = STOCK_WORDS
    keep_ratios: tuple[tuple[str, float], ...] = (
        ("retrieval", 1.0), ("expansion", 1.0), ("action", 1.0), ("transform", 0.5),
        ("boilerplate", 0.1), ("echo", 0.05), ("other", 1.0), ("context", 0.0),
    )

    def __post_init__(self) -> None:
        check_seed("--seed", self.seed)
        for name in ("echo_min_overlap", "echo_max_novelty", "retrieval_min_novelty", "retrieval_min_ratio",
                     "expansion_min_novelty", "expansion_min_ratio", "transform_min_overlap"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"SurfaceConfig.{name} = {getattr(self, name)} is not a finite number")
        if dict(self.keep_ratios).get("context", 0.0) != 0.0:
            raise ValueError("SurfaceConfig.keep_ratios['context'] must be 0: context turns never carry loss")
        missing = set(CATEGORIES) - {c for c, _ in self.keep_ratios}
        if missing:
            raise ValueError(f"SurfaceConfig.keep_ratios lacks categories {sorted(missing)}")
        for c, r in self.keep_ratios:
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"SurfaceConfig.keep_ratios[{c!r}] = {r} is not in [0, 1]")

    @property
    def keep_ratio(self) -> dict[str, float]:
        return dict(self.keep_ratios)

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted({**asdict(self), "version": SURFACE_VERSION}.items())).encode()).hexdigest()[:16]


SURFACE_FIELDS = [
    pa.field("domain", pa.string(), metadata={"doc": "the turn's domain (copied for grouping)"}),
    pa.field("category", pa.string(), metadata={"doc": "surface category: " + ", ".join(CATEGORIES)}),
    pa.field("action_words", pa.int32(), metadata={"doc": "|A|: distinct lowercased words of the action"}),
    pa.field("observation_words", pa.int32(), metadata={"doc": "|O|: distinct lowercased words of the observation"}),
    pa.field("common_words", pa.int32(), metadata={"doc": "|A∩O|"}),
    pa.field("overlap", pa.float64(), metadata={"doc": "|A∩O| / |A| (0 when A is empty)"}),
    pa.field("novelty", pa.float64(), metadata={"doc": "|O∖A| / |O| (0 when O is empty)"}),
    pa.field("jaccard", pa.float64(), metadata={"doc": "|A∩O| / |A∪O| (0 when both are empty)"}),
    pa.field("length_ratio", pa.float64(), metadata={"doc": "characters of observation / max(characters of action, 1)"}),
    pa.field("keep_draw", pa.float64(), metadata={"doc": "seeded uniform draw in [0, 1) from (seed, trajectory_id, turn_index)"}),
    pa.field("keep", pa.bool_(), metadata={"doc": "surface tier's decision: keep_draw < keep ratio of the category"}),
]
SURFACE_SCHEMA = side_table_schema(SURFACE_FIELDS)


def _distinct_words(texts: pa.Array) -> pa.Table:
    """Distinct (row, word) pairs of a string array, lowercased; a Chinese or Japanese character is a
    word of its own (written without spaces, a whole clause was one word: a near-copy shared none)."""
    texts = pc.replace_substring_regex(pc.utf8_lower(pc.fill_null(texts, "")), pattern=CJK_CHAR, replacement=" \\1 ")
    parts = pc.split_pattern_regex(texts, pattern=WORD_SPLIT)
    t = pa.table({"row": pc.list_parent_indices(parts), "w": pc.list_flatten(parts)})
    t = t.filter(pc.not_equal(t["w"], ""))
    return t.group_by(["row", "w"], use_threads=False).aggregate([])


def _count_by_row(pairs: pa.Table, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int64)
    if pairs.num_rows:
        c = pairs.group_by("row", use_threads=False).aggregate([("row", "count")])
        out[c["row"].to_numpy()] = c["row_count"].to_numpy()
    return out


def word_stats(actions: pa.Array, observations: pa.Array, stock_words: tuple[str, ...] = STOCK_WORDS) -> dict[str, np.ndarray]:
    """|A|, |O|, |A∩O| and the number of new words that are not stock acknowledgements, per row."""
    n = len(actions)
    a, o = _distinct_words(actions), _distinct_words(observations)
    common = a.join(o, keys=["row", "w"], join_type="inner")
    novel = o.join(a, keys=["row", "w"], join_type="left anti")
    novel_content = novel.filter(pc.invert(pc.is_in(novel["w"], value_set=pa.array(list(stock_words), pa.string()))))
    return {
        "a": _count_by_row(a, n),
        "o": _count_by_row(o, n),
        "common": _count_by_row(common, n),
        "novel_content": _count_by_row(novel_content, n),
    }


def keep_draws(trajectory_ids: list[str], turn_indices: list[int], seed: int) -> np.ndarray:
    """Uniform [0, 1) per turn from blake2b(seed, trajectory_id, turn_index): the same everywhere."""
    out = np.empty(len(trajectory_ids), dtype=np.float64)
    for i, (t, k) in enumerate(zip(trajectory_ids, turn_indices, strict=True)):
        h = hashlib.blake2b(f"{seed}\x1f{t}\x1f{k}".encode(), digest_size=8).digest()
        out[i] = int.from_bytes(h, "big") / 2.0**64
    return out


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros(len(num), dtype=np.float64), where=den > 0)


def classify(
    a: np.ndarray, o: np.ndarray, common: np.ndarray, novel_content: np.ndarray,
    act_chars: np.ndarray, obs_chars: np.ndarray, scored: np.ndarray, cfg: SurfaceConfig,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Categories (object array of names) and the four ratios, from the counts."""
    overlap = _ratio(common, a)
    novelty = _ratio(o - common, o)
    jaccard = _ratio(common, a + o - common)
    length_ratio = obs_chars / np.maximum(act_chars, 1)
    novel = o - common
    rules = [
        ("context", ~scored),
        ("echo", (overlap >= cfg.echo_min_overlap) & (novelty < cfg.echo_max_novelty)),
        ("boilerplate", (o == 0) | ((novel > 0) & (novel_content == 0))),
        ("retrieval", (novelty >= cfg.retrieval_min_novelty) & (length_ratio > cfg.retrieval_min_ratio)),
        ("action", novelty >= cfg.retrieval_min_novelty),
        ("expansion", (novelty >= cfg.expansion_min_novelty) & (length_ratio > cfg.expansion_min_ratio)),
        ("transform", overlap >= cfg.transform_min_overlap),
    ]
    cat = np.select([m for _, m in rules], [c for c, _ in rules], default="other").astype(object)
    return cat, {"overlap": overlap, "novelty": novelty, "jaccard": jaccard, "length_ratio": length_ratio}


def score_surface(turns: pa.Table | pa.RecordBatch, cfg: SurfaceConfig = SurfaceConfig()) -> pa.Table:
    """Surface scores for a batch of turns (columns trajectory_id, turn_index, domain, kind,
    action, observation); one output row per input row, in the same order."""
    n = turns.num_rows
    act, obs = turns.column("action"), turns.column("observation")
    if isinstance(act, pa.ChunkedArray):
        act, obs = act.combine_chunks(), obs.combine_chunks()
    st = word_stats(act, obs, cfg.stock_words)
    kind = turns.column("kind")
    scored = pc.fill_null(pc.and_(pc.equal(kind, "env"), pc.is_valid(obs)), False)
    scored_np = np.asarray(scored.to_numpy(zero_copy_only=False), dtype=bool)
    act_chars = pc.utf8_length(pc.fill_null(act, "")).to_numpy(zero_copy_only=False).astype(np.float64)
    obs_chars = pc.utf8_length(pc.fill_null(obs, "")).to_numpy(zero_copy_only=False).astype(np.float64)
    cat, ratios = classify(st["a"], st["o"], st["common"], st["novel_content"], act_chars, obs_chars, scored_np, cfg)
    tids = turns.column("trajectory_id").to_pylist()
    idx = turns.column("turn_index").to_pylist()
    draws = keep_draws(tids, idx, cfg.seed)
    kr = cfg.keep_ratio
    ratio_of = np.array([kr[c] for c in cat], dtype=np.float64) if n else np.zeros(0)
    cols = {
        "trajectory_id": turns.column("trajectory_id"),
        "turn_index": turns.column("turn_index"),
        "domain": turns.column("domain"),
        "category": pa.array(cat.tolist(), pa.string()),
        "action_words": pa.array(st["a"], pa.int32()),
        "observation_words": pa.array(st["o"], pa.int32()),
        "common_words": pa.array(st["common"], pa.int32()),
        **{k: pa.array(v, pa.float64()) for k, v in ratios.items()},
        "keep_draw": pa.array(draws, pa.float64()),
        "keep": pa.array(draws < ratio_of, pa.bool_()),
    }
    return pa.Table.from_pydict(cols, schema=SURFACE_SCHEMA)
