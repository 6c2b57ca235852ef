"""One asset check can run on its own (the UI's *Execute* on a check, or a run that selects one
check): every multi-asset check can be subset and yields exactly the selected results. Before,
the UI showed every check but one as "requires materialization" and a run of one check was
refused with DagsterInvalidSubsetError, so a broken data contract could only be re-checked by
materializing the asset again."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.checks import corpus_contracts
from dagster_project.definitions import defs
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource

DAY = "2026-11-01"
EPOCH = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()


def test_every_check_of_the_code_location_can_run_alone() -> None:
    checks = sorted(defs.resolve_asset_graph().asset_check_keys, key=lambda k: k.to_user_string())
    assert len(checks) == 39
    jobs = [dg.define_asset_job(f"only_{i}", selection=dg.AssetSelection.checks(k)) for i, k in enumerate(checks)]
    merged = dg.Definitions.merge(defs, dg.Definitions(jobs=jobs))
    for i, k in enumerate(checks):
        job = merged.resolve_job_def(f"only_{i}")  # before: DagsterInvalidSubsetError for 29 of the 30
        assert job.asset_layer.asset_graph.asset_check_keys == {k}


def test_one_contract_reruns_alone_and_fails_on_a_corrupted_file(tmp_path: Path, sample: Path) -> None:
    inbox = tmp_path / "inbox"
    (inbox / "swe").mkdir(parents=True)
    dst = inbox / "swe" / "ctf_pwn_warmup.traj"
    shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", dst)
    os.utime(dst, (EPOCH, EPOCH))
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["swe"])
    assert dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus},
                          instance=instance).success
    root = Path(corpus.root)
    [part] = sorted((root / "trajectories").rglob("*.parquet"))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    part.write_bytes(bytes(data))

    one = dg.define_asset_job("manifest_only", selection=dg.AssetSelection.checks(
        dg.AssetCheckKey(ingested_traces.key, "manifest_checksums")))
    d = dg.Definitions(assets=[ingested_traces], asset_checks=[corpus_contracts], jobs=[one], resources={"corpus": corpus})
    res = d.resolve_job_def("manifest_only").execute_in_process(instance=instance, raise_on_error=False)

    assert res.success
    assert res.get_asset_materialization_events() == []  # nothing was re-ingested
    [ev] = res.get_asset_check_evaluations()
    assert (ev.check_name, ev.passed) == ("manifest_checksums", False)
    assert ev.metadata["checksum_mismatch"].value == [str(part.relative_to(root))]
