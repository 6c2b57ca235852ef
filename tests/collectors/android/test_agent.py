"""An agent behind an OpenAI-compatible endpoint drives the device (`--policy openai`): it sees the task
with the first screen, acts through the offered tools, and sees each screen after; calls the screen
cannot take are error turns it sees too. The endpoint is a real HTTP server with scripted replies."""

from __future__ import annotations

from pathlib import Path

from collectors.android.collect import collect
from collectors.android.spec import ACTION_SPACE
from pipelines.query import run_query
from tests.collectors.android.conftest import FakeDevice, recorded_screen
from tests.support.openai_server import ScriptedOpenAIServer, answer, tool_call


def test_an_agent_opens_the_folder_list(device: FakeDevice, tmp_path: Path) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text("name: app\npackage: com.yanzhenjie.album.sample\nactivity: .MainActivity\nsettle_s: 0\n"
                    "sessions:\n  - name: folders\n    task: Show the list of picture folders.\n"
                    "    steps: [{do: back}]\n    expect: 'text=\"(1) image\"'\n")
    script = [tool_call("tap", index=10), tool_call("scroll", direction="down"), tool_call("tap", index=99),
              tool_call("tap", index="[46]"), answer("The folders are listed.")]
    out = tmp_path / "c"
    with ScriptedOpenAIServer(script, model="tiny-agent") as srv:
        s = collect([spec], out, policy="openai", openai={"base_url": srv.base_url, "model": "tiny-agent"})
    assert (s.sessions, s.turns, s.error_turns, dict(s.outcomes)) == (1, 4, 2, {"success": 1})
    _, rows = run_query(out, "SELECT u.action, u.tool_name, u.is_error, u.tool_call_id, u.observation, t.agent, "
                             "t.model FROM turns u JOIN trajectories t USING (trajectory_id) ORDER BY u.turn_index")
    assert [r[:4] for r in rows] == [
        ("tap(10)", "tap", False, "call_0_0"), ('scroll({"direction": "down"})', "scroll", True, "call_1_0"),
        ("tap(99)", "tap", True, "call_2_0"), ("tap(46)", "tap", False, "call_3_0")]
    picker = recorded_screen("72eaed")
    assert [r[4] for r in rows] == [
        picker,
        "error: unknown action 'scroll'; the actions are tap, long_press, type, swipe, back, home, enter, launch\n"
        + picker,
        "error: no view [99] on this screen (its views are [0] to [47])\n" + picker,
        recorded_screen("c8d120")]
    assert {(r[5], r[6]) for r in rows} == {("openai-chat", "tiny-agent")}
    first, last = srv.bodies[0], srv.bodies[-1]
    assert [t["function"]["name"] for t in first["tools"]] == [t["name"] for t in ACTION_SPACE]
    assert first["messages"][1]["content"] == "Show the list of picture folders.\n\n" + recorded_screen("08bd71")
    assert [m["content"] for m in last["messages"] if m["role"] == "tool"] == [r[4] for r in rows]
    assert not [ln for ln in device.log() if "input keyevent" in ln]  # the spec's steps are not the agent's
