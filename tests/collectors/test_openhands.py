"""OpenHands event streams and eval/resolver output rows, read through `pipelines.reader.read_path`.

Expected counts were taken from the raw files with jq, independently of the importer:
- turns = action events that are not `change_agent_state`/`system`, minus the first user
  `message` (the task), plus observations with no `cause` other than agent_state_changed/null/think:
    jq '[.[] | select(.action != null and .action != "change_agent_state" and .action != "system")] | length'
    jq '[.[] | select(.observation != null and .cause == null and (.observation|IN("agent_state_changed","null","think")|not))] | length'
  (for output.jsonl the same over `.history[]`, one number per line).
- env turns = observations with a `cause` that are not agent_state_changed/null/think, plus the
  cause-less ones above.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "openhands"


def _read(path: Path) -> list:
    return list(read_path(path))


def _trajs(path: Path) -> list[Trajectory]:
    recs = _read(path)
    assert all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    return recs


# --- runtime event streams (sample) ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, turns, kinds, outcome",
    [
        # 3 actions - 1 task message; 1 caused observation (edit)
        ("runtime_trajs_basic.json", 2, {"env": 1, "message": 1}, "finished"),
        # 6 actions (change_agent_state excluded) - 1 task; run/edit/edit/run are caused by actions
        ("runtime_trajs_basic_gui_mode.json", 5, {"env": 4, "message": 1}, "awaiting_user_input"),
        # 6 actions - 1 task: message/message/finish from the agent, 2 later user messages
        ("runtime_trajs_basic_interactions.json", 5, {"message": 3, "user": 2}, "finished"),
    ],
)
def test_runtime_event_files(sample: Path, name: str, turns: int, kinds: dict, outcome: str) -> None:
    (t,) = _trajs(sample / "openhands" / name)
    assert t.source_format == "openhands-events"
    assert t.domain == "swe"
    assert t.agent == "openhands"
    assert t.locator == "$"
    assert len(t.turns) == turns
    assert Counter(u.kind for u in t.turns) == Counter(kinds)
    assert t.outcome == outcome
    for u in t.turns:
        if u.kind != "env":
            assert u.observation is None and u.observation_kind == "none"


def test_runtime_basic_fields(sample: Path) -> None:
    (t,) = _trajs(sample / "openhands" / "runtime_trajs_basic.json")
    assert t.task == (
        "Please create a simple 2048 game. No need to run it. "
        "Please finish the interaction after your finish coding."
    )
    edit = t.turns[0]
    assert edit.locator == "[1]+[2]"
    assert edit.tool_name == "str_replace_editor"
    assert edit.tool_call_id == "toolu_017nBp7UfiGqyrA7j77HgtFP"
    assert json.loads(edit.tool_args)["command"] == "create"
    assert edit.observation_kind == "file_view"
    assert edit.observation.startswith("--- /workspace/game_2048.py\n+++ /workspa")
    assert json.loads(edit.state) == {"path": "/workspace/game_2048.py"}
    assert edit.is_error is False
    assert t.turns[1].tool_name == "finish" and t.turns[1].kind == "message"


def test_runtime_gui_mode_fields(sample: Path) -> None:
    (t,) = _trajs(sample / "openhands" / "runtime_trajs_basic_gui_mode.json")
    assert t.task.startswith("I want to create a VueJS app that allows me to:")
    assert t.model == "claude-3-5-sonnet-20241022"
    mkdir = t.turns[0]
    assert mkdir.locator == "[7]+[8]"
    assert mkdir.action == "mkdir -p /workspace/todo-app"
    assert mkdir.tool_name == "execute_bash"
    assert mkdir.tool_call_id == "toolu_01W9Z8jBctr8X2frZV9p1RYs"
    assert mkdir.exit_code == 0 and mkdir.is_error is False
    assert mkdir.observation_kind == "stdout"
    assert json.loads(mkdir.state) == {"working_dir": "/workspace"}
    assert mkdir.started_at == datetime(2025, 1, 20, 20, 29, 35, 40676, tzinfo=UTC)
    assert mkdir.duration_s == pytest.approx(0.658357)
    server = t.turns[3]
    # OpenHands' exit code -1: the server was still running when its output was taken, not a status it
    # exited with (the training text would otherwise read `[exit code -1]`)
    assert server.exit_code is None and server.is_error is False and json.loads(server.metadata)["command_running"] is True
    assert json.loads(server.metadata)["extras"]["metadata"]["exit_code"] == -1  # the native value stays reachable
    assert server.observation.startswith("Serving HTTP on 0.0.0.0 port 8000 (http:")
    states = [s["state"] for s in json.loads(t.metadata)["agent_states"]]
    assert states == ["loading", "init", "init", "running", "awaiting_user_input"]


def test_runtime_interactions_user_turns(sample: Path) -> None:
    (t,) = _trajs(sample / "openhands" / "runtime_trajs_basic_interactions.json")
    # raw actions: [0 user message (task), 3 agent message, 6 user, 9 agent, 12 user, 15 agent finish]
    assert [u.kind for u in t.turns] == ["message", "user", "message", "user", "message"]
    assert [u.locator for u in t.turns] == ["[1]", "[2]", "[3]", "[4]", "[5]"]
    assert t.turns[1].action == "No, I mean by Goldbach's conjecture!"


# --- eval output.jsonl (sample) -------------------------------------------------------------------


def test_multi_swe_bench_output(sample: Path) -> None:
    trajs = _trajs(sample / "openhands" / "multi_swe_bench_output.jsonl")
    assert [t.locator for t in trajs] == ["line:1", "line:2", "line:3"]
    assert [t.native_id for t in trajs] == [
        "ponylang__ponyc-4595",
        "ponylang__ponyc-4593",
        "ponylang__ponyc-4588",
    ]
    assert all(t.source_format == "openhands-output" and t.domain == "swe" for t in trajs)
    # jq: actions 25/35/51 minus the task message; cause-less error observations 0/1/1
    assert [len(t.turns) for t in trajs] == [24, 35, 51]
    # jq: caused non-ack observations 22/33/49, plus the cause-less errors
    assert [sum(u.kind == "env" for u in t.turns) for t in trajs] == [22, 34, 50]
    assert all(t.model == "openai/openrouter-llama-4-maverick" for t in trajs)
    assert [t.outcome for t in trajs] == ["finished", "finished", "error"]
    first = trajs[0]
    assert first.task.startswith("<uploaded_files>\n/workspace/ponylang__ponyc__0.1\n</uploaded_files>")
    assert json.loads(first.env_fingerprint)["openhands_version"] == "0.35.0"
    tools = json.loads(first.action_space)
    assert "execute_bash" in [tool["function"]["name"] for tool in tools]
    meta = json.loads(first.metadata)
    assert meta["system_prompt"].startswith("You are OpenHands agent")
    assert meta["instance_id"] == "ponylang__ponyc-4595"
    failed = next(u for u in first.turns if u.locator == "history[44]+history[45]")
    assert (
        failed.action
        == "cd /workspace && /workspace/ponylang__ponyc__0.1/build/bin/ponyc test.pony -o . && ./test"
    )
    assert failed.exit_code == 127 and failed.is_error is True
    assert failed.observation.startswith("bash: /workspace/ponylang__ponyc__0.1/build/bin/po")
    # an error observation with no cause (the tool call could not be parsed) is kept
    orphan = next(u for u in trajs[1].turns if u.locator == "history[28]")
    assert orphan.kind == "env" and orphan.action is None
    assert orphan.observation_kind == "error" and orphan.is_error is True
    assert orphan.observation == (
        "Parameter 'command' is expected to be one of ['view', 'create', 'str_replace', 'insert', 'undo_edit']."
    )
    think = next(u for u in first.turns if json.loads(u.metadata).get("action_type") == "think")
    assert (
        think.kind == "message"
        and json.loads(think.metadata)["ack"]["content"] == "Your thought has been logged."
    )


# --- own test files: legacy histories, the trajectory-API wrapper ---------------------------------


def test_legacy_output_rows() -> None:
    resolver, pairs = _trajs(DATA / "legacy_output.jsonl")
    # row 1, resolver output with bare dicts and no ids: user message (task), 3 command/output
    # pairs, finish -> 4 turns
    assert resolver.source_format == "openhands-output"
    assert resolver.native_id == "octo-org/hello-world/7"
    assert [u.kind for u in resolver.turns] == ["env", "env", "env", "message"]
    assert [u.action for u in resolver.turns[:3]] == [
        "cat hello.py",
        "sed -i 's/helo/hello/' hello.py && python hello.py",
        "python -m pytest -q tests/test_hello.py",
    ]
    assert [u.exit_code for u in resolver.turns[:3]] == [0, 0, 1]
    assert [u.is_error for u in resolver.turns[:3]] == [False, False, True]
    assert resolver.turns[0].observation == "print('helo')\n"
    assert resolver.turns[0].thought == "Let me look at the script first."
    assert resolver.turns[0].locator == "history[1]+history[2]"
    assert resolver.outcome == "success" and resolver.reward == 1.0
    assert resolver.task.startswith("Please fix the following issue")
    assert resolver.model is None and resolver.collected_at is None  # optional fields absent
    # row 2, old eval output of [action, observation] pairs: task pair, run, ipython, browse,
    # message (null observation), finish -> 5 turns
    assert pairs.native_id == "octo-org__hello-world-8"
    assert [u.kind for u in pairs.turns] == ["env", "env", "env", "message", "message"]
    run, ipy, browse = pairs.turns[:3]
    assert run.locator == "history[1][0]+history[1][1]"
    assert (run.action, run.exit_code, run.observation) == ("ls", 0, "hello.py\ntests\n")
    assert run.tool_name == "run" and json.loads(run.tool_args)["command"] == "ls"
    assert ipy.action == "print(1+1)" and ipy.observation_kind == "stdout"
    assert browse.observation_kind == "accessibility_tree"
    assert json.loads(browse.state) == {"url": "http://localhost:8000"}
    assert browse.duration_s == pytest.approx(2.0)
    assert pairs.outcome == "unresolved" and pairs.reward == 0.0
    assert pairs.task == "Make hello.py print 2 as well."


def test_trajectory_api_wrapper() -> None:
    (t,) = _trajs(DATA / "api_trajectory.json")
    assert t.source_format == "openhands-events"
    assert t.task == "How big is /etc/hosts, and what does example.com say?"
    assert [tool["function"]["name"] for tool in json.loads(t.action_space)] == ["execute_bash", "fetch"]
    assert json.loads(t.env_fingerprint) == {"openhands_version": "0.40.0"}
    assert json.loads(t.metadata)["agent_class"] == "CodeActAgent"
    assert [u.kind for u in t.turns] == ["env", "env", "env", "message"]
    wc, mcp, read = t.turns[:3]
    assert (wc.exit_code, wc.is_error, wc.thought) == (1, True, "Check the size.")
    assert json.loads(wc.state) == {"working_dir": "/workspace"}
    assert mcp.tool_name == "fetch" and json.loads(mcp.tool_args) == {"url": "https://example.com"}
    assert mcp.observation_kind == "tool_result" and mcp.is_error is False
    assert read.observation_kind == "error" and read.is_error is True
    assert read.tool_call_id == "toolu_a3"
    assert t.outcome == "awaiting_user_input"


# --- upstream shapes beyond event lists: asdict resolver rows, NullAction pairs, scored eval rows ------


def test_resolver_output_asdict_history() -> None:
    """OpenHands `openhands/resolver/resolve_issue.py` writes `[dataclasses.asdict(event) for event in
    state.history]`: no `source`/`id`/`args`/`extras`, a command's `CmdOutputMetadata` as top-level
    `metadata` (`openhands/events/observation/commands.py`)."""
    (t,) = _trajs(DATA / "resolver_output_asdict.jsonl")
    row = json.loads((DATA / "resolver_output_asdict.jsonl").read_text())
    # 9 events: the instruction (the task, as the event-stream form takes it), 3 action/observation
    # pairs, finish, and the harness' agent_state_changed
    assert len(row["history"]) == 9
    assert t.task == row["instruction"]
    assert json.loads(t.metadata)["task_event"] == {"id": None, "locator": "history[0]", "image_urls": None}
    assert json.loads(t.metadata)["agent_states"] == [{"id": None, "state": "finished"}]
    assert [u.kind for u in t.turns] == ["env", "env", "env", "message"]
    assert [u.locator for u in t.turns] == [
        "history[1]+history[2]", "history[3]+history[4]", "history[5]+history[6]", "history[7]"]
    run, pytest_run, edit, finish = t.turns
    assert [u.exit_code for u in t.turns] == [0, 1, None, None]
    assert [u.is_error for u in t.turns] == [False, True, False, None]
    assert json.loads(run.state) == {"working_dir": "/workspace"}
    assert json.loads(pytest_run.state) == {"working_dir": "/workspace/tests"}
    assert (run.action, run.tool_name, run.thought) == ("python hello.py", "run", "Reproduce the typo first.")
    assert pytest_run.observation.endswith("1 failed in 0.02s")
    assert json.loads(pytest_run.metadata)["extras"]["metadata"]["hostname"] == "runtime-7f3a"
    # the edit's own fields stand where a serialized event has `args`
    edit_args = {"path": "/workspace/hello.py", "command": "str_replace", "file_text": None, "old_str": "helo",
                 "new_str": "hello", "insert_line": None, "content": "", "start": 1, "end": -1}
    assert edit.tool_name == "edit" and json.loads(edit.tool_args) == edit_args
    assert edit.action == "edit " + json.dumps(edit_args, sort_keys=True, separators=(",", ":"))
    assert edit.thought == "Fix the typo." and edit.observation_kind == "file_view"
    assert json.loads(edit.state) == {"path": "/workspace/hello.py"}
    assert finish.action == "Fixed the typo in hello.py." and finish.observation is None
    assert (t.native_id, t.outcome, t.reward) == ("octo-org/hello-world/9", "failure", 0.0)


def test_gaia_rows_null_action_pair_and_score() -> None:
    """OpenHands `evaluation/benchmarks/gaia/run_infer.py`: `compatibility_for_eval_history_pairs`
    (an observation without its action is paired with `NullAction()`) and
    `test_result={'score': bool, 'model_answer', ...}`."""
    solved, wrong = _trajs(DATA / "gaia_output.jsonl")
    assert [u.kind for u in solved.turns] == ["env", "message", "env"]
    orphan = solved.turns[2]
    assert (orphan.action, orphan.tool_name, orphan.tool_args, orphan.locator) == (None, None, None, "history[3][1]")
    assert (orphan.exit_code, orphan.is_error, orphan.observation_kind) == (1, True, "stdout")
    assert orphan.observation == "[1] 431\nOSError: [Errno 98] Address already in use"
    meta = json.loads(orphan.metadata)
    assert (meta["unpaired"], meta["cause"], meta["source"], meta["observation_id"]) == (True, 2, "environment", 7)
    assert "action_type" not in meta
    assert (solved.outcome, solved.reward) == ("success", 1.0)
    assert (wrong.outcome, wrong.reward) == ("failure", 0.0)
    assert json.loads(wrong.metadata)["test_result"]["ground_truth"] == "Canberra"


def test_miniwob_rows_reward() -> None:
    """OpenHands `evaluation/benchmarks/miniwob/run_infer.py`: `test_result={'reward': reward}`."""
    clicked, missed = _trajs(DATA / "miniwob_output.jsonl")
    assert (clicked.native_id, clicked.outcome, clicked.reward) == ("browsergym/miniwob.click-button", "success", 1.0)
    assert (missed.native_id, missed.outcome, missed.reward) == ("browsergym/miniwob.choose-list", "failure", 0.0)
    assert clicked.turns[0].action == "click('13')" and clicked.turns[0].observation_kind == "accessibility_tree"


def _v0_run(i: int) -> dict:
    """`event_to_dict(CmdRunAction)` as `EventStream.add_event` writes it (id `i`)."""
    return {"id": i, "timestamp": f"2025-02-01T10:00:{i:02d}.000001", "source": "agent",
            "message": f"Running command: ls d{i}", "action": "run",
            "args": {"command": f"ls d{i}", "is_input": False, "thought": "", "blocking": False, "hidden": False,
                     "confirmation_state": "confirmed"}}


def _v0_output(i: int, code: int) -> dict:
    """`event_to_dict(CmdOutputObservation)` answering the action with id `i - 1`."""
    return {"id": i, "timestamp": f"2025-02-01T10:00:{i:02d}.000001", "source": "agent",
            "message": f"Command `ls d{i - 1}` executed with exit code {code}.", "cause": i - 1, "observation": "run",
            "content": f"out{i - 1}", "success": code == 0,
            "extras": {"command": f"ls d{i - 1}", "hidden": False, "metadata": {
                "exit_code": code, "pid": -1, "username": "root", "hostname": "oh", "working_dir": "/workspace",
                "py_interpreter_path": "", "prefix": "", "suffix": ""}}}


def test_v0_session_directory(tmp_path: Path) -> None:
    """A V0 session as OpenHands `openhands/events/stream.py` persists it: `EventStream.add_event` writes
    `events/{id}.json` (`openhands/storage/locations.py`, `get_conversation_event_filename`), every 25
    events a cache page `event_cache/{start}-{end}.json`, and the conversation store `metadata.json`."""
    session = tmp_path / "sessions" / "5f2c0a9e1b7d4e3a"
    (session / "events").mkdir(parents=True)
    (session / "event_cache").mkdir()
    events = [{"id": 0, "timestamp": "2025-02-01T10:00:00.000001", "source": "user", "message": "list the dirs",
               "action": "message", "args": {"content": "list the dirs", "image_urls": [], "wait_for_response": False}}]
    for i in range(1, 25, 2):  # 12 commands (odd ids), each answered by the next id; `ls d3` exits 2
        events += [_v0_run(i), _v0_output(i + 1, 2 if i == 3 else 0)]
    events += [{"id": 25, "timestamp": "2025-02-01T10:00:30.000001", "source": "agent", "message": "All done!",
                "action": "finish", "args": {"final_thought": "done", "task_completed": "true", "outputs": {},
                                             "thought": ""}},
               {"id": 26, "timestamp": "2025-02-01T10:00:31.000001", "source": "environment", "message": "",
                "observation": "agent_state_changed", "content": "",
                "extras": {"agent_state": "finished", "reason": ""}}]
    for ev in events:
        (session / "events" / f"{ev['id']}.json").write_text(json.dumps(ev))
    (session / "event_cache" / "0-25.json").write_text(json.dumps(events[:25]))
    (session / "metadata.json").write_text(json.dumps({
        "conversation_id": "5f2c0a9e1b7d4e3a", "github_user_id": None, "selected_repository": None,
        "user_id": None, "selected_branch": None, "title": "list the dirs", "last_updated_at": "2025-02-01T10:00:31",
        "trigger": "gui", "created_at": "2025-02-01T09:59:59", "llm_model": "anthropic/claude-sonnet-4-20250514",
        "accumulated_cost": 0.12, "prompt_tokens": 9000, "completion_tokens": 400, "total_tokens": 9400}))
    # the server's state and settings beside them: claimed, not read, not quarantined
    (session / "init.json").write_text(json.dumps({"llm_api_key": "sk-not-read"}))
    for name in ("agent_state.pkl", "conversation_stats.pkl"):
        (session / name).write_bytes(b"\x80\x04\x95\x00")
    (session / "llm_registry.json").write_text("{}")
    # read from the parent: the session folder is found by the walk; its files are not read again
    (t,) = _trajs(tmp_path / "sessions")
    assert (t.source_format, t.source, t.locator, t.native_id) == (
        "openhands-session", str(session), "$", "5f2c0a9e1b7d4e3a")
    assert t.task == "list the dirs" and t.outcome == "finished"
    assert t.model == "anthropic/claude-sonnet-4-20250514"
    assert t.collected_at == datetime(2025, 2, 1, 10, 0, 0, 1, tzinfo=UTC)
    # events 1..24 are 12 command/output pairs, in id order (10.json sorts before 2.json as text), then finish
    assert len(t.turns) == 13
    assert [u.action for u in t.turns] == [f"ls d{i}" for i in range(1, 25, 2)] + ["done"]
    assert [u.kind for u in t.turns] == ["env"] * 12 + ["message"]
    assert [u.exit_code for u in t.turns] == [0, 2] + [0] * 10 + [None]
    assert [u.is_error for u in t.turns] == [False, True] + [False] * 10 + [None]
    assert [u.observation for u in t.turns[:3]] == ["out1", "out3", "out5"]
    assert t.turns[0].locator == "events[1]+events[2]" and t.turns[12].locator == "events[25]"
    meta = json.loads(t.metadata)
    assert meta["event_files"] == 27
    assert meta["agent_states"] == [{"id": 26, "state": "finished"}]
    assert meta["session"] == {
        "conversation_id": "5f2c0a9e1b7d4e3a", "title": "list the dirs", "trigger": "gui",
        "created_at": "2025-02-01T09:59:59", "last_updated_at": "2025-02-01T10:00:31",
        "llm_model": "anthropic/claude-sonnet-4-20250514", "accumulated_cost": 0.12, "prompt_tokens": 9000,
        "completion_tokens": 400, "total_tokens": 9400}


# --- own event lists: delegation, recall -------------------------------------------------------------


def _tcm(call_id: str, name: str) -> dict:
    """`tool_call_metadata` as CodeActAgent attaches it to the actions one LLM response asked for."""
    return {"function_name": name, "tool_call_id": call_id, "total_calls_in_response": 1,
            "model_response": {"id": f"resp-{call_id}", "model": "claude-3-5-sonnet-20241022", "choices": []}}


def _delegation(obs_call: bool) -> list[dict]:
    """CodeActAgent delegating to BrowsingAgent (`openhands/controller/agent_controller.py`): the
    delegate's own events follow the `AgentDelegateAction` in the same stream, and `end_delegate` adds an
    `AgentDelegateObservation` with no `cause`, carrying the delegate action's `tool_call_metadata`
    (`obs_call`; older versions did not copy it)."""
    ts = "2025-03-01T09:00:{:02d}.000001"
    task = "Look up the capital of France on the web."
    delegate = {"id": 1, "timestamp": ts.format(1), "source": "agent",
                "message": "I'm asking BrowsingAgent for help with this task.", "action": "delegate",
                "args": {"agent": "BrowsingAgent", "inputs": {"task": task}, "thought": "The browser knows."},
                "tool_call_metadata": _tcm("toolu_d1", "delegate_to_browsing_agent")}
    result = {"id": 6, "timestamp": ts.format(6), "source": "agent", "message": "", "observation": "delegate",
              "content": "Delegated agent finished with result:\n\nBrowsingAgent finishes task with content: Paris",
              "extras": {"outputs": {"content": "Paris"}}}
    if obs_call:
        result["tool_call_metadata"] = delegate["tool_call_metadata"]
    return [
        {"id": 0, "timestamp": ts.format(0), "source": "user", "message": task, "action": "message",
         "args": {"content": task, "image_urls": None, "wait_for_response": False}},
        delegate,
        # the delegate's steps: a browser action answered by its `cause`, then its finish
        {"id": 2, "timestamp": ts.format(2), "source": "agent", "message": "Executing browser actions: goto",
         "action": "browse_interactive",
         "args": {"browser_actions": 'goto("https://en.wikipedia.org/wiki/France")', "thought": "",
                  "browsergym_send_msg_to_user": "", "return_axtree": False}},
        {"id": 3, "timestamp": ts.format(3), "source": "environment", "message": "Visited France", "cause": 2,
         "observation": "browse", "content": "France ... Capital: Paris",
         "extras": {"url": "https://en.wikipedia.org/wiki/France", "error": False}},
        {"id": 4, "timestamp": ts.format(4), "source": "agent", "message": "Paris", "action": "finish",
         "args": {"outputs": {"content": "Paris"}, "thought": "", "final_thought": "Paris"}},
        {"id": 5, "timestamp": ts.format(5), "source": "environment", "message": "", "cause": None,
         "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "finished"}},
        result,
        {"id": 7, "timestamp": ts.format(7), "source": "agent", "message": "The capital is Paris.",
         "action": "finish", "args": {"outputs": {}, "thought": "", "final_thought": "The capital is Paris."}},
    ]


@pytest.mark.parametrize("obs_call", [True, False], ids=["tool_call_id", "last_open_delegate"])
def test_delegate_observation_without_cause_answers_its_delegate_action(tmp_path: Path, obs_call: bool) -> None:
    """An `AgentDelegateObservation` has no `cause`: it answers its delegate action by tool call id, else
    as the latest delegate action still unanswered, not as an unpaired env turn."""
    path = tmp_path / "delegation.json"
    path.write_text(json.dumps(_delegation(obs_call)))
    (t,) = _trajs(path)
    assert len(t.turns) == 4
    assert [(u.kind, u.locator) for u in t.turns] == [
        ("env", "[1]+[6]"), ("env", "[2]+[3]"), ("message", "[4]"), ("message", "[7]")]
    d = t.turns[0]
    assert (d.tool_name, d.tool_call_id) == ("delegate_to_browsing_agent", "toolu_d1")
    assert d.action == 'delegate_to_browsing_agent {"agent":"BrowsingAgent","inputs":{"task":"Look up the ' \
        'capital of France on the web."}}'
    assert d.observation == "Delegated agent finished with result:\n\nBrowsingAgent finishes task with content: Paris"
    assert (d.observation_kind, d.is_error, d.duration_s) == ("tool_result", False, 5.0)
    meta = json.loads(d.metadata)
    assert (meta["observation_type"], meta["observation_id"]) == ("delegate", 6)
    assert meta["extras"] == {"outputs": {"content": "Paris"}}
    assert "unpaired" not in meta


def test_delegate_observations_answer_nested_delegations(tmp_path: Path) -> None:
    """Nested delegations end innermost first; a cause-less observation with a tool call id answers the
    action with that id, one without answers the latest delegate action still unanswered."""
    events = _delegation(True)
    inner = {"id": 10, "timestamp": "2025-03-01T09:00:03.500001", "source": "agent", "message": "",
             "action": "delegate", "args": {"agent": "CodeActAgent", "inputs": {"task": "count"}, "thought": ""}}
    inner_done = {"id": 11, "timestamp": "2025-03-01T09:00:03.900001", "source": "agent", "message": "",
                  "observation": "delegate", "content": "CodeActAgent finishes task with content: 3",
                  "extras": {"outputs": {"content": "3"}}}
    events[4:4] = [inner, inner_done]  # after the browser step, before BrowsingAgent's finish
    path = tmp_path / "nested.json"
    path.write_text(json.dumps(events))
    (t,) = _trajs(path)
    assert [(u.kind, u.locator, u.tool_name) for u in t.turns] == [
        ("env", "[1]+[8]", "delegate_to_browsing_agent"), ("env", "[2]+[3]", "browse_interactive"),
        ("env", "[4]+[5]", "delegate"), ("message", "[6]", None), ("message", "[9]", None)]
    assert t.turns[2].observation == "CodeActAgent finishes task with content: 3"
    assert t.turns[0].observation.endswith("content: Paris")


def _recalls(source: str, answer: str | None) -> list[dict]:
    """A V0 conversation with microagents (`openhands/memory/memory.py`): each user message is followed by
    a `RecallAction` of it (`workspace_context` for the first, `knowledge` after; source "user", "agent"
    in some versions), answered by a `RecallObservation` when something was found, else by
    `NullObservation(content='')`. `answer` is how the second recall is answered: "null", an empty
    "recall" observation, or nothing (a state change in its place)."""
    ts = "2025-05-02T08:00:{:02d}.000001"

    def user(i: int, text: str) -> dict:
        return {"id": i, "timestamp": ts.format(i), "source": "user", "message": text, "action": "message",
                "args": {"content": text, "image_urls": None, "wait_for_response": False}}

    def recall(i: int, text: str, kind: str, src: str = "user") -> dict:
        return {"id": i, "timestamp": ts.format(i), "source": src, "message": f"Retrieving content for: {text[:50]}",
                "action": "recall", "args": {"recall_type": kind, "query": text, "thought": ""}}

    def null(i: int, cause: int) -> dict:
        return {"id": i, "timestamp": ts.format(i), "source": "environment", "message": "No observation",
                "cause": cause, "observation": "null", "content": "", "extras": {}}

    def run(i: int, cmd: str) -> list[dict]:
        return [{"id": i, "timestamp": ts.format(i), "source": "agent", "message": f"Running command: {cmd}",
                 "action": "run", "args": {"command": cmd, "is_input": False, "thought": "", "blocking": False,
                                           "hidden": False, "confirmation_state": "confirmed"}},
                {"id": i + 1, "timestamp": ts.format(i + 1), "source": "agent", "cause": i, "observation": "run",
                 "message": f"Command `{cmd}` executed with exit code 0.", "content": "",
                 "extras": {"command": cmd, "metadata": {"exit_code": 0, "working_dir": "/workspace"}}}]

    second = {"null": [null(10, 9)],
              None: [{"id": 10, "timestamp": ts.format(10), "source": "environment", "message": "",
                      "observation": "agent_state_changed", "content": "", "extras": {"agent_state": "running"}}],
              "recall": [{"id": 10, "timestamp": ts.format(10), "source": "environment", "message": "", "cause": 9,
                          "observation": "recall", "content": "",
                          "extras": {"recall_type": "knowledge", "microagent_knowledge": []}}]}[answer]
    return [
        user(0, "Add a README to the repo."),
        recall(1, "Add a README to the repo.", "workspace_context"),
        {"id": 2, "timestamp": ts.format(2), "source": "environment", "message": "", "observation": "agent_state_changed",
         "content": "", "extras": {"agent_state": "running", "reason": ""}},
        null(3, 1),
        *run(4, "echo hi > README.md"),
        {"id": 6, "timestamp": ts.format(6), "source": "agent", "message": "Done. Anything else?", "action": "message",
         "args": {"content": "Done. Anything else?", "image_urls": None, "wait_for_response": True}},
        {"id": 7, "timestamp": ts.format(7), "source": "environment", "message": "", "observation": "agent_state_changed",
         "content": "", "extras": {"agent_state": "awaiting_user_input", "reason": ""}},
        user(8, "Also add a LICENSE."),
        recall(9, "Also add a LICENSE.", "knowledge", source),
        *second,
        *run(11, "touch LICENSE"),
        user(13, "Note it in the changelog."),
        recall(14, "Note it in the changelog.", "knowledge"),
        {"id": 15, "timestamp": ts.format(15), "source": "environment", "message": "Added microagent knowledge",
         "cause": 14, "observation": "recall", "content": "Added microagent knowledge",
         "extras": {"recall_type": "knowledge", "microagent_knowledge": [
             {"name": "changelog", "trigger": "changelog", "content": "Keep CHANGELOG.md entries short."}]}},
        {"id": 16, "timestamp": ts.format(16), "source": "agent", "message": "All done!", "action": "finish",
         "args": {"outputs": {}, "thought": "", "final_thought": "Added README, LICENSE and a changelog note."}},
    ]


@pytest.mark.parametrize(
    "source, answer", [("user", "null"), ("agent", "null"), ("agent", None), ("user", "recall")],
    ids=["user-null", "agent-null", "agent-unanswered", "user-empty-recall"],
)
def test_a_recall_that_found_nothing_does_not_repeat_the_user_message(
    tmp_path: Path, source: str, answer: str | None
) -> None:
    """A `RecallAction` repeats the user message just before it as its query: when it found nothing
    (`NullObservation`, an empty `RecallObservation`, no answer) it is a note on that message (the task's
    event, or the user turn), not a second user turn. A recall that found microagent knowledge stays a turn."""
    path = tmp_path / "recalls.json"
    path.write_text(json.dumps(_recalls(source, answer)))
    (t,) = _trajs(path)
    assert t.task == "Add a README to the repo."
    assert len(t.turns) == 7
    assert [(u.kind, u.locator, u.tool_name, u.observation_kind) for u in t.turns] == [
        ("env", "[4]+[5]", "run", "stdout"),
        ("message", "[6]", None, "none"),
        ("user", "[8]", None, "none"),
        ("env", "[11]+[12]", "run", "stdout"),
        ("user", "[13]", None, "none"),
        ("env", "[14]+[15]", "recall", "tool_result"),
        ("message", "[16]", None, "none"),
    ]
    assert [u.action for u in t.turns if u.kind == "user"] == ["Also add a LICENSE.", "Note it in the changelog."]
    knowledge = t.turns[5]
    assert knowledge.action == "Note it in the changelog." and knowledge.observation == "Added microagent knowledge"
    assert json.loads(knowledge.metadata)["extras"]["microagent_knowledge"][0]["name"] == "changelog"
    # the recalls that found nothing are kept as notes on the message they repeat
    assert json.loads(t.metadata)["task_event"]["recall"] == {
        "id": 1, "locator": "[1]", "recall_type": "workspace_context", "source": "user",
        "observation": "null", "observation_id": 3, "observation_locator": "[3]"}
    note = {"id": 9, "locator": "[9]", "recall_type": "knowledge", "source": source}
    if answer is not None:
        note.update(observation=answer, observation_id=10, observation_locator="[10]")
    assert json.loads(t.turns[2].metadata)["recall"] == note


def test_domain_override(sample: Path) -> None:
    (t,) = list(read_path(sample / "openhands" / "runtime_trajs_basic.json", domain_override="terminal"))
    assert t.domain == "terminal"


# --- malformed records ----------------------------------------------------------------------------


def test_malformed_event_is_quarantined(tmp_path: Path) -> None:
    bad = tmp_path / "events.json"
    events = [{"id": 0, "source": "user", "action": "message", "args": {"content": "hi"}}, 5]
    bad.write_text(json.dumps(events))
    (q,) = _read(bad)
    assert isinstance(q, QuarantineRecord)
    assert q.importer == "openhands-events" and q.reason == "malformed_event"
    assert "[1]: expected an event object" in q.detail
    events[1] = {
        "id": 1,
        "source": "agent",
        "timestamp": "2025-01-01T00:00:00",
    }  # neither action nor observation
    bad.write_text(json.dumps(events, indent=1))
    (q,) = _read(bad)
    assert q.reason == "malformed_event" and "$ [1]: event has neither" in q.detail


def test_malformed_output_row_is_quarantined(tmp_path: Path) -> None:
    good = (DATA / "legacy_output.jsonl").read_text().splitlines()[1]
    row = json.loads(good)
    row["history"].append(
        {"source": "agent", "timestamp": "2024-07-01T10:00:30"}
    )  # neither action nor observation
    path = tmp_path / "output.jsonl"
    path.write_text(good + "\n" + json.dumps(row) + "\n")
    ok, q = _read(path)
    assert isinstance(ok, Trajectory) and isinstance(q, QuarantineRecord)
    assert q.locator == "line:2" and q.reason == "malformed_event"
    assert "line:2 history[6]" in q.detail


def test_a_bare_finish_has_no_action_text(sample: Path, tmp_path: Path) -> None:
    # a finish with no final thought or message and the default empty `outputs` (FinishAction's
    # `outputs: dict = {}`) said nothing: its action is empty, not the text "{}"
    events = json.loads((sample / "openhands" / "runtime_trajs_basic.json").read_text())
    (finish,) = [ev for ev in events if ev.get("action") == "finish"]
    finish["message"] = ""
    finish["args"] = {**finish["args"], "final_thought": "", "outputs": {}}
    (tmp_path / "run.json").write_text(json.dumps(events))
    (t,) = _trajs(tmp_path / "run.json")
    assert t.turns[1].tool_name == "finish" and t.turns[1].action is None
    finish["args"]["outputs"] = {"answer": "4"}  # an output it gave is its action still
    (tmp_path / "run.json").write_text(json.dumps(events))
    (t,) = _trajs(tmp_path / "run.json")
    assert t.turns[1].action == '{"answer":"4"}'
