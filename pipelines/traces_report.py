"""Thinking-trace plots for `worldline report`: retention per domain and per source, the best-score
distribution and why candidates were rejected, from the corpus side table `traces` (one row per
query of the last `worldline traces` run). Add `section_traces` to `pipelines.report.SECTIONS`.
"""

from __future__ import annotations

import html
from collections import Counter

import duckdb
import orjson

from pipelines.query import views
from pipelines.report_html import bar_chart, query_bars, query_table, table_html


def section_traces(con: duckdb.DuckDBPyConnection) -> str:
    head = "<h2>Thinking traces</h2>"
    if "traces" not in views(con):
        return head + "<p class=empty>no thinking traces yet (<code>worldline traces CORPUS --out DIR ...</code>)</p>"
    cols, rows = query_table(con, """
        SELECT domain, count(*) AS queries, count(*) FILTER (WHERE kept) AS kept,
               round(100.0 * count(*) FILTER (WHERE kept) / count(*), 1) AS "retention %",
               sum(candidates) AS candidates, sum(parsed) AS parsed,
               round(quantile_disc(best_score, 0.5), 3) AS "best p50", any_value(threshold) AS threshold
        FROM traces GROUP BY 1 ORDER BY 1""")
    reasons: Counter[str] = Counter()
    for (doc,) in con.sql("SELECT reject_reasons FROM traces WHERE reject_reasons IS NOT NULL").fetchall():
        reasons.update(orjson.loads(doc))
    top = reasons.most_common()
    return (
        head
        + query_bars(con, "Retention per domain (% of queries with a kept trace)", """
            SELECT domain, round(100.0 * count(*) FILTER (WHERE kept) / count(*), 1) FROM traces GROUP BY 1 ORDER BY 1""", "%")
        + query_bars(con, "Retention per source format (%)", """
            SELECT source_format, round(100.0 * count(*) FILTER (WHERE kept) / count(*), 1) FROM traces GROUP BY 1 ORDER BY 1""", "%")
        + query_bars(con, "Best candidate score per query (queries with a parsed candidate)", """
            SELECT CASE WHEN best_score < 0.2 THEN '[0, 0.2)' WHEN best_score < 0.4 THEN '[0.2, 0.4)'
                        WHEN best_score < 0.6 THEN '[0.4, 0.6)' WHEN best_score < 0.8 THEN '[0.6, 0.8)' ELSE '[0.8, 1]' END,
                   count(*) FROM traces WHERE best_score IS NOT NULL GROUP BY 1 ORDER BY min(best_score)""")
        + bar_chart("Rejected candidates by reason", [r for r, _ in top], [float(n) for _, n in top])
        + table_html(cols, rows)
        + f"<p class=note>generator: {html.escape(', '.join(r[0] for r in con.sql('SELECT DISTINCT generator FROM traces ORDER BY 1').fetchall()))}</p>"
    )
