"""The dedup stage: exact duplicates on canonical content, near-duplicates with MinHash LSH,
deterministic cluster representatives, and shared-prefix detection. Nothing is deleted.

Pass 1, signatures (per turns file, streaming; memory independent of corpus size):
  DuckDB reads each turn and computes its canonical text (`pipelines.canonical`, RE2) and an MD5
  digest of it. Numpy then, over whole Arrow buffers at once, splits the canonical text into
  lower-cased word tokens, hashes them (polynomial rolling hash), forms word n-gram shingles within
  each turn, and applies datasketch's MinHash permutations (scheme `affine32`: the signature of a
  trajectory equals `datasketch.MinHash(num_perm, seed).update_batch(shingle hashes)`, checked by a
  test) reducing to a per-trajectory minimum. Per-turn digests chain into prefix hashes; the
  last one is the trajectory's exact hash. Written to side tables `dedup_signatures` (one row per
  trajectory) and `dedup_prefixes` (one row per turn, for the first `max_prefix_turns`).
  Turns and trajectories that cleaning dropped are left out (so a trajectory with a retry cycle and
  its clean twin are exact duplicates). What is hashed is each turn's kind, action and observation,
  and its exit code where it has one (the rendered training text ends an observation with it, so
  two runs that differ only there are not duplicates, nor is one's prefix the other's): the
  environment dynamics a world model learns. Task, thought and metadata are not, so two runs of
  different tasks that did exactly the same thing are duplicates. Shingles (near duplicates) are
  words of the kind, action and observation only.

Pass 2, verdicts (from stored signatures only: a new threshold never re-reads the turns):
  exact groups by exact hash; one member of each goes into LSH. Band hashes (b bands of r rows,
  datasketch's optimum for the threshold unless given) are spilled to one Parquet file per band and
  grouped by DuckDB on disk (memory limit, temp directory) into candidate pairs, which are verified
  against the threshold with the full signatures; connected components of exact groups and verified
  pairs are the clusters. The representative is the best by (successful outcome, more turns,
  earlier collection, smaller id). Prefixes shared by at least `min_prefix_share` kept trajectories
  are counted for training once: by the best-ranked of them.
  Written to side tables `duplicates` and `shared_prefixes`.

Memory: Python holds a few batches of turns (`batch_rows`) and O(duplicate pairs) integers; every
grouping, join and sort over all trajectories runs in DuckDB under `memory_limit`, spilling to a
work directory inside the corpus (removed at the end).
"""

from __future__ import annotations

import hashlib
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.canonical import RULES, canonical_sql
from pipelines.query import connect, spill_workspace, sql_str
from pipelines.shell import query_command
from pipelines.side import (
    SideTableWriter,
    corpus_state,
    side_info,
    side_path,
    side_schema,
    stale_side_tables,
    verdicts_identity,
)
from pipelines.store import Corpus, CorpusError
from schemas.options import at_least, check_memory_limit
from schemas.tables import _f, side_table_schema

SUCCESS_OUTCOMES = ("success", "succeeded", "successful", "resolved", "solved", "passed", "pass", "completed",
                    "correct", "true", "win", "won")
FAILURE_OUTCOMES = ("failure", "failed", "fail", "error", "incorrect", "false", "timeout", "lost")

DUPLICATES_SCHEMA = side_table_schema([
    _f("cluster_id", pa.string(), "the smallest trajectory_id in the cluster (stable under re-ranking)", False),
    _f("is_representative", pa.bool_(), "the one member kept: successful first, then more turns, then earliest", False),
    _f("kind", pa.string(), "`exact` (same canonical content as the representative) or `near`; the "
                            "representative carries `exact` when the whole cluster is exact copies", False),
    _f("representative_id", pa.string(), "trajectory_id of the cluster's representative", False),
    _f("cluster_size", pa.int32(), "members in the cluster", False),
])
SHARED_PREFIXES_SCHEMA = side_table_schema([
    _f("prefix_hash", pa.uint64(), "hash of the canonical turns up to and including this one", False),
    _f("share_count", pa.int32(), "kept trajectories that start with this same prefix", False),
    _f("counts_for_training", pa.bool_(), "true for exactly one of them (the best-ranked): the turn is trained on once", False),
])


MAX_NUM_PERM = 4096


def _signature_schema(num_perm: int) -> pa.Schema:
    return side_table_schema([
        _f("row_id", pa.int64(), "dense row number used by the dedup pass", False),
        _f("exact_hash", pa.uint64(), "hash of the sequence of canonical turn digests", False),
        _f("turns", pa.int32(), "turns hashed (those cleaning kept)", False),
        _f("shingles", pa.int32(), "word n-gram shingles hashed (0: nothing to compare)", False),
        _f("signature", pa.binary(4 * num_perm), f"MinHash signature: {num_perm} little-endian uint32 (datasketch affine32)", False),
    ])


PREFIXES_SCHEMA = side_table_schema([
    _f("row_id", pa.int64(), "the trajectory's row_id in dedup_signatures (integer joins use less memory)", False),
    _f("prefix_hash", pa.uint64(), "hash of the canonical turns up to and including this one", False),
])


