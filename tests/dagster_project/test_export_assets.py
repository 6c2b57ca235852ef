"""Dagster: the training export materializes after the real cleaning and dedup assets, uses their
side tables, and its data contracts pass; the report gains its export-mix section."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import orjson

from dagster_project.clean_assets import cleaning_verdicts, dedup_clusters
from dagster_project.export_assets import export_checks, training_export
from dagster_project.resources import CorpusResource
from pipelines.export_contracts import run_export_contracts
from pipelines.export_report import section_export
from pipelines.query import connect, run_query
from tests.pipelines.export_support import build_corpus


def test_export_asset_after_cleaning_and_dedup(tmp_path: Path) -> None:
    root = build_corpus(tmp_path)
    corpus = CorpusResource(root=str(root), inbox=str(tmp_path / "inbox"))
    assert "Export mix" in section_export(connect(root)) and "no export recorded" in section_export(connect(root))
    out = tmp_path / "export"
    res = dg.materialize([cleaning_verdicts, dedup_clusters, training_export, export_checks], resources={"corpus": corpus},
                         run_config={"ops": {"training_export": {"config": {"out": str(out), "seq_len": 512,
                                                                            "validation": 0.1, "test": 0.2}}}})
    assert res.success
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "export_complete": True, "export_masks": True, "export_formats_agree": True, "export_splits_disjoint": True, "export_eval_set": True}
    md = {k: v.value for k, v in res.asset_materializations_for_node("training_export")[0].metadata.items()}
    m = orjson.loads((out / "manifest.json").read_bytes())
    assert md["fingerprint"] == m["fingerprint"] and md["tokens"] == sum(s["tokens"] for s in m["splits"].values())
    assert {"cleaning", "duplicates"} <= set(m["side_tables_used"])
    dropped = run_query(root, "SELECT count(DISTINCT trajectory_id) FROM cleaning WHERE turn_index IS NULL")[1][0][0]
    kept = run_query(root, "SELECT count(*) FROM kept_trajectories")[1][0][0]
    assert m["counts"]["dropped_by_cleaning"] == dropped
    assert sum(s["trajectories"] for s in m["splits"].values()) + m["counts"]["no_env_turns"] == kept
    # the assignment side table feeds the report's export mix
    rows = run_query(root, "SELECT split, sum(copies * tokens) FROM export_assignments GROUP BY 1 ORDER BY 1")[1]
    assert dict(rows) == {s: m["splits"][s]["tokens"] for s in ("test", "train", "validation")}
    html = section_export(connect(root))
    assert "Train tokens per domain (realised mix)" in html and "terminal" in html
    assert all(r.passed for r in run_export_contracts(out, root))
