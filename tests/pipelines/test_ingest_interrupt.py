"""An ingest stopped by a signal: its worker processes go with it, nothing is committed, and the rerun
imports everything."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipelines.ingest import IngestConfig
from pipelines.store import Corpus
from tests.conftest import SAMPLE

FIREACT = "fireact/finetune_gpt_format_hotpotqa.jsonl"
COPIES = 160  # about 85 MB: a few seconds of two workers


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("many")
    data = (SAMPLE / FIREACT).read_bytes().rstrip(b"\n")
    for i in range(COPIES):
        (d / f"copy{i:03d}.jsonl").write_bytes(data + b"\n" * (i + 1))  # each its own sha256, the same records
    return d


def _start(inputs: Path, out: Path, group: bool = False) -> tuple[subprocess.Popen, list[psutil.Process]]:
    """`group`: in a process group of its own, as a terminal runs a command (Ctrl-C goes to the whole group)."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "ingest", str(inputs), "--out", str(out), "--workers", "2",
                             "--task-mb", "8", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=group)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 60
    while len(workers := parent.children()) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, "the ingest never started its two workers"
        time.sleep(0.05)
    time.sleep(0.5)  # converting by now
    return proc, workers


def _gone(workers: list[psutil.Process], within_s: float) -> list[int]:
    _, alive = psutil.wait_procs(workers, timeout=within_s)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:  # do not leave them running for the next test
        p.kill()
    return [p.pid for p in alive]


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)])
def test_workers_stop_with_the_ingest_and_the_rerun_imports_everything(inputs: Path, tmp_path: Path, sig: int, code: int) -> None:
    out = tmp_path / "c"
    proc, workers = _start(inputs, out)
    proc.send_signal(sig)  # to the ingest alone, not its process group (a service manager's stop, `kill PID`)
    assert proc.wait(timeout=10) == code, proc.stderr.read().decode()
    assert _gone(workers, within_s=2.0) == []
    assert not Corpus(out).exists() or json.loads((out / "manifest.json").read_text())["batches"] == []
    proc.stderr.close()
    rerun = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", str(inputs), "--out", str(out), "--workers", "2",
                            "--quiet"], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert len(m["inputs"]) == COPIES and sum(e["quarantined"] for e in m["inputs"].values()) == 0
    assert not list(out.glob(".staging-*"))


def test_ctrl_c_at_a_terminal_stops_the_run_without_worker_tracebacks(inputs: Path, tmp_path: Path) -> None:
    # the terminal sends SIGINT to the whole process group: each worker printed a KeyboardInterrupt traceback
    import os

    out = tmp_path / "c"
    proc, workers = _start(inputs, out, group=True)
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=10) == 130
    assert proc.stderr is not None
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert err == "worldline ingest: interrupted\n"
    assert _gone(workers, within_s=2.0) == []
    assert not Corpus(out).exists() or json.loads((out / "manifest.json").read_text())["batches"] == []


def test_workers_are_bounded() -> None:
    with pytest.raises(ValueError, match=r"--workers 100000: more processes than this machine can use \(at most \d+ here\)"):
        IngestConfig(workers=100_000)