@dataclass(frozen=True)
class DedupConfig:
    threshold: float = 0.7  # Jaccard similarity for near-duplicates (verdict only)
    # LSH candidates are verified against `threshold - verify_margin`: verification removes clear
    # false positives; it should not re-decide borderline pairs with a noisy 128-value estimate.
    verify_margin: float = 0.0
    num_perm: int = 128
    shingle: int = 5  # words per shingle
    seed: int = 1
    bands: int | None = None  # LSH bands x rows; default: datasketch's optimum for `threshold`
    rows: int | None = None
    min_prefix_share: int = 2  # a prefix shared by this many kept trajectories is trained on once
    max_prefix_turns: int = 64
    use_cleaning: bool = True  # hash only what `cleaning` keeps, when that side table exists
    success_outcomes: tuple[str, ...] = SUCCESS_OUTCOMES  # a successful outcome, or
    success_reward: float = 1.0  # a reward at least this high with an outcome not in FAILURE_OUTCOMES
    batch_rows: int = 4096  # turns per Arrow batch (memory: a few batches are in flight)
    memory_limit: str = "256MB"  # DuckDB's limit: its hash tables and sorts spill to disk beyond it
    threads: int = 0  # DuckDB threads (0: its default)
    reuse_signatures: bool = True
    lock_wait_s: float = 600.0

    def __post_init__(self) -> None:
        """Reject settings that would silently turn detection off or fail deep inside the run."""
        if not 0 < self.threshold <= 1:  # NaN fails too
            raise ValueError(f"--threshold must be in (0, 1] (got {self.threshold})")
        at_least("--num-perm", self.num_perm, 1)
        if self.num_perm > MAX_NUM_PERM:  # 1,000,000 ran a minute in LSH's parameter search before any output
            raise ValueError(f"--num-perm {self.num_perm}: at most {MAX_NUM_PERM} (each is 4 bytes of every "
                             "trajectory's signature; 128 to 256 is usual)")
        at_least("--shingle", self.shingle, 1)
        if (self.bands is None) != (self.rows is None):
            given, missing = ("--bands", "--rows") if self.rows is None else ("--rows", "--bands")
            raise ValueError(f"{given} needs {missing}: LSH takes both (bands x rows ≤ --num-perm) or neither (the optimum for --threshold)")
        if self.bands is not None and self.rows is not None:
            if self.bands < 1 or self.rows < 1:
                raise ValueError(f"--bands and --rows must be at least 1 (got {self.bands} and {self.rows})")
            if self.bands * self.rows > self.num_perm:
                raise ValueError(f"--bands x --rows = {self.bands * self.rows} exceeds --num-perm {self.num_perm}")
        if self.min_prefix_share < 2:
            raise ValueError(f"--min-prefix-share must be at least 2 (got {self.min_prefix_share}): a prefix is shared by two or more")
        check_memory_limit(self.memory_limit)

    def lsh_params(self) -> tuple[int, int]:
        if self.bands and self.rows:  # checked against num_perm in __post_init__
            return self.bands, self.rows
        return _optimal_params(self.threshold, self.num_perm)

    def signature_fingerprint(self, cleaning_fp: str | None) -> str:
        d = {"num_perm": self.num_perm, "shingle": self.shingle, "seed": self.seed, "max_prefix_turns": self.max_prefix_turns,
             "canonical": hashlib.sha256(repr(RULES).encode()).hexdigest()[:12], "cleaning": cleaning_fp if self.use_cleaning else None,
             "tokenizer": _TOKENIZER_VERSION}
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]

    def fingerprint(self, cleaning_fp: str | None) -> str:
        d = asdict(self)
        for k in ("batch_rows", "memory_limit", "threads", "reuse_signatures", "lock_wait_s"):
            d.pop(k)
        d["lsh"] = self.lsh_params()
        d["signatures"] = self.signature_fingerprint(cleaning_fp)
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


_PARAM_CACHE: dict[tuple[float, int], tuple[int, int]] = {}


def _optimal_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """datasketch's choice of (bands, rows) for a threshold (equal false-positive/negative weights)."""
    key = (round(threshold, 6), num_perm)
    if key not in _PARAM_CACHE:
        from datasketch.lsh import _optimal_param

        _PARAM_CACHE[key] = tuple(_optimal_param(threshold, num_perm, 0.5, 0.5))  # type: ignore[assignment]
    return _PARAM_CACHE[key]


@dataclass
class DedupSummary:
    corpus: str
    trajectories: int = 0  # in the corpus
    considered: int = 0  # with a signature (not dropped by cleaning)
    dropped_by_cleaning: int = 0  # whole trajectories cleaning dropped (with use_cleaning)
    empty: int = 0  # nothing to shingle
    exact_groups: int = 0  # groups of >1 identical canonical trajectories
    exact_duplicates: int = 0  # members beyond the representative, kind exact
    near_duplicates: int = 0  # members beyond the representative, kind near
    clusters: int = 0
    kept: int = 0
    largest: list[tuple[str, int, str]] = field(default_factory=list)  # (cluster_id, size, kind)
    bands: int = 0
    rows: int = 0
    candidate_pairs: int = 0
    verified_pairs: int = 0
    shared_prefix_turns: int = 0  # turns kept as context but not counted for training
    signatures_reused: bool = False
    seconds_signatures: float = 0.0
    seconds_verdicts: float = 0.0
    fingerprint: str = ""
    threshold: float = 0.0

    def render(self) -> str:
        rate = self.considered / self.seconds_signatures if self.seconds_signatures and not self.signatures_reused else 0
        lines = [
            f"dedup → {self.corpus}: {self.considered} of {self.trajectories} trajectories considered "
            f"({self.dropped_by_cleaning} dropped by cleaning, "
            f"{self.trajectories - self.considered - self.dropped_by_cleaning} with no turns left, {self.empty} with no text)",
            ("  signatures: reused (same settings, same corpus)" if self.signatures_reused else
             f"  signatures: {self.seconds_signatures:.1f} s ({rate:,.0f} trajectories/s)")
            + f"; verdicts: {self.seconds_verdicts:.1f} s",
            f"  LSH: threshold {self.threshold}, {self.bands} bands x {self.rows} rows; "
            f"{self.candidate_pairs} candidate pairs, {self.verified_pairs} verified",
            # two different counts: a cluster (near or exact) can hold several groups of identical copies
            f"  {self.clusters} duplicate clusters, holding {self.exact_groups} groups of identical trajectories; "
            f"dropped as duplicates: {self.exact_duplicates} exact, {self.near_duplicates} near; kept {self.kept}",
            f"  shared prefixes: {self.shared_prefix_turns} turns kept as context, counted for training once elsewhere",
        ]
        if self.largest:
            lines.append("  largest clusters: " + ", ".join(f"{c[:12]}… {n} ({k})" for c, n, k in self.largest))
        lines.append('  see: ' + query_command(self.corpus, "SELECT kind, count(*) FROM duplicates WHERE NOT is_representative GROUP BY 1"))
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Signatures: numpy over Arrow buffers
# ---------------------------------------------------------------------------------------------

_TOKENIZER_VERSION = 7  # bump when signatures or the stored layout change (6: CJK characters, Unicode punctuation;
# 7: two-byte letters lower-cased)
_M64 = (1 << 64) - 1
_P = np.uint64(0x100000001B3)  # FNV prime: odd, so invertible mod 2^64
_Q = np.uint64(0x9E3779B97F4A7C15)
_GOLD = np.uint64(0x9E3779B97F4A7C15)
_WINDOW = 1 << 20  # bytes hashed per numpy window (powers tables are this long)
_SHINGLE_CHUNK = 1 << 15  # shingles per permutation block: 32k x 128 x 4 B = 16 MiB

