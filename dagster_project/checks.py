"""Data contracts as asset checks: each runs the core contract over what was written."""


import dagster as dg

from dagster_project.assets import ingested_traces
from dagster_project.contract_checks import check_result, check_specs, no_corpus, only_selected
from dagster_project.resources import CorpusResource
from pipelines.contracts import CONTRACTS, run_contracts
from pipelines.store import Corpus


@dg.multi_asset_check(specs=check_specs(CONTRACTS, ingested_traces), can_subset=True)
def corpus_contracts(context: dg.AssetCheckExecutionContext, corpus: CorpusResource):
    selected = {k.name for k in context.selected_asset_check_keys}
    yield from only_selected(context, _corpus_contracts(corpus, selected))


def _corpus_contracts(corpus: CorpusResource, names: set[str]):
    if not Corpus(corpus.root).exists():
        yield from no_corpus(CONTRACTS, ingested_traces.key, corpus.root, "ingested_traces")
        return
    for r in run_contracts(corpus.root, corpus.max_quarantine_rate, names):  # what was not selected is not run
        yield check_result(r, ingested_traces.key)
