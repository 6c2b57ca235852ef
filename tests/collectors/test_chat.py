"""Generic OpenAI / ShareGPT chat importer, through the ingest reader.

The test files under tests/data/chat/ were written for these tests from the published formats.
Expected counts come from jq over the raw files, independently of the importer:
- openai_tools.jsonl, turns per line = tool calls + assistant messages without calls + user messages
  after the first: `[.messages[] | if .role=="assistant" then (if .tool_calls then (.tool_calls|length)
  else 1 end) elif .role=="user" then 1 else 0 end] | add - 1` = 6, 1, 2 (line 4 is the broken one);
  results (`role` tool/function) per line = 3, 0, 1: one call of line 1 is never answered.
- sharegpt_tools.jsonl, calls (a list value counts its elements) + gpt + human after the first
  = 7, 1.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "chat"


def test_openai_tool_calls() -> None:
    recs = list(read_path(DATA / "openai_tools.jsonl"))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    q = [r for r in recs if isinstance(r, QuarantineRecord)]
    assert [t.source_format for t in trajs] == ["chat"] * 3
    assert [t.domain for t in trajs] == ["mcp"] * 3
    assert [len(t.turns) for t in trajs] == [6, 1, 2]

    t = trajs[0]
    assert t.native_id == "conv-0001" and t.model == "gpt-4o-2024-08-06"
    assert t.task == "What does the config loader in /srv/app do, and who changed it last?"
    assert [s["function"]["name"] for s in json.loads(t.action_space)] == ["read_file", "list_directory", "git_log"]
    assert json.loads(t.metadata)["system"] == "You are a coding assistant with access to the project workspace."
    assert [u.kind for u in t.turns] == ["env", "env", "env", "message", "user", "message"]
    ls = t.turns[0]
    assert ls.tool_name == "list_directory" and ls.tool_call_id == "call_A1"
    assert json.loads(ls.tool_args) == {"path": "/srv/app"}
    assert ls.action == 'list_directory {"path":"/srv/app"}'
    assert ls.thought == "Let me look at the project layout first."
    assert ls.observation.startswith("[FILE] README.md\n[DIR] app")
    assert ls.observation_kind == "tool_result"
    assert ls.locator == "messages[2].tool_calls[0]+messages[3]"
    # Parallel calls, answered in the opposite order: matched by tool_call_id.
    read, log = t.turns[1], t.turns[2]
    assert read.tool_call_id == "call_B1" and read.observation.startswith("import os")
    assert read.locator == "messages[4].tool_calls[0]+messages[6]"
    assert log.tool_call_id == "call_B2" and "Author: Dana Reyes" in log.observation
    assert t.turns[3].action.startswith("The loader reads APP_ENV")
    assert t.turns[4].action == "Thanks. Can you also check the README?"
    # The last call never got its result.
    missing = t.turns[5]
    assert missing.kind == "message" and missing.observation is None and missing.observation_kind == "none"
    assert missing.tool_name == "read_file" and missing.tool_call_id == "call_C1"
    assert json.loads(missing.metadata) == {"result_missing": True}

    plain = trajs[1]
    assert plain.action_space is None and plain.turns[0].kind == "message" and plain.turns[0].action == "Hello!"

    legacy = trajs[2]  # `function_call` / `role: function`, with `functions` as the action space
    assert legacy.turns[0].kind == "env" and legacy.turns[0].tool_name == "get_current_time"
    assert json.loads(legacy.turns[0].observation)["datetime"] == "2025-01-15T21:04:12+09:00"
    assert json.loads(legacy.action_space)[0]["name"] == "get_current_time"

    assert len(q) == 1
    assert q[0].locator == "line:4" and q[0].reason == "missing_field" and q[0].importer == "chat"
    assert "messages[1]" in q[0].detail and "'role'" in q[0].detail


def test_sharegpt_function_calls() -> None:
    recs = list(read_path(DATA / "sharegpt_tools.jsonl"))
    assert all(isinstance(r, Trajectory) for r in recs)
    assert [r.source_format for r in recs] == ["chat", "chat"]
    assert [len(r.turns) for r in recs] == [7, 1]
    t = recs[0]
    assert t.domain == "mcp"
    assert t.task.startswith("Find me a flight from SFO to JFK")
    assert [s["name"] for s in json.loads(t.action_space)] == ["search_flights", "get_weather"]
    assert json.loads(t.metadata)["system"] == "You are a travel assistant."
    assert [u.kind for u in t.turns] == ["env", "env", "message", "user", "env", "message", "message"]
    flights, weather = t.turns[0], t.turns[1]
    assert flights.tool_name == "search_flights"
    assert json.loads(flights.tool_args) == {"origin": "SFO", "destination": "JFK", "date": "2025-03-14"}
    assert json.loads(flights.observation) == {"flights": [{"number": "UA 1532", "departs": "07:05", "price_usd": 289}]}
    assert flights.locator == "conversations[1][0]+conversations[2][0]"
    assert weather.tool_name == "get_weather" and json.loads(weather.observation)["conditions"] == "light rain"
    boston = t.turns[4]
    assert boston.observation == '{"city": "Boston", "temp_c": 3, "conditions": "overcast"}'  # verbatim
    last = t.turns[6]
    assert last.kind == "message" and last.tool_name == "search_flights" and last.observation is None
    assert json.loads(last.metadata)["result_missing"] is True
    assert recs[1].task == "Translate 'good morning' into French." and recs[1].turns[0].action == "Bonjour."


def test_domain_override() -> None:
    recs = [r for r in read_path(DATA / "sharegpt_tools.jsonl", domain_override="web")]
    assert {r.domain for r in recs} == {"web"}


def test_sniff_accepts_any_role_message_list() -> None:
    from collectors.chat import ChatImporter

    imp = ChatImporter()
    assert imp.sniff({"messages": [{"role": "user", "content": "x"}]})
    assert imp.sniff({"conversations": [{"from": "human", "value": "x"}]})
    assert not imp.sniff({"messages": []})
    assert not imp.sniff({"messages": ["x"]})
    assert not imp.sniff({"prompt": "x", "completion": "y"})


def test_integer_call_ids_pair_as_text(tmp_path: Path) -> None:
    # two calls with integer ids, answered in reverse order: each result goes to the call of its id
    line = {"messages": [
        {"role": "user", "content": "sizes?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": 1, "type": "function", "function": {"name": "du", "arguments": '{"path": "a"}'}},
            {"id": 2, "type": "function", "function": {"name": "du", "arguments": '{"path": "b"}'}}]},
        {"role": "tool", "tool_call_id": 2, "content": "20K b"},
        {"role": "tool", "tool_call_id": 1, "content": "10K a"},
    ]}
    path = tmp_path / "int_ids.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (t,) = list(read_path(path))
    assert isinstance(t, Trajectory)
    assert [(u.kind, u.tool_call_id, json.loads(u.tool_args)["path"], u.observation) for u in t.turns] == [
        ("env", "1", "a", "10K a"), ("env", "2", "b", "20K b")]


def test_malformed_tool_arguments_stay_json(tmp_path: Path) -> None:
    """OpenAI: `arguments` is JSON text the model wrote and "does not always generate valid JSON".
    The turn keeps it unchanged, as a JSON string (the column's values all parse); the action shows it."""
    bad = '{"cmd": "ls /tmp"'
    line = {"messages": [
        {"role": "user", "content": "List /tmp."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run_shell", "arguments": bad}},
            {"id": "c2", "type": "function", "function": {"name": "run_shell", "arguments": '{"cmd": "pwd"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "error: arguments are not valid JSON"},
        {"role": "tool", "tool_call_id": "c2", "content": "/root"}]}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    [t] = list(read_path(tmp_path / "t.jsonl"))
    first, second = t.turns
    assert json.loads(first.tool_args) == bad and first.action == f"run_shell {bad}"
    assert second.tool_args == '{"cmd":"pwd"}'


def test_an_image_in_a_message_is_a_reference_not_base64(tmp_path: Path) -> None:
    png = "data:image/png;base64," + "iVBORw0KGgo" * 1000
    line = {"messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is on screen?"},
                                     {"type": "image_url", "image_url": {"url": png}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "zoom", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "zoomed"},
                                                           {"type": "image_url", "image_url": {"url": png}}]},
    ]}
    path = tmp_path / "multimodal.jsonl"
    path.write_text(json.dumps(line) + "\n")
    (t,) = list(read_path(path))
    note = f"[image_url: data:image/png;base64,<{len(png)} characters not kept>]"
    assert t.task == "What is on screen?\n" + note
    assert [(u.kind, u.observation) for u in t.turns] == [("env", "zoomed\n" + note)]


