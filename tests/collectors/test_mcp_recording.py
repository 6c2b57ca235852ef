"""Live recording from four real MCP servers (git and time from PyPI over stdio, the npm filesystem
server over stdio, the npm everything server over streamable HTTP), without faults: tool schemas,
fingerprints, exact payloads, error flags, raw JSON-RPC, process cleanup, the CLI."""

from __future__ import annotations

import datetime as dt
import hashlib
import zoneinfo
from pathlib import Path

import orjson
import pytest

from collectors.mcp.collect import McpSummary, collect
from collectors.mcp.contracts import run_mcp_contracts
from collectors.mcp.raw import read_raw
from pipelines.cli import main as cli_main
from pipelines.contracts import run_contracts
from pipelines.query import run_query
from tests.collectors.mcp_support import SPECS, alive, obs, require_servers, sessions

GIT_TOOLS = ["git_status", "git_diff_unstaged", "git_diff_staged", "git_diff", "git_commit", "git_add", "git_reset",
             "git_log", "git_create_branch", "git_checkout", "git_show", "git_branch"]
FS_TOOLS = ["read_file", "read_text_file", "read_media_file", "read_multiple_files", "write_file", "edit_file",
            "create_directory", "list_directory", "list_directory_with_sizes", "directory_tree", "move_file",
            "search_files", "get_file_info", "list_allowed_directories"]
HEAD = "4a42035eb3b744fce07944357147f2245b79ffe7"  # fixed author, committer and dates in git.yaml
ROOT_COMMIT = "813d97c1af31719889e7fb67319076539ffb314a"


def _text(text: str, is_error: bool | None = False) -> str:
    d: dict = {"content": [{"type": "text", "text": text}]}
    if is_error is not None:
        d["isError"] = is_error
    return orjson.dumps(d, option=orjson.OPT_SORT_KEYS).decode()


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, McpSummary, dict]:
    require_servers()
    out = tmp_path_factory.mktemp("mcp") / "corpus"
    summary = collect(sorted(SPECS.glob("*.yaml")), out, concurrency=2)
    return out, summary, sessions(out)


def test_every_session_completed(recorded) -> None:
    _, summary, s = recorded
    assert sorted(s) == ["everything/resources-and-prompts#0", "everything/tools#0", "filesystem/edit#0",
                         "filesystem/explore#0", "filesystem/outside-and-missing#0", "git/branch-work#0",
                         "git/commit-notes#0", "git/inspect#0", "time/convert#0", "time/now-and-bad-zone#0"]
    assert (summary.sessions, summary.turns, summary.failed) == (10, 31, 0)
    assert dict(summary.outcomes) == {"completed": 10}
    assert {k: [u["tool_name"] for u in t["turns"]] for k, t in s.items() if k.startswith("everything")} == {
        "everything/tools#0": ["echo", "get-sum", "get-structured-content"],
        "everything/resources-and-prompts#0": ["resources/read", "prompts/get", "prompts/get"]}
    for t in s.values():
        assert (t["domain"], t["source_format"], t["agent"], t["importer"]) == ("mcp", "mcp-live", "scripted", "McpLiveCollector")
        assert all(u["perturbation"] is None and u["kind"] == "env" for u in t["turns"])


