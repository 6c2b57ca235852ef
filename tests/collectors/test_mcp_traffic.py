"""MCP traffic logs, read through `pipelines.reader.read_path`.

The fixtures under tests/data/mcp-traffic were written by hand from each tool's documented or
observed structure (see the module docstring of collectors/mcp_traffic.py): the same kind of
session in each shape (initialize, a two-tool `tools/list`, calls answered with text, one
`isError: true` result, one JSON-RPC error response, one request left without a response).
Expected values below were counted from the files, not from the importer: line numbers with
`grep -n`, ids and texts as written there, durations as the difference of the two lines' times.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.mcp.shape import tool_schema_sha256
from collectors.mcp_traffic import McpTrafficImporter
from collectors.registry import IMPORTERS, importer_by_name
from pipelines.ingest import IngestConfig, ingest
from pipelines.reader import read_path
from pipelines.sources import ReadLimits, close_input, open_input
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "mcp-traffic"
FIXTURES = sorted(p.name for p in DATA.iterdir())
HEAD = ReadLimits().head_bytes


def _read(name: str | Path, limits: ReadLimits | None = None) -> tuple[list[Trajectory], list[QuarantineRecord]]:
    recs = list(read_path(DATA / name if isinstance(name, str) else name, limits=limits or ReadLimits()))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    return trajs, [r for r in recs if isinstance(r, QuarantineRecord)]


def _fixture_line(name: str, lineno: int) -> dict:
    return json.loads((DATA / name).read_text().splitlines()[lineno - 1])


def _meta(x: object) -> dict:
    return json.loads(x.metadata)  # type: ignore[attr-defined]


def _canonical_sha(tools: list[dict]) -> str:
    """The tool-schema hash computed here, independently: canonical JSON of the tools sorted by name."""
    text = json.dumps(sorted(tools, key=lambda t: t["name"]), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _head(path: Path) -> bytes:
    """What the reader gives text sniffers: the first bytes of the (decompressed) input."""
    stream, _ = open_input(path, ReadLimits(), str(path))
    try:
        return stream.peek(HEAD)[:HEAD]
    finally:
        close_input(stream)


# -- shapes ---------------------------------------------------------------------------------------


def test_bare_jsonrpc_lines() -> None:
    trajs, bad = _read("bare.jsonl")
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    assert (t.domain, t.source_format, t.locator, t.agent, t.model) == ("mcp", "mcp-traffic", "line:1", "claude-ai", None)
    assert [u.tool_name for u in t.turns] == ["get_current_time", "get_current_time", "convert_time", "convert_time"]
    assert [u.action for u in t.turns] == [
        'get_current_time({"timezone":"Europe/Warsaw"})',
        'get_current_time({"timezone":"Mars/Olympus_Mons"})',
        'convert_time({"source_timezone":"Europe/Warsaw","target_timezone":"Asia/Tokyo","time":"25:99"})',
        'convert_time({"source_timezone":"Europe/Warsaw","target_timezone":"Asia/Tokyo","time":"16:30"})',
    ]
    assert t.turns[0].tool_args == '{"timezone":"Europe/Warsaw"}'
    assert [u.tool_call_id for u in t.turns] == ["2", "3", "5", "6"]
    assert [u.locator for u in t.turns] == ["line:6+line:7", "line:8+line:9", "line:12+line:13", "line:14"]
    assert [u.observation for u in t.turns] == [
        '{"content":[{"text":"{\\n  \\"timezone\\": \\"Europe/Warsaw\\",\\n  \\"datetime\\": '
        '\\"2025-07-20T15:44:18+02:00\\",\\n  \\"is_dst\\": true\\n}","type":"text"}],"isError":false}',
        '{"content":[{"text":"Error executing tool get_current_time: Invalid timezone: '
        "'No time zone found with key Mars/Olympus_Mons'\",\"type\":\"text\"}],\"isError\":true}",
        '{"error":{"code":-32602,"message":"Invalid time format. Expected HH:MM [24-hour format]"}}',
        None,
    ]
    assert [u.observation_kind for u in t.turns] == ["tool_result", "tool_result", "error", "none"]
    assert [u.is_error for u in t.turns] == [False, True, True, None]
    assert all(u.kind == "env" and u.started_at is None and u.duration_s is None for u in t.turns)  # no times in the log
    metas = [_meta(u) for u in t.turns]
    assert [m.get("in_band_error") for m in metas] == [False, True, None, None]
    assert metas[2]["protocol_error"] == {"code": -32602, "message": "Invalid time format. Expected HH:MM [24-hour format]",
                                          "origin": "server"}
    assert metas[3]["unanswered"] == "log_ended" and "response" not in metas[3]
    tools = _fixture_line("bare.jsonl", 5)["result"]["tools"]
    assert json.loads(t.action_space) == tools
    assert json.loads(t.env_fingerprint) == {
        "server_name": "mcp-time", "server_version": "1.9.4", "protocol_version": "2025-06-18",
        "tool_schema_sha256": _canonical_sha(tools), "tools": 2, "transport": None}
    assert json.loads(t.env_fingerprint)["tool_schema_sha256"] == tool_schema_sha256(tools)  # the recorder's function
    assert json.loads(t.initial_state) == {
        "server_info": {"name": "mcp-time", "version": "1.9.4"}, "protocol_version": "2025-06-18",
        "capabilities": {"experimental": {}, "tools": {"listChanged": False}}, "instructions": None}
    m = _meta(t)
    assert (m["methods"], m["notifications"]) == ({"initialize": 1, "ping": 1, "tools/list": 1},
                                                  {"notifications/initialized": 1})
    assert (m["messages"], m["unanswered_turns"], m["log_format"], m["container"]) == (14, 1, "jsonrpc", "lines")
    assert t.collected_at is None
    assert_schema_valid(trajs)


def test_wrapped_lines_pair_by_direction_and_split_sessions() -> None:
    """A proxy's log: the server's sampling request reuses the id of the client's pending tools/call
    (id 5); only the direction tells which response answers which."""
    trajs, bad = _read("proxy-envelope.jsonl")
    assert bad == [] and [t.locator for t in trajs] == ["line:1", "line:19"]
    first, second = trajs
    assert [u.tool_name for u in first.turns] == ["search_notes", "resources/read", "append_note", "append_note"]
    search, read, cancelled, cut = first.turns
    assert search.locator == "line:10+line:13"  # line 12 is the client's answer to the sampling request
    assert search.observation == ('{"content":[{"text":"2 notes match \'invoice\'; unpaid: Invoice 2307 for Globex, '
                                  'due 12 Sept","type":"text"}],"isError":false}')
    assert search.started_at == datetime(2025, 9, 3, 8, 15, 1, tzinfo=UTC)
    assert search.duration_s == pytest.approx(1.41) and _meta(search)["latency_s"] == pytest.approx(1.41)
    assert first.model == "claude-sonnet-4-20250514" and first.agent == "mcp-agent"
    assert read.action == 'resources/read({"uri":"note://inbox"})' and read.locator == "line:14+line:15"
    assert read.observation == ('{"contents":[{"mimeType":"text/markdown","text":"- call Globex about invoice 2307\\n'
                                '- renew domain","uri":"note://inbox"}]}')
    assert read.duration_s == pytest.approx(0.004)
    assert _meta(cancelled)["unanswered"] == "cancelled"
    assert _meta(cancelled)["cancelled"] == {"locator": "line:17", "reason": "User requested cancellation"}
    assert (cancelled.observation, cancelled.observation_kind, cancelled.is_error) == (None, "none", None)
    assert _meta(cut)["unanswered"] == "session_ended" and cut.locator == "line:18"
    pages = _fixture_line("proxy-envelope.jsonl", 5)["message"]["result"]["tools"] + \
        _fixture_line("proxy-envelope.jsonl", 7)["message"]["result"]["tools"]
    assert json.loads(first.action_space) == pages
    assert json.loads(first.env_fingerprint)["tool_schema_sha256"] == _canonical_sha(pages) == tool_schema_sha256(pages)
    assert json.loads(first.env_fingerprint)["transport"] == "stdio"
    assert json.loads(first.initial_state)["resources"] == [{"uri": "note://inbox", "name": "inbox",
                                                             "mimeType": "text/markdown"}]
    m = _meta(first)
    assert m["methods"] == {"initialize": 1, "resources/list": 1, "sampling/createMessage": 1, "tools/list": 2}
    assert (m["listings"], m["connection"], m["cancelled"], m["log_format"]) == (
        {"resources": 1, "tools": 1}, "notes", 1, "envelope")
    assert "orphan_responses" not in m  # every response found its request
    (prompt,) = second.turns
    assert prompt.action == 'prompts/get({"arguments":{"topic":"invoices"},"name":"summarize"})'
    assert prompt.observation == ('{"description":"Summarize notes on a topic","messages":[{"content":{"text":'
                                  '"Summarize my notes about invoices.","type":"text"},"role":"user"}]}')
    assert second.action_space is None and second.model is None
    fp = json.loads(second.env_fingerprint)
    assert (fp["tool_schema_sha256"], fp["tools"], fp["server_name"]) == (None, 0, "notes-server")
    assert second.collected_at == datetime(2025, 9, 3, 8, 20, tzinfo=UTC)
    assert first.trajectory_id != second.trajectory_id
    assert_schema_valid(trajs)


def test_mcpspy_lines_one_session_per_process_pair() -> None:
    trajs, bad = _read("mcpspy.jsonl")
    assert bad == []
    assert [_meta(t)["connection"] for t in trajs] == ["pid:4242-4250", "pid:4242-4311"]
    assert {_meta(t)["log_format"] for t in trajs} == {"mcpspy"}
    fs, time = trajs
    assert [u.tool_name for u in fs.turns] == ["list_directory", "read_text_file"]
    ls, shadow = fs.turns
    assert (ls.locator, ls.duration_s, ls.is_error) == ("line:9+line:11", pytest.approx(0.0125), False)
    assert ls.started_at == datetime(2025, 10, 1, 9, 0, 5, 2000, tzinfo=UTC)  # +02:00 in the log
    assert ls.observation == '{"content":[{"text":"[DIR] src\\n[FILE] README.md\\n[FILE] pyproject.toml","type":"text"}]}'
    assert (shadow.is_error, shadow.observation_kind, _meta(shadow)["in_band_error"]) == (True, "tool_result", True)
    assert fs.collected_at == datetime(2025, 10, 1, 9, 0, 0, 100000, tzinfo=UTC)  # nanoseconds cut to microseconds
    tools = json.loads(_fixture_line("mcpspy.jsonl", 7)["raw"])["result"]["tools"]
    assert json.loads(fs.env_fingerprint) == {
        "server_name": "secure-filesystem-server", "server_version": "0.2.0", "protocol_version": "2025-06-18",
        "tool_schema_sha256": tool_schema_sha256(tools), "tools": 2, "transport": "stdio"}
    (now,) = time.turns
    assert (now.tool_name, now.locator, now.duration_s) == ("get_current_time", "line:8+line:10", pytest.approx(0.004))
    assert json.loads(time.env_fingerprint)["server_name"] == "mcp-time"
    assert_schema_valid(trajs)


def test_claude_desktop_server_log() -> None:
    trajs, bad = _read("mcp-server-time.log")
    assert bad == [] and [t.locator for t in trajs] == ["line:3", "line:19"]
    first, second = trajs
    assert [(u.tool_name, u.locator, u.is_error) for u in first.turns] == [
        ("get_current_time", "line:11+line:12", False), ("convert_time", "line:13+line:14", True)]
    now, bad_time = first.turns
    assert now.observation == ('{"content":[{"text":"{\\n  \\"timezone\\": \\"Asia/Tokyo\\",\\n  \\"datetime\\": '
                               '\\"2025-07-20T22:45:02+09:00\\",\\n  \\"is_dst\\": false\\n}","type":"text"}],"isError":false}')
    assert now.started_at == datetime(2025, 7, 20, 13, 45, 2, 118000, tzinfo=UTC) and now.duration_s == pytest.approx(0.013)
    assert bad_time.observation_kind == "error" and _meta(bad_time)["protocol_error"]["code"] == -32602
    m = _meta(first)
    assert [(e["locator"], e["text"]) for e in m["log_events"]] == [
        ("line:1", "Initializing server..."), ("line:2", "Server started and connected successfully"),
        ("line:15", "Client transport closed"), ("line:16", "Server transport closed")]
    assert m["server_stderr_lines"] == 1 and m["server_stderr_tail"].startswith("[07/20/25 15:44:16] INFO     Processing")
    assert (m["methods"], m["listings"], m["connection"], m["log_format"]) == (
        {"initialize": 1, "prompts/list": 1, "tools/list": 1}, {"prompts": 1, "tools": 1}, "time", "claude-desktop")
    assert json.loads(first.initial_state)["prompts"] == []
    tools = json.loads(_claude_payload(9))["result"]["tools"]
    assert json.loads(first.env_fingerprint)["tool_schema_sha256"] == _canonical_sha(tools) == tool_schema_sha256(tools)
    assert [(u.tool_name, u.locator) for u in second.turns] == [("get_current_time", "line:22+line:23"),
                                                                ("convert_time", "line:24")]
    assert _meta(second.turns[1])["unanswered"] == "log_ended" and second.action_space is None
    m2 = _meta(second)
    # the restart's "Initializing server..." lines belong to the session that follows them
    assert [(e["locator"], e["level"]) for e in m2["log_events"]] == [
        ("line:17", "info"), ("line:18", "info"), ("line:28", "info"), ("line:29", "error")]
    assert m2["server_stderr_lines"] == 3 and m2["server_stderr_tail"].endswith("KeyboardInterrupt\n")
    # every line is a message, a lifecycle line or stderr of one of the two sessions
    lines = len((DATA / "mcp-server-time.log").read_text().splitlines())
    assert lines == sum(_meta(t)["messages"] + _meta(t)["log_event_count"] + _meta(t)["server_stderr_lines"]
                        for t in trajs) == 29
    assert_schema_valid(trajs)


def _claude_payload(lineno: int) -> str:
    """The JSON of a `Message from ...` line of mcp-server-time.log, without the logger's suffix."""
    line = (DATA / "mcp-server-time.log").read_text().splitlines()[lineno - 1]
    return line.split(": ", 1)[1].removesuffix(" { metadata: undefined }")


