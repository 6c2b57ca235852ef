"""The sandbox section of `worldline report`: what was collected in Docker sandboxes and what each
injected perturbation did to it (exit codes, errors, timeouts, durations, outcomes).

A function of a DuckDB connection over the corpus views, like the other entries of
`pipelines.report.SECTIONS`; the report helpers come from `pipelines.report_html`.
"""

from __future__ import annotations

import duckdb

from pipelines.report_html import query_bars, query_table, table_html

_SB = "source_format = 'sandbox'"


def section_sandbox(con: duckdb.DuckDBPyConnection) -> str:
    """Sandbox collection: trajectories per domain and image, outcomes, and per perturbation the
    error/timeout rates, typical exit codes and durations next to the unperturbed baseline.

    Trajectories cut short by the collector (outcome `interrupted`: Ctrl-C, SIGTERM, the engine
    gone) are counted apart and left out of the success rates: a rerun collects those jobs anew."""
    n = con.sql(f"SELECT count(*) FROM trajectories WHERE {_SB}").fetchall()[0][0]
    if not n:
        return "<h2>Docker sandboxes</h2><p class=empty>no sandbox trajectories in this corpus</p>"
    turns = f"(SELECT u.* FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.{_SB})"
    cols, rows = query_table(con, f"""
        SELECT domain, json_extract_string(env_fingerprint, '$.recipe') AS image,
               json_extract_string(metadata, '$.policy') AS policy, count(*) AS trajectories,
               sum(num_turns) AS turns, count(*) FILTER (WHERE outcome = 'success') AS success,
               count(*) FILTER (WHERE outcome = 'failure') AS failure, count(*) FILTER (WHERE outcome = 'error') AS error,
               count(*) FILTER (WHERE outcome = 'interrupted') AS interrupted,
               round(median(CAST(json_extract(metadata, '$.seconds') AS DOUBLE)), 2) AS median_s
        FROM trajectories WHERE {_SB} GROUP BY ALL ORDER BY ALL""")
    pcols, prows = query_table(con, f"""
        SELECT coalesce(perturbation, 'none') AS perturbation, count(*) AS turns,
               round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 1) AS error_pct,
               count(*) FILTER (WHERE json_extract(metadata, '$.timed_out')::BOOLEAN) AS timeouts,
               string_agg(DISTINCT CAST(exit_code AS VARCHAR), ' ' ORDER BY CAST(exit_code AS VARCHAR)) AS exit_codes,
               round(median(duration_s), 3) AS median_s, round(max(duration_s), 2) AS max_s
        FROM {turns} GROUP BY 1 ORDER BY (coalesce(perturbation, 'none') != 'none'), 1""")
    ocols, orows = query_table(con, f"""
        SELECT coalesce(json_extract_string(metadata, '$.perturbation.name'), 'none') AS perturbation,
               count(*) AS trajectories,
               round(100.0 * count(*) FILTER (WHERE outcome = 'success')
                     / nullif(count(*) FILTER (WHERE outcome IS DISTINCT FROM 'interrupted'), 0), 1) AS success_pct,
               count(*) FILTER (WHERE outcome = 'error') AS ended_by_error,
               count(*) FILTER (WHERE outcome = 'interrupted') AS interrupted
        FROM trajectories WHERE {_SB} GROUP BY 1
        ORDER BY (coalesce(json_extract_string(metadata, '$.perturbation.name'), 'none') != 'none'), 1""")
    return (
        "<h2>Docker sandboxes</h2>"
        f"<p>{n:,} trajectories collected live in locked-down containers (source format <code>sandbox</code>): "
        "scripted task specs, replays of imported trajectories and agents behind an OpenAI-compatible endpoint.</p>"
        + table_html(cols, rows)
        + query_bars(con, "Task success rate per perturbation (%)", f"""
            SELECT coalesce(json_extract_string(metadata, '$.perturbation.name'), 'none'),
                   round(100.0 * count(*) FILTER (WHERE outcome = 'success') / count(*), 1)
            FROM trajectories WHERE {_SB} AND outcome IN ('success', 'failure', 'error') GROUP BY 1 ORDER BY 2 DESC""", "%")
        + query_bars(con, "Error turns per perturbation (%)", f"""
            SELECT coalesce(perturbation, 'none'), round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 1)
            FROM {turns} GROUP BY 1 ORDER BY 2 DESC""", "%")
        + "<h3>What each perturbation did to the turns</h3>" + table_html(pcols, prows)
        + "<h3>Outcomes per perturbation</h3>" + table_html(ocols, orows)
        + query_bars(con, "Median action duration per image (ms)", f"""
            SELECT json_extract_string(t.env_fingerprint, '$.recipe'), round(1000 * median(u.duration_s), 1)
            FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.{_SB} AND u.perturbation IS NULL
            GROUP BY 1 ORDER BY 2 DESC""", " ms")
    )
