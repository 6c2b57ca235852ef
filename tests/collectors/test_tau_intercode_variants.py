"""Other published versions of the InterCode and tau-bench result formats (fixtures and their
origins: tests/data/tau-intercode-variants/README.md).

Expected values were read from the fixture JSON itself (json.load, not the importer):
  turns = len(turn_history.actions); turn reward = float(rewards[i]); is_error = not valid_action[i]
  (None where valid_action is null); thought = thoughts[i]; trajectory reward = summary.max_reward.
`_raw_expectations` recomputes the same columns from the raw file so that every task is checked,
and the literal lists below pin the values seen when reading the files by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid

DATA = Path(__file__).resolve().parent.parent / "data" / "tau-intercode-variants"

PLAN_SOLVE = "ic_bash_plan_solve_gpt-3.5_fs_1__tasks0_2.json"
PYTHON = "ic_python_multiturn_gpt-3.5_7_turns__tasks94_102_107.json"
SQL_REACT = "ic_sql_react_gpt-3.5_10_turns__tasks0_2_3.json"
CTF_MULTI = "ic_ctf_multiturn_gpt-4_10_turns__tasks17-19.json"
TAU2 = "tau2_retail_claude-sonnet-4-5__task15_msgs0-7.json"
SQL_REFINE = "ic_sql_plan_solve_refine_3_turns__meta_logs103.json"
SQL_HUMAN = "ic_sql_multiturn_human_10_turns__task809_steps0-4.json"

INTERCODE = [PLAN_SOLVE, PYTHON, SQL_REACT, CTF_MULTI]


def _trajs(name: str) -> list[Trajectory]:
    recs = list(read_path(DATA / name))
    assert all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    return recs


def _raw_expectations(rec: dict) -> dict:
    th = rec["turn_history"]
    n = len(th["actions"])
    valid = th.get("valid_action", [None] * n)
    submit = [a.strip() == "submit" for a in th["actions"]]  # scored, nothing ran: no observation
    return {
        "actions": th["actions"],
        "observations": [None if s else o for s, o in zip(submit, th["observations"], strict=True)],
        "kinds": [("message", "none") if s else ("env", "stdout") for s in submit],
        "rewards": [float(r) for r in th["rewards"]],
        "is_error": [None if v is None or s else not v for s, v in zip(submit, valid, strict=True)],
        "thoughts": th.get("thoughts", [None] * n),
        "reward": float(rec["summary"]["max_reward"]),
        "task": rec["query"],
        "native_id": str(rec["task_id"]),
    }


@pytest.mark.parametrize("name", INTERCODE)
def test_intercode_variant_matches_raw_file(name: str) -> None:
    raw = json.loads((DATA / name).read_text())
    trajs = _trajs(name)
    assert len(trajs) == len(raw)
    for (key, rec), t in zip(raw.items(), trajs, strict=True):
        exp = _raw_expectations(rec)
        assert t.locator.endswith(f"key:{key}")
        assert t.source_format == "intercode" and t.domain == "terminal"
        assert [u.action for u in t.turns] == exp["actions"]
        assert [u.observation for u in t.turns] == exp["observations"]
        assert [u.reward for u in t.turns] == exp["rewards"]
        assert [u.is_error for u in t.turns] == exp["is_error"]
        assert [u.thought for u in t.turns] == exp["thoughts"]
        assert [(u.kind, u.observation_kind) for u in t.turns] == exp["kinds"]
        assert t.reward == exp["reward"]
        assert t.outcome == ("success" if exp["reward"] >= 1.0 else "failure")
        assert t.task == exp["task"] and t.native_id == exp["native_id"]
        assert json.loads(t.metadata)["environment"] == rec["environment"]
    assert_schema_valid(trajs)


def test_bash_plan_solve() -> None:
    """Plan-and-solve runs add `turn_history.steps` (the plan) and a top-level `info` (the final
    evaluation); every action was wrapped in ```BASH fences, so all are invalid."""
    first, second = _trajs(PLAN_SOLVE)
    assert [len(first.turns), len(second.turns)] == [6, 3]
    assert [u.reward for u in first.turns] == [0.67, 0.67, 0.67, 0.7100000000000001, 0.7100000000000001, 0.7100000000000001]
    assert all(u.is_error is True for u in first.turns + second.turns)
    assert first.turns[0].action == "```BASH\nls / | grep testbed\n```"
    assert first.turns[0].observation == "/bin/bash: line 3: BASH: command not found\n/bin/bash: line 3: testbed: command not found\n"
    assert first.reward == 0.7100000000000001 and first.outcome == "failure"
    meta = json.loads(first.metadata)
    assert meta["turn_history_extra"]["steps"][0] == "Check that the `testbed` directory exists."
    assert len(meta["turn_history_extra"]["steps"]) == 6
    assert meta["info"]["eval_obs"] == "f32a3a97638afeb2ee2a15cfe335ab72\n"
    assert meta["summary"] == {"max_reward": 0.7100000000000001, "max_reward_idx": 3}
    assert second.native_id == "2" and second.task == 'Calculate the md5 sum of the contents of the sorted list of files "$FILES"'


def test_python_one_line_document() -> None:
    """ic_python results are published as a one-line JSON document (read through the JSON-lines
    path, hence the `line:1/` locator prefix); valid_action is null throughout."""
    t94, t102, t107 = _trajs(PYTHON)
    assert [t.locator for t in (t94, t102, t107)] == ["line:1/key:94", "line:1/key:102", "line:1/key:107"]
    assert [len(t.turns) for t in (t94, t102, t107)] == [1, 7, 2]
    assert [t.native_id for t in (t94, t102, t107)] == ["94", "102", "107"]
    assert [t.reward for t in (t94, t102, t107)] == [1.0, 0.3333333333333333, 1.0]
    assert [t.outcome for t in (t94, t102, t107)] == ["success", "failure", "success"]
    assert [u.observation for u in t107.turns] == ["Test case did not pass. Please try again.", "{'output': '', 'error': ''}"]
    assert [u.reward for u in t107.turns] == [0.0, 1.0]
    assert all(u.is_error is None for t in (t94, t102, t107) for u in t.turns)
    assert json.loads(t107.turns[0].metadata) == {"valid_action": None}
    assert t94.turns[0].action == "def find_min_length_sublist(lst):\n    return min(len(sublist) for sublist in lst)"


def test_sql_react() -> None:
    """ReAct SQL: `thoughts` per turn, `execute[...]`/`submit` actions, int 0 rewards next to floats."""
    t0, t2, t3 = _trajs(SQL_REACT)
    assert [len(t.turns) for t in (t0, t2, t3)] == [4, 4, 4]
    assert [u.action for u in t0.turns] == [
        "execute[SELECT name FROM poker_players ORDER BY num_final_tables ASC]",
        "execute[DESCRIBE poker_players]",
        "execute[SELECT player_name FROM poker_players ORDER BY final_tables ASC]",
        "submit",
    ]
    assert t0.turns[1].thought == "The poker_players table does not have a name column. I should check what columns are available."
    assert [u.is_error for u in t0.turns] == [True, False, False, None]
    assert (t0.turns[3].kind, t0.turns[3].observation) == ("message", None)
    assert json.loads(t0.turns[3].metadata) == {"valid_action": True, "submit": True}
    assert [u.reward for u in t0.turns] == [0.0, 0.0, 0.0, 0.0]
    assert t0.reward == 0.0 and t0.outcome == "failure"
    assert t2.turns[2].observation == "[(510.333333, Decimal('329000'))]"
    assert [u.reward for u in t2.turns] == [0.0, 0.0, 0.0, 1.0] and t2.outcome == "success"
    assert t3.turns[2].observation == "[(3,)]" and t3.turns[3].action == "submit"
    assert [json.loads(t.metadata)["hardness"] for t in (t0, t2, t3)] == ["medium", "medium", "easy"]


def test_ctf_multiturn() -> None:
    """CTF multiturn (unlike the 25-turn CTF sample) records valid_action; rewards are ints."""
    t17, t18, t19 = _trajs(CTF_MULTI)
    assert [t.native_id for t in (t17, t18, t19)] == ["17", "18", "19"]
    assert [len(t.turns) for t in (t17, t18, t19)] == [2, 2, 4]
    assert t17.turns[0].action == "echo -e '\\x70'" and t17.turns[0].observation == "p\n"
    assert t18.turns[1].action == "submit picoCTF{61}"
    assert [u.is_error for u in t19.turns] == [True, True, False, False]
    assert [u.reward for u in t19.turns] == [0.0, 0.0, 0.0, 1.0]
    assert t19.turns[1].observation.startswith("OCI runtime exec failed: exec failed:")
    assert t19.turns[1].observation.endswith("$PATH: unknown\r\n")
    assert all(t.reward == 1.0 and t.outcome == "success" for t in (t17, t18, t19))


def test_tau2_results() -> None:
    """tau2-bench results (`{timestamp, info, tasks, simulations:[{task_id, reward_info, messages}]}`,
    tool calls as `{id, name, arguments}`, results as `role: tool` with the call's `id`): the
    harness's greeting, then the user's request (the task), a respond turn, two tool turns."""
    raw = json.loads((DATA / TAU2).read_text())
    msgs = raw["simulations"][0]["messages"]
    (t,) = _trajs(TAU2)
    assert t.source_format == "tau2-bench" and t.locator == "simulations[0]"
    assert t.native_id == "15" and t.domain == "mcp" and t.model == "claude-sonnet-4-5"
    assert t.reward == 1.0 and t.outcome == "success"
    assert t.task == msgs[1]["content"]
    assert [u.kind for u in t.turns] == ["message", "env", "env", "env"]
    assert [u.locator for u in t.turns] == ["messages[0]", "messages[2]+messages[3]",
                                             "messages[4].tool_calls[0]+messages[5]", "messages[6].tool_calls[0]+messages[7]"]
    assert [u.observation_kind for u in t.turns] == ["none", "user_reply", "tool_result", "tool_result"]
    greet, respond, find, details = t.turns
    assert greet.action == "Hi! How can I help you today?" and greet.observation is None
    assert respond.tool_name == "respond" and respond.observation == msgs[3]["content"]
    assert find.tool_name == "find_user_id_by_name_zip" and find.tool_call_id == "toolu_01R91KWn73YSz78kr2HFXJ1b"
    assert json.loads(find.tool_args) == {"first_name": "Fatima", "last_name": "Johnson", "zip": "78712"}
    assert find.observation == "fatima_johnson_7581" and find.is_error is False
    assert details.observation == msgs[7]["content"]
    # 07:16:45.913621 -> 07:16:45.914105
    assert find.duration_s == pytest.approx(0.000484)
    assert find.started_at.isoformat() == "2025-10-31T07:16:45.913621+00:00"
    assert t.collected_at.isoformat() == "2025-10-31T07:16:30.888577+00:00"
    assert json.loads(t.metadata)["termination_reason"] == "user_stop"
    assert_schema_valid([t])


def _tau2_doc(messages: list[dict]) -> dict:
    """A document of the published tau2 data model (`tau2.data_model`): `Results` with one
    `SimulationRun` and its `Task`, for the paths the retail file does not take."""
    return {
        "timestamp": "2025-11-01T10:00:00", "info": {"environment_info": {"domain_name": "telecom", "tool_defs": [{"name": "get_line"}]},
                                                     "agent_info": {"llm": "gpt-4.1"}},
        "tasks": [{"id": "t1", "user_scenario": {"instructions": {"reason_for_call": "no signal"}}}],
        "simulations": [{"id": "s1", "task_id": "t1", "trial": 2, "start_time": "2025-11-01T10:00:00",
                         "reward_info": {"reward": 0.0}, "messages": messages}],
    }


def test_tau2_user_tools_errors_and_unpaired(tmp_path: Path) -> None:
    doc = _tau2_doc([
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": "My phone has no signal."},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "get_line", "arguments": {"n": 1}}]},
        {"role": "tool", "id": "c1", "content": "Error: no such line", "error": True, "requestor": "assistant"},
        {"role": "assistant", "content": "Please toggle airplane mode."},
        {"role": "user", "content": None, "tool_calls": [{"id": "u1", "name": "toggle_airplane_mode", "arguments": {}, "requestor": "user"}]},
        {"role": "tool", "id": "u1", "content": "Airplane mode: OFF", "error": False, "requestor": "user"},
        {"role": "user", "content": "Done, still nothing."},
    ])
    (tmp_path / "results.json").write_text(json.dumps(doc, indent=1))
    (t,) = list(read_path(tmp_path / "results.json"))
    assert isinstance(t, Trajectory), t
    assert t.native_id == "t1:2" and t.model == "gpt-4.1" and t.outcome == "failure"
    assert t.task == "My phone has no signal."
    assert json.loads(t.initial_state) == {"instructions": {"reason_for_call": "no signal"}}
    assert json.loads(t.action_space) == [{"name": "get_line"}]
    greet, call, respond = t.turns
    assert call.is_error is True and call.observation == "Error: no such line"
    assert respond.observation == "Done, still nothing." and respond.locator == "messages[4]+messages[7]"
    assert json.loads(respond.metadata) == {"user_tool_calls": [
        {"id": "u1", "name": "toggle_airplane_mode", "arguments": {}},
        {"result_of": "u1", "content": "Airplane mode: OFF", "error": False}]}
    # a result that answers no call is kept as environment output without its action
    doc["simulations"][0]["messages"].insert(2, {"role": "tool", "id": "zz", "content": "?", "error": False})
    (tmp_path / "stray.json").write_text(json.dumps(doc, indent=1))
    (s,) = list(read_path(tmp_path / "stray.json"))
    assert isinstance(s, Trajectory), s
    assert [u.locator for u in s.turns] == ["messages[0]", "messages[2]", "messages[3].tool_calls[0]+messages[4]",
                                            "messages[5]+messages[8]"]
    stray = s.turns[1]
    assert (stray.kind, stray.action, stray.observation, stray.tool_call_id, stray.is_error) == ("env", None, "?", "zz", False)
    assert json.loads(stray.metadata) == {"call_missing": True}


def test_intercode_plan_solve_refine_logs() -> None:
    """`{meta, logs: {task: <usual record>}}`: the records sit one level down, under "logs"."""
    raw = json.loads((DATA / SQL_REFINE).read_text())
    rec = raw["logs"]["103"]
    (t,) = _trajs(SQL_REFINE)
    assert t.locator == "logs/key:103" and t.native_id == "103"
    assert [u.action for u in t.turns] == rec["turn_history"]["actions"]
    assert len(t.turns) == 7
    assert [u.is_error for u in t.turns] == [False, False, True, True, True, True, True]
    assert [u.reward for u in t.turns] == [0.0] * 7
    assert t.turns[2].observation.startswith("Error executing query: Unknown column 'treatment_")
    assert t.reward == 0.0 and t.outcome == "failure" and t.domain == "terminal"
    meta = json.loads(t.metadata)
    assert meta["run_meta"] == raw["meta"] and meta["run_meta"]["refine_turns"] == 3
    assert meta["turn_history_extra"]["steps"] == rec["turn_history"]["steps"]
    assert_schema_valid([t])


def test_intercode_human_play() -> None:
    """`{task: {environment, query_idx, query, gold, reward, trajectory: [{action, observation}]}}`."""
    (t,) = _trajs(SQL_HUMAN)
    assert t.locator == "key:809" and t.native_id == "809" and t.agent == "human"
    assert t.task == "Which languages are spoken by only one country in republic governments?"
    assert [u.action for u in t.turns] == ["show tables;", "desc country;", "desc countrylanguage;",
                                           "select count(*) from country;", "select count(*) from countrylanguage;"]
    assert [u.observation for u in t.turns][::3] == ["('city',)('country',)('countrylanguage',)", "(239,)"]
    assert [u.locator for u in t.turns] == [f"trajectory[{i}]" for i in range(5)]
    assert {u.reward for u in t.turns} == {None} and {u.is_error for u in t.turns} == {None}
    assert t.reward == 0.0 and t.outcome == "failure" and t.domain == "terminal"
    assert json.loads(t.metadata)["gold"].startswith("SELECT T2.Language FROM country AS T1 JOIN")
    assert_schema_valid([t])


def test_tau2_user_tools_outside_a_reply_and_repeated_call_ids(tmp_path: Path) -> None:
    doc = _tau2_doc([
        {"role": "assistant", "content": "Hi! How can I help you today?"},
        {"role": "user", "content": None, "tool_calls": [{"id": "u0", "name": "check_status_bar", "arguments": {}, "requestor": "user"}]},
        {"role": "tool", "id": "u0", "content": "No signal", "requestor": "user"},
        {"role": "user", "content": "My phone has no signal."},
        # two parallel calls with tau2's default id "": paired with their results in order
        {"role": "assistant", "content": None, "tool_calls": [{"id": "", "name": "get_line", "arguments": {"n": 1}},
                                                              {"id": "", "name": "get_line", "arguments": None}]},
        {"role": "tool", "id": "", "content": "line 1"},
        {"role": "tool", "id": "", "content": "line 2"},
        {"role": "assistant", "content": "Please reboot."},
        {"role": "user", "content": None, "tool_calls": [{"id": "u1", "name": "reboot", "arguments": {}, "requestor": "user"}]},
        {"role": "tool", "id": "u1", "content": "Rebooted", "requestor": "user"},
    ])
    (tmp_path / "results.json").write_text(json.dumps(doc, indent=1))
    (t,) = list(read_path(tmp_path / "results.json"))
    assert isinstance(t, Trajectory), t
    greet, first, second, reboot = t.turns
    assert [first.observation, second.observation] == ["line 1", "line 2"]
    assert second.action == "get_line" and second.tool_args is None
    assert reboot.kind == "message" and reboot.observation is None  # the run ended before the user answered
    # the user's tool use before the request and after the last agent message is kept on the trajectory
    assert json.loads(t.metadata)["user_tool_calls"] == [
        {"id": "u0", "name": "check_status_bar", "arguments": {}},
        {"result_of": "u0", "content": "No signal", "error": None},
        {"id": "u1", "name": "reboot", "arguments": {}},
        {"result_of": "u1", "content": "Rebooted", "error": None},
    ]


def test_intercode_native_id_keeps_keys_that_contain_key(tmp_path: Path) -> None:
    raw = json.loads((DATA / SQL_HUMAN).read_text())
    (tmp_path / "human.json").write_text(json.dumps({"monkey:7": raw["809"] | {"query_idx": None}}, indent=1))
    (t,) = list(read_path(tmp_path / "human.json"))
    assert t.native_id == "monkey:7"


def test_tau2_directory_format_reads_as_the_one_document(tmp_path: Path) -> None:
    # `Results.save(format="dir")`: results.json with `simulation_index` instead of `simulations`,
    # each `SimulationRun` in simulations/<id>.json
    raw = json.loads((DATA / TAU2).read_text())
    run = tmp_path / "run1"
    (run / "simulations").mkdir(parents=True)
    sims = raw.pop("simulations")
    index = [{"id": s["id"], "task_id": s["task_id"], "trial": s.get("trial"), "reward": s["reward_info"]["reward"]} for s in sims]
    (run / "results.json").write_text(json.dumps({**raw, "simulation_index": index}, indent=2))
    for s in sims:
        (run / "simulations" / f"{s['id']}.json").write_text(json.dumps(s, indent=2))
    (t,) = _trajs(run)
    (one,) = _trajs(DATA / TAU2)
    assert t.source_format == "tau2-bench" and t.locator == f"simulations/{sims[0]['id']}.json"
    assert t.source == str(run)
    assert [(u.kind, u.action, u.observation, u.tool_call_id) for u in t.turns] == [
        (u.kind, u.action, u.observation, u.tool_call_id) for u in one.turns]
    assert (t.reward, t.model, t.task, t.native_id) == (one.reward, one.model, one.task, one.native_id)
    # a simulation file cut off mid-write is that simulation's quarantine row; the others are read
    (run / "simulations" / "zz-cut.json").write_text('{"id": "zz", "messages": [')
    recs = list(read_path(run))
    assert [type(r) for r in recs] == [Trajectory, QuarantineRecord]
    assert (recs[1].locator, recs[1].reason, recs[1].importer) == ("simulations/zz-cut.json", "truncated_json", "tau2-bench-dir")


@pytest.mark.parametrize("first", [True, False])
def test_tau2_full_duplex_simulation_is_quarantined_alone(tmp_path: Path, first: bool) -> None:
    # `SimulationRun.messages` is null for full-duplex runs (the conversation is in `ticks`)
    raw = json.loads((DATA / TAU2).read_text())
    duplex = {**raw["simulations"][0], "id": "fd", "messages": None, "mode": "full_duplex",
              "ticks": [{"tick_id": 0, "agent_chunk": {"role": "assistant", "content": "Hi!"}, "user_chunk": None}]}
    raw["simulations"] = [duplex, *raw["simulations"]] if first else [*raw["simulations"], duplex]
    (tmp_path / "results.json").write_text(json.dumps(raw, indent=2))
    recs = list(read_path(tmp_path / "results.json"))
    q = [r for r in recs if isinstance(r, QuarantineRecord)]
    t = [r for r in recs if isinstance(r, Trajectory)]
    assert len(t) == 1 and len(t[0].turns) == 4
    assert [(r.locator, r.reason) for r in q] == [("simulations[0]" if first else "simulations[1]", "unsupported_variant")]
    assert "full-duplex" in q[0].detail


@pytest.mark.parametrize("tasks", [7, "t1", {"t1": {}}])
def test_tau2_tasks_that_are_no_list_leave_the_simulations_without_their_scenario(tmp_path: Path, tasks: object) -> None:
    """`tasks` only adds each simulation's scenario: a damaged one (no list) drops that, not every
    simulation of the file (all were one quarantine row, "TypeError: 'int' object is not iterable")."""
    msgs = [{"role": "assistant", "content": "Hi! How can I help you today?"}, {"role": "user", "content": "No signal."}]
    good = _tau2_doc(msgs)
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "bad.json").write_text(json.dumps({**good, "tasks": tasks}))
    (ok,) = list(read_path(tmp_path / "good.json"))
    (t,) = list(read_path(tmp_path / "bad.json"))
    assert isinstance(t, Trajectory) and len(t.turns) == len(ok.turns) == 1
    assert json.loads(ok.initial_state) == {"instructions": {"reason_for_call": "no signal"}} and t.initial_state is None
    assert (t.task, t.reward, t.native_id) == (ok.task, ok.reward, ok.native_id)
