"""Dagster: the `browser_trajectories` asset records the shop's sessions in chromium, and a missing
chromium fails it at once, saying what to install."""

from __future__ import annotations

import time
from pathlib import Path

import dagster as dg

from collectors.browser.report import section_browser
from dagster_project.assets import COLLECTION_RETRY
from dagster_project.browser_assets import BrowserSitesResource, browser_contract_checks, browser_trajectories
from dagster_project.resources import CorpusResource
from pipelines.query import connect


def test_materialize(tmp_path: Path) -> None:
    assert browser_trajectories.op.retry_policy == COLLECTION_RETRY
    assert [p.name for p in BrowserSitesResource().spec_paths()] == ["shop.yaml"]
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    sites = BrowserSitesResource(faults="http_error", fault_rate=0.3, seed=0)
    res = dg.materialize([browser_trajectories, browser_contract_checks],
                         resources={"corpus": corpus, "browser_sites": sites}, instance=dg.DagsterInstance.ephemeral())
    assert res.success
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "browser_refs_visible": True, "browser_faults_labelled": True, "browser_observations_typed": True,
        "browser_fingerprinted": True}
    [mat] = res.asset_materializations_for_node("browser_trajectories")
    md = {k: v.value for k, v in mat.metadata.items()}
    assert (md["sessions"], md["error_turns"], md["failed_sessions"]) == (4, 2, 0)
    assert "| success | 3 |" in md["outcomes"] and "| failure | 1 |" in md["outcomes"]
    perturbed = int(md["perturbations"].split("| http_error | ")[1].split(" ")[0])
    assert md["turns"] == 29 + perturbed  # a reload after each injected 503
    html = section_browser(connect(corpus.root))
    assert html.startswith("<h2>Browser recording</h2><p>4 sessions recorded in headless chromium")
    assert f"<td>shop</td><td>{md['browser']}</td><td>4</td><td>{md['turns']}</td><td>2</td>" in html
    assert md["browser"].startswith("chromium ")


def test_no_chromium_fails_at_once(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WORLDLINE_CHROMIUM", str(tmp_path / "no-chromium"))
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    t0 = time.monotonic()
    res = dg.materialize([browser_trajectories], resources={"corpus": corpus, "browser_sites": BrowserSitesResource()},
                         instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not res.success and time.monotonic() - t0 < 9  # the first retry would wait 10 s
    [failure] = [e for e in res.all_events if e.is_step_failure]
    assert "no-chromium is missing" in failure.step_failure_data.user_failure_data.description
