"""Ingest's conversion as a real Apache Beam pipeline gives the corpus a local ingest gives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pipelines.beam_ingest import RESULTS_DIR, beam_runner
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import run_query
from tests.conftest import SAMPLE

ROWS = {
    "trajectories": "SELECT trajectory_id, domain, num_turns, source, locator FROM trajectories ORDER BY 1",
    "turns": "SELECT trajectory_id, turn_index, kind, md5(coalesce(observation, '')) FROM turns ORDER BY 1, 2",
    "quarantine": "SELECT source, locator, reason FROM quarantine ORDER BY 1, 2",
}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("local") / "corpus"
    ingest([SAMPLE], out, IngestConfig(workers=1), progress=False)
    return out


@pytest.mark.parametrize("options", [[], ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]],
                         ids=["in-process", "two-worker-processes"])
def test_beam_ingest_equals_local_ingest(sample: Path, local: Path, tmp_path: Path, options: list[str]) -> None:
    out = tmp_path / "corpus"
    cfg = IngestConfig(task_bytes=1 << 20)  # the 4.7 MB sample becomes several groups
    s = ingest([sample], out, cfg, progress=False, runner=beam_runner("DirectRunner", options))
    assert (s.records, s.trajectories, s.turns, s.quarantined, s.reconciles) == (1123, 1114, 3703, 9, True)
    for sql in ROWS.values():
        assert run_query(out, sql)[1] == run_query(local, sql)[1]
    names = [p.name for p in out.glob("turns/**/*.parquet")]
    assert len(names) > len(s.by_domain)  # several groups really wrote their own parts
    assert all(re.fullmatch(r"part-.+-\d{5}-[0-9a-f]{8}-\d{4}\.parquet", n) for n in names), names  # Beam attempts'
    assert not list(out.rglob(RESULTS_DIR))
    again = ingest([sample], out, cfg, progress=False, runner=beam_runner())
    assert (again.new_inputs, again.trajectories) == (0, 0)


def test_cli_ingest_with_beam(sample: Path, tmp_path: Path) -> None:
    temps = set(Path(tempfile.gettempdir()).glob("beam-temp*"))
    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "ingest", str(sample / "intercode"), "--out",
                        str(tmp_path / "c"), "--beam", "--task-mb", "0.1", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "records in 124 = accepted 124 + quarantined 0\n  turns 726" in r.stdout
    assert set(Path(tempfile.gettempdir()).glob("beam-temp*")) == temps  # the default runner tries no Prism download
    names = [p.name for p in (tmp_path / "c").glob("turns/**/*.parquet")]
    assert len(names) == 3 and all(re.fullmatch(r"part-.+-\d{5}-[0-9a-f]{8}-\d{4}\.parquet", n) for n in names), names


def test_a_retried_group_commits_one_attempt(sample: Path, local: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A runner may run a group twice (a retried or speculative bundle): each attempt writes its
    own parts, only the ones the surviving result names are committed, the rest go with staging."""
    from pipelines import beam_ingest

    real, log = beam_ingest._convert, tmp_path / "attempts.txt"  # a file: Beam pickles the function

    def twice(item, *a, **k):  # noqa: ANN001, ANN202 - Beam's Map signature
        if item[0] == 0:
            real(item, *a, **k)  # the first attempt: its parts are left behind, its result overwritten
        with open(log, "a") as f:
            f.write(f"{item[0]}\n")
        return real(item, *a, **k)

    monkeypatch.setattr(beam_ingest, "_convert", twice)
    out = tmp_path / "corpus"
    s = ingest([sample], out, IngestConfig(task_bytes=1 << 20), progress=False, runner=beam_runner())
    attempts = log.read_text().split()
    assert attempts.count("0") == 1 and len(attempts) > 1
    assert (s.trajectories, s.turns, s.reconciles) == (1114, 3703, True)
    for sql in ROWS.values():
        assert run_query(out, sql)[1] == run_query(local, sql)[1]
    assert not list(out.glob(".staging-*"))


def test_workers_get_absolute_paths(sample: Path, local: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative input and corpus paths work on a runner whose workers have another working directory
    (a worker's cwd is stood in for by changing it around each group; DirectRunner shares the driver's)."""
    from pipelines import beam_ingest

    real, elsewhere = beam_ingest._convert, tmp_path / "worker-cwd"
    elsewhere.mkdir()

    def in_another_cwd(item, *a, **k):  # noqa: ANN001, ANN202 - Beam's Map signature
        before = os.getcwd()
        os.chdir(elsewhere)
        try:
            return real(item, *a, **k)
        finally:
            os.chdir(before)

    monkeypatch.setattr(beam_ingest, "_convert", in_another_cwd)
    monkeypatch.chdir(sample.parent)
    out = Path(os.path.relpath(tmp_path / "corpus"))
    s = ingest([Path(sample.name)], out, IngestConfig(task_bytes=1 << 20), progress=False, runner=beam_runner())
    assert (s.trajectories, s.turns, s.quarantined, s.reconciles) == (1114, 3703, 9, True)
    assert not list(elsewhere.iterdir())
    prefix = f"{sample.parent}/"  # `source` is the path as given
    for sql in ROWS.values():
        assert run_query(out, sql.replace("source", f"'{prefix}' || source"))[1] == run_query(local, sql)[1]


@pytest.mark.parametrize(("args", "message"), [
    (["--beam", "--beam-runner", "NoSuchRunner"],
     "Beam runner 'NoSuchRunner' cannot be used: ValueError: Unexpected pipeline runner: NoSuchRunner."),
    (["--beam", "--beam-runner", "no.such.Runner"],
     "Beam runner 'no.such.Runner' cannot be used: ModuleNotFoundError: No module named 'no'"),
    (["--beam-runner", "PrismRunner"], "--beam-runner and --beam-option apply only with --beam"),
    (["--beam-option=--direct_num_workers=2"], "--beam-runner and --beam-option apply only with --beam"),    # Beam drops an option it does not know, with a log line, and runs on with its defaults
    (["--beam", "--beam-option=--direct_num_workerz=2"], "Beam options not understood: ['--direct_num_workerz=2']"),
])
def test_beam_options_are_checked_before_the_corpus_is_touched(args: list[str], message: str, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown runner failed only once the ingest held the lock and had staged its batch;
    a runner without --beam was ignored."""
    from pipelines.cli import main

    out = tmp_path / "corpus"
    assert main(["ingest", str(SAMPLE / "intercode"), "--out", str(out), *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"worldline ingest: error: {message}"), err
    assert not out.exists()
