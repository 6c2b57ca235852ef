"""Dagster: the `android_trajectories` asset records the Album sessions on the device (the replayed
recording, tests/collectors/android/conftest.py), and no device fails it at once, saying what to start."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg
import pytest

from collectors.android.report import section_android
from dagster_project.android_assets import (
    AndroidDevicesResource,
    android_contract_checks,
    android_trajectories,
)
from dagster_project.assets import COLLECTION_RETRY
from dagster_project.resources import CorpusResource
from pipelines.query import connect
from tests.collectors.android.conftest import FakeDevice, device  # noqa: F401 - the fixture


def test_materialize(device: FakeDevice, tmp_path: Path) -> None:  # noqa: F811
    assert android_trajectories.op.retry_policy == COLLECTION_RETRY
    assert [p.name for p in AndroidDevicesResource().spec_paths()] == ["album.yaml"]
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    res = dg.materialize([android_trajectories, android_contract_checks],
                         resources={"corpus": corpus, "android_devices": AndroidDevicesResource(settle_s=0)},
                         instance=dg.DagsterInstance.ephemeral())
    assert res.success
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "android_indices_visible": True, "android_observations_typed": True, "android_fingerprinted": True}
    [mat] = res.asset_materializations_for_node("android_trajectories")
    md = {k: v.value for k, v in mat.metadata.items()}
    assert (md["sessions"], md["turns"], md["error_turns"], md["failed_sessions"]) == (3, 12, 1, 0)
    assert md["device"] == "droidbot-replay emulator-5554, Android ? (SDK ?)"
    assert "| success | 3 |" in md["outcomes"]
    html = section_android(connect(corpus.root))
    assert html.startswith("<h2>Android recording</h2><p>3 sessions recorded on Android devices through adb")
    assert "<td>album</td><td>emulator-5554</td><td>3</td><td>12</td><td>1</td><td>1</td>" in html


def test_no_device_fails_at_once(device: FakeDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.setenv("FAKE_ADB_DEVICES", "")
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    t0 = time.monotonic()
    res = dg.materialize([android_trajectories], resources={"corpus": corpus, "android_devices": AndroidDevicesResource()},
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not res.success and time.monotonic() - t0 < 9  # the first retry would wait 10 s
    [failure] = [e for e in res.all_events if e.is_step_failure]
    assert "no Android device online: start an emulator" in failure.step_failure_data.user_failure_data.description
