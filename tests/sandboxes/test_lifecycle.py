"""Containers never outlive their collector: SIGKILL (watchdog), Ctrl-C (handlers), orphans (reaper)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipelines.query import run_query
from sandboxes.collect import Job, collect
from sandboxes.reaper import Session, _start_ticks, containers_of
from sandboxes.tasks import TASKS_DIR, load_tasks

ROOT = Path(__file__).resolve().parents[2]
SLOW = "swe-fix-all,swe-run-tests,swe-add-test,swe-fix-parse-amount,python-json-transform,git-branch-merge"


def _default_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def _collector(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.cli", "collect", "sandbox", str(TASKS_DIR), "--only", SLOW,
           "--out", str(out), "--workers", "2"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals)


def _wait_for_containers(pid: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        n = len(containers_of(pid=pid))
        if n:
            return n
        time.sleep(0.05)
    raise AssertionError(f"collector {pid} started no sandbox within {timeout}s")




def test_sigkill_leaves_no_container(images, tmp_path: Path) -> None:
    p = _collector(tmp_path / "c")
    try:
        assert _wait_for_containers(p.pid) >= 1
        time.sleep(0.5)  # mid-trajectory
        os.kill(p.pid, signal.SIGKILL)
        p.wait(10)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGKILL
    # No reaper has run: every started sandbox goes by itself (its server saw the collector's attach
    # socket close). A container the kill caught between create and start never ran a server; it is
    # an orphan that the reaper removes at the next collector start.
    deadline = time.monotonic() + 15.0
    while [c for c in containers_of(pid=p.pid) if c["State"] != "created"]:
        assert time.monotonic() < deadline, f"started containers of {p.pid} still there"
        time.sleep(0.05)
    from sandboxes.reaper import reap_orphans

    reap_orphans()
    # a start the engine had in flight when the kill came can finish after the loop above: that
    # container then runs with no attach socket, its watchdog exits at once, and auto_remove (or the
    # reaper's removal) takes it; seen once in CI-like runs, 35 ms from start to destroy
    deadline = time.monotonic() + 10.0
    while left := containers_of(pid=p.pid):
        assert time.monotonic() < deadline, f"containers of {p.pid} left: {[(c['Names'], c['State']) for c in left]}"
        time.sleep(0.05)


def test_ctrl_c_removes_containers_and_keeps_finished_trajectories(images, tmp_path: Path) -> None:
    out = tmp_path / "c"
    p = _collector(out)
    lines: list[str] = []
    try:
        assert p.stderr is not None
        for line in p.stderr:  # progress lines: "[1/6] <task>: ..."
            lines.append(line)
            if line.startswith("[1/6]"):
                break
        os.kill(p.pid, signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr
    assert "[INTERRUPTED: finished trajectories were kept]" in stdout
    assert containers_of(pid=p.pid) == []
    n = run_query(out, "SELECT count(*) FROM trajectories")[1][0][0]
    assert 1 <= n <= 6


def test_reaper_removes_orphans_of_dead_collectors(images, tmp_path: Path) -> None:
    from sandboxes.engine import client
    from sandboxes.reaper import reap_orphans

    reap_orphans()  # earlier runs' leftovers, so that the count below is this test's alone
    dead = subprocess.Popen(["true"])
    dead.wait()
    ticks = "123"
    labels = {**Session().labels(), "worldline.pid": str(dead.pid), "worldline.pidstart": ticks}
    api = client().api
    # an orphan the watchdog cannot catch: nobody ever attached to it
    cid = api.create_container(images["terminal"], command=["sleep", "300"], labels=labels,
                               host_config=api.create_host_config(network_mode="none"))["Id"]
    api.start(cid)
    alive_labels = {**Session().labels()}  # this process: alive, must be kept
    keep = api.create_container(images["terminal"], command=["sleep", "300"], labels=alive_labels,
                                host_config=api.create_host_config(network_mode="none", auto_remove=True))["Id"]
    api.start(keep)
    try:
        assert _start_ticks(os.getpid()) == alive_labels["worldline.pidstart"]
        spec = load_tasks(TASKS_DIR / "text-csv-sum.yaml")
        s = collect([Job(t) for t in spec], tmp_path / "c", workers=1, echo=lambda m: None)
        assert (s.reaped, s.trajectories) == (1, 1)
        assert [c["Id"] for c in containers_of(pid=dead.pid)] == []
        assert [c["Id"] for c in containers_of(pid=os.getpid()) if c["Id"] == keep] == [keep]
    finally:
        api.remove_container(keep, force=True)
        try:
            api.remove_container(cid, force=True)
        except Exception:  # noqa: BLE001 - already reaped
            pass
