"""`worldline`: the command line. Thin: every subcommand calls a core function.

Exit codes: 0 success; 1 failure (e.g. the corpus is locked, a path is missing);
2 usage error; 3 `ingest` finished but quarantined some input (the summary says what).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

EXIT_QUARANTINED = 3

# Modules that add subcommands: each has `register(subparsers, collect_subparsers)`.
EXTENSIONS = ["sandboxes.cli", "collectors.mcp_cli"]


def _cmd_ingest(a: argparse.Namespace) -> int:
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.sources import MiB, ReadLimits

    limits = ReadLimits(max_record_bytes=int(a.max_record_mb * MiB))
    cfg = IngestConfig(domain_override=a.domain, workers=a.workers, limits=limits)
    summary = ingest(a.paths, a.out, cfg, progress=not a.quiet, echo=lambda m: print(m, file=sys.stderr))
    print(summary.render())
    return EXIT_QUARANTINED if summary.quarantined else 0


def _cmd_query(a: argparse.Namespace) -> int:
    from pipelines.query import render, run_query

    cols, rows = run_query(a.corpus, a.sql)
    print(render(cols, rows, a.format))
    return 0


def _cmd_stats(a: argparse.Namespace) -> int:
    from pipelines.stats import render_stats

    print(render_stats(a.corpus))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from pipelines.contracts import run_contracts

    results = run_contracts(a.corpus, a.max_quarantine_rate)
    for r in results:
        print(r.line())
        if not r.passed:
            for k, v in r.metadata.items():
                if isinstance(v, list | dict) and v:
                    print(f"      {k}: {v}")
    return 0 if all(r.passed for r in results) else 1


def _cmd_report(a: argparse.Namespace) -> int:
    from pipelines.report import write_report

    out = write_report(a.corpus, a.out or Path(a.corpus).parent / "report.html")
    print(f"report: {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="worldline", description="Training data for language world models.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("ingest", help="import trace files, directories and archives into a corpus")
    s.add_argument("paths", nargs="+", type=Path, help="files, directories, .gz/.zst/.bz2/.xz files, tar archives")
    s.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    s.add_argument("--domain", help="domain for formats that do not state one (e.g. generic chat)")
    s.add_argument("--workers", type=int, default=0, help="processes (0: automatic)")
    s.add_argument("--max-record-mb", type=float, default=64.0, help="largest single record (JSON document or line)")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=_cmd_ingest)

    s = sub.add_parser("query", help="run SQL (DuckDB) over the corpus views")
    s.add_argument("corpus", type=Path)
    s.add_argument("sql")
    s.add_argument("--format", choices=["table", "csv", "json"], default="table")
    s.set_defaults(func=_cmd_query)

    s = sub.add_parser("stats", help="counts per domain and source, lengths, error and quarantine rates")
    s.add_argument("corpus", type=Path)
    s.set_defaults(func=_cmd_stats)

    s = sub.add_parser("check", help="data contracts: schema, counts, quarantine rate, unique ids, checksums")
    s.add_argument("corpus", type=Path)
    s.add_argument("--max-quarantine-rate", type=float, default=0.25)
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("report", help="write a self-contained HTML report of the corpus")
    s.add_argument("corpus", type=Path)
    s.add_argument("--out", type=Path, help="HTML file (default: report.html beside the corpus)")
    s.set_defaults(func=_cmd_report)

    collect = sub.add_parser("collect", help="record live trajectories (Docker sandboxes, MCP servers)")
    collect_sub = collect.add_subparsers(dest="collector", required=True)
    for module in EXTENSIONS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:  # an optional part not present in this checkout
            if e.name != module:
                raise
            continue
        mod.register(sub, collect_sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from pipelines.store import CorpusError, CorpusLocked

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CorpusLocked, CorpusError, FileNotFoundError, ValueError) as e:
        print(f"worldline {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"worldline {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