def test_claude_desktop_message_over_several_lines(tmp_path: Path) -> None:
    """A logged message whose JSON goes on over the next, unprefixed lines (as quoted, pretty-printed,
    in a weather-server guide) is read whole; one that never completes is quarantined at its line."""
    init = _claude_payload(3)
    path = tmp_path / "mcp-server-weather.log"
    path.write_text("\n".join([
        f"2025-07-20T13:44:16.395Z [weather] [info] Message from client: {init}",
        '2025-07-20T13:44:18.951Z [weather] [info] Message from client: {"method":"tools/call","params":'
        '{"name":"get_alerts","arguments":{"state":"TX"}},"jsonrpc":"2.0","id":1}',
        "2025-07-20T13:44:18.960Z [weather] [info] Message from server: ",
        "{",
        '  "jsonrpc": "2.0",',
        '  "id": 1,',
        '  "result": {"content": [{"type": "text", "text": "No active alerts"}], "isError": false}',
        "}",
        "{ metadata: undefined }",
        '2025-07-20T13:44:19.000Z [weather] [info] Message from server: {"jsonrpc":"2.0","id":2,',
        "Traceback (most recent call last):",
        "2025-07-20T13:44:20.000Z [weather] [info] Client transport closed",
    ]) + "\n")
    trajs, bad = _read(path)
    assert [(q.locator, q.reason) for q in bad] == [("line:10", "invalid_json")]
    (t,) = trajs
    (alerts,) = t.turns
    assert (alerts.locator, alerts.observation) == (
        "line:2+line:3", '{"content":[{"text":"No active alerts","type":"text"}],"isError":false}')
    m = _meta(t)
    assert (m["messages"], m["server_stderr_lines"], m["log_event_count"]) == (3, 1, 1)  # line 9 is stderr-like


