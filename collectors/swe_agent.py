"""SWE-agent `.traj` files, both the classic (text commands) and function-calling variants.

A turn is one `trajectory[]` step. Files that carry only `history` (some demonstrations) are read
from the chat: each assistant action paired with the observation message that follows it. A step
whose `observation` is null recorded no reply: a `message` turn keeping the action
(`metadata.observation_missing`), as the other importers keep an unanswered call.

SWE-agent 1.x variants: the structured call of a step is in its assistant message in `history`,
matched by the step's `action` (a reply that was rejected and requeried has a step but no message);
demonstration messages copied into the history (`is_demo`) are neither the task nor calls; what reached
no environment is a `message` turn: a rejected reply (a step with no message, no output and no state:
`metadata.rejected`) and the harness's exit after a cost or context limit (`exit_cost` in 0.x, an empty
action in 1.x, answered "Exited (autosubmitted)": `metadata.harness_exit`, the answer in `reply`); a
RetryAgent file (`attempts`, the best attempt also merged at the top level) gives one trajectory
per attempt (locator `attempts[i]`, `metadata.retry`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from collectors.base import (
    ImportContext,
    Importer,
    any_record,
    as_text,
    expect_object,
    loose_json,
    object_at,
    require,
    to_float,
)
from schemas.records import RecordError, Trajectory, Turn, dumps

_CTF = re.compile(r"\bCTF\b|capture the flag", re.I)
RETRY_KEY = "worldline_retry"  # added by `split` to a RetryAgent attempt: its place among the attempts


def _own(history: list) -> list[dict]:
    """The run's own messages: SWE-agent 1.x with `put_demos_in_history` copies a demonstration's
    messages into the history, each marked `is_demo`."""
    return [m for m in history if isinstance(m, dict) and not m.get("is_demo")]


def step_messages(steps: list, calls: list[dict]) -> list[dict | None]:
    """The assistant message of each step. SWE-agent writes one per executed step, but a reply it
    rejected and requeried (a format error, a blocked command) is a step in `trajectory` with no
    message in `history` (`handle_error_with_retry`), so steps and messages are matched by their
    `action`, in order; by position only when the messages carry no `action`."""
    if not all("action" in c for c in calls):
        return [calls[i] if i < len(calls) else None for i in range(len(steps))]
    out: list[dict | None] = []
    j = 0
    for step in steps:
        action = step.get("action") if isinstance(step, dict) else None
        k = j
        while k < len(calls) and calls[k].get("action") != action:
            k += 1
        if k < len(calls):
            out.append(calls[k])
            j = k + 1
        else:
            out.append(None)
    return out


_OBSERVATION_MISSING = dumps({"observation_missing": True})
_HARNESS_EXIT = re.compile(r"exit_[a-z_]+")  # SWE-agent 0.x's autosubmission actions: exit_cost, exit_context, ...


class SweAgentImporter(Importer):
    name = "swe-agent"
    container = "json"

    def sniff(self, doc: Any) -> bool:
        if not isinstance(doc, dict):
            return False
        attempts = doc.get("attempts")
        if isinstance(attempts, list) and any_record(attempts, lambda a: isinstance(a, dict) and self.sniff(a)):
            return True  # RetryAgent: every attempt a trajectory of its own (mid-run saves hold only these)
        if isinstance(doc.get("trajectory"), list) and ("history" in doc or "info" in doc):
            steps = doc["trajectory"]
            return not steps or (isinstance(steps[0], dict) and "action" in steps[0] and "observation" in steps[0])
        hist = doc.get("history")
        return (
            isinstance(hist, list)
            and bool(hist)
            and isinstance(hist[0], dict)
            and "role" in hist[0]
            and any(isinstance(m, dict) and "message_type" in m for m in hist[:3])
        )

    def split(self, doc: Any, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        """One record per file; a RetryAgent file (`attempts`) gives one per attempt: its top level
        repeats the best attempt (`info.best_attempt_idx`), which is marked instead of read twice."""
        attempts = doc.get("attempts") if isinstance(doc, dict) else None
        if not (isinstance(attempts, list) and attempts):
            yield "$", doc
            return
        info = doc.get("info")
        best = info.get("best_attempt_idx") if isinstance(info, dict) else None
        for i, attempt in enumerate(attempts):
            if isinstance(attempt, dict):
                attempt = {"replay_config": doc.get("replay_config"), "environment": doc.get("environment"), **attempt,
                           RETRY_KEY: {"attempt": i, "attempts": len(attempts), "best_attempt_idx": best}}
            yield f"attempts[{i}]", attempt

    def convert(self, doc: dict, locator: str, ctx: ImportContext) -> Trajectory:
        expect_object(doc, locator)
        history = _own(doc.get("history") or [])
        info = object_at(doc, "info")
        steps = doc.get("trajectory")
        if steps is not None and not isinstance(steps, list):
            raise RecordError("malformed_record", f"{locator}: 'trajectory' must be a list of steps, got {type(steps).__name__}")
        if steps is not None:
            calls = [m for m in history if m.get("role") == "assistant"]
            by_action = bool(calls) and all("action" in c for c in calls)  # a step without a message was rejected
            turns = [self._step(s, i, c, by_action)
                     for i, (s, c) in enumerate(zip(steps, step_messages(steps, calls), strict=True))]
        else:
            turns = self._from_history(history)
        task = self._task(history)
        replay = loose_json(doc.get("replay_config")) or {}
        agent_cfg = object_at(replay, "agent") if isinstance(replay, dict) else {}
        model = object_at(agent_cfg, "model").get("name")
        is_ctf = bool(task and _CTF.search(task[:2000]))
        meta = {
            "environment": doc.get("environment"),
            "model_stats": loose_json(info.get("model_stats")),
            "submission": info.get("submission"),
        }
        if doc.get(RETRY_KEY) is not None:
            meta["retry"] = doc[RETRY_KEY]
        return Trajectory(
            domain=ctx.domain("terminal" if is_ctf else "swe"),
            source_format=self.name,
            native_id=self._instance_id(replay),
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task,
            action_space=dumps(agent_cfg.get("tools")) if agent_cfg.get("tools") else None,
            agent="swe-agent",
            model=model,
            outcome=info.get("exit_status"),
            metadata=dumps(meta),
            locator=locator,
        )

    @staticmethod
    def _instance_id(replay: Any) -> str | None:
        """SWE-agent 1.x names the instance in `replay_config.problem_statement.id`; older files
        do not carry it (only their file name does)."""
        problem = replay.get("problem_statement") if isinstance(replay, dict) else None
        if isinstance(problem, dict) and problem.get("id") is not None:
            return str(problem["id"])
        return None

    @staticmethod
    def _task(history: list) -> str | None:
        """The last user message before the first assistant message (demonstrations are in user
        messages before it, or marked `is_demo` and left out of `history` by the caller)."""
        task = None
        for m in history:
            if m.get("role") == "assistant":
                break
            if m.get("role") == "user":
                task = as_text(m.get("content"))
        return task

    def _step(self, step: dict, i: int, message: dict | None, by_action: bool = False) -> Turn:
        where = f"trajectory[{i}]"
        action = require(step, "action", where)
        observation = require(step, "observation", where)
        state = loose_json(step.get("state"))
        text = as_text(action).strip() if action is not None else ""
        reply = as_text(observation) or ""
        # what reached no environment: a reply SWE-agent rejected and requeried (a format error, a blocked
        # command: a step with no message in `history`, no output and no state), and the harness's own exit
        # (cost or context limit: `exit_cost` in 0.x, an empty action in 1.x, answered "Exited ...")
        harness = None
        if reply.startswith("Exited") and (text == "" or _HARNESS_EXIT.fullmatch(text)):
            harness = {"harness_exit": True, "reply": reply}
        elif by_action and message is None and reply == "" and not state:
            harness = {"rejected": True}
        if harness is not None:
            return Turn(kind="message", action=text or None, observation_kind="none", thought=as_text(step.get("thought")),
                        duration_s=to_float(step.get("execution_time")), locator=where, metadata=dumps(harness))
        tool_name = tool_args = tool_call_id = None
        # In the function-calling variant the step's assistant message holds the structured call.
        if message is not None:
            tc = loose_json(message.get("tool_calls"))
            if isinstance(tc, list) and tc and isinstance(tc[0], dict):
                fn = object_at(tc[0], "function")
                tool_name = fn.get("name")
                tool_args = dumps(loose_json(fn.get("arguments")))
                tool_call_id = tc[0].get("id")
        answered = observation is not None  # null: nothing recorded, as an action whose reply is missing elsewhere
        return Turn(
            kind="env" if answered else "message",
            action=as_text(action).rstrip("\n") if action is not None else None,
            observation=as_text(observation),
            observation_kind=self._obs_kind(action) if answered else "none",
            tool_name=tool_name,
            tool_args=tool_args,
            tool_call_id=tool_call_id,
            thought=as_text(step.get("thought")),
            duration_s=to_float(step.get("execution_time")),
            state=dumps(state) if state is not None else None,
            locator=where,
            metadata=None if answered else _OBSERVATION_MISSING,
        )

    @staticmethod
    def _obs_kind(action: Any) -> str:
        first = str(action or "").strip().split(" ", 1)[0]
        if first in {"open", "goto", "scroll_up", "scroll_down", "create", "edit", "insert", "str_replace_editor"}:
            return "file_view"
        return "stdout"

    def _from_history(self, history: list) -> list[Turn]:
        turns: list[Turn] = []
        pending: tuple[int, dict] | None = None
        for j, m in enumerate(history):
            if not isinstance(m, dict):
                continue
            role = m.get("role")
            if role == "assistant":
                if pending is not None:  # an action with no observation
                    turns.append(self._hist_turn(pending, None))
                pending = (j, m)
            elif role in ("tool", "user") and pending is not None:
                turns.append(self._hist_turn(pending, (j, m)))
                pending = None
        if pending is not None:
            turns.append(self._hist_turn(pending, None))
        return turns

    def _hist_turn(self, act: tuple[int, dict], obs: tuple[int, dict] | None) -> Turn:
        j, m = act
        tc = loose_json(m.get("tool_calls"))
        fn = object_at(tc[0], "function") if isinstance(tc, list) and tc and isinstance(tc[0], dict) else {}
        action = m.get("action") or (fn.get("name") if fn else None)
        return Turn(
            kind="env" if obs is not None else "message",
            action=as_text(action).rstrip("\n") if action else None,
            observation=as_text(obs[1].get("content")) if obs else None,
            observation_kind=self._obs_kind(action) if obs else "none",
            tool_name=fn.get("name"),
            tool_args=dumps(loose_json(fn.get("arguments"))) if fn else None,
            tool_call_id=tc[0].get("id") if fn else None,
            thought=as_text(m.get("thought")),
            locator=f"history[{j}]" + (f"+history[{obs[0]}]" if obs else ""),
        )
