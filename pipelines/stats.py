"""`worldline stats`: the counts a person checks first, computed by DuckDB over the views."""

from __future__ import annotations

from pathlib import Path

import duckdb

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


def ingest_overview(corpus_dir: Path | str, batch_id: str | None, examples: int = 5) -> dict[str, tuple[list[str], list[tuple]]]:
    """What one ingest run added (its batch's own Parquet parts, so neither earlier runs' rows of the
    same inputs nor another path's): counts per domain and source, quarantine reasons and example
    turns — the run metadata shown in the Dagster UI. No batch (nothing new): no rows."""
    from pipelines.store import Corpus

    files: dict[str, list[str]] = {"trajectories": [], "turns": [], "quarantine": []}
    if batch_id is not None:
        corpus = Corpus(corpus_dir)
        for b in corpus.manifest()["batches"]:
            if b["id"] == batch_id:
                for f in b["files"]:
                    if f["table"] in files:
                        files[f["table"]].append(str(corpus.root / f["path"]))
    queries = {
        "by_domain_source": ("trajectories", """SELECT domain, source_format, count(*) AS trajectories, sum(num_turns) AS turns
                                               FROM {} GROUP BY ALL ORDER BY ALL"""),
        "quarantine_reasons": ("quarantine", """SELECT reason, count(*) AS records, any_value(detail) AS example
                                               FROM {} GROUP BY ALL ORDER BY records DESC"""),
        "example_turns": ("turns", f"""SELECT trajectory_id, turn_index, domain, left(action, 80) AS action,
                                         left(observation, 120) AS observation, exit_code
                                  FROM {{}} WHERE kind = 'env' ORDER BY hash(trajectory_id, turn_index) LIMIT {int(examples)}"""),
    }
    con = duckdb.connect()
    out = {}
    for name, (table, sql) in queries.items():
        if files[table]:
            rel = con.read_parquet(files[table]).query("part", sql.format("part"))
            out[name] = (list(rel.columns), rel.fetchall())
        else:  # the batch wrote no such part (or there is no batch)
            out[name] = (OVERVIEW_COLUMNS[name], [])
    return out


OVERVIEW_COLUMNS = {"by_domain_source": ["domain", "source_format", "trajectories", "turns"],
                    "quarantine_reasons": ["reason", "records", "example"],
                    "example_turns": ["trajectory_id", "turn_index", "domain", "action", "observation", "exit_code"]}
