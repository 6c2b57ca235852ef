"""tau-bench results: a JSON list of `{task_id, reward, info, traj, trial}`, one trajectory each; also
one such run on its own (a JSON line, a Parquet row of a dataset made from the results, one document).

`traj` is the OpenAI-style chat the agent saw. In tau-bench the environment is two things, the
domain tools and the simulated user, and both answer the agent:

- an assistant `tool_calls[j]` and the `role: tool` message with its `tool_call_id` is a turn
  (observation_kind `tool_result`); a tool message that answers no open call is kept as an `env` turn
  without an action (`metadata.call_missing`), not lost with its run;
- an assistant text message is tau-bench's `respond` action; the simulated user's next message is
  the environment's answer (observation_kind `user_reply`). tool_name is `respond`, as in
  tau-bench's own `Action(name="respond", kwargs={"content": ...})`.

The ReAct/Act agents write `Thought: ... Action: {"name", "arguments"}` as text and get tool output
back as a user message `API output: ...`; those are read the same way (the observation is kept
verbatim, prefix included).

The system message (the domain policy) goes to metadata; the first user message is the `task`
(the simulated user's opening request, as the agent saw it). The user simulator's hidden
instruction (`info.task.instruction`) is the environment state that drives every user reply, so
it is stored as `initial_state`; the expected actions stay in metadata only.

A run the harness could not finish (`run.py` catches the exception and writes `reward: 0.0`,
`info: {error, traceback}`, `traj: []`) has outcome "error": its 0.0 says nothing about the agent.

Domain: "mcp". tau-bench tasks are customer-service tool use through JSON function schemas, the
same shape as MCP tool calls; none of the other domains (terminal, swe, web, os, android, search)
fits. `ingest --domain` overrides it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from collectors.base import (
    ImportContext,
    Importer,
    any_record,
    as_text,
    object_at,
    outcome_of,
    render_call,
    require,
    unpaired_result,
)
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps

RESPOND = "respond"  # tau_bench.types.RESPOND_ACTION_NAME
_TOOLS_IN_PROMPT = re.compile(r"#\s*Available tools\s*\n")


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return parse_json(value)
    except orjson.JSONDecodeError:
        return value


def _react(content: str) -> tuple[str | None, dict, bool] | None:
    """(thought, {"name", "arguments"}, parsed) of a ReAct/Act message; None if it is not one.

    Like tau-bench's ChatReActAgent, an `Action:` that is not valid JSON is a `respond` with the
    raw text (`parsed` is then False)."""
    if not content.lstrip().startswith(("Thought:", "Action:")) or "Action:" not in content:
        return None
    head, _, action_str = content.rpartition("Action:")
    action_str = action_str.strip()
    parsed = _loads(action_str)
    ok = isinstance(parsed, dict) and isinstance(parsed.get("name"), str) and "arguments" in parsed
    if not ok:
        parsed = {"name": RESPOND, "arguments": {"content": action_str}}
    thought = head.strip()
    if thought.startswith("Thought:"):
        thought = thought[len("Thought:") :].strip()
    return (thought or None), parsed, ok


def run_id(task_id: Any, trial: Any) -> str | None:
    """A run's native id: the task, and the trial when the file has several runs of it."""
    return None if task_id is None else (f"{task_id}" if trial is None else f"{task_id}:{trial}")


def _is_error(result: str | None) -> bool:
    """tau-bench's Env.step turns tool exceptions into `Error: ...` and unknown tools into
    `Unknown action ...`."""
    return bool(result) and (result.startswith("Error") or result.startswith("Unknown action"))


def _tools_from_prompt(system: str | None) -> Any:
    """The ReAct agents embed `json.dumps(tools_info)` after '#Available tools'."""
    if not system:
        return None
    m = _TOOLS_IN_PROMPT.search(system)
    if not m:
        return None
    try:
        tools, _ = json.JSONDecoder().raw_decode(system[m.end() :].lstrip())
    except json.JSONDecodeError:
        return None
    return tools if isinstance(tools, list) else None


def _is_run(rec: Any) -> bool:
    """One task run: `{task_id, reward, traj: [chat messages]}`."""
    if not isinstance(rec, dict):
        return False
    traj = rec.get("traj")
    return (
        "task_id" in rec
        and "reward" in rec
        and isinstance(traj, list)
        and (not traj or (isinstance(traj[0], dict) and "role" in traj[0]))
    )