def test_claude_desktop_main_log_keeps_servers_apart() -> None:
    """mcp.log: `[level] [server]` order, two servers using the same ids at the same time."""
    trajs, bad = _read("mcp.log")
    assert bad == []
    assert [_meta(t)["connection"] for t in trajs] == ["memory", "desktop-commander"]
    memory, commander = trajs
    (graph,) = memory.turns
    assert (graph.action, graph.locator) == ("read_graph({})", "line:19+line:20")
    assert graph.observation == '{"content":[{"text":"{\\n  \\"entities\\": [],\\n  \\"relations\\": []\\n}","type":"text"}]}'
    assert commander.turns == []
    assert _meta(memory)["listings"] == {"tools": 1}  # its prompts/list got -32601
    assert "prompts" not in json.loads(memory.initial_state)
    assert json.loads(commander.initial_state)["prompts"] == []
    for t, lineno in ((memory, 14), (commander, 13)):
        line = (DATA / "mcp.log").read_text().splitlines()[lineno - 1]
        tools = json.loads(line.split("Message from server: ", 1)[1])["result"]["tools"]
        assert json.loads(t.env_fingerprint)["tool_schema_sha256"] == _canonical_sha(tools)
        assert json.loads(t.action_space) == tools
    assert [json.loads(t.env_fingerprint)["server_name"] for t in trajs] == ["memory-server", "desktop-commander"]
    assert_schema_valid(trajs)


