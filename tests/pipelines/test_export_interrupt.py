"""An export killed outright (SIGKILL: no handler runs) takes its worker processes with it: a forked
worker holds the output folder's lock file too, so an orphan kept every later export out."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from pipelines.ingest import IngestConfig, ingest
from tests.conftest import SAMPLE


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    c = tmp_path_factory.mktemp("export-kill") / "corpus"
    ingest([SAMPLE / "fireact", SAMPLE / "intercode"], c, IngestConfig(workers=1), progress=False)
    return c


def _export(corpus: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", "export", str(corpus), "--out", str(out), "--workers", "2",
            "--quiet", *extra]


def test_sigkill_of_an_export_takes_its_workers(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "export"
    proc = subprocess.Popen(_export(corpus, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    parent = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while len(workers := parent.children()) < 2:
        assert proc.poll() is None, f"the export ended before it started two workers: {proc.stderr.read().decode()}"
        assert time.monotonic() < deadline, "the export never started its two workers"
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    proc.stderr.close()
    _, alive = psutil.wait_procs(workers, timeout=5)
    alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
    for p in alive:  # do not leave them for the next test
        p.kill()
    assert [p.pid for p in alive] == []
    rerun = subprocess.run(_export(corpus, out), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert (out / "manifest.json").is_file() and not list(out.glob(".staging-*"))
