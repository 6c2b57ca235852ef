"""The Android section of `worldline report`: sessions per app and device, outcomes, actions.

A function of a DuckDB connection over the corpus views, like the other entries of
`pipelines.report.SECTIONS`."""

from __future__ import annotations

import duckdb

from collectors.android.collect import SOURCE_FORMAT
from pipelines.report_html import query_bars, query_table, table_html

_ANDROID = f"source_format = '{SOURCE_FORMAT}'"


def section_android(con: duckdb.DuckDBPyConnection) -> str:
    """Android recording: sessions per app and device, how they ended, error turns, screens unchanged."""
    n = con.sql(f"SELECT count(*) FROM trajectories WHERE {_ANDROID}").fetchall()[0][0]
    if not n:
        return f"<h2>Android recording</h2><p class=empty>no {SOURCE_FORMAT} trajectories in this corpus</p>"
    turns = f"(SELECT u.* FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.{_ANDROID})"
    cols, rows = query_table(con, f"""
        SELECT json_extract_string(t.metadata, '$.spec') AS app, json_extract_string(t.metadata, '$.device') AS device,
               count(DISTINCT t.trajectory_id) AS sessions, count(u.turn_index) AS turns,
               count(u.turn_index) FILTER (WHERE u.is_error) AS error_turns,
               count(u.turn_index) FILTER (WHERE json_extract(u.metadata, '$.unchanged')::BOOLEAN) AS unchanged_screens,
               round(median(u.duration_s), 3) AS median_action_s,
               round(avg(length(u.observation))) AS mean_tree_chars
        FROM trajectories t LEFT JOIN turns u USING (trajectory_id) WHERE t.{_ANDROID}
        GROUP BY 1, 2 ORDER BY 1, 2""")
    return (
        "<h2>Android recording</h2>"
        f"<p>{n:,} sessions recorded on Android devices through adb (source format <code>{SOURCE_FORMAT}</code>): "
        "actions on the [index] of a view, the screen's view hierarchy after each action as the observation.</p>"
        + table_html(cols, rows)
        + query_bars(con, "Sessions by outcome", f"SELECT outcome, count(*) FROM trajectories WHERE {_ANDROID} GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Actions", f"SELECT tool_name, count(*) FROM {turns} GROUP BY 1 ORDER BY 2 DESC")
    )
