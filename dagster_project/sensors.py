"""Automation: a sensor that turns settled inbox inputs into partition runs, and a daily schedule.

The sensor only requests inputs (files, and directories a directory format claims) it has seen
unchanged (every file's size and mtime) on two consecutive ticks *and* that are older than the
settle time, so a file still being written is never ingested. A run is given exactly the settled
inputs of its partition not requested before (run config), and its key is derived from them: a
partition is re-run when new inputs arrive in it, and no input is requested twice (the requested
inputs still in the inbox are kept; one moved out is forgotten, and the others are not requested
again because of it).

The requested inputs live in a file beside the corpus (`RequestedInputs`), not in the cursor:
Dagster stores the cursor with every tick, and a cursor that held every input of a 50,000-file inbox
was 8.6 MB a tick (every 30 s). The cursor holds a generation number and the inputs seen but not
requested yet. A tick writes its new requests under the next generation and returns it in the
cursor; entries of a generation above the cursor's are of a tick whose cursor Dagster did not
commit (its run requests were not submitted either) and are dropped, so those inputs are asked
for again. Resetting the cursor (or deleting the file) requests every input again: ingest skips
the content it holds already.
"""


import datetime as dt
import hashlib
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource
from pipelines.inbox import misnamed_sources, scan, sources
from pipelines.store import write_json_atomic

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets(ingested_traces),
    description="Import one (source, day) partition of the inbox into the corpus, then run the data contracts.",
)


class RequestedInputs:
    """The inputs an inbox sensor has requested: `{digest of path|signature: generation}` in a JSON
    file beside the corpus (one per inbox), written atomically. 8 bytes of BLAKE2b per key: a
    collision among a million inputs has odds of about 1 in 3.6e7."""

    def __init__(self, corpus: CorpusResource) -> None:
        root = Path(corpus.root).resolve()
        inbox = hashlib.sha256(str(Path(corpus.inbox).resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:12]
        self.path = root.parent / f".{root.name}.inbox-{inbox}.requested.json"

    @staticmethod
    def digest(key: str) -> str:
        return hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).hexdigest()

    def load(self, committed: int) -> dict[str, int]:
        """The entries of generations up to `committed` (the others' ticks were not committed)."""
        try:
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        entries = doc.get("requested") if isinstance(doc, dict) else None
        if not isinstance(entries, dict):
            raise ValueError(f"{self.path}: not an inbox sensor's state (no 'requested' object); move it away to "
                             "request every inbox input again")
        return {d: g for d, g in entries.items() if isinstance(g, int) and g <= committed}

    def save(self, entries: dict[str, int]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.path, {"requested": entries})


def inbox_requests(corpus: CorpusResource, cursor: str | None, known_sources: list[str],
                   log: Callable[[str], None] | None = None) -> dg.SensorResult:
    """Core of the sensor, separated so tests can drive it tick by tick."""
    state = json.loads(cursor) if cursor else {}
    committed = state.get("generation", 0)
    store = RequestedInputs(corpus)
    requested = store.load(committed)
    loaded = dict(requested)
    digest = store.digest
    for k in state.get("requested_inputs", []):  # a cursor from before the file: its requested keys
        requested[digest(k)] = committed
    seen_before: dict[str, str] = state.get("seen", {})
    now_seen: dict[str, str] = {}  # inputs seen but not requested yet
    present: set[str] = set()
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    future: list[str] = []
    errors: list[str] = []
    for i in scan(corpus.inbox_path, corpus.settle_seconds, on_future=lambda p: future.append(str(p)),
                  on_error=lambda source, e: errors.append(f"{source}: {e}")):
        d = digest(i.key)
        present.add(d)
        if d in requested:
            continue
        if seen_before.get(str(i.path)) == i.signature:  # unchanged since the previous tick
            groups[(i.source, i.day)].append(i.key)
        else:
            now_seen[str(i.path)] = i.signature
    if future and log is not None:
        log(f"{len(future)} inbox inputs are modified in the future (a clock off?) and wait until then: {future[0]}")
    if errors and log is not None:
        log(f"{len(errors)} inbox sources could not be walked to the end (the inputs found before are offered): {errors[0]}")
    misnamed = misnamed_sources(corpus.inbox_path)
    if misnamed and log is not None:
        log(f"{len(misnamed)} inbox folders are not ingested: a source's name is letters, digits, '.', '_' and '-', "
            f"starting with a letter or digit, at most 100 characters: {', '.join(repr(n) for n in misnamed[:5])}")
    run_requests = []
    generation = committed + 1
    for (source, day), keys in sorted(groups.items()):
        keys.sort()
        run_digest = hashlib.sha256("\n".join(keys).encode("utf-8", "surrogateescape")).hexdigest()[:16]
        run_key = f"{source}|{day}|{run_digest}"
        requested.update((digest(k), generation) for k in keys)
        run_requests.append(dg.RunRequest(
            run_key=run_key, partition_key=key(source, day), tags={"worldline/inputs": str(len(keys))},
            run_config={"ops": {"ingested_traces": {"config": {"inputs": keys}}}}))
    new_sources = [s for s in sources(corpus.inbox_path) if s not in known_sources]
    dyn = [SOURCES.build_add_request(new_sources)] if new_sources else []
    requested = {d: g for d, g in requested.items() if d in present}
    if requested != loaded:
        store.save(requested)
    else:
        generation = committed
    cursor_out = json.dumps({"generation": generation, "seen": now_seen})
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