_LOWER = np.zeros(256, dtype=np.uint8)
for _c in b"abcdefghijklmnopqrstuvwxyz0123456789_":
    _LOWER[_c] = _c
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ":
    _LOWER[_c] = _c + 32
_LOWER[128:] = np.arange(128, 256, dtype=np.uint8)  # UTF-8 multi-byte characters are word characters
# ... except, among the three-byte characters, punctuation (General Punctuation ’ — “, CJK symbols 。、,
# full-width ！（）：？) separates words, and a CJK ideograph or kana is a word of its own (Chinese and
# Japanese are written without spaces: a whole observation was one "word"), as decontamination reads them
_PUNCT3 = ((0x2000, 0x206F), (0x3000, 0x303F), (0xFF00, 0xFF0F), (0xFF1A, 0xFF20), (0xFF3B, 0xFF40), (0xFF5B, 0xFF65))
_CJK3 = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))


def _in_ranges(cp: np.ndarray, ranges: tuple[tuple[int, int], ...]) -> np.ndarray:
    out = np.zeros(len(cp), dtype=bool)
    for lo, hi in ranges:
        out |= (cp >= lo) & (cp <= hi)
    return out


# two-byte characters (U+0080..U+07FF: accented Latin, Greek, Cyrillic, ...) to their lower case where
# that is one two-byte character too (Python's; İ's is two characters and stays as it is)
_LOWER2 = np.arange(0x800, dtype=np.uint16)
for _c in range(0x80, 0x800):
    _lo = chr(_c).lower()
    if len(_lo) == 1 and 0x80 <= ord(_lo) < 0x800:
        _LOWER2[_c] = ord(_lo)


def _lower_two_byte(seg: np.ndarray, lead: np.ndarray) -> None:
    """Lower-case in place the two-byte characters whose lead bytes are at `lead` (0xC2..0xDF)."""
    lead = lead[lead + 1 < len(seg)]
    b1 = seg[lead + 1]
    ok = (b1 & 0xC0) == 0x80  # a lead byte and a continuation byte
    lead, b1 = lead[ok], b1[ok]
    cp = _LOWER2[((seg[lead].astype(np.uint16) & 0x1F) << 6) | (b1 & 0x3F)]
    seg[lead] = 0xC0 | (cp >> 6)
    seg[lead + 1] = 0x80 | (cp & 0x3F)


