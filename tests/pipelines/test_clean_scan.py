"""`worldline clean`'s step lines, the progress of its secrets/PII scan, and its memory bound."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

import pipelines.clean as clean_module
from pipelines.clean import CleanConfig, _Steps, clean
from tests.pipelines.clean_support import copy_corpus, rows, sample_corpus  # noqa: F401 - fixture


def test_each_step_line_shows_the_time_of_that_step() -> None:
    """A step's line comes when it ends and carries its own duration (it used to carry the
    duration of the step before, on the next step's line)."""
    now = [100.0]
    lines: list[str] = []
    step = _Steps(3, True, lines.append, clock=lambda: now[0])
    step("quick")
    now[0] += 0.25
    step("slow")
    now[0] += 102.4
    step("write")
    now[0] += 0.5
    step.end()
    step.end()  # nothing left to end: no line
    assert lines == ["clean [1/3] quick (0.2 s)", "clean [2/3] slow (102.4 s)", "clean [3/3] write (0.5 s)"]
    quiet: list[str] = []
    off = _Steps(1, False, quiet.append)
    off("x")
    off.end()
    assert quiet == []


def test_scan_duration_on_the_scan_line_and_scan_progress(sample_corpus: Path, tmp_path: Path,  # noqa: F811 - fixture
                                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    scan = clean_module._scan_redactions

    def slow_scan(*a, **k):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.6)
        return scan(*a, **k)

    monkeypatch.setattr(clean_module, "_scan_redactions", slow_scan)
    lines: list[str] = []
    s = clean(corpus, progress=True, echo=lines.append)
    names = [re.sub(r" \([0-9.]+ s\)$", "", x) for x in lines]
    assert names == ["clean [1/7] fewer than min_turns", "clean [2/7] actions outside the declared action space",
                     "clean [3/7] environment failures (CAPTCHA, HTTP error pages, sandbox crashes)",
                     "clean [4/7] retry cycles", "clean [5/7] GUI turns without change",
                     "clean [6/7] scanning for secrets and PII", "clean [7/7] writing side tables"]
    took = {n: float(re.search(r"\(([0-9.]+) s\)$", x).group(1)) for n, x in zip(names, lines, strict=True)}
    assert took["clean [6/7] scanning for secrets and PII"] >= 0.6
    assert took["clean [7/7] writing side tables"] < 0.6
    # the scan's own progress (stderr is not a terminal here: the first line, then the last)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("clean: scanning for secrets and PII: column 1/17 (turns.action) · 0 texts (0.0 MB) checked, 0 with some · ")
    assert err[-1].startswith("clean: scanning for secrets and PII: done · 528 texts (0.9 MB) checked, 12 with some · ")
    assert s.redacted_texts == 12 and s.redactions == {"email": 28, "url_password": 1}
    # what export writes and what it does not (the line counted both as "export will redact")
    assert (s.unwritten_redacted_texts, s.unwritten_redactions) == (4, {"email": 3, "url_password": 1})
    assert "  secrets/PII export will redact: email 25 (in 8 texts); in columns export does not write: email 3, " \
           "url_password 1 (in 4 texts)\n" in s.render()
    # nothing of DuckDB's spill folder is left in the corpus
    assert not list(corpus.glob(".clean-work-*"))


def test_memory_limit_is_checked_and_bounds_duckdb(sample_corpus: Path, tmp_path: Path,  # noqa: F811 - fixture
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="--memory-limit 'lots'"):
        CleanConfig(memory_limit="lots")
    assert CleanConfig().memory_limit == "512MB"
    # the limit is a place to work, not a setting of the verdicts: same fingerprint
    assert CleanConfig(memory_limit="64MB").fingerprint() == CleanConfig().fingerprint()
    settings: list[tuple] = []
    connect = clean_module.connect

    def spy(root, **kw):  # noqa: ANN001, ANN003, ANN202
        con = connect(root, **kw)
        real = con.execute

        class Con:
            def __getattr__(self, name):  # noqa: ANN001, ANN204
                return getattr(con, name)

            def execute(self, sql, *a):  # noqa: ANN001, ANN002, ANN202
                if sql.startswith("SET "):  # with whether the folder DuckDB spills into can be made
                    settings.append((sql, Path(sql.split("'")[1]).parent.is_dir()))
                return real(sql, *a)

        return Con()

    monkeypatch.setattr(clean_module, "connect", spy)
    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    clean(corpus, CleanConfig(memory_limit="64MB", scan_redactions=False), progress=False)
    assert settings[0][0] == "SET memory_limit = '64MB'"
    assert re.fullmatch(rf"SET temp_directory = '{re.escape(str(corpus))}/\.clean-work-\d+-[0-9a-f]{{6}}/duckdb'", settings[1][0])
    assert settings[1][1] is True
    assert rows(corpus, "SELECT reason, count(*) FROM cleaning GROUP BY 1 ORDER BY 1") == [
        ("gui_no_change", 12), ("retry_cycle", 53), ("too_few_turns", 181)]
    assert not list(corpus.glob(".clean-work-*"))
