"""Harbor job and trial directories (`collectors.harbor`), laid out as Harbor writes them
(`<job>/{config.json, result.json, job.log, <trial>/...}`, each trial
`{config.json, result.json, trial.log, agent/trajectory.json, agent/images/, verifier/}`), around the
ATIF fixture of tests/collectors/test_atif.py. Expected values: the fixture read as a file by the ATIF
importer (7 + 2 turns), and the trial's result.json."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.test_atif import DATA, HARBOR_RESULT


def _trial(job: Path, name: str, trajectory: bytes) -> Path:
    trial = job / name
    (trial / "agent" / "images").mkdir(parents=True)
    (trial / "verifier").mkdir()
    (trial / "agent" / "trajectory.json").write_bytes(trajectory)
    (trial / "agent" / "images" / "step_3.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (trial / "result.json").write_text(json.dumps({**HARBOR_RESULT, "trial_name": name}))
    (trial / "config.json").write_text(json.dumps({"trial_name": name, "agent": {"name": "terminus-2"}}))
    (trial / "trial.log").write_text("starting trial\n")
    (trial / "verifier" / "reward.json").write_text('{"reward": 1.0}')
    (trial / "verifier" / "test-stdout.txt").write_text("1 passed\n")
    return trial


def _job(root: Path) -> Path:
    job = root / "jobs" / "2026-03-02__09-14-00"
    job.mkdir(parents=True)
    (job / "config.json").write_text('{"job_name": "2026-03-02__09-14-00"}')
    (job / "result.json").write_text('{"n_total_trials": 2}')
    (job / "job.log").write_text("job started\n")
    _trial(job, "hello-world__Ab3dE9x", (DATA / "v1_7_terminus_subagent.json").read_bytes())
    _trial(job, "hello-world__Zz9", b'{"schema_version": "ATIF-v1.7", "steps": [')  # cut off mid-write
    return job


def test_job_directory_gives_its_trajectories_and_quarantines_only_what_is_broken(tmp_path: Path) -> None:
    job = _job(tmp_path)
    (job / "notes.txt").write_text("not Harbor's\n")  # outside the layout: offered to the other importers
    recs = list(read_path(tmp_path / "jobs"))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    quarantined = sorted((r.source, r.locator, r.reason) for r in recs if isinstance(r, QuarantineRecord))
    assert [t.locator for t in trajs] == ["hello-world__Ab3dE9x/agent/trajectory.json",
                                           "hello-world__Ab3dE9x/agent/trajectory.json/subagent_trajectories[0]"]
    direct = list(read_path(DATA / "v1_7_terminus_subagent.json"))
    assert [len(t.turns) for t in trajs] == [len(t.turns) for t in direct] == [7, 2]
    assert [[u.action for u in t.turns] for t in trajs] == [[u.action for u in t.turns] for t in direct]
    main = trajs[0]
    assert main.source_format == "atif" and main.source == str(job)
    assert main.reward == 1.0 and json.loads(main.metadata)["harbor"]["trial_name"] == "hello-world__Ab3dE9x"
    assert quarantined == [
        (str(job), "hello-world__Zz9/agent/trajectory.json", "invalid_json"),
        (str(job / "notes.txt"), "$", "unknown_format"),
    ]


def test_trial_directory_alone(tmp_path: Path) -> None:
    trial = _trial(tmp_path, "hello-world__Ab3dE9x", (DATA / "v1_7_terminus_subagent.json").read_bytes())
    recs = list(read_path(trial))
    assert [type(r) for r in recs] == [Trajectory, Trajectory]
    assert [r.locator for r in recs] == ["agent/trajectory.json", "agent/trajectory.json/subagent_trajectories[0]"]
    assert recs[0].reward == 1.0


def test_a_folder_with_a_result_json_but_no_atif_trajectory_is_not_claimed(tmp_path: Path) -> None:
    d = tmp_path / "run"
    (d / "agent").mkdir(parents=True)
    (d / "result.json").write_text("{}")
    (d / "agent" / "trajectory.json").write_text('{"steps": []}')
    (d / "config.json").write_text("{}")
    assert all(r.source != str(d) for r in read_path(d))
