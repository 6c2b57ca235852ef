"""Contract results become Dagster asset checks with their severity and JSON metadata."""

from __future__ import annotations

import dagster as dg

from dagster_project.contract_checks import check_result, collection_checks, no_corpus
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


def test_a_collection_asset_without_a_corpus(tmp_path) -> None:
    from collectors.browser.contracts import BROWSER_CONTRACTS, run_browser_contracts
    from dagster_project.browser_assets import browser_trajectories

    root = str(tmp_path / "none")
    got = list(collection_checks(BROWSER_CONTRACTS, run_browser_contracts, browser_trajectories, root))
    assert [(r.check_name, r.passed, r.metadata["error"].value) for r in got] == [
        (name, False, f"no corpus at {root}; materialize browser_trajectories first") for name in BROWSER_CONTRACTS]

def test_every_check_says_what_it_checks_in_the_ui() -> None:
    """A check's description is what the UI shows beside it: never just its name."""
    from dagster_project.definitions import defs

    specs = [s for c in defs.asset_checks or [] for s in c.check_specs]
    assert len(specs) == 39
    assert [s.name for s in specs if not s.description or s.description.strip() == s.name] == []
