"""Generic tool-using chat logs: OpenAI `{"messages": [...]}` and ShareGPT `{"conversations": [...]}` lines.

A generic importer (`generic = True`): it claims any line with a `messages` list of role dicts or a
`conversations` list, so the reader offers it a line only after the specific line formats (FireAct,
AgentWorldBench, OpenHands) and the whole-document formats (a document written on one line, e.g. a
mini-swe-agent file) have declined it.

OpenAI form: assistant `tool_calls[{id, type: "function", function: {name, arguments}}]` (or the legacy
single `function_call`), results as `role: "tool"` with `tool_call_id` (or legacy `role: "function"`
with `name`); top-level `tools` (or legacy `functions`) is the action space.
ShareGPT form (LLaMA-Factory and similar): `from` in system/human/gpt/function_call/observation/tool,
`value` text (or the same roles under `role`/`content`, as LLaMA-Factory's configurable tags allow); a `function_call` value is JSON `{name, arguments}` (a list for parallel calls) and is
paired with the `observation` that follows it; top-level `system` and `tools` are honoured.
Anthropic Messages form (the same `messages` list, content as typed blocks): assistant `tool_use`
blocks `{id, name, input}` are the calls (its `text` blocks the thought, `thinking` blocks the
reasoning), and `tool_result` blocks `{tool_use_id, content, is_error}` in the next user message their
results (text after them in that message is a user turn); top-level `system` may be text blocks too.
Hermes/Qwen text tool calls (either form): `<tool_call>{"name", "arguments"}</tool_call>` blocks in an
assistant message are its calls (the text around them is the thought), and `<tool_response>` blocks in a
tool message are their results, in order (the JSON inside, without the tags).
The same records as one JSON array (LLaMA-Factory's `data/*.json` files) are read element by element
by the reader (`pipelines.reader`, locator `[i]`), as any array of line-format records is, once no
whole-document format claimed the array.

Turns (the conventions of the other chat-shaped importers, e.g. tau-bench):
- each tool call with its result is one `env` turn (`observation_kind` "tool_result"); its action is
  `name {arguments JSON}`; the text and reasoning of the assistant message that made the calls is the
  `thought` of its first call;
- a call whose result never arrives did not demonstrably touch the environment: a `message` turn that
  keeps the call (`tool_name`, `tool_args`, `metadata.result_missing`); a result whose call is not in the
  log is an `env` turn with no action (`metadata.call_missing`), so no environment output is lost;
- assistant text without tool calls is a `message` turn (text in `action`, reasoning in `thought`);
- the first user message is the task; later user messages are `user` turns (text in `action`); system
  messages before the task go to `metadata.system`, later ones become `user` turns with
  `metadata.role` "system".

Domain: the format does not say what the tools touch. Tool-calling chat logs are mostly API/MCP-style
function calls, so the default is "mcp"; `ingest --domain` overrides it (`ctx.domain`).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from collectors.base import ImportContext, Importer, as_text, expect_object, render_call
from schemas.records import RecordError, Trajectory, Turn, dumps

_ASSISTANT = {"assistant", "gpt", "model", "chatgpt", "bot", "bard", "bing"}
_USER = {"user", "human"}
_SYSTEM = {"system", "developer"}
_RESULT = {"tool", "function", "observation", "tool_response", "ipython", "function_response"}
_CALL = {"function_call", "tool_call", "tool_calls"}


def _loads(value: Any) -> Any:
    """JSON text -> object; anything else (or unparsable text) unchanged."""
    if isinstance(value, str):
        s = value.strip()
        if s[:1] in ("{", "["):
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                return value
    return value


_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_HERMES_RESULT = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.S)


def _hermes_calls(text: str | None) -> tuple[str | None, list[dict]] | None:
    """Hermes / Qwen text tool calls: `<tool_call>{"name", "arguments"}</tool_call>` blocks in an assistant
    message -> (the text around them, the calls); None when the text holds no parsable block."""
    if not text or "<tool_call>" not in text:
        return None
    calls = [_loads(m) for m in _HERMES_CALL.findall(text)]
    if not calls or not all(isinstance(c, dict) and "name" in c for c in calls):
        return None
    rest = _HERMES_CALL.sub("", text).strip()
    return (rest or None), calls


def _function_call_turns(b: _Builder, value: Any, loc: str) -> None:
    """A LLaMA-Factory `function_call` message: JSON `{name, arguments}`, a list for parallel calls."""
    parsed = _loads(value)
    calls = parsed if isinstance(parsed, list) else [parsed]
    for k, c in enumerate(calls):
        cloc = loc if len(calls) == 1 else f"{loc}[{k}]"
        if isinstance(c, dict) and "name" in c:
            b.call(c.get("name"), c.get("arguments", c.get("parameters")), c.get("id"), None, cloc)
        else:
            # Not the documented `{name, arguments}` JSON: keep the text as the action.
            b.call(None, None, None, None, cloc, {"unparsed_call": True})
            b.turns[-1].action = as_text(c)


def _hermes_call_turns(b: _Builder, hermes: tuple[str | None, list[dict]], reasoning: str | None, loc: str) -> None:
    thought, calls = hermes
    thought = _join(reasoning, thought)
    for k, c in enumerate(calls):
        b.call(c.get("name"), c.get("arguments", c.get("parameters")), c.get("id"), thought if k == 0 else None,
               loc if len(calls) == 1 else f"{loc}[{k}]")


def _hermes_results(b: _Builder, text: str | None, loc: str) -> bool:
    """Hermes `<tool_response>` blocks: one result each, in call order (the JSON inside, without the
    tags); False when the text holds none."""
    blocks = _HERMES_RESULT.findall(text or "")
    if not blocks or _HERMES_RESULT.sub("", text).strip():
        return False  # text outside the blocks: keep the message whole, as one result
    for k, r in enumerate(blocks):
        parsed = _loads(r)
        name = parsed.get("name") if isinstance(parsed, dict) and isinstance(parsed.get("name"), str) else None
        b.result(r, None, name, loc if len(blocks) == 1 else f"{loc}[{k}]")
    return True


def _blocks(content: Any) -> list[dict] | None:
    """Anthropic Messages content blocks (`[{"type": ...}, ...]`), else None."""
    if isinstance(content, list) and content and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content):
        return content
    return None


def _block_text(blocks: list[dict], kind: str = "text", key: str = "text") -> str | None:
    return "".join(str(p.get(key) or "") for p in blocks if p["type"] == kind) or None


def _anthropic_calls(b: _Builder, blocks: list[dict], reasoning: str | None, loc: str) -> bool:
    """An assistant message's `tool_use` blocks as calls; False when it has none."""
    uses = [(i, p) for i, p in enumerate(blocks) if p["type"] == "tool_use"]
    if not uses:
        return False
    b.content_blocks = True
    thought = _join(reasoning or _block_text(blocks, "thinking", "thinking"), _block_text(blocks))
    for k, (i, p) in enumerate(uses):
        b.call(p.get("name"), p.get("input"), p.get("id"), thought if k == 0 else None, f"{loc}.content[{i}]")
    return True