def test_blank_arguments_are_absent_arguments(tmp_path: Path) -> None:
    """`"arguments": ""` (some servers send it for a function without parameters) is the call without
    arguments: the same action as `arguments` left out, not `name ` with a JSON string."""
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "get_time", **args}}
             for i, args in enumerate([{"arguments": ""}, {"arguments": "  "}, {}])]
    line = {"messages": [{"role": "user", "content": "now?"}, {"role": "assistant", "content": None, "tool_calls": calls},
                         *({"role": "tool", "tool_call_id": f"c{i}", "content": "12:00"} for i in range(3))]}
    (tmp_path / "t.jsonl").write_text(json.dumps(line) + "\n")
    [t] = list(read_path(tmp_path / "t.jsonl"))
    assert [(u.action, u.tool_name, u.tool_args) for u in t.turns] == [("get_time", "get_time", None)] * 3


def _one(tmp_path: Path, record: dict) -> Trajectory:
    (tmp_path / "t.jsonl").write_text(json.dumps(record) + "\n")
    [t] = list(read_path(tmp_path / "t.jsonl"))
    assert isinstance(t, Trajectory), t
    return t


def test_refusals_are_message_turns(tmp_path: Path) -> None:
    """openai-python: `ChatCompletionMessage.refusal` (content null), a `refusal` content part, and the
    Responses API's refusal part: each a `message` turn with the refusal's text (the first was lost,
    the others kept as JSON)."""
    t = _one(tmp_path, {"messages": [
        {"role": "user", "content": "Tell me how to pick a lock."},
        {"role": "assistant", "content": None, "refusal": "I'm sorry, I can't help with that."},
        {"role": "user", "content": "ok, then list files"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't do that either."}]}]})
    assert [(u.kind, u.action, u.locator, u.metadata) for u in t.turns] == [
        ("message", "I'm sorry, I can't help with that.", "messages[1]", '{"refusal":true}'),
        ("user", "ok, then list files", "messages[2]", None),
        ("message", "I can't do that either.", "messages[3]", '{"refusal":true}')]
    r = _one(tmp_path, {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "a b"},
        {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]}]})
    assert [(u.kind, u.action, u.metadata) for u in r.turns][-1] == ("message", "No.", '{"refusal":true}')


def test_an_mcp_tool_result_with_is_error_is_an_error(tmp_path: Path) -> None:
    """Anthropic's `mcp_tool_result` block carries `is_error` (BetaMCPToolResultBlock)."""
    def record(flag: bool) -> dict:
        return {"messages": [{"role": "user", "content": "echo"}, {"role": "assistant", "content": [
            {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "echo", "server_name": "srv", "input": {"a": 1}},
            {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "is_error": flag,
             "content": [{"type": "text", "text": "Error: boom" if flag else "ok"}]}]}]}
    assert [(u.kind, u.observation, u.is_error) for u in _one(tmp_path, record(True)).turns] == [("env", "Error: boom", True)]
    assert [(u.kind, u.observation, u.is_error) for u in _one(tmp_path, record(False)).turns] == [("env", "ok", False)]


def test_gemini_media_parts_are_references(tmp_path: Path) -> None:
    """Gemini `inlineData` / `fileData` parts become `[mime: reference]` where they stand (a user content
    holding only a file was lost, and an image vanished from the task)."""
    t = _one(tmp_path, {"contents": [
        {"role": "user", "parts": [{"text": "What is in this picture?"}, {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}}]},
        {"role": "model", "parts": [{"text": "Please send the PDF."}]},
        {"role": "user", "parts": [{"file_data": {"mime_type": "application/pdf", "file_uri": "gs://bucket/spec.pdf"}}]},
        {"role": "model", "parts": [{"text": "Thanks."}]}]})
    assert t.task == "What is in this picture?\n[image/png: <12 characters not kept>]"
    assert [(u.kind, u.action, u.locator) for u in t.turns] == [
        ("message", "Please send the PDF.", "contents[1].parts[0]"),
        ("user", "[application/pdf: gs://bucket/spec.pdf]", "contents[2]"), ("message", "Thanks.", "contents[3].parts[0]")]


def test_a_legacy_function_call_is_located_where_it_is(tmp_path: Path) -> None:
    t = _one(tmp_path, {"messages": [
        {"role": "user", "content": "search x"},
        {"role": "assistant", "content": None, "function_call": {"name": "search", "arguments": "{\"q\": \"x\"}"}},
        {"role": "function", "name": "search", "content": "res"}]})
    assert [(u.kind, u.tool_name, u.observation, u.locator) for u in t.turns] == [
        ("env", "search", "res", "messages[1].function_call+messages[2]")]
