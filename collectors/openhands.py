"""OpenHands event streams (`save_trajectory_path` dumps) and evaluation `output.jsonl` rows.

A turn is an action event and the observation whose `cause` is the action's `id`. An observation
with no `cause` answers the unanswered action with its `tool_call_metadata.tool_call_id`; failing
that, a delegate's result (`AgentDelegateObservation`, which `end_delegate` adds with no `cause`, only
the delegate action's tool call id, and older versions without even that) answers the latest delegate
action still unanswered (delegations nest: the innermost ends first). Actions that
got no observation, or only a `null`/`think` acknowledgement (`message`, `finish`, `think`, ...),
are kept as `kind="message"` turns (`kind="user"` for the user's messages). Observations that
answer no action (an `error` raised when the agent's tool call could not be parsed) are `env`
turns with no action, so that no environment output is lost.

Not turns, but kept in trajectory metadata: the first user message before any agent turn (it is
the `task`), the `system` action (its prompt goes to metadata, its `tools` to `action_space`) and
the harness' agent-state bookkeeping (`change_agent_state`, `agent_state_changed`). Not a turn either:
the `recall` the controller makes of each user message (its `query` is the message) when it found
nothing (`NullObservation`, an empty `RecallObservation`, or no answer); it is noted as `recall` on the
message it repeats (`task_event`, or that user turn's metadata) so that the message is not there twice.
A recall that found something (workspace context, microagent knowledge) is an `env` turn.

V1 rows (the software-agent-sdk's events, typed by `kind`) are walked by `collectors.openhands_v1`
into the same turns.

Older histories have no ids: eval rows stored `[action, observation]` pairs, and some resolver
outputs have bare dicts (`command`, `exit_code`, `content` at top level). Pairs are taken as they
are, except `[NullAction, observation]` (how `get_pairs_from_events` pairs an observation that
answers no action): that observation is an unpaired `env` turn. Histories with no `cause` anywhere
pair each observation with the action just before it. Resolver rows written with
`dataclasses.asdict(event)` are typed by `action`/`observation` but have no `source`, `args` or
`extras`: the event's own fields are read as its `args`/`extras` (a command's `metadata` holds its
exit code and working directory), and the first message is the task. Exit code -1 is OpenHands' mark
of a command that had not exited when its output was taken (a timeout, a server left running): the
turn records no exit code and `metadata.command_running` (V0 and V1 alike).

An eval row's outcome: `resolved`/`unresolved` where SWE-bench-style evaluation reports it, else
`success`/`failure` from a scored `test_result` (GAIA's bool `score`, MiniWoB's `reward`; reward 1.0
is success) or the resolver's `success`, else `error`, else how the agent stopped.

A persisted V0 session directory (`events/<id>.json`, `event_cache/`, `metadata.json`) is one
trajectory (`OpenHandsSessionImporter`).

Domain: always "swe" (overridable with `ingest --domain`). OpenHands is a software-engineering
agent whose action space always includes file editing; which tools one session happened to use
does not change the kind of environment, so the domain does not depend on the events.

Timestamps are written by OpenHands without a zone (`datetime.now()` in containers that run on
UTC); they are read as UTC.
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
    expect_object,
    load_json_file,
    loose_json,
    object_at,
    outcome_of,
    parse_time,
)
from collectors.openhands_v1 import AGENT, MAX_EVENT_BYTES, RUNNING, V1Stream, event_files, is_v1_history
from schemas.records import RecordError, Trajectory, Turn, dumps

# Observation types that are not environment output.
_HARNESS_OBS = {"agent_state_changed"}
_ACK_OBS = {"null", "think"}  # "No observation" / "Your thought has been logged."
_HARNESS_ACTIONS = {"change_agent_state"}

_OBS_KIND = {
    "run": "stdout",
    "run_ipython": "stdout",
    "read": "file_view",
    "edit": "file_view",
    "write": "file_view",
    "error": "error",
    "user_rejected": "user_reply",
}
_AXTREE = re.compile(r"RootWebArea|^\s*\[\d+\] \w+ '", re.M)
# Keys that never tell an action apart (shown in `thought`, or OpenHands bookkeeping).
_ARG_NOISE = {
    "thought",
    "is_input",
    "blocking",
    "hidden",
    "confirmation_state",
    "is_confirmed",
    "keep_prompt",
    "security_risk",
    "impl_source",
}




def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _is_history(history: Any) -> bool:
    """An eval/resolver history: events, old `[action, observation]` pairs, or bare dicts. Chat
    messages (`role`) are not OpenHands history."""
    if not isinstance(history, list) or not history:
        return False
    head = history[0]
    if isinstance(head, list | tuple):
        return len(head) == 2 and all(isinstance(x, dict) for x in head)
    return isinstance(head, dict) and "role" not in head


# ---------------------------------------------------------------------------------------------
# Events: what each one is, whatever the OpenHands version.


def _is_bare(ev: dict, role: str) -> bool:
    """A `dataclasses.asdict` event (resolver output): typed by `action`/`observation` like a
    serialized one, but with its fields at top level instead of in `args`/`extras`, and without the
    bookkeeping `event_to_dict` adds (`id`, `source`, `timestamp` are not dataclass fields)."""
    if not isinstance(ev.get(role), str) or ("args" if role == "action" else "extras") in ev:
        return False
    return not any(k in ev for k in ("id", "source", "timestamp"))


def _args(ev: dict) -> dict:
    """An action's arguments: `args`, or a bare dict's own fields (what `event_to_dict` puts in `args`)."""
    a = ev.get("args")
    if isinstance(a, dict):
        return a
    return {k: v for k, v in ev.items() if k != "action"} if _is_bare(ev, "action") else {}


def _extras(ev: dict) -> dict:
    """An observation's extras: `extras`, or a bare dict's own fields (what `event_to_dict` puts in
    `extras`: all but `observation` and `content`, e.g. a command's `metadata`)."""
    x = ev.get("extras")
    if isinstance(x, dict):
        return x
    if _is_bare(ev, "observation"):
        return {k: v for k, v in ev.items() if k not in ("observation", "content")}
    return {}


def _is_null_action(ev: dict) -> bool:
    """`NullAction`: what `get_pairs_from_events` pairs an observation that answers no action with."""
    return ev.get("action") == "null"


def _arg(ev: dict, key: str) -> Any:
    """An action argument: in `args`, or at top level in bare legacy dicts."""
    a = _args(ev)
    return a[key] if key in a else ev.get(key)


def _extra(ev: dict, key: str) -> Any:
    """An observation extra: `extras.metadata` (>= 0.16), `extras`, or top level (legacy bare dicts)."""
    x = _extras(ev)
    meta = x.get("metadata")
    if isinstance(meta, dict) and meta.get(key) is not None:
        return meta[key]
    if x.get(key) is not None:
        return x[key]
    return ev.get(key)


def _role(ev: dict, where: str) -> str:
    """'action' or 'observation'; bare legacy dicts are told apart by their fields."""
    if "action" in ev:
        return "action"
    if "observation" in ev:
        return "observation"
    if "exit_code" in ev:
        return "observation"
    if any(k in ev for k in ("content", "output")):
        return "action" if ev.get("source") == "user" else "observation"  # a user's message is no output
    if any(k in ev for k in ("command", "code", "path", "url", "thought")):
        return "action"
    raise RecordError("malformed_event", f"{where}: event has neither an action nor an observation")


def _action_type(ev: dict) -> str:
    t = ev.get("action")
    if isinstance(t, str):
        return t
    if _arg(ev, "command") is not None:
        return "run"
    if _arg(ev, "code") is not None:
        return "run_ipython"
    if _arg(ev, "url") is not None:
        return "browse"
    if _arg(ev, "path") is not None:
        return "read"
    return "message"


def _obs_type(ev: dict) -> str:
    t = ev.get("observation")
    if isinstance(t, str):
        return t
    if _extra(ev, "exit_code") is not None or ev.get("command") is not None:
        return "run"
    return "unknown"


# The three importers read one `_Stream`: 2: a cause-less observation answers the action with its tool call id,
# a delegate's result its delegation; 3: a recall that found nothing is a note on the user message it repeats
STREAM_VERSION = "3"


def _check_ids(ev: dict, where: str) -> None:
    """Events are paired by `id`, `cause` and tool call id: a list or an object there names the event."""
    tcm = ev.get("tool_call_metadata")
    for field, value in (("id", ev.get("id")), ("cause", ev.get("cause")),
                         ("tool_call_metadata.tool_call_id", tcm.get("tool_call_id") if isinstance(tcm, dict) else None)):
        if isinstance(value, (list, dict)):
            raise RecordError("malformed_event", f"{where}: '{field}' must be a number or text, got {type(value).__name__}")


def _call_id(ev: dict) -> Any:
    """The `tool_call_metadata.tool_call_id` an action carries, and the observation that answers it."""
    tcm = ev.get("tool_call_metadata")
    return tcm.get("tool_call_id") if isinstance(tcm, dict) else None


def _tool_call(ev: dict) -> tuple[str | None, Any, str | None, dict]:
    """(function name, arguments, tool_call_id, extras) from `tool_call_metadata`."""
    tcm = ev.get("tool_call_metadata")
    if not isinstance(tcm, dict):
        return None, None, None, {}
    name, call_id = tcm.get("function_name"), tcm.get("tool_call_id")
    arguments: Any = None
    mr = object_at(tcm, "model_response")
    choices = mr.get("choices")
    for choice in choices if isinstance(choices, list) else []:
        msg = choice.get("message") if isinstance(choice, dict) else None
        calls = msg.get("tool_calls") if isinstance(msg, dict) else None
        for tc in calls or []:
            if isinstance(tc, dict) and tc.get("id") == call_id and isinstance(tc.get("function"), dict):
                arguments = loose_json(tc["function"].get("arguments"))
    extra = {
        "model_response_id": mr.get("id"),
        "model": mr.get("model"),
        "usage": mr.get("usage"),
        "total_calls_in_response": tcm.get("total_calls_in_response"),
    }
    return name, arguments, call_id, {k: v for k, v in extra.items() if v is not None}


def _text(value: Any) -> str | None:
    t = as_text(value)
    return t if t else None


def _action_text(ev: dict, atype: str, tool_name: str | None, tool_args: Any) -> str | None:
    """The canonical action: the command or code itself for shells, the message for messages,
    `name {json args}` for other structured calls."""
    if atype == "run":
        return _text(_arg(ev, "command"))
    if atype == "run_ipython":
        return _text(_arg(ev, "code"))
    if atype == "browse":
        return _text(_arg(ev, "url"))
    if atype == "browse_interactive":
        return _text(_arg(ev, "browser_actions"))
    if atype in ("message", "system"):
        return _text(_arg(ev, "content")) or _text(ev.get("message"))
    if atype == "think":
        return _text(_arg(ev, "thought")) or _text(ev.get("message"))
    if atype == "finish":
        outputs = _arg(ev, "outputs")  # `{}` by default: no output given, not the text "{}"
        return _text(_arg(ev, "final_thought")) or _text(ev.get("message")) or (_text(outputs) if outputs else None)
    if atype == "recall":
        return _text(_arg(ev, "query"))
    if tool_args is not None:
        return f"{tool_name or atype} {dumps(tool_args)}"
    args = {k: v for k, v in _args(ev).items() if k not in _ARG_NOISE}
    if args:
        return f"{atype} {dumps(args)}"
    return _text(ev.get("message"))


def _mcp_is_error(content: str | None) -> bool:
    result = loose_json(content) if content and content.lstrip().startswith("{") else None
    return isinstance(result, dict) and result.get("isError") is True


def _obs_kind(otype: str, content: str | None, ev: dict) -> str:
    if otype in _OBS_KIND:
        return _OBS_KIND[otype]
    if otype.startswith("browse") or otype == "browser_output":
        if (content and _AXTREE.search(content[:20000])) or _extras(ev).get("axtree_object"):
            return "accessibility_tree"
    return "tool_result"


# ---------------------------------------------------------------------------------------------
# Pairing, shared by both importers.


class _Stream:
    """Walks one list of events and collects turns plus what the trajectory needs."""

    def __init__(self, history: list, where: str, prefix: str):
        self.where = where
        self.prefix = prefix  # turn locators: f"{prefix}[i]"
        self.turns: list[Turn] = []
        self.task: str | None = None
        self.task_event: Any = None
        self.system: dict | None = None
        self.agent_states: list[dict] = []
        self.finished = False
        self.model: str | None = None
        self.first_ts: datetime | None = None
        # the user's latest message, while it is the last thing kept: (its text, the dict a recall of it is
        # noted in, its turn if it is one, the turn count after it)
        self._said: tuple[str, dict, Turn | None, int] | None = None
        self._walk(history)

    def _loc(self, i: int, sub: int | None = None) -> str:
        return f"{self.prefix}[{i}]" + (f"[{sub}]" if sub is not None else "")

    def _walk(self, history: list) -> None:
        entries: list[tuple[str, dict, str]] = []  # (role, event, locator)
        pairs: dict[int, int] = {}  # action entry -> observation entry
        for i, h in enumerate(history):
            if isinstance(h, list | tuple):  # old eval output: [action, observation]
                if len(h) != 2 or not all(isinstance(x, dict) for x in h):
                    raise RecordError(
                        "malformed_event",
                        f"{self.where} {self._loc(i)}: expected an [action, observation] pair",
                    )
                for sub, ev in enumerate(h):
                    _check_ids(ev, f"{self.where} {self._loc(i, sub)}")
                if _is_null_action(h[0]):  # an observation without its action: no action to pair it with
                    entries.append(("observation", h[1], self._loc(i, 1)))
                    continue
                entries.append(("action", h[0], self._loc(i, 0)))
                entries.append(("observation", h[1], self._loc(i, 1)))
                pairs[len(entries) - 2] = len(entries) - 1
            elif isinstance(h, dict):
                _check_ids(h, f"{self.where} {self._loc(i)}")
                entries.append((_role(h, f"{self.where} {self._loc(i)}"), h, self._loc(i)))
            else:
                raise RecordError(
                    "malformed_event",
                    f"{self.where} {self._loc(i)}: expected an event object, got {type(h).__name__}",
                )
        has_cause = any(ev.get("cause") is not None for _, ev, _ in entries)
        action_at: dict[Any, int] = {}
        for k, (role, ev, _) in enumerate(entries):
            if role == "action" and ev.get("id") is not None:
                action_at.setdefault(ev["id"], k)
        paired_obs = set(pairs.values())

        def pair(a: int | None, k: int) -> None:
            if a is not None and a not in pairs:
                pairs[a] = k
                paired_obs.add(k)

        causeless: list[int] = []
        calls: dict[Any, list[int]] = {}  # action entries by tool call id
        delegates: list[int] = []
        for k, (role, ev, _) in enumerate(entries):
            if role == "action":
                if (call_id := _call_id(ev)) is not None:
                    calls.setdefault(call_id, []).append(k)
                if _action_type(ev) == "delegate":
                    delegates.append(k)
        for k, (role, ev, _) in enumerate(entries):
            if role != "observation" or k in paired_obs:
                continue
            c = ev.get("cause") if has_cause else None
            if c is None:
                causeless.append(k)
                continue
            a = action_at.get(c)
            pair(a if a is not None and a < k else None, k)
        # then what answers an action without naming it: every `cause` has had its pick
        for k in causeless:
            ev = entries[k][1]
            a = self._answered(ev, k, calls, delegates, pairs)
            prev = k - 1  # no ids: an observation answers the action just before it (a state change none)
            after_action = prev >= 0 and entries[prev][0] == "action" and prev not in pairs
            if a is None and not has_cause and after_action and _obs_type(ev) not in _HARNESS_OBS:
                a = prev
            pair(a, k)
        for k, (role, ev, loc) in enumerate(entries):
            self._note(ev)
            if role == "action":
                o = pairs.get(k)
                self._action(
                    ev,
                    loc,
                    entries[o][1] if o is not None else None,
                    entries[o][2] if o is not None else None,
                )
            elif k not in paired_obs:
                self._orphan(ev, loc)

    @staticmethod
    def _answered(
        obs: dict, k: int, calls: dict[Any, list[int]], delegates: list[int], pairs: dict[int, int]
    ) -> int | None:
        """The action a cause-less observation at `k` answers, found another way: the latest unanswered
        action before it with its tool call id (`calls`: action entries by id), else, for an
        `AgentDelegateObservation` (`end_delegate` gives it no cause, only the delegate action's
        `tool_call_metadata`, and older versions not even that), the latest delegate action still
        unanswered (delegations nest: the innermost ends first)."""
        call_id = _call_id(obs)
        candidates = [calls.get(call_id, []) if call_id is not None else []]
        if _obs_type(obs) == "delegate":
            candidates.append(delegates)
        for found in candidates:
            for a in reversed(found):
                if a < k and a not in pairs:
                    return a
        return None

    def _note(self, ev: dict) -> None:
        ts = parse_time(ev.get("timestamp"))
        if ts is not None and (self.first_ts is None or ts < self.first_ts):
            self.first_ts = ts
        if self.model is None:
            m = _tool_call(ev)[3].get("model")
            if isinstance(m, str):
                self.model = m

    def _action(self, ev: dict, loc: str, obs: dict | None, obs_loc: str | None) -> None:
        atype = _action_type(ev)
        source = ev.get("source")
        if atype in _HARNESS_ACTIONS:
            self.agent_states.append({"id": ev.get("id"), "state": _arg(ev, "agent_state"), "action": atype})
            return
        if atype == "system":
            self.system = ev
            return
        if atype == "finish":
            self.finished = True
        # bare dicts have no `source`; the resolver's history opens with the user's instruction
        by_user = source == "user" or _is_bare(ev, "action")
        if atype == "message" and by_user and self.task_event is None and not self.turns:
            self.task_event = {
                "id": ev.get("id"),
                "locator": loc,
                "image_urls": _arg(ev, "image_urls") or None,
            }
            self.task = _text(_arg(ev, "content")) or _text(ev.get("message"))
            self._said = (self.task, self.task_event, None, 0) if self.task else None
            return
        otype = _obs_type(obs) if obs is not None else None
        env = obs is not None and otype not in _ACK_OBS and otype not in _HARNESS_OBS
        if atype == "recall" and self._recalled_nothing(ev, loc, obs, obs_loc):
            return
        tool_name, tool_args, call_id, tc_extra = _tool_call(ev)
        if tool_args is None and (env or tool_name):
            plain = {k: v for k, v in _args(ev).items() if k not in _ARG_NOISE}
            tool_args = plain or None
        if env and tool_name is None:
            tool_name = atype
        thought = None if atype == "think" else _text(_arg(ev, "thought"))
        meta: dict[str, Any] = {
            "action_type": atype,
            "action_id": ev.get("id"),
            "source": source,
        }
        leftover = {
            k: v
            for k, v in _args(ev).items()
            if k != "thought" and not (isinstance(tool_args, dict) and tool_args.get(k) == v)
        }
        if leftover:
            meta["args"] = leftover
        if ev.get("message"):
            meta["message"] = ev["message"]
        if tc_extra:
            meta["tool_call"] = tc_extra
        if ev.get("llm_metrics") is not None:
            meta["llm_metrics"] = ev["llm_metrics"]
        turn = Turn(
            kind="env" if env else ("user" if source == "user" else "message"),
            action=_action_text(ev, atype, tool_name, tool_args),
            tool_name=tool_name,
            tool_args=dumps(tool_args) if tool_args is not None else None,
            tool_call_id=call_id,
            thought=thought,
            started_at=parse_time(ev.get("timestamp")),
            locator=loc,
            observation_kind="none",
        )
        if obs is not None and env:
            self._fill(turn, obs, meta)
            turn.locator = f"{loc}+{obs_loc}"
            a_ts, o_ts = turn.started_at, parse_time(obs.get("timestamp"))
            if a_ts is not None and o_ts is not None and o_ts >= a_ts:
                turn.duration_s = (o_ts - a_ts).total_seconds()
        elif obs is not None:  # an acknowledgement: keep it, but it is not environment output
            meta["ack"] = {
                "observation": otype,
                "id": obs.get("id"),
                "content": obs.get("content") or None,
                "locator": obs_loc,
            }
        turn.metadata = dumps(meta)
        self.turns.append(turn)
        if atype == "message" and turn.kind == "user" and turn.action:
            self._said = (turn.action, meta, turn, len(self.turns))

    def _recalled_nothing(self, ev: dict, loc: str, obs: dict | None, obs_loc: str | None) -> bool:
        """A `RecallAction` that found nothing, of the user message kept just before it: noted on that
        message (the task's event, or its turn) instead of repeating it as a turn. The controller recalls
        each user message (its `query`); `Memory` answers `NullObservation(content='')` when no repo
        info or microagent matched. A recall that found something (a `RecallObservation` with content or
        knowledge) stays an env turn."""
        said = self._said
        if said is None or said[3] != len(self.turns):
            return False
        text, holder, turn, _ = said
        if (_text(_arg(ev, "query")) or "").strip() != text.strip():
            return False
        if obs is not None and _obs_type(obs) not in _ACK_OBS:
            found = any(v for k, v in _extras(obs).items() if k != "recall_type")
            if _obs_type(obs) != "recall" or found or _text(obs.get("content")):
                return False
        note = {
            "id": ev.get("id"),
            "locator": loc,
            "recall_type": _arg(ev, "recall_type"),
            "source": ev.get("source"),
            "observation": _obs_type(obs) if obs is not None else None,
            "observation_id": obs.get("id") if obs is not None else None,
            "observation_locator": obs_loc,
        }
        holder["recall"] = {k: v for k, v in note.items() if v is not None}
        if turn is not None:
            turn.metadata = dumps(holder)
        self._said = None  # one recall per message
        return True

    def _fill(self, turn: Turn, obs: dict, meta: dict) -> None:
        otype = _obs_type(obs)
        content = as_text(obs.get("content"))
        if content is None and obs.get("output") is not None:
            content = as_text(obs.get("output"))
        exit_code = _int(_extra(obs, "exit_code"))
        if exit_code == RUNNING:  # no exit status: the command was still running (a timeout, an interactive one)
            exit_code = None
            meta["command_running"] = True
        kind = _obs_kind(otype, content, obs)
        err = (
            otype == "error"
            or (exit_code is not None and exit_code != 0)
            or _extras(obs).get("error") is True
            or (kind == "file_view" and (content or "").startswith("ERROR:"))
            # an MCP tool's result, which OpenHands stores as its JSON: an in-band tool error (kind stays tool_result)
            or (otype == "mcp" and _mcp_is_error(content))
        )
        state = {}
        for key in ("working_dir", "path", "url"):
            v = _extra(obs, key)
            if isinstance(v, str) and v:
                state[key] = v
        turn.observation = content
        turn.observation_kind = kind
        turn.exit_code = exit_code
        turn.is_error = err
        turn.state = dumps(state) if state else None
        meta["observation_type"] = otype
        meta["observation_id"] = obs.get("id")
        if obs.get("extras"):
            meta["extras"] = obs["extras"]
        elif extras := _extras(obs):  # a bare dict's own fields
            meta["extras"] = extras
        if obs.get("success") is not None:
            meta["success"] = obs["success"]
        if obs.get("message") and obs.get("message") != content:
            meta["observation_message"] = obs["message"]

    def _orphan(self, ev: dict, loc: str) -> None:
        otype = _obs_type(ev)
        if otype in _HARNESS_OBS:
            self.agent_states.append({"id": ev.get("id"), "state": _extra(ev, "agent_state")})
            return
        if otype in _ACK_OBS:
            return
        turn = Turn(kind="env", started_at=parse_time(ev.get("timestamp")), locator=loc)
        meta: dict[str, Any] = {"unpaired": True, "source": ev.get("source"), "cause": ev.get("cause")}
        self._fill(turn, ev, meta)
        turn.metadata = dumps(meta)
        self.turns.append(turn)

    # -- trajectory-level fields ---------------------------------------------------------------

    def action_space(self) -> str | None:
        tools = _arg(self.system, "tools") if self.system else None
        return dumps(loose_json(tools)) if tools else None

    def agent_class(self) -> str | None:
        return _arg(self.system, "agent_class") if self.system else None

    def version(self) -> str | None:
        return _arg(self.system, "openhands_version") if self.system else None

    def outcome(self) -> str | None:
        """The last agent state the harness recorded, else `finished` if the agent finished."""
        for s in reversed(self.agent_states):
            if s.get("state"):
                return str(s["state"])
        return "finished" if self.finished else None

    def meta(self) -> dict[str, Any]:
        m: dict[str, Any] = {}
        if self.system:
            m["system_prompt"] = _arg(self.system, "content")
            m["agent_class"] = self.agent_class()
        if self.task_event:
            m["task_event"] = self.task_event
        if self.agent_states:
            m["agent_states"] = self.agent_states
        return m


# ---------------------------------------------------------------------------------------------


class OpenHandsEventsImporter(Importer):
    """A JSON list of events, as saved by `save_trajectory_path` or the trajectory API."""

    name = "openhands-events"
    version = "2"  # 2: a bare `finish` (no thought, message or outputs) has no action text, not "{}"
    container = "json"
    version = STREAM_VERSION

    def sniff(self, doc: Any) -> bool:
        if isinstance(doc, dict) and set(doc) == {"trajectory"}:
            doc = doc["trajectory"]
        if not isinstance(doc, list) or not doc or not isinstance(doc[0], dict):
            return False
        head = doc[0]
        return "source" in head and "id" in head and (("action" in head) != ("observation" in head))

    def convert(self, doc: Any, locator: str, ctx: ImportContext) -> Trajectory:
        if isinstance(doc, dict) and "trajectory" in doc:
            doc = doc["trajectory"]
        if not isinstance(doc, list):
            raise RecordError(
                "malformed_record", f"{locator}: expected a list of events, got {type(doc).__name__}"
            )
        s = _Stream(doc, locator, "")
        version = s.version()
        return Trajectory(
            domain=ctx.domain("swe"),
            source_format=self.name,
            native_id=None,
            record_digest=ctx.record_digest(locator),
            turns=s.turns,
            task=s.task,
            action_space=s.action_space(),
            agent=AGENT,
            model=s.model,
            outcome=s.outcome(),
            env_fingerprint=dumps({"openhands_version": version}) if version else None,
            collected_at=s.first_ts,
            metadata=dumps(s.meta()) if s.meta() else None,
            locator=locator,
        )


class OpenHandsOutputImporter(Importer):
    """Evaluation `output.jsonl` rows (and resolver outputs): one trajectory per line."""

    name = "openhands-output"
    version = "2"  # 2: a bare `finish` (no thought, message or outputs) has no action text, not "{}"
    container = "jsonl"
    version = STREAM_VERSION

    def sniff(self, row: Any) -> bool:
        if not isinstance(row, dict) or not isinstance(row.get("history"), list):
            return False
        if not any(k in row for k in ("instance_id", "task_id", "issue")):  # task_id: HumanEvalFix, BIRD
            return False
        if not any(k in row for k in ("instruction", "test_result", "git_patch", "metadata")):
            return False
        return not row["history"] or _is_history(row["history"])

    def convert(self, row: Any, locator: str, ctx: ImportContext) -> Trajectory:
        expect_object(row, locator)
        history = row.get("history")
        if not isinstance(history, list):
            raise RecordError("missing_field", f"{locator}: field 'history' is missing or not a list")
        s = V1Stream(history, locator, "history") if is_v1_history(history) else _Stream(history, locator, "history")
        meta_in = object_at(row, "metadata")
        llm = object_at(meta_in, "llm_config") or object_at(meta_in, "llm")  # V1 `EvalMetadata.llm`
        issue = row.get("issue") if isinstance(row.get("issue"), dict) else None
        native = row["instance_id"] if row.get("instance_id") is not None else row.get("task_id")
        if native is None and issue:
            native = (
                "/".join(str(issue[k]) for k in ("owner", "repo", "number") if issue.get(k) is not None)
                or None
            )
        outcome, reward = self._outcome(row, s)
        fingerprint = {
            "openhands_version": s.version(),
            "git_commit": meta_in.get("git_commit"),
        }
        fingerprint = {k: v for k, v in fingerprint.items() if v}
        meta = s.meta()
        meta.update({k: v for k, v in row.items() if k not in ("history", "instruction")})
        return Trajectory(
            domain=ctx.domain("swe"),
            source_format=self.name,
            native_id=str(native) if native is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=s.turns,
            task=_text(row.get("instruction")) or s.task,
            action_space=s.action_space(),
            agent=AGENT,
            model=llm.get("model") or meta_in.get("model_name") or row.get("model") or s.model,
            outcome=outcome,
            reward=reward,
            env_fingerprint=dumps(fingerprint) if fingerprint else None,
            collected_at=s.first_ts or parse_time(meta_in.get("start_time")),
            metadata=dumps(meta),
            locator=locator,
        )

    @staticmethod
    def _outcome(row: dict, s: _Stream) -> tuple[str | None, float | None]:
        """Resolved / success when the row was evaluated, else error, else how the agent stopped."""
        tr = object_at(row, "test_result")
        for holder in (tr.get("report"), row.get("report"), tr, row):
            if isinstance(holder, dict) and isinstance(holder.get("resolved"), bool):
                return ("resolved" if holder["resolved"] else "unresolved"), float(holder["resolved"])
        # benchmarks scored otherwise: GAIA's `question_scorer` verdict, MiniWoB/WebArena's env reward
        score, reward = tr.get("score"), tr.get("reward")
        if isinstance(score, bool):
            return outcome_of(float(score)), float(score)
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            return outcome_of(float(reward)), float(reward)
        if isinstance(row.get("success"), bool):  # resolver output
            return ("success" if row["success"] else "failure"), float(row["success"])
        if row.get("error"):
            return "error", None
        return s.outcome(), None


# ---------------------------------------------------------------------------------------------
# A persisted V0 session: `sessions/<sid>/` (or `users/<uid>/conversations/<sid>/`).

_SESSION_EVENT = re.compile(r"^(\d+)\.json$")  # `get_conversation_event_filename`: events/{id}.json
_CACHE_PAGE = re.compile(r"^\d+-\d+\.json$")  # `EventStore._get_filename_for_cache`: event_cache/{start}-{end}.json
# the session's other files (`openhands/storage/locations.py`): the server's state and settings, no
# trajectory (init.json may hold API keys): claimed so that they are not quarantined, never read
_SESSION_STATE = ("init.json", "agent_state.pkl", "llm_registry.json", "conversation_stats.pkl", "exp_config.json")
# what of `metadata.json` (`ConversationMetadata`) says something about the run; user ids are left out
_SESSION_KEYS = ("conversation_id", "title", "selected_repository", "selected_branch", "git_provider", "trigger",
                 "pr_number", "created_at", "last_updated_at", "llm_model", "accumulated_cost", "prompt_tokens",
                 "completion_tokens", "total_tokens")


def _session_event_files(directory: Path) -> list[Path]:
    """`events/<id>.json`, in id order (the order `EventStore` reads them back)."""
    return event_files(directory, _SESSION_EVENT)


class OpenHandsSessionImporter(Importer):
    """A V0 session as `EventStream.add_event` persists it: one file per event (`events/<id>.json`),
    read in id order into one trajectory. `event_cache/<start>-<end>.json` pages repeat 25 events each
    and are claimed but not read again; `metadata.json` gives the title, model and creation time.
    Turn locators are positions in id order (`events[i]` is `events/<i>.json` when no id is missing)."""

    name = "openhands-session"
    version = "2"  # 2: a bare `finish` (no thought, message or outputs) has no action text, not "{}"
    container = "dir"
    version = STREAM_VERSION

    def sniff(self, directory: Path) -> bool:
        """Every directory walked is sniffed: one stat. Ids count from 0, so a session has event 0."""
        return (directory / "events" / "0.json").is_file()

    def consumes(self, directory: Path) -> list[Path]:
        cache = directory / "event_cache"
        pages = [p for p in cache.iterdir() if _CACHE_PAGE.match(p.name) and p.is_file()] if cache.is_dir() else []
        kept = [directory / name for name in ("metadata.json", *_SESSION_STATE)]
        return [*(p for p in kept if p.is_file()), *_session_event_files(directory), *pages]

    def split(self, directory: Path, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        yield "$", directory

    def convert(self, directory: Path, locator: str, ctx: ImportContext) -> Trajectory:
        files = _session_event_files(directory)
        events = [load_json_file(p, f"events/{p.name}", MAX_EVENT_BYTES) for p in files]
        meta_path = directory / "metadata.json"
        conv = load_json_file(meta_path, "metadata.json", MAX_EVENT_BYTES) if meta_path.is_file() else {}
        conv = conv if isinstance(conv, dict) else {}
        s = _Stream(events, "events", "events")
        version = s.version()
        llm_model = conv.get("llm_model")
        session = {k: conv[k] for k in _SESSION_KEYS if conv.get(k) is not None}
        meta = {**s.meta(), "event_files": len(files), **({"session": session} if session else {})}
        return Trajectory(
            domain=ctx.domain("swe"),
            source_format=self.name,
            native_id=str(conv.get("conversation_id") or directory.name),
            record_digest=ctx.record_digest(locator),
            turns=s.turns,
            task=s.task,
            action_space=s.action_space(),
            agent=AGENT,
            model=llm_model if isinstance(llm_model, str) and llm_model else s.model,
            outcome=s.outcome(),
            env_fingerprint=dumps({"openhands_version": version}) if version else None,
            collected_at=s.first_ts or parse_time(conv.get("created_at")),
            metadata=dumps(meta),
            locator=locator,
        )
