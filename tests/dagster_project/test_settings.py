"""Settings errors are clear at load time: the code location fails to load with a message that names
the setting and where it came from (before: a bare `could not convert string to float: 'abc'`, or,
for a quarantine bound of 30 meant as 30 %, a load that succeeded and asset checks that failed on
every run with `--max-quarantine-rate must be in [0, 1]`, a flag a Dagster user never set)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dagster_project.resources import build_resources, settings

ENV = ("WORLDLINE_CONFIG", "WORLDLINE_CORPUS", "WORLDLINE_INBOX", "WORLDLINE_SETTLE_SECONDS",
       "WORLDLINE_MAX_QUARANTINE_RATE", "WORLDLINE_BEAM_RUNNER", "WORLDLINE_BEAM_OPTIONS")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("var", "value", "message"), [
    ("WORLDLINE_SETTLE_SECONDS", "abc",
     "environment variable WORLDLINE_SETTLE_SECONDS: settle_seconds must be a number in [0, inf] (got 'abc')"),
    ("WORLDLINE_SETTLE_SECONDS", "-5",
     "environment variable WORLDLINE_SETTLE_SECONDS: settle_seconds must be a number in [0, inf] (got '-5')"),
    ("WORLDLINE_MAX_QUARANTINE_RATE", "30",
     "environment variable WORLDLINE_MAX_QUARANTINE_RATE: max_quarantine_rate must be a number in [0, 1] (got '30')"),
    ("WORLDLINE_MAX_QUARANTINE_RATE", "nan",
     "environment variable WORLDLINE_MAX_QUARANTINE_RATE: max_quarantine_rate must be a number in [0, 1] (got 'nan')"),
])
def test_a_bad_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch, var: str, value: str, message: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        build_resources()


def test_a_bad_yaml_setting_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = tmp_path / "worldline.yaml"
    monkeypatch.setenv("WORLDLINE_CONFIG", str(cfg))
    cfg.write_text("max_quarantine_rate: 1.5\n")
    with pytest.raises(ValueError, match=re.escape(
            f"{cfg} (WORLDLINE_CONFIG): max_quarantine_rate must be a number in [0, 1] (got 1.5)")):
        settings()
    cfg.write_text("- corpus\n- inbox\n")  # a list, not a mapping: not "unknown settings ['corpus', 'inbox']"
    with pytest.raises(ValueError, match=re.escape(f"{cfg}: expected a mapping of settings (known: ")):
        settings()


def test_good_settings_are_numbers_and_lists(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WORLDLINE_SETTLE_SECONDS", "0")
    monkeypatch.setenv("WORLDLINE_MAX_QUARANTINE_RATE", "1")
    s = settings()
    assert (s["settle_seconds"], s["max_quarantine_rate"], s["beam_options"]) == (0.0, 1.0, [])
    cfg = tmp_path / "worldline.yaml"
    cfg.write_text("settle_seconds: 2\nbeam_runner: DirectRunner\n"
                   "beam_options: --direct_num_workers=2 --direct_running_mode=in_memory\n")
    monkeypatch.setenv("WORLDLINE_CONFIG", str(cfg))
    s = settings()
    assert (s["settle_seconds"], s["max_quarantine_rate"]) == (2.0, 1.0)
    assert s["beam_options"] == ["--direct_num_workers=2", "--direct_running_mode=in_memory"]  # as the env var splits
    corpus = build_resources()["corpus"]
    assert (corpus.settle_seconds, corpus.beam_options) == (2.0, ["--direct_num_workers=2", "--direct_running_mode=in_memory"])


def test_beam_options_without_a_runner_are_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """They were ignored (the ingest ran locally), where the CLI refuses `--beam-option` without `--beam`."""
    from dagster_project.score_assets import ScoringModelResource

    monkeypatch.setenv("WORLDLINE_BEAM_OPTIONS", "--direct_num_workers=2")
    with pytest.raises(ValueError, match=re.escape("environment variable WORLDLINE_BEAM_OPTIONS: beam_options "
                                                   "['--direct_num_workers=2'] set without beam_runner")):
        settings()
    monkeypatch.delenv("WORLDLINE_BEAM_OPTIONS")
    cfg = tmp_path / "worldline.yaml"
    cfg.write_text("beam_options: [--direct_num_workers=2]\n")
    monkeypatch.setenv("WORLDLINE_CONFIG", str(cfg))
    with pytest.raises(ValueError, match=re.escape(f"{cfg} (WORLDLINE_CONFIG): beam_options")):
        settings()
    with pytest.raises(ValueError, match="set without beam_runner"):
        ScoringModelResource(beam_options=["--direct_num_workers=2"]).model_runner()


@pytest.mark.parametrize(("text", "message"), [
    ("beam_options: 5\n", "beam_options must be text or a list of texts (got 5)"),
    ("beam_options: [--a, 3]\n", "beam_options must be text or a list of texts (got ['--a', 3])"),
    ("corpus: [a, b]\n", "corpus must be text (got ['a', 'b'])"),
])
def test_a_yaml_setting_of_the_wrong_type_is_named(text: str, message: str, monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """`beam_options: 5` failed the code location with a bare "TypeError: 'int' object is not iterable"."""
    cfg = tmp_path / "worldline.yaml"
    cfg.write_text(text)
    monkeypatch.setenv("WORLDLINE_CONFIG", str(cfg))
    with pytest.raises(ValueError, match=re.escape(f"{cfg} (WORLDLINE_CONFIG): {message}")):
        settings()



def test_the_seed_command_says_a_bad_setting_in_one_line(tmp_path: Path) -> None:
    """`python -m dagster_project.seed` (docs/orchestration.md) printed a traceback for an unknown key."""
    import os
    import subprocess
    import sys

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("bogus: 1\n")
    env = {**os.environ, "WORLDLINE_CONFIG": str(cfg), "DAGSTER_HOME": str(tmp_path / "home")}
    r = subprocess.run([sys.executable, "-m", "dagster_project.seed"], env=env, capture_output=True, text=True,
                       cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr == (f"dagster_project.seed: error: {cfg}: unknown settings ['bogus']; known: ['beam_options', "
                        "'beam_runner', 'corpus', 'inbox', 'max_quarantine_rate', 'settle_seconds']\n")
