"""The corpus report's scoring section: categories and keep rates, loss-mask rates per domain, and
the distributions of the surface and model scores. An entry of `pipelines.report.SECTIONS`; the
report helpers come from `pipelines.report_html`."""

from __future__ import annotations

import duckdb

from pipelines.query import views
from pipelines.report_html import query_bars, query_table, table_html


def _bucket_sql(col: str, edges: list[float]) -> str:
    """CASE expression labelling `col` by the half-open bins between `edges` (last bin open)."""
    parts = [f"WHEN {col} < {edges[0]} THEN '< {edges[0]:g}'"]
    for lo, hi in zip(edges, edges[1:], strict=False):
        parts.append(f"WHEN {col} < {hi} THEN '{lo:g}–{hi:g}'")
    parts.append(f"ELSE '≥ {edges[-1]:g}'")
    return "CASE " + " ".join(parts) + " END"


def _hist(con: duckdb.DuckDBPyConnection, title: str, col: str, edges: list[float], where: str) -> str:
    b = _bucket_sql(col, edges)
    return query_bars(con, title, f"""SELECT {b} AS bin, count(*) FROM turn_scores WHERE {col} IS NOT NULL AND {where}
                                 GROUP BY 1 ORDER BY min({col})""")


def section_scores(con: duckdb.DuckDBPyConnection) -> str:
    """Turn scores and loss masks: categories, keep and loss rates, score distributions."""
    if "turn_scores" not in views(con):
        return "<h2>Turn scores and loss masks</h2><p class=empty>not scored yet: <code>worldline score CORPUS</code></p>"
    cols, rows = query_table(con, """
        SELECT category, count(*) AS turns, sum(keep::INT) AS kept, sum(loss_mask::INT) AS loss_on,
               round(avg(novelty), 3) AS novelty, round(avg(overlap), 3) AS overlap,
               count(cond_nll) AS model_scored, round(avg(cond_nll), 3) AS cond_nll, round(avg(uncond_nll), 3) AS uncond_nll,
               round(avg(info_gain), 3) AS info_gain, round(median(ifd), 3) AS median_ifd
        FROM turn_scores GROUP BY 1 ORDER BY turns DESC""")
    n_model = con.sql("SELECT count(cond_nll), count(*) FROM turn_scores").fetchall()[0]
    html = (
        "<h2>Turn scores and loss masks</h2>"
        f"<p class=note>{n_model[0]:,} of {n_model[1]:,} turns have model-tier scores "
        "(nats per token; info_gain = uncond − cond; ifd = cond / uncond).</p>"
        + query_bars(con, "Turns per surface category", "SELECT category, count(*) FROM turn_scores GROUP BY 1 ORDER BY 2 DESC")
        + query_bars(con, "Loss on (% of turns) per category", """
            SELECT category, round(100.0 * sum(loss_mask::INT) / count(*), 1) FROM turn_scores GROUP BY 1 ORDER BY 2 DESC""", "%")
        + query_bars(con, "Loss on (% of turns) per domain", """
            SELECT domain, round(100.0 * sum(loss_mask::INT) / count(*), 1) FROM turn_scores GROUP BY 1 ORDER BY 2 DESC""", "%")
        + query_bars(con, "Masked observation tokens (% of model-scored tokens) per domain", """
            SELECT domain, round(100.0 * sum(tokens) FILTER (WHERE NOT loss_mask) / sum(tokens), 1) FROM turn_scores
            WHERE tokens IS NOT NULL GROUP BY 1 ORDER BY 2 DESC""", "%")
        + _hist(con, "Novelty (surface)", "novelty", [0.2, 0.4, 0.6, 0.8], "category <> 'context'")
        + _hist(con, "Overlap (surface)", "overlap", [0.2, 0.4, 0.6, 0.8], "category <> 'context'")
    )
    if n_model[0]:
        html += (
            _hist(con, "Conditional NLL (nats/token)", "cond_nll", [0.5, 1, 2, 3, 4, 6], "true")
            + _hist(con, "Information gain (nats/token)", "info_gain", [0, 0.25, 0.5, 1, 2, 4], "true")
            + _hist(con, "IFD (cond / uncond)", "ifd", [0.1, 0.25, 0.5, 0.75, 1, 1.25], "true")
        )
    return html + table_html(cols, rows)