def test_action_space_and_fingerprint(recorded) -> None:
    _, _, s = recorded
    expect = {"git": ("mcp-git", "2026.10.19", "stdio", "mcp-server-git==2026.10.19", GIT_TOOLS),
              "time": ("mcp-time", "2026.10.19", "stdio", "mcp-server-time==2026.10.19", ["get_current_time", "convert_time"]),
              "filesystem": ("secure-filesystem-server", "0.2.0", "stdio", "@modelcontextprotocol/server-filesystem@2026.8.31", FS_TOOLS)}
    for key, t in s.items():
        server = t["metadata"]["server"]
        fp = t["env_fingerprint"]
        tools = t["action_space"]
        canonical = orjson.dumps(sorted(tools, key=lambda x: x["name"]), option=orjson.OPT_SORT_KEYS)
        assert fp["tool_schema_sha256"] == hashlib.sha256(canonical).hexdigest(), key
        assert (fp["protocol_version"], fp["tools"]) == ("2025-11-25", len(tools))
        if server in expect:
            name, version, transport, package, names = expect[server]
            assert (fp["server_name"], fp["server_version"], fp["transport"], fp["package"]) == (name, version, transport, package)
            assert [x["name"] for x in tools] == names
    git = s["git/inspect#0"]["action_space"]
    assert next(x for x in git if x["name"] == "git_add")["inputSchema"]["properties"]["files"] == {
        "items": {"type": "string"}, "minItems": 1, "title": "Files", "type": "array"}
    conv = next(x for x in s["time/convert#0"]["action_space"] if x["name"] == "convert_time")
    assert conv["inputSchema"]["required"] == ["source_timezone", "time", "target_timezone"]
    assert sorted(conv["outputSchema"]["properties"]) == ["source", "target", "time_difference"]
    ev = s["everything/tools#0"]
    assert ev["env_fingerprint"]["transport"] == "http"
    assert (ev["env_fingerprint"]["server_name"], ev["env_fingerprint"]["server_version"]) == ("mcp-servers/everything", "2.0.0")
    weather = next(x for x in ev["action_space"] if x["name"] == "get-structured-content")["outputSchema"]
    assert (sorted(weather["properties"]), weather["required"]) == (["conditions", "humidity", "temperature"],
                                                                    ["temperature", "conditions", "humidity"])
    # resources and prompts go into the initial state when the server offers them
    init = s["everything/resources-and-prompts#0"]["initial_state"]
    assert [p["name"] for p in init["prompts"]] == ["simple-prompt", "args-prompt", "completable-prompt", "resource-prompt"]
    assert init["resources"][0]["uri"] == "demo://resource/static/document/architecture.md"
    git_init = s["git/inspect#0"]["initial_state"]  # mcp-server-git advertises both, and lists none
    assert (git_init["resources"], git_init["prompts"], git_init["server_info"]) == ([], [], {"name": "mcp-git", "version": "2026.10.19"})


def test_git_payloads_are_exact(recorded) -> None:
    _, _, s = recorded
    inspect = [u["observation"] for u in s["git/inspect#0"]["turns"]]
    assert inspect[0] == _text('Repository status:\nOn branch main\nUntracked files:\n  (use "git add <file>..." to include '
                               'in what will be committed)\n\tNOTES.txt\n\nnothing added to commit but untracked files '
                               'present (use "git add" to track)')
    assert inspect[1] == _text(f"Commit history:\nCommit: {HEAD}\nAuthor: Worldline Bot\nDate: 2026-01-15 10:00:00+00:00\n"
                               f"Message: Punctuate the greeting\n\n\nCommit: {ROOT_COMMIT}\nAuthor: Worldline Bot\n"
                               "Date: 2026-01-15 10:00:00+00:00\nMessage: Initial commit\n\n")
    assert obs(s["git/inspect#0"]["turns"][2])["content"][0]["text"].startswith(f"commit {HEAD}\nAuthor: Worldline Bot")
    commit = [u["observation"] for u in s["git/commit-notes#0"]["turns"]]
    assert commit[0] == _text("Files staged successfully")
    assert commit[2] == _text("Changes committed successfully with hash 02cd83ba2875ebe0bc0452b3795c84922323fdd1")
    branch = s["git/branch-work#0"]["turns"]
    assert [u["is_error"] for u in branch] == [False, False, False, True]
    assert branch[2]["observation"] == _text("* feature/tests\n  main")
    assert branch[3]["observation"] == _text('Error executing tool git_show: "Blob or Tree named \'missing.txt\' not found"', True)
    assert branch[3]["observation_kind"] == "tool_result"  # an in-band error, not a protocol error
    assert branch[3]["metadata"]["in_band_error"] is True and "protocol_error" not in branch[3]["metadata"]
    assert branch[0]["tool_args"] == orjson.dumps({"branch_name": "feature/tests", "repo_path":
                                                   s["git/branch-work#0"]["metadata"]["workdir"] + "/repo"}).decode()


def test_filesystem_payloads_and_errors(recorded) -> None:
    _, _, s = recorded
    t = s["filesystem/explore#0"]
    files = t["metadata"]["workdir"] + "/files"
    readme = "# Project\n\nNotes for the team.\n"
    assert [obs(u) for u in t["turns"]] == [
        {"content": [{"type": "text", "text": f"Allowed directories:\n{files}"}],
         "structuredContent": {"content": f"Allowed directories:\n{files}"}},
        {"content": [{"type": "text", "text": "[FILE] README.md\n[DIR] data\n[DIR] src"}],
         "structuredContent": {"content": "[FILE] README.md\n[DIR] data\n[DIR] src"}},
        {"content": [{"type": "text", "text": readme}], "structuredContent": {"content": readme}},
        {"content": [{"type": "text", "text": f"{files}/src/main.py\n{files}/src/util.py"}],
         "structuredContent": {"content": f"{files}/src/main.py\n{files}/src/util.py"}},
    ]
    assert [u["metadata"]["has_structured_content"] for u in t["turns"]] == [True] * 4
    bad = s["filesystem/outside-and-missing#0"]
    bfiles = bad["metadata"]["workdir"] + "/files"
    assert [u["is_error"] for u in bad["turns"]] == [True, True, True]
    assert bad["turns"][0]["observation"] == _text(
        f"Access denied - path outside allowed directories: /etc/hostname not in {bfiles}", True)
    assert bad["turns"][1]["observation"] == _text(f"ENOENT: no such file or directory, open '{bfiles}/nope.txt'", True)
    edit = s["filesystem/edit#0"]["turns"]
    assert obs(edit[1])["structuredContent"] == {"content": "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"}


