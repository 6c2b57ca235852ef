"""FireAct ReAct search trajectories (https://github.com/anchen1011/FireAct), in every form it publishes.

FireAct agents answer questions (HotpotQA, StrategyQA, MMLU, Bamboogle) with a Google-search tool in
ReAct text: `Thought: ...` / `Action: search[query]` / `Observation: ...`, ending with `finish[answer]`,
which the harness answers with `Observation: Episode finished, reward = True`. The same text appears as

- OpenAI fine-tune lines `{"messages": [user question, assistant "Thought/Action", user "Observation: ..."]}`
  (`data/finetune/gpt_format/*.jsonl`, `FireActChatImporter`);
- eval dumps `{idx: {reward, em, f1, gt, pred, prompt, traj}}` where `traj` is such a chat list or, for
  completion models, one ReAct string (`trajs/*.json`, `FireActTrajsImporter`);
- alpaca lists `[{instruction, input, output}]` whose `output` is the ReAct string
  (`data/finetune/alpaca_format/*.json`, also `FireActTrajsImporter`).

All forms are reduced to one block sequence (agent text, observation, user text) and parsed by
`react_turns`, so the same episode gives the same turns whichever file it came from.

A turn is one `Action:` and the `Observation:` that follows it. `tool[arg]` gives `tool_name` and
`tool_args` (`{"input": arg}`, FireAct's `call_tools(tool_name, tool_input)`); search/lookup results are
`search_results`, the `finish` reply (`Episode finished, reward = ...`) is a `tool_result` whose reward
becomes the turn reward. Decisions for the irregular cases the released files contain:

- an agent message with several Thought/Action pairs (the model ran on past its first action): the
  harness executed only the first action, so that is the turn's action; the rest of the message is kept
  verbatim in the turn's `metadata.trailing_text`;
- an action with no recorded observation (a cut-off episode, or a `finish` whose reply was not
  written): a `message` turn that keeps the parsed action (`metadata.observation_missing`); without a
  reply there is nothing for a world model to predict, as in the other importers' unanswered calls;
- agent text with no `Action:` that the harness still answered: an `env` turn whose action is the raw
  text (`metadata.action_unparsed`); agent text with no action and no reply: a `message` turn
  (text in `thought`);
- an `Observation:` that follows no agent text: an `env` turn with no action
  (`metadata.action_missing`), so no environment output is lost;
- a user message that is neither the question nor an `Observation:`: a `user` turn (text in `action`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from collectors.base import ImportContext, Importer, any_record, as_text, expect_object, require
from schemas.records import RecordError, Trajectory, Turn, dumps

_LABEL = r"(Thought|Action|Observation)(?:[ \t]*\d+)?[ \t]*:"
_MARK = re.compile(r"^[ \t]*" + _LABEL, re.M)
_LABEL_REST = re.compile(r"(?:[ \t]*\d+)?[ \t]*:")  # after the word: `Action 2:`, `Thought:`
_BRACKET_ACTION = re.compile(r"^[ \t]*Action(?:[ \t]*\d+)?[ \t]*:[ \t]*[A-Za-z_][\w.-]*\[", re.M)
_THOUGHT_LINE = re.compile(r"^[ \t]*Thought(?:[ \t]*\d+)?[ \t]*:", re.M)
_OBS_PREFIX = re.compile(r"^\s*Observation(?:[ \t]*\d+)?[ \t]*:[ \t]?")
_THOUGHT_REST = re.compile(r"(?:[ \t]*\d+)?[ \t]*:[ \t]?")
_CALL = re.compile(r"^\s*([A-Za-z_][\w.-]*)\s*\[(.*)\](.*)$", re.S)
_REWARD = re.compile(r"reward\s*=\s*(True|False|-?\d+(?:\.\d+)?)", re.I)
_ALPACA = re.compile(r"### Instruction:\n(.*?)\n\n### (?:Input|Response):", re.S)
_SEARCH_TOOLS = {"search", "lookup"}


# One piece of a ReAct episode: (kind, text, locator), kind "agent" (agent text), "obs" (an observation)
# or "user" (other user text). A plain tuple: an episode has a handful of short blocks, and building a
# class instance for each was a tenth of converting a FireAct record.
Block = tuple[str, str, str]


def _float_reward(value: Any) -> float | None:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        v = value.strip()
        if v.lower() in ("true", "false"):
            return 1.0 if v.lower() == "true" else 0.0
        try:
            return float(v)
        except ValueError:
            return None
    return None


def has_react(text: Any) -> bool:
    """True when text holds a FireAct-style `Action: tool[...]` line (what separates it from plain chat,
    and from ReAct variants whose actions are JSON, such as tau-bench's)."""
    return isinstance(text, str) and _BRACKET_ACTION.search(text) is not None


def blocks_from_messages(messages: list, field: str, where: str) -> tuple[str | None, list[str], list[Block]]:
    """(question, system texts, blocks) of a chat-form episode; the first user message is the question."""
    question: str | None = None
    system: list[str] = []
    blocks: list[Block] = []
    append = blocks.append
    for j, m in enumerate(messages):
        if not isinstance(m, dict):
            raise RecordError("malformed_record", f"{where} {field}[{j}]: expected a message object, got {type(m).__name__}")
        role = m.get("role")
        content = m.get("content")
        text = content if type(content) is str else (as_text(content) or "")
        if role == "assistant":
            append(("agent", text, f"{field}[{j}]"))
        elif role == "user":
            if text.startswith("Observation:"):  # the usual form, without the regex (same result: stripped)
                append(("obs", text[12:].strip(), f"{field}[{j}]"))
            elif (obs := _OBS_PREFIX.match(text)) is not None:
                append(("obs", text[obs.end():].strip(), f"{field}[{j}]"))
            elif question is None and not blocks:
                question = text
            else:
                append(("user", text, f"{field}[{j}]"))
        elif role == "system":
            system.append(text)
        else:
            raise RecordError("malformed_record", f"{where} {field}[{j}]: unexpected role {role!r}")
    return question, system, blocks


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def blocks_from_text(text: str, field: str) -> tuple[str, list[Block]]:
    """(preamble, blocks) of a ReAct string; everything before the first label is the preamble."""
    marks = list(_MARK.finditer(text))
    if not marks:
        return text, []
    preamble = text[: marks[0].start()]
    blocks: list[Block] = []
    agent_start: int | None = None

    def loc(a: int, b: int) -> str:
        return f"{field}:L{_line_of(text, a)}-L{_line_of(text, max(a, b - 1))}"

    for i, mk in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        if mk.group(1) == "Observation":
            if agent_start is not None:
                blocks.append(("agent", text[agent_start : mk.start()], loc(agent_start, mk.start())))
                agent_start = None
            blocks.append(("obs", text[mk.end() : end].strip(), loc(mk.start(), end)))
        elif agent_start is None:
            agent_start = mk.start()
    if agent_start is not None:
        blocks.append(("agent", text[agent_start:], loc(agent_start, len(text))))
    return preamble, blocks


def question_from_preamble(preamble: str) -> str:
    """The question of a string trajectory: the alpaca `### Instruction:` body, else the whole preamble."""
    m = _ALPACA.search(preamble)
    return (m.group(1) if m else preamble).strip()


def _strip_thought_label(text: str) -> str:
    """The text without a leading `Thought:` label (`\\s*Thought(?:[ \\t]*\\d+)?[ \\t]*:[ \\t]?`), stripped."""
    t = text.lstrip()
    if t.startswith("Thought:"):  # the label with no number or spaces (what the regex then strips too)
        return t[8:].strip()
    if t.startswith("Thought") and (m := _THOUGHT_REST.match(t, 7)) is not None:
        return t[m.end():].strip()
    return t.rstrip()


def _label_line(text: str, word: str) -> tuple[int, int] | None:
    """(start of the line, end of the label) of the first line that starts with `word` and a label
    colon (`^[ \\t]*Action(?:[ \\t]*\\d+)?[ \\t]*:` under MULTILINE), found with `str.find`: a
    MULTILINE regex is tried at every character of the text."""
    i = text.find(word)
    while i >= 0:
        j = i
        while j > 0 and text[j - 1] in " \t":
            j -= 1
        if j == 0 or text[j - 1] == "\n":
            k = i + len(word)
            if text.startswith(":", k):  # a bare colon, the usual label (what `_LABEL_REST` matches there)
                return j, k + 1
            if (m := _LABEL_REST.match(text, k)) is not None:
                return j, m.end()
        i = text.find(word, i + 1)
    return None


def _parse_agent(text: str) -> tuple[str | None, str | None, str | None]:
    """(thought, action, trailing text) of one agent message; the first `Action:` is the one executed."""
    found = _label_line(text, "Action")
    if found is None:
        thought = _strip_thought_label(text) if _THOUGHT_LINE.search(text) else text.strip()
        return thought or None, None, None
    line_start, label_end = found
    thought = _strip_thought_label(text[:line_start]) or None
    nl = text.find("\n", label_end)
    end = len(text) if nl < 0 else nl
    action = text[label_end:end]
    # An argument that spans lines: extend to the closing bracket if the first line leaves it open.
    if "[" in action and "]" not in action[action.index("[") :]:
        close = text.find("]", end)
        nxt = _MARK.search(text, end)
        if close >= 0 and (nxt is None or close < nxt.start()):
            end = close + 1
            action = text[label_end:end]
    trailing = text[end:].strip()
    return thought, action.strip(), trailing or None


def _parse_call(action: str) -> tuple[str | None, str | None, str | None]:
    """`tool[arg]` -> (tool, arg, text after the closing bracket)."""
    b = action.find("[")
    if b > 0 and action.endswith("]") and (name := action[:b]).isascii() and name.isidentifier():
        return name, action[b + 1 : -1], None  # what `_CALL` gives: an ASCII name, the last `]` at the end
    m = _CALL.match(action)
    if not m:
        return None, None, None
    return m.group(1), m.group(2), (m.group(3).strip() or None)


def react_turns(blocks: list[Block]) -> list[Turn]:
    """Turns of a ReAct episode: each agent block with the observation block that answers it."""
    turns: list[Turn] = []
    n = len(blocks)
    i = 0
    while i < n:
        kind, text, loc = blocks[i]
        i += 1
        if kind == "agent":
            if i < n and (obs := blocks[i])[0] == "obs":
                turns.append(_agent_turn(text, f"{loc}+{obs[2]}", obs[1]))
                i += 1
            else:
                turns.append(_agent_turn(text, loc, None))
        elif kind == "user":
            turns.append(Turn(kind="user", action=text, observation_kind="none", locator=loc))
        else:  # environment output that follows no agent text
            turns.append(Turn(kind="env", observation=text, observation_kind="tool_result", locator=loc,
                              metadata=_ACTION_MISSING))
    return turns


_ACTION_MISSING = dumps({"action_missing": True})


def _agent_turn(text: str, locator: str, observation: str | None) -> Turn:
    """The turn of agent text `text` and the observation that answered it (None: no reply recorded)."""
    thought, action, trailing = _parse_agent(text)
    meta: dict[str, Any] = {}
    if trailing:
        meta["trailing_text"] = trailing
    if action is None:
        if observation is None:
            return Turn(kind="message", thought=thought, observation_kind="none", locator=locator)
        meta["action_unparsed"] = True
        return Turn(
            kind="env",
            action=text.strip(),
            observation=observation,
            observation_kind="tool_result",
            locator=locator,
            metadata=dumps(meta),
        )
    tool, arg, suffix = _parse_call(action)
    if suffix:
        meta["action_suffix"] = suffix
    if tool is None:
        meta["action_unparsed"] = True
    reward = None
    is_error = None
    kind = "none"
    if observation is not None:
        low = (tool or "").lower()
        if observation.find("generated an exception", 0, 500) >= 0:
            kind, is_error = "error", True
        elif low in _SEARCH_TOOLS:
            kind = "search_results"
        else:
            kind = "tool_result"
        if low == "finish" or observation.startswith("Episode finished"):
            m = _REWARD.search(observation)
            reward = _float_reward(m.group(1)) if m else None
    else:
        meta["observation_missing"] = True
    return Turn(
        kind="env" if observation is not None else "message",
        action=action,
        observation=observation,
        observation_kind=kind,
        tool_name=tool,
        tool_args=_input_args(arg) if tool is not None else None,
        thought=thought,
        is_error=is_error,
        reward=reward,
        locator=locator,
        metadata=dumps(meta) if meta else None,
    )


def _input_args(arg: str) -> str:
    """`dumps({"input": arg})`, without building and sorting a one-key dict."""
    return '{"input":' + orjson.dumps(arg).decode() + "}"


def _final_reward(turns: list[Turn]) -> float | None:
    for t in reversed(turns):
        if t.reward is not None:
            return t.reward
    return None


def _outcome(reward: float | None) -> str | None:
    if reward is None:
        return None
    return "success" if reward > 0 else "failure"


def _system_meta(system: list[str]) -> str | None:
    return "\n\n".join(system) if system else None


class FireActChatImporter(Importer):
    """FireAct OpenAI fine-tune JSON lines: one ReAct episode per line, as chat messages."""

    name = "fireact-chat"
    container = "jsonl"

    def sniff(self, sample: Any) -> bool:
        if not isinstance(sample, dict) or not isinstance(sample.get("messages"), list):
            return False
        msgs = [m for m in sample["messages"] if isinstance(m, dict)]
        if not msgs or len(msgs) != len(sample["messages"]):
            return False
        if any(m.get("tool_calls") or m.get("function_call") or m.get("role") in ("tool", "function") for m in msgs):
            return False  # structured tool calls: generic chat, whatever ReAct text the assistant also wrote
        assistant = [m.get("content") for m in msgs if m.get("role") == "assistant"]
        if not any(has_react(c) for c in assistant):
            return False
        # Generic chat that happens to mention "Action:" does not also carry ReAct thoughts or observations.
        thoughts = any(isinstance(c, str) and _THOUGHT_LINE.search(c) for c in assistant)
        observations = any(
            m.get("role") == "user" and isinstance(m.get("content"), str) and _OBS_PREFIX.match(m["content"])
            for m in msgs
        )
        return thoughts or observations

    def convert(self, record: Any, locator: str, ctx: ImportContext) -> Trajectory:
        messages = require(record, "messages", locator)
        if not isinstance(messages, list):
            raise RecordError("malformed_record", f"{locator}: 'messages' must be a list, got {type(messages).__name__}")
        question, system, blocks = blocks_from_messages(messages, "messages", locator)
        turns = react_turns(blocks)
        reward = _final_reward(turns)
        extras = {k: v for k, v in record.items() if k != "messages"}
        meta = {"system": _system_meta(system), **extras}
        meta = {k: v for k, v in meta.items() if v is not None}
        return Trajectory(
            domain=ctx.domain("search"),
            source_format=self.name,
            native_id=str(record["id"]) if record.get("id") is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=question,
            agent="fireact",
            outcome=_outcome(reward),
            reward=reward,
            metadata=dumps(meta) if meta else None,
            locator=locator,
        )


def _is_scored_traj(v: Any) -> bool:
    return isinstance(v, dict) and isinstance(v.get("traj"), list | str) and any(
        k in v for k in ("reward", "em", "f1", "pred", "gt"))


def _is_alpaca_react(v: Any) -> bool:
    return isinstance(v, dict) and "instruction" in v and isinstance(v.get("output"), str) and has_react(v["output"])


class FireActTrajsImporter(Importer):
    """FireAct eval dumps `{idx: {reward, em, f1, gt, pred, prompt, traj}}` and alpaca fine-tune lists."""

    name = "fireact-trajs"
    container = "json"

    def sniff(self, doc: Any) -> bool:
        # one of the first few entries a scored `traj` (or an alpaca ReAct row): a broken entry is then
        # quarantined by `convert`, naming its key, instead of the whole file going unrecognised
        if isinstance(doc, dict):
            return any_record(doc.values(), _is_scored_traj)
        if isinstance(doc, list):
            return any_record(doc, _is_alpaca_react)
        return False

    def split(self, doc: Any, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        if isinstance(doc, dict):
            for k, v in doc.items():
                yield f"key:{k}", v
        else:
            for i, v in enumerate(doc):
                yield f"[{i}]", v

    def convert(self, record: Any, locator: str, ctx: ImportContext) -> Trajectory:
        expect_object(record, locator)
        if "traj" in record or not ("instruction" in record or "output" in record):
            return self._eval_record(record, locator, ctx)
        return self._alpaca_record(record, locator, ctx)

    def _eval_record(self, record: dict, locator: str, ctx: ImportContext) -> Trajectory:
        traj = require(record, "traj", locator)
        system: list[str] = []
        preamble = None
        if isinstance(traj, list):
            question, system, blocks = blocks_from_messages(traj, "traj", locator)
        elif isinstance(traj, str):
            preamble, blocks = blocks_from_text(traj, "traj")
            question = question_from_preamble(preamble)
        else:
            raise RecordError("malformed_record", f"{locator}: 'traj' must be a list or a string, got {type(traj).__name__}")
        turns = react_turns(blocks)
        reward = _float_reward(record.get("reward"))
        if reward is None:
            reward = _final_reward(turns)
        meta: dict[str, Any] = {
            "em": record.get("em"),
            "f1": record.get("f1"),
            "gt": record.get("gt"),
            "pred": record.get("pred"),
            "reward_raw": record.get("reward"),
            "system": _system_meta(system),
            "prompt_preamble": preamble if preamble and preamble.strip() != (question or "") else None,
            # The few-shot prompt the run used (a string or a message list), when there was one.
            "fewshot_prompt": record.get("prompt") or None,
        }
        skip = {"traj", "traj_by_line", "reward", "em", "f1", "gt", "pred", "prompt"}
        meta.update({k: v for k, v in record.items() if k not in skip})
        meta = {k: v for k, v in meta.items() if v is not None}
        return Trajectory(
            domain=ctx.domain("search"),
            source_format=self.name,
            native_id=locator.removeprefix("key:") if locator.startswith("key:") else None,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=question or None,
            agent="fireact",
            outcome=_outcome(reward),
            reward=reward,
            metadata=dumps(meta),
            locator=locator,
        )

    def _alpaca_record(self, record: dict, locator: str, ctx: ImportContext) -> Trajectory:
        output = require(record, "output", locator)
        if not isinstance(output, str):
            raise RecordError("malformed_record", f"{locator}: 'output' must be a string, got {type(output).__name__}")
        instruction = as_text(record.get("instruction")) or ""
        extra_input = as_text(record.get("input")) or ""
        task = instruction + (f"\n\n{extra_input}" if extra_input.strip() else "")
        preamble, blocks = blocks_from_text(output, "output")
        if preamble.strip():
            # Text before the first label is agent output too (a model that skipped the `Thought:` label).
            blocks.insert(0, ("agent", preamble, "output:preamble"))
        turns = react_turns(blocks)
        reward = _final_reward(turns)
        meta = {k: v for k, v in record.items() if k not in ("instruction", "input", "output")}
        return Trajectory(
            domain=ctx.domain("search"),
            source_format=self.name,
            native_id=None,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task or None,
            agent="fireact",
            outcome=_outcome(reward),
            reward=reward,
            metadata=dumps(meta) if meta else None,
            locator=locator,
        )
