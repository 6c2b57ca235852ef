"""`worldline stats`: the counts a person checks first, computed by DuckDB over the views."""

from __future__ import annotations

from pathlib import Path

from pipelines.query import connect, render


def corpus_stats(corpus_dir: Path | str) -> dict[str, tuple[list[str], list[tuple]]]:
    con = connect(corpus_dir)
    queries = {
        "by domain and source": """
            SELECT t.domain, t.source_format, count(*) AS trajectories, sum(t.num_turns) AS turns,
                   round(avg(t.num_turns), 1) AS turns_per_traj
            FROM trajectories t GROUP BY ALL ORDER BY ALL""",
        "turns per trajectory": """
            SELECT domain, min(num_turns) AS min, quantile_disc(num_turns, 0.5) AS p50,
                   quantile_disc(num_turns, 0.9) AS p90, max(num_turns) AS max
            FROM trajectories GROUP BY ALL ORDER BY ALL""",
        "observation length (chars)": """
            SELECT domain, quantile_disc(length(observation), 0.5) AS p50,
                   quantile_disc(length(observation), 0.9) AS p90, max(length(observation)) AS max,
                   sum(length(observation)) AS total
            FROM turns WHERE observation IS NOT NULL GROUP BY ALL ORDER BY ALL""",
        "errors": """
            SELECT domain, count(*) AS turns,
                   count(*) FILTER (WHERE is_error) AS error_turns,
                   round(100.0 * count(*) FILTER (WHERE is_error) / count(*), 1) AS error_pct,
                   count(*) FILTER (WHERE exit_code IS NOT NULL AND exit_code <> 0) AS nonzero_exit,
                   count(*) FILTER (WHERE kind <> 'env') AS context_turns
            FROM turns GROUP BY ALL ORDER BY ALL""",
        "quarantine": """
            SELECT reason, count(*) AS records,
                   round(100.0 * count(*) / ((SELECT count(*) FROM trajectories) + (SELECT count(*) FROM quarantine)), 1)
                     AS pct_of_records
            FROM quarantine GROUP BY ALL ORDER BY records DESC""",
    }
    out = {}
    for title, sql in queries.items():
        rel = con.sql(sql)
        out[title] = (list(rel.columns), rel.fetchall())
    return out


def render_stats(corpus_dir: Path | str) -> str:
    parts = []
    for title, (cols, rows) in corpus_stats(corpus_dir).items():
        parts.append(f"── {title} ──\n{render(cols, rows)}")
    return "\n\n".join(parts)


def ingest_overview(corpus_dir: Path | str, sources: list[str], examples: int = 5) -> dict[str, tuple[list[str], list[tuple]]]:
    """What one ingest run added (by the `source` paths it read): counts per domain and source,
    quarantine reasons and example turns — the run metadata shown in the Dagster UI."""
    con = connect(corpus_dir)
    con.execute("CREATE OR REPLACE TEMP TABLE _run_sources AS SELECT unnest(?::VARCHAR[]) AS source", [sources])
    # archive members are stored as `archive!member`
    match = "(t.source IN (SELECT source FROM _run_sources) OR split_part(t.source, '!', 1) IN (SELECT source FROM _run_sources))"
    queries = {
        "by_domain_source": f"""SELECT t.domain, t.source_format, count(*) AS trajectories, sum(t.num_turns) AS turns
                               FROM trajectories t WHERE {match} GROUP BY ALL ORDER BY ALL""",
        "quarantine_reasons": f"""SELECT t.reason, count(*) AS records, any_value(t.detail) AS example
                                 FROM quarantine t WHERE {match} GROUP BY ALL ORDER BY records DESC""",
        "example_turns": f"""SELECT u.trajectory_id, u.turn_index, u.domain, left(u.action, 80) AS action,
                                    left(u.observation, 120) AS observation, u.exit_code
                             FROM turns u JOIN trajectories t USING (trajectory_id)
                             WHERE {match} AND u.kind = 'env' ORDER BY hash(u.trajectory_id, u.turn_index) LIMIT {int(examples)}""",
    }
    out = {}
    for name, sql in queries.items():
        rel = con.sql(sql)
        out[name] = (list(rel.columns), rel.fetchall())
    return out
