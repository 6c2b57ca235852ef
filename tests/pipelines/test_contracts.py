"""Running a set of contracts: one that cannot run fails with the reason; the rest still run."""

from __future__ import annotations

from pipelines.contracts import ContractResult, run_named


def test_a_contract_that_raises_fails_and_the_others_run() -> None:
    def ok(arg: int) -> ContractResult:
        return ContractResult("ok", arg == 3, "three")

    def broken(arg: int) -> ContractResult:
        raise KeyError("no such view")

    out = run_named({"first": ok, "broken": broken, "last": ok}, 3)
    assert [(r.name, r.passed, r.metadata) for r in out] == [
        ("ok", True, {}), ("broken", False, {"error": "KeyError: 'no such view'"}), ("ok", True, {})]

