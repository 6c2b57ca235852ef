"""Data contracts as asset checks: each runs the core contract over what was written."""


import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.resources import CorpusResource
from pipelines.contracts import CONTRACTS, ContractResult, run_contracts
from pipelines.store import Corpus


def _to_check(r: ContractResult) -> dg.AssetCheckResult:
    meta: dict[str, object] = {}
    for k, v in r.metadata.items():
        meta[k] = dg.MetadataValue.json(v) if isinstance(v, list | dict) else v
    return dg.AssetCheckResult(
        passed=r.passed,
        check_name=r.name,
        asset_key=ingested_traces.key,
        description=r.description,
        metadata=meta,
        severity=dg.AssetCheckSeverity.ERROR,
    )


@dg.multi_asset_check(
    specs=[dg.AssetCheckSpec(name, asset=ingested_traces, description=(fn.__doc__ or name).strip().splitlines()[0])
           for name, fn in CONTRACTS.items()],
)
def corpus_contracts(corpus: CorpusResource):
    if not Corpus(corpus.root).exists():
        for name in CONTRACTS:
            yield dg.AssetCheckResult(passed=False, check_name=name, asset_key=ingested_traces.key,
                                      metadata={"error": f"no corpus at {corpus.root}; materialize ingested_traces first"})
        return
    for r in run_contracts(corpus.root, corpus.max_quarantine_rate):
        yield _to_check(r)