def test_time_payloads(recorded) -> None:
    _, _, s = recorded
    today = dt.datetime.now(zoneinfo.ZoneInfo("America/New_York")).date()
    ny = dt.datetime.combine(today, dt.time(9, 30), zoneinfo.ZoneInfo("America/New_York"))
    for turn, target in zip(s["time/convert#0"]["turns"], ["Asia/Tokyo", "Europe/London"], strict=True):
        o = obs(turn)
        there = ny.astimezone(zoneinfo.ZoneInfo(target))
        hours = (there.utcoffset() - ny.utcoffset()).total_seconds() / 3600
        assert o["structuredContent"]["source"] == {"timezone": "America/New_York", "datetime": ny.isoformat(),
                                                    "day_of_week": ny.strftime("%A"), "is_dst": bool(ny.dst())}
        assert o["structuredContent"]["target"]["datetime"] == there.isoformat()
        assert o["structuredContent"]["time_difference"] == f"{hours:+.1f}h"
        assert orjson.loads(o["content"][0]["text"]) == o["structuredContent"]
        assert o["isError"] is False and turn["is_error"] is False
    bad = s["time/now-and-bad-zone#0"]["turns"]
    assert [u["is_error"] for u in bad] == [False, True, True]
    assert sorted(obs(bad[0])["structuredContent"]) == ["datetime", "day_of_week", "is_dst", "timezone"]
    assert bad[1]["observation"] == _text("Error executing tool convert_time: Invalid timezone: "
                                          "'No time zone found with key Mars/Olympus_Mons'", True)
    assert bad[2]["observation"] == _text("Error executing tool convert_time: Invalid time format. "
                                          "Expected HH:MM [24-hour format]", True)