def test_vscode_output_log() -> None:
    trajs, bad = _read("vscode-mcp.log")
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    assert t.agent == "Visual Studio Code" and t.locator == "line:5"
    (now,) = t.turns
    assert now.tool_args == '{"timezone":"America/New_York"}'  # `_meta` is request metadata, not an argument
    assert now.started_at == datetime(2026, 3, 2, 10, 16, 2, 500000, tzinfo=UTC)  # the log's zone-less time, as UTC
    assert now.duration_s == pytest.approx(0.012)
    assert _meta(now)["has_structured_content"] is True and now.is_error is False
    assert [e["text"] for e in _meta(t)["log_events"]] == [
        "Starting server time", "Connection state: Starting", "Server command line: uvx mcp-server-time",
        "Connection state: Running", "Discovered 2 tools"]
    assert json.loads(t.env_fingerprint)["protocol_version"] == "2025-11-25"
    assert_schema_valid(trajs)


def test_inspector_history_export() -> None:
    trajs, bad = _read("inspector-history.json")
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    assert t.locator == "[0]" and t.agent == "inspector-client"
    assert [u.locator for u in t.turns] == ["[3]", "[4]", "[6]"]  # request and response are one entry
    assert [u.tool_name for u in t.turns] == ["echo", "get-sum", "get-sum"]
    assert [u.duration_s for u in t.turns] == [pytest.approx(0.003), pytest.approx(0.004), None]
    assert [u.is_error for u in t.turns] == [False, True, None]
    assert t.turns[0].observation == '{"content":[{"text":"Echo: hello","type":"text"}]}'
    assert t.turns[1].observation == ('{"error":{"code":-32602,"message":"MCP error -32602: Invalid arguments for tool '
                                      'get-sum: Expected number, received string at b"}}')
    assert t.turns[0].started_at == datetime(2026, 6, 1, 12, 0, 7, 500000, tzinfo=UTC)
    m = _meta(t)
    assert (m["log_format"], m["container"], m["unanswered_turns"]) == ("inspector", "array", 1)
    assert m["notifications"] == {"notifications/initialized": 1, "notifications/message": 1}
    tools = json.loads((DATA / "inspector-history.json").read_text())[2]["response"]["result"]["tools"]
    assert json.loads(t.env_fingerprint)["tool_schema_sha256"] == tool_schema_sha256(tools)
    assert_schema_valid(trajs)


