"""Prepare the UI: register every inbox folder as a `sources` partition (the sensor does this
too, once it runs). `python -m dagster_project.seed [--sample]` — `--sample` first copies the
bundled sample corpus into INBOX/sample/ so there is something to ingest."""

import argparse
import os
import shutil
import sys
from pathlib import Path

import dagster as dg

from dagster_project.partitions import SOURCES
from dagster_project.resources import REPO, settings
from pipelines.inbox import sources


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sample", action="store_true", help="copy data/sample/corpus into INBOX/sample/")
    a = p.parse_args()
    try:
        s = settings()
    except (ValueError, OSError) as e:  # WORLDLINE_CONFIG: an unknown key, a wrong type, no such file: one line
        print(f"dagster_project.seed: error: {e}", file=sys.stderr)
        return 1
    inbox = Path(s["inbox"])
    if a.sample and not (inbox / "sample").exists():
        shutil.copytree(REPO / "data" / "sample" / "corpus", inbox / "sample")
    inbox.mkdir(parents=True, exist_ok=True)
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(REPO / ".dagster_home")))  # `make ui`'s default
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():  # no telemetry: this network is closed
        (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    instance = dg.DagsterInstance.get()
    have = set(instance.get_dynamic_partitions(SOURCES.name))
    new = [src for src in sources(inbox) if src not in have]
    if new:
        instance.add_dynamic_partitions(SOURCES.name, new)
    print(f"inbox {inbox}: sources {sources(inbox)} (added {new or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
