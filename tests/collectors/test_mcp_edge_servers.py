"""Valid MCP servers at the edges of what the protocol allows: integers past 64 bits in a tool schema
and a result, a server with prompts and no tools capability, and one that lists no tool. Each is
recorded as what it is, and the run goes on with the other servers."""

from __future__ import annotations

import sys
from pathlib import Path

from collectors.mcp.collect import collect
from collectors.mcp.contracts import run_mcp_contracts
from pipelines.query import run_query
from tests.collectors.mcp_support import obs, sessions, write_test_server


def _spec(d: Path, server: Path, mode: str, steps: str) -> Path:
    p = d / f"{mode}.yaml"
    p.write_text(f"""name: {mode}
command: "{sys.executable}"
args: ["{server}", "--mode", "{mode}"]
timeouts: {{initialize_s: 5, call_s: 5, stop_grace_s: 0.3}}
sessions:
  - name: s
    task: t
    steps: [{steps}]
""")
    return p


def test_edge_servers_are_recorded_as_they_answer(tmp_path: Path) -> None:
    server = write_test_server(tmp_path)
    specs = [_spec(tmp_path, server, "bigint", "{tool: echo, args: {text: a}}, {tool: echo, args: {text: b}}"),
             _spec(tmp_path, server, "prompts-only", "{prompt: greet}"),
             _spec(tmp_path, server, "empty-tools", "{prompt: greet}"),
             _spec(tmp_path, server, "ok", "{tool: echo, args: {text: c}}")]
    summary = collect(specs, tmp_path / "c")
    assert (summary.failures, dict(summary.outcomes)) == ([], {"completed": 4})
    got = {t["native_id"].split("/")[0]: t for t in sessions(tmp_path / "c").values()}
    assert set(got) == {"bigint", "prompts-only", "empty-tools", "ok"}
    # the 64-bit limit of orjson crashed the run (the tool list) or ended the session (the result)
    # (as text: orjson, which `sessions` parses with, reads such an integer as a float)
    [(space,)] = run_query(tmp_path / "c", "SELECT action_space FROM trajectories WHERE native_id LIKE 'bigint/%'")[1]
    assert '"maximum":340282366920938463463374607431768211455' in space
    observations = run_query(tmp_path / "c", """SELECT u.observation FROM turns u JOIN trajectories t USING (trajectory_id)
                                                WHERE t.native_id LIKE 'bigint/%' ORDER BY u.turn_index""")[1]
    assert [o for (o,) in observations] == [
        '{"content":[{"text":"52!","type":"text"}],'
        '"structuredContent":{"value":80658175170943878571660636856403766975289505440883277824000000000000}}'] * 2
    # no tools capability: tools/list is not asked (it failed the session as connection_closed)
    for name in ("prompts-only", "empty-tools"):
        t = got[name]
        assert (t["action_space"], [u["action"] for u in t["turns"]]) == ([], ['prompts/get({"arguments":{},"name":"greet"})'])
        assert obs(t["turns"][0])["messages"][0]["content"]["text"] == "hello"
    failed = [r.line() for r in run_mcp_contracts(tmp_path / "c") if not r.passed]
    assert failed == []


def test_a_server_that_cannot_be_probed_for_replay_is_a_failed_session_not_the_end_of_the_run(tmp_path: Path) -> None:
    """`--replay` probes each server's tools first; one that failed raised and ended the whole run (no
    corpus, no summary), where without --replay a server that does not start is a failed session."""
    from tests.collectors.mcp_support import DATA

    server = write_test_server(tmp_path)
    ok = _spec(tmp_path, server, "ok", "{tool: echo, args: {text: c}}, {tool: echo, args: {text: d}}")
    collect([ok], tmp_path / "recorded")
    broken = tmp_path / "broken.yaml"
    broken.write_text(f"""name: broken
command: "{sys.executable}"
args: ["{DATA / 'bad_server.py'}", "--mode", "exit"]
timeouts: {{initialize_s: 2, call_s: 2, stop_grace_s: 0.3}}
sessions: [{{name: s, task: t, steps: [{{tool: echo}}]}}]
""")
    summary = collect([broken, ok], tmp_path / "c", replay_corpus=tmp_path / "recorded")
    assert (summary.sessions, dict(summary.outcomes)) == (2, {"server_died": 1, "completed": 1})
    [why] = summary.failures
    assert why.startswith("broken/probe#0: server_died: broken.yaml (broken): server exited with code 3"), why
    got = {t["native_id"].split("@")[0]: t for t in sessions(tmp_path / "c").values()}
    assert [u["action"] for u in got["ok/" + next(k.split("/", 1)[1] for k in got if k.startswith("ok/"))]["turns"]] == [
        'echo({"text":"c"})', 'echo({"text":"d"})']


def test_a_prompt_only_trajectory_is_replayed_only_on_servers_with_prompts(tmp_path: Path) -> None:
    """`prompts/get` and `resources/read` counted as offered by every server: a recording of prompts
    alone was replayed on a tools-only server, every turn an "Unknown prompt" error, the session `completed`."""
    server = write_test_server(tmp_path)
    collect([_spec(tmp_path, server, "prompts-only", "{prompt: greet}")], tmp_path / "recorded")
    ok = _spec(tmp_path, server, "ok", "{tool: echo, args: {text: c}}")  # tools only
    with_prompts = _spec(tmp_path, server, "empty-tools", "{prompt: greet}")
    summary = collect([ok, with_prompts], tmp_path / "c", replay_corpus=tmp_path / "recorded")
    assert (summary.sessions, dict(summary.outcomes)) == (1, {"completed": 1})
    [t] = sessions(tmp_path / "c").values()
    assert t["native_id"].startswith("empty-tools/") and [u["action"] for u in t["turns"]] == [
        'prompts/get({"arguments":{},"name":"greet"})']