def test_compressed_log_reads_the_same(tmp_path: Path) -> None:
    gz = tmp_path / "bare.jsonl.gz"
    gz.write_bytes(gzip.compress((DATA / "bare.jsonl").read_bytes()))
    (plain,), _ = _read("bare.jsonl")
    (packed,), _ = _read(gz)
    assert [(u.action, u.observation, u.locator) for u in packed.turns] == \
        [(u.action, u.observation, u.locator) for u in plain.turns]


# -- bad input ------------------------------------------------------------------------------------


def test_bad_input_quarantined_or_noted() -> None:
    trajs, bad = _read("bad-input.jsonl")
    assert [(q.locator, q.reason) for q in bad] == [
        ("line:1", "invalid_json"),  # a banner line
        ("line:8", "not_jsonrpc"),  # a proxy's own log record
        ("line:9", "invalid_jsonrpc"),  # no method, no id
        ("line:11", "invalid_json"),
        ("line:12", "invalid_jsonrpc"),  # an empty batch
        ("line:13/[2]", "not_jsonrpc"),  # a string in a batch; the batch's two messages are a turn
        ("line:14", "invalid_utf8"),
        ("line:15", "invalid_jsonrpc"),  # an object as request id
        ("line:16", "invalid_jsonrpc"),  # both result and error
        ("line:19", "truncated_json"),  # the log was cut mid-line
    ]
    source = str(DATA / "bad-input.jsonl")
    for q in bad:
        assert q.detail.startswith(f"{source}: {q.locator}: ") and q.importer == "mcp-traffic", q.detail
    (t,) = trajs
    assert [(u.tool_name, u.locator) for u in t.turns] == [
        ("echo", "line:4"), ("echo", "line:5+line:6"), ("echo", "line:13/[0]+line:13/[1]"), ("tools/call", "line:17+line:18")]
    dup, echo_b, batched, nameless = t.turns
    assert _meta(dup)["unanswered"] == "duplicate_id" and dup.observation is None
    assert echo_b.observation == '{"content":[{"text":"b","type":"text"}]}'
    assert batched.observation == '{"content":[{"text":"d","type":"text"}],"isError":false}'
    assert (nameless.action, nameless.tool_args) == ('tools/call({"arguments":{"text":"no name"}})',
                                                     '{"arguments":{"text":"no name"}}')
    assert _meta(nameless)["malformed_request"] == "params.name is not a string" and nameless.is_error is True
    m = _meta(t)
    assert m["duplicate_ids"] == [{"id": 2, "first": "line:4", "again": "line:5"}]
    assert m["orphan_responses"] == [{"locator": "line:7", "id": 99}] and m["orphan_responses_count"] == 1
    assert m["null_id_errors"] == [{"locator": "line:10", "code": -32700, "message": "Parse error"}]
    assert m["messages"] == 11  # lines 2-7, 10, 13 (two), 17, 18
    assert_schema_valid(trajs)


