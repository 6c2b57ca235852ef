"""Dagster: the `mcp_trajectories` asset records real MCP sessions; its contract checks pass; the
report section shows them."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from collectors.mcp_report import section_mcp
from dagster_project.assets import COLLECTION_RETRY
from dagster_project.mcp_assets import McpServersResource, mcp_contract_checks, mcp_trajectories
from dagster_project.resources import CorpusResource
from pipelines.query import connect
from tests.collectors.mcp_support import SPECS, require_servers


def test_asset_definition() -> None:
    assert mcp_trajectories.op.retry_policy == COLLECTION_RETRY
    assert mcp_trajectories.group_names_by_key[mcp_trajectories.key] == "collection"
    assert {c.name for c in mcp_contract_checks.check_specs} == {
        "mcp_raw_reachable", "mcp_faults_labelled", "mcp_fingerprinted", "mcp_observations_typed"}
    assert [p.name for p in McpServersResource().spec_paths()] == [
        "everything-http.yaml", "filesystem.yaml", "git.yaml", "time.yaml"]


def test_materialize_with_checks_and_report_section(tmp_path: Path) -> None:
    require_servers()
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    servers = McpServersResource(specs=[str(SPECS / "filesystem.yaml")], faults="tool_error", fault_rate=1.0, seed=1)
    res = dg.materialize([mcp_trajectories, mcp_contract_checks], resources={"corpus": corpus, "mcp_servers": servers},
                         instance=dg.DagsterInstance.ephemeral())
    assert res.success
    [mat] = res.asset_materializations_for_node("mcp_trajectories")
    md = {k: v.value for k, v in mat.metadata.items()}
    assert (md["sessions"], md["turns"], md["failed_sessions"]) == (3, 9, 0)
    assert "| filesystem | 3 | 9 | 9 |" in md["by_server"]
    assert "| tool_error | 9 |" in md["perturbations"]
    assert md["see_more"].startswith("worldline query ")
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "mcp_raw_reachable": True, "mcp_faults_labelled": True, "mcp_fingerprinted": True, "mcp_observations_typed": True}
    html = section_mcp(connect(corpus.root))
    assert html.startswith("<h2>MCP recording</h2><p>3 sessions recorded live")
    assert "<td>filesystem</td><td>secure-filesystem-server 0.2.0</td><td>stdio</td><td>3</td><td>9</td><td>9</td><td>1</td>" in html
    assert "<td>tool_error</td><td>9</td><td>100.0</td>" in html


def test_all_sessions_failing_fails_the_asset(tmp_path: Path) -> None:
    # invoked directly: through `materialize` the retry policy would retry it 3 times, minutes apart
    spec = tmp_path / "broken.yaml"
    spec.write_text("name: broken\ncommand: /nonexistent/server\nsessions: [{name: s, task: t, steps: [{tool: x}]}]\n")
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    with pytest.raises(dg.Failure, match="every MCP session failed; first: broken/s#0: start_failed"):
        mcp_trajectories(dg.build_asset_context(), corpus=corpus, mcp_servers=McpServersResource(specs=[str(spec)]))


def test_an_error_of_the_settings_fails_at_once(tmp_path: Path) -> None:
    """A spec that does not exist fails the same way every time: it was retried three times
    (10/20/40 s apart) and reported as "Exceeded max_retries"; now it fails at once, saying why."""
    import time

    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(tmp_path / "inbox"))
    t0 = time.monotonic()
    res = dg.materialize([mcp_trajectories], resources={"corpus": corpus, "mcp_servers": McpServersResource(
        specs=[str(tmp_path / "missing.yaml")])}, instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    assert not res.success and time.monotonic() - t0 < 9  # the first retry would wait 10 s
    assert not [e for e in res.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]
    [failure] = [e for e in res.all_events if e.is_step_failure]
    assert failure.step_failure_data.user_failure_data.description.startswith("FileNotFoundError: ")
    assert "missing.yaml" in failure.step_failure_data.user_failure_data.description
