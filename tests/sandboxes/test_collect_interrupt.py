"""A collection cut short, for real: Ctrl-C / SIGTERM sent to a `worldline collect sandbox`
subprocess, and the Docker engine becoming unreachable mid-run (a socket proxy in front of the
shared engine, killed; the engine itself keeps running).

What must hold: the trajectories in flight are `interrupted` with only the turns they completed
(no invented error turn), finished ones are kept, jobs not started are neither run nor
quarantined, no container of the run is left, and the exit code says what happened (130: a
signal, 4: no engine answers). A rerun then collects only what is missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.contracts import run_contracts
from pipelines.query import connect, run_query
from sandboxes.contracts import run_sandbox_contracts
from sandboxes.engine import HOW_TO_START, client, where
from sandboxes.reaper import containers_of
from sandboxes.report import section_sandbox

ROOT = Path(__file__).resolve().parents[2]
SLEEP = 12  # the slow action; the signal comes while both slow trajectories are inside it


def _specs(d: Path, fast_after: tuple[str, ...] = ("d",)) -> list[Path]:
    """a (fast), b and c (slow: `sleep` in their second action), then more fast ones; with two
    workers a finishes, b and c run side by side and the fast ones after them wait in the queue."""
    d.mkdir()
    paths = []
    for name in ("a", *fast_after):
        paths.append(d / f"{name}-fast.yaml")
        paths[-1].write_text(f"id: {name}-fast\ntask: fast {name}\nactions: [echo {name}-1, echo {name}-2]\nchecks: ['true']\n")
    for name in ("b", "c"):
        p = d / f"{name}-slow.yaml"
        p.write_text(textwrap.dedent(f"""\
            id: {name}-slow
            task: slow {name}
            timeout_s: 30
            actions: [echo start-{name}, 'sleep {SLEEP}; echo mid-{name}', echo end-{name}]
            checks: ['true']
            """))
        paths.insert(len(paths) - len(fast_after), p)
    return paths  # a, b, c, then the fast ones


def _default_signals() -> None:
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, signal.SIG_DFL)


def _collector(specs: list[Path], out: Path, env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipelines.cli", "collect", "sandbox", *map(str, specs), "--out", str(out), "--workers", "2"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_signals, env=env)


def _wait_until_sleeping(p: subprocess.Popen, n: int = 2, timeout: float = 90.0) -> None:
    """Until `n` containers of the collector run the slow action (asked of the real engine)."""
    api = client().api
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert p.poll() is None, p.communicate()
        sleeping = 0
        for c in containers_of(pid=p.pid):
            try:
                procs = api.top(c["Id"]).get("Processes") or []
            except Exception:  # noqa: BLE001 - starting or going
                continue
            sleeping += any(f"sleep {SLEEP}" in " ".join(row) for row in procs)
        if sleeping >= n:
            time.sleep(0.3)  # well inside the sleep
            return
        time.sleep(0.1)
    raise AssertionError(f"collector {p.pid}: {n} slow actions did not start within {timeout}s")


def _docker_ps(pid: int) -> list[str]:
    """`docker ps -a` for the containers of one collector process."""
    r = subprocess.run(["docker", "ps", "-a", "-q", "--filter", f"label=worldline.pid={pid}"],
                       capture_output=True, text=True, timeout=60, check=True)
    return r.stdout.split()


def _corpus(out: Path) -> list[tuple]:
    """(native_id, outcome, interrupted_by, error, [(action, kind, observation, exit code)]) per trajectory."""
    rows = run_query(out, """SELECT t.native_id, t.outcome, t.metadata,
            list((u.action, u.observation_kind, u.observation, u.exit_code) ORDER BY u.turn_index)
        FROM trajectories t LEFT JOIN turns u USING (trajectory_id)
        GROUP BY t.trajectory_id, t.native_id, t.outcome, t.metadata, t.collected_at ORDER BY t.native_id, t.collected_at""")[1]
    out_rows = []
    for nid, outcome, meta, turns in rows:
        m = json.loads(meta)
        out_rows.append((nid, outcome, m.get("interrupted_by"), m.get("error"),
                         [tuple(x.values()) if isinstance(x, dict) else tuple(x) for x in turns if x is not None]))
    return out_rows


FAST_A = ("a-fast", "success", None, None, [("echo a-1", "stdout", "a-1\n", 0), ("echo a-2", "stdout", "a-2\n", 0)])


def _cut(name: str, by: str) -> tuple:
    return (f"{name}-slow", "interrupted", by, None, [(f"echo start-{name}", "stdout", f"start-{name}\n", 0)])


def _done(name: str) -> tuple:
    return (f"{name}-slow", "success", None, None, [(f"echo start-{name}", "stdout", f"start-{name}\n", 0),
                                                   (f"sleep {SLEEP}; echo mid-{name}", "stdout", f"mid-{name}\n", 0),
                                                   (f"echo end-{name}", "stdout", f"end-{name}\n", 0)])


def _fast(name: str) -> tuple:
    return (f"{name}-fast", "success", None, None, [(f"echo {name}-1", "stdout", f"{name}-1\n", 0),
                                                   (f"echo {name}-2", "stdout", f"{name}-2\n", 0)])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_marks_in_flight_trajectories_interrupted(images, tmp_path: Path, sig: signal.Signals,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    specs = _specs(tmp_path / "specs")
    out = tmp_path / "c"
    p = _collector(specs, out)
    try:
        _wait_until_sleeping(p)
        os.kill(p.pid, sig)
        stdout, stderr = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, stderr
    assert _docker_ps(p.pid) == []
    lines = stdout.splitlines()
    assert lines[0].startswith("sandbox collection: 3 trajectories, 4 turns from 4 jobs in ")
    assert lines[0].endswith("  [INTERRUPTED: finished trajectories were kept]")
    assert lines[1] == "  jobs:          4 = 3 collected + 0 skipped (already collected) + 0 quarantined + 1 not run"
    assert lines[2] == "  outcomes:      interrupted=2, success=1"
    assert "  1 job not run (interrupted): rerun the same command to collect it" in lines
    # the slow ones keep the turn they completed, and nothing else: no "sandbox error" turn
    assert _corpus(out) == [FAST_A, _cut("b", sig.name), _cut("c", sig.name)]
    assert run_query(out, "SELECT count(*) FROM quarantine")[1] == [(0,)]
    assert all(r.passed for r in run_sandbox_contracts(out)), [r.line() for r in run_sandbox_contracts(out)]
    # the report counts them apart, out of the success rate
    html = section_sandbox(connect(out))
    assert "<tr><td>terminal</td><td>terminal</td><td>scripted</td><td>3</td><td>4</td><td>1</td><td>0</td><td>0</td><td>2</td>" in html
    assert "<tr><td>none</td><td>3</td><td>100.0</td><td>0</td><td>2</td></tr>" in html
    if sig != signal.SIGINT:
        return
    # the rerun collects what is missing (b and c anew, d) and skips a
    assert main(["collect", "sandbox", *map(str, specs), "--out", str(out), "--workers", "2"]) == 0
    o = capsys.readouterr().out.splitlines()
    assert o[0].startswith("sandbox collection: 3 trajectories, 8 turns from 3 jobs in "), o
    assert o[1] == "  jobs:          4 = 3 collected + 1 skipped (already collected) + 0 quarantined + 0 not run"
    assert "  1 job already collected, skipped (--again collects it anew)" in o
    assert _corpus(out) == [FAST_A, _cut("b", "SIGINT"), _done("b"), _cut("c", "SIGINT"), _done("c"), _fast("d")]


PROXY = """\
import os, socket, sys, threading
path, upstream = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(64)
def pipe(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    finally:
        try:
            b.shutdown(socket.SHUT_WR)
        except OSError:
            pass
while True:
    c, _ = srv.accept()
    u = socket.socket(socket.AF_UNIX)
    u.connect(upstream)
    threading.Thread(target=pipe, args=(c, u), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c), daemon=True).start()
