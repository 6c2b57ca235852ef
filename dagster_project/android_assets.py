"""Android collection in the Dagster graph: the `android_trajectories` asset, its resource and its checks.

The asset body calls the same core as `worldline collect android` (collectors.android.collect); the
checks run the Android data contracts (collectors.android.contracts). It needs a device that
`adb devices` lists: without one it fails at once, saying what to start, and nothing downstream
waits for it."""

import time
from pathlib import Path

import dagster as dg

from collectors.android.collect import collect
from collectors.android.contracts import ANDROID_CONTRACTS, run_android_contracts
from collectors.android.device import DeviceUnavailable
from collectors.android.spec import default_specs
from collectors.live import SessionSummary
from dagster_project.assets import (
    COLLECTION_RETRY,
    SETTINGS_ERRORS,
    no_retry_for_settings,
    session_run_result,
)
from dagster_project.contract_checks import check_specs, collection_checks, only_selected
from dagster_project.resources import CorpusResource


class AndroidDevicesResource(dg.ConfigurableResource):
    """Which app specs to run, on which device. Empty `specs`: sandboxes/android/*.yaml; empty `serial`:
    the only device online; empty `adb`: $WORLDLINE_ADB, else adb on PATH."""

    specs: list[str] = []
    serial: str = ""
    adb: str = ""
    repeat: int = 1
    settle_s: float | None = None

    def spec_paths(self) -> list[Path]:
        return [Path(s) for s in self.specs] if self.specs else default_specs()

    def collect(self, corpus_root: str | Path, log=None) -> SessionSummary:
        return collect(self.spec_paths(), corpus_root, serial=self.serial or None, adb=self.adb or None,
                       repeat=self.repeat, settle_s=self.settle_s, echo=log)


@dg.asset(
    retry_policy=COLLECTION_RETRY,
    group_name="collection",
    kinds={"python", "parquet"},
    description="Scripted sessions on an Android device or emulator through adb (the screen's view hierarchy after "
                "each action), recorded as `android` trajectories (source format android-live).",
)
def android_trajectories(context: dg.AssetExecutionContext, corpus: CorpusResource,
                         android_devices: AndroidDevicesResource) -> dg.MaterializeResult:
    t0 = time.monotonic()
    with no_retry_for_settings((*SETTINGS_ERRORS, DeviceUnavailable)):  # no device: a retry would not find one
        summary = android_devices.collect(corpus.root, log=context.log.info)
    context.log.info(summary.render())
    return session_run_result(summary, corpus.root, time.monotonic() - t0, "Android", "u.action, u.is_error",
                              device=summary.environment.removeprefix("device: "))


@dg.multi_asset_check(specs=check_specs(ANDROID_CONTRACTS, android_trajectories), can_subset=True)
def android_contract_checks(context: dg.AssetCheckExecutionContext, corpus: CorpusResource):
    yield from only_selected(context, collection_checks(
        ANDROID_CONTRACTS, run_android_contracts, android_trajectories, corpus.root))