def test_bad_input_counts_reconcile_through_ingest(tmp_path: Path) -> None:
    s = ingest([DATA / "bad-input.jsonl"], tmp_path / "corpus", IngestConfig(workers=1), progress=False)
    assert (s.records, s.trajectories, s.quarantined, s.turns) == (11, 1, 10, 4)
    assert s.reconciles


def test_line_over_the_record_limit(tmp_path: Path) -> None:
    lines = (DATA / "bare.jsonl").read_text().splitlines()
    path = tmp_path / "cut.jsonl"
    path.write_text("\n".join(lines[:4] + ['{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"'
                                           + "x" * 500 + '"}}'] + lines[5:9]) + "\n")
    trajs, bad = _read(path, ReadLimits(max_record_bytes=400))  # the run's limit (`ingest --max-record-mb`)
    assert [(q.locator, q.reason) for q in bad] == [("line:5", "record_too_large")]
    assert "400-byte record limit" in bad[0].detail
    (t,) = trajs
    assert [u.locator for u in t.turns] == ["line:6+line:7", "line:8+line:9"]
    assert t.action_space is None  # the tools/list answer was the line cut out


def test_a_log_without_initialize_is_one_session(tmp_path: Path) -> None:
    path = tmp_path / "mid-session.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in [
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}},
        {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "x"}]}},
        {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "y"}}},
        {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "y"}]}},
    ]) + "\n")
    trajs, bad = _read(path)
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    assert [u.locator for u in t.turns] == ["line:1+line:2", "line:3+line:4"]
    assert (t.initial_state, t.agent, t.action_space) == (None, None, None)
    assert json.loads(t.env_fingerprint)["server_name"] is None


def test_odd_values_never_stop_a_file(tmp_path: Path) -> None:
    """Valid JSON-RPC with values of the wrong type or range: imported as far as they go, nothing raised."""
    path = tmp_path / "odd.jsonl"
    path.write_text("\n".join([
        '{"jsonrpc":"2.0","id":1,"method":"initialize","params":"not an object"}',
        '{"jsonrpc":"2.0","id":1,"result":"not an object"}',
        '{"ts":1e300,"direction":42,"server":true,"message":{"jsonrpc":"2.0","id":2,"method":"tools/list","params":[]}}',
        '{"ts":"yesterday","message":{"jsonrpc":"2.0","id":2,"result":{"tools":"none"}}}',
        '{"timestamp":1752998656395,"message":{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x",'
        '"arguments":"a string"}},"response":{"jsonrpc":"2.0","id":3,"result":[1,2]},"duration":1e308}',
        '{"jsonrpc":"2.0","method":"notifications/cancelled","params":null}',
        '{"jsonrpc":"2.0","id":"5","method":"resources/read","params":{"uri":7}}',
        '{"jsonrpc":"2.0","id":5,"result":{}}',
        '{"jsonrpc":"2.0","id":"5","error":{"code":"x","message":null,"data":[1]}}',
    ]) + "\n")
    trajs, bad = _read(path)
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    call, read = t.turns
    assert (call.action, call.observation, call.is_error, call.duration_s) == ('x("a string")', "[1,2]", False, None)
    assert call.tool_args == '"a string"'  # the protocol's value, as JSON (a string, not JSON text)
    assert call.started_at == datetime(2025, 7, 20, 8, 4, 16, 395000, tzinfo=UTC)  # epoch milliseconds
    assert (read.action, read.locator) == ('resources/read({"uri":7})', "line:7+line:9")  # "5" is not 5
    assert read.observation == '{"error":{"code":"x","data":[1],"message":null}}'
    m = _meta(t)
    assert m["initialize_error"] == {"result": "not an object"} and m["orphan_responses"] == [{"locator": "line:8", "id": 5}]
    assert (t.action_space, t.initial_state) == (None, None)
    assert_schema_valid(trajs)


