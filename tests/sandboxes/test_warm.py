"""Sandboxes started ahead of their jobs: used by the job they were started for, or removed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from pipelines.query import run_query
from sandboxes import images as image_recipes
from sandboxes.collect import Job, collect, warm_configs
from sandboxes.perturb import PerturbationSpec
from sandboxes.reaper import Session, containers_of
from sandboxes.sandbox import SandboxConfig
from sandboxes.tasks import TASKS_DIR, load_tasks
from sandboxes.warm import SandboxWarmer

from .test_collect import _left_by_this_process

TASKS = {t.id: t for t in load_tasks(TASKS_DIR)}


def test_each_job_with_its_own_configuration_gets_a_sandbox_started_ahead(images, tmp_path: Path) -> None:
    t = TASKS["text-csv-sum"]
    P = PerturbationSpec.parse
    jobs = [Job(t), Job(t), Job(t, P("clock_skew:offset_s=3600")), Job(t, P("truncated_output:bytes=5"))]
    # the second job is the first one's reused container; the first starts before any look-ahead
    assert [c is not None for c in warm_configs(jobs, 0, 1, fresh=False)] == [True, False, True, True]
    s = collect(jobs, tmp_path / "c", workers=1, warm=True, echo=lambda m: None)
    assert (s.trajectories, s.by_outcome) == (4, {"success": 4})
    assert s.warm["taken"] >= 2 and s.warm["failed"] == 0 and s.warm["started"] == s.warm["taken"] + s.warm["wasted"]
    rows = run_query(tmp_path / "c", "SELECT native_id, metadata FROM trajectories")[1]
    ahead = sorted((n, json.loads(m)["sandbox_reuse"], json.loads(m)["started_ahead"]) for n, m in rows)
    # the first job's sandbox may or may not be started ahead (the warmer races the first worker);
    # the second job reuses that container, which is not a start ahead even if the first was
    assert [a[:2] for a in ahead] == [("text-csv-sum", 0), ("text-csv-sum", 1), ("text-csv-sum@clock_skew:offset_s=3600", 0),
                                      ("text-csv-sum@truncated_output:bytes=5", 0)]
    assert [a[2] for a in ahead[1:]] == [False, True, True]
    assert s.warm["taken"] == 2 + ahead[0][2]
    assert _left_by_this_process() == {"containers": 0, "networks": 0, "volumes": 0}
    assert "started ahead: " in s.render()


def test_a_sandbox_no_job_takes_is_removed_on_close(images) -> None:
    session = Session()
    cfg = SandboxConfig(image=image_recipes.image_tag("terminal"))
    w = SandboxWarmer([None, cfg], session, ahead=1)
    w.began(0)
    deadline = time.monotonic() + 60
    while w.stats()["started"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert w.stats()["started"] == 1 and len(containers_of(session.id)) == 1
    w.close()
    assert w.stats() == {"started": 1, "taken": 0, "wasted": 1, "failed": 0}
    assert w.take(cfg) is None
    from sandboxes.sandbox import drain_removals

    drain_removals()
    assert containers_of(session.id) == []


def test_nothing_is_started_without_configurations(images) -> None:
    w = SandboxWarmer([None, None], Session(), ahead=2)
    w.began(0)
    w.close()
    assert w.stats() == {"started": 0, "taken": 0, "wasted": 0, "failed": 0}


def test_a_start_that_fails_is_counted_and_never_blocks_a_worker(images) -> None:
    session = Session()
    bad = SandboxConfig(image="worldline/no-such-image:missing")
    w = SandboxWarmer([bad], session, ahead=1)
    deadline = time.monotonic() + 60
    while w.stats()["failed"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    assert w.take(bad) is None and time.monotonic() - t0 < 1.0
    w.close()
    assert w.stats() == {"started": 0, "taken": 0, "wasted": 0, "failed": 1}
    assert containers_of(session.id) == []


@pytest.mark.parametrize(("flag", "second"), [([], "false"), (["--start-ahead"], "true")])
def test_cli_starts_ahead_only_when_asked(images, tmp_path: Path, flag: list[str], second: str) -> None:
    from pipelines.cli import main

    out = tmp_path / "c"
    rc = main(["collect", "sandbox", str(TASKS_DIR), "--only", "text-csv-sum", "--perturb", "clock_skew", "--out", str(out),
               "--workers", "1", "--quiet", *flag])
    assert rc == 0
    rows = run_query(out, "SELECT native_id, json_extract(metadata, '$.started_ahead') FROM trajectories ORDER BY 1")[1]
    # with the flag, the perturbed job's sandbox is started ahead (the first job's may be too)
    assert [r[1] for r in rows][1:] == [second] and (flag or rows[0][1] == "false")
