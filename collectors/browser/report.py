"""The browser section of `worldline report`: sessions per site, outcomes, injected faults, actions.

A function of a DuckDB connection over the corpus views, like the other entries of
`pipelines.report.SECTIONS`."""

from __future__ import annotations

import duckdb

from collectors.browser.collect import SOURCE_FORMAT
from pipelines.report_html import query_bars, query_table, table_html

_BROWSER = f"source_format = '{SOURCE_FORMAT}'"


def section_browser(con: duckdb.DuckDBPyConnection) -> str:
    """Browser recording: sessions per site and browser, how they ended, error turns, injected faults."""
    n = con.sql(f"SELECT count(*) FROM trajectories WHERE {_BROWSER}").fetchall()[0][0]
    if not n:
        return f"<h2>Browser recording</h2><p class=empty>no {SOURCE_FORMAT} trajectories in this corpus</p>"
    turns = f"(SELECT u.* FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.{_BROWSER})"
    cols, rows = query_table(con, f"""
        SELECT json_extract_string(t.metadata, '$.spec') AS site,
               any_value(json_extract_string(t.env_fingerprint, '$.browser')) AS browser,
               count(DISTINCT t.trajectory_id) AS sessions, count(u.turn_index) AS turns,
               count(u.turn_index) FILTER (WHERE u.is_error) AS error_turns,
               round(median(u.duration_s), 3) AS median_action_s,
               round(avg(length(u.observation))) AS mean_tree_chars
        FROM trajectories t LEFT JOIN turns u USING (trajectory_id) WHERE t.{_BROWSER}
        GROUP BY 1 ORDER BY 1""")
    return (
        "<h2>Browser recording</h2>"
        f"<p>{n:,} sessions recorded in headless chromium (source format <code>{SOURCE_FORMAT}</code>): "
        "actions on the refs of the accessibility tree, the tree after each action as the observation.</p>"
        + table_html(cols, rows)
        + query_bars(con, "Sessions by outcome", f"SELECT outcome, count(*) FROM trajectories WHERE {_BROWSER} GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Turns by injected fault", f"SELECT coalesce(perturbation, 'none'), count(*) FROM {turns} GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Actions", f"SELECT tool_name, count(*) FROM {turns} GROUP BY 1 ORDER BY 2 DESC")
    )
