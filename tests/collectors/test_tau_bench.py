"""tau-bench results, read through `pipelines.reader.read_path`.

Expected turn counts were taken from the raw file independently of the importer:
  jq -c '.[] | [.task_id,
      ([.traj[] | select(.role=="assistant") | (.tool_calls // []) | length] | add),     # tool calls
      ([.traj[] | select(.role=="assistant" and ((.tool_calls // [])|length)==0)] | length),  # texts
      ([.traj[] | select(.role=="user")] | length)]'                                     # user msgs
plus a python one-liner counting user messages that directly follow an assistant text (replies).
turns = tool calls + assistant texts + (user messages - replies - 1 opening message):
  task 0: 8+7+(8-7-1)=15, 1: 0+5+(6-5-1)=5, 2: 7+4+(5-4-1)=11, 3: 20+10+(11-10-1)=30,
  4: 6+6+(7-6-1)=12, 5: 6+6+(7-6-1)=12, 6: 6+5+(6-5-1)=11, 7: 5+7+(8-7-1)=12.
Every tool call has its `role: tool` result and every assistant text a user reply, so all are env.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "tau-bench"


def _trajs(path: Path) -> list[Trajectory]:
    recs = list(read_path(path))
    assert all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    return recs


def test_airline_sample(sample: Path) -> None:
    trajs = _trajs(sample / "tau-bench" / "gpt-4o-airline__tasks0-7.json")
    assert len(trajs) == 8
    assert [t.locator for t in trajs] == [f"[{i}]" for i in range(8)]
    assert all(t.source_format == "tau-bench" and t.domain == "mcp" for t in trajs)
    assert [len(t.turns) for t in trajs] == [15, 5, 11, 30, 12, 12, 11, 12]
    assert all(u.kind == "env" for t in trajs for u in t.turns)
    # raw rewards: only task 6 succeeded
    assert [t.reward for t in trajs] == [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert [t.outcome for t in trajs].count("success") == 1 and trajs[6].outcome == "success"
    assert [t.native_id for t in trajs] == [f"{i}:0" for i in range(8)]

    t = trajs[0]
    assert t.task == "Hi! I'm looking to book a flight from New York to Seattle on May 20th."
    assert json.loads(t.initial_state)["user_id"] == "mia_li_3668"
    assert json.loads(t.initial_state)["instruction"].startswith("You are mia_li_3668. You want to fly")
    assert json.loads(t.metadata)["system_prompt"].startswith("# Airline Agent Policy")
    assert t.action_space is None  # the function-calling file lists no tools

    ask = t.turns[0]  # traj[2] assistant text, traj[3] the simulated user's reply
    assert ask.locator == "traj[2]+traj[3]"
    assert (
        ask.action
        == "To assist you with booking a flight, I'll need your user ID. Could you please provide that?"
    )
    assert ask.tool_name == "respond"
    assert ask.observation_kind == "user_reply"
    assert ask.observation == "Sure, my user ID is mia_li_3668."

    call = t.turns[2]  # traj[6] tool call, traj[7] its result
    assert call.locator == "traj[6].tool_calls[0]+traj[7]"
    assert call.tool_name == "get_user_details"
    assert json.loads(call.tool_args) == {"user_id": "mia_li_3668"}
    assert call.tool_call_id == "call_oIHazX6yQrB8hUwl4cRilFKj"
    assert call.observation_kind == "tool_result"
    assert call.observation.startswith('{"name": {"first_name": "Mia", "last_name": "Li"}')
    assert call.is_error is False

    failed = next(u for u in t.turns if u.locator == "traj[20].tool_calls[0]+traj[21]")
    assert failed.tool_name == "book_reservation"
    assert failed.is_error is True and failed.observation.startswith("Error: payment amount does not add up")

    last = trajs[4].turns[-1]  # the conversation ends on a tool result
    assert last.tool_name == "transfer_to_human_agents" and last.observation == "Transfer successful"


def test_one_run_per_json_line_or_on_its_own(sample: Path, tmp_path: Path) -> None:
    runs = json.loads((sample / "tau-bench" / "gpt-4o-airline__tasks0-7.json").read_text())
    lines = tmp_path / "results.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in runs))
    trajs = _trajs(lines)
    assert [t.locator for t in trajs] == [f"line:{i}" for i in range(1, 9)]
    assert [len(t.turns) for t in trajs] == [15, 5, 11, 30, 12, 12, 11, 12]
    single = tmp_path / "run6.json"
    single.write_text(json.dumps(runs[6], indent=2))
    (one,) = _trajs(single)
    assert (one.locator, len(one.turns), one.reward) == ("$", 11, 1.0)



def test_react_and_minimal_records() -> None:
    react, minimal = _trajs(DATA / "react_and_minimal.json")
    # ReAct: system, opening, then 5 assistant/user exchanges -> 5 turns
    assert react.native_id == "12:2"
    assert [len(react.turns), len(minimal.turns)] == [5, 4]
    assert [tool["function"]["name"] for tool in json.loads(react.action_space)] == [
        "find_user_id_by_email",
        "get_order_details",
    ]
    respond, lookup, wrong, right, final = react.turns
    assert respond.tool_name == "respond" and respond.observation_kind == "user_reply"
    assert respond.action == "Sure! Could you give me your email address?"
    assert respond.thought == "I need to authenticate the user first."
    assert lookup.tool_name == "find_user_id_by_email" and lookup.observation_kind == "tool_result"
    assert lookup.observation == "API output: yusuf_rossi_9620"
    assert wrong.is_error is True and right.is_error is False
    assert final.action == "Your order #W2378156 has been delivered."  # Action: not JSON -> respond
    assert json.loads(final.metadata)["unparsed_action"] is True
    assert react.reward == 1.0 and react.outcome == "success"

    # optional fields absent (no info, no trial); a user message that answers nothing; an
    # unanswered final tool call
    assert minimal.native_id == "3" and minimal.initial_state is None
    assert [u.kind for u in minimal.turns] == ["env", "env", "user", "message"]
    assert minimal.turns[2].action == "Also, are you still there?"
    pending = minimal.turns[3]
    assert pending.tool_name == "cancel_pending_order" and pending.observation is None
    assert pending.observation_kind == "none" and pending.thought == "Cancelling now."
    assert minimal.outcome == "failure" and minimal.reward == 0.0


def test_a_tool_result_that_answers_no_call_is_kept_without_an_action(tmp_path: Path) -> None:
    recs = json.loads((DATA / "react_and_minimal.json").read_text())
    before = [t for t in read_path(DATA / "react_and_minimal.json")]
    recs[1]["traj"].append({"role": "tool", "tool_call_id": "call_9", "name": "get_user_details", "content": "?"})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(recs, indent=2))
    first, second = list(read_path(path))
    assert isinstance(first, Trajectory) and isinstance(second, Trajectory)
    assert second.turns[:-1] == before[1].turns
    stray = second.turns[-1]
    assert (stray.kind, stray.action, stray.observation, stray.observation_kind, stray.tool_call_id, stray.locator) == (
        "env", None, "?", "tool_result", "call_9", "traj[8]")
    assert json.loads(stray.metadata) == {"call_missing": True, "tool_name": "get_user_details"}


def test_malformed_record_is_quarantined(tmp_path: Path) -> None:
    recs = json.loads((DATA / "react_and_minimal.json").read_text())
    recs[1]["traj"].append("not a message")
    path = tmp_path / "results.json"
    path.write_text(json.dumps(recs, indent=2))
    ok, q = list(read_path(path))
    assert isinstance(ok, Trajectory) and isinstance(q, QuarantineRecord)
    assert q.importer == "tau-bench" and q.locator == "[1]" and q.reason == "malformed_record"
    assert "[1] traj[8]" in q.detail


def test_harness_error_run_is_an_error_not_a_failure(tmp_path: Path) -> None:
    # tau-bench `run.py`: an exception in the episode is written as reward 0.0, info {error, traceback}, traj []
    recs = json.loads((DATA / "react_and_minimal.json").read_text())
    crashed = {"task_id": 5, "reward": 0.0, "trial": 0, "traj": [],
               "info": {"error": "litellm.RateLimitError: rate limited", "traceback": "Traceback ..."}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps([crashed, *recs], indent=2))
    err, react, minimal = _trajs(path)
    assert (err.outcome, err.reward, len(err.turns), err.native_id) == ("error", 0.0, 0, "5:0")
    assert json.loads(err.metadata)["info"]["error"] == "litellm.RateLimitError: rate limited"
    assert (react.outcome, minimal.outcome) == ("success", "failure")


def test_blank_arguments_are_absent_arguments(tmp_path: Path) -> None:
    run = {"task_id": 0, "reward": 1.0, "info": {}, "traj": [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "c1", "name": "get_time", "content": "12:00"}]}
    path = tmp_path / "results.json"
    path.write_text(json.dumps([run]))
    [t] = list(read_path(path))
    assert [(u.action, u.tool_name, u.tool_args, u.observation) for u in t.turns if u.tool_call_id] == [
        ("get_time", "get_time", None, "12:00")]
