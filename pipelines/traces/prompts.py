"""Prompt-template variants for the generator, and the judge's rubric.

Several phrasings, chosen per query by a seeded hash, so the SFT set is not tied to one wording
of the teacher prompt (the SFT rows themselves are always in the world-model form of
`pipelines.render`, whatever template produced them):

- `chat`: the world-model chat itself (system = role, task, action space, initial state; actions
  as user messages, observations as assistant messages) with the answer format added to the
  system prompt;
- `transcript`: one user message in AgentWorldBench form (`### Turn N`, `**Action:**`,
  `**Environment Observation:**`), ending with the instruction to analyze and predict;
- `compact`: one short user message with the history as `> action` / output blocks.

Each may carry one worked example (a user/assistant pair in the answer format) after the system
prompt; small generators need it to follow the format at all.

Teacher prompts are clipped (`clip`): long observations keep their head and tail, the oldest
history turns go first. The judge sees the action, the reference observation and the extracted
prediction, never the generator's reasoning.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from pipelines.render import Group
from schemas.options import at_least

FORMAT = (
    "Reply in exactly this form, with nothing before or after it:\n"
    "<think>\nyour reasoning about the environment's state and what the action does to it\n</think>\n"
    "<predicted_observation>\nexactly what the environment returns, verbatim\n</predicted_observation>"
)
EXAMPLE_ACTION = "echo hello"
EXAMPLE_ANSWER = ("<think>\necho prints its argument followed by a newline, and exits with status 0.\n</think>\n"
                  "<predicted_observation>\nhello\n</predicted_observation>")


@dataclass(frozen=True)
class PromptLimits:
    """Characters of the teacher prompt; 0: no limit for the system prompt and each observation,
    no history at all for `max_history_chars`."""

    max_system_chars: int = 6000
    max_observation_chars: int = 3000  # per history observation in the teacher prompt
    max_history_chars: int = 12000  # all history in the teacher prompt
    few_shot: bool = True

    def __post_init__(self) -> None:
        at_least("--max-system-chars", self.max_system_chars, 0)
        at_least("--max-observation-chars", self.max_observation_chars, 0)
        at_least("--max-history-chars", self.max_history_chars, 0)


@dataclass
class PromptQuery:
    """What a template needs: the world-model system prompt, the history window, the target's user
    message (context + action) and the domain."""

    domain: str
    system: str
    history: list[Group]
    user: str


def clip(text: str, limit: int) -> str:
    """Head and tail of a long text with the omission stated (a teacher should know it is cut);
    the result, note included, is at most `limit` characters unless the note alone is longer."""
    if limit <= 0 or len(text) <= limit:
        return text
    keep = max(0, limit - len(f"\n[... {len(text)} characters omitted ...]\n"))
    head = keep * 2 // 3
    tail = keep - head
    return f"{text[:head]}\n[... {len(text) - keep} characters omitted ...]\n{text[len(text) - tail:]}"


def _window(q: PromptQuery, lim: PromptLimits) -> list[Group]:
    groups = [Group(g.turn_index, clip(g.user, lim.max_observation_chars), clip(g.observation, lim.max_observation_chars))
              for g in q.history]
    while groups and sum(len(g.user) + len(g.observation) for g in groups) > lim.max_history_chars:
        groups.pop(0)
    return groups


def _example(lim: PromptLimits, user: str) -> list[dict[str, str]]:
    if not lim.few_shot:
        return []
    return [{"role": "user", "content": user}, {"role": "assistant", "content": EXAMPLE_ANSWER}]


def chat_template(q: PromptQuery, lim: PromptLimits) -> list[dict[str, str]]:
    system = clip(q.system, lim.max_system_chars) + "\n\n" + FORMAT
    msgs = [{"role": "system", "content": system}, *_example(lim, EXAMPLE_ACTION)]
    for g in _window(q, lim):
        msgs += [{"role": "user", "content": g.user}, {"role": "assistant", "content": g.observation}]
    msgs.append({"role": "user", "content": q.user})
    return msgs


_BENCH_SUFFIX = ("Please analyze the input above and predict the environment observation of the last action. "
                 "Think first, then give the observation.")


def _turn_block(n: int, action: str, observation: str | None) -> str:
    s = f"### Turn {n}\n**Action:**\n```\n{action}\n```"
    return s + (f"\n**Environment Observation:**\n{observation}" if observation is not None else "")


def transcript_template(q: PromptQuery, lim: PromptLimits) -> list[dict[str, str]]:
    system = (f"You are a world model for a {q.domain} environment: you predict what the environment returns "
              f"to an agent's action.\n\n{FORMAT}")
    window = _window(q, lim)
    parts = [f"**Environment:**\n{clip(q.system, lim.max_system_chars)}"]
    parts += [_turn_block(i + 1, g.user, g.observation) for i, g in enumerate(window)]
    parts.append(_turn_block(len(window) + 1, q.user, None))
    parts.append(_BENCH_SUFFIX)
    example = _example(lim, _turn_block(1, EXAMPLE_ACTION, None) + "\n\n" + _BENCH_SUFFIX)
    return [{"role": "system", "content": system}, *example, {"role": "user", "content": "\n\n".join(parts)}]


def compact_template(q: PromptQuery, lim: PromptLimits) -> list[dict[str, str]]:
    system = f"Simulate the {q.domain} environment an agent is acting in.\n{FORMAT}"
    lines = [clip(q.system, lim.max_system_chars), "", "History:"]
    window = _window(q, lim)
    if not window:
        lines.append("(none)")
    for g in window:
        lines += [f"> {g.user}", g.observation]
    lines += ["", "Next action:", f"> {q.user}", "", "What does the environment return?"]
    example = _example(lim, f"History:\n(none)\n\nNext action:\n> {EXAMPLE_ACTION}\n\nWhat does the environment return?")
    return [{"role": "system", "content": system}, *example, {"role": "user", "content": "\n".join(lines)}]


TEMPLATES: dict[str, Callable[[PromptQuery, PromptLimits], list[dict[str, str]]]] = {
    "chat": chat_template,
    "transcript": transcript_template,
    "compact": compact_template,
}
TEMPLATES_VERSION = "1"


def _u64(*parts: object) -> int:
    return int.from_bytes(hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest(), "big")


def choose_template(names: tuple[str, ...], seed: int, query_id: str) -> str:
    """One template per query, by a seeded hash (stable under reordering of the queries)."""
    unknown = [n for n in names if n not in TEMPLATES]
    if unknown or not names:
        raise ValueError(f"unknown prompt templates {unknown or names}; known: {sorted(TEMPLATES)}")
    return names[_u64(seed, "template", query_id) % len(names)]


def candidate_seed(seed: int, query_id: str, k: int) -> int:
    """The sampling seed of candidate k of a query (31 bits: every server takes it)."""
    return _u64(seed, "candidate", query_id, k) & 0x7FFF_FFFF


# ------------------------------------------------------------------------------------------------
# the judge

RUBRIC_VERSION = "wl-judge-1"
CRITERIA = ("format", "factuality", "consistency", "realism", "quality")
RUBRIC = f"""You grade a predicted environment observation against the real one (rubric {RUBRIC_VERSION}).
Score each criterion from 1 (bad) to 5 (excellent):
- format: the prediction has the shape of this environment's output (layout, fields, encoding);
- factuality: its content agrees with the real observation (values, names, results, errors);
- consistency: it follows from the history and the action (no contradiction of earlier state);
- realism: a real environment could have printed it (no commentary, no placeholders);
- quality: overall usefulness as a training target for a world model.
Reply with one JSON object and nothing else, e.g.
{{"format": 4, "factuality": 3, "consistency": 5, "realism": 4, "quality": 3}}"""


def judge_messages(q: PromptQuery, real: str, prediction: str, lim: PromptLimits, history_turns: int = 2) -> list[dict[str, str]]:
    """The judge's prompt: recent history, action, reference and the extracted prediction only."""
    # half the teacher's room (0, no limit, stays none; 1 must not become 0, no limit)
    half = -(-lim.max_system_chars // 2)
    parts = [f"## Environment ({q.domain})\n{clip(q.system, half)}"]
    for g in q.history[-history_turns:] if history_turns else []:
        parts.append(f"## Earlier action\n{clip(g.user, 1000)}\n## Its observation\n{clip(g.observation, 1000)}")
    parts += [f"## Action\n{clip(q.user, 2000)}",
              f"## Real observation (reference)\n{clip(real, lim.max_observation_chars)}",
              f"## Predicted observation\n{clip(prediction, lim.max_observation_chars)}"]
    return [{"role": "system", "content": RUBRIC}, {"role": "user", "content": "\n\n".join(parts)}]


_OBJ = re.compile(r"\{[^{}]*\}", re.S)


@dataclass(frozen=True)
class Judgement:
    ok: bool
    score: float | None = None  # mean criterion score mapped from [1, 5] to [0, 1]
    criteria: dict[str, int] | None = None
    reason: str | None = None  # why the reply was not a valid judgement


def parse_judgement(text: str | None) -> Judgement:
    """The first JSON object in the reply with every criterion an integer from 1 to 5."""
    if not text:
        return Judgement(False, reason="empty")
    for m in _OBJ.finditer(text):
        try:
            obj = orjson.loads(m.group(0))
        except orjson.JSONDecodeError:
            continue
        if not isinstance(obj, dict):
            continue
        missing = [c for c in CRITERIA if c not in obj]
        if missing:
            return Judgement(False, reason=f"missing criteria {missing}")
        vals: dict[str, int] = {}
        for c in CRITERIA:
            v = obj[c]
            if isinstance(v, bool) or not isinstance(v, int | float) or float(v) != int(v) or not 1 <= v <= 5:
                return Judgement(False, reason=f"criterion {c!r} is {v!r}, not an integer from 1 to 5")
            vals[c] = int(v)
        mean = sum(vals.values()) / len(vals)
        return Judgement(True, round((mean - 1) / 4, 6), vals)
    return Judgement(False, reason="no JSON object")