class TauBenchImporter(Importer):
    name = "tau-bench"
    container = "json"

    def sniff(self, doc: Any) -> bool:
        return _is_run(doc) or (isinstance(doc, list) and any_record(doc, _is_run))

    def split(self, doc: list | dict, ctx: ImportContext):
        if isinstance(doc, dict):  # one run on its own
            yield "$", doc
            return
        for i, rec in enumerate(doc):
            yield f"[{i}]", rec

    def convert(self, rec: Any, locator: str, ctx: ImportContext) -> Trajectory:
        traj = require(rec, "traj", locator)
        if not isinstance(traj, list):
            raise RecordError("malformed_record", f"{locator}: 'traj' is not a list")
        info = object_at(rec, "info")
        system, task, turns = self._turns(traj, locator)
        reward = self._float(rec.get("reward"), f"{locator}: reward")
        task_info = object_at(info, "task")
        hidden = {k: task_info[k] for k in ("instruction", "user_id") if task_info.get(k) is not None}
        tools = next((info[k] for k in ("tools", "tools_info") if isinstance(info.get(k), list)), None)
        if tools is None:
            tools = _tools_from_prompt(system)
        task_id, trial = rec.get("task_id"), rec.get("trial")
        meta = {"task_id": task_id, "trial": trial, "system_prompt": system, "info": info}
        meta.update({k: v for k, v in rec.items() if k not in ("traj", "info", "task_id", "trial", "reward")})
        return Trajectory(
            domain=ctx.domain("mcp"),
            source_format=self.name,
            native_id=run_id(task_id, trial),
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task,
            action_space=dumps(tools) if tools else None,
            initial_state=dumps(hidden) if hidden else None,
            agent="tau-bench",
            outcome="error" if info.get("error") else outcome_of(reward),
            reward=reward,
            metadata=dumps(meta),
            locator=locator,
        )

    @staticmethod
    def _float(v: Any, where: str) -> float | None:
        if v is None:
            return None
        try:
            return float(v)
        except (TypeError, ValueError) as e:
            raise RecordError("bad_value", f"{where} is not a number: {v!r}") from e

    def _turns(self, traj: list, locator: str) -> tuple[str | None, str | None, list[Turn]]:
        system: str | None = None
        task: str | None = None
        turns: list[Turn] = []
        open_calls: dict[str, Turn] = {}  # tool_call_id -> turn still waiting for its result
        awaiting_reply: Turn | None = None  # a `respond` turn or a ReAct tool call waiting for a user message
        for j, m in enumerate(traj):
            where = f"{locator} traj[{j}]"
            role = require(m, "role", where)
            content = as_text(m.get("content"))
            if role == "system":
                if system is None and not turns:
                    system = content
                else:
                    turns.append(
                        Turn(
                            kind="user",
                            action=content,
                            observation_kind="none",
                            locator=f"traj[{j}]",
                            metadata=dumps({"role": "system"}),
                        )
                    )
                continue
            if role == "assistant":
                awaiting_reply = self._assistant(m, j, where, content, turns, open_calls)
                continue
            if role == "tool":
                self._tool(m, j, content, open_calls, turns)
                continue
            if role == "user":
                if awaiting_reply is not None:
                    t = awaiting_reply
                    t.kind = "env"
                    t.observation = content
                    react_call = t.tool_name != RESPOND
                    t.observation_kind = "tool_result" if react_call else "user_reply"
                    t.is_error = react_call and _is_error(
                        content.removeprefix("API output: ") if content else None
                    )
                    t.locator = f"{t.locator}+traj[{j}]"
                    awaiting_reply = None
                elif task is None and not turns:
                    task = content
                else:
                    turns.append(
                        Turn(kind="user", action=content, observation_kind="none", locator=f"traj[{j}]")
                    )
                continue
            raise RecordError("malformed_record", f"{where}: unknown role {role!r}")
        return system, task, turns

    def _assistant(
        self, m: dict, j: int, where: str, content: str | None, turns: list[Turn], open_calls: dict[str, Turn]
    ) -> Turn | None:
        """Append the turns of one assistant message; return the turn a user message would answer."""
        calls = m.get("tool_calls") or []
        if not isinstance(calls, list):
            raise RecordError("malformed_record", f"{where}: 'tool_calls' is not a list")
        if calls:
            for k, tc in enumerate(calls):
                fn = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise RecordError("malformed_record", f"{where}: tool_calls[{k}] has no function name")
                raw_args = fn.get("arguments")  # blank (a function without parameters): absent
                args = None if isinstance(raw_args, str) and not raw_args.strip() else _loads(raw_args)
                call_id = tc.get("id")
                t = Turn(
                    kind="message",  # until its result arrives
                    action=render_call(fn["name"], args),
                    tool_name=fn["name"],
                    tool_args=dumps(args) if args is not None else None,
                    tool_call_id=call_id,
                    thought=content if k == 0 else None,
                    observation_kind="none",
                    locator=f"traj[{j}].tool_calls[{k}]",
                )
                turns.append(t)
                open_calls[call_id if call_id is not None else f"#{len(turns)}"] = t
            return None
        text = content or ""
        react = _react(text)
        if react is not None:
            thought, act, ok = react
            args = act["arguments"]
            meta = {"react": True} if ok else {"react": True, "unparsed_action": True}
            if act["name"] == RESPOND:
                said = args.get("content") if isinstance(args, dict) else None
                t = Turn(
                    kind="message",
                    action=as_text(said) if said is not None else as_text(args),
                    tool_name=RESPOND,
                    tool_args=dumps(args),
                    thought=thought,
                    observation_kind="none",
                    locator=f"traj[{j}]",
                    metadata=dumps(meta),
                )
            else:
                t = Turn(
                    kind="message",
                    action=f"{act['name']} {dumps(args)}",
                    tool_name=act["name"],
                    tool_args=dumps(args),
                    thought=thought,
                    observation_kind="none",
                    locator=f"traj[{j}]",
                    metadata=dumps(meta),
                )
        else:
            t = Turn(
                kind="message",
                action=content,
                tool_name=RESPOND,
                tool_args=dumps({"content": content}),
                observation_kind="none",
                locator=f"traj[{j}]",
            )
        turns.append(t)
        return t

    @staticmethod
    def _tool(m: dict, j: int, content: str | None, open_calls: dict[str, Turn], turns: list[Turn]) -> None:
        call_id = m.get("tool_call_id")
        t = open_calls.pop(call_id, None) if call_id is not None else None
        if t is None and call_id is None and len(open_calls) == 1:
            t = open_calls.pop(next(iter(open_calls)))
        if t is None:  # answers no open call: kept, as environment output without its action
            turns.append(unpaired_result(content, call_id, m.get("name"), _is_error(content), f"traj[{j}]"))
            return
        t.kind = "env"
        t.observation = content
        t.observation_kind = "tool_result"
        t.is_error = _is_error(content)
        t.locator = f"{t.locator}+traj[{j}]"
        name = m.get("name")
        if name is not None and name != t.tool_name:
            t.metadata = dumps({"result_name": name})
