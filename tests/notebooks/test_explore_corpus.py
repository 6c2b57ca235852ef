"""The notebook runs top to bottom against a real corpus, and is stored without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from pipelines.ingest import ingest
from tests.conftest import ROOT, SAMPLE

NB = ROOT / "notebooks" / "explore_corpus.ipynb"


def test_stored_without_outputs() -> None:
    nb = nbformat.read(NB, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebook_executes(tmp_path: Path, monkeypatch) -> None:
    corpus = tmp_path / "corpus"
    ingest([SAMPLE / "swe-agent", SAMPLE / "agentapi-terminal"], corpus, progress=False)
    monkeypatch.setenv("WORLDLINE_CORPUS", str(corpus))
    monkeypatch.setenv("WORLDLINE_REPO", str(ROOT))
    nb = nbformat.read(NB, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
    html = "".join(o.get("data", {}).get("text/html", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "Turns per domain" in html and "<svg" in html
    assert "unknown_format" in html  # the agentapi screen fixtures are quarantined
    assert os.environ["WORLDLINE_CORPUS"] == str(corpus)


def test_a_corpus_named_that_is_none_is_an_error(tmp_path: Path, monkeypatch) -> None:
    """A WORLDLINE_CORPUS that is no corpus (a typo) silently explored the bundled sample instead."""
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("WORLDLINE_CORPUS", str(tmp_path / "no-such-corpus"))
    monkeypatch.setenv("WORLDLINE_REPO", str(ROOT))
    nb = nbformat.read(NB, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}})
    try:
        client.execute()
    except CellExecutionError as e:
        assert f"WORLDLINE_CORPUS={tmp_path / 'no-such-corpus'} is not a Worldline corpus (no manifest.json)" in str(e)
    else:
        raise AssertionError("the notebook ran on another corpus")


def test_an_empty_corpus_runs_through(tmp_path: Path, monkeypatch) -> None:
    corpus = tmp_path / "corpus"
    (tmp_path / "junk.txt").write_text("not a trace\n")
    ingest([tmp_path / "junk.txt"], corpus, progress=False)  # every record quarantined: no trajectory
    monkeypatch.setenv("WORLDLINE_CORPUS", str(corpus))
    monkeypatch.setenv("WORLDLINE_REPO", str(ROOT))
    nb = nbformat.read(NB, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "notebooks")}}).execute()
