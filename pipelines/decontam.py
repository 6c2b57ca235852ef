"""Decontamination: flag trajectories whose task or actions overlap an evaluation set.

Word n-grams (lower-cased alphanumeric tokens) of every evaluation item are indexed in memory
(evaluation sets are small); each trajectory's task and actions are scanned for them. A trajectory
is flagged against an item when the item's n-grams found in it cover at least `min_overlap` of the
item's n-grams. An item shorter than n words counts as one n-gram of all its words: from half of n
words up, it is found wherever its words occur in that order; a shorter one only in a text of just
those words (two or three words are found everywhere). Each flag
names the matching item, the field that matched and the overlap, so a person can check it: `task`
when the task alone matches the most, `action` when the task followed by the actions (in turn order)
matches more (an item that holds a task and the actions taken on it, as an AgentWorldBench row
does, matches there).

Items: a string, or an object whose text is the values of `text_keys` (`{"id": ..., "question":
...}`), in JSON lines, a JSON list (or `{"items"|"data": [...]}`), or a directory of such files.
AgentWorldBench rows (`{task, id, prompt: [...], response: [...], turn_idx, ...}`, what `worldline
export` writes under `eval/agentworldbench/`) are read as the benchmark defines them: `task` is the
domain name, not text, and the text is in the turn prompts, so an item is the task instruction and
the actions of the turn prompts. The rows of one session (the same task, id and system prompt; one row
per evaluated turn, each holding the turns before it) make one item, with every turn any of them holds.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

from collectors.agentworldbench import split_prompt, unfence
from schemas.options import at_least

# words of any script (letters and digits, `_` a separator as before); Chinese and Japanese, written
# without spaces, one character per token. `[a-z0-9]+` found no word at all in such text: an item in
# those scripts was never indexed, a trajectory never matched.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(f"[{_CJK}]|[^\\W_{_CJK}]+")
TOKENS_VERSION = 2  # in the fingerprint: a change to the words changes every verdict
TEXT_KEYS = ("task", "instruction", "question", "prompt", "problem_statement", "query", "goal", "text", "input")
ID_KEYS = ("id", "task_id", "instance_id", "question_id", "qid", "_id", "name")


@dataclass(frozen=True)
class DecontamConfig:
    eval_set: str | None = None  # JSON-lines, a JSON list, or a directory of them
    n: int = 8  # n-gram length in words
    min_overlap: float = 0.5  # share of an item's n-grams that must occur in the trajectory
    min_item_ngrams: int = 1  # ignore items with fewer n-grams than this (too short to judge)
    text_keys: tuple[str, ...] = TEXT_KEYS
    id_keys: tuple[str, ...] = ID_KEYS
    include_actions: bool = True

    def __post_init__(self) -> None:
        """Reject values that would flag everything (an empty n-gram) or nothing (an overlap above 1)."""
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"--ngram must be at least 1 (got {self.n})")
        if not 0 < self.min_overlap <= 1:  # NaN fails too
            raise ValueError(f"--min-overlap must be in (0, 1] (got {self.min_overlap})")
        at_least("min_item_ngrams", self.min_item_ngrams, 0)

    def fingerprint(self, eval_digest: str = "") -> str:
        d = asdict(self)
        d["eval_set"] = eval_digest
        d["tokens"] = TOKENS_VERSION
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


@dataclass
class EvalItem:
    id: str
    text: str


@dataclass
class Flag:
    trajectory_id: str
    eval_id: str
    field: str  # "task" or "action"
    turn_index: int | None  # the first turn whose action matched, for field "action"
    matched: int
    total: int

    @property
    def overlap(self) -> float:
        return self.matched / self.total if self.total else 0.0


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    toks = _TOKEN.findall(text.lower())
    if not toks:
        return set()
    if len(toks) < n:
        return {tuple(toks)}
    return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def short_item(words: int, n: int) -> bool:
    """An item of fewer than n words, but enough (half of n or more) to be found inside a longer text."""
    return 2 * words >= n and words < n


def _records(path: Path) -> Iterator[tuple[str, dict]]:
    files = sorted(p for p in path.rglob("*") if p.suffix in (".json", ".jsonl")) if path.is_dir() else [path]
    for f in files:
        data = f.read_bytes()
        try:
            doc = orjson.loads(data)
            # a list of items, a dict holding them (or one item), or one item's text (a one-line JSONL of strings)
            items = (doc if isinstance(doc, list) else doc.get("items", doc.get("data", [doc])) if isinstance(doc, dict)
                     else [doc] if isinstance(doc, str) else [])
            for i, rec in enumerate(items):
                yield f"{f.name}:{i}", rec
        except orjson.JSONDecodeError:
            for i, line in enumerate(data.splitlines(), 1):
                if line.strip():
                    try:
                        yield f"{f.name}:line:{i}", orjson.loads(line)
                    except orjson.JSONDecodeError as e:
                        raise ValueError(f"{f}: line {i}: not JSON ({e})") from e


@dataclass
class _Session:
    """The AgentWorldBench rows of one session, merged: each row holds the turns before its own."""

    id: str
    task: str | None = None
    turns: dict[int, str] = field(default_factory=dict)  # turn number → action


def is_agentworldbench_row(rec: dict) -> bool:
    """An AgentWorldBench row: the turn prompts in a `prompt` list, the evaluated turn in `turn_idx`."""
    return isinstance(rec.get("prompt"), list) and "turn_idx" in rec


def _agentworldbench_turns(rec: dict) -> tuple[str | None, dict[int, str]]:
    """(task instruction, turn number → action) of one AgentWorldBench row. Prompts are strings in the
    published layout; rows stored as chat messages hold them in the `user` messages."""
    task: str | None = None
    turns: dict[int, str] = {}
    prompts = [p.get("content") if isinstance(p, dict) and p.get("role") == "user" else p for p in rec["prompt"]]
    for i, prompt in enumerate(p for p in prompts if isinstance(p, str)):
        sec = split_prompt(prompt)
        if task is None and sec.get("task_instruction"):
            task = sec["task_instruction"]
        action = sec.get("action", sec.get("preamble"))
        if action:
            turns[sec.get("turn", i + 1)] = unfence(action)[0]
    return task, turns


def load_eval_set(path: Path | str, config: DecontamConfig = DecontamConfig()) -> tuple[list[EvalItem], str]:
    """Items (id, text) of an evaluation set and a digest of its content (for the fingerprint)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"evaluation set {path} does not exist")
    items: list[EvalItem] = []
    sessions: dict[tuple[str, str, str], _Session] = {}  # AgentWorldBench rows by (task, id, system prompt)
    for where, rec in _records(path):
        if isinstance(rec, str):
            items.append(EvalItem(where, rec))
            continue
        if not isinstance(rec, dict):
            continue
        if is_agentworldbench_row(rec):
            ident = str(rec["id"]) if rec.get("id") is not None else where
            s = sessions.setdefault((str(rec.get("task")), ident, str(rec.get("system_str"))), _Session(ident))
            task, turns = _agentworldbench_turns(rec)
            s.task = s.task or task
            for t, action in turns.items():
                s.turns.setdefault(t, action)
            continue
        text = " ".join(str(rec[k]) for k in config.text_keys if isinstance(rec.get(k), str | int | float))
        if not text.strip():
            continue
        ident = next((str(rec[k]) for k in config.id_keys if rec.get(k) is not None), where)
        items.append(EvalItem(ident, text))
    for s in sessions.values():
        text = "\n".join([s.task or ""] + [s.turns[t] for t in sorted(s.turns)])
        if text.strip():
            items.append(EvalItem(s.id, text))
    if not items:  # asked to decontaminate against nothing: a wrong file, or records of another shape
        raise ValueError(f"evaluation set {path}: no items in it (an item is a string, a record with text under one of "
                         f"{', '.join(config.text_keys)}, or AgentWorldBench rows)")
    h = hashlib.sha256()
    for it in items:
        h.update(it.id.encode() + b"\0" + it.text.encode() + b"\0")
    return items, h.hexdigest()[:16]