def test_tool_listings_first_complete_one_is_the_action_space(tmp_path: Path) -> None:
    first = [{"name": "a", "inputSchema": {"type": "object"}}]
    later = [{"name": "a", "inputSchema": {"type": "object"}}, {"name": "b", "inputSchema": {"type": "object"}}]
    path = tmp_path / "listings.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 1, "result": {"tools": first}},
        {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "result": {"tools": later}},
        {"jsonrpc": "2.0", "id": 3, "method": "prompts/list"},
        {"jsonrpc": "2.0", "id": 3, "result": {"prompts": [{"name": "p"}], "nextCursor": "2"}},
    ]) + "\n")
    (t,), bad = _read(path)
    assert bad == [] and json.loads(t.action_space) == first
    m = _meta(t)
    assert (m["listings"], m["tools_changed"], m["incomplete_listings"]) == ({"tools": 2}, True, ["prompts"])
    assert m["notifications"] == {"notifications/tools/list_changed": 1}


# -- sniffing -------------------------------------------------------------------------------------


FOREIGN = {
    "chat line": b'{"messages": [{"role": "user", "content": "call tools/call"}, {"role": "assistant", "content": "ok"}]}\n',
    "asciicast": b'{"version": 2, "width": 80, "height": 24, "timestamp": 1700000000}\n[0.5, "o", "$ "]\n',
    "openhands events": (b'[{"id": 0, "timestamp": "2024-08-01T10:00:00", "source": "user", "message": "Fix it", '
                         b'"action": "message", "args": {"content": "Fix it"}}]\n'),
    "openhands events, pretty": json.dumps([{"id": 0, "source": "agent", "action": "run", "message": "Running",
                                             "args": {"command": "ls"}}], indent=2).encode(),
    # JSON-RPC, but LSP: `initialize` without protocolVersion and no MCP method
    "lsp traffic": (b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"processId":1,"rootUri":"file:///w"}}\n'
                    b'{"jsonrpc":"2.0","method":"textDocument/didOpen","params":{"textDocument":{"uri":"file:///w/a.py"}}}\n'),
    # MCP messages quoted inside a chat message's text are not traffic
    "mcp quoted in chat": json.dumps({"messages": [{"role": "tool", "content": json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x"}})}]}).encode() + b"\n",
    "uiautomator": b'<?xml version="1.0" encoding="UTF-8"?><hierarchy rotation="0"><node text="OK"/></hierarchy>',
    "plain log": b"2025-07-20T13:44:15.101Z [time] [info] Initializing server...\n",
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_other_formats_are_not_claimed(name: str) -> None:
    assert McpTrafficImporter().sniff(FOREIGN[name]) is False


def test_no_other_fixture_or_sample_file_is_claimed() -> None:
    files = [p for base in (ROOT / "tests" / "data", ROOT / "data" / "sample" / "corpus") for p in sorted(base.rglob("*"))
             if p.is_file() and DATA not in p.parents]
    assert len(files) > 100
    claimed = [str(p) for p in files if McpTrafficImporter().sniff(_head(p))]
    assert claimed == []


@pytest.mark.parametrize("name", FIXTURES)
def test_fixtures_are_claimed_by_this_importer_only(name: str) -> None:
    head = _head(DATA / name)
    assert McpTrafficImporter().sniff(head) is True
    others = [imp for imp in IMPORTERS if imp.name != "mcp-traffic"]
    assert [imp.name for imp in others if imp.container == "text" and imp.sniff(head)] == []
    # what the JSON importers would see if this importer were not there: each parsed line, or the document
    objs: list = []
    for line in (DATA / name).read_bytes().splitlines():
        try:
            objs.append(json.loads(line))
        except ValueError:
            continue
    if name.endswith(".json"):
        doc = json.loads((DATA / name).read_text())
        objs += [doc, doc[0]]
    for obj in objs:
        for imp in others:
            if imp.container in ("json", "jsonl"):
                try:
                    took = imp.sniff(obj)
                except Exception:  # noqa: BLE001 - the reader treats a failing sniffer as declining
                    took = False
                assert not took, (imp.name, obj)


def test_registered_as_a_text_importer() -> None:
    imp = importer_by_name("mcp-traffic")
    assert isinstance(imp, McpTrafficImporter) and imp.container == "text" and not imp.generic


def test_a_log_without_directions_pairs_nested_requests_of_the_same_id(tmp_path: Path) -> None:
    """Bare JSON-RPC lines carry no direction: a server's request inside a tool call may reuse the
    call's id. The sampling answer was taken for the tool's result (and the result for the sampling
    answer), and a server's ping made the tool call a duplicate id with no answer."""
    call = lambda i, text: {"jsonrpc": "2.0", "id": i, "method": "tools/call",  # noqa: E731
                            "params": {"name": "ask", "arguments": {"q": text}}}
    path = tmp_path / "bare.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in [
        call(1, "weather"),
        {"jsonrpc": "2.0", "id": 1, "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
        {"jsonrpc": "2.0", "id": 1, "result": {"role": "assistant", "model": "m-1", "content": {"type": "text", "text": "sunny"}}},
        {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "it is sunny"}]}},
        call(2, "again"),
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        {"jsonrpc": "2.0", "id": 2, "result": {}},
        {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "done"}]}},
    ]) + "\n")
    trajs, bad = _read(path)
    assert bad == [] and len(trajs) == 1
    (t,) = trajs
    assert [(u.locator, json.loads(u.observation)) for u in t.turns] == [
        ("line:1+line:4", {"content": [{"text": "it is sunny", "type": "text"}]}),
        ("line:5+line:8", {"content": [{"text": "done", "type": "text"}]})]
    assert t.model == "m-1"


