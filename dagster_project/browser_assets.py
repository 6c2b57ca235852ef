"""Browser collection in the Dagster graph: the `browser_trajectories` asset, its resource and its checks.

The asset body calls the same core as `worldline collect browser` (collectors.browser.collect); the
checks run the browser data contracts (collectors.browser.contracts)."""

import time
from pathlib import Path

import dagster as dg

from collectors.browser.collect import BrowserSummary, collect
from collectors.browser.contracts import BROWSER_CONTRACTS, run_browser_contracts
from collectors.browser.session import BrowserUnavailable, FaultPlan
from collectors.browser.spec import default_specs
from dagster_project.assets import (
    COLLECTION_RETRY,
    SETTINGS_ERRORS,
    no_retry_for_settings,
    session_run_result,
)
from dagster_project.contract_checks import check_specs, collection_checks, only_selected
from dagster_project.resources import CorpusResource


class BrowserSitesResource(dg.ConfigurableResource):
    """Which site specs to run in chromium, with which faults. Empty `specs`: sandboxes/web/*.yaml."""

    specs: list[str] = []
    faults: str = ""  # comma-separated kinds (http_error), `all`, or empty
    fault_rate: float | None = None
    seed: int = 0
    repeat: int = 1

    def spec_paths(self) -> list[Path]:
        return [Path(s) for s in self.specs] if self.specs else default_specs()

    def collect(self, corpus_root: str | Path, log=None) -> BrowserSummary:
        faults = FaultPlan.parse(self.faults, self.fault_rate, self.seed)
        return collect(self.spec_paths(), corpus_root, repeat=self.repeat, faults=faults, echo=log)


@dg.asset(
    retry_policy=COLLECTION_RETRY,
    group_name="collection",
    kinds={"python", "parquet"},
    description="Scripted sessions in headless chromium on the sites of the specs (accessibility trees after each "
                "action, injected 503 page loads), recorded as `web` trajectories (source format browser-live).",
)
def browser_trajectories(context: dg.AssetExecutionContext, corpus: CorpusResource,
                         browser_sites: BrowserSitesResource) -> dg.MaterializeResult:
    t0 = time.monotonic()
    with no_retry_for_settings((*SETTINGS_ERRORS, BrowserUnavailable)):  # no chromium: a retry would not find one
        summary = browser_sites.collect(corpus.root, log=context.log.info)
    context.log.info(summary.render())
    return session_run_result(summary, corpus.root, time.monotonic() - t0, "browser", "u.action, u.perturbation, u.is_error",
                              browser=f"chromium {summary.browser}")


@dg.multi_asset_check(specs=check_specs(BROWSER_CONTRACTS, browser_trajectories), can_subset=True)
def browser_contract_checks(context: dg.AssetCheckExecutionContext, corpus: CorpusResource):
    yield from only_selected(context, collection_checks(
        BROWSER_CONTRACTS, run_browser_contracts, browser_trajectories, corpus.root))
