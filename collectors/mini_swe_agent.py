"""mini-swe-agent `*.traj.json` files: `{info, messages, trajectory_format: "mini-swe-agent-1*"}`.

One trajectory per file; the turns are read from the chat in `messages`, the only record of what ran.
A bare JSON array of those messages (no `info`, no `trajectory_format`: what mini's own test data
`tests/test_data/local.traj.json` holds) is read the same way, but only when it is unmistakably
mini's: every element a `{role, ...}` message, the first after the system prompt the user's task, and
a mini mark in it: a user reply in mini's `<returncode>N</returncode>` form right after an assistant
message with a ```` ```bash ```` block, a ```` ```mswea_bash_command ```` block, or the submit command
inside an assistant's block. Generic chat lists have none of these; `metadata.bare_messages` marks
such a trajectory (its `trajectory_format` and the `info` fields are null).
Two output formats exist and are read alike:
- "mini-swe-agent-1" (mini 1.x): the agent writes THOUGHT text and one ```` ```bash ```` block; the
  next user message is the harness's reply, rendered
  from the config's templates: `<returncode>N</returncode>` + `<output>...</output>` (or an elided
  `<warning>`/`<output_head>`/`<output_tail>` form), the timeout template, the format-error template
  (no or several blocks), or, for the submit command, the submission itself.
- "mini-swe-agent-1.1" (mini 2.x): assistant messages carry their parsed commands in `extra.actions`
  (text models, ```` ```mswea_bash_command ```` blocks) or as `tool_calls` (tool-call models, one or
  more `bash` calls answered by `role: "tool"` messages with `tool_call_id`); every result keeps
  `extra.returncode` and the untruncated `extra.raw_output`; a format error is a user message with
  `extra.interrupt_type: "FormatError"` (text models put the rejected reply in `extra.model_response`
  instead of an assistant message); the run ends with a `role: "exit"` message whose content is the
  submission.

Turns:
- each executed command with its result is one `env` turn (locator `messages[i]+messages[j]`): action =
  the command, thought = the assistant text around the block (the whole text for tool calls, on the
  first call of a message only), observation = the output (`extra.raw_output`, else the text inside
  `<output>`, else the reply verbatim with `metadata.output_elided`), `observation_kind` "stdout",
  `exit_code` from `extra.returncode` or `<returncode>`, `is_error` when it is non-zero; a timeout
  reply keeps its text, no exit code, `is_error` and `metadata.timeout`;
- the submit command (`echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, or the older
  `MINI_SWE_AGENT_FINAL_OUTPUT`) is the last env turn, its observation the submission (the v1 user
  reply or the v2 exit message), `metadata.submitted`; mini does not record its exit code;
- a reply that the harness rejected (format error) is a `message` turn keeping the assistant text in
  `action`, with `metadata.format_error`, the number of commands found and the harness's reply;
- a call whose result never arrives is a `message` turn that keeps the call (`metadata.result_missing`);
- a user's interruption in interactive runs (`extra.interrupt_type` in 2.x; the same fixed texts as plain
  user messages in 1.x): a command the user rejected in confirm mode (`UserRejection`, "Command(s) not
  executed. ...") never ran and is a `message` turn keeping the call, `metadata.rejected`; one stopped
  by Ctrl-C (`UserInterruption`) or a submit the user answered with a new task (`UserNewTask`) may have
  run, but mini kept no output: a `message` turn with `metadata.result_missing`; both carry
  `metadata.interrupt_type`, and the user's message follows them as a `user` turn (same
  `interrupt_type`). Tool calls get mini's "action was not executed" padding results first; those are
  not results;
- the first user message is the task; later user messages that answer nothing (errors the harness
  reported, a non-empty exit message) are `user` turns; system messages are not kept (the config holds
  them).

Domain: "swe" when the file names a SWE-bench instance (`instance_id`, written by the batch runners) or
runs in a SWE-bench image (`info.config.environment.image`); otherwise "terminal": the `mini` command
line runs any task in a shell, and Harbor/Terminal-Bench runs of the agent carry no instance id.
`ingest --domain` overrides it.

A config's own `action_regex` is not run: a pattern taken from the input could backtrack without end
on a long reply and stall the worker. Blocks are found with mini's default pattern (which 2.x files do
not need: they keep the harness's parse in `extra.actions`). In a 1.x run with its own pattern a reply
the harness answered with a return code still ran: its turn keeps the text, with no action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from collectors.base import ImportContext, Importer, as_text, expect_object, loose_json, object_at, to_float
from schemas.records import RecordError, Trajectory, Turn, dumps

_ROLES = {"system", "user", "assistant", "tool", "exit"}
_SUBMIT = ("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "MINI_SWE_AGENT_FINAL_OUTPUT")
_ACTION_PATTERN = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.S)  # mini 1.x default, 2.x text models
_NOT_EXECUTED = "action was not executed"  # mini 2.x format_toolcall_observation_messages
_TIMEOUT_PREFIX = "The last command <command>"  # mini's default timeout_template
# mini 1.x wrote the user's interruptions as plain user messages (`NonTerminatingException` text); 2.x adds
# `extra.interrupt_type` to the same texts (InteractiveAgent)
_INTERRUPT_TEXT = (
    ("Command not executed.", "UserRejection"),
    ("Commands not executed.", "UserRejection"),
    ("Interrupted by user: ", "UserInterruption"),
    ("The user added a new task: ", "UserNewTask"),
)
_OBS = re.compile(
    r"\A(?:<exception>(?P<exc>.*?)</exception>\n)?<returncode>(?P<rc>-?\d+)</returncode>\n(?P<rest>.*)\Z", re.S
)
_OUTPUT = re.compile(r"\A<output>\n(?P<out>.*)</output>\s*\Z", re.S)


def _prefix(template: Any, default: str) -> str:
    """The literal start of a Jinja template (the text before its first tag): how a reply rendered
    from it is recognised."""
    if not isinstance(template, str):
        return default
    return re.split(r"\{\{|\{%", template, maxsplit=1)[0]


def message_commands(text: str | None) -> tuple[list[str], str | None]:
    """The commands of a text-mode reply (its ```` ```bash ```` / ```` ```mswea_bash_command ```` blocks,
    mini's default pattern) and its thought: the text around the block when there is exactly one,
    else the whole text."""
    text_ = text or ""
    end = text_.rfind("\n```")  # no block ends past the last fence: without the bound each unclosed opener rescans to the end
    blocks = list(_ACTION_PATTERN.finditer(text_, 0, end + 4)) if end >= 0 else []
    if len(blocks) != 1:
        return [b.group(1).strip() for b in blocks], text
    return [blocks[0].group(1).strip()], (text_[: blocks[0].start()] + text_[blocks[0].end():]).strip() or None


def rendered_output(reply: str | None) -> tuple[str, int, dict[str, Any]] | None:
    """(output, exit code, metadata) of a reply rendered from mini's observation template
    (`<returncode>N</returncode>` and `<output>`, or an elided form: `metadata.output_elided`), else None."""
    parsed = _OBS.match(reply or "")
    return None if parsed is None else _rendered(parsed)


def _rendered(parsed: re.Match) -> tuple[str, int, dict[str, Any]]:
    meta: dict[str, Any] = {}
    out = _OUTPUT.match(parsed["rest"])
    if parsed["exc"]:
        meta["exception"] = parsed["exc"]
    if out is None:
        meta["output_elided"] = True
    return (out["out"] if out else parsed["rest"]), int(parsed["rc"]), meta


@dataclass
class _Call:
    assistant: int
    command: str | None
    call_id: str | None = None
    tool_name: str | None = None
    tool_args: Any = None
    thought: str | None = None
    started_at: datetime | None = None


@dataclass
class _Run:
    """Reads `messages` in order, pairing each command with the reply that answers it."""

    timeout_prefix: str
    task: str | None = None
    turns: list[Turn] = field(default_factory=list)
    open: list[_Call] = field(default_factory=list)
    rejected: tuple[int, str | None, int] | None = None  # (index, text, n_actions) awaiting a format-error reply
    started: bool = False  # an assistant message was seen

    def read(self, msgs: list) -> None:
        for j, m in enumerate(msgs):
            where = f"messages[{j}]"
            expect_object(m, where)
            if "role" not in m:
                m = _from_responses(m)
            role = m.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise RecordError("malformed_record", f"{where}: unknown role {role!r}")
            content = m.get("content")
            if content is not None and not isinstance(content, (str, list)):
                raise RecordError("malformed_record", f"{where}: content must be text, got {type(content).__name__}")
            extra = object_at(m, "extra")
            if role == "assistant":
                self._close()
                self.started = True
                self._assistant(j, m, extra)
            elif role == "system":
                continue
            elif self.task is None and role == "user" and not self.started:
                self.task = as_text(content)
            elif role == "user" and isinstance(extra.get("actions"), list):  # mini 2.x human mode: a user-issued command
                self._close()
                self._assistant(j, m, extra)
            else:
                self._reply(j, m, role, extra)
        self._close()

    def _assistant(self, i: int, m: dict, extra: dict) -> None:
        text = as_text(m.get("content"))
        started = _unix(extra.get("timestamp"))
        tool_calls = m.get("tool_calls")
        if tool_calls:
            if not isinstance(tool_calls, list):
                raise RecordError("malformed_record", f"messages[{i}]: tool_calls must be a list")
            for k, c in enumerate(tool_calls):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict):
                    raise RecordError("malformed_record", f"messages[{i}].tool_calls[{k}]: no function object")
                args = loose_json(fn.get("arguments"))
                command = args.get("command") if isinstance(args, dict) else None
                self.open.append(_Call(i, command, c.get("id"), fn.get("name"), args, text if k == 0 else None, started))
            return
        commands, thought = message_commands(text)
        actions = extra.get("actions")
        if isinstance(actions, list):  # mini 2.x text models: the harness's own parse
            commands = []
            for k, a in enumerate(actions):
                if not (isinstance(a, dict) and isinstance(a.get("command"), str)):
                    raise RecordError("malformed_record", f"messages[{i}].extra.actions[{k}]: no command")
                commands.append(a["command"])
        if len(commands) != 1:
            self.rejected = (i, text, len(commands))
            return
        self.open.append(_Call(i, commands[0], thought=thought, started_at=started))

    def _reply(self, j: int, m: dict, role: str, extra: dict) -> None:
        text = as_text(m.get("content"))
        interrupt = extra.get("interrupt_type")
        if role == "user" and not interrupt and "returncode" not in extra:
            interrupt = next((t for p, t in _INTERRUPT_TEXT if (text or "").startswith(p)), None)
        if role == "user" and isinstance(interrupt, str) and interrupt != "FormatError":
            self._interrupted(j, text, interrupt)
            return
        if (self.rejected and role == "user" and not extra.get("interrupt_type")
                and ("returncode" in extra or _OBS.match(text or ""))):
            # the harness ran a command (its own action_regex found one): not a format error
            i, atext, _ = self.rejected
            self.rejected = None
            self.open.append(_Call(i, None, thought=atext))
        if extra.get("interrupt_type") == "FormatError" or (self.rejected and role == "user"):
            self._format_error(j, text, extra)
            return
        call = None
        if role == "tool":
            cid = m.get("tool_call_id")
            call = next((c for c in self.open if c.call_id == cid), None)
            if call is None:
                raise RecordError("malformed_record", f"messages[{j}]: result for tool call {cid!r}, which no open call made")
            if extra.get("exception_info") == _NOT_EXECUTED:  # padding for a call that never ran (submit, rejection)
                return
        elif role == "user" and self.open and self.open[0].call_id is None:
            call = self.open[0]
        elif role == "exit":
            call = next((c for c in self.open if c.command and any(s in c.command for s in _SUBMIT)), None)
        if call is None:
            if text and text.strip():
                meta = dumps({"role": role}) if role != "user" else None
                self.turns.append(Turn(kind="user", action=text, observation_kind="none", locator=f"messages[{j}]",
                                       metadata=meta))
            return
        self.open.remove(call)
        if role == "exit":
            obs, rc, meta = text, None, {"submitted": True, "exit_status": extra.get("exit_status")}
        else:
            obs, rc, meta = self._observe(j, text, extra, call.command)
        self.turns.append(Turn(
            kind="env",
            action=call.command,
            observation=obs,
            observation_kind="stdout",
            tool_name=call.tool_name,
            tool_args=dumps(call.tool_args) if call.tool_args is not None else None,
            tool_call_id=call.call_id,
            thought=call.thought,
            exit_code=rc,
            is_error=(rc != 0) if rc is not None else (True if meta.get("timeout") else None),
            started_at=call.started_at,
            locator=f"messages[{call.assistant}]+messages[{j}]",
            metadata=dumps(meta) if meta else None,
        ))

    def _observe(self, j: int, text: str | None, extra: dict, command: str | None) -> tuple[str | None, int | None, dict]:
        """(observation, exit code, metadata) of one reply to an executed command."""
        meta: dict[str, Any] = {}
        parsed = _OBS.match(text or "")
        if "returncode" in extra:  # mini 2.x keeps the result unrendered
            rc = extra["returncode"]
            if rc is not None and (isinstance(rc, bool) or not isinstance(rc, int)):
                raise RecordError("malformed_record", f"messages[{j}]: extra.returncode is not an integer: {rc!r}")
            if extra.get("exception_info"):
                meta["exception"] = extra["exception_info"]
            if extra.get("exception_type") == "TimeoutExpired":  # mini 2.x: a timeout is returncode -1 with this
                meta["timeout"] = True
            raw = extra.get("raw_output")
            if isinstance(raw, str):
                return raw, rc, meta
            if parsed is None:
                return text, rc, meta
        if parsed is not None:
            out, rc, more = _rendered(parsed)
            return out, rc, {**meta, **more}
        if self.timeout_prefix and (text or "").startswith(self.timeout_prefix):
            s, e = text.find("<output>\n"), text.rfind("\n</output>")
            return (text[s + 9:e] if 0 <= s and s + 9 <= e else text), None, {"timeout": True}
        if command and any(s in command for s in _SUBMIT):
            return text, None, {"submitted": True}
        return text, None, {"unparsed_reply": True}

    def _format_error(self, j: int, reply: str | None, extra: dict) -> None:
        if self.rejected is not None:
            i, text, n = self.rejected
            locator = f"messages[{i}]+messages[{j}]"
            self.rejected = None
        else:  # mini 2.x text models: the rejected reply is only in the error message
            text, n, locator = as_text(extra.get("model_response")), extra.get("n_actions"), f"messages[{j}]"
            for c in self.open:  # a tool-call reply the harness could not parse never ran
                self._missing(c)
            self.open = []
        meta = {"format_error": True, "n_actions": n, "reply": reply}
        self.turns.append(Turn(kind="message", action=text, observation_kind="none", locator=locator,
                               metadata=dumps(meta)))

    def _interrupted(self, j: int, text: str | None, interrupt: str) -> None:
        """A user message that stopped the run: the commands waiting for a result did not run to one (a rejected
        command never ran; mini writes no output, or only its "not executed" padding), so they are kept as calls
        and come first, then the user's message."""
        self._close(interrupt)
        self.turns.append(Turn(kind="user", action=text, observation_kind="none", locator=f"messages[{j}]",
                               metadata=dumps({"interrupt_type": interrupt})))

    def _missing(self, c: _Call, interrupt: str | None = None) -> None:
        if interrupt == "UserRejection":  # refused before it ran, as OpenHands' `rejected` answers are marked
            meta: dict[str, Any] = {"rejected": True, "interrupt_type": interrupt}
        else:  # interrupted (it may have started) or never answered: no result was kept
            meta = {"result_missing": True, **({"interrupt_type": interrupt} if interrupt else {})}
        self.turns.append(Turn(
            kind="message", action=c.command, observation_kind="none", tool_name=c.tool_name,
            tool_args=dumps(c.tool_args) if c.tool_args is not None else None, tool_call_id=c.call_id,
            thought=c.thought, started_at=c.started_at, locator=f"messages[{c.assistant}]",
            metadata=dumps(meta),
        ))

    def _close(self, interrupt: str | None = None) -> None:
        """Before the next assistant message, a user's interruption (its `interrupt_type`) or the end: what got
        no reply is kept as a message."""
        for c in self.open:
            self._missing(c, interrupt)
        self.open = []
        if self.rejected is not None:
            i, text, n = self.rejected
            self.turns.append(Turn(kind="message", action=text, observation_kind="none", locator=f"messages[{i}]",
                                   metadata=dumps({"format_error": True, "n_actions": n, "reply": None})))
            self.rejected = None


def _from_responses(m: dict) -> dict:
    """mini 2.x Responses-API models: the response object is the assistant turn, `function_call_output` its result."""
    if m.get("object") == "response":
        items = [it for it in m.get("output") or [] if isinstance(it, dict)]
        text = "".join(str(p.get("text", "")) for it in items if it.get("type") == "message"
                       for p in it.get("content") or [] if isinstance(p, dict))
        calls = [{"id": it.get("call_id") or it.get("id"), "function": {"name": it.get("name"), "arguments": it.get("arguments")}}
                 for it in items if it.get("type") == "function_call"]
        return {"role": "assistant", "content": text or None, "tool_calls": calls, "extra": m.get("extra")}
    if m.get("type") == "function_call_output":
        return {"role": "tool", "tool_call_id": m.get("call_id"), "content": m.get("output"), "extra": m.get("extra")}
    return m


_MARK_LIMIT = 200  # messages looked at for a mini mark: a run shows one within its first exchanges


def _is_bare_run(doc: Any) -> bool:
    """A bare list of mini messages (see the module docstring)."""
    if not (isinstance(doc, list) and doc and all(isinstance(m, dict) and isinstance(m.get("role"), str) and m["role"] in _ROLES for m in doc)):
        return False
    if not all(m.get("content") is None or isinstance(m.get("content"), str) for m in doc):
        return False
    first = next((m for m in doc if m["role"] != "system"), None)
    if first is None or first["role"] != "user":
        return False
    prev_block = False
    for m in doc[:_MARK_LIMIT]:
        text = m.get("content") or ""
        if m["role"] == "assistant":
            if "```mswea_bash_command" in text:
                return True
            end = text.rfind("\n```")  # bounded as in `_Run._assistant`
            blocks = [b.group(1) for b in _ACTION_PATTERN.finditer(text, 0, end + 4)] if end >= 0 else []
            if any(s in b for b in blocks for s in _SUBMIT):
                return True
            prev_block = bool(blocks)
        elif m["role"] == "user":
            if prev_block and _OBS.match(text):
                return True
            prev_block = False
    return False


def _unix(value: Any) -> datetime | None:
    t = to_float(value)
    if t is None or isinstance(value, bool):
        return None
    try:
        return datetime.fromtimestamp(t, UTC)
    except (OverflowError, OSError, ValueError):
        return None


class MiniSweAgentImporter(Importer):
    name = "mini-swe-agent"
    container = "json"
    version = "3"  # 2: calls the user stopped come before the user's message; 3: a command the user rejected or
    # interrupted is a `message` turn (`rejected` / `result_missing`, `interrupt_type`), never run with the user's text as output

    def sniff(self, doc: Any) -> bool:
        return (
            isinstance(doc, dict)
            and isinstance(doc.get("trajectory_format"), str)
            and doc["trajectory_format"].startswith("mini-swe-agent")
            and isinstance(doc.get("messages"), list)
        ) or _is_bare_run(doc)

    def convert(self, doc: Any, locator: str, ctx: ImportContext) -> Trajectory:
        bare = isinstance(doc, list)
        if bare:  # a bare message list: the messages only
            doc = {"messages": doc}
        expect_object(doc, locator)
        msgs = doc.get("messages")
        if not isinstance(msgs, list):
            raise RecordError("malformed_record", f"{locator}: 'messages' must be a list")
        info = object_at(doc, "info")
        config = object_at(info, "config")
        agent_cfg = object_at(config, "agent")
        model_cfg = object_at(config, "model")
        env_cfg = object_at(config, "environment")
        run = _Run(_prefix(agent_cfg.get("timeout_template"), _TIMEOUT_PREFIX))
        run.read(msgs)
        instance = doc.get("instance_id")
        image = str(env_cfg.get("image") or "")
        is_swe = instance is not None or "swebench" in image or "sweb.eval" in image
        meta = {
            "trajectory_format": doc.get("trajectory_format"),  # text, or absent from a bare list: sniff checked it
            "mini_version": info.get("mini_version"),
            "model_stats": info.get("model_stats"),
            "submission": info.get("submission"),
            **({"bare_messages": True} if bare else {}),
        }
        return Trajectory(
            domain=ctx.domain("swe" if is_swe else "terminal"),
            source_format=self.name,
            native_id=str(instance) if instance is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=run.turns,
            task=run.task,
            agent="mini-swe-agent",
            model=model_cfg.get("model_name") if isinstance(model_cfg.get("model_name"), str) else None,
            # v2 writes "" while a run is unfinished (v1: null): no terminal status yet
            outcome=info.get("exit_status") or None if isinstance(info.get("exit_status"), str) else None,
            metadata=dumps(meta),
            locator=locator,
        )