def _jsonrpc_log(tmp_path: Path, messages: list[dict]) -> Trajectory:
    path = tmp_path / "bare.jsonl"
    path.write_text("\n".join(json.dumps({"jsonrpc": "2.0", **m}) for m in messages) + "\n")
    trajs, bad = _read(path)
    assert bad == [] and len(trajs) == 1
    return trajs[0]


_INIT = [{"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                     "clientInfo": {"name": "c", "version": "1"}}},
         {"id": 1, "result": {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "1"}}}]


def _call(i: int, text: str) -> dict:
    return {"id": i, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": text}}}


def _answer(i: int, text: str) -> dict:
    return {"id": i, "result": {"content": [{"type": "text", "text": text}]}}


def test_an_id_reused_after_its_request_was_cancelled(tmp_path: Path) -> None:
    # the cancelled request got no answer because it was cancelled, not because its id came again
    t = _jsonrpc_log(tmp_path, [*_INIT, _call(2, "slow"),
                                {"method": "notifications/cancelled", "params": {"requestId": 2, "reason": "too slow"}},
                                _call(2, "fast"), _answer(2, "fast")])
    slow, fast = t.turns
    assert (slow.locator, slow.observation, _meta(slow)["unanswered"], _meta(slow)["cancelled"]) == (
        "line:3", None, "cancelled", {"locator": "line:4", "reason": "too slow"})
    assert (fast.locator, fast.observation) == ("line:5+line:6", '{"content":[{"text":"fast","type":"text"}]}')
    m = _meta(t)
    # MCP ids are unique within a session, a cancelled request's too: the reuse is still noted
    assert (m["duplicate_ids"], m["duplicate_ids_count"]) == ([{"id": 2, "first": "line:3", "again": "line:5"}], 1)


def test_an_id_reused_after_its_response_is_noted(tmp_path: Path) -> None:
    # the pairing is unambiguous (the first request was answered), but MCP forbids reusing an id in a session
    t = _jsonrpc_log(tmp_path, [*_INIT, _call(2, "a"), _answer(2, "a"), _call(2, "b"), _answer(2, "b"), _call(3, "c"),
                                _answer(3, "c")])
    assert [(u.locator, json.loads(u.observation)["content"][0]["text"]) for u in t.turns] == [
        ("line:3+line:4", "a"), ("line:5+line:6", "b"), ("line:7+line:8", "c")]
    m = _meta(t)
    assert (m["duplicate_ids"], m["duplicate_ids_count"]) == (
        [{"id": 2, "first": "line:3", "again": "line:5", "answered": "line:4"}], 1)
