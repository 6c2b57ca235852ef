"""Resources: thin handles on the core, configured from the environment or a YAML file.

Settings come from `WORLDLINE_CONFIG` (a YAML file) when set, else from environment variables
(`WORLDLINE_CORPUS`, `WORLDLINE_INBOX`, ...), else defaults under `build/dagster/`. Secrets are
only ever read through `dagster.EnvVar`.
"""


import os
from pathlib import Path

import dagster as dg
import duckdb
import yaml

from pipelines.ingest import IngestConfig, IngestSummary, ingest
from pipelines.query import connect

REPO = Path(__file__).resolve().parent.parent


def settings() -> dict:
    s = {
        "corpus": os.environ.get("WORLDLINE_CORPUS", str(REPO / "build" / "dagster" / "corpus")),
        "inbox": os.environ.get("WORLDLINE_INBOX", str(REPO / "build" / "dagster" / "inbox")),
        "settle_seconds": float(os.environ.get("WORLDLINE_SETTLE_SECONDS", "5")),
        "max_quarantine_rate": float(os.environ.get("WORLDLINE_MAX_QUARANTINE_RATE", "0.25")),
        "beam_runner": os.environ.get("WORLDLINE_BEAM_RUNNER") or None,  # e.g. DirectRunner, FlinkRunner
        "beam_options": os.environ.get("WORLDLINE_BEAM_OPTIONS", "").split(),
    }
    path = os.environ.get("WORLDLINE_CONFIG")
    if path:
        with open(path) as f:
            loaded = yaml.safe_load(f) or {}
        unknown = set(loaded) - set(s)
        if unknown:
            raise ValueError(f"{path}: unknown settings {sorted(unknown)}; known: {sorted(s)}")
        s.update(loaded)
    return s


class CorpusResource(dg.ConfigurableResource):
    """The corpus directory and the inbox that feeds it."""

    root: str
    inbox: str
    settle_seconds: float = 5.0
    max_quarantine_rate: float = 0.25
    lock_wait_seconds: float = 600.0  # partition runs of one corpus take turns
    beam_runner: str | None = None  # set: ingest converts with this Apache Beam runner (pipelines/beam_ingest.py)
    beam_options: list[str] = []

    @property
    def inbox_path(self) -> Path:
        return Path(self.inbox)

    def ingest(self, paths: list[Path], domain: str | None = None) -> IngestSummary:
        cfg = IngestConfig(domain_override=domain, lock_wait_s=self.lock_wait_seconds)
        runner = None
        if self.beam_runner:
            from pipelines.beam_ingest import beam_runner

            runner = beam_runner(self.beam_runner, list(self.beam_options))
        return ingest(paths, self.root, cfg, progress=False, runner=runner)


class DuckDBResource(dg.ConfigurableResource):
    """An in-memory DuckDB connection with the corpus views (`worldline query`'s), for assets and
    checks of your own; `threads` caps DuckDB's threads (0: its default, one per core)."""

    threads: int = 0

    def connect(self, corpus_root: str | Path) -> duckdb.DuckDBPyConnection:
        return connect(corpus_root, duckdb.connect(config={"threads": self.threads} if self.threads else {}))


def build_resources() -> dict[str, dg.ConfigurableResource]:
    s = settings()
    return {
        "corpus": CorpusResource(
            root=s["corpus"], inbox=s["inbox"], settle_seconds=s["settle_seconds"],
            max_quarantine_rate=s["max_quarantine_rate"], beam_runner=s["beam_runner"], beam_options=s["beam_options"],
        ),
        "duckdb": DuckDBResource(),
    }
