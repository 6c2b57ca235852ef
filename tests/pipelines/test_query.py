"""`worldline query`'s output formats keep every DuckDB value readable and unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.ingest import ingest
from pipelines.query import render, run_query

SQL = r"""SELECT 'nan'::DOUBLE AS a, [1.5, '-inf'::DOUBLE] AS b, '\x00\xFF'::BLOB AS c, {'x': 1, 'd': DATE '2026-12-02'} AS d,
                 'x' || chr(13) || chr(10) || 'y' || chr(0) || chr(8238) || 'z' AS e, NULL AS f"""


def test_formats(tmp_path: Path, sample: Path) -> None:
    ingest([sample / "tau-bench"], tmp_path / "c", progress=False)
    cols, rows = run_query(tmp_path / "c", SQL)
    # JSON has no NaN or infinity (null would read as missing); bytes are base64
    assert json.loads(render(cols, rows, "json")) == [
        {"a": "NaN", "b": [1.5, "-Infinity"], "c": "AP8=", "d": {"x": 1, "d": "2026-12-02"}, "e": "x\r\ny\x00\u202ez", "f": None}]
    # CSV: nested values as JSON text, not Python reprs
    assert render(cols, rows, "csv") == 'a,b,c,d,e,f\nnan,"[1.5,""-Infinity""]",AP8=,"{""x"":1,""d"":""2026-12-02""}","x\r\ny\x00\u202ez",'
    # a table shows what a terminal would act on (a carriage return rewrote the row, U+202E reversed it)
    table = render(cols, rows, "table").splitlines()
    assert table[2].split(" │ ")[4].rstrip() == r"x\r\ny\u0000\u202ez"
