"""OpenHands trajectories in published versions other than the sample files.

Fixtures in tests/data/openhands-variants/ (origins, commits and licences in its README.md):
- runtime_wrong_initial_state.json: a runtime event stream (Jan 2025, function-calling CodeAct,
  `tool_call_metadata` on actions and observations, `extras.metadata.exit_code`), no
  `agent_state_changed`/`system` events;
- logic_reasoning_output.jsonl: a mid-2024 eval row (`instance_id`) whose history is
  `[action, observation]` pairs with ids/causes, `run_ipython`, an agent `message`, a later user
  `message`, `finish`, `null` acknowledgements, and `metadata.model_name` instead of `llm_config`;
- humanevalfix_output.jsonl: a May 2024 eval row keyed by `task_id` (no `instance_id`).

Expected values were read from the raw files with `json.load`, independently of the importer:
a turn is an action (other than the first user message, the task) with the observation whose
`cause` is its id (or its pair partner); a `null` observation is an acknowledgement, not env output.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "openhands-variants"


def _raw_turns(history: list) -> tuple[int, int]:
    """(turns, env turns) counted from the raw history, without the importer."""
    flat = [e for h in history for e in (h if isinstance(h, list) else [h])]
    actions = [e for e in flat if "action" in e and e["action"] not in ("system", "change_agent_state")]
    first_user = next((e for e in actions if e["action"] == "message" and e.get("source") == "user"), None)
    ids = {e.get("id") for e in actions if e is not first_user}
    env = [
        e
        for e in flat
        if "observation" in e
        and e["observation"] not in ("null", "think", "agent_state_changed")
        and e.get("cause") in ids
    ]
    return len(actions) - (first_user is not None), len(env)


# --- runtime event stream: tests/runtime/trajs/wrong_initial_state.json --------------------------


def test_wrong_initial_state_events() -> None:
    path = DATA / "runtime_wrong_initial_state.json"
    raw = json.loads(path.read_text())
    assert len(raw) == 8 and _raw_turns(raw) == (4, 3)
    t = one_trajectory(path)
    assert t.source_format == "openhands-events"
    assert (t.domain, t.agent, t.native_id, t.locator) == ("swe", "openhands", None, "$")
    assert t.task == "Please rename game_2048.py to 2048.py"
    assert t.model == "claude-3-5-sonnet-20241022"
    # no agent_state_changed events: the outcome comes from the finish action
    assert t.outcome == "finished"
    assert t.collected_at == datetime(2025, 1, 27, 23, 16, 50, 239610, tzinfo=UTC)
    assert t.action_space is None and t.env_fingerprint is None  # no `system` event
    assert json.loads(t.metadata)["task_event"] == {"id": 0, "locator": "[0]", "image_urls": None}

    assert [u.kind for u in t.turns] == ["env", "env", "env", "message"]
    assert [u.locator for u in t.turns] == ["[1]+[2]", "[3]+[4]", "[5]+[6]", "[7]"]
    assert [u.tool_name for u in t.turns] == ["str_replace_editor", "execute_bash", "str_replace_editor", "finish"]
    assert [u.tool_call_id for u in t.turns] == [
        "toolu_01USom24cuiyvAembLhEryrn",
        "toolu_01PuY3mXrE6fm3j52GscR4rj",
        "toolu_01DodVjoeVmEY3gU5ALbqmGj",
        "toolu_01G98EmHEC8HgktRjJBYXqEa",
    ]
    assert [u.observation_kind for u in t.turns] == ["file_view", "stdout", "file_view", "none"]
    # only the run observation has an exit code (extras.metadata.exit_code == 0)
    assert [u.exit_code for u in t.turns] == [None, 0, None, None]
    assert [u.is_error for u in t.turns] == [False, False, False, None]

    view, mv, view2, finish = t.turns
    assert json.loads(view.tool_args) == {"command": "view", "path": "/workspace"}
    assert view.action == 'str_replace_editor {"command":"view","path":"/workspace"}'
    assert view.observation == (
        "Here's the files and directories up to 2 levels deep in /workspace, excluding hidden items:\n"
        "/workspace/\n/workspace/game_2048.py"
    )
    assert json.loads(view.state) == {"path": "/workspace"}
    assert view.thought == "I'll help you rename the file. First, let me check if the file exists and its location."
    assert view.started_at == datetime(2025, 1, 27, 23, 16, 54, 105108, tzinfo=UTC)
    assert view.duration_s == pytest.approx(0.035473)

    assert mv.action == "mv /workspace/game_2048.py /workspace/2048.py"
    # the model sent is_input as the string "false"; the tool call's own arguments are kept
    assert json.loads(mv.tool_args) == {"command": "mv /workspace/game_2048.py /workspace/2048.py", "is_input": "false"}
    assert mv.observation == ""
    assert json.loads(mv.state) == {"working_dir": "/workspace"}
    assert mv.duration_s == pytest.approx(0.648763)

    assert view2.observation.endswith("/workspace/\n/workspace/2048.py")
    assert view2.duration_s == pytest.approx(0.020823)

    assert finish.action == (
        "The file has been successfully renamed from `game_2048.py` to `2048.py`. "
        "Is there anything else you need help with?"
    )
    assert finish.observation is None and finish.duration_s is None
    assert_schema_valid([t])


# --- mid-2024 eval row, [action, observation] pairs: logic_reasoning README example --------------


def _logic() -> Trajectory:
    return one_trajectory(DATA / "logic_reasoning_output.jsonl")


def test_logic_reasoning_pairs() -> None:
    row = json.loads((DATA / "logic_reasoning_output.jsonl").read_text())
    assert len(row["history"]) == 6 and _raw_turns(row["history"]) == (5, 2)
    t = _logic()
    assert (t.source_format, t.native_id, t.domain, t.locator) == (
        "openhands-output",
        "ProntoQA_1",
        "swe",
        "line:1",
    )
    assert t.task == row["instruction"]
    # test_result is {"result": false}: no `resolved` flag, no error, so how the agent stopped
    assert (t.outcome, t.reward) == ("finished", None)
    assert t.env_fingerprint is None  # the row's metadata has no git_commit
    assert t.collected_at == datetime(2024, 5, 26, 18, 41, 20, 995938, tzinfo=UTC)

    assert [u.kind for u in t.turns] == ["env", "env", "message", "user", "message"]
    assert [u.locator for u in t.turns] == [
        "history[1][0]+history[1][1]",
        "history[2][0]+history[2][1]",
        "history[3][0]",
        "history[4][0]",
        "history[5][0]",
    ]
    pip, engine, answer, nudge, finish = t.turns
    assert (pip.tool_name, pip.action, pip.observation_kind) == ("run_ipython", "%pip install scitools-pyke", "stdout")
    assert pip.observation == "[Package installed successfully]\n[Kernel restarted successfully to load the package]"
    assert (pip.exit_code, pip.is_error) == (None, False)  # ipython observations carry no exit code
    assert pip.thought == "Let's start by installing the required package `scitools-pyke`."
    assert pip.duration_s == pytest.approx(5.012616)
    assert json.loads(pip.tool_args) == {
        "code": "%pip install scitools-pyke",
        "kernel_init_code": "from agentskills import *",
    }
    assert engine.action.startswith("import sys\nsys.path.append('/Users/ma/Desktop/projects/opendevin/")
    assert engine.action.endswith("engine.safe_execute_program(logic_programs)\nanswer")
    assert engine.observation == "'B'"
    assert engine.duration_s == pytest.approx(0.49238)
    assert answer.action.startswith("The answer to the query `Sour(Max, False)` is 'B'")
    assert json.loads(answer.metadata)["ack"]["observation"] == "null"
    assert nudge.action.startswith("Please continue working on the task on whatever approach")
    assert finish.action == "All done! What's next on the agenda?"
    for u in (answer, nudge, finish):
        assert u.observation is None and u.observation_kind == "none" and u.tool_name is None
    meta = json.loads(t.metadata)
    assert meta["instance"]["answer"] == "B" and meta["test_result"] == {"result": False}
    assert_schema_valid([t])


def test_logic_reasoning_model_from_metadata_model_name() -> None:
    assert _logic().model == "gpt-4o-2024-05-13"


# --- May 2024 eval row keyed by task_id: humanevalfix README example ----------------------------


def test_humanevalfix_task_id_row() -> None:
    row = json.loads((DATA / "humanevalfix_output.jsonl").read_text())
    assert "instance_id" not in row and row["task_id"] == "Python/2"
    assert _raw_turns(row["history"]) == (4, 3)
    recs = list(read_path(DATA / "humanevalfix_output.jsonl"))
    assert len(recs) == 1 and isinstance(recs[0], Trajectory), [getattr(r, "reason", r) for r in recs]
    (t,) = recs
    assert (t.source_format, t.native_id) == ("openhands-output", "Python/2")
    assert t.task == row["instruction"]
    assert Counter(u.kind for u in t.turns) == Counter({"env": 3, "message": 1})
    assert [u.action for u in t.turns] == [
        "open Python__2.py",
        "edit 2:2 <<EOF\n    return number % 1.0\nEOF",
        "python3 Python__2.py",
        "All done! What's next on the agenda?",
    ]
    assert [u.exit_code for u in t.turns] == [0, 0, 0, None]
    assert [u.is_error for u in t.turns] == [False, False, False, None]
    assert [u.duration_s for u in t.turns[:3]] == pytest.approx([0.389962, 0.367954, 0.214897])
    assert t.turns[2].observation == ""
    assert json.loads(t.env_fingerprint) == {"git_commit": "4d3253696f5a9d9de02ab86969fe9796fa40331f"}
    assert t.outcome == "finished"
    assert_schema_valid([t])


def _v1_action(eid: str, call: str, tool: str, action: dict, args: dict, ts: str, thought: str = "") -> dict:
    return {"id": eid, "timestamp": ts, "source": "agent", "kind": "ActionEvent",
            "thought": [{"type": "text", "text": thought}] if thought else [], "reasoning_content": None,
            "action": action, "tool_name": tool, "tool_call_id": call,
            "tool_call": {"id": call, "name": tool, "arguments": json.dumps(args), "origin": "completion"},
            "llm_response_id": "r-" + eid, "security_risk": "UNKNOWN"}


def _v1_history() -> list[dict]:
    """Events of the software-agent-sdk (`openhands.sdk.event`: Action/Observation/AgentError/UserReject
    events typed by `kind`, content as text parts), built from those models."""
    return [
        {"id": "e0", "timestamp": "2025-11-03T10:00:00", "source": "agent", "kind": "SystemPromptEvent",
         "system_prompt": {"type": "text", "text": "You are OpenHands agent."}, "tools": [{"name": "terminal"}]},
        {"id": "e1", "timestamp": "2025-11-03T10:00:01", "source": "user", "kind": "MessageEvent",
         "llm_message": {"role": "user", "content": [{"type": "text", "text": "Fix the bug in foo.py"}]}},
        _v1_action("e2", "call_1", "terminal", {"command": "pytest -q", "is_input": False, "kind": "TerminalAction"},
                   {"command": "pytest -q"}, "2025-11-03T10:00:02", "Run the tests."),
        {"id": "e3", "timestamp": "2025-11-03T10:00:05", "source": "environment", "kind": "ObservationEvent",
         "tool_name": "terminal", "tool_call_id": "call_1", "action_id": "e2",
         "observation": {"content": [{"type": "text", "text": "1 failed in 0.1s"}], "is_error": False,
                         "command": "pytest -q", "exit_code": 1, "timeout": False, "kind": "TerminalObservation"}},
        {"id": "e4", "timestamp": "2025-11-03T10:00:05", "source": "environment", "kind": "ConversationStateUpdateEvent",
         "key": "execution_status", "value": "running"},
        _v1_action("e5", "call_2", "file_editor", {"command": "view", "path": "/w/foo.py", "kind": "FileEditorAction"},
                   {"command": "view", "path": "/w/foo.py"}, "2025-11-03T10:00:06"),
        {"id": "e6", "timestamp": "2025-11-03T10:00:06", "source": "agent", "kind": "AgentErrorEvent",
         "tool_name": "file_editor", "tool_call_id": "call_2", "error": "Path /w/foo.py does not exist."},
        _v1_action("e7", "call_3", "terminal", {"command": "rm -rf /", "kind": "TerminalAction"},
                   {"command": "rm -rf /"}, "2025-11-03T10:00:07"),
        {"id": "e8", "timestamp": "2025-11-03T10:00:08", "source": "environment", "kind": "UserRejectObservation",
         "tool_name": "terminal", "tool_call_id": "call_3", "action_id": "e7", "rejection_reason": "Too dangerous",
         "rejection_source": "user"},
        {"id": "e9", "timestamp": "2025-11-03T10:00:09", "source": "agent", "kind": "MessageEvent",
         "llm_message": {"role": "assistant", "content": [{"type": "text", "text": "I will look elsewhere."}]}},
        _v1_action("e10", "call_4", "terminal", {"command": "ls", "kind": "TerminalAction"}, {"command": "ls"},
                   "2025-11-03T10:00:10"),
        _v1_action("e11", "call_5", "finish", {"message": "Done.", "kind": "FinishAction"}, {"message": "Done."},
                   "2025-11-03T10:00:11"),
        {"id": "e12", "timestamp": "2025-11-03T10:00:11", "source": "environment", "kind": "ObservationEvent",
         "tool_name": "finish", "tool_call_id": "call_5", "action_id": "e11",
         "observation": {"content": [{"type": "text", "text": "Done."}], "is_error": False, "kind": "FinishObservation"}},
    ]


def _check_v1_turns(t: Trajectory) -> None:
    assert json.loads(t.action_space) == [{"name": "terminal"}]
    assert [u.kind for u in t.turns] == ["env", "env", "env", "message", "message", "message"]
    run, edit, rejected, said, unanswered, finish = t.turns
    assert (run.action, run.observation, run.exit_code, run.is_error, run.observation_kind) == (
        "pytest -q", "1 failed in 0.1s", 1, True, "stdout")
    assert (run.tool_name, run.tool_call_id, run.thought, run.duration_s) == ("terminal", "call_1", "Run the tests.", 3.0)
    assert edit.action == 'file_editor {"command":"view","path":"/w/foo.py"}'
    assert (edit.observation, edit.is_error, edit.observation_kind) == ("Path /w/foo.py does not exist.", True, "error")
    assert (rejected.observation, rejected.observation_kind) == ("Too dangerous", "user_reply")
    assert json.loads(rejected.metadata)["rejected"] is True
    assert said.action == "I will look elsewhere."
    assert unanswered.action == "ls" and json.loads(unanswered.metadata)["result_missing"] is True
    assert finish.tool_name == "finish" and finish.observation is None
    assert_schema_valid([t])


def test_v1_sdk_eval_row(tmp_path: Path) -> None:
    """An OpenHands V1 evaluation row (OpenHands/benchmarks `EvalOutput`) holding V1 events."""
    history = _v1_history()
    row = {"instance_id": "astropy__astropy-12907", "attempt": 1, "test_result": {"git_patch": "diff --git a/foo.py"},
           "instruction": "Fix the bug in foo.py", "history": history, "error": None,
           "metadata": {"llm": {"model": "litellm_proxy/claude-sonnet-4-5-20250929"}, "max_iterations": 100},
           "metrics": {"accumulated_cost": 0.1}}
    (tmp_path / "output.jsonl").write_text(json.dumps(row) + "\n")
    (t,) = list(read_path(tmp_path / "output.jsonl"))
    assert isinstance(t, Trajectory), getattr(t, "detail", t)
    assert (t.source_format, t.domain, t.native_id, t.task) == ("openhands-output", "swe", "astropy__astropy-12907",
                                                                "Fix the bug in foo.py")
    assert t.model == "litellm_proxy/claude-sonnet-4-5-20250929" and t.outcome == "finished"
    _check_v1_turns(t)
    assert t.turns[0].locator == "history[2]+history[3]" and t.turns[5].locator == "history[11]+history[12]"


def test_v1_persisted_conversation_directory(tmp_path: Path) -> None:
    # `ConversationState` persistence: base_state.json and events/event-{idx:05d}-{event_id}.json
    conv = tmp_path / "a1b2c3d4e5f60718293a4b5c6d7e8f90"
    (conv / "events").mkdir(parents=True)
    (conv / "base_state.json").write_text(json.dumps({
        "id": "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90", "agent": {"llm": {"model": "claude-sonnet-4-5"}},
        "execution_status": "finished", "max_iterations": 100}))
    history = _v1_history()
    for i, ev in reversed(list(enumerate(history))):  # written in any order; read by index
        (conv / "events" / f"event-{i:05d}-{ev['id'].ljust(8, '0')}.json").write_text(json.dumps(ev))
    (t,) = list(read_path(conv))
    assert isinstance(t, Trajectory), getattr(t, "detail", t)
    assert (t.source_format, t.domain, t.native_id, t.model, t.outcome, t.task) == (
        "openhands-conversation", "swe", "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90", "claude-sonnet-4-5", "finished",
        "Fix the bug in foo.py")
    _check_v1_turns(t)
    assert t.turns[0].locator == "events[2]+events[3]"
    assert json.loads(t.metadata)["event_files"] == len(history)


def test_v1_command_still_running_has_no_exit_code(tmp_path: Path) -> None:
    """SDK terminal observations use exit code -1 for a command that had not exited (the soft timeout):
    no exit status to learn, so none is recorded; the turn says so in its metadata."""
    history = _v1_history()
    history[3]["observation"].update(exit_code=-1, timeout=True)
    history[3]["observation"]["content"][0]["text"] = "Serving HTTP on 0.0.0.0 port 8000 ...\n[The command timed out]"
    row = {"instance_id": "x__y-1", "instruction": "Fix the bug in foo.py", "history": history}
    (tmp_path / "output.jsonl").write_text(json.dumps(row) + "\n")
    (t,) = list(read_path(tmp_path / "output.jsonl"))
    run = t.turns[0]
    assert (run.exit_code, run.is_error, json.loads(run.metadata)["command_running"]) == (None, False, True)


def test_v1_observations_of_the_earlier_sdk_shape(tmp_path: Path) -> None:
    """The SDK's earlier observations hold `output` (text parts) and `error` (agent-sdk's
    ExecuteBashObservation): the output is the observation; with an error set the agent was shown the
    error, which is then the observation (an error turn), the output kept in the metadata."""
    history = _v1_history()
    history[3]["observation"] = {"kind": "ExecuteBashObservation", "output": [{"type": "text", "text": "3 passed"}],
                                 "error": None, "cmd": "pytest -q", "exit_code": 0, "timeout": False}
    history[12]["observation"] = {"kind": "ExecuteBashObservation", "output": [{"type": "text", "text": "partial"}],
                                  "error": "Command failed", "cmd": "ls", "exit_code": None}
    history[11] = _v1_action("e11", "call_5", "terminal", {"command": "ls", "kind": "ExecuteBashAction"},
                             {"command": "ls"}, "2025-11-03T10:00:11")
    history[12]["tool_name"] = "terminal"
    row = {"instance_id": "x__y-1", "instruction": "Fix the bug in foo.py", "history": history}
    (tmp_path / "output.jsonl").write_text(json.dumps(row) + "\n")
    (t,) = list(read_path(tmp_path / "output.jsonl"))
    run, last = t.turns[0], t.turns[-1]
    assert (run.observation, run.exit_code, run.is_error, run.observation_kind) == ("3 passed", 0, False, "stdout")
    assert (last.action, last.observation, last.exit_code, last.is_error, last.observation_kind) == (
        "ls", "Command failed", None, True, "error")
    assert json.loads(last.metadata)["output"] == "partial"
    assert_schema_valid([t])


def test_a_failed_mcp_tool_call_is_an_error_turn(tmp_path: Path) -> None:
    """OpenHands (0.38 on) stores an MCP tool's result as its JSON in the observation's content: an
    `isError: true` result was an ordinary turn (is_error false)."""
    def mcp(eid: int, url: str, result: dict) -> list[dict]:
        return [{"id": eid, "timestamp": f"2024-06-01T10:00:0{eid}", "source": "agent", "message": "calling fetch",
                 "action": "call_tool_mcp", "args": {"name": "fetch", "arguments": {"url": url}, "thought": ""}},
                {"id": eid + 1, "timestamp": f"2024-06-01T10:00:0{eid + 1}", "source": "agent", "message": "",
                 "cause": eid, "observation": "mcp", "content": json.dumps(result),
                 "extras": {"name": "fetch", "arguments": {"url": url}}}]
    events = [{"id": 0, "timestamp": "2024-06-01T10:00:00", "source": "user", "message": "Fetch two pages",
               "action": "message", "args": {"content": "Fetch two pages"}},
              *mcp(1, "http://x", {"isError": True, "content": [{"type": "text", "text": "boom"}]}),
              *mcp(3, "http://y", {"isError": False, "content": [{"type": "text", "text": "page y"}]})]
    (tmp_path / "events.json").write_text(json.dumps(events))
    t = one_trajectory(tmp_path / "events.json")
    assert [(u.observation_kind, u.is_error) for u in t.turns] == [("tool_result", True), ("tool_result", False)]


SAMPLE_EVENTS = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus" / "openhands" / "runtime_trajs_basic.json"


@pytest.mark.parametrize(("index", "field", "value"), [
    (1, "id", {"n": 3}), (2, "cause", [3]), (1, "tool_call_metadata.tool_call_id", {"id": "x"})])
def test_an_event_id_that_is_a_list_or_object_names_the_event(tmp_path: Path, index: int, field: str, value: object) -> None:
    """Events are paired by id, cause and tool call id; one that is a list or an object quarantines
    the stream naming the event and field (it was "TypeError: unhashable type: 'dict'")."""
    events = json.loads(SAMPLE_EVENTS.read_text())
    if "." in field:
        events[index]["tool_call_metadata"]["tool_call_id"] = value
    else:
        events[index][field] = value
    (tmp_path / "events.json").write_text(json.dumps(events))
    (q,) = list(read_path(tmp_path / "events.json"))
    assert not isinstance(q, Trajectory) and q.reason == "malformed_event"
    assert f"[{index}]: '{field}' must be a number or text, got {type(value).__name__}" in q.detail


def test_model_response_choices_that_are_no_list_leave_the_arguments_out(tmp_path: Path) -> None:
    events = json.loads(SAMPLE_EVENTS.read_text())
    ref = one_trajectory(SAMPLE_EVENTS)
    events[1]["tool_call_metadata"]["model_response"]["choices"] = 7
    (tmp_path / "events.json").write_text(json.dumps(events))
    t = one_trajectory(tmp_path / "events.json")  # it was "TypeError: 'int' object is not iterable"
    assert [(u.kind, u.tool_name, u.observation) for u in t.turns] == [(u.kind, u.tool_name, u.observation) for u in ref.turns]
    # the arguments are the event's own `args` then, not the model's tool call
    assert json.loads(ref.turns[0].tool_args)["command"] == "create"
    assert json.loads(t.turns[0].tool_args)["path"] == events[1]["args"]["path"] == "/workspace/game_2048.py"


def test_an_id_in_an_old_action_observation_pair_names_the_pair(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parent.parent / "data" / "openhands" / "legacy_output.jsonl"
    row = json.loads(src.read_text().splitlines()[1])
    assert isinstance(row["history"][0], list)  # the old [action, observation] form
    row["history"][0][0]["id"] = {"n": 3}
    (tmp_path / "out.jsonl").write_text(json.dumps(row) + "\n")
    (q,) = list(read_path(tmp_path / "out.jsonl"))
    assert not isinstance(q, Trajectory) and q.reason == "malformed_event"
    assert q.detail.endswith("history[0][0]: 'id' must be a number or text, got dict")
