"""Running a set of contracts: one that cannot run fails with the reason; the rest still run."""

from __future__ import annotations

from pathlib import Path

from pipelines.contracts import ContractResult, run_named


def test_a_contract_that_raises_fails_and_the_others_run() -> None:
    def ok(arg: int) -> ContractResult:
        return ContractResult("ok", arg == 3, "three")

    def broken(arg: int) -> ContractResult:
        raise KeyError("no such view")

    out = run_named({"first": ok, "broken": broken, "last": ok}, 3)
    assert [(r.name, r.passed, r.metadata) for r in out] == [
        ("ok", True, {}), ("broken", False, {"error": "KeyError: 'no such view'"}), ("ok", True, {})]



def test_a_failed_warning_reads_warn_and_a_broken_check_gives_its_docstring() -> None:
    def broken(arg: int) -> ContractResult:
        """Every row has a score."""
        raise ValueError("x")

    assert [r.description for r in run_named({"b": broken}, 0)] == ["Every row has a score."]
    assert ContractResult("late", False, "computed now", {"batches": 2}, severity="warn").line() == \
        "WARN  late: computed now (batches=2)"
    assert ContractResult("bad", False, "valid").line() == "FAIL  bad: valid"


def test_the_quarantine_rate_threshold_is_passed_through(sample: Path, tmp_path: Path) -> None:
    from pipelines.contracts import run_contracts
    from pipelines.ingest import IngestConfig, ingest

    ingest([sample], tmp_path / "c", IngestConfig(workers=1), progress=False)  # 9 of 1,123 records quarantined
    by_name = {r.name: r for r in run_contracts(tmp_path / "c")}
    assert by_name["quarantine_rate"].passed
    strict = {r.name: r for r in run_contracts(tmp_path / "c", max_quarantine_rate=0.0)}
    assert not strict["quarantine_rate"].passed and strict["quarantine_rate"].metadata["quarantined"] == 9
