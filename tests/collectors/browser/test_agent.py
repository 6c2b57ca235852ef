"""An agent behind an OpenAI-compatible endpoint drives the browser (`--policy openai`): it sees the
task with the start page's tree, acts through the offered tools, and sees each tree after; calls the
page cannot take are error turns it sees too. The endpoint is a real HTTP server with scripted replies."""

from __future__ import annotations

import json
from pathlib import Path

from collectors.browser.collect import collect
from collectors.browser.session import FaultPlan
from collectors.browser.spec import ACTION_SPACE, default_specs
from pipelines.cli import main
from pipelines.query import run_query
from tests.support.openai_server import ScriptedOpenAIServer, answer, tool_call


def test_an_agent_buys_socks(tmp_path: Path) -> None:
    script = [tool_call("fill", ref="e9", value="socks"), tool_call("press", ref="e9", key="Enter"),
              tool_call("click", ref="f1e11"), tool_call("select_option", ref="f2e11", value="Large"),
              tool_call("scroll", direction="down"), tool_call("fill", ref="f2e10"),
              tool_call("click", ref="f2e12"), answer("One large pair of wool socks is in the cart.")]
    out = tmp_path / "c"
    with ScriptedOpenAIServer(script, model="tiny-agent") as srv:
        s = collect(default_specs(), out, only=["search-socks"], policy="openai",
                    openai={"base_url": srv.base_url, "model": "tiny-agent"})
    assert (s.sessions, s.turns, s.error_turns, dict(s.outcomes)) == (1, 7, 2, {"success": 1})
    cols, rows = run_query(out, "SELECT u.action, u.tool_name, u.is_error, u.tool_call_id, left(u.observation, 120), "
                                "t.agent, t.model FROM turns u JOIN trajectories t USING (trajectory_id) ORDER BY u.turn_index")
    assert [r[:4] for r in rows] == [
        ("fill('e9', 'socks')", "fill", False, "call_0_0"), ("press('e9', 'Enter')", "press", False, "call_1_0"),
        ("click('f1e11')", "click", False, "call_2_0"), ("select_option('f2e11', 'Large')", "select_option", False, "call_3_0"),
        ('scroll({"direction": "down"})', "scroll", True, "call_4_0"), ('fill({"ref": "f2e10"})', "fill", True, "call_5_0"),
        ("click('f2e12')", "click", False, "call_6_0")]
    assert rows[4][4].startswith("error: unknown action 'scroll'; the actions are click, fill, press, select_option")
    assert rows[5][4].startswith("error: fill needs value as text\nurl: http://shop.test/product.html?id=socks\n")
    assert {(r[5], r[6]) for r in rows} == {("openai-chat", "tiny-agent")}
    first, last = srv.bodies[0], srv.bodies[-1]
    assert [t["function"]["name"] for t in first["tools"]] == [t["name"] for t in ACTION_SPACE]
    task = first["messages"][1]["content"]
    assert task.startswith("Find the socks with the search box and add one large pair to the cart.\n\n"
                           "url: http://shop.test/index.html\ntitle: Corner Shop\n")
    assert 'searchbox "Search products" [ref=e9]' in task
    tool_msgs = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    _, obs = run_query(out, "SELECT observation FROM turns ORDER BY turn_index")
    assert tool_msgs == [o for (o,) in obs]  # the agent saw exactly what was recorded


def test_an_agent_endpoint_that_fails(tmp_path: Path, capsys) -> None:
    out = tmp_path / "c"
    argv = ["collect", "browser", "--out", str(out), "--session", "order-mugs", "--policy", "openai",
            "--agent-base-url", "http://127.0.0.1:9/v1", "--agent-model", "m", "--quiet"]
    assert main(argv) == 3
    printed = capsys.readouterr().out
    assert "outcomes: agent_error 1" in printed and "failed: shop/order-mugs#0: agent endpoint: " in printed
    (row,) = run_query(out, "SELECT num_turns, outcome, initial_state IS NOT NULL FROM trajectories")[1]
    assert row == (0, "agent_error", True)
    # no endpoint at all: refused before chromium starts, nothing written
    assert main(["collect", "browser", "--out", str(tmp_path / "d"), "--policy", "openai"]) == 1
    assert "--policy openai needs an agent endpoint: --agent-base-url and --agent-model" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


def test_an_agent_meets_a_fault_and_only_its_own_actions_are_recorded(tmp_path: Path) -> None:
    """The scripted sessions' reloads after an injected 503 are theirs: an agent decides for itself."""
    out = tmp_path / "c"
    with ScriptedOpenAIServer([tool_call("click", ref="e18"), answer("The shop is down.")], model="m") as srv:
        s = collect(default_specs(), out, only=["checkout-mistakes"], policy="openai",
                    openai={"base_url": srv.base_url, "model": "m"}, faults=FaultPlan(("http_error",), 1.0, 0))
    assert (s.turns, dict(s.perturbations), dict(s.outcomes)) == (1, {"http_error": 1}, {"failure": 1})
    assert run_query(out, "SELECT action, tool_call_id FROM turns")[1] == [("click('e18')", "call_0_0")]


def test_tools_offered_match_the_action_space() -> None:
    assert json.loads(json.dumps(ACTION_SPACE))[1] == {
        "name": "fill", "description": "fill(ref, value): type value into a text field, replacing its content",
        "inputSchema": {"type": "object", "properties": {
            "ref": {"type": "string", "description": "the element's ref in the tree, e.g. e12"}, "value": {"type": "string"}},
            "required": ["ref", "value"]}}