def _anthropic_results(b: _Builder, blocks: list[dict], loc: str) -> bool:
    """A user message's `tool_result` blocks as results (any other blocks after them: a user turn);
    False when it has none."""
    results = [(i, p) for i, p in enumerate(blocks) if p["type"] == "tool_result"]
    if not results:
        return False
    b.content_blocks = True
    for i, p in results:
        err = p.get("is_error") if isinstance(p.get("is_error"), bool) else None
        b.result(as_text(p.get("content")), p.get("tool_use_id"), None, f"{loc}.content[{i}]", err)
    rest = [p for p in blocks if p["type"] != "tool_result"]
    if rest:
        b.user_text(as_text(rest) or "", loc)
    return True


def _join(*parts: str | None) -> str | None:
    kept = [p for p in parts if p and p.strip()]
    return "\n\n".join(kept) if kept else None


class _Builder:
    """Accumulates turns of one conversation and pairs tool calls with their results."""

    def __init__(self, where: str):
        self.where = where
        self.turns: list[Turn] = []
        self.task: str | None = None
        self.system: list[str] = []
        self.open_calls: list[int] = []  # indices of env turns still waiting for a result
        self.by_id: dict[str, int] = {}
        self.content_blocks = False  # Anthropic `tool_use` / `tool_result` blocks were read

    def started(self) -> bool:
        return self.task is not None or bool(self.turns)

    def system_text(self, text: str, loc: str) -> None:
        if not self.started():
            self.system.append(text)
        else:
            self.turns.append(
                Turn(kind="user", action=text, observation_kind="none", locator=loc, metadata=dumps({"role": "system"}))
            )

    def user_text(self, text: str, loc: str) -> None:
        if self.task is None and not self.turns:
            self.task = text
        else:
            self.turns.append(Turn(kind="user", action=text, observation_kind="none", locator=loc))

    def message(self, text: str | None, reasoning: str | None, loc: str) -> None:
        if not (text and text.strip()) and not (reasoning and reasoning.strip()):
            return
        self.turns.append(Turn(kind="message", action=text, thought=reasoning, observation_kind="none", locator=loc))

    def call(self, name: str | None, args: Any, call_id: str | None, thought: str | None, loc: str,
             meta: dict | None = None) -> None:
        parsed = _loads(args)
        self.turns.append(
            Turn(
                kind="message",  # until its result arrives
                action=render_call(name, parsed),
                observation_kind="none",
                tool_name=name,
                tool_args=dumps(parsed) if parsed is not None else None,
                tool_call_id=call_id,
                thought=thought,
                locator=loc,
                metadata=dumps(meta) if meta else None,
            )
        )
        idx = len(self.turns) - 1
        self.open_calls.append(idx)
        if call_id:
            self.by_id[str(call_id)] = idx

    def result(self, text: str | None, call_id: str | None, name: str | None, loc: str,
               is_error: bool | None = None) -> None:
        idx = None
        if call_id and str(call_id) in self.by_id and self.by_id[str(call_id)] in self.open_calls:
            idx = self.by_id[str(call_id)]
        else:
            # No id (ShareGPT, legacy `function` role), or an id the calls did not record: the oldest open
            # call that has no id of its own, preferring one of the result's tool name.
            free = [i for i in self.open_calls if not call_id or not self.turns[i].tool_call_id]
            named = [i for i in free if name and self.turns[i].tool_name == name]
            idx = (named or free or [None])[0]
        if idx is None:
            meta = {"call_missing": True}
            if name:
                meta["tool_name"] = name
            self.turns.append(
                Turn(kind="env", observation=text, observation_kind="tool_result", tool_call_id=call_id,
                     is_error=is_error, locator=loc, metadata=dumps(meta))
            )
            return
        self.open_calls.remove(idx)
        t = self.turns[idx]
        t.kind = "env"
        t.observation = text
        t.observation_kind = "error" if is_error else "tool_result"
        t.is_error = is_error
        t.locator = f"{t.locator}+{loc}"
        if t.tool_call_id is None and call_id:
            t.tool_call_id = call_id

    def finish(self) -> list[Turn]:
        for idx in self.open_calls:
            t = self.turns[idx]
            meta = orjson.loads(t.metadata) if t.metadata else {}
            meta["result_missing"] = True
            t.metadata = dumps(meta)
        self.open_calls = []
        return self.turns