def _three_byte_classes(seg: np.ndarray, lead: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets in `seg` of the three-byte UTF-8 punctuation and CJK characters, of the lead
    bytes (>= 0xE0) at `lead`."""
    if not len(lead):
        return lead, lead
    lead = lead[lead + 2 < len(seg)]
    b0, b1, b2 = (seg[lead + k].astype(np.uint32) for k in range(3))
    valid = (b0 < 0xF0) & ((b1 & 0xC0) == 0x80) & ((b2 & 0xC0) == 0x80)  # a lead byte and two continuation bytes
    cp = ((b0 & 0x0F) << 12) | ((b1 & 0x3F) << 6) | (b2 & 0x3F)
    return lead[valid & _in_ranges(cp, _PUNCT3)], lead[valid & _in_ranges(cp, _CJK3)]

_POW: np.ndarray | None = None
_INVPOW: np.ndarray | None = None


def _powers() -> tuple[np.ndarray, np.ndarray]:
    global _POW, _INVPOW
    if _POW is None:
        with np.errstate(over="ignore"):
            p = np.full(_WINDOW, _P, dtype=np.uint64)
            p[0] = 1
            _POW = np.cumprod(p, dtype=np.uint64)
            inv = np.full(_WINDOW, np.uint64(pow(int(_P), -1, 1 << 64)), dtype=np.uint64)
            inv[0] = 1
            _INVPOW = np.cumprod(inv, dtype=np.uint64)
    assert _INVPOW is not None
    return _POW, _INVPOW


def _fmix64(h: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ (h >> np.uint64(33))
        h = h * np.uint64(0xFF51AFD7ED558CCD)
        h = h ^ (h >> np.uint64(33))
        h = h * np.uint64(0xC4CEB9FE1A85EC53)
        return h ^ (h >> np.uint64(33))


def token_hashes(data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the word tokens of byte ranges [starts[i], ends[i]) of `data`, and the range each
    token came from. Tokens are maximal runs of [A-Za-z0-9_] and non-ASCII bytes, lower-cased (ASCII
    and two-byte letters), split at three-byte punctuation, and each CJK character alone; they never cross a range boundary."""
    pw, inv = _powers()
    # Cut ranges into pieces of at most one window, then pack pieces into windows.
    lens = ends - starts
    nparts = np.maximum(1, -(-lens // _WINDOW))
    rid = np.repeat(np.arange(len(starts)), nparts)
    first = np.repeat(np.cumsum(nparts) - nparts, nparts)
    ps = starts[rid] + (np.arange(len(rid)) - first) * _WINDOW
    pe = np.minimum(ps + _WINDOW, ends[rid])
    out_h: list[np.ndarray] = []
    out_r: list[np.ndarray] = []
    i, n = 0, len(ps)
    plen = pe - ps
    cum = np.concatenate(([0], np.cumsum(plen)))
    while i < n:
        j = int(np.searchsorted(cum, cum[i] + _WINDOW, side="right")) - 1
        j = max(j, i + 1)
        s, e = int(ps[i]), int(pe[j - 1])
        # pieces i..j-1 are contiguous in `data` only if ranges are adjacent; build a gathered view
        idx_s, idx_e = ps[i:j], pe[i:j]
        if np.all(idx_s[1:] == idx_e[:-1]):
            seg = _LOWER[data[s:e]]
            rel_s = idx_s - s
        else:
            seg = _LOWER[np.concatenate([data[a:b] for a, b in zip(idx_s, idx_e, strict=True)])]
            rel_s = np.concatenate(([0], np.cumsum(idx_e - idx_s)[:-1]))
        m = len(seg)
        if m:
            high = np.flatnonzero(seg >= 0xC2)  # the lead bytes of multi-byte characters (continuations are < 0xC0)
            if len(high):
                lead_hi = seg[high]
                _lower_two_byte(seg, high[lead_hi < 0xE0])
                high = high[lead_hi >= 0xE0]
            punct, cjk = _three_byte_classes(seg, high)
            for k in range(3):
                seg[punct + k] = 0
            isw = seg != 0
            prev = np.empty(m, dtype=bool)
            prev[0] = False
            prev[1:] = isw[:-1]
            prev[rel_s[rel_s < m]] = False
            nxt = np.empty(m, dtype=bool)
            nxt[-1] = False
            nxt[:-1] = isw[1:]
            rel_e = np.concatenate((rel_s[1:], [m]))
            nxt[rel_e[rel_e > 0] - 1] = False
            if len(cjk):  # a CJK character is a token of its own: a boundary on each side
                prev[cjk] = False
                nxt[cjk + 2] = False
                nxt[cjk[cjk > 0] - 1] = False
                after = cjk + 3
                prev[after[after < m]] = False
            ts = np.flatnonzero(isw & ~prev)
            te = np.flatnonzero(isw & ~nxt) + 1
            if len(ts):
                with np.errstate(over="ignore"):
                    h = np.zeros(m + 1, dtype=np.uint64)
                    np.cumsum(seg.astype(np.uint64) * pw[:m], out=h[1:])
                    th = (h[te] - h[ts]) * inv[ts]
                out_h.append(_fmix64(th))
                piece = np.searchsorted(rel_s, ts, side="right") - 1
                out_r.append(rid[i + piece])
        i = j
    if not out_h:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    return np.concatenate(out_h), np.concatenate(out_r).astype(np.int64)


def shingle_hashes(th: np.ndarray, tr: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """32-bit hashes of the word n-grams within each range (ranges with fewer than n tokens give one
    shingle of all their tokens), and the range of each. `tr` must be non-decreasing."""
    m = len(th)
    if m == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64)
    with np.errstate(over="ignore"):
        parts_h, parts_r = [], []
        if m >= n:
            k = m - n + 1
            s = th[:k].copy()
            q = np.uint64(1)
            for j in range(1, n):
                q = q * _Q
                s += th[j : j + k] * q
            ok = tr[:k] == tr[n - 1 :]
            parts_h.append(s[ok])
            parts_r.append(tr[:k][ok])
        # ranges with 1..n-1 tokens (`tr` is sorted: runs, not a hash-based unique)
        first = np.flatnonzero(np.concatenate(([True], tr[1:] != tr[:-1])))
        ranges, counts = tr[first], np.diff(np.concatenate((first, [m])))
        short = counts < n
        if np.any(short):
            f, c = first[short], counts[short]
            s = th[f].copy()
            q = np.uint64(1)
            for j in range(1, n - 1):
                q = q * _Q
                has = c > j
                s[has] += th[f[has] + j] * q
            parts_h.append(s)
            parts_r.append(ranges[short])
        h = np.concatenate(parts_h)
        r = np.concatenate(parts_r)
        order = np.argsort(r, kind="stable")
        h, r = h[order], r[order]
        h32 = ((h ^ (h >> np.uint64(29))) * np.uint64(0xBF58476D1CE4E5B9)) >> np.uint64(32)
    return h32.astype(np.uint32), r


class MinHasher:
    """datasketch's MinHash permutations (scheme `affine32`) applied to many shingle sets at once."""

    def __init__(self, num_perm: int, seed: int):
        from datasketch import MinHash
        from datasketch.minhash import _fmix

        m = MinHash(num_perm=num_perm, seed=seed, scheme="affine32")
        self.a = m.permutations[0].astype(np.uint32)
        self.b = m.permutations[1].astype(np.uint32)
        self._fmix = _fmix
        self.num_perm = num_perm
        self.empty = np.uint32(0xFFFFFFFF)

    def signatures(self, h32: np.ndarray, owner: np.ndarray, n_owners: int) -> np.ndarray:
        """(n_owners, num_perm) uint32: min over each owner's shingles of a*fmix32(h)+b. `owner`
        must be non-decreasing. Computed permutation-major, so each reduction runs over
        contiguous memory (7x faster than shingle-major here)."""
        sig = np.full((self.num_perm, n_owners), self.empty, dtype=np.uint32)
        if len(h32) == 0:
            return np.ascontiguousarray(sig.T)
        hv = self._fmix(h32.astype(np.uint32), 32)
        for s in range(0, len(hv), _SHINGLE_CHUNK):
            blk, own = hv[s : s + _SHINGLE_CHUNK], owner[s : s + _SHINGLE_CHUNK]
            with np.errstate(over="ignore"):
                phv = np.multiply.outer(self.a, blk)
                phv += self.b[:, None]
            starts = np.concatenate(([0], np.flatnonzero(own[1:] != own[:-1]) + 1))
            mins = np.minimum.reduceat(phv, starts, axis=1)
            rows = own[starts]
            sig[:, rows] = np.minimum(sig[:, rows], mins)
        return np.ascontiguousarray(sig.T)


def _string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """UTF-8 bytes of a string array and the [start, end) of each value, without copying."""
    arr = arr.cast(pa.large_string()) if arr.type != pa.large_string() else arr
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    _, off_buf, data_buf = arr.buffers()
    offs = np.frombuffer(off_buf, dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return data, offs[:-1].copy(), offs[1:].copy()


@dataclass
class _TrajBatch:
    ids: list[str]
    turns: np.ndarray  # per trajectory
    exact: np.ndarray
    shingles: np.ndarray
    sig: np.ndarray
    prefix_tid: pa.Array
    prefix_ti: pa.Array
    prefix_traj: np.ndarray  # index in `ids` of each prefix row's trajectory
    prefix_hash: np.ndarray


def compute_batch(tids: pa.Array, tidx: pa.Array, text: pa.Array, digest: np.ndarray, hasher: MinHasher,
                  shingle: int, max_prefix_turns: int) -> _TrajBatch:
    """Signatures, exact hashes and prefix hashes for complete trajectories whose turns are
    contiguous and ordered in the inputs."""
    n = len(tids)
    change = np.ones(n, dtype=bool)
    if n > 1:
        change[1:] = pc.not_equal(tids.slice(1), tids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    tstart = np.flatnonzero(change)
    traj_of_turn = np.cumsum(change) - 1
    n_traj = len(tstart)
    pos = np.arange(n) - tstart[traj_of_turn]
    # exact and prefix hashes from the per-turn digests
    with np.errstate(over="ignore"):
        terms = _fmix64(digest + pos.astype(np.uint64) * _GOLD)
        cs = np.cumsum(terms, dtype=np.uint64)
        base = np.concatenate(([np.uint64(0)], cs))[tstart][traj_of_turn]
        prefix = _fmix64((cs - base) ^ ((pos.astype(np.uint64) + np.uint64(1)) * _Q))
    tend = np.concatenate((tstart[1:], [n]))
    exact = prefix[tend - 1]
    turns = (tend - tstart).astype(np.int32)
    keep = pos < max_prefix_turns
    # shingles
    data, s, e = _string_buffers(text)
    th, tr = token_hashes(data, s, e)
    h32, sr = shingle_hashes(th, tr, shingle)
    owner = traj_of_turn[sr]
    shingles = np.bincount(owner, minlength=n_traj).astype(np.int32)
    sig = hasher.signatures(h32, owner, n_traj)
    ids = tids.take(pa.array(tstart)).to_pylist()
    mask = pa.array(keep)
    return _TrajBatch(ids, turns, exact, shingles, sig, tids.filter(mask), tidx.filter(mask), traj_of_turn[keep], prefix[keep])


def signatures_of_texts(texts: list[list[str]], num_perm: int = 128, seed: int = 1, shingle: int = 5) -> np.ndarray:
    """MinHash signatures of trajectories given as lists of (already canonical) turn texts: the same
    computation as the stage, for tests and benchmarks."""
    ids, idx, flat = [], [], []
    for i, turns in enumerate(texts):
        for j, t in enumerate(turns):
            ids.append(f"{i:012d}")
            idx.append(j)
            flat.append(t)
    if not flat:
        return np.zeros((0, num_perm), np.uint32)
    b = compute_batch(pa.array(ids), pa.array(idx, pa.int32()), pa.array(flat), np.zeros(len(flat), np.uint64),
                      MinHasher(num_perm, seed), shingle, 0)
    return b.sig


# ---------------------------------------------------------------------------------------------
# The stage
# ---------------------------------------------------------------------------------------------




def _sig_matrix(col: pa.Array, num_perm: int) -> np.ndarray:
    """(n, num_perm) uint32 view of a signature column (fixed-size or, from DuckDB, plain binary)."""
    n = len(col)
    if pa.types.is_fixed_size_binary(col.type):
        raw = np.frombuffer(col.buffers()[1], dtype=np.uint8)[col.offset * 4 * num_perm :][: n * 4 * num_perm]
    else:
        offs = np.frombuffer(col.buffers()[1], dtype=np.int64 if pa.types.is_large_binary(col.type) else np.int32)
        offs = offs[col.offset : col.offset + n + 1]
        if n and not np.all(np.diff(offs) == 4 * num_perm):
            raise CorpusError(f"signatures are not {num_perm} x uint32 each; was dedup_signatures written with another num_perm?")
        raw = np.frombuffer(col.buffers()[2], dtype=np.uint8)[offs[0] : offs[0] + n * 4 * num_perm] if n else np.zeros(0, np.uint8)
    return raw.view(np.uint32).reshape(n, num_perm)


def _arrow(rel: duckdb.DuckDBPyRelation) -> pa.Table:
    out = rel.arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


class _Progress:
    def __init__(self, enabled: bool, echo: Callable[[str], None]):
        self.enabled, self.echo = enabled, echo
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.t0 = time.monotonic()

    def __call__(self, msg: str, force: bool = False) -> None:
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < (0.5 if self.tty else 10.0)):
            return
        self.last = now
        self.echo(f"dedup [{now - self.t0:6.1f} s] {msg}")


def _cleaning_filter(con: duckdb.DuckDBPyConnection, corpus: Corpus, use: bool) -> tuple[pa.Array | None, pa.Array | None, str | None]:
    info = side_info(corpus, "cleaning")
    if not use or info is None:
        return None, None, None
    path = sql_str(str(side_path(corpus, "cleaning")))
    t = _arrow(con.sql(f"SELECT DISTINCT trajectory_id FROM read_parquet({path}) WHERE turn_index IS NULL")).column(0)
    u = _arrow(con.sql(f"SELECT DISTINCT trajectory_id || ':' || turn_index FROM read_parquet({path}) WHERE turn_index IS NOT NULL")).column(0)
    return t.combine_chunks(), u.combine_chunks(), verdicts_identity(info)


def _iter_turn_batches(con: duckdb.DuckDBPyConnection, files: list[Path], batch_rows: int,
                       drop_t: pa.Array | None, drop_u: pa.Array | None) -> Iterator[tuple[Path, pa.Table]]:
    """Per turns file: batches of complete trajectories (trajectory_id, turn_index, text, digest),
    turns in file order, minus what cleaning dropped."""
    text = f"kind || chr(31) || {canonical_sql('action')} || chr(30) || {canonical_sql('observation')}"
    # the exact digest also covers the exit code; a turn without one hashes as it did before codes counted
    digest = "md5_number_lower(CASE WHEN exit_code IS NULL THEN text ELSE text || chr(29) || exit_code END)"
    for f in files:
        sql = (f"SELECT trajectory_id, turn_index, text, {digest} AS digest "
               f"FROM (SELECT trajectory_id, turn_index, exit_code, {text} AS text FROM read_parquet({sql_str(str(f))}))")
        carry: pa.Table | None = None
        reader = con.sql(sql).to_arrow_reader(batch_rows)
        for rb in reader:
            t = pa.Table.from_batches([rb])
            if drop_t is not None and len(drop_t):
                t = t.filter(pc.invert(pc.is_in(t.column("trajectory_id"), value_set=drop_t)))
            if drop_u is not None and len(drop_u) and t.num_rows:
                key = pc.binary_join_element_wise(t.column("trajectory_id"), pc.cast(t.column("turn_index"), pa.string()), ":")
                t = t.filter(pc.invert(pc.is_in(key, value_set=drop_u)))
            if carry is not None:
                t = pa.concat_tables([carry, t])
                carry = None
            if t.num_rows == 0:
                continue
            ids = t.column("trajectory_id")
            last = ids[-1]
            # the last trajectory may continue in the next batch: hold it back
            same = pc.equal(ids, last).to_numpy(zero_copy_only=False)
            cut = len(same) - int(np.argmin(same[::-1])) if not same.all() else 0
            if cut == 0:
                carry = t
                continue
            carry = t.slice(cut)
            yield f, t.slice(0, cut)
        if carry is not None and carry.num_rows:
            yield f, carry


def _prefetch(it: Iterator, depth: int = 2) -> Iterator:
    """Run an iterator in a background thread, `depth` items ahead. DuckDB (canonical text) and
    Arrow release the GIL, so reading the next batch overlaps hashing the current one."""
    q: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def run() -> None:
        try:
            for item in it:
                while not stop.is_set():
                    try:
                        q.put(item, timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, which re-raises it
            q.put(e)

    th = threading.Thread(target=run, name="dedup-reader", daemon=True)
    th.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        th.join(timeout=5)


def _check_order(f: Path, t: pa.Table) -> None:
    ti = t.column("turn_index").to_numpy()
    ids = t.column("trajectory_id")
    n = len(ti)
    if n > 1:
        same = pc.equal(ids.slice(1), ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        bad = np.flatnonzero(same & (ti[1:] <= ti[:-1]))
        if len(bad):
            k = int(bad[0]) + 1
            raise CorpusError(f"{f}: turns of trajectory {ids[k]} are not in turn order (turn {ti[k]} after {ti[k - 1]}); "
                              "dedup reads turns in file order")


def _pass_signatures(con: duckdb.DuckDBPyConnection, corpus: Corpus, cfg: DedupConfig, sig_fp: str, state: dict,
                     drop_t: pa.Array | None, drop_u: pa.Array | None, cleaning_fp: str | None,
                     progress: _Progress, files: list[Path]) -> dict[str, Any]:
    hasher = MinHasher(cfg.num_perm, cfg.seed)
    config = {"num_perm": cfg.num_perm, "shingle": cfg.shingle, "seed": cfg.seed, "scheme": "affine32",
              "max_prefix_turns": cfg.max_prefix_turns, "use_cleaning": cfg.use_cleaning,
              "cleaning_fingerprint": cleaning_fp if cfg.use_cleaning else None}
    sig_schema = _signature_schema(cfg.num_perm)
    row = 0
    t0 = time.monotonic()
    # MinHash values are random: compressing them only costs time
    sig_compression = {f.name: "zstd" for f in sig_schema} | {"signature": "none"}
    with SideTableWriter(corpus, "dedup_signatures", sig_schema, "dedup", sig_fp, config, state,
                         compression=sig_compression) as ws, \
         SideTableWriter(corpus, "dedup_prefixes", PREFIXES_SCHEMA, "dedup", sig_fp, config, state) as wp:
        reader_con = con.cursor()  # its own cursor: the reading thread must not share one with this thread
        for f, t in _prefetch(_iter_turn_batches(reader_con, files, cfg.batch_rows, drop_t, drop_u)):
            _check_order(f, t)
            digest = t.column("digest").to_numpy().astype(np.uint64)
            b = compute_batch(t.column("trajectory_id").combine_chunks(), t.column("turn_index").combine_chunks(),
                              t.column("text").combine_chunks(), digest, hasher, cfg.shingle, cfg.max_prefix_turns)
            n = len(b.ids)
            sig_arr = pa.FixedSizeBinaryArray.from_buffers(pa.binary(4 * cfg.num_perm), n,
                                                           [None, pa.py_buffer(np.ascontiguousarray(b.sig).tobytes())])
            ws.write(pa.table([pa.array(b.ids), pa.nulls(n, pa.int32()), pa.array(np.arange(row, row + n)),
                               pa.array(b.exact), pa.array(b.turns), pa.array(b.shingles), sig_arr], schema=sig_schema))
            wp.write(pa.table([b.prefix_tid, b.prefix_ti, pa.array(b.prefix_traj.astype(np.int64) + row), pa.array(b.prefix_hash)],
                              schema=PREFIXES_SCHEMA))
            row += n
            dt = time.monotonic() - t0
            progress(f"signatures: {row:,} trajectories ({row / max(dt, 1e-9):,.0f}/s), file {files.index(f) + 1}/{len(files)}")
        # a trajectory split across files (or non-contiguous in one) would get two rows: refuse
        dup = con.sql(f"SELECT trajectory_id, count(*) FROM read_parquet({sql_str(str(ws.close()))}) "
                      "GROUP BY 1 HAVING count(*) > 1 LIMIT 5").fetchall()
        if dup:
            raise CorpusError(f"turns of trajectories {[d[0] for d in dup]} are not contiguous in the turns files; "
                              "dedup needs each trajectory's turns together (as ingest writes them)")
        summary = {"trajectories": row, "seconds": round(time.monotonic() - t0, 3)}
        ws.commit(summary, lock_wait_s=cfg.lock_wait_s)
        wp.commit(summary, lock_wait_s=cfg.lock_wait_s)
    return summary


def _components(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Connected components of the graph with edges (a[i], b[i]): (nodes, smallest node of each's component)."""
    nodes = np.unique(np.concatenate((a, b)))
    ai, bi = np.searchsorted(nodes, a), np.searchsorted(nodes, b)
    label = np.arange(len(nodes))
    while True:
        m = np.minimum(label[ai], label[bi])
        new = label.copy()
        np.minimum.at(new, ai, m)
        np.minimum.at(new, bi, m)
        new = new[new]  # pointer jumping
        while True:
            nxt = new[new]
            if np.array_equal(nxt, new):
                break
            new = nxt
        if np.array_equal(new, label):
            break
        label = new
    return nodes, nodes[label]


ALL_PAIRS_BUCKET = 64  # LSH buckets up to this size have every pair verified (at most 2,016)


def _pass_verdicts(con: duckdb.DuckDBPyConnection, corpus: Corpus, cfg: DedupConfig, fp: str, state: dict,
                   work: Path, summary: DedupSummary, progress: _Progress) -> None:
    bands, rows = cfg.lsh_params()
    summary.bands, summary.rows = bands, rows
    sigs = sql_str(str(side_path(corpus, "dedup_signatures")))
    con.execute(f"CREATE OR REPLACE TEMP TABLE _rows AS SELECT row_id, trajectory_id, exact_hash, turns, shingles FROM read_parquet({sigs})")
    con.execute("CREATE OR REPLACE TEMP TABLE _heads AS SELECT exact_hash, min(row_id) AS head, count(*) AS n FROM _rows GROUP BY 1")
    summary.considered = con.sql("SELECT count(*) FROM _rows").fetchall()[0][0]
    summary.empty = con.sql("SELECT count(*) FROM _rows WHERE shingles = 0").fetchall()[0][0]

    # band hashes of one member per exact group, one spill file per band
    progress("LSH: band hashes", force=True)
    band_dir = work / "bands"
    band_dir.mkdir()
    band_schema = pa.schema([("bucket", pa.uint64()), ("row", pa.int64())])
    writers = [pq.ParquetWriter(band_dir / f"band-{i:03d}.parquet", band_schema, compression="zstd") for i in range(bands)]
    with np.errstate(over="ignore"):
        mult = np.cumprod(np.concatenate(([np.uint64(1)], np.full(rows - 1, _Q, dtype=np.uint64))), dtype=np.uint64)
    try:
        reader = con.sql(f"""SELECT s.row_id, s.signature FROM read_parquet({sigs}) s
                             SEMI JOIN _heads h ON h.head = s.row_id WHERE s.shingles > 0""").to_arrow_reader(65_536)
        for rb in reader:
            rid = rb.column(0).to_numpy()
            sig = _sig_matrix(rb.column(1), cfg.num_perm).astype(np.uint64)
            for i in range(bands):
                with np.errstate(over="ignore"):
                    h = _fmix64((sig[:, i * rows : (i + 1) * rows] * mult[None, :]).sum(axis=1, dtype=np.uint64) + np.uint64(i))
                writers[i].write_table(pa.table([pa.array(h), pa.array(rid)], schema=band_schema))
    finally:
        for w in writers:
            w.close()

    # candidate pairs: within a bucket of up to ALL_PAIRS_BUCKET members, every pair; in a larger one,
    # each member with the first and with the one before it, in the order of their content hashes.
    # Pairing every member with the bucket's first row alone missed near-duplicates whose first
    # member was an outlier, and which one was first followed the order of the ingests.
    con.execute("CREATE OR REPLACE TEMP TABLE _cand (a BIGINT, b BIGINT)")
    for i in range(bands):
        progress(f"LSH: grouping band {i + 1}/{bands}")
        f = sql_str(str(band_dir / f"band-{i:03d}.parquet"))
        con.execute(f"""
            INSERT INTO _cand
            WITH m AS (SELECT f.bucket, f."row", r.exact_hash, count(*) OVER (PARTITION BY f.bucket) AS n
                       FROM read_parquet({f}) f JOIN _rows r ON r.row_id = f."row"),
                 big AS (SELECT "row", first_value("row") OVER w AS head, lag("row") OVER w AS prev
                         FROM m WHERE n > {ALL_PAIRS_BUCKET} WINDOW w AS (PARTITION BY bucket ORDER BY exact_hash, "row"))
            SELECT x."row", y."row" FROM m x JOIN m y ON x.bucket = y.bucket AND x."row" < y."row"
            WHERE x.n > 1 AND x.n <= {ALL_PAIRS_BUCKET}
            UNION ALL SELECT head, "row" FROM big
            UNION ALL SELECT prev, "row" FROM big WHERE prev IS NOT NULL""")
    con.execute("CREATE OR REPLACE TEMP TABLE _pairs AS SELECT DISTINCT least(a, b) AS a, greatest(a, b) AS b FROM _cand WHERE a <> b")
    con.execute("DROP TABLE _cand")
    summary.candidate_pairs = con.sql("SELECT count(*) FROM _pairs").fetchall()[0][0]

    # verify candidates with the full signatures
    progress(f"LSH: verifying {summary.candidate_pairs:,} candidate pairs", force=True)
    need = int(np.ceil((cfg.threshold - cfg.verify_margin) * cfg.num_perm - 1e-9))
    va, vb = [], []
    reader = con.sql(f"""
        SELECT p.a, p.b, sa.signature AS sa, sb.signature AS sb FROM _pairs p
        JOIN read_parquet({sigs}) sa ON sa.row_id = p.a JOIN read_parquet({sigs}) sb ON sb.row_id = p.b""").to_arrow_reader(32_768)
    for rb in reader:
        a = rb.column(0).to_numpy()
        b = rb.column(1).to_numpy()
        x, y = _sig_matrix(rb.column(2), cfg.num_perm), _sig_matrix(rb.column(3), cfg.num_perm)
        ok = (x == y).sum(axis=1) >= need
        va.append(a[ok])
        vb.append(b[ok])
    a = np.concatenate(va) if va else np.zeros(0, np.int64)
    b = np.concatenate(vb) if vb else np.zeros(0, np.int64)
    summary.verified_pairs = len(a)
    nodes, comp = _components(a, b) if len(a) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    con.register("_near", pa.table({"head": nodes, "comp": comp}))

    progress("clusters and representatives", force=True)
    ok_outcomes = "(" + ", ".join(sql_str(o) for o in cfg.success_outcomes) + ")"
    bad_outcomes = "(" + ", ".join(sql_str(o) for o in FAILURE_OUTCOMES) + ")"
    success = (f"(lower(coalesce(t.outcome, '')) IN {ok_outcomes} OR (coalesce(t.reward, 0) >= {float(cfg.success_reward)!r}"
               f" AND lower(coalesce(t.outcome, '')) NOT IN {bad_outcomes}))")
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _ranked AS
        SELECT r.row_id, r.trajectory_id, r.exact_hash, coalesce(n.comp, h.head) AS comp,
               row_number() OVER (ORDER BY {success} DESC,
                                  r.turns DESC, t.collected_at ASC NULLS LAST, r.trajectory_id) AS rank
        FROM _rows r JOIN _heads h USING (exact_hash) LEFT JOIN _near n ON n.head = h.head
        LEFT JOIN trajectories t USING (trajectory_id)""")
    con.execute("""
        CREATE OR REPLACE TEMP TABLE _dups AS
        WITH c AS (SELECT comp, count(*) AS size, min(trajectory_id) AS cluster_id, arg_min(trajectory_id, rank) AS rep,
                          arg_min(exact_hash, rank) AS rep_hash, min(exact_hash) = max(exact_hash) AS all_exact
                   FROM _ranked GROUP BY comp HAVING count(*) > 1)
        SELECT r.trajectory_id, NULL::INTEGER AS turn_index, c.cluster_id, r.trajectory_id = c.rep AS is_representative,
               CASE WHEN r.trajectory_id = c.rep THEN (CASE WHEN c.all_exact THEN 'exact' ELSE 'near' END)
                    WHEN r.exact_hash = c.rep_hash THEN 'exact' ELSE 'near' END AS kind,
               c.rep AS representative_id, c.size::INTEGER AS cluster_size
        FROM _ranked r JOIN c USING (comp)""")
    summary.clusters = con.sql("SELECT count(DISTINCT cluster_id) FROM _dups").fetchall()[0][0]
    summary.exact_groups = con.sql("SELECT count(*) FROM _heads WHERE n > 1").fetchall()[0][0]
    for kind, n in con.sql("SELECT kind, count(*) FROM _dups WHERE NOT is_representative GROUP BY 1").fetchall():
        setattr(summary, f"{kind}_duplicates", n)
    summary.kept = summary.considered - summary.exact_duplicates - summary.near_duplicates
    summary.largest = [tuple(r) for r in con.sql("""
        SELECT cluster_id, any_value(cluster_size), CASE WHEN bool_and(kind = 'exact') THEN 'exact' ELSE 'near' END
        FROM _dups GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 5""").fetchall()]

    progress("shared prefixes", force=True)
    prefixes = sql_str(str(side_path(corpus, "dedup_prefixes")))
    # integers only until the few shared rows are known: 5 prefix rows per trajectory, grouped
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _shared AS
        WITH kept AS (SELECT row_id, rank FROM _ranked r
                      WHERE NOT EXISTS (SELECT 1 FROM _dups d WHERE d.trajectory_id = r.trajectory_id AND NOT d.is_representative)),
        p AS (SELECT p.row_id, p.turn_index, p.prefix_hash, k.rank FROM read_parquet({prefixes}) p JOIN kept k USING (row_id)),
        s AS (SELECT prefix_hash, count(*) AS n, arg_min(row_id, rank) AS owner FROM p GROUP BY 1 HAVING count(*) >= {int(cfg.min_prefix_share)})
        SELECT r.trajectory_id, p.turn_index, p.prefix_hash, s.n::INTEGER AS share_count, p.row_id = s.owner AS counts_for_training
        FROM p JOIN s USING (prefix_hash) JOIN _rows r USING (row_id)""")
    summary.shared_prefix_turns = con.sql("SELECT count(*) FROM _shared WHERE NOT counts_for_training").fetchall()[0][0]

    config = {**orjson.loads(orjson.dumps(asdict(cfg), default=str)), "bands": bands, "rows": rows}
    with SideTableWriter(corpus, "duplicates", DUPLICATES_SCHEMA, "dedup", fp, config, state) as w:
        for rb in con.sql("SELECT * FROM _dups ORDER BY cluster_id, is_representative DESC, trajectory_id").to_arrow_reader(65_536):
            w.write(rb)
        w.commit({"clusters": summary.clusters, "exact_duplicates": summary.exact_duplicates,
                  "near_duplicates": summary.near_duplicates, "kept": summary.kept, "threshold": cfg.threshold},
                 lock_wait_s=cfg.lock_wait_s)
    with SideTableWriter(corpus, "shared_prefixes", SHARED_PREFIXES_SCHEMA, "dedup", fp, config, state) as w:
        for rb in con.sql("SELECT * FROM _shared ORDER BY trajectory_id, turn_index").to_arrow_reader(65_536):
            w.write(rb)
        w.commit({"turns_not_counted": summary.shared_prefix_turns, "min_prefix_share": cfg.min_prefix_share},
                 lock_wait_s=cfg.lock_wait_s)


def dedup(corpus_dir: Path | str, config: DedupConfig = DedupConfig(), progress: bool = True,
          echo: Callable[[str], None] | None = None) -> DedupSummary:
    """Compute (or reuse) signatures, then duplicate clusters and shared prefixes for the corpus."""
    echo = echo or (lambda m: print(m, file=sys.stderr))
    corpus = Corpus(corpus_dir)
    manifest = corpus.require_manifest()  # one state: the views, the turn files and the state recorded
    committed = corpus.committed_files(manifest)
    con = connect(corpus.root, committed=committed)
    if config.use_cleaning:
        for name, why in stale_side_tables(corpus, ("cleaning",)).items():
            echo(f"dedup: side table {name} is stale: {why} (deduplicating with its verdicts as they are)")
    try:
        with spill_workspace(con, corpus.root, "dedup", config.memory_limit) as work:
            return _dedup(con, corpus, work, config, _Progress(progress, echo), corpus_state(corpus, manifest),
                          committed["turns"])
    finally:
        con.close()


def _dedup(con: duckdb.DuckDBPyConnection, corpus: Corpus, work: Path, config: DedupConfig, bar: _Progress,
           state: dict[str, Any], turn_files: list[Path]) -> DedupSummary:
    if config.threads:
        con.execute(f"SET threads = {int(config.threads)}")
    con.execute("SET preserve_insertion_order = true")
    drop_t, drop_u, cleaning_fp = _cleaning_filter(con, corpus, config.use_cleaning)
    sig_fp = config.signature_fingerprint(cleaning_fp)
    fp = config.fingerprint(cleaning_fp)
    summary = DedupSummary(corpus=str(corpus.root), fingerprint=fp, threshold=config.threshold)
    summary.trajectories = con.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    if drop_t is not None and len(drop_t):
        con.register("_dropped_by_cleaning", pa.table({"trajectory_id": drop_t}))
        summary.dropped_by_cleaning = con.sql("SELECT count(*) FROM trajectories WHERE trajectory_id IN "
                                              "(SELECT trajectory_id FROM _dropped_by_cleaning)").fetchall()[0][0]
        con.unregister("_dropped_by_cleaning")
    prev = side_info(corpus, "dedup_signatures")
    prev_p = side_info(corpus, "dedup_prefixes")
    t0 = time.monotonic()
    if (config.reuse_signatures and prev and prev_p and prev.get("fingerprint") == sig_fp and prev.get("corpus_state") == state
            and prev_p.get("fingerprint") == sig_fp and all(side_schema(corpus, n) is not None for n in ("dedup_signatures", "dedup_prefixes"))):  # damaged: computed again
        summary.signatures_reused = True
        bar("signatures: reusing the stored ones (same settings, same corpus)", force=True)
    else:
        _pass_signatures(con, corpus, config, sig_fp, state, drop_t, drop_u, cleaning_fp, bar, turn_files)
    summary.seconds_signatures = time.monotonic() - t0
    t1 = time.monotonic()
    _pass_verdicts(con, corpus, config, fp, state, work, summary, bar)
    summary.seconds_verdicts = time.monotonic() - t1
    return summary
