"""Assets: each body calls the core (the same functions as the CLI) and returns metadata."""


import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from collectors.live import SessionSummary
from dagster_project.partitions import SOURCE_DAY
from dagster_project.resources import CorpusResource
from pipelines.inbox import inputs_for
from pipelines.report import write_report
from pipelines.shell import query_command
from pipelines.stats import ingest_overview
from pipelines.store import CorpusError

# Collection assets retry (transient I/O, a busy corpus lock); derived assets do not.
COLLECTION_RETRY = dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL)
# ... but not an error of the settings, which fails the same way every time
# (a corpus setting that names a file, a folder with data but no manifest, a folder inside a corpus: CorpusError;
# not CorpusLocked, a writer that finishes)
SETTINGS_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, ValueError, CorpusError)


@contextmanager
def no_retry_for_settings(kinds: tuple[type[BaseException], ...] = SETTINGS_ERRORS) -> Iterator[None]:
    """Errors of the settings (a missing spec file, a bad option, an unknown Beam runner) fail the
    step at once with their own message; the retry policy is for a busy lock and I/O (a missing
    spec was retried three times, 111 s, and reported as "Exceeded max_retries")."""
    try:
        yield
    except kinds as e:
        raise dg.Failure(description=f"{type(e).__name__}: {e}", allow_retries=False) from e


def _md_table(columns: list[str], rows: list[tuple]) -> dg.MetadataValue:
    if not rows:
        return dg.MetadataValue.md("_none_")
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")[:120]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return dg.MetadataValue.md("\n".join(lines))


def session_run_result(summary: SessionSummary, corpus_root: str | Path, seconds: float, what: str, columns: str,
                       **extra: object) -> dg.MaterializeResult:
    """The materialization of a run of a session collector (`collectors.live.SessionSummary`: the browser,
    Android): fails when every session failed; `columns` of its turns in the query the metadata offers."""
    if summary.sessions and summary.failed == summary.sessions:
        raise dg.Failure(description=f"every {what} session failed; first: {summary.failures[0]}",
                         metadata={"failures": dg.MetadataValue.json(summary.failures[:50])})
    query = query_command(corpus_root, f"SELECT t.native_id, u.turn_index, {columns} FROM turns u JOIN trajectories t "
                          f"USING (trajectory_id) WHERE t.source_format = '{summary.source_format}' "
                          f"AND t.native_id LIKE '%@{summary.run_id}' LIMIT 50")
    return dg.MaterializeResult(metadata={
        "run_id": summary.run_id, **extra,
        "sessions": summary.sessions,
        "turns": summary.turns,
        "error_turns": summary.error_turns,
        "failed_sessions": summary.failed,
        "seconds": round(seconds, 3),
        "outcomes": _md_table(["outcome", "sessions"], sorted(summary.outcomes.items())),
        "perturbations": _md_table(["perturbation", "turns"], sorted(summary.perturbations.items())),
        "failures": _md_table(["failure"], [(f,) for f in summary.failures[:20]]),
        "see_more": dg.MetadataValue.text(query),
        "corpus": dg.MetadataValue.path(str(corpus_root)),
    })


class IngestRunConfig(dg.Config):
    """`inputs`: the `path|signature` keys (`pipelines.inbox.InboxInput.key`) a sensor's run is for;
    empty (a manual run, a backfill, the schedule): every settled input of the partition."""

    inputs: list[str] = []


@dg.asset(
    partitions_def=SOURCE_DAY,
    retry_policy=COLLECTION_RETRY,
    group_name="ingestion",
    kinds={"python", "parquet"},
    description="Trace files and directories from `INBOX/{source}/` last modified on `{day}` (UTC), imported into the corpus.",
)
def ingested_traces(context: dg.AssetExecutionContext, corpus: CorpusResource,
                    config: IngestRunConfig) -> dg.MaterializeResult:
    keys = context.partition_key.keys_by_dimension
    source, day = keys["source"], keys["day"]
    def unwalked(src: str, e: OSError) -> None:  # as the sensor does: the inputs found before are ingested
        context.log.warning(f"inbox source {src} could not be walked to the end ({e}); the inputs found before "
                            "are ingested")
    offered = inputs_for(corpus.inbox_path, source, day, corpus.settle_seconds, on_error=unwalked)
    if config.inputs:  # a sensor's run: exactly the inputs it saw settle, unchanged since
        by_key = {i.key: i for i in offered}
        changed = [k for k in config.inputs if k not in by_key]
        if changed:
            context.log.warning(f"{len(changed)} requested inputs changed or left since the sensor saw them; "
                                f"a later run takes them (first: {changed[0].rsplit('|', 1)[0]})")
        offered = [by_key[k] for k in config.inputs if k in by_key]
    files = [i.path for i in offered]
    context.log.info(f"{len(files)} settled inputs in {corpus.inbox_path / source} for {day}")
    t0 = time.monotonic()
    with no_retry_for_settings((ValueError, CorpusError)):  # an inbox input that left meanwhile is retried (re-listed)
        summary = corpus.ingest(files)
    context.log.info(summary.render())
    overview = ingest_overview(corpus.root, summary.batch_id)  # this run's rows only
    prefix = f"{corpus.inbox_path / source}/".replace("'", "''")  # this source's inputs (LIKE took `_` for any character)
    query = query_command(corpus.root, f"SELECT * FROM trajectories WHERE starts_with(source, '{prefix}') LIMIT 20")
    return dg.MaterializeResult(
        metadata={
            "inbox_inputs": len(files),  # what the inbox offered (a claimed folder with all under it: one)
            "inputs": summary.inputs,  # what ingest read: = new + already ingested + same content
            "new_inputs": summary.new_inputs,
            "already_ingested": summary.already_ingested,
            "same_content_inputs": summary.duplicate_inputs,
            "records_in": summary.records,
            "accepted": summary.trajectories,
            "quarantined": summary.quarantined,
            "turns": summary.turns,
            "reconciles": summary.reconciles,
            "seconds": round(time.monotonic() - t0, 3),
            "MB": round(summary.bytes / 1e6, 3),
            "batch": summary.batch_id or "none (nothing new)",
            "config_fingerprint": summary.config_fingerprint,
            "by_domain_and_source": _md_table(*overview["by_domain_source"]),
            "quarantine_reasons": _md_table(*overview["quarantine_reasons"]),
            "example_turns": _md_table(*overview["example_turns"]),
            "see_more": dg.MetadataValue.text(query),
            "corpus": dg.MetadataValue.path(str(corpus.root)),
        }
    )


@dg.asset(
    # not thinking_traces: it needs an LLM endpoint, and a full run without one still reports (as without android_trajectories)
    deps=[ingested_traces, "mcp_trajectories", "sandbox_trajectories", "browser_trajectories", "dedup_clusters", "turn_scores",
          "training_export"],
    group_name="reporting",
    kinds={"html", "duckdb"},
    description="The self-contained HTML corpus report (`worldline report`).",
)
def corpus_report(context: dg.AssetExecutionContext, corpus: CorpusResource) -> dg.MaterializeResult:
    out = write_report(corpus.root)  # beside the corpus, as `worldline report` (a relative root resolved first)
    context.log.info(f"report written to {out}")
    return dg.MaterializeResult(
        metadata={"report": dg.MetadataValue.url(out.resolve().as_uri()), "path": dg.MetadataValue.path(str(out))}
    )
