"""InterCode results, read through `pipelines.reader.read_path`.

Expected counts were taken from the raw files independently of the importer:
  jq -c '[length, ([.[] | .turn_history.actions | length] | add), ([.[] | .turn_history.actions | length])]' FILE
(a turn per action; every file has observations/rewards/valid_action of the same lengths).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "intercode"

# jq '[.[] | .turn_history.actions | length]'
BASH_MULTITURN = [3, 10, 1, 10, 1, 2, 10, 10, 1, 10, 10, 10, 10, 10, 10, 10, 10, 2, 10, 10]  # first 20 of 60
BASH_REACT = [6, 2, 2, 3, 5, 5, 11, 11, 5, 2, 2, 5, 4, 3, 4, 7, 3, 4, 6, 7]  # first 20 of 60


def _trajs(path: Path) -> list[Trajectory]:
    recs = list(read_path(path))
    assert all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    return recs


@pytest.mark.parametrize(
    "name, n, total, head, submits",
    [
        ("ic_bash_multiturn_gpt-4_10_turns_fs_1.json", 60, 401, BASH_MULTITURN, 0),
        # jq '[.[] | .turn_history.actions[] | select(. == "submit")] | length'
        ("ic_bash_react_gpt-3.5_10_turns_fs_1.json", 60, 290, BASH_REACT, 59),
        ("ic_ctf_gpt-4_25_turns.json", 4, 35, [5, 10, 5, 15], 0),  # CTF's `submit FLAG` runs the check
    ],
)
def test_sample_counts(sample: Path, name: str, n: int, total: int, head: list[int], submits: int) -> None:
    trajs = _trajs(sample / "intercode" / name)
    assert len(trajs) == n
    assert sum(len(t.turns) for t in trajs) == total
    assert [len(t.turns) for t in trajs][: len(head)] == head
    assert all(t.source_format == "intercode" and t.domain == "terminal" for t in trajs)
    assert [t.locator for t in trajs][:3] == ["key:0", "key:1", "key:2"]
    kinds = [(u.kind, u.observation_kind) for t in trajs for u in t.turns]
    assert kinds.count(("message", "none")) == submits
    assert kinds.count(("env", "stdout")) == total - submits


def test_bash_multiturn_fields(sample: Path) -> None:
    trajs = _trajs(sample / "intercode" / "ic_bash_multiturn_gpt-4_10_turns_fs_1.json")
    t = trajs[0]
    assert t.native_id == "0"
    assert (
        t.task
        == 'Calculate a list of duplicate md5 sum hashes for all the ".java" files in the /testbed directory'
    )
    assert t.reward == 1.0 and t.outcome == "success"  # summary.max_reward
    assert [u.reward for u in t.turns] == [0.8, 0.81, 1.0]
    assert (
        t.turns[0].action == 'find /testbed -type f -name "*.java" -exec md5sum {} + | sort | uniq -d -w 32'
    )
    assert t.turns[0].observation == "f32a3a97638afeb2ee2a15cfe335ab72  /testbed/Hello.java\n"
    assert t.turns[0].locator == "turn_history.actions[0]+turn_history.observations[0]"
    assert json.loads(t.metadata)["environment"] == "ic_bash"
    # raw key 3, turn 3: valid_action false
    bad = trajs[3].turns[3]
    assert bad.is_error is True and json.loads(bad.metadata) == {"valid_action": False}
    assert bad.observation == "tr: range-endpoints of ' -\\012' are in reverse collating sequence order\n"


def test_bash_react_thoughts(sample: Path) -> None:
    t = _trajs(sample / "intercode" / "ic_bash_react_gpt-3.5_10_turns_fs_1.json")[0]
    assert t.turns[0].thought.startswith("Find all files with the `.java` extension in `testbed/`")
    assert t.turns[0].action.startswith('execute[find /testbed -name "*.java" -type f -exec md5sum {} +')
    assert t.turns[5].action == "submit" and t.turns[5].reward == 1.0


def test_a_plain_submit_is_no_environment_turn(sample: Path) -> None:
    # `IntercodeEnv.step("submit")` scores the episode and returns the previous observation again; the
    # log stores that copy (57 of the file's 59 submits, by jq), which no action produced
    raw = json.loads((sample / "intercode" / "ic_bash_react_gpt-3.5_10_turns_fs_1.json").read_text())
    th = raw["2"]["turn_history"]
    assert th["actions"] == ["execute[md5sum $FILES]", "submit"]
    assert th["observations"][1] == th["observations"][0]
    trajs = _trajs(sample / "intercode" / "ic_bash_react_gpt-3.5_10_turns_fs_1.json")
    (t,) = [u for u in trajs if u.native_id == "2"]
    first, submit = t.turns
    assert (first.kind, first.observation, first.reward) == ("env", th["observations"][0], 0.0)
    assert (submit.kind, submit.observation_kind, submit.observation, submit.is_error) == ("message", "none", None, None)
    assert (submit.action, submit.reward, submit.locator) == ("submit", 1.0, "turn_history.actions[1]")
    assert submit.thought == "This shows the md5 sum of the contents of the sorted list of files. I can submit."
    assert json.loads(submit.metadata) == {"valid_action": th["valid_action"][1], "submit": True}
    assert t.reward == 1.0 and t.outcome == "success"
    # eval_react.py submits for the agent at the turn limit: thought "EXCEEDED MAX TURNS: submit"
    forced = [t.native_id for t in trajs for u in t.turns if json.loads(u.metadata or "{}").get("forced")]
    assert forced == ["6", "7", "29", "30", "32", "38", "43", "53", "58"]


def test_ctf_fields(sample: Path) -> None:
    trajs = _trajs(sample / "intercode" / "ic_ctf_gpt-4_25_turns.json")
    first = trajs[0]
    assert first.turns[0].action == 'cmd /bin/bash -c "cat unpackme.flag.py"'
    assert first.turns[-1].action == "submit picoCTF{175_chr157m45_85f5d0ac}"
    assert first.turns[-1].observation == "The submitted flag is correct."
    assert first.turns[0].is_error is None  # CTF results record no validity
    assert [t.outcome for t in trajs] == ["success", "success", "success", "failure"]


def test_sql_and_python_own_file() -> None:
    sql, py, bare = _trajs(DATA / "ic_sql_python_mixed.json")
    assert all(t.domain == "terminal" for t in (sql, py, bare))
    assert [len(sql.turns), len(py.turns), len(bare.turns)] == [4, 2, 1]
    # rows stored as JSON lists render like InterCode's own str(rows)
    assert [u.observation for u in sql.turns] == [
        "Error executing query: Table 'concert_singer.singers' doesn't exist",
        "[('concert',), ('singer',), ('singer_in_concert',), ('stadium',)]",
        "[(6,)]",
        "[('Joe Sharp', 52), ('Timbaland', None)]",
    ]
    assert [u.is_error for u in sql.turns] == [True, False, False, False]
    assert json.loads(sql.metadata)["hardness"] == "easy"
    # valid_action null: the error text decides
    assert [u.is_error for u in py.turns] == [True, None]
    assert py.turns[1].observation == "{'output': '', 'error': ''}"
    # optional fields absent: no rewards, valid_action, summary, dataset
    assert bare.turns[0].reward is None and bare.turns[0].is_error is None
    assert bare.reward is None and bare.outcome is None
    assert bare.turns[0].observation == "/testbed\n"


def test_malformed_record_is_quarantined(tmp_path: Path) -> None:
    doc = json.loads((DATA / "ic_sql_python_mixed.json").read_text())
    doc["1"]["turn_history"]["observations"].pop()
    path = tmp_path / "ic.json"
    path.write_text(json.dumps(doc, indent=2))
    recs = list(read_path(path))
    q = [r for r in recs if isinstance(r, QuarantineRecord)]
    assert len(recs) == 3 and len(q) == 1
    assert q[0].importer == "intercode" and q[0].locator == "key:1" and q[0].reason == "length_mismatch"
    assert "key:1: turn_history.observations has 1 entries for 2 actions" in q[0].detail


def test_policy_error_blocked_action_keeps_the_turns_before_it(sample: Path, tmp_path: Path) -> None:
    # `experiments/eval_n_turn.py`: when `policy.forward` raises, it appends "blocked" to `actions` and
    # 0 to `rewards` (not to `observations` / `valid_action`) and ends the episode
    raw = json.loads((sample / "intercode" / "ic_bash_multiturn_gpt-4_10_turns_fs_1.json").read_text())
    rec = raw["1"]
    th = rec["turn_history"]
    assert len(th["actions"]) == 10
    short = {k: (v[:5] if isinstance(v, list) else v) for k, v in th.items()}
    short["actions"].append("blocked")
    short["rewards"].append(0)
    (tmp_path / "run.json").write_text(json.dumps({"1": {**rec, "turn_history": short}}))
    (t,) = _trajs(tmp_path / "run.json")
    (plain,) = [u for u in _trajs(sample / "intercode" / "ic_bash_multiturn_gpt-4_10_turns_fs_1.json") if u.locator == "key:1"]
    assert len(t.turns) == 6
    assert t.turns[:5] == plain.turns[:5]
    last = t.turns[5]
    assert (last.kind, last.action, last.observation, last.observation_kind) == ("message", "blocked", None, "none")
    assert (last.is_error, last.reward, last.locator) == (True, 0.0, "turn_history.actions[5]")
    assert json.loads(last.metadata) == {"policy_error": True}
    # a column short by one without the "blocked" marker is still a length mismatch
    bad = {**short, "actions": [*short["actions"][:5], "ls"]}
    (tmp_path / "bad.json").write_text(json.dumps({"1": {**rec, "turn_history": bad}}))
    (q,) = read_path(tmp_path / "bad.json")
    assert isinstance(q, QuarantineRecord) and q.reason == "length_mismatch"


def test_react_reply_without_code_is_an_error_whatever_its_validity_says(sample: Path) -> None:
    # `experiments/eval_react.py`: a reply whose action holds no code does not step the environment; it
    # logs "Error executing query: Your last `execute` action did not contain bash code" and appends the
    # previous turn's `valid_action` again
    path = sample / "intercode" / "ic_bash_react_gpt-3.5_10_turns_fs_1.json"
    raw = json.loads(path.read_text())
    prefix = "Error executing query: Your last `execute` action did not contain"
    expected = [(k, i) for k, rec in raw.items() for i, o in enumerate(rec["turn_history"]["observations"])
                if o.startswith(prefix)]
    assert len(expected) == 20
    assert all(raw[k]["turn_history"]["valid_action"][i] is True for k, i in expected)  # stale, as logged
    trajs = {t.locator.removeprefix("key:"): t for t in _trajs(path)}
    for k, i in expected:
        turn = trajs[k].turns[i]
        assert turn.is_error is True and json.loads(turn.metadata) == {"valid_action": True, "not_executed": True}
    # every other turn but the 59 plain submits (no error: nothing ran): an error exactly where the
    # run logged an invalid action
    submits = [(k, i) for k, rec in raw.items() for i, a in enumerate(rec["turn_history"]["actions"]) if a == "submit"]
    assert len(submits) == 59 and all(trajs[k].turns[i].is_error is None for k, i in submits)
    others = [(u.is_error, raw[k]["turn_history"]["valid_action"][i]) for k, t in trajs.items()
              for i, u in enumerate(t.turns) if (k, i) not in expected and (k, i) not in submits]
    assert len(others) == 290 - 20 - 59 and all(err is (not valid) for err, valid in others)


def test_environment_episode_log_is_one_intercode_trajectory() -> None:
    # `intercode/envs/ic_env.py` `save_trajectory`: with a `traj_dir`, every episode is written alone to
    # `logs_<env>/log_<time>.json` as {environment, query_idx, query, gold, reward, trajectory, info}
    # (the same record human-play logs keep under task indices); SWE-agent's importer used to claim it
    (t,) = _trajs(DATA / "log_20230615143512.json")
    assert (t.source_format, t.domain, t.locator, t.native_id) == ("intercode", "terminal", "$", "3")
    assert (t.task, t.agent, t.reward, t.outcome) == ("Count the number of files in /testbed/dir1", None, 1.0, "success")
    assert [(u.action, u.observation, u.locator) for u in t.turns] == [
        ("ls /testbed/dir1", "a.txt\nb.txt\nsub\n", "trajectory[0]"),
        ("cat /nonexistent", "cat: /nonexistent: No such file or directory\n", "trajectory[1]"),
        ("find /testbed/dir1 -type f | wc -l", "3\n", "trajectory[2]"),
    ]
    meta = json.loads(t.metadata)
    assert (meta["environment"], meta["gold"], meta["info"]["eval_obs"]) == ("ic_bash", "find /testbed/dir1 -type f | wc -l", "3\n")
