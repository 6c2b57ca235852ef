"""Automation: a sensor that turns settled inbox inputs into partition runs, and a daily schedule.

The sensor only requests inputs (files, and directories a directory format claims) it has seen
unchanged (every file's size and mtime) on two consecutive ticks *and* that are older than the
settle time, so a file still being written is never ingested. A run is given exactly the settled
inputs of its partition not requested before (run config), and its key is derived from them: a
partition is re-run when new inputs arrive in it, and no input is requested twice (the cursor keeps
the requested inputs that are still in the inbox; one moved out is forgotten, and the others are
not requested again because of it).
"""


import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable

import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource
from pipelines.inbox import misnamed_sources, scan, sources

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets(ingested_traces),
    description="Import one (source, day) partition of the inbox into the corpus, then run the data contracts.",
)


def inbox_requests(corpus: CorpusResource, cursor: str | None, known_sources: list[str],
                   log: Callable[[str], None] | None = None) -> dg.SensorResult:
    """Core of the sensor, separated so tests can drive it tick by tick."""
    state = json.loads(cursor) if cursor else {}
    seen_before: dict[str, str] = state.get("seen", {})
    requested = set(state.get("requested_inputs", []))  # `path|signature` keys (a cursor before them: none)
    now_seen: dict[str, str] = {}
    present: set[str] = set()
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    future: list[str] = []
    errors: list[str] = []
    for i in scan(corpus.inbox_path, corpus.settle_seconds, on_future=lambda p: future.append(str(p)),
                  on_error=lambda source, e: errors.append(f"{source}: {e}")):
        now_seen[str(i.path)] = i.signature
        present.add(i.key)
        if seen_before.get(str(i.path)) == i.signature and i.key not in requested:  # unchanged since the previous tick
            groups[(i.source, i.day)].append(i.key)
    if future and log is not None:
        log(f"{len(future)} inbox inputs are modified in the future (a clock off?) and wait until then: {future[0]}")
    if errors and log is not None:
        log(f"{len(errors)} inbox sources could not be walked to the end (the inputs found before are offered): {errors[0]}")
    misnamed = misnamed_sources(corpus.inbox_path)
    if misnamed and log is not None:
        log(f"{len(misnamed)} inbox folders are not ingested: a source's name is letters, digits, '.', '_' and '-', "
            f"starting with a letter or digit, at most 100 characters: {', '.join(repr(n) for n in misnamed[:5])}")
    run_requests = []
    for (source, day), keys in sorted(groups.items()):
        keys.sort()
        digest = hashlib.sha256("\n".join(keys).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        run_key = f"{source}|{day}|{digest}"
        requested.update(keys)
        run_requests.append(dg.RunRequest(
            run_key=run_key, partition_key=key(source, day), tags={"worldline/inputs": str(len(keys))},
            run_config={"ops": {"ingested_traces": {"config": {"inputs": keys}}}}))
    new_sources = [s for s in sources(corpus.inbox_path) if s not in known_sources]
    dyn = [SOURCES.build_add_request(new_sources)] if new_sources else []
    cursor_out = json.dumps({"seen": now_seen, "requested_inputs": sorted(requested & present)})
    return dg.SensorResult(run_requests=run_requests, dynamic_partitions_requests=dyn, cursor=cursor_out)


@dg.sensor(job=ingest_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.STOPPED,
           description="New settled files in `INBOX/{source}/` → ingestion runs for their (source, day).")
def inbox_sensor(context: dg.SensorEvaluationContext, corpus: CorpusResource) -> dg.SensorResult:
    known = list(context.instance.get_dynamic_partitions(SOURCES.name))
    return inbox_requests(corpus, context.cursor, known, log=context.log.warning)


@dg.schedule(job=ingest_job, cron_schedule="30 0 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Daily: ingest yesterday's partition of every known source.")
def daily_ingest(context: dg.ScheduleEvaluationContext):
    day = (context.scheduled_execution_time - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    for source in context.instance.get_dynamic_partitions(SOURCES.name):
        yield dg.RunRequest(run_key=f"daily|{source}|{day}", partition_key=key(source, day))
