"""The candidate form and its strict parser.

A candidate is accepted only when its whole text is

    <think> reasoning </think>  <predicted_observation> prediction </predicted_observation>

with nothing but whitespace around and between the two blocks, each tag exactly once, and a
non-empty reasoning. Anything else is rejected with one reason code (the first rule it breaks),
so the rejection counts say what the generator gets wrong. The prediction may be empty (an empty
observation is a real outcome: `mkdir` prints nothing); only the newlines that frame it inside the
tags are removed, so leading spaces of terminal output survive.

The SFT assistant message is re-rendered in one published form (`assistant_content`), whatever
whitespace the generator used.
"""

from __future__ import annotations

from dataclasses import dataclass

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
PRED_OPEN, PRED_CLOSE = "<predicted_observation>", "</predicted_observation>"

REJECT_REASONS: dict[str, str] = {
    "empty": "the generation is empty",
    "text_before_think": "text before <think>",
    "missing_think": "no <think> block",
    "repeated_think": "<think> or </think> more than once",
    "unclosed_think": "<think> without </think>",
    "empty_think": "the reasoning is empty",
    "missing_prediction": "no <predicted_observation> after </think>",
    "text_between_blocks": "text between </think> and <predicted_observation>",
    "repeated_prediction": "<predicted_observation> or its closing tag more than once",
    "unclosed_prediction": "<predicted_observation> without its closing tag",
    "truncated": "stopped at max_tokens before the closing tag",
    "text_after_prediction": "text after </predicted_observation>",
    "generation_error": "the endpoint failed for this candidate (after retries)",
}


@dataclass(frozen=True)
class Parsed:
    ok: bool
    reason: str | None = None  # a key of REJECT_REASONS when not ok
    reasoning: str | None = None
    prediction: str | None = None


def _frame(s: str) -> str:
    """Inner text without the newlines that frame it (`<tag>\\n...\\n</tag>`; `\\r\\n` on both sides of a
    CRLF generation). A `\\r` before the closing `\\n` of a `\\n`-framed text is the text's own: a prediction
    `foo\\r` must read back from its published form (`assistant_content`) as it is."""
    crlf = s.startswith("\r\n")
    if crlf:
        s = s[2:]
    elif s.startswith("\n"):
        s = s[1:]
    if crlf and s.endswith("\r\n"):
        s = s[:-2]
    elif s.endswith("\n"):
        s = s[:-1]
    return s


def parse_candidate(text: str | None, finish_reason: str | None = None) -> Parsed:
    """Strictly parse one generation (see the module docstring)."""
    if text is None or not text.strip():
        return Parsed(False, "empty")
    for tag in (THINK_OPEN, THINK_CLOSE):
        if text.count(tag) > 1:
            return Parsed(False, "repeated_think")
    for tag in (PRED_OPEN, PRED_CLOSE):
        if text.count(tag) > 1:
            return Parsed(False, "repeated_prediction")
    start = text.find(THINK_OPEN)
    if start < 0:
        return Parsed(False, "missing_think")
    if text[:start].strip():
        return Parsed(False, "text_before_think")
    end = text.find(THINK_CLOSE, start)
    if end < 0:
        return Parsed(False, "truncated" if finish_reason == "length" else "unclosed_think")
    reasoning = text[start + len(THINK_OPEN) : end].strip()
    rest = text[end + len(THINK_CLOSE) :]
    p = rest.find(PRED_OPEN)
    if p < 0:
        if PRED_CLOSE in rest:
            return Parsed(False, "missing_prediction")
        # cut at max_tokens before or inside the opening tag: truncated, not a missing block
        cut = finish_reason == "length" and PRED_OPEN.startswith(rest.strip())
        return Parsed(False, "truncated" if cut else "missing_prediction")
    if rest[:p].strip():
        return Parsed(False, "text_between_blocks")
    q = rest.find(PRED_CLOSE, p)
    if q < 0:
        return Parsed(False, "truncated" if finish_reason == "length" else "unclosed_prediction")
    if rest[q + len(PRED_CLOSE) :].strip():
        return Parsed(False, "text_after_prediction")
    if not reasoning:
        return Parsed(False, "empty_think")
    return Parsed(True, None, reasoning, _frame(rest[p + len(PRED_OPEN) : q]))


def assistant_content(reasoning: str, prediction: str) -> str:
    """The published form of the SFT assistant message."""
    return f"{THINK_OPEN}\n{reasoning}\n{THINK_CLOSE}\n\n{PRED_OPEN}\n{prediction}\n{PRED_CLOSE}"

