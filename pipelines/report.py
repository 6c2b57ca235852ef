"""`worldline report`: one self-contained HTML page (inline SVG, no scripts, no network).

The page is a list of sections; each section is a function of a DuckDB connection over the
corpus views, listed in `SECTIONS` (each stage keeps its own in a `*_report` module; the HTML
helpers they share are in `pipelines.report_html`).
"""

from __future__ import annotations

import datetime as dt
import html
import os
from collections.abc import Callable
from pathlib import Path

import duckdb

from collectors.android.report import section_android
from collectors.browser.report import section_browser
from collectors.mcp_report import section_mcp
from pipelines.dedup_report import section_cleaning, section_dedup
from pipelines.export_report import section_export
from pipelines.query import connect
from pipelines.report_html import REPORT_TITLE, is_report_file, query_bars, query_table, table_html
from pipelines.score_report import section_scores
from pipelines.store import Corpus, CorpusError, holds_worldline_data, refuse_output_in_corpus
from pipelines.traces_report import section_traces
from sandboxes.report import section_sandbox


def section_mix(con: duckdb.DuckDBPyConnection) -> str:
    cols, rows = query_table(con, """SELECT domain, source_format, count(*) AS trajectories, sum(num_turns) AS turns
                               FROM trajectories GROUP BY ALL ORDER BY ALL""")
    return (
        "<h2>Domain and source mix</h2>"
        + query_bars(con, "Trajectories per domain", "SELECT domain, count(*) FROM trajectories GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Turns per source format", "SELECT source_format, sum(num_turns) FROM trajectories GROUP BY 1 ORDER BY 2 DESC")
        + table_html(cols, rows)
    )


def section_lengths(con: duckdb.DuckDBPyConnection) -> str:
    return (
        "<h2>Lengths</h2>"
        + query_bars(con, "Trajectories by number of turns", """
            SELECT CASE WHEN num_turns < 2 THEN '0-1' WHEN num_turns < 5 THEN '2-4' WHEN num_turns < 10 THEN '5-9'
                        WHEN num_turns < 20 THEN '10-19' WHEN num_turns < 50 THEN '20-49' ELSE '50+' END AS bucket,
                   count(*) FROM trajectories GROUP BY 1
            ORDER BY min(num_turns)""")
        + query_bars(con, "Median observation length (characters) per domain", """
            SELECT domain, quantile_disc(length(observation), 0.5) FROM turns
            WHERE observation IS NOT NULL GROUP BY 1 ORDER BY 2 DESC""")
        + query_bars(con, "Observations by length (characters)", """
            SELECT CASE WHEN n < 100 THEN '<100' WHEN n < 1000 THEN '100-999' WHEN n < 10000 THEN '1k-10k'
                        WHEN n < 100000 THEN '10k-100k' ELSE '100k+' END, count(*)
            FROM (SELECT length(observation) AS n FROM turns WHERE observation IS NOT NULL)
            GROUP BY 1 ORDER BY min(n)""")
    )


def section_errors(con: duckdb.DuckDBPyConnection) -> str:
    cols, rows = query_table(con, "SELECT source, locator, reason, detail FROM quarantine ORDER BY source, locator LIMIT 50")
    total = con.sql("SELECT count(*) FROM quarantine").fetchall()[0][0]
    return (
        "<h2>Errors and quarantine</h2>"
        + query_bars(con, "Error rate per domain (% of turns with is_error)", """
            SELECT domain, round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 2) FROM turns GROUP BY 1 ORDER BY 2 DESC""", "%")
        + query_bars(con, "Exit codes (shell turns)", """
            SELECT exit_code::VARCHAR, count(*) FROM turns WHERE exit_code IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 12""")
        + query_bars(con, "Quarantined records by reason", "SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Quarantine rate (% of records in)", """
            SELECT 'all', round(100.0 * (SELECT count(*) FROM quarantine) /
                   nullif((SELECT count(*) FROM trajectories) + (SELECT count(*) FROM quarantine), 0), 2)""", "%")
        + "<h3>Quarantined records</h3>"
        + table_html(cols, rows, total=total)
    )


SECTIONS: list[Callable[[duckdb.DuckDBPyConnection], str]] = [
    section_mix, section_lengths, section_errors, section_mcp, section_sandbox, section_browser, section_android,
    section_cleaning, section_dedup, section_scores, section_export, section_traces]

_CSS = """body{font:14px system-ui,sans-serif;margin:2em auto;max-width:980px;color:#222}
h1{font-size:22px}h2{margin-top:2em;border-bottom:1px solid #ddd}figure{margin:1em 0}
figcaption{font-weight:600;margin-bottom:4px}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}.note,.empty{color:#777}"""


def _section(section: Callable[[duckdb.DuckDBPyConnection], str], con: duckdb.DuckDBPyConnection) -> str:
    """One section; a table it cannot read (a damaged side table) is said there, and the rest of the
    report is still written."""
    try:
        return section(con)
    except duckdb.Error as e:
        what = section.__name__.removeprefix("section_").replace("_", " ")
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return f"<h2>{html.escape(what.capitalize())}</h2><p class=note>not shown: {html.escape(reason)}</p>"


def build_report(corpus_dir: Path | str) -> str:
    corpus = Corpus(corpus_dir)
    con = connect(corpus.root)
    m = corpus.manifest()
    n_traj = con.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    n_turns = con.sql("SELECT count(*) FROM turns").fetchall()[0][0]
    n_q = con.sql("SELECT count(*) FROM quarantine").fetchall()[0][0]
    head = (
        f"<h1>Worldline corpus report</h1><p><code>{html.escape(str(corpus.root))}</code> · "
        f"{n_traj:,} trajectories · {n_turns:,} turns · {n_q:,} quarantined · {len(m['inputs'])} inputs · "
        f"{len(m['batches'])} batches · schema {html.escape(str(m.get('schema_version')))} · "
        f"generated {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}</p>"
    )
    body = "".join(_section(section, con) for section in SECTIONS)
    # the title tells ingest the file is this report, if it lies in an input folder (`is_corpus_report`)
    return f"<!doctype html><html><head><meta charset=utf-8>{REPORT_TITLE}<style>{_CSS}</style></head><body>{head}{body}</body></html>"


def _refuse_foreign_target(out: Path) -> None:
    """`--out` inside another corpus (or an export's, the traces stage's output) replaced its files (a
    corpus's manifest.json: the corpus was unreadable from then on); an existing file that is no report (a
    trace input) was overwritten."""
    for parent in out.resolve().parents:
        if holds_worldline_data(parent):
            raise CorpusError(f"report --out {out} is inside {parent}, a corpus or a stage's output; write it elsewhere")
    if (out.exists() or out.is_symlink()) and not is_report_file(out):  # a pipe is no report (opening one blocked)
        raise CorpusError(f"report --out {out} exists and is no Worldline report; give a new file name or a folder")


def write_report(corpus_dir: Path | str, out: Path | str | None = None) -> Path:
    """Write the report to `out` (a file, or a directory to hold `report.html`: one that exists, or a name
    ending in `/`; default: `report.html` beside the corpus), never into the corpus."""
    folder = isinstance(out, str) and out.endswith(("/", os.sep))  # `reports/`: a folder, made if missing
    out = Path(corpus_dir).resolve().parent / "report.html" if out is None else Path(out)
    if folder or out.is_dir():
        out = out / "report.html"
    refuse_output_in_corpus(out, corpus_dir, "report --out")
    _refuse_foreign_target(out)
    html_text = build_report(corpus_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(html_text, encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