def test_stop_pool_kills_groups_still_running() -> None:
    """What an interrupted ingest does with its pool: `shutdown()` would wait for the running group
    (here a minute) and run the queued ones; stop_pool cancels those and kills the workers."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from pipelines.ingest import stop_pool

    pool = ProcessPoolExecutor(max_workers=2)
    futures = [pool.submit(time.sleep, 60) for _ in range(4)]
    deadline = time.monotonic() + 30
    while not all(f.running() for f in futures[:2]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    workers = [psutil.Process(p.pid) for p in pool._processes.values()]
    t0 = time.monotonic()
    stop_pool(pool)
    assert time.monotonic() - t0 < 10
    assert _gone(workers, within_s=2.0) == []
    # none ran to its end: queued ones cancelled, ones already handed to a worker broken with it (the executor's
    # own thread marks those once it sees the workers gone: waited for, as a failing run's caller would)
    deadline = time.monotonic() + 10  # (not `wait()`: it never counts a future cancelled after shutdown as done)
    while not all(f.done() for f in futures):
        assert time.monotonic() < deadline, [f._state for f in futures]
        time.sleep(0.05)
    assert all(f.cancelled() or isinstance(f.exception(), BrokenProcessPool) for f in futures)


def test_no_more_worker_processes_than_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pipelines.ingest as ingest_module

    def no_pool(*a, **k):  # noqa: ANN002, ANN003, ANN202
        pytest.fail("a process pool for a single input")

    monkeypatch.setattr(ingest_module, "ProcessPoolExecutor", no_pool)
    s = ingest_module.ingest([SAMPLE / "tau-bench"], tmp_path / "c", IngestConfig(workers=8), progress=False)
    assert (s.inputs, s.trajectories, s.quarantined) == (1, 8, 0)


def _distinct_inputs(folder: Path, n: int) -> list:
    from pipelines.reader import discover

    folder.mkdir()
    line = (SAMPLE / FIREACT).read_bytes().splitlines()[0]
    for i in range(n):
        (folder / f"in{i:02d}.jsonl").write_bytes(line + b"\n" * (i + 1))
    return list(discover([folder]))


def test_hashing_starts_during_the_walk_once_the_worker_count_is_settled(tmp_path: Path) -> None:
    from pipelines.ingest import InputHashes
    from pipelines.sources import sha256_file

    units = _distinct_inputs(tmp_path / "in", 40)  # more than two hashing tasks (16 inputs each)
    hashes = InputHashes(IngestConfig(workers=2))
    try:
        hashes.add(units[0])
        assert not hashes.started and hashes.workers() == 1  # one input: one process, no pool yet
        hashes.add(units[1])
        assert hashes.started and hashes.workers() == 2  # two inputs settle --workers 2: the pool hashes from here
        pool = hashes.pool()
        for u in units[2:]:
            hashes.add(u)
        assert hashes.pool() is pool
        shas, sizes = hashes.result()
        assert shas == [sha256_file(u.path) for u in units]  # in the order found
        assert sizes == [u.path.stat().st_size for u in units]
        assert len(set(shas)) == 40
    finally:
        hashes.stop()


def test_a_small_input_is_hashed_here_without_a_pool(tmp_path: Path) -> None:
    from pipelines.ingest import InputHashes
    from pipelines.sources import sha256_file

    units = _distinct_inputs(tmp_path / "in", 20)
    hashes = InputHashes(IngestConfig(workers=0))  # one per core, when there is more than a task's worth (64 MiB)
    for u in units:
        hashes.add(u)
    assert (hashes.started, hashes.workers(), hashes.pool()) == (False, 1, None)
    assert hashes.result()[0] == [sha256_file(u.path) for u in units]


def test_an_input_missing_after_the_pool_started_stops_it(tmp_path: Path) -> None:
    from pipelines.ingest import ingest

    _distinct_inputs(tmp_path / "in", 40)
    before = set(psutil.Process().children(recursive=True))  # (services a fixture started, say)
    with pytest.raises(FileNotFoundError, match="missing"):
        ingest([tmp_path / "in", tmp_path / "missing"], tmp_path / "c", IngestConfig(workers=2), progress=False)
    assert set(psutil.Process().children(recursive=True)) <= before  # the hashing workers went with the error
    assert not Corpus(tmp_path / "c").exists()


def test_an_input_changed_while_waiting_for_the_lock_is_hashed_again(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # hashed during the walk, changed while another writer held the corpus: it was recorded under the sha of
    # its old content with the rows of its new one, and the next ingest read it again (its records twice)
    import threading

    from pipelines.ingest import ingest
    from pipelines.sources import sha256_file

    _distinct_inputs(tmp_path / "in", 20)  # more than one hashing task: the pool starts during the walk
    changed = tmp_path / "in" / "in00.jsonl"
    corpus = tmp_path / "c"
    results: list = []
    holder = subprocess.Popen(  # another writer: a process of its own (a pool forked here would hold a lock taken here)
        [sys.executable, "-c", "import sys; from pipelines.store import Corpus\n"
         f"with Corpus({str(corpus)!r}).writer():\n    print('held', flush=True); sys.stdin.readline()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "held\n"
        run = threading.Thread(target=lambda: results.append(
            ingest([tmp_path / "in"], corpus, IngestConfig(workers=2, lock_wait_s=60), progress=False)))
        run.start()
        deadline = time.monotonic() + 60
        while "waiting up to 60 s" not in capsys.readouterr().err:
            assert run.is_alive() and time.monotonic() < deadline, "the ingest never waited for the lock"
            time.sleep(0.05)
        time.sleep(1.0)  # the hashing that began during the walk is done
        changed.write_bytes(changed.read_bytes() + (SAMPLE / FIREACT).read_bytes().splitlines()[1] + b"\n")
        holder.stdin.write("\n")
        holder.stdin.flush()
    finally:
        holder.wait(30)
    run.join(60)
    first = results[0]
    assert (first.new_inputs, first.trajectories) == (20, 21)
    entries = Corpus(corpus).manifest()["inputs"]
    assert sha256_file(changed) in entries  # recorded under what was read
    again = ingest([tmp_path / "in"], corpus, IngestConfig(workers=2), progress=False)
    assert (again.new_inputs, again.trajectories) == (0, 0)
