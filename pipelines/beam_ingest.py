"""Ingest's conversion groups as an Apache Beam pipeline, for inputs larger than one machine.

The same `process_group` as the process pool: each group of input files becomes Parquet parts
in the batch's staging directory (which must be on storage every worker can reach), and its
counts come back to the driver as one small JSON file, written then renamed. The driver then
commits the batch exactly as a local ingest does (the files a retried attempt wrote and no
result names stay in staging, which the commit removes), so the manifest, input skipping,
quarantine and counts are the same whichever runner converted the files.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pipelines.ingest import (
    Group,
    GroupResult,
    GroupRunner,
    IngestConfig,
    InputStats,
    group_tag,
    process_group,
)
from pipelines.store import write_json_atomic

RESULTS_DIR = "_beam_results"
# The runner `--beam` uses unless told: Beam's local runner for batch pipelines. `DirectRunner` (2.77) runs
# them on it too, but tries Prism first: it downloads the Prism binary (offline: fails; where the
# download hangs: stalls) and leaves an empty /tmp/beam-temp* folder each run.
DEFAULT_RUNNER = "FnApiRunner"


def _convert(item: tuple[int, Group], staging: str, batch_id: str, config: IngestConfig) -> str:
    index, group = item
    # each attempt its own part files: a runner may run a group twice at once (a retried or
    # speculative bundle); only the files the surviving result names are committed
    tag = f"{group_tag(batch_id, index)}-{secrets.token_hex(4)}"
    files, stats, messages = process_group(group, staging, tag, config)
    out = Path(staging) / RESULTS_DIR / f"{index:05d}.json"
    write_json_atomic(out, {"files": files, "stats": {k: asdict(v) for k, v in stats.items()}, "messages": messages})
    return out.name


def absolute_paths(group: Group) -> Group:
    """The group with its inputs' paths absolute (the names shown, `source`, stay as given)."""
    return [(replace(u, path=u.path.absolute(), files=[f.absolute() for f in u.files]), sha) for u, sha in group]


def beam_options(options: list[str] | None) -> Any:
    """`PipelineOptions` of `options`, refusing any Beam does not know: it drops them with a log warning and
    runs on (`--direct_num_workerz=2` ran with the defaults)."""
    import argparse

    from apache_beam.options.pipeline_options import PipelineOptions

    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    for cls in PipelineOptions.__subclasses__():  # as Beam parses them (`PipelineOptions.get_all_options`)
        cls._add_argparse_args(parser)
    try:
        _, unknown = parser.parse_known_args(list(options or []))
    except SystemExit:  # a known option with a bad value: argparse exits
        raise ValueError(f"Beam options {list(options or [])}: a value Beam does not take") from None
    if unknown:
        raise ValueError(f"Beam options not understood: {unknown} (see `python -m apache_beam.examples.wordcount --help`)")
    return PipelineOptions(list(options or []))


def beam_runner(runner: str = DEFAULT_RUNNER, options: list[str] | None = None) -> GroupRunner:
    """A GroupRunner that converts the groups with Beam (`runner`: FnApiRunner, DirectRunner, PrismRunner,
    DataflowRunner, ...; `options`: pipeline options as on a Beam command line). A runner Beam cannot
    make (an unknown name, a dotted path that does not import) is a ValueError here, before the
    ingest takes the corpus lock."""
    from apache_beam.runners.runner import create_runner

    try:
        made = create_runner(runner)
    except (ValueError, ImportError, AttributeError, TypeError) as e:
        raise ValueError(f"Beam runner {runner!r} cannot be used: {type(e).__name__}: {e}") from None
    pipeline_options = beam_options(options)

    def run(groups: list[Group], staging: str, batch_id: str, config: IngestConfig) -> Iterator[GroupResult]:
        import apache_beam as beam
        staging = str(Path(staging).absolute())  # a remote worker does not share the driver's working directory
        results = Path(staging) / RESULTS_DIR
        results.mkdir(parents=True, exist_ok=True)
        with beam.Pipeline(runner=made, options=pipeline_options) as p:
            _ = (
                p
                | "groups" >> beam.Create([(i, absolute_paths(g)) for i, g in enumerate(groups)])
                | "spread" >> beam.Reshuffle()
                | "convert" >> beam.Map(_convert, staging=staging, batch_id=batch_id, config=config)
            )
        for i in range(len(groups)):  # RESULTS_DIR goes with the staging directory (commit, recover)
            path = results / f"{i:05d}.json"
            if not path.exists():
                raise RuntimeError(f"beam ingest: group {i} of batch {batch_id} left no result ({path})")
            r = json.loads(path.read_text())
            yield r["files"], {k: InputStats(**v) for k, v in r["stats"].items()}, r["messages"]

    return run
