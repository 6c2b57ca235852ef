"""Dagster: cleaning and dedup assets materialize over a real corpus, their checks pass, and the
dedup threshold is run config (a new one reuses the stored signatures)."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from dagster_project.clean_assets import cleaning_checks, cleaning_verdicts, dedup_checks, dedup_clusters
from dagster_project.resources import CorpusResource
from pipelines.side import side_info
from pipelines.store import Corpus
from tests.pipelines.clean_support import ingest_sample


def test_assets_and_checks(tmp_path: Path) -> None:
    root = ingest_sample(tmp_path / "corpus")
    corpus = CorpusResource(root=str(root), inbox=str(tmp_path / "inbox"))
    res = dg.materialize([cleaning_verdicts, dedup_clusters, cleaning_checks, dedup_checks], resources={"corpus": corpus})
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("cleaning_verdicts")[0].metadata.items()}
    assert (md["trajectories"], md["kept_trajectories"], md["kept_turns"]) == (1113, 932, 3439)
    assert "| too_few_turns | 181 | trajectories |" in md["dropped_by_reason"]
    md = {k: v.value for k, v in res.asset_materializations_for_node("dedup_clusters")[0].metadata.items()}
    assert (md["considered"], md["kept"], md["clusters"], md["signatures_reused"]) == (932, 927, 4, False)
    assert md["fingerprint"] == side_info(Corpus(root), "duplicates")["fingerprint"]
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "cleaning_every_trajectory_judged": True, "duplicates_one_representative": True, "dedup_current": True,
        "shared_prefixes_counted_once": True}
    res = dg.materialize([dedup_clusters, dedup_checks], resources={"corpus": corpus},
                         run_config={"ops": {"dedup_clusters": {"config": {"threshold": 0.5}}}})
    md = {k: v.value for k, v in res.asset_materializations_for_node("dedup_clusters")[0].metadata.items()}
    assert md["signatures_reused"] is True and md["lsh"] == "25 bands x 5 rows at threshold 0.5"
    assert all(e.passed for e in res.get_asset_check_evaluations())
    # the CLI's --bands/--rows and --recompute, as run config
    res = dg.materialize([dedup_clusters], resources={"corpus": corpus}, run_config={
        "ops": {"dedup_clusters": {"config": {"bands": 10, "rows": 5, "reuse_signatures": False}}}})
    md = {k: v.value for k, v in res.asset_materializations_for_node("dedup_clusters")[0].metadata.items()}
    assert md["lsh"] == "10 bands x 5 rows at threshold 0.7" and md["signatures_reused"] is False