def _openai_messages(msgs: list, field: str, b: _Builder) -> None:
    for j, m in enumerate(msgs):
        loc = f"{field}[{j}]"
        if not isinstance(m, dict):
            raise RecordError("malformed_record", f"{b.where} {loc}: expected a message object, got {type(m).__name__}")
        role = m.get("role")
        if role is None:
            raise RecordError("missing_field", f"{b.where} {loc}: message has no 'role'")
        text = as_text(m.get("content"))
        blocks = _blocks(m.get("content"))
        if role in _SYSTEM:
            b.system_text(text or "", loc)
        elif role in _USER:
            if blocks is None or not _anthropic_results(b, blocks, loc):
                b.user_text(text or "", loc)
        elif role in _ASSISTANT:
            reasoning = as_text(m.get("reasoning_content") or m.get("reasoning") or m.get("thinking"))
            if blocks is not None and not m.get("tool_calls") and _anthropic_calls(b, blocks, reasoning, loc):
                continue
            if blocks is not None and any(p["type"] == "thinking" for p in blocks):
                text, reasoning = _block_text(blocks), _join(reasoning, _block_text(blocks, "thinking", "thinking"))
            calls = m.get("tool_calls")
            if isinstance(m.get("function_call"), dict) and not calls:
                calls = [{"id": None, "type": "function", "function": m["function_call"]}]
            if isinstance(calls, list) and calls:
                thought = _join(reasoning, text)
                for k, c in enumerate(calls):
                    if not isinstance(c, dict):
                        raise RecordError("malformed_record", f"{b.where} {loc}.tool_calls[{k}]: expected an object")
                    fn = c.get("function") if isinstance(c.get("function"), dict) else c  # flat `{name, arguments}`
                    known = ("id", "type", "function", "name", "arguments")
                    extra = {key: v for key, v in c.items() if key not in known}
                    if c.get("type") not in (None, "function"):
                        extra["type"] = c.get("type")
                    b.call(fn.get("name"), fn.get("arguments"), c.get("id"), thought if k == 0 else None,
                           f"{loc}.tool_calls[{k}]", extra or None)
            elif (hermes := _hermes_calls(text)) is not None:
                _hermes_call_turns(b, hermes, reasoning, loc)
            else:
                b.message(text, reasoning, loc)
        elif role in _CALL:  # LLaMA-Factory data with its ShareGPT tags renamed to role/content
            _function_call_turns(b, m.get("content"), loc)
        elif role in _RESULT:
            err = m.get("is_error") if isinstance(m.get("is_error"), bool) else None
            if m.get("tool_call_id") is None and _hermes_results(b, text, loc):
                continue
            b.result(text, m.get("tool_call_id"), m.get("name"), loc, err)
        else:
            raise RecordError("malformed_record", f"{b.where} {loc}: unknown role {role!r}")


