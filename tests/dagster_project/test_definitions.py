"""Dagster: definitions load, a partition materializes in-process, checks run, the sensor fires."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.assets import corpus_report, ingested_traces
from dagster_project.checks import corpus_contracts
from dagster_project.definitions import defs
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource, DuckDBResource
from dagster_project.sensors import inbox_requests
from pipelines.contracts import run_contracts

DAY = "2026-11-01"
EPOCH = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()


def _drop(inbox: Path, source: str, files: list[Path], mtime: float = EPOCH) -> list[Path]:
    d = inbox / source
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        dst = d / f.name
        shutil.copy(f, dst)
        os.utime(dst, (mtime, mtime))
        out.append(dst)
    return out


@pytest.fixture
def setup(tmp_path: Path, sample: Path):
    inbox = tmp_path / "inbox"
    _drop(inbox, "swe", sorted((sample / "swe-agent").glob("*.traj")))
    _drop(inbox, "swe", [sample / "agentapi-terminal" / "claude.txt"])  # not a trajectory: quarantined
    _drop(inbox, "swe", [sample / "swe-agent" / "pydicom__pydicom-1458.traj"], mtime=EPOCH + 86400)  # next day
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["swe"])
    return corpus, instance


def test_definitions_load() -> None:
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "ingested_traces", "corpus_report", "mcp_trajectories", "sandbox_trajectories",
        "cleaning_verdicts", "dedup_clusters", "turn_scores", "training_export", "thinking_traces"}
    assert defs.resolve_job_def("ingest_job") is not None
    assert {c.name for c in corpus_contracts.check_specs} == {
        "schema_valid", "counts_reconcile", "quarantine_rate", "unique_trajectory_id", "manifest_checksums"}
    assert ingested_traces.op.retry_policy is not None and corpus_report.op.retry_policy is None


def test_partition_materializes_with_checks_and_metadata(setup) -> None:
    corpus, instance = setup
    res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key("swe", DAY),
                         resources={"corpus": corpus}, instance=instance)
    assert res.success
    [mat] = res.asset_materializations_for_node("ingested_traces")
    md = {k: v.value for k, v in mat.metadata.items()}
    # 5 .traj files of DAY (5+11+11+7+21 turns; pydicom moved to the next day) + claude.txt
    assert (md["files"], md["records_in"], md["accepted"], md["quarantined"], md["turns"]) == (6, 6, 5, 1, 55)
    assert md["reconciles"] is True
    assert "| swe | swe-agent | 3 | 27 |" in md["by_domain_and_source"]
    assert "unknown_format" in md["quarantine_reasons"]
    assert md["see_more"].startswith("worldline query ")
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals == {"schema_valid": True, "counts_reconcile": True, "quarantine_rate": True,
                     "unique_trajectory_id": True, "manifest_checksums": True}
    # the next day's partition holds only pydicom
    res2 = dg.materialize([ingested_traces], partition_key=key("swe", "2026-11-02"),
                          resources={"corpus": corpus}, instance=instance)
    md2 = {k: v.value for k, v in res2.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md2["files"], md2["accepted"], md2["turns"]) == (1, 1, 12)
    rep = dg.materialize([corpus_report], resources={"corpus": corpus}, instance=instance)
    path = Path(rep.asset_materializations_for_node("corpus_report")[0].metadata["path"].value)
    html = path.read_text()
    assert "6 trajectories" in html and "Exit codes" in html and "<svg" in html


def test_duckdb_resource_sees_views(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    con = DuckDBResource().connect(corpus.root)
    assert con.sql("SELECT count(*) FROM trajectories").fetchall() == [(5,)]


def test_corrupted_corpus_fails_the_right_checks(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    root = Path(corpus.root)
    part = sorted((root / "trajectories" / "domain=swe").glob("*.parquet"))[0]
    shutil.copy(part, part.with_name("part-copied-by-hand.parquet"))  # duplicate rows, unlisted file
    failed = {r.name for r in run_contracts(root) if not r.passed}
    assert failed == {"counts_reconcile", "unique_trajectory_id", "manifest_checksums"}
    part.with_name("part-copied-by-hand.parquet").unlink()
    assert all(r.passed for r in run_contracts(root))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the file
    part.write_bytes(bytes(data))
    results = {r.name: r for r in run_contracts(root)}
    assert not results["manifest_checksums"].passed
    assert results["manifest_checksums"].metadata["checksum_mismatch"] == [str(part.relative_to(root))]
    res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key("swe", DAY),
                         resources={"corpus": corpus}, instance=instance, raise_on_error=False)
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals["manifest_checksums"] is False


def test_quarantine_rate_bound_is_configurable(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    rates = {r.name: r for r in run_contracts(corpus.root, max_quarantine_rate=0.1)}
    assert rates["quarantine_rate"].passed is False  # 1 of 6 = 17 %
    assert rates["quarantine_rate"].metadata["rate"] == round(1 / 6, 4)


def test_sensor_waits_for_settled_files_and_adds_sources(setup, tmp_path: Path, sample: Path) -> None:
    corpus, _ = setup
    inbox = Path(corpus.inbox)
    (inbox / "newsrc").mkdir()
    half = inbox / "newsrc" / "upload.traj.part"
    half.write_bytes((sample / "swe-agent/ctf_pwn_warmup.traj").read_bytes()[:1000])
    os.utime(half, (EPOCH, EPOCH))
    r1 = inbox_requests(corpus, None, known_sources=["swe"])
    assert r1.run_requests == []  # first sight: nothing is known to be settled yet
    assert [req.partition_keys for req in r1.dynamic_partitions_requests] == [["newsrc"]]
    growing = _drop(inbox, "swe", [sample / "intercode" / "ic_ctf_gpt-4_25_turns.json"])[0]
    r2 = inbox_requests(corpus, r1.cursor, known_sources=["swe", "newsrc"])
    assert [(rq.partition_key.keys_by_dimension["source"], rq.partition_key.keys_by_dimension["day"]) for rq in r2.run_requests] == [
        ("swe", DAY), ("swe", "2026-11-02")]
    # the intercode file was new in tick 2: it is not in the requested set yet
    assert json.loads(r2.run_requests[0].tags["worldline/files"]) == 6
    with open(growing, "ab") as f:  # still being written
        f.write(b" ")
    os.utime(growing, (EPOCH, EPOCH))
    r3 = inbox_requests(corpus, r2.cursor, known_sources=["swe", "newsrc"])
    assert r3.run_requests == []  # changed since the last tick
    r4 = inbox_requests(corpus, r3.cursor, known_sources=["swe", "newsrc"])
    assert [json.loads(rq.tags["worldline/files"]) for rq in r4.run_requests] == [7]
    r5 = inbox_requests(corpus, r4.cursor, known_sources=["swe", "newsrc"])
    assert r5.run_requests == []  # same files: same run key, never requested twice


def test_a_partition_converts_with_beam_when_configured(setup) -> None:
    corpus, instance = setup
    beam = CorpusResource(root=corpus.root, inbox=corpus.inbox, settle_seconds=0, beam_runner="DirectRunner")
    res = dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": beam}, instance=instance)
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md["files"], md["records_in"], md["accepted"], md["quarantined"], md["turns"]) == (6, 6, 5, 1, 55)
    # Beam attempts name their parts with an attempt suffix; a local ingest does not
    assert [p.name for p in Path(corpus.root).glob("turns/**/*.parquet")]
    assert all(re.search(r"-\d{5}-[0-9a-f]{8}-\d{4}\.parquet$", p.name) for p in Path(corpus.root).glob("turns/**/*.parquet"))
