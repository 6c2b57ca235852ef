"""The HTML corpus report: where it is written, and what its tables say of rows they leave out."""

from __future__ import annotations

from pathlib import Path

from pipelines.cli import main
from pipelines.ingest import IngestConfig, ingest
from pipelines.report import build_report


def test_the_quarantine_table_counts_every_row_it_leaves_out(tmp_path: Path) -> None:
    """300 quarantined records, 50 shown: the note said 150 more (of the 200 it had read), not 250."""
    f = tmp_path / "bad.jsonl"
    good = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    f.write_text(good + "".join(f'{{"messages": [broken {i}\n' for i in range(300)))
    corpus = tmp_path / "c"
    assert ingest([f], corpus, IngestConfig(workers=1), progress=False).quarantined == 300
    assert "<p class=note>250 more rows not shown</p>" in build_report(corpus)


def test_out_ending_in_a_slash_is_a_folder(tmp_path: Path, capsys) -> None:  # noqa: ANN001 - pytest fixture
    f = tmp_path / "bad.jsonl"
    f.write_text('{"messages": [broken\n')
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1), progress=False)
    assert main(["report", str(corpus), "--out", f"{tmp_path / 'reports'}/"]) == 0
    assert (tmp_path / "reports" / "report.html").is_file()  # it wrote a file named `reports`
    assert capsys.readouterr().out == f"report: {tmp_path / 'reports' / 'report.html'}\n"
