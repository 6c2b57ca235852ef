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