"""


def _engine_socket() -> str:
    at = where()
    if not at.startswith("unix://"):
        pytest.skip(f"needs a unix-socket engine to put a proxy in front of (DOCKER_HOST={at})")
    return at.removeprefix("unix://")


def test_engine_gone_mid_run_stops_without_quarantining(images, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The collector talks to the engine through a proxy that is then killed: to the collector the
    engine is gone, while the shared engine (and its containers' watchdogs) go on."""
    specs = _specs(tmp_path / "specs", fast_after=("d", "e"))
    out = tmp_path / "c"
    sock = tmp_path / "proxy.sock"
    (tmp_path / "proxy.py").write_text(PROXY)
    proxy = subprocess.Popen([sys.executable, str(tmp_path / "proxy.py"), str(sock), _engine_socket()])
    p = None
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert time.monotonic() < deadline and proxy.poll() is None, "the proxy did not start"
            time.sleep(0.05)
        p = _collector(specs, out, env={**os.environ, "DOCKER_HOST": f"unix://{sock}"})
        _wait_until_sleeping(p)
        proxy.kill()
        proxy.wait(10)
        stdout, stderr = p.communicate(timeout=90)
    finally:
        for proc in (proxy, p):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert p.returncode == 4, stderr
    err = stderr.strip().splitlines()[-1]
    assert err.startswith(f"worldline collect: error: the Docker engine at unix://{sock} stopped answering during the collection ("), err
    assert ("): 2 jobs were not run (not quarantined) and 2 in flight were kept as `interrupted`; 1 trajectory finished. "
            "Rerun the same collection once an engine answers: what was collected is skipped. ") in err
    assert err.endswith(HOW_TO_START)
    lines = stdout.splitlines()
    assert lines[0].startswith("sandbox collection: 3 trajectories, 4 turns from 5 jobs in ")
    assert lines[1] == "  jobs:          5 = 3 collected + 0 skipped (already collected) + 0 quarantined + 2 not run"
    assert "  2 jobs not run (the Docker engine stopped answering): rerun the same command to collect them" in lines
    assert _corpus(out) == [FAST_A, _cut("b", "engine"), _cut("c", "engine")]
    assert run_query(out, "SELECT count(*) FROM quarantine")[1] == [(0,)]
    assert {r.name: r.passed for r in run_contracts(out)}["quarantine_rate"] is True
    assert all(r.passed for r in run_sandbox_contracts(out)), [r.line() for r in run_sandbox_contracts(out)]
    # the collector could not remove its containers; their watchdogs saw its attach sockets close
    deadline = time.monotonic() + 20
    while left := _docker_ps(p.pid):
        assert time.monotonic() < deadline, f"containers of {p.pid} left: {left}"
        time.sleep(0.2)
    # with an engine again, the rerun collects what is missing
    assert main(["collect", "sandbox", *map(str, specs), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    o = capsys.readouterr().out.splitlines()
    assert o[1] == "  jobs:          5 = 4 collected + 1 skipped (already collected) + 0 quarantined + 0 not run"
    assert _corpus(out) == [FAST_A, _cut("b", "engine"), _done("b"), _cut("c", "engine"), _done("c"), _fast("d"), _fast("e")]
