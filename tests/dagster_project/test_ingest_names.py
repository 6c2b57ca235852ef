"""A partition run over inputs whose file names are not UTF-8 (a Latin-1 name from an old tar or
a Windows share): the corpus stores such a name with `\\xe9` escapes, and the materialization's
overview must find it by that name instead of failing the run (before: DuckDB refused the lone
surrogate, the step failed after its retries although every input was ingested)."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource
from pipelines.query import connect

DAY = "2026-11-01"
EPOCH = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()


def test_a_non_utf8_file_name_is_ingested_and_shown(tmp_path: Path, sample: Path) -> None:
    inbox = tmp_path / "inbox"
    (inbox / "swe").mkdir(parents=True)
    name = os.fsdecode(b"caf\xe9.traj")  # a lone surrogate in Python
    dst = inbox / "swe" / name
    shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", dst)
    os.utime(dst, (EPOCH, EPOCH))
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["swe"])

    res = dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus},
                         instance=instance, raise_on_error=False)

    assert res.success
    [mat] = res.asset_materializations_for_node("ingested_traces")
    md = {k: v.value for k, v in mat.metadata.items()}
    assert (md["inputs"], md["new_inputs"], md["accepted"], md["quarantined"], md["turns"]) == (1, 1, 1, 0, 7)
    assert "| terminal | swe-agent | 1 | 7 |" in md["by_domain_and_source"]
    assert md["example_turns"].count("\n") >= 2  # a header, the rule, at least one example turn
    stored = connect(corpus.root).sql("SELECT source FROM trajectories").fetchall()
    assert stored == [(str(inbox / "swe" / "caf\\xe9.traj"),)]
