"""The score stage's model tier as a real Apache Beam pipeline gives the table a local run gives."""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.ingest import ingest
from pipelines.query import run_query
from pipelines.score import MIN_UNITS, ScoreConfig, score, score_contracts
from tests.conftest import SAMPLE

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
INPUT = SAMPLE / "intercode" / "ic_ctf_gpt-4_25_turns.json"
ROWS = """SELECT trajectory_id, turn_index, category, keep, tokens, context_tokens, truncated, history_dropped, loss_mask,
                 cond_nll IS NULL FROM turn_scores ORDER BY 1, 2"""
NLL = "SELECT cond_nll, uncond_nll FROM turn_scores WHERE cond_nll IS NOT NULL ORDER BY trajectory_id, turn_index"


def _config(model: Path) -> ScoreConfig:
    from pipelines.score_model import ModelScoreConfig

    return ScoreConfig(model=ModelScoreConfig(model=str(model), dtype="float32"))


def _corpus(where: Path) -> Path:
    out = where / "corpus"
    ingest([INPUT], out, progress=False)
    return out


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    out = _corpus(tmp_path_factory.mktemp("local"))
    s = score(out, _config(tiny_model_dir), progress=False)
    assert s.model_trajectories == s.model_trajectories_total > 0 and s.model_runner == ""
    return out


def _same_table(out: Path, local: Path) -> None:
    """The same rows as the local run's; the losses equal up to float rounding (a batch's padding
    depends on which turns share it, and units batch apart)."""
    assert run_query(out, ROWS)[1] == run_query(local, ROWS)[1]
    mine, theirs = run_query(out, NLL)[1], run_query(local, NLL)[1]
    assert len(mine) == len(theirs) > 0
    assert all(math.isclose(a, b, abs_tol=1e-4) for r, q in zip(mine, theirs, strict=True) for a, b in zip(r, q, strict=True))
    assert all(r.passed for r in score_contracts(out)), [r.line() for r in score_contracts(out) if not r.passed]
    assert not list(out.glob(".score-work-*"))  # the units' files went with the work folder


def test_cli_score_with_beam_on_two_worker_processes(local: Path, tiny_model_dir: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = _corpus(tmp_path)
    argv = ["score", str(out), "--model", str(tiny_model_dir), "--dtype", "float32", "--quiet", "--beam",
            "--beam-option=--direct_num_workers=2", "--beam-option=--direct_running_mode=multi_processing"]
    temps = set(Path(tempfile.gettempdir()).glob("beam-temp*"))
    assert main(argv) == 0
    summary = capsys.readouterr().out
    n = run_query(local, "SELECT count(*) FROM trajectories")[1][0][0]
    assert f"via Beam FnApiRunner, {MIN_UNITS} units; {n}/{n} trajectories" in summary, summary
    # the default runner: Beam's DirectRunner tried to download Prism and left a /tmp/beam-temp* folder a run
    assert set(Path(tempfile.gettempdir()).glob("beam-temp*")) == temps
    _same_table(out, local)


def test_four_threads_load_the_model_once_and_a_retried_unit_counts_once(
        local: Path, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four worker threads in one process (as Dataflow and Flink run them): a DoFn instance each,
    one model load in all (concurrent loads broke transformers' imports, and held a model per
    thread); each unit's `process` run twice (a retried bundle): its first rows file is left
    behind and only the one its last result names is read. Run from a relative corpus path."""
    from pipelines import beam_score
    from pipelines.beam_score import BeamModelRunner
    from pipelines.score_model import TurnScorer

    log = tmp_path / "log.txt"  # a file: Beam pickles what it runs
    real_setup, real_process = TurnScorer.setup, beam_score._ScoreUnits.process

    def setup(self) -> None:  # noqa: ANN001
        with open(log, "a") as f:
            f.write("setup\n")
        real_setup(self)

    def twice(self, unit):  # noqa: ANN001, ANN202
        list(real_process(self, unit))
        with open(log, "a") as f:
            f.write(f"unit {unit.index}\n")
        yield from real_process(self, unit)

    monkeypatch.setattr(TurnScorer, "setup", setup)
    monkeypatch.setattr(beam_score._ScoreUnits, "process", twice)
    out = _corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    runner = BeamModelRunner("DirectRunner", ["--direct_num_workers=4", "--direct_running_mode=multi_threading"])
    s = score(Path("corpus"), _config(tiny_model_dir), progress=False, runner=runner)
    lines = log.read_text().splitlines()
    assert sorted(x for x in lines if x.startswith("unit")) == sorted(f"unit {i}" for i in range(MIN_UNITS))
    assert lines.count("setup") == 1
    assert beam_score._LOADED == {}  # torn down with the last instance
    assert (s.model_runner, s.model_units, s.model_trajectories) == ("Beam DirectRunner", MIN_UNITS, s.model_trajectories_total)
    _same_table(out, local)


@pytest.mark.parametrize(("args", "message"), [
    (["--beam", "--max-tokens", "1000"], "--max-tokens takes trajectories in one order across the whole corpus"),
    (["--beam", "--tier", "surface"], "--beam runs the model tier on Beam's workers; --tier surface has none"),
    (["--beam", "--beam-runner", "NoSuchRunner"],
     "Beam runner 'NoSuchRunner' cannot be used: ValueError: Unexpected pipeline runner: NoSuchRunner."),
    (["--beam-option=--direct_num_workers=2"], "--beam-runner and --beam-option apply only with --beam (the model tier"),    # Beam drops an option it does not know, with a log line, and runs on with its defaults
    (["--beam", "--beam-option=--direct_num_workerz=2"], "Beam options not understood: ['--direct_num_workerz=2']"),
])
def test_what_beam_cannot_do_is_refused_before_the_corpus_is_read(args: list[str], message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = _corpus(tmp_path)
    assert main(["score", str(out), "--quiet", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"worldline score: error: {message}"), err
    assert not (out / "side").exists()
