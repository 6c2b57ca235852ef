"""Core contract results as Dagster asset checks: one conversion for every stage's checks."""

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import dagster as dg

from pipelines.contracts import ContractResult


def check_specs(contracts: Mapping[str, Callable[..., Any]], asset: Any) -> list[dg.AssetCheckSpec]:
    """One check per contract, described by the first line of its docstring."""
    return [dg.AssetCheckSpec(name, asset=asset, description=(fn.__doc__ or name).strip().splitlines()[0])
            for name, fn in contracts.items()]


def check_result(r: ContractResult, key: dg.AssetKey) -> dg.AssetCheckResult:
    """A `ContractResult` as an asset check result, with its severity; lists and dicts in its
    metadata become JSON metadata."""
    meta = {k: dg.MetadataValue.json(v) if isinstance(v, list | dict) else v for k, v in r.metadata.items()}
    return dg.AssetCheckResult(passed=r.passed, check_name=r.name, asset_key=key, description=r.description,
                               metadata=meta,
                               severity=dg.AssetCheckSeverity.WARN if r.severity == "warn" else dg.AssetCheckSeverity.ERROR)


def materialization_checked(context: dg.AssetCheckExecutionContext, key: dg.AssetKey) -> tuple[Any, bool]:
    """(The materialization of `key` a check is about, whether it is this run's): this run's own
    when it materialized the asset (another run may have materialized it since, a partition's or
    a backfill's), else the latest (a check run by itself)."""
    for record in context.instance.all_logs(context.run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
        mat = record.asset_materialization
        if mat is not None and mat.asset_key == key:
            return mat, True
    event = context.instance.get_latest_materialization_event(key)
    return (event.asset_materialization if event is not None else None), False


def only_selected(context: dg.AssetCheckExecutionContext,
                  results: Iterable[dg.AssetCheckResult]) -> Iterator[dg.AssetCheckResult]:
    """The results of the checks this run selected. With it a multi-asset check can be subset
    (`can_subset=True`): one check can be executed on its own from the UI, without materializing."""
    keys = context.selected_asset_check_keys
    for r in results:
        if dg.AssetCheckKey(r.asset_key, r.check_name) in keys:
            yield r


def no_corpus(names: Iterable[str], key: dg.AssetKey, root: str, asset_name: str) -> Iterator[dg.AssetCheckResult]:
    """Every check failed, saying what to materialize first."""
    for name in names:
        yield dg.AssetCheckResult(passed=False, check_name=name, asset_key=key,
                                  metadata={"error": f"no corpus at {root}; materialize {asset_name} first"})


def collection_checks(contracts: Mapping[str, Callable[..., Any]], run: Callable[[str], list[ContractResult]],
                      asset: dg.AssetsDefinition, root: str) -> Iterator[dg.AssetCheckResult]:
    """A collection asset's data contracts over the corpus at `root` (`run` runs them); with no corpus
    there, every one failed, saying to materialize the asset first."""
    from pipelines.store import Corpus

    if not Corpus(root).exists():
        yield from no_corpus(contracts, asset.key, root, asset.key.to_user_string())
        return
    for r in run(root):
        yield check_result(r, asset.key)
