"""Data contracts as asset checks: each runs the core contract over what was written."""


import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.contract_checks import (
    check_result,
    check_specs,
    materialization_checked,
    no_corpus,
    only_selected,
)
from dagster_project.resources import CorpusResource
from pipelines.contracts import CONTRACTS, run_contracts
from pipelines.store import Corpus


@dg.multi_asset_check(specs=check_specs(CONTRACTS, ingested_traces), can_subset=True)
def corpus_contracts(context: dg.AssetCheckExecutionContext, corpus: CorpusResource):
    selected = {k.name for k in context.selected_asset_check_keys}
    yield from only_selected(context, _corpus_contracts(corpus, selected, _batch_of_this_run(context)))


def _batch_of_this_run(context: dg.AssetCheckExecutionContext) -> str | None:
    """The batch this run's ingest committed, so that the check judges it even when another
    partition's run committed after it; "" when this run ingested nothing new (nothing to judge);
    None when the check runs by itself (the newest batch)."""
    mat, own = materialization_checked(context, ingested_traces.key)
    if not own or mat is None or "batch" not in mat.metadata:
        return None
    value = str(mat.metadata["batch"].value)
    return "" if value.startswith("none") else value


def _corpus_contracts(corpus: CorpusResource, names: set[str], batch: str | None = None):
    if not Corpus(corpus.root).exists():
        yield from no_corpus(CONTRACTS, ingested_traces.key, corpus.root, "ingested_traces")
        return
    for r in run_contracts(corpus.root, corpus.max_quarantine_rate, names, batch):  # what was not selected is not run
        yield check_result(r, ingested_traces.key)