def _sharegpt(conv: list, field: str, b: _Builder) -> None:
    for j, m in enumerate(conv):
        loc = f"{field}[{j}]"
        if not isinstance(m, dict):
            raise RecordError("malformed_record", f"{b.where} {loc}: expected a message object, got {type(m).__name__}")
        if "from" not in m:
            raise RecordError("missing_field", f"{b.where} {loc}: message has no 'from'")
        who = str(m["from"]).lower()
        value = m.get("value")
        text = as_text(value)
        if who in _SYSTEM:
            b.system_text(text or "", loc)
        elif who in _USER:
            b.user_text(text or "", loc)
        elif who in _ASSISTANT:
            hermes = _hermes_calls(text)
            if hermes is None:
                b.message(text, None, loc)
            else:
                _hermes_call_turns(b, hermes, None, loc)
        elif who in _CALL:
            _function_call_turns(b, value, loc)
        elif who in _RESULT:
            if _hermes_results(b, text, loc):
                continue
            parsed = _loads(value)
            if isinstance(parsed, list) and len(b.open_calls) > 1 and len(parsed) == len(b.open_calls):
                for k, r in enumerate(parsed):
                    # One element per call; objects keep their key order (no verbatim text exists per element).
                    text_k = r if isinstance(r, str) else orjson.dumps(r).decode()
                    b.result(text_k, None, None, f"{loc}[{k}]")
            else:
                b.result(text, None, None, loc)
        else:
            raise RecordError("malformed_record", f"{b.where} {loc}: unknown speaker {m['from']!r}")


class ChatImporter(Importer):
    """OpenAI / ShareGPT chat with tool calls, one conversation per JSON line."""

    name = "chat"
    container = "jsonl"
    generic = True

    def sniff(self, sample: Any) -> bool:
        if not isinstance(sample, dict):
            return False
        msgs = sample.get("messages")
        if isinstance(msgs, list) and msgs:
            return all(isinstance(m, dict) and "role" in m for m in msgs[:5])
        conv = sample.get("conversations")
        if isinstance(conv, list) and conv:
            return all(isinstance(m, dict) and ("from" in m or "role" in m) for m in conv[:5])
        return False

    def convert(self, record: Any, locator: str, ctx: ImportContext) -> Trajectory:
        expect_object(record, locator)
        b = _Builder(locator)
        if "messages" in record:
            field, msgs = "messages", record["messages"]
            form = "openai"
        elif "conversations" in record:
            field, msgs = "conversations", record["conversations"]
            form = "sharegpt"
        else:
            raise RecordError("missing_field", f"{locator}: neither 'messages' nor 'conversations' is present")
        if not isinstance(msgs, list):
            raise RecordError("malformed_record", f"{locator}: {field!r} must be a list, got {type(msgs).__name__}")
        system = as_text(record.get("system")) if isinstance(record.get("system"), str | list) else None
        if system and system.strip():
            b.system.append(system)
        if form == "sharegpt" and msgs and isinstance(msgs[0], dict) and "from" not in msgs[0] and "role" in msgs[0]:
            form = "openai"  # `conversations` holding OpenAI-style role/content messages
        if form == "openai":
            _openai_messages(msgs, field, b)
        else:
            _sharegpt(msgs, field, b)
        turns = b.finish()
        tools = _loads(record.get("tools") or record.get("functions"))
        skip = {"messages", "conversations", "tools", "functions", "system", "id"}
        meta: dict[str, Any] = {"form": "anthropic" if b.content_blocks else form}
        if b.system:
            meta["system"] = "\n\n".join(b.system)
        meta.update({k: v for k, v in record.items() if k not in skip})
        model = record.get("model") if isinstance(record.get("model"), str) else None
        return Trajectory(
            domain=ctx.domain("mcp"),
            source_format=self.name,
            native_id=str(record["id"]) if record.get("id") is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=b.task,
            action_space=dumps(tools) if tools else None,
            model=model,
            metadata=dumps(meta),
            locator=locator,
        )
