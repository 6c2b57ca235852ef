"""A generated dedup workload with known duplicates, for measuring precision and recall.

Base trajectories recombine real steps (action, observation) of the sample corpus: each base takes
the length of a real trajectory of some domain and draws that many steps of the same domain, then
swaps a quarter of each step's words for other words of the domain and a quarter of its numbers for
other numbers (so that bases built from the same few real steps are different documents, not
near-duplicates the truth would miss), and gives half of its steps a log line of volatile values (a
timestamp, a PID, a duration, a UUID, a heap address, a temporary path), as real logs have.

A share of the trajectories are copies of a base, each with the base's cluster as ground truth:

- `exact`: the same content under another id;
- `volatile`: every timestamp, PID, duration, UUID, address and temporary directory redrawn;
- `edit`: about one word in a hundred (at least one) replaced;
- `drop`: one step dropped (a small one: at most 15% of the words, in a base of 5+ steps);
- `swap`: two adjacent steps swapped.

`pairwise_scores` compares predicted clusters with the truth over all pairs of trajectories.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from schemas.records import Trajectory, Turn

COPY_KINDS = ("exact", "volatile", "edit", "drop", "swap")
DEFAULT_MIX = (0.2, 0.3, 0.2, 0.15, 0.15)
_SPLIT = re.compile(r"([A-Za-z][A-Za-z0-9_]{2,})")
_NUMBER = re.compile(r"(?<![\w.])(\d{1,6})(?![\w.])")
_VOLATILE = re.compile(
    r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\b|\bpid=\d+\b|\b\d+\.\d+s\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b0x[0-9a-f]{12}\b|/tmp/tmp[a-z0-9_]{8}\b|(?<=\[)\d+(?=\]:)"
)


@dataclass(frozen=True)
class Step:
    kind: str
    action: str
    observation: str
    observation_kind: str | None
    tool_name: str | None


@dataclass
class StepPool:
    steps: dict[str, list[Step]]  # domain -> steps
    lengths: list[tuple[str, int]]  # (domain, turns) of the real trajectories
    vocab: dict[str, list[str]] = field(default_factory=dict)  # domain -> words

    @classmethod
    def from_corpus(cls, corpus_dir: Path | str, max_obs_chars: int = 4000) -> StepPool:
        from pipelines.query import connect

        con = connect(corpus_dir)
        steps: dict[str, list[Step]] = {}
        for dom, kind, act, obs, ok, tool in con.sql("""
                SELECT domain, kind, coalesce(action, ''), coalesce(observation, ''), observation_kind, tool_name
                FROM turns WHERE action IS NOT NULL OR observation IS NOT NULL
                ORDER BY trajectory_id, turn_index""").fetchall():
            steps.setdefault(dom, []).append(Step(kind, act, obs[:max_obs_chars], ok, tool))
        lengths = [(d, n) for d, n in con.sql("SELECT domain, num_turns FROM trajectories ORDER BY trajectory_id").fetchall()
                   if d in steps]
        vocab = {}
        for d, ss in steps.items():
            words = sorted({w for s in ss for w in _SPLIT.findall(s.observation + " " + s.action)})
            vocab[d] = words or ["word"]
        return cls(steps, lengths, vocab)


def _swap_words(text: str, k: int, vocab: list[str], rng: random.Random) -> str:
    if k <= 0 or not text:
        return text
    parts = _SPLIT.split(text)  # odd positions are words
    n = len(parts) // 2
    if n == 0:
        return text
    for i in rng.sample(range(n), min(k, n)):
        parts[2 * i + 1] = vocab[rng.randrange(len(vocab))]
    return "".join(parts)


def _ts(rng: random.Random) -> str:
    return f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"


_LOG_TEMPLATES = (
    "[{ts}] {w1} pid={pid} done in {dur}s request {uid} at {addr} in {tmp} ({w2})",
    "{w1}: {w2} finished {ts} pid={pid} elapsed {dur}s id {uid}",
    "{ts} {w1}[{pid}]: {w2} {tmp} {dur}s {addr}",
)


def _swap_numbers(text: str, share: float, rng: random.Random) -> str:
    parts = _NUMBER.split(text)  # odd positions are numbers
    n = len(parts) // 2
    for i in rng.sample(range(n), int(n * share)) if n else ():
        parts[2 * i + 1] = str(rng.randrange(10 ** len(parts[2 * i + 1])))
    return "".join(parts)


def _volatile_line(rng: random.Random, vocab: list[str] | None = None) -> str:
    """A log line with volatile values (and two words of the domain, so that bases do not share
    it after canonicalization)."""
    ts = _ts(rng)
    uid = "-".join(f"{rng.getrandbits(b * 4):0{b}x}" for b in (8, 4, 4, 4, 12))
    tmp = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
    words = vocab or ["worker"]
    return _LOG_TEMPLATES[rng.randrange(len(_LOG_TEMPLATES))].format(
        ts=ts, w1=words[rng.randrange(len(words))], w2=words[rng.randrange(len(words))], pid=rng.randint(100, 99999),
        dur=f"{rng.randint(0, 9)}.{rng.randint(0, 999):03d}", uid=uid, addr=f"0x{rng.getrandbits(48):012x}", tmp=f"/tmp/tmp{tmp}")


def _redraw_volatile(text: str, rng: random.Random) -> str:
    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith("pid="):
            return f"pid={rng.randint(100, 99999)}"
        if s.isdigit():
            return str(rng.randint(100, 99999))
        if s.startswith("0x"):
            return f"0x{rng.getrandbits(48):012x}"
        if s.startswith("/tmp/"):
            return "/tmp/tmp" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8))
        if s.endswith("s") and "." in s:
            return f"{rng.randint(0, 9)}.{rng.randint(0, 999):03d}s"
        if "T" in s and s.endswith("Z"):
            return _ts(rng)
        return "-".join(f"{rng.getrandbits(b * 4):0{b}x}" for b in (8, 4, 4, 4, 12))

    return _VOLATILE.sub(repl, text)


@dataclass
class Generated:
    trajectory: Trajectory
    cluster: int  # ground truth: the base's number
    kind: str  # "base" or one of COPY_KINDS
    text: str  # what the baselines see: each turn's action and observation, one after the other


def _text(turns: list[Turn]) -> str:
    return "\n".join(f"{t.action or ''}\n{t.observation or ''}" for t in turns)


def generate(pool: StepPool, n: int, seed: int = 0, dup_fraction: float = 0.3,
             mix: tuple[float, ...] = DEFAULT_MIX, min_turns: int = 3, max_turns: int = 12) -> Iterator[Generated]:
    """`n` trajectories: bases and copies interleaved (a copy always after its base), deterministic in `seed`."""
    rng = random.Random(seed)
    bases: list[tuple[str, list[Turn]]] = []
    cum = np.cumsum(mix) / np.sum(mix)
    for i in range(n):
        make_copy = bases and rng.random() < dup_fraction
        if not make_copy:
            dom, length = pool.lengths[rng.randrange(len(pool.lengths))]
            length = max(min_turns, min(max_turns, length))
            vocab = pool.vocab[dom]
            turns = []
            for _ in range(length):
                s = pool.steps[dom][rng.randrange(len(pool.steps[dom]))]
                obs = _swap_words(s.observation, max(1, len(_SPLIT.findall(s.observation)) // 4), vocab, rng)
                obs = _swap_numbers(obs, 0.25, rng)
                act = _swap_words(s.action, 1 if rng.random() < 0.5 else 0, vocab, rng)
                if rng.random() < 0.5:
                    obs = obs + "\n" + _volatile_line(rng, vocab)
                turns.append(Turn(kind=s.kind, action=act, observation=obs, observation_kind=s.observation_kind,
                                  tool_name=s.tool_name))
            bases.append((dom, turns))
            cluster, kind, dom_out, out = len(bases) - 1, "base", dom, turns
        else:
            cluster = rng.randrange(len(bases))
            dom_out, src = bases[cluster]
            kind = COPY_KINDS[int(np.searchsorted(cum, rng.random(), side="right"))]
            out = [Turn(kind=t.kind, action=t.action, observation=t.observation, observation_kind=t.observation_kind,
                        tool_name=t.tool_name) for t in src]
            words = [len(_SPLIT.findall(f"{t.action} {t.observation}")) for t in out]
            total = sum(words)
            if kind == "drop":
                small = [j for j, w in enumerate(words) if w <= 0.15 * total]
                if len(out) >= 5 and small:
                    out.pop(small[rng.randrange(len(small))])
                else:
                    kind = "edit"
            if kind == "swap":
                if len(out) >= 3:
                    j = rng.randrange(len(out) - 1)
                    out[j], out[j + 1] = out[j + 1], out[j]
                else:
                    kind = "edit"
            if kind == "volatile":
                for t in out:
                    t.observation = _redraw_volatile(t.observation or "", rng)
            if kind == "edit":
                vocab = pool.vocab[dom_out]
                for _ in range(max(1, total // 100)):
                    j = rng.randrange(len(out))
                    out[j].observation = _swap_words(out[j].observation or "", 1, vocab, rng)
        traj = Trajectory(domain=dom_out, source_format="dedup-workload", native_id=f"{seed}-{i}",
                          record_digest=f"workload:{seed}:{i}", turns=out, task=f"generated trajectory {i}",
                          outcome="success" if rng.random() < 0.5 else "failure", locator=f"line:{i + 1}")
        yield Generated(traj, cluster, kind, _text(out))


def pairwise_scores(pred: np.ndarray, truth: np.ndarray) -> tuple[float, float, int, int, int]:
    """Precision and recall over all pairs of items: a pair is predicted when both items share a
    predicted cluster label, true when they share a truth label. Returns (precision, recall,
    true positive pairs, predicted pairs, true pairs)."""
    def pairs(counts: np.ndarray) -> int:
        c = counts.astype(np.int64)
        return int((c * (c - 1) // 2).sum())

    _, pc_ = np.unique(pred, return_counts=True)
    _, tc = np.unique(truth, return_counts=True)
    joint = pred.astype(np.int64) * (int(truth.max()) + 1 if len(truth) else 1) + truth.astype(np.int64)
    _, jc = np.unique(joint, return_counts=True)
    tp, pp, tp_all = pairs(jc), pairs(pc_), pairs(tc)
    return (tp / pp if pp else 1.0), (tp / tp_all if tp_all else 1.0), tp, pp, tp_all


def write_corpus(items: Iterator[Generated], corpus_dir: Path | str, texts_path: Path | str | None = None,
                 truth_path: Path | str | None = None) -> int:
    """Commit generated trajectories to a corpus as one batch (as ingest would), and write the
    ground truth (trajectory_id, cluster, kind) and, optionally, each trajectory's plain text
    (what the baselines read) to Parquet files. Returns the number of trajectories."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.store import Corpus, DomainBuffers, PartWriter
    from schemas.records import digest

    corpus = Corpus(corpus_dir)
    truth_cols: dict[str, list] = {"trajectory_id": [], "cluster": [], "kind": []}
    tw = None
    if texts_path is not None:
        tw = pq.ParquetWriter(texts_path, pa.schema([("trajectory_id", pa.string()), ("text", pa.string())]), compression="zstd")
    tbuf: tuple[list[str], list[str]] = ([], [])
    n = turns = 0
    with corpus.writer() as w:
        batch_id = w.new_batch_id()
        staging = w.staging(batch_id)
        out = DomainBuffers(PartWriter(staging, batch_id))
        for g in items:
            tid = g.trajectory.trajectory_id
            out.add(g.trajectory, "generated", "DedupWorkload", "1")
            truth_cols["trajectory_id"].append(tid)
            truth_cols["cluster"].append(g.cluster)
            truth_cols["kind"].append(g.kind)
            n += 1
            turns += len(g.trajectory.turns)
            if tw is not None:
                tbuf[0].append(tid)
                tbuf[1].append(g.text)
                if len(tbuf[0]) >= 20_000:
                    tw.write_table(pa.table({"trajectory_id": tbuf[0], "text": tbuf[1]}))
                    tbuf = ([], [])
        files = out.close()
        sha = digest("generated", batch_id)
        w.commit(batch_id, files, {sha: {"source": "generated", "bytes": 0, "records": n, "trajectories": n, "turns": turns,
                                         "quarantined": 0, "importers": {}, "domains": {}, "reasons": {}}},
                 {"created_at": batch_id[:15], "generator": "pipelines.dedup_workload"})
    if tw is not None:
        if tbuf[0]:
            tw.write_table(pa.table({"trajectory_id": tbuf[0], "text": tbuf[1]}))
        tw.close()
    if truth_path is not None:
        pq.write_table(pa.table(truth_cols), truth_path, compression="zstd")
    return n
