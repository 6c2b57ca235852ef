"""The corpus report's export section: what the last `worldline export` took from this corpus.

It reads the side table `export_assignments` that the export writes back into the corpus (one row
per exported trajectory: split, copies after the mixture weights, documents, tokens and loss
tokens per copy), so it needs nothing but the corpus. Add `section_export` to
`pipelines.report.SECTIONS`.
"""

from __future__ import annotations

import duckdb

from pipelines.query import views
from pipelines.report_html import query_bars, query_table, table_html


def section_export(con: duckdb.DuckDBPyConnection) -> str:

    have = views(con)
    if "export_assignments" not in have:
        return "<h2>Export mix</h2><p class=empty>no export recorded for this corpus: run <code>worldline export</code></p>"
    cols, rows = query_table(con, """
        SELECT * FROM (
            SELECT split, domain, source_format, count(*) AS trajectories, sum(copies) AS copies,
                   sum(copies * documents) AS documents, sum(copies * tokens) AS tokens,
                   sum(copies * loss_tokens) AS loss_tokens,
                   round(100.0 * (1 - sum(copies * loss_tokens) / nullif(sum(copies * tokens), 0)), 1) AS masked_pct
            FROM export_assignments GROUP BY ALL)
        ORDER BY array_position(['train', 'validation', 'test'], split), tokens DESC""")
    return (
        "<h2>Export mix</h2>"
        "<p class=note>Tokens as exported (after the mixture weights: a trajectory's documents times its copies); "
        "natural = one copy of each. Splits are by task, so no task is in two splits.</p>"
        + query_bars(con, "Train tokens per domain (realised mix)", """
            SELECT domain, sum(copies * tokens) FROM export_assignments WHERE split = 'train' GROUP BY 1 ORDER BY 2 DESC""")
        + query_bars(con, "Train tokens per domain (natural mix)", """
            SELECT domain, sum(tokens) FROM export_assignments WHERE split = 'train' GROUP BY 1 ORDER BY 2 DESC""")
        + query_bars(con, "Train tokens per source format (realised)", """
            SELECT source_format, sum(copies * tokens) FROM export_assignments WHERE split = 'train' GROUP BY 1 ORDER BY 2 DESC""")
        + query_bars(con, "Tokens per split", """
            SELECT * FROM (SELECT split, sum(copies * tokens) AS n FROM export_assignments GROUP BY 1)
            ORDER BY array_position(['train', 'validation', 'test'], split)""")
        + query_bars(con, "Masked-token fraction per split (% of tokens without loss)", """
            SELECT * FROM (SELECT split, round(100.0 * (1 - sum(copies * loss_tokens) / nullif(sum(copies * tokens), 0)), 1) AS pct
                           FROM export_assignments GROUP BY 1)
            ORDER BY array_position(['train', 'validation', 'test'], split)""", "%")
        + table_html(cols, rows)
    )
