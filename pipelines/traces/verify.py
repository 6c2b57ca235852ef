"""Verifiers: how close a predicted observation is to the real one, per domain, in [0, 1].

Both texts are compared in canonical form (`pipelines.canonical`: timestamps, PIDs, temp paths,
durations, ANSI codes normalized), so a prediction is not punished for a different clock.

| verifier  | domains            | score |
|-----------|--------------------|-------|
| terminal  | terminal, swe, os  | 0.5·line_f1 + 0.5·edit_sim; when both the turn and the prediction state an exit code: 0.4·line_f1 + 0.4·edit_sim + 0.2·exit_match |
| mcp       | mcp                | real observation is JSON: value_f1·(1 + structure_f1)/2 (0 when the prediction is not JSON, or no value is right); not JSON: as terminal. When the turn's `is_error` is known and the prediction states `isError`: 0.8·that + 0.2·is_error_match |
| tree      | web, android       | node_f1 over the tree's nodes (one per line, element ids like `[123]` removed) |
| search    | search             | word_f1: multiset F1 of lowercased words |

Definitions (exact, so the tests can state expected values):

- `line_f1`: lines with trailing whitespace removed, empty lines dropped, compared as multisets;
  precision = matched / predicted lines, recall = matched / real lines. Both empty: 1; one empty: 0.
- `edit_sim`: 1 − Levenshtein(pred, real) / max(len) over characters (both empty: 1), computed
  exactly with Hyyrö's bit-parallel algorithm on at most `max_compare_chars` of each.
- `exit_match`: 1 if the stated exit codes are equal. The real one is the turn's `exit_code`
  column, else a code stated in the real observation; a prediction states one with a line such as
  `exit code: 1`, `[exit 1]`, `Exit status 1`, `returncode=1` or SWE-agent's `PROCESS-DONE:1:`.
- `structure_f1`: F1 of the sets of (JSON path, JSON type) pairs, containers included; `value_f1`:
  F1 of the sets of (path, canonical leaf value), leaving out `type` keys (a content part's kind) and
  `isError` (judged as `is_error_match`). List items are addressed by position.
- `node_f1`, `word_f1`: multiset F1 as for lines.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import orjson

from pipelines.canonical import canonical

DOMAIN_VERIFIERS: dict[str, str] = {
    "terminal": "terminal", "swe": "terminal", "os": "terminal",
    "mcp": "mcp", "web": "tree", "android": "tree", "search": "search",
}
MAX_COMPARE_CHARS = 20_000


@dataclass
class Verdict:
    verifier: str
    score: float
    components: dict[str, float] = field(default_factory=dict)


def multiset_f1(pred: list[str], real: list[str]) -> float:
    if not pred and not real:
        return 1.0
    if not pred or not real:
        return 0.0
    matched = sum((Counter(pred) & Counter(real)).values())
    if matched == 0:
        return 0.0
    p, r = matched / len(pred), matched / len(real)
    return 2 * p * r / (p + r)


def set_f1(pred: set, real: set) -> float:
    if not pred and not real:
        return 1.0
    if not pred or not real:
        return 0.0
    m = len(pred & real)
    if m == 0:
        return 0.0
    p, r = m / len(pred), m / len(real)
    return 2 * p * r / (p + r)


def levenshtein(a: str, b: str) -> int:
    """Exact edit distance (insert, delete, substitute) by Hyyrö's bit-vector recurrence:
    O(len(a) · len(b) / word) with Python's big integers, no quadratic table."""
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[str, int] = {}
    for i, ch in enumerate(b):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    pv, mv, score = mask, 0, m
    for ch in a:
        eq = peq.get(ch, 0)
        xv = eq | mv
        xh = ((((eq & pv) + pv) & mask) ^ pv) | eq
        ph = mv | (~(xh | pv) & mask)
        mh = pv & xh
        if ph & high:
            score += 1
        elif mh & high:
            score -= 1
        ph = ((ph << 1) | 1) & mask
        mh = (mh << 1) & mask
        pv = mh | (~(xv | ph) & mask)
        mv = ph & xv
    return score


def edit_similarity(pred: str, real: str, max_chars: int = MAX_COMPARE_CHARS) -> float:
    a, b = pred[:max_chars], real[:max_chars]
    if not a and not b:
        return 1.0
    return 1.0 - levenshtein(a, b) / max(len(a), len(b))


def lines_of(text: str) -> list[str]:
    return [ln.rstrip() for ln in text.split("\n") if ln.strip()]


def line_f1(pred: str, real: str) -> float:
    return multiset_f1(lines_of(pred), lines_of(real))


_EXIT = [
    re.compile(r"(?im)^\s*\[?\s*(?:exit(?:ed)?(?:\s+with)?(?:\s+(?:code|status))?|exit_code|return\s*code|returncode"
               r"|status\s+code)\s*[:=]?\s*(-?\d{1,3})\s*\]?\s*$"),
    re.compile(r"PROCESS-DONE:(-?\d{1,3}):PROCESS-DONE"),
]


def stated_exit_code(text: str) -> int | None:
    """The exit code a text states (the last statement wins), or None."""
    found: list[tuple[int, int]] = []
    for rx in _EXIT:
        found += [(m.start(), int(m.group(1))) for m in rx.finditer(text)]
    return max(found)[1] if found else None


def _round(x: float) -> float:
    return round(x, 6)