def test_everything_over_http(recorded) -> None:
    _, _, s = recorded
    tools = [u["observation"] for u in s["everything/tools#0"]["turns"]]
    assert tools[0] == _text("Echo: hello world", None)
    assert tools[1] == _text("The sum of 19 and 23 is 42.", None)
    assert orjson.loads(tools[2]) == {
        "content": [{"type": "text", "text": '{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}'}],
        "structuredContent": {"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}}
    rp = s["everything/resources-and-prompts#0"]["turns"]
    assert rp[0]["action"] == 'resources/read({"uri":"demo://resource/static/document/architecture.md"})'
    doc = obs(rp[0])["contents"][0]
    assert (doc["uri"], doc["mimeType"]) == ("demo://resource/static/document/architecture.md", "text/markdown")
    assert doc["text"].startswith("# Everything Server – Architecture\n")
    assert obs(rp[1]) == {"messages": [{"role": "user", "content": {"type": "text",
                                                                    "text": "This is a simple prompt without arguments."}}]}
    assert obs(rp[2])["messages"][0]["content"]["text"] == "What's weather in Paris, Ile-de-France?"
    assert [u["metadata"]["method"] for u in rp] == ["resources/read", "prompts/get", "prompts/get"]


def test_raw_jsonrpc_is_kept_per_turn(recorded) -> None:
    out, _, s = recorded
    t = s["git/inspect#0"]
    raw = read_raw(out, t["trajectory_id"], 0)
    assert [m["dir"] for m in raw] == ["c2s", "s2c"]
    req, resp = orjson.loads(raw[0]["raw"]), orjson.loads(raw[1]["raw"])
    assert (req["method"], req["params"]["name"], req["params"]["arguments"]) == (
        "tools/call", "git_status", {"repo_path": t["metadata"]["workdir"] + "/repo"})
    assert resp["id"] == req["id"] == t["turns"][0]["metadata"]["jsonrpc_id"]
    assert orjson.dumps(resp["result"], option=orjson.OPT_SORT_KEYS).decode() == t["turns"][0]["observation"]
    assert raw[1]["t"] > raw[0]["t"]
    session = read_raw(out, t["trajectory_id"], None)
    methods = [orjson.loads(m["raw"]).get("method") for m in session if m["dir"] == "c2s"]
    assert methods == ["initialize", "notifications/initialized", "tools/list", "resources/list", "prompts/list"]
    init = orjson.loads(next(m["raw"] for m in session if m["dir"] == "s2c"))
    assert init["result"]["serverInfo"] == {"name": "mcp-git", "version": "2026.10.19"}
    # HTTP sessions are logged too, with their resources/prompts listings
    ev = s["everything/resources-and-prompts#0"]
    ev_methods = [orjson.loads(m["raw"]).get("method") for m in read_raw(out, ev["trajectory_id"], None) if m["dir"] == "c2s"]
    assert ev_methods == ["initialize", "notifications/initialized", "tools/list", "resources/list", "prompts/list"]
    n = run_query(out, "SELECT count(*), count(*) FILTER (WHERE turn_index IS NULL), sum(n_messages) > 0 FROM mcp_raw")[1][0]
    assert n == (31 + 10, 10, True)


def test_turn_timing_and_ids(recorded) -> None:
    _, _, s = recorded
    for t in s.values():
        for u in t["turns"]:
            m = u["metadata"]
            assert u["duration_s"] == m["latency_s"] > 0
            assert 0 < m["server_latency_s"] <= m["latency_s"] + 0.05
            assert u["tool_call_id"] == str(m["jsonrpc_id"]) and u["locator"] == f"jsonrpc:{m['jsonrpc_id']}"
            assert u["started_at"] is not None


def test_no_server_process_outlives_its_session(recorded) -> None:
    _, summary, s = recorded
    assert len(summary.pids) == 10
    assert [p for p in summary.pids if alive(p)] == []
    assert sorted(t["metadata"]["server_pid"] for t in s.values()) == sorted(summary.pids)
    assert all(not Path(t["metadata"]["workdir"]).exists() for t in s.values())


def test_contracts_hold(recorded) -> None:
    out, _, _ = recorded
    assert [r.name for r in run_contracts(out) if not r.passed] == []
    assert {r.name: r.passed for r in run_mcp_contracts(out)} == {
        "mcp_raw_reachable": True, "mcp_faults_labelled": True, "mcp_fingerprinted": True, "mcp_observations_typed": True}


def test_cli_collect_mcp(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    require_servers()
    rc = cli_main(["collect", "mcp", str(SPECS / "filesystem.yaml"), "--session", "explore", "--repeat", "2",
                   "--out", str(tmp_path / "c")])
    assert rc == 0
    captured = capsys.readouterr()
    assert "2 sessions, 8 turns" in captured.out and "filesystem" in captured.out
    assert "[2/2] filesystem/explore#" in captured.err
    assert run_query(tmp_path / "c", "SELECT count(*), sum(num_turns), min(source_format) FROM trajectories")[1] == [(2, 8, "mcp-live")]


def test_recorded_traffic_imports_as_the_same_turns(recorded, tmp_path: Path) -> None:
    # what the importer of captured traffic promises (collectors/mcp/shape.py): the same session captured
    # by another tool gives the recorder's turns. Each session's raw JSON-RPC (its own traffic and every
    # turn's, in time order) is written as `{dir, t, raw}` lines and read back by `mcp-traffic`.
    from pipelines.reader import read_path

    out, _, s = recorded
    fields = ("action", "tool_name", "tool_args", "observation", "observation_kind", "is_error")
    for key, t in sorted(s.items()):
        rows = read_raw(out, t["trajectory_id"], None)
        for i in range(len(t["turns"])):
            rows += read_raw(out, t["trajectory_id"], i)
        log = tmp_path / f"{key.replace('/', '_')}.jsonl"
        log.write_bytes(b"".join(orjson.dumps({"dir": m["dir"], "t": m["t"], "raw": m["raw"]}) + b"\n"
                                 for m in sorted(rows, key=lambda m: m["t"])))
        (imported,) = list(read_path(log))
        assert imported.source_format == "mcp-traffic", key
        assert [tuple(getattr(u, f) for f in fields) for u in imported.turns] == \
            [tuple(u[f] for f in fields) for u in t["turns"]], key
        fp = orjson.loads(imported.env_fingerprint)
        assert {k: fp[k] for k in ("server_name", "server_version", "protocol_version", "tool_schema_sha256", "tools")} == \
            {k: t["env_fingerprint"][k] for k in ("server_name", "server_version", "protocol_version", "tool_schema_sha256", "tools")}, key
        assert orjson.loads(imported.action_space) == t["action_space"], key
