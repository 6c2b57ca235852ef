"""The MCP section of `worldline report`: sessions per server, outcomes, injected faults, latency.

A function of a DuckDB connection over the corpus views, like the other entries of
`pipelines.report.SECTIONS`; the report helpers come from `pipelines.report_html`.
"""

from __future__ import annotations

import html

import duckdb

from pipelines.report_html import query_bars, query_table, table_html

_MCP = "source_format = 'mcp-live'"


def section_mcp(con: duckdb.DuckDBPyConnection) -> str:
    """MCP recording: what was recorded, how sessions ended, which faults were injected and their effect."""
    n = con.sql(f"SELECT count(*) FROM trajectories WHERE {_MCP}").fetchall()[0][0]
    if not n:
        return "<h2>MCP recording</h2><p class=empty>no mcp-live trajectories in this corpus</p>"
    turns = f"(SELECT u.* FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.{_MCP})"
    cols, rows = query_table(con, f"""
        SELECT json_extract_string(t.metadata, '$.server') AS server,
               any_value(json_extract_string(t.env_fingerprint, '$.server_name') || ' ' ||
                         json_extract_string(t.env_fingerprint, '$.server_version')) AS server_info,
               any_value(json_extract_string(t.env_fingerprint, '$.transport')) AS transport,
               count(DISTINCT t.trajectory_id) AS sessions, count(u.turn_index) AS turns,
               count(u.turn_index) FILTER (WHERE u.is_error) AS error_turns,
               count(DISTINCT json_extract_string(t.env_fingerprint, '$.tool_schema_sha256')) AS tool_schema_versions
        FROM trajectories t LEFT JOIN turns u USING (trajectory_id) WHERE t.{_MCP}
        GROUP BY 1 ORDER BY 1""")
    fcols, frows = query_table(con, f"""
        SELECT coalesce(perturbation, 'none') AS fault, count(*) AS turns,
               round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 1) AS error_pct,
               round(median(duration_s), 4) AS median_latency_s,
               count(*) FILTER (WHERE json_exists(metadata, '$.client_error')) AS rejected_by_client
        FROM {turns} GROUP BY 1 ORDER BY 1""")
    return (
        "<h2>MCP recording</h2>"
        f"<p>{n:,} sessions recorded live from MCP servers (source format <code>mcp-live</code>); raw JSON-RPC in "
        f"<code>side/mcp_raw</code>.</p>"
        + table_html(cols, rows)
        + query_bars(con, "Sessions by outcome", f"SELECT outcome, count(*) FROM trajectories WHERE {_MCP} GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Turns by injected fault", f"SELECT coalesce(perturbation, 'none'), count(*) FROM {turns} GROUP BY 1 ORDER BY 2 DESC")
        + "<h3>Effect of each fault</h3>" + table_html(fcols, frows)
        + query_bars(con, "Median latency per tool (ms)", f"""
            SELECT tool_name, round(1000 * median(duration_s), 2) FROM {turns}
            WHERE perturbation IS NULL AND tool_name IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 15""", " ms")
        + query_bars(con, "Calls per tool", f"SELECT tool_name, count(*) FROM {turns} WHERE tool_name IS NOT NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 15")
        + f"<p class=note>{html.escape('In-band tool errors are tool_result observations with isError; protocol errors (JSON-RPC error, timeout, closed connection) are error observations.')}</p>"
    )
