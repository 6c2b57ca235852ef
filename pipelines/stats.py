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