def verify_terminal(pred: str, real: str, exit_code: int | None = None, max_chars: int = MAX_COMPARE_CHARS) -> Verdict:
    p, r = canonical(pred), canonical(real)
    f1, es = line_f1(p, r), edit_similarity(p, r, max_chars)
    comps = {"line_f1": _round(f1), "edit_sim": _round(es)}
    real_exit = exit_code if exit_code is not None else stated_exit_code(r)
    pred_exit = stated_exit_code(p)
    if real_exit is not None and pred_exit is not None:
        em = 1.0 if real_exit == pred_exit else 0.0
        comps["exit_match"] = em
        return Verdict("terminal", _round(0.4 * f1 + 0.4 * es + 0.2 * em), comps)
    return Verdict("terminal", _round(0.5 * f1 + 0.5 * es), comps)


def _json(text: str) -> Any:
    s = text.strip()
    if not s or s[0] not in "[{":
        return None
    try:
        return orjson.loads(s)
    except orjson.JSONDecodeError:
        return None


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int | float):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def json_paths(v: Any, path: str = "$") -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(path, type) pairs of every node and (path, canonical value) pairs of every leaf. Walked with a
    stack: a document nested deeper than Python's recursion limit (an observation of `[[[...]]]`)
    raised RecursionError, which ended the whole run after its generation."""
    types: set[tuple[str, str]] = set()
    values: set[tuple[str, str]] = set()
    stack = [(v, path)]
    while stack:
        node, p = stack.pop()
        types.add((p, _json_type(node)))
        if isinstance(node, dict):
            stack += [(x, f"{p}.{k}") for k, x in node.items()]
        elif isinstance(node, list):
            stack += [(x, f"{p}[{i}]") for i, x in enumerate(node)]
        else:
            values.add((p, canonical(node) if isinstance(node, str) else orjson.dumps(node).decode()))
    return types, values


_NOT_PREDICTED = re.compile(r"\.(type|isError|is_error)$")  # a content part's kind; the error flag, judged on its own


def _predicted_values(values: set[tuple[str, str]]) -> set[tuple[str, str]]:
    """The leaves a prediction is judged on: not the `type` discriminators of content parts (`"text"` in
    every MCP result, right whatever the text) nor the error flag (`is_error_match`)."""
    return {x for x in values if not _NOT_PREDICTED.search(x[0])}


def _stated_is_error(obj: Any) -> bool | None:
    if isinstance(obj, dict):
        for k in ("isError", "is_error"):
            if isinstance(obj.get(k), bool):
                return obj[k]
    return None


def verify_mcp(pred: str, real: str, is_error: bool | None = None, exit_code: int | None = None,
               max_chars: int = MAX_COMPARE_CHARS) -> Verdict:
    rj = _json(real)
    if rj is None:
        base = verify_terminal(pred, real, exit_code, max_chars)
        score, comps, pj = base.score, dict(base.components), _json(pred)
    else:
        pj = _json(pred)
        if pj is None:
            comps = {"structure_f1": 0.0, "value_f1": 0.0, "pred_json": 0.0}
            score = 0.0
        else:
            pt, pv = json_paths(pj)
            rt, rv = json_paths(rj)
            s, v = set_f1(pt, rt), set_f1(_predicted_values(pv), _predicted_values(rv))
            comps = {"structure_f1": _round(s), "value_f1": _round(v), "pred_json": 1.0}
            # the values are what is predicted: the right keys with every value wrong scored 0.5, the
            # default threshold, and made-up values became SFT targets
            score = v * (1 + s) / 2
    stated = _stated_is_error(pj)
    if is_error is not None and stated is not None:
        em = 1.0 if stated == is_error else 0.0
        comps["is_error_match"] = em
        score = 0.8 * score + 0.2 * em
    return Verdict("mcp", _round(score), comps)


_NODE_ID = re.compile(r"^\[[^\]\n]{1,40}\]\s*")


def tree_nodes(text: str) -> list[str]:
    """One node per non-empty line, indentation and a leading element id (`[123]`, `[a405]`) removed."""
    out = []
    for ln in text.split("\n"):
        s = _NODE_ID.sub("", ln.strip())
        if s:
            out.append(s)
    return out


def verify_tree(pred: str, real: str) -> Verdict:
    f1 = multiset_f1(tree_nodes(canonical(pred)), tree_nodes(canonical(real)))
    return Verdict("tree", _round(f1), {"node_f1": _round(f1)})


_WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.casefold())


def verify_search(pred: str, real: str) -> Verdict:
    f1 = multiset_f1(words(canonical(pred)), words(canonical(real)))
    return Verdict("search", _round(f1), {"word_f1": _round(f1)})


def verify(domain: str, pred: str, real: str, exit_code: int | None = None, is_error: bool | None = None,
           verifiers: dict[str, str] | None = None, max_chars: int = MAX_COMPARE_CHARS) -> Verdict:
    """Score `pred` against `real` with the verifier of `domain` (see the table above)."""
    kind = (verifiers or DOMAIN_VERIFIERS).get(domain, "terminal")
    if kind == "terminal":
        return verify_terminal(pred, real, exit_code, max_chars)
    if kind == "mcp":
        return verify_mcp(pred, real, is_error, exit_code, max_chars)
    if kind == "tree":
        return verify_tree(pred, real)
    if kind == "search":
        return verify_search(pred, real)
    raise ValueError(f"unknown verifier {kind!r} for domain {domain!r}; use terminal, mcp, tree or search")
