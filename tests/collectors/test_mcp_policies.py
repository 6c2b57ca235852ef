"""Policies against real MCP servers: replay of recorded and imported tool-call sequences where the
same tools exist, and an agent behind an OpenAI-compatible endpoint (the scripted loopback server of tests/support)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from collectors.mcp.collect import collect
from collectors.mcp.recorder import record_session
from collectors.mcp.spec import SessionSpec, load_spec
from pipelines.ingest import IngestConfig, ingest
from tests.collectors.mcp_support import DATA, SPECS, obs, require_servers, sessions
from tests.support.openai_server import ScriptedOpenAIServer


def _unpath(text: str | None, workdir: str) -> str | None:
    return text.replace(workdir, "{workdir}") if text else text


def test_replay_of_recorded_sessions_reproduces_the_payloads(tmp_path: Path) -> None:
    require_servers()
    git = SPECS / "git.yaml"
    collect([git], tmp_path / "a", only=["inspect", "commit-notes"])
    summary = collect([git], tmp_path / "b", replay_corpus=tmp_path / "a")
    assert (summary.sessions, summary.failed) == (2, 0)
    a, b = sessions(tmp_path / "a"), sessions(tmp_path / "b")
    by_id = {t["trajectory_id"]: t for t in a.values()}
    assert sorted(by_id[t["metadata"]["replay_of"]]["metadata"]["session"] for t in b.values()) == ["commit-notes", "inspect"]
    for t in b.values():
        src = by_id[t["metadata"]["replay_of"]]
        assert (t["agent"], t["outcome"], t["task"]) == ("replay", "completed", src["task"])
        assert t["env_fingerprint"]["tool_schema_sha256"] == src["env_fingerprint"]["tool_schema_sha256"]
        wa, wb = src["metadata"]["workdir"], t["metadata"]["workdir"]
        assert wa != wb
        assert [(u["tool_name"], _unpath(u["tool_args"], wb)) for u in t["turns"]] == \
               [(u["tool_name"], _unpath(u["tool_args"], wa)) for u in src["turns"]]
        # fixed git dates: the same commit hashes, so the very same observations
        assert [_unpath(u["observation"], wb) for u in t["turns"]] == [_unpath(u["observation"], wa) for u in src["turns"]]
    commit = next(t for t in b.values() if len(t["turns"]) == 4)
    assert obs(commit["turns"][2])["content"][0]["text"] == \
        "Changes committed successfully with hash 02cd83ba2875ebe0bc0452b3795c84922323fdd1"


def test_replay_of_imported_traces_where_the_tools_exist(tmp_path: Path) -> None:
    require_servers()
    corpus = tmp_path / "imported"
    ingest([DATA / "imported_chat.jsonl"], corpus, IngestConfig(), progress=False)
    summary = collect([SPECS / "time.yaml", SPECS / "filesystem.yaml"], tmp_path / "out", replay_corpus=corpus)
    s = sessions(tmp_path / "out")
    # the time conversation replays on the time server; the web_search one has no server with its tool
    assert summary.sessions == 1 and list(s) == [next(iter(s))] and next(iter(s)).startswith("time/replay-")
    [t] = s.values()
    assert t["task"] == "What time is it in Tokyo, and what is 08:15 in Paris in New York time?"
    assert [(u["tool_name"], orjson.loads(u["tool_args"])) for u in t["turns"]] == [
        ("get_current_time", {"timezone": "Asia/Tokyo"}),
        ("convert_time", {"source_timezone": "Europe/Paris", "time": "08:15", "target_timezone": "America/New_York"})]
    assert t["turns"][0]["thought"] == "Let me check the clock first."
    assert obs(t["turns"][0])["structuredContent"]["timezone"] == "Asia/Tokyo"
    assert obs(t["turns"][1])["structuredContent"]["time_difference"] in ("-6.0h", "-5.0h")  # DST weeks differ
    assert [u["is_error"] for u in t["turns"]] == [False, False]


def test_openai_compatible_agent_gets_the_server_tools(tmp_path: Path) -> None:
    require_servers()
    spec = dataclasses.replace(load_spec(SPECS / "time.yaml"), sessions=[])
    task = "What is 18:00 in Sydney in Lisbon time? Then tell me the time in Nairobi."
    script = [
        {"content": "Converting first.", "tool_calls": [{"name": "convert_time", "arguments": {
            "source_timezone": "Australia/Sydney", "time": "18:00", "target_timezone": "Europe/Lisbon"}}]},
        {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "Africa/Nairobi"}}]},
        {"content": "Done: see above."},
    ]
    with ScriptedOpenAIServer(script) as chat:
        r = record_session(spec, SessionSpec("agent", task, None, "openai", max_turns=6),
                           base_url=chat.base_url, model="scripted-model")
    t = r.trajectory
    assert (r.outcome, t.agent, t.model, len(t.turns)) == ("completed", "openai-chat", "scripted-model", 2)
    assert [(u.tool_name, u.tool_call_id, u.thought) for u in t.turns] == [
        ("convert_time", "call_0_0", "Converting first."), ("get_current_time", "call_1_0", None)]
    assert t.turns[0].action == ('convert_time({"source_timezone":"Australia/Sydney","target_timezone":'
                                 '"Europe/Lisbon","time":"18:00"})')
    assert orjson.loads(t.turns[1].observation)["structuredContent"]["timezone"] == "Africa/Nairobi"
    # the endpoint was offered the server's tools in function-calling form, and got each result back
    tools = orjson.loads(t.action_space)
    assert len(chat.bodies) == 3
    assert chat.bodies[0]["tools"] == [{"type": "function", "function": {
        "name": x["name"], "description": x["description"], "parameters": x["inputSchema"]}} for x in tools]
    assert [x["function"]["name"] for x in chat.bodies[0]["tools"]] == ["get_current_time", "convert_time"]
    assert chat.bodies[0]["messages"][1] == {"role": "user", "content": task}
    assert chat.bodies[1]["messages"][-1] == {"role": "tool", "tool_call_id": "call_0_0", "content": t.turns[0].observation}
    assert chat.bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "call_1_0", "content": t.turns[1].observation}


def test_agent_turn_limit_and_unreachable_endpoint(tmp_path: Path) -> None:
    require_servers()
    spec = dataclasses.replace(load_spec(SPECS / "time.yaml"), sessions=[])
    loop = [{"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "Etc/UTC"}}]}] * 10
    with ScriptedOpenAIServer(loop) as chat:
        r = record_session(spec, SessionSpec("loop", "loop forever", None, "openai", max_turns=2),
                           base_url=chat.base_url, model="m")
    assert (r.outcome, len(r.trajectory.turns)) == ("max_turns", 2)
    with ScriptedOpenAIServer([]) as chat:
        url = chat.base_url
    from collectors.policies import OpenAIChatPolicy

    dead = OpenAIChatPolicy(base_url=url, model="m", retries=0, timeout_s=2)
    r = record_session(spec, SessionSpec("dead", "t", None, "openai"), policy=dead)
    assert r.outcome == "policy_error" and r.error.startswith(f"policy openai-chat: EndpointError: {url}: unreachable")
    assert (r.trajectory.turns[-1].kind, r.trajectory.turns[-1].action, r.trajectory.turns[-1].is_error) == ("message", "policy", True)


@pytest.mark.parametrize("name", ["missing"])
def test_openai_policy_needs_an_endpoint(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORLDLINE_AGENT_BASE_URL", raising=False)
    from collectors.mcp.recorder import make_policy

    with pytest.raises(ValueError, match="needs base_url and model"):
        make_policy(SessionSpec(name, "t", None, "openai"))