@dataclass
class EvalIndex:
    """n-gram → items that contain it, and each item's n-gram count."""

    n: int
    postings: dict[tuple[str, ...], list[int]] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    short: set[int] = field(default_factory=set)  # lengths (< n words) of the items found inside longer texts
    too_short: int = 0  # items left out: fewer n-grams than `min_item_ngrams` (no word at all, by default)

    @classmethod
    def build(cls, items: list[EvalItem], config: DecontamConfig) -> EvalIndex:
        idx = cls(config.n)
        for it in items:
            grams = ngrams(it.text, config.n)
            if len(grams) < config.min_item_ngrams:
                idx.too_short += 1
                continue
            k = len(idx.ids)
            idx.ids.append(it.id)
            idx.sizes.append(len(grams))
            for g in grams:
                idx.postings.setdefault(g, []).append(k)
                if short_item(len(g), config.n):
                    idx.short.add(len(g))
        return idx

    def matches(self, text: str) -> dict[int, int]:
        """Item number → how many of its n-grams occur in `text` (for a short item: its words, in order)."""
        grams = ngrams(text, self.n)
        if self.short:
            toks = _TOKEN.findall(text.lower())
            for k in self.short:
                grams.update(tuple(toks[i : i + k]) for i in range(len(toks) - k + 1))
        hits: dict[int, int] = {}
        for g in grams:
            for k in self.postings.get(g, ()):
                hits[k] = hits.get(k, 0) + 1
        return hits


def scan_trajectory(index: EvalIndex, trajectory_id: str, task: str | None,
                    actions: list[tuple[int, str]], config: DecontamConfig) -> list[Flag]:
    """Flags for one trajectory: at most one per evaluation item, the better of the task alone and the
    task with the actions (an item may hold both, as an AgentWorldBench row does)."""
    out: dict[int, Flag] = {}
    if task:
        for k, m in index.matches(task).items():
            if m / index.sizes[k] >= config.min_overlap:
                out[k] = Flag(trajectory_id, index.ids[k], "task", None, m, index.sizes[k])
    if config.include_actions and actions:
        text = "\n".join([task or ""] + [a for _, a in actions])
        for k, m in index.matches(text).items():
            if m / index.sizes[k] < config.min_overlap or (k in out and out[k].matched >= m):
                continue
            first = next((i for i, a in actions if index.matches(a).get(k)), actions[0][0])
            out[k] = Flag(trajectory_id, index.ids[k], "action", first, m, index.sizes[k])
    return [out[k] for k in sorted(out)]
