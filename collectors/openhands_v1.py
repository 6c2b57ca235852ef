"""OpenHands V1 events (the software-agent-sdk, `openhands.sdk.event`), as in V1 evaluation rows.

V1 events are typed by `kind`: `ActionEvent` (`action` with its own `kind`, `tool_name`,
`tool_call_id`, `tool_call {id, name, arguments}`, `thought` as text parts, `reasoning_content`),
answered by an `ObservationEvent` (`observation` with `content` parts, `is_error` and the tool's
fields, e.g. a terminal's `exit_code`; `action_id` names the action), a `UserRejectObservation`
(`rejection_reason`) or an `AgentErrorEvent` (`error`), all carrying the call's `tool_call_id`;
`MessageEvent` (`source` user or agent, `llm_message {role, content}`) and `SystemPromptEvent`
(`system_prompt`, `tools`). Other kinds (state updates, condensations, pauses) are harness
bookkeeping.

Turns follow the V0 conventions of `collectors.openhands`: an action with its answer is an `env`
turn (a terminal command's action is the command itself, other tools `name {arguments}`); an action
with no answer, or a finish, is a `message` turn; an answer to no logged action is an `env` turn
without action; the first user message is the task, later ones `user` turns; agent messages are
`message` turns.

The same events persisted by a conversation (`<conversation>/base_state.json` and
`events/event-<index>-<id>.json`) are a directory input (`OpenHandsConversationImporter`): one
trajectory, with the model and the execution status from `base_state.json`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from collectors.base import (
    ImportContext,
    Importer,
    as_text,
    load_json_file,
    loose_json,
    parse_time,
    render_call,
)
from schemas.records import RecordError, Trajectory, Turn, dumps

AGENT = "openhands"
_ANSWERS = {"ObservationEvent", "UserRejectObservation", "AgentErrorEvent"}
_SHELL_ACTIONS = {"TerminalAction", "ExecuteBashAction", "BashAction"}
_SHELL_OBS = {"TerminalObservation", "ExecuteBashObservation", "BashObservation"}
_FILE_OBS = {"FileEditorObservation", "StrReplaceEditorObservation"}
_ACK_ACTIONS = {"FinishAction", "ThinkAction"}  # answered by an acknowledgement, not by the environment

RUNNING = -1  # OpenHands' exit code of a command that had not exited when its output was taken (V0 and V1)


def is_v1_history(history: Any) -> bool:
    """A V1 history: event objects typed by `kind` (`...Event`, `...Observation`); V0 events have none."""
    head = history[0] if isinstance(history, list) and history else None
    kind = head.get("kind") if isinstance(head, dict) else None
    return isinstance(kind, str) and kind.endswith(("Event", "Observation"))


class V1Stream:
    """One V1 history walked into turns; the same surface as `collectors.openhands._Stream`."""

    def __init__(self, history: list, where: str, prefix: str):
        self.where, self.prefix = where, prefix
        self.turns: list[Turn] = []
        self.task: str | None = None
        self.task_event: Any = None
        self.system: dict | None = None
        self.model: str | None = None
        self.finished = False
        self.first_ts: datetime | None = None
        self._acks: set[int] = set()  # turns of actions whose answer is only an acknowledgement
        self._meta: dict[int, dict] = {}  # turn index -> its metadata, serialized once the walk is done
        self._walk(history)
        for idx, meta in self._meta.items():
            meta = {k: v for k, v in meta.items() if v is not None}
            self.turns[idx].metadata = dumps(meta) if meta else None

    def _walk(self, history: list) -> None:
        open_calls: dict[str, tuple[int, datetime | None]] = {}  # call id (else event id) -> (turn, its time)
        for i, ev in enumerate(history):
            loc = f"{self.prefix}[{i}]"
            if not isinstance(ev, dict):
                raise RecordError("malformed_event", f"{self.where} {loc}: expected an event object, got {type(ev).__name__}")
            kind = ev.get("kind")
            when = parse_time(ev.get("timestamp"))
            if self.first_ts is None and when is not None:
                self.first_ts = when
            if kind == "SystemPromptEvent":
                self.system = ev
            elif kind == "MessageEvent":
                self._message(ev, loc)
            elif kind == "ActionEvent":
                self._action(ev, loc, when, open_calls)
            elif kind in _ANSWERS:
                self._answer(ev, kind, loc, when, open_calls)
        for idx, _ in open_calls.values():
            if idx not in self._acks:
                self.turns[idx].kind = "message"
                self._meta[idx]["result_missing"] = True

    def _message(self, ev: dict, loc: str) -> None:
        msg = ev.get("llm_message") if isinstance(ev.get("llm_message"), dict) else {}
        text = as_text(msg.get("content")) or ""
        source = ev.get("source") or msg.get("role")
        if source == "user":
            if self.task is None and not self.turns:
                self.task, self.task_event = text, {"id": ev.get("id"), "locator": loc}
            else:
                self.turns.append(Turn(kind="user", action=text, observation_kind="none", locator=loc))
        else:
            reasoning = as_text(msg.get("reasoning_content"))
            self.turns.append(Turn(kind="message", action=text, thought=reasoning, observation_kind="none", locator=loc))

    def _action(self, ev: dict, loc: str, when: datetime | None, open_calls: dict) -> None:
        action = ev.get("action") if isinstance(ev.get("action"), dict) else {}
        akind = action.get("kind")
        call = ev.get("tool_call") if isinstance(ev.get("tool_call"), dict) else {}
        name = ev.get("tool_name") or call.get("name")
        args = loose_json(call.get("arguments")) if call.get("arguments") is not None else {
            k: v for k, v in action.items() if k != "kind"}
        text = action.get("command") if akind in _SHELL_ACTIONS and isinstance(action.get("command"), str) else render_call(name, args)
        thought = "\n\n".join(p for p in (as_text(ev.get("reasoning_content")), as_text(ev.get("thought"))) if p) or None
        self.finished = self.finished or akind == "FinishAction"
        self.turns.append(Turn(
            kind="message" if akind in _ACK_ACTIONS else "env", action=text, observation_kind="none", tool_name=name,
            tool_args=dumps(args) if args is not None else None, tool_call_id=ev.get("tool_call_id") or call.get("id"),
            thought=thought, started_at=when, locator=loc,
        ))
        idx = len(self.turns) - 1
        self._meta[idx] = {"action_kind": akind}
        if akind in _ACK_ACTIONS:
            self._acks.add(idx)
        key = ev.get("tool_call_id") or call.get("id") or ev.get("id")
        if key is not None:
            open_calls[str(key)] = (idx, when)

    def _answer(self, ev: dict, kind: str, loc: str, when: datetime | None, open_calls: dict) -> None:
        obs = ev.get("observation") if isinstance(ev.get("observation"), dict) else {}
        if kind == "ObservationEvent":
            text = as_text(obs.get("content"))
            is_error = obs.get("is_error") if isinstance(obs.get("is_error"), bool) else None
            okind = obs.get("kind")
            meta: dict[str, Any] = {"observation_kind": okind} if okind else {}
            if "content" not in obs and "output" in obs:
                # the SDK's earlier observations (e.g. ExecuteBashObservation): `output` text parts and an
                # `error` string; with an error set, the agent was shown the error instead of the output
                text, error = as_text(obs.get("output")), obs.get("error")
                if isinstance(error, str) and error:
                    if text:
                        meta["output"] = text
                    text, is_error = error, True
                elif "error" in obs:
                    is_error = False
            obs_kind = ("error" if is_error else "stdout" if okind in _SHELL_OBS
                        else "file_view" if okind in _FILE_OBS else "tool_result")
            code = obs.get("exit_code")
            exit_code = code if isinstance(code, int) and not isinstance(code, bool) else None
            if exit_code == RUNNING:  # as for V0: still running, no exit status
                exit_code = None
                meta["command_running"] = True
            if exit_code is not None and exit_code != 0:
                is_error = True  # as for V0 commands: a non-zero exit is an error turn
        elif kind == "UserRejectObservation":
            text, is_error, obs_kind, exit_code = ev.get("rejection_reason"), None, "user_reply", None
            meta = {"rejected": True, "rejection_source": ev.get("rejection_source")}
        else:  # AgentErrorEvent: the scaffold could not run the call
            text, is_error, obs_kind, exit_code = ev.get("error"), True, "error", None
            meta = {"agent_error": True}
        # every answer kind carries the call's id; an action logged without one is keyed by its event id
        hit = next((open_calls.pop(str(k)) for k in (ev.get("tool_call_id"), ev.get("action_id"))
                    if k is not None and str(k) in open_calls), None)
        if hit is None:
            self.turns.append(Turn(kind="env", observation=text, observation_kind=obs_kind, tool_name=ev.get("tool_name"),
                                   tool_call_id=ev.get("tool_call_id"), exit_code=exit_code, is_error=is_error,
                                   started_at=when, locator=loc))
            self._meta[len(self.turns) - 1] = {**meta, "call_missing": True}
            return
        idx, started = hit
        t = self.turns[idx]
        if idx in self._acks:  # `Finish` / `Think` acknowledged: no environment output
            t.locator = f"{t.locator}+{loc}"
            return
        t.observation, t.observation_kind, t.exit_code, t.is_error = text, obs_kind, exit_code, is_error
        t.locator = f"{t.locator}+{loc}"
        if started is not None and when is not None:
            t.duration_s = round(max(0.0, (when - started).total_seconds()), 6)
        self._meta[idx].update(meta)

    def action_space(self) -> str | None:
        tools = self.system.get("tools") if self.system else None
        return dumps(tools) if tools else None

    def version(self) -> str | None:
        return None

    def outcome(self) -> str | None:
        return "finished" if self.finished else None

    def meta(self) -> dict[str, Any]:
        m: dict[str, Any] = {"events": "openhands-v1"}
        if self.system:
            prompt = self.system.get("system_prompt")
            m["system_prompt"] = as_text([prompt] if isinstance(prompt, dict) else prompt)  # a TextContent
        if self.task_event:
            m["task_event"] = self.task_event
        return m


_EVENT_FILE = re.compile(r"^event-(\d{5,})-[0-9a-fA-F\-]{8,}\.json$")  # `EVENT_FILE_PATTERN`: event-{idx:05d}-{id}.json
MAX_EVENT_BYTES = 64 << 20


def event_files(directory: Path, pattern: re.Pattern[str] = _EVENT_FILE) -> list[Path]:
    """The files of `directory/events` whose names `pattern` matches, in the order of the number its
    first group captures (the event index or id: as text, event 10 would sort before event 2)."""
    events = directory / "events"
    if not events.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in events.iterdir() if (m := pattern.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]


class OpenHandsConversationImporter(Importer):
    """A persisted V1 conversation (`ConversationState` persistence): `base_state.json` and one file per
    event in `events/` (`event-<index>-<event id>.json`), read in index order into one trajectory."""

    name = "openhands-conversation"
    container = "dir"

    def sniff(self, directory: Path) -> bool:
        return (directory / "base_state.json").is_file() and bool(event_files(directory))

    def consumes(self, directory: Path) -> list[Path]:
        return [directory / "base_state.json", *event_files(directory)]

    def split(self, directory: Path, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        yield "$", directory

    def convert(self, directory: Path, locator: str, ctx: ImportContext) -> Trajectory:
        state = load_json_file(directory / "base_state.json", "base_state.json", MAX_EVENT_BYTES)
        state = state if isinstance(state, dict) else {}
        files = event_files(directory)
        events = [load_json_file(p, f"events/{p.name}", MAX_EVENT_BYTES) for p in files]
        s = V1Stream(events, "events", "events")
        agent = state.get("agent") if isinstance(state.get("agent"), dict) else {}
        llm = agent.get("llm") if isinstance(agent.get("llm"), dict) else {}
        status = state.get("execution_status")
        meta = {**s.meta(), "event_files": len(files), "execution_status": status,
                "max_iterations": state.get("max_iterations")}
        return Trajectory(
            domain=ctx.domain("swe"),
            source_format=self.name,
            native_id=str(state["id"]) if state.get("id") is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=s.turns,
            task=s.task,
            action_space=s.action_space(),
            agent=AGENT,
            model=llm.get("model") if isinstance(llm.get("model"), str) else None,
            outcome=str(status) if status else s.outcome(),
            collected_at=s.first_ts,
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
            locator=locator,
        )
