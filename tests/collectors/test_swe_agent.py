"""SWE-agent `.traj` files from versions other than the sample corpus, read through `read_path`.

Expected values were read from the raw files with `json.load`, independently of the importer
(origins in tests/data/swe-agent/README.md):
- ctf_crypto_katy.traj (0.x CTF demonstration): 4 `trajectory[]` steps, 4 assistant messages
  without `tool_calls`, `state` is a JSON string, step 1 has an empty action and observation,
  no `execution_time`, no `replay_config`; `info.exit_status` = "submitted".
- sweagenttestrepo_function_calling_v1.traj (1.0 function calling): 5 steps, 4 assistant messages
  whose `tool_calls` are real JSON lists (the final `submit` step has no assistant message in
  `history`); `state` is an object; `execution_time` per step; `replay_config.agent.model.name`
  = "gpt-4o"; `replay_config.problem_statement.id` = "SWE-agent__test-repo-i1".
- marshmallow-1867__function_calling_replace_from_source__step0.traj (1.x, SUBSET): 1 step that
  carries its own `messages` list; no `info`; `environment` is the last key.
The format has no exit codes, error flags or timestamps per step, so those stay empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "swe-agent"
KATY = DATA / "ctf_crypto_katy.traj"
FC_V1 = DATA / "sweagenttestrepo_function_calling_v1.traj"
FROM_SOURCE = DATA / "marshmallow-1867__function_calling_replace_from_source__step0.traj"


@pytest.mark.parametrize(
    "path, turns, domain, outcome, model",
    [
        (KATY, 4, "terminal", "submitted", None),
        (FC_V1, 5, "swe", "submitted", "gpt-4o"),
        (FROM_SOURCE, 1, "swe", None, None),
    ],
)
def test_counts_domain_and_outcome(path: Path, turns: int, domain: str, outcome: str | None, model: str | None) -> None:
    t = one_trajectory(path)
    assert t.source_format == "swe-agent" and t.agent == "swe-agent"
    assert t.locator == "$"
    assert t.domain == domain
    assert len(t.turns) == turns
    assert [u.locator for u in t.turns] == [f"trajectory[{i}]" for i in range(turns)]
    assert {u.kind for u in t.turns} == {"env"}
    assert t.outcome == outcome
    assert t.model == model
    # no per-step exit code, error flag or timestamp in any SWE-agent version
    for u in t.turns:
        assert u.exit_code is None and u.is_error is None and u.started_at is None
    assert_schema_valid([t])


def test_ctf_v0_text_commands() -> None:
    t = one_trajectory(KATY)
    assert t.task.startswith(
        "We're currently solving the following CTF challenge. The CTF challenge is a cryptography problem named \"Katy\""
    )
    assert "\u2026" in t.task  # `\u2026` escapes in the file decode to the ellipsis
    assert [u.action for u in t.turns] == [
        "ls cat ~/ctf_files/release",
        "",
        "strings ~/ctf_files/release | grep flag",
        "submit flag{xxxxxxxxxxxxxx}",
    ]
    assert [u.observation for u in t.turns] == [
        "ls: cannot access 'cat': No such file or directory\nls: cannot access '/root/ctf_files/release': No such file or directory",
        "",
        "strings: '/root/ctf_files/release': No such file",
        "\nflag{xxxxxxxxxxxxxx}\n",
    ]
    assert [u.observation_kind for u in t.turns] == ["stdout"] * 4
    assert t.turns[0].thought == "First we need to check the file under the docker container\n"
    assert {u.tool_name for u in t.turns} == {None} and {u.tool_call_id for u in t.turns} == {None}
    assert {u.duration_s for u in t.turns} == {None}
    # `state` is a JSON string in 0.x files; it is parsed and re-serialised
    assert json.loads(t.turns[0].state) == {
        "open_file": "n/a",
        "working_dir": "/__home__minghao__projects__LLM_CTF_Dataset_Dev__2016__CSAW-Finals__crypto__Katy",
    }
    meta = json.loads(t.metadata)
    assert meta["environment"] == "swe_main"
    assert meta["submission"] == "\nflag{xxxxxxxxxxxxxx}\n"
    assert meta["model_stats"]["api_calls"] == 0
    assert t.action_space is None


def test_function_calling_v1_tool_calls() -> None:
    t = one_trajectory(FC_V1)
    assert t.task.startswith(
        "We're currently solving the following issue within our repository. Here's the issue text:\nISSUE:\n"
        "SyntaxError: invalid syntax\n"
    )
    assert [u.action for u in t.turns] == [
        "find_file missing_colon.py",
        'open "/SWE-agent__test-repo/tests/missing_colon.py"',
        "edit 'def division(a: float, b: float) -> float' 'def division(a: float, b: float) -> float:' False",
        "python3 /SWE-agent__test-repo/tests/missing_colon.py",
        "submit",
    ]
    assert [u.tool_name for u in t.turns] == ["find_file", "open", "edit", "bash", None]
    assert [u.tool_call_id for u in t.turns] == [
        "call_fJuazlMUN5fQDQ73G6XSpYpx",
        "call_OhmPHGZp0XJ6JRnNkQaYcBMs",
        "call_DVnbJcFrvwPsrPt3KfIMf7OH",
        "call_dcF76aXH6e1pzqRwGxOwpuxb",
        None,
    ]
    assert json.loads(t.turns[0].tool_args) == {"file_name": "missing_colon.py"}
    assert json.loads(t.turns[2].tool_args) == {
        "search": "def division(a: float, b: float) -> float",
        "replace": "def division(a: float, b: float) -> float:",
        "replace-all": False,
    }
    assert json.loads(t.turns[3].tool_args) == {"command": "python3 /SWE-agent__test-repo/tests/missing_colon.py"}
    assert t.turns[4].tool_args is None
    assert [u.observation_kind for u in t.turns] == ["stdout", "file_view", "file_view", "stdout", "stdout"]
    assert t.turns[0].observation == (
        'Found 1 matches for "missing_colon.py" in /SWE-agent__test-repo:\r\n/SWE-agent__test-repo/tests/missing_colon.py'
    )
    assert t.turns[3].observation == "8.2"
    assert t.turns[4].observation.startswith("\r\ndiff --git a/tests/missing_colon.py b/tests/missing_colon.py\r\n")
    assert [u.duration_s for u in t.turns] == pytest.approx(
        [0.2814128329991945, 0.29675291599960474, 0.4935787079994043, 0.2925790000008419, 0.2691650420001679]
    )
    assert json.loads(t.turns[0].state) == {"open_file": "n/a", "working_dir": "/SWE-agent__test-repo"}
    assert json.loads(t.turns[1].state)["open_file"] == "/SWE-agent__test-repo/tests/missing_colon.py"
    assert t.turns[1].thought.startswith("The file `missing_colon.py` is located in the `tests` directory.")
    bundles = [b["path"] for b in json.loads(t.action_space)["bundles"]]
    assert bundles == ["tools/defaults", "tools/search", "tools/edit_replace", "tools/submit"]
    meta = json.loads(t.metadata)
    assert meta["environment"] == "main"
    assert meta["model_stats"] == {
        "instance_cost": 0.019520000000000006,
        "tokens_sent": 7141,
        "tokens_received": 243,
        "api_calls": 5,
    }
    assert meta["submission"].startswith("\r\ndiff --git a/tests/missing_colon.py")


def test_step_with_own_messages_v1() -> None:
    t = one_trajectory(FROM_SOURCE)
    (u,) = t.turns
    assert u.action == "ls -F"
    assert u.observation.startswith("AUTHORS.rst\t    LICENSE\t RELEASING.md\t")
    assert u.observation.endswith("CONTRIBUTING.rst    README.rst\t examples/\t      setup.py")
    assert u.tool_name == "bash" and json.loads(u.tool_args) == {"command": "ls -F"}
    assert u.tool_call_id == "call_9diWc1DYm4RLmPfHgIaP2wd"
    assert u.duration_s == pytest.approx(0.11605553800109192)
    assert json.loads(u.state) == {"open_file": "n/a", "working_dir": "/testbed"}
    assert t.task.startswith("We're currently solving the following issue within our repository.")
    assert "TimeDelta serialization precision" in t.task
    assert json.loads(t.metadata) == {"environment": "main", "model_stats": None, "submission": None}


@pytest.mark.parametrize(
    "path, instance_id",
    [(FC_V1, "SWE-agent__test-repo-i1"), (FROM_SOURCE, "marshmallow-code__marshmallow-1867")],
)
def test_native_id_from_problem_statement(path: Path, instance_id: str) -> None:
    assert one_trajectory(path).native_id == instance_id


def test_domain_override() -> None:
    recs = list(read_path(KATY, domain_override="swe"))
    assert [r.domain for r in recs if isinstance(r, Trajectory)] == ["swe"]


# SWE-agent 1.x variants built from the bundled sample (data/sample/corpus/swe-agent), each the way
# upstream's `sweagent/agent/agents.py` writes it; expected values come from the raw JSON.
SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus" / "swe-agent"
FC_SAMPLE = SAMPLE / "marshmallow-1867__function_calling_replace.traj"
DEMO_SAMPLE = SAMPLE / "function_calling_simple.traj"


def _calls(doc: dict) -> list[tuple[str, str]]:
    """(tool name, call id) of each assistant message, read from the raw history."""
    return [(m["tool_calls"][0]["function"]["name"], m["tool_calls"][0]["id"])
            for m in doc["history"] if m["role"] == "assistant"]


def _write(tmp_path: Path, doc: dict, name: str = "run.traj") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(doc, indent=2))  # as SWE-agent writes it
    return p


def test_requeried_step_keeps_every_later_call_on_its_own_step(tmp_path: Path) -> None:
    # `handle_error_with_retry` adds a rejected reply to `trajectory` but not to `history`
    doc = json.loads(FC_SAMPLE.read_text())
    calls = _calls(doc)
    assert len(calls) == len(doc["trajectory"]) == 11
    doc["trajectory"].insert(1, {"action": "", "observation": "Your output was not formatted correctly.",
                                 "thought": "", "response": "I will", "execution_time": 0.0})
    t = one_trajectory(_write(tmp_path, doc))
    assert len(t.turns) == 12
    assert [u.tool_name for u in t.turns] == [calls[0][0], None, *[c[0] for c in calls[1:]]]
    assert [u.tool_call_id for u in t.turns] == [calls[0][1], None, *[c[1] for c in calls[1:]]]
    assert t.turns[1].action == "" and t.turns[1].observation == "Your output was not formatted correctly."


def test_demonstration_in_history_is_not_the_task_nor_the_calls(tmp_path: Path) -> None:
    # `put_demos_in_history: true` copies a demonstration's messages after the system message, `is_demo` set
    doc = json.loads(FC_SAMPLE.read_text())
    plain = one_trajectory(FC_SAMPLE)
    demo = [{**m, "is_demo": True} for m in json.loads(DEMO_SAMPLE.read_text())["history"] if m["role"] != "system"]
    assert sum(m["role"] == "assistant" for m in demo) == 5
    doc["history"][1:1] = demo
    t = one_trajectory(_write(tmp_path, doc))
    assert t.task == plain.task and t.task.startswith("We're currently solving the following issue")
    assert "TimeDelta serialization precision" in t.task
    assert [(u.tool_name, u.tool_call_id) for u in t.turns] == _calls(json.loads(FC_SAMPLE.read_text()))


def test_retry_agent_gives_one_trajectory_per_attempt(tmp_path: Path) -> None:
    # RetryAgent: `{"attempts": [...]}`, the best attempt merged into the top level with `info.best_attempt_idx`
    full = json.loads(FC_SAMPLE.read_text())
    short = {**full, "trajectory": full["trajectory"][:3], "info": {"exit_status": "exit_cost"}}
    final = {"attempts": [short, full], **full, "info": {**full["info"], "best_attempt_idx": 1}}
    trajs = list(read_path(_write(tmp_path, final)))
    assert [type(t) for t in trajs] == [Trajectory, Trajectory]
    assert [t.locator for t in trajs] == ["attempts[0]", "attempts[1]"]
    assert [len(t.turns) for t in trajs] == [3, 11]
    assert [t.outcome for t in trajs] == ["exit_cost", full["info"]["exit_status"]]
    assert [json.loads(t.metadata)["retry"] for t in trajs] == [
        {"attempt": 0, "attempts": 2, "best_attempt_idx": 1}, {"attempt": 1, "attempts": 2, "best_attempt_idx": 1}]
    assert len({t.trajectory_id for t in trajs}) == 2
    # saved mid-run (`save_trajectory(choose=False)`): only the attempts so far
    (t,) = read_path(_write(tmp_path, {"attempts": [short]}, "partial.traj"))
    assert isinstance(t, Trajectory) and t.locator == "attempts[0]" and len(t.turns) == 3
    assert json.loads(t.metadata)["retry"] == {"attempt": 0, "attempts": 1, "best_attempt_idx": None}
    assert "retry" not in json.loads(one_trajectory(FC_SAMPLE).metadata)


def test_messages_without_action_are_matched_by_position(tmp_path: Path) -> None:
    # a writer that leaves `action` out of the history messages: steps and messages pair in order
    doc = json.loads(FC_SAMPLE.read_text())
    for m in doc["history"]:
        m.pop("action", None)
    doc["trajectory"].append({"action": "exit", "observation": "", "thought": ""})  # a step with no message
    t = one_trajectory(_write(tmp_path, doc))
    assert [(u.tool_name, u.tool_call_id) for u in t.turns] == [*_calls(json.loads(FC_SAMPLE.read_text())), (None, None)]


def test_step_whose_observation_is_null_is_an_unanswered_action(tmp_path: Path) -> None:
    """A step with `observation: null` (nothing recorded, e.g. a run cut off after the action) is a
    message turn that keeps the action, not an environment turn of some output kind."""
    doc = json.loads(FC_SAMPLE.read_text())
    edit = next(i for i, s in enumerate(doc["trajectory"]) if str(s["action"]).startswith(("edit", "str_replace_editor")))
    doc["trajectory"][edit]["observation"] = None
    t = one_trajectory(_write(tmp_path, doc))
    u = t.turns[edit]
    assert (u.kind, u.observation, u.observation_kind) == ("message", None, "none")
    assert u.action == doc["trajectory"][edit]["action"].rstrip("\n") and json.loads(u.metadata) == {"observation_missing": True}
    assert [v.kind for i, v in enumerate(t.turns) if i != edit] == ["env"] * (len(t.turns) - 1)


def test_null_sections_are_read_as_absent(tmp_path: Path) -> None:
    # optional objects written as null (`replay_config.agent`, `info`, a tool call's `function`) are absent
    doc = json.loads(FC_V1.read_text())
    doc["replay_config"] = {"agent": None}
    doc["info"] = None
    for m in doc["history"]:
        for c in m.get("tool_calls") or []:
            c["function"] = None
    t = one_trajectory(_write(tmp_path, doc))
    assert (len(t.turns), t.model, t.outcome) == (5, None, None)
    assert [u.tool_name for u in t.turns] == [None] * 5
    assert [u.tool_call_id for u in t.turns] == [c["id"] for m in doc["history"] for c in m.get("tool_calls") or []] + [None]
    doc["replay_config"] = json.dumps({"agent": {"model": None}})
    assert one_trajectory(_write(tmp_path, doc)).model is None


def test_what_reached_no_environment_is_no_env_turn(tmp_path: Path) -> None:
    """SWE-agent 1.x keeps a reply it rejected and requeried (a blocked `vim`) as a step with no output,
    and the autosubmission after a cost limit as a step with an empty action answered "Exited
    (autosubmitted)"; 0.x writes that exit as the action `exit_cost`. All three were env turns."""
    def msg(action: str) -> dict:
        return {"role": "assistant", "content": action, "thought": "t", "action": action, "message_type": "action"}

    v1 = {"trajectory": [
        {"action": "ls\n", "observation": "a.py\n", "thought": "look", "execution_time": 0.5, "state": {"working_dir": "/r"}},
        {"action": "vim a.py\n", "observation": "", "thought": "vim", "execution_time": 0.0, "state": {}},
        {"action": "rm b.py\n", "observation": "", "thought": "rm", "execution_time": 0.1, "state": {"working_dir": "/r"}},
        {"action": "", "observation": "Exited (autosubmitted)", "thought": "Exit due to cost limit", "state": {}}],
        "history": [{"role": "user", "content": "Fix a.py", "message_type": "observation"}, msg("ls\n"), msg("rm b.py\n"),
                    msg("")],
        "info": {"exit_status": "submitted (exit_cost)"}}
    (tmp_path / "v1.traj").write_text(json.dumps(v1))
    [t] = list(read_path(tmp_path / "v1.traj"))
    assert [(u.kind, u.action, u.observation) for u in t.turns] == [
        ("env", "ls", "a.py\n"), ("message", "vim a.py", None), ("env", "rm b.py", ""), ("message", None, None)]
    assert [json.loads(u.metadata or "{}") for u in t.turns[1::2]] == [
        {"rejected": True}, {"harness_exit": True, "reply": "Exited (autosubmitted)"}]
    v0 = {"environment": "swe_main", "trajectory": [
        {"action": "ls\n", "observation": "a.py\nbash-$", "thought": "look", "state": "{}"},
        {"action": "exit_cost", "observation": "Exited (autosubmitted)", "thought": "Exit due to cost limit", "state": "{}"}],
        "history": [{"role": "user", "content": "ISSUE"}, {"role": "assistant", "content": "ls", "action": "ls\n"}],
        "info": {"exit_status": "submitted (exit_cost)"}}
    (tmp_path / "v0.traj").write_text(json.dumps(v0))
    [t] = list(read_path(tmp_path / "v0.traj"))
    assert [(u.kind, u.action) for u in t.turns] == [("env", "ls"), ("message", "exit_cost")]


def test_a_trajectory_that_is_no_list_is_named(tmp_path: Path) -> None:
    doc = json.loads((SAMPLE / "function_calling_simple.traj").read_text())
    doc["trajectory"] = 7
    (tmp_path / "x.traj").write_text(json.dumps(doc))
    (q,) = list(read_path(tmp_path / "x.traj"))
    assert not isinstance(q, Trajectory)
    assert (q.reason, q.detail) == ("malformed_record", f"{tmp_path / 'x.traj'} line:1: 'trajectory' must be a list of steps, got int")
