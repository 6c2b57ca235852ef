"""tau2-bench results (https://github.com/sierra-research/tau2-bench): one JSON document
`{timestamp, info, tasks, simulations: [{id, task_id, trial, reward_info, messages, ...}]}`, one
trajectory per simulation (locator `simulations[i]`).

The successor of tau-bench keeps its environment (domain tools and a simulated user, see
`collectors.tau_bench`) but not its file: tool calls are flat `{id, name, arguments, requestor}`
with `arguments` an object, a tool result is a `role: tool` message carrying the call's `id` and an
`error` flag (which sets `is_error`), and the harness's fixed greeting opens every conversation, so
the first user message (the simulated user's request) is the `task` and the greeting stays a
`message` turn. As in tau-bench, an assistant tool call with its result is a turn
(`tool_result`), and an assistant text is a `respond` turn answered by the user's next message
(`user_reply`). In domains where the user has tools too (telecom), the user's own calls and their
results happen inside the user's reply: they go to that turn's metadata (`user_tool_calls`), or to
the trajectory's where no reply turn holds them (before the request, after the last agent message).
Parallel calls may share an id (tau2's default is ""): results are paired with them in order.
A result that answers no open call is an `env` turn without an action (`metadata.call_missing`).

The task's `user_scenario` (the user simulator's hidden instructions), when the document's `tasks`
lists the task, is the `initial_state`; `info.environment_info.tool_defs` is the action space.
Timestamps are written without a zone (`datetime.now()`); they are read as UTC. A tool turn's
duration runs from the call's message to its result's.

A run saved with `Results.save(format="dir")` is a directory: `results.json` holds `info`, `tasks`
and a `simulation_index` instead of `simulations`, and each simulation is `simulations/<id>.json`
(`Tau2BenchDirImporter`; locator `simulations/<file>`; the same trajectories as the one document).
Full-duplex simulations (`messages` null, the conversation in `ticks`) are quarantined with reason
`unsupported_variant`, naming the simulation, and the rest of the file is read.

Domain: "mcp", as for tau-bench (customer-service tool use through JSON function schemas).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from collectors.base import (
    ImportContext,
    Importer,
    any_record,
    as_text,
    expect_object,
    load_json_file,
    loose_json,
    object_at,
    outcome_of,
    parse_time,
    render_call,
    require,
    to_float,
    unpaired_result,
)
from collectors.tau_bench import RESPOND, run_id
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps


def _tasks_by_id(doc: dict) -> dict[str, Any]:
    """The task definitions by id. They only add each simulation's scenario (`initial_state`) and
    evaluation criteria: a `tasks` that is no list (a damaged file) leaves the simulations without
    them rather than failing every simulation of the file."""
    tasks = doc.get("tasks")
    return {str(t.get("id")): t for t in tasks if isinstance(t, dict)} if isinstance(tasks, list) else {}


class Tau2BenchImporter(Importer):
    name = "tau2-bench"
    container = "json"
    version = "2"  # 2: a `tasks` that is no list no longer quarantines every simulation of the file

    def sniff(self, doc: Any) -> bool:
        if not isinstance(doc, dict) or not isinstance(doc.get("simulations"), list):
            return False
        sims = doc["simulations"]
        return isinstance(doc.get("info"), dict) and (not sims or any_record(sims, _is_simulation))

    def split(self, doc: dict, ctx: ImportContext):
        info = object_at(doc, "info")
        tasks = _tasks_by_id(doc)
        for i, sim in enumerate(doc["simulations"]):
            task = tasks.get(str(sim.get("task_id"))) if isinstance(sim, dict) else None
            yield f"simulations[{i}]", {"simulation": sim, "info": info, "task": task}

    def convert(self, rec: Any, locator: str, ctx: ImportContext) -> Trajectory:
        sim, info, task_def = rec["simulation"], rec["info"], rec["task"]
        expect_object(sim, locator)
        if sim.get("messages") is None and isinstance(sim.get("ticks"), list):
            raise RecordError("unsupported_variant", f"{locator}: a full-duplex simulation (its conversation is "
                              f"in 'ticks', 'messages' is null); this importer reads half-duplex 'messages' only")
        messages = require(sim, "messages", locator)
        if not isinstance(messages, list):
            raise RecordError("malformed_record", f"{locator}: 'messages' is not a list")
        system, task, turns, loose_calls = _turns(messages, locator)
        reward_info = object_at(sim, "reward_info")
        reward = to_float(reward_info.get("reward"))
        env = object_at(info, "environment_info")
        agent_info = object_at(info, "agent_info")
        scenario = task_def.get("user_scenario") if isinstance(task_def, dict) else None
        task_id, trial = sim.get("task_id"), sim.get("trial")
        meta = {k: v for k, v in sim.items() if k != "messages"}
        meta.update({"system_prompt": system, "domain_name": env.get("domain_name"),
                     "user_tool_calls": loose_calls or None,  # the user's tool activity no reply turn holds
                     "agent_info": agent_info or None, "user_info": info.get("user_info"),
                     "evaluation_criteria": task_def.get("evaluation_criteria") if isinstance(task_def, dict) else None})
        return Trajectory(
            domain=ctx.domain("mcp"),
            source_format=self.name,
            native_id=run_id(task_id, trial),
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task,
            action_space=dumps(env["tool_defs"]) if env.get("tool_defs") else None,
            initial_state=dumps(scenario) if scenario else None,
            agent="tau2-bench",
            model=agent_info.get("llm") if isinstance(agent_info.get("llm"), str) else None,
            outcome=outcome_of(reward),
            reward=reward,
            collected_at=parse_time(sim.get("start_time")),
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
            locator=locator,
        )


def _is_simulation(sim: Any) -> bool:
    """A `SimulationRun`: half-duplex (`messages`) or full-duplex (`ticks`, `messages` null)."""
    return isinstance(sim, dict) and "task_id" in sim and (
        isinstance(sim.get("messages"), list) or (sim.get("messages") is None and isinstance(sim.get("ticks"), list)))


_MAX_JSON_BYTES = 256 << 20


class Tau2BenchDirImporter(Importer):
    """A run saved as a directory (`Results.save(format="dir")`): `results.json` + `simulations/*.json`."""

    name = "tau2-bench-dir"
    container = "dir"
    version = "2"  # 2: as tau2-bench's

    @staticmethod
    def _index(directory: Path) -> dict | None:
        p = directory / "results.json"
        if not ((directory / "simulations").is_dir() and p.is_file()) or p.stat().st_size > _MAX_JSON_BYTES:
            return None
        try:
            doc = parse_json(p.read_bytes())
        except orjson.JSONDecodeError:
            return None
        ok = isinstance(doc, dict) and isinstance(doc.get("info"), dict) and isinstance(doc.get("simulation_index"), list)
        return doc if ok else None

    def sniff(self, directory: Path) -> bool:
        return self._index(directory) is not None

    def consumes(self, directory: Path) -> list[Path]:
        return [directory / "results.json", *sorted(p for p in (directory / "simulations").glob("*.json") if p.is_file())]

    def split(self, directory: Path, ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        doc = self._index(directory)
        if doc is None:
            raise RecordError("invalid_json", "results.json: no longer a tau2-bench results index")
        info = object_at(doc, "info")
        tasks = _tasks_by_id(doc)
        for p in sorted((directory / "simulations").glob("*.json")):
            loc = f"simulations/{p.name}"
            try:
                sim = load_json_file(p, loc, _MAX_JSON_BYTES)
            except RecordError as e:
                yield loc, e
                continue
            task = tasks.get(str(sim.get("task_id"))) if isinstance(sim, dict) else None
            yield loc, {"simulation": sim, "info": info, "task": task}

    def convert(self, rec: Any, locator: str, ctx: ImportContext) -> Trajectory:
        return _TAU2.convert(rec, locator, ctx)


def _turns(messages: list, locator: str) -> tuple[str | None, str | None, list[Turn], list[dict]]:
    system: str | None = None
    task: str | None = None
    turns: list[Turn] = []
    open_calls: dict[str, list[Turn]] = {}  # call id -> its open turns, oldest first (ids may repeat: default "")
    awaiting: Turn | None = None  # a `respond` turn waiting for the user's reply
    user_calls: list[dict] = []  # the user's own tool activity since the last user text
    loose: list[dict] = []  # user tool activity with no `respond` turn to hold it (before the task, at the end)
    for j, m in enumerate(messages):
        where, loc = f"{locator} messages[{j}]", f"messages[{j}]"
        if not isinstance(m, dict):
            raise RecordError("malformed_record", f"{where}: expected a message object")
        role = require(m, "role", where)
        content = as_text(m.get("content"))
        by_user = m.get("requestor") == "user"
        if role == "system":
            system = content if system is None else f"{system}\n\n{content}"
        elif role == "assistant":
            calls = m.get("tool_calls") or []
            if not isinstance(calls, list):
                raise RecordError("malformed_record", f"{where}: 'tool_calls' is not a list")
            for k, tc in enumerate(calls):
                if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
                    raise RecordError("malformed_record", f"{where}: tool_calls[{k}] has no name")
                args = loose_json(tc.get("arguments"))
                t = Turn(kind="message", action=render_call(tc["name"], args),
                         tool_name=tc["name"], tool_args=dumps(args) if args is not None else None,
                         tool_call_id=tc.get("id"), thought=content if k == 0 else None, observation_kind="none",
                         started_at=parse_time(m.get("timestamp")), locator=f"{loc}.tool_calls[{k}]")
                turns.append(t)
                open_calls.setdefault(str(tc.get("id")), []).append(t)
            if not calls:
                awaiting = Turn(kind="message", action=content, tool_name=RESPOND, tool_args=dumps({"content": content}),
                                observation_kind="none", started_at=parse_time(m.get("timestamp")), locator=loc)
                turns.append(awaiting)
        elif role == "tool" and by_user:
            user_calls.append({"result_of": m.get("id"), "content": content, "error": m.get("error")})
        elif role == "tool":
            waiting = open_calls.get(str(m.get("id")))
            t = waiting.pop(0) if waiting else None
            if t is None:
                turns.append(unpaired_result(content, m.get("id"), m.get("name"),
                                             m["error"] if isinstance(m.get("error"), bool) else None, loc))
                continue
            done = parse_time(m.get("timestamp"))
            t.kind, t.observation, t.observation_kind = "env", content, "tool_result"
            t.is_error = m["error"] if isinstance(m.get("error"), bool) else None
            t.duration_s = (done - t.started_at).total_seconds() if done is not None and t.started_at is not None else None
            t.locator = f"{t.locator}+{loc}"
        elif role == "user":
            for tc in m.get("tool_calls") or []:
                if isinstance(tc, dict):
                    user_calls.append({"id": tc.get("id"), "name": tc.get("name"), "arguments": tc.get("arguments")})
            if content is None:
                continue  # only tool calls: the user's reply comes in a later message
            if task is None and not any(t.kind == "env" for t in turns):
                task = content  # the user's request, after the harness's greeting
                awaiting = None
                loose += user_calls
            elif awaiting is not None:
                awaiting.kind, awaiting.observation, awaiting.observation_kind = "env", content, "user_reply"
                awaiting.locator = f"{awaiting.locator}+{loc}"
                if user_calls:
                    awaiting.metadata = dumps({"user_tool_calls": user_calls})
                awaiting = None
            else:
                turns.append(Turn(kind="user", action=content, observation_kind="none", locator=loc,
                                  metadata=dumps({"user_tool_calls": user_calls}) if user_calls else None))
            user_calls = []
        else:
            raise RecordError("malformed_record", f"{where}: unknown role {role!r}")
    return system, task, turns, loose + user_calls


_TAU2 = Tau2BenchImporter()
