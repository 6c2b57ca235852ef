"""Report sections for cleaning and dedup (`pipelines.report.SECTIONS`).

Register with `SECTIONS += [section_cleaning, section_dedup]` in `pipelines/report.py`. Each is
a function of a DuckDB connection over the corpus views; a section whose side tables do not
exist yet says which command makes them.
"""

from __future__ import annotations

import duckdb

from pipelines.query import views
from pipelines.report_html import query_bars, query_table, table_html
from pipelines.views import duplicates_left_out


def section_cleaning(con: duckdb.DuckDBPyConnection) -> str:
    have = views(con)
    if "cleaning" not in have:
        return "<h2>Cleaning</h2><p class=empty>no cleaning verdicts yet: run <code>worldline clean CORPUS</code></p>"
    out = ["<h2>Cleaning</h2>"]
    out.append(query_bars(con, "Trajectories dropped whole, by reason", """
        SELECT reason, count(DISTINCT trajectory_id) FROM cleaning WHERE turn_index IS NULL GROUP BY 1 ORDER BY 2 DESC"""))
    out.append(query_bars(con, "Turns skipped in kept trajectories, by reason", """
        SELECT reason, count(*) FROM cleaning WHERE turn_index IS NOT NULL GROUP BY 1 ORDER BY 2 DESC"""))
    out.append(query_bars(con, "Kept trajectories per domain (% of the domain)", """
        SELECT t.domain, round(100.0 * count(*) FILTER (WHERE c.trajectory_id IS NULL) / count(*), 1)
        FROM trajectories t LEFT JOIN (SELECT DISTINCT trajectory_id FROM cleaning WHERE turn_index IS NULL) c USING (trajectory_id)
        GROUP BY 1 ORDER BY 2 DESC""", "%"))
    if "redactions" in have:
        out.append(query_bars(con, "Secrets and PII that export redacts, by kind", "SELECT kind, sum(count) FROM redactions GROUP BY 1 ORDER BY 2 DESC"))
    if "contamination" in have:
        cols, rows = query_table(con, """SELECT eval_id, field, count(*) AS trajectories, round(max(overlap), 3) AS max_overlap
                                   FROM contamination GROUP BY 1, 2 ORDER BY 3 DESC, 1 LIMIT 50""")
        out.append("<h3>Evaluation items found in the corpus</h3>" + table_html(cols, rows))
    return "".join(out)


def section_dedup(con: duckdb.DuckDBPyConnection) -> str:
    have = views(con)
    if "duplicates" not in have:
        return "<h2>Duplicates</h2><p class=empty>no dedup clusters yet: run <code>worldline dedup CORPUS</code></p>"
    # what the kept views leave out (`views.duplicates_left_out`): with cleaning, one member per cluster stays
    # even when cleaning dropped dedup's representative (dedup before clean, or --ignore-cleaning)
    left_out = duplicates_left_out(have)
    out = ["<h2>Duplicates</h2>"]
    out.append(query_bars(con, "Duplicates dropped, by kind", f"""
        SELECT kind, count(*) FROM duplicates SEMI JOIN ({left_out}) x USING (trajectory_id) GROUP BY 1 ORDER BY 2 DESC"""))
    out.append(query_bars(con, "Clusters by size", """
        SELECT CASE WHEN n = 2 THEN '2' WHEN n <= 4 THEN '3-4' WHEN n <= 9 THEN '5-9' WHEN n <= 99 THEN '10-99' ELSE '100+' END,
               count(*) FROM (SELECT cluster_id, any_value(cluster_size) AS n FROM duplicates GROUP BY 1) GROUP BY 1 ORDER BY min(n)"""))
    out.append(query_bars(con, "Duplicates per domain (% of the domain's trajectories)", f"""
        SELECT t.domain, round(100.0 * count(d.trajectory_id) / count(*), 1)
        FROM trajectories t LEFT JOIN ({left_out}) d USING (trajectory_id)
        GROUP BY 1 ORDER BY 2 DESC""", "%"))
    if "shared_prefixes" in have:
        out.append(query_bars(con, "Turns in shared prefixes (counted for training once)", """
            SELECT CASE WHEN counts_for_training THEN 'counted (owner)' ELSE 'context only' END, count(*)
            FROM shared_prefixes GROUP BY 1 ORDER BY 1"""))
    # the member the kept views keep (they leave the other members out; none when cleaning dropped them all),
    # not dedup's own choice
    cols, rows = query_table(con, """
        SELECT d.cluster_id, any_value(d.cluster_size) AS size,
               min(d.trajectory_id) FILTER (WHERE d.trajectory_id IN (SELECT trajectory_id FROM kept_trajectories)) AS kept,
               string_agg(DISTINCT d.kind, ',') AS kinds, any_value(t.domain) AS domain
        FROM duplicates d JOIN trajectories t USING (trajectory_id) GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20""")
    out.append("<h3>Largest clusters</h3>" + table_html(cols, rows))
    return "".join(out)
