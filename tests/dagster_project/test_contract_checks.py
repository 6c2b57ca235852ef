"""Contract results become Dagster asset checks with their severity and JSON metadata."""

from __future__ import annotations

import dagster as dg

from dagster_project.contract_checks import check_result, no_corpus
from pipelines.contracts import ContractResult


def test_severity_and_metadata_carry_over() -> None:
    key = dg.AssetKey("turn_scores")
    warn = check_result(ContractResult("turn_scores_current", False, "now", {"batches": 2, "files": ["a"]},
                                       severity="warn"), key)
    assert (warn.passed, warn.severity, warn.check_name) == (False, dg.AssetCheckSeverity.WARN, "turn_scores_current")
    assert warn.metadata["batches"].value == 2 and warn.metadata["files"].value == ["a"]
    error = check_result(ContractResult("turn_scores_valid", False, "valid"), key)
    assert error.severity == dg.AssetCheckSeverity.ERROR
    missing = list(no_corpus(["a", "b"], key, "/x", "ingested_traces"))
    assert [(r.check_name, r.passed, r.metadata["error"].value) for r in missing] == [
        ("a", False, "no corpus at /x; materialize ingested_traces first"),
        ("b", False, "no corpus at /x; materialize ingested_traces first")]

