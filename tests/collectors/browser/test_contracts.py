"""The browser data contracts fail on data that breaks them: a ref the page never showed, an unlabelled
503 page, an error turn without its error line, a session without fingerprint."""

from __future__ import annotations

from pathlib import Path

from collectors.browser.collect import SOURCE_FORMAT
from collectors.browser.contracts import run_browser_contracts
from pipelines.sink import CollectionSink
from schemas.records import Trajectory, Turn, dumps

TREE = 'url: http://t.test/\ntitle: T\n- button "Go" [ref=e2]'


def _turn(action: str, ref: str | None, observation: str, is_error: bool = False, **kw) -> Turn:
    return Turn(action=action, tool_name="click", tool_args=dumps({"ref": ref}) if ref else None, observation=observation,
                observation_kind="accessibility_tree", is_error=is_error, **kw)


def _write(corpus: Path, turns: list[Turn], fingerprint: dict | None = None) -> None:
    t = Trajectory(domain="web", source_format=SOURCE_FORMAT, native_id="t/s#0@x", record_digest="d" * 64, turns=turns,
                   action_space="[]", initial_state=TREE, outcome="success",
                   env_fingerprint=dumps(fingerprint if fingerprint is not None else {"browser": "chromium 1",
                                                                                      "site_sha256": "ab"}))
    with CollectionSink(corpus, run_key="browser:test", source="test") as sink:
        sink.add(t, "BrowserLiveCollector")


def _failed(corpus: Path) -> dict[str, dict]:
    return {r.name: r.metadata for r in run_browser_contracts(corpus) if not r.passed}


def test_good_data_passes(tmp_path: Path) -> None:
    _write(tmp_path / "c", [_turn("click('e2')", "e2", TREE), _turn("click('e9')", "e9", "error: no element\n" + TREE, True)])
    assert _failed(tmp_path / "c") == {}


def test_each_contract_catches_its_breach(tmp_path: Path) -> None:
    _write(tmp_path / "c", [
        _turn("click('e7')", "e7", TREE),  # e7 was never shown
        _turn("click('e2')", "e2", "url: http://t.test/\ntitle: 503 Service Unavailable\n- heading"),  # unlabelled 503
        _turn("click('e9')", "e9", TREE, is_error=True),  # an error turn without its error line
    ], fingerprint={"browser": "chromium 1"})
    failed = _failed(tmp_path / "c")
    assert sorted(failed) == ["browser_faults_labelled", "browser_fingerprinted", "browser_observations_typed",
                              "browser_refs_visible"]
    assert (failed["browser_refs_visible"]["actions"], failed["browser_refs_visible"]["not_shown"]) == (2, 1)
    assert failed["browser_faults_labelled"]["unlabelled"] == 1
    assert failed["browser_observations_typed"]["bad"] == 1
    assert failed["browser_fingerprinted"]["missing"] == 1
