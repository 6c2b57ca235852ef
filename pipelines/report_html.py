"""HTML pieces of the corpus report (charts, tables, query results): what every stage's report
section uses. Nothing here imports a section, so any section module can import it at its top."""

from __future__ import annotations

import html
from pathlib import Path

import duckdb

REPORT_TITLE = "<title>Worldline corpus report</title>"  # also how ingest knows a corpus's own report


def is_report_file(path: Path) -> bool:
    """Whether `path` is a file `worldline report` wrote (its title in the first 4 KiB); never opens what is
    no regular file (a pipe of that name would block)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return REPORT_TITLE.encode() in f.read(4096)
    except OSError:
        return False


PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]


def bar_chart(title: str, labels: list[str], values: list[float], unit: str = "", width: int = 640) -> str:
    """A horizontal bar chart as inline SVG."""
    if not labels:
        return f"<figure><figcaption>{html.escape(title)}</figcaption><p class=empty>no data</p></figure>"
    row, left = 22, max(60, min(260, 7 * max(len(str(label)) for label in labels) + 10))
    h = row * len(labels) + 10
    vmax = max(max(values), 1e-12)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" aria-label="{html.escape(title)}">']
    for i, (lab, v) in enumerate(zip(labels, values, strict=True)):
        y = 5 + i * row
        w = (width - left - 90) * (v / vmax)
        parts.append(f'<text x="{left - 6}" y="{y + 15}" text-anchor="end" font-size="12">{html.escape(str(lab))}</text>')
        parts.append(f'<rect x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 6}" fill="{PALETTE[i % len(PALETTE)]}"/>')
        txt = f"{v:,.0f}" if float(v).is_integer() else f"{v:,.2f}"
        parts.append(f'<text x="{left + w + 5:.1f}" y="{y + 15}" font-size="12">{txt}{html.escape(unit)}</text>')
    parts.append("</svg>")
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{''.join(parts)}</figure>"


def table_html(columns: list[str], rows: list[tuple], limit: int = 50, total: int | None = None) -> str:
    """The first `limit` rows; `total`: how many there are, when `rows` holds only the first of them."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape('NULL' if v is None else str(v)[:200])}</td>" for v in r) + "</tr>"
        for r in rows[:limit]
    )
    left = (len(rows) if total is None else total) - min(len(rows), limit)
    more = f"<p class=note>{left:,} more rows not shown</p>" if left > 0 else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def query_table(con: duckdb.DuckDBPyConnection, sql: str) -> tuple[list[str], list[tuple]]:
    rel = con.sql(sql)
    return list(rel.columns), rel.fetchall()


def query_bars(con: duckdb.DuckDBPyConnection, title: str, sql: str, unit: str = "") -> str:
    _, rows = query_table(con, sql)
    return bar_chart(title, [str(r[0]) for r in rows], [float(r[1] or 0) for r in rows], unit)
