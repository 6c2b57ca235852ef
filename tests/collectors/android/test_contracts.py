"""The Android data contracts pass on what the collector records and fail on data that breaks them: an
index the screen never showed, an error turn without its error line, a session without fingerprint."""

from __future__ import annotations

from pathlib import Path

from collectors.android.collect import SOURCE_FORMAT, collect
from collectors.android.contracts import run_android_contracts
from collectors.android.spec import default_specs
from pipelines.sink import CollectionSink
from schemas.records import Trajectory, Turn, dumps
from tests.collectors.android.conftest import FakeDevice

SCREEN = '[0] android.widget.FrameLayout bounds=[0,0][1440,2560]\n  [1] android.widget.Button text="OK" clickable'


def _turn(index: int, observation: str, is_error: bool = False) -> Turn:
    return Turn(action=f"tap({index})", tool_name="tap", tool_args=dumps({"index": index}), observation=observation,
                observation_kind="view_hierarchy", is_error=is_error)


def _failed(corpus: Path) -> dict[str, dict]:
    return {r.name: r.metadata for r in run_android_contracts(corpus) if not r.passed}


def test_recorded_data_passes(device: FakeDevice, tmp_path: Path) -> None:
    collect(default_specs(), tmp_path / "c", settle_s=0)
    results = {r.name: r for r in run_android_contracts(tmp_path / "c")}
    assert {n: r.passed for n, r in results.items()} == {
        "android_indices_visible": True, "android_observations_typed": True, "android_fingerprinted": True}
    assert results["android_indices_visible"].metadata == {"actions": 10, "not_shown": 0}  # not the error turn nor back()
    assert results["android_observations_typed"].metadata == {"turns": 12, "bad": 0}


def test_each_contract_catches_its_breach(tmp_path: Path) -> None:
    t = Trajectory(domain="android", source_format=SOURCE_FORMAT, native_id="a/s#0@x", record_digest="d" * 64,
                   turns=[_turn(1, SCREEN), _turn(7, SCREEN), _turn(9, SCREEN, is_error=True)],
                   action_space="[]", initial_state=SCREEN, outcome="success", env_fingerprint=dumps({"package": "a.b"}))
    with CollectionSink(tmp_path / "c", run_key="android:test", source="test") as sink:
        sink.add(t, "AndroidLiveCollector")
    failed = _failed(tmp_path / "c")
    assert sorted(failed) == ["android_fingerprinted", "android_indices_visible", "android_observations_typed"]
    assert failed["android_indices_visible"] == {"actions": 2, "not_shown": 1, "example": f"{t.trajectory_id} turn 1"}
    assert failed["android_observations_typed"] == {"turns": 3, "bad": 1}
    assert failed["android_fingerprinted"] == {"sessions": 1, "missing": 1}


def test_worldline_check_runs_them_where_there_is_android_data(device: FakeDevice, tmp_path: Path, sample: Path,
                                                               capsys) -> None:
    from pipelines.cli import main

    corpus = tmp_path / "c"
    assert main(["ingest", str(sample / "swe-agent"), "--out", str(corpus)]) == 0
    capsys.readouterr()
    assert main(["check", str(corpus)]) == 0
    assert "android_" not in capsys.readouterr().out  # no Android data: not its contracts
    collect(default_specs(), corpus, settle_s=0)
    assert main(["check", str(corpus)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split(":")[0] for ln in lines if "android_" in ln] == [
        "PASS  android_indices_visible", "PASS  android_observations_typed", "PASS  android_fingerprinted"]
    assert not [ln for ln in lines if "browser_" in ln or "mcp_" in ln or "sandbox_" in ln]
