"""Generic chat importer against published tool-calling chat files (origins in tests/data/chat-variants/README.md).

Expected values come from reading the raw files (json, not the importer):
- LLaMA-Factory glaive demo subset, per conversation: turns = function_call + gpt + (human - 1)
  = 3+4+1 = 8, 1+3+2 = 6, 2+2+1 = 5; every function_call is followed by its observation (3, 1, 2).
- Foundry stock subset: each line is system, user, then one assistant message holding one tool call
  (lines 1-2, no result: fine-tuning targets end at the call) or a plain answer (line 3).
- Hermes ShareGPT: one `<tool_call>` in a gpt message, one `<tool_response>` in the tool message after it.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid

DATA = Path(__file__).resolve().parent.parent / "data" / "chat-variants"
GLAIVE_JSONL = DATA / "llamafactory_glaive_toolcall_en_demo.subset.jsonl"
GLAIVE_ARRAY = DATA / "llamafactory_glaive_toolcall_en_demo.subset.json"
HERMES = DATA / "hermes_sharegpt_toolcall.jsonl"

# (tool name, arguments, observation text) per conversation, as written in the file
GLAIVE_CALLS = [
    [
        ("calculate_area", {"shape": "rectangle", "dimensions": [5, 3]}, '{"area": 15}'),
        ("calculate_area", {"shape": "circle", "dimensions": [4]}, '{"area": 50.24}'),
        ("calculate_area", {"shape": "square", "dimensions": [7]}, '{"area": 49}'),
    ],
    [("search_recipes", {"ingredients": ["chicken", "bell peppers", "rice"]}, None)],
    [
        ("get_movie_details", {"movie_id": "12345"}, None),
        ("get_movie_details", {"movie_id": "67890"}, None),
    ],
]
GLAIVE_KINDS = [
    ["env", "message", "user", "env", "message", "user", "env", "message"],
    ["message", "user", "env", "message", "user", "message"],
    ["env", "message", "user", "env", "message"],
]


def _trajs(path: Path, **kw) -> list[Trajectory]:
    recs = list(read_path(path, **kw))
    bad = [r for r in recs if isinstance(r, QuarantineRecord)]
    assert not bad, [(q.locator, q.reason, q.detail) for q in bad]
    return recs


def _check_glaive(trajs: list[Trajectory], raw: list[dict]) -> None:
    assert len(trajs) == 3
    assert [len(t.turns) for t in trajs] == [8, 6, 5]
    assert [[u.kind for u in t.turns] for t in trajs] == GLAIVE_KINDS
    for t, rec, calls in zip(trajs, raw, GLAIVE_CALLS, strict=True):
        conv = rec["conversations"]
        assert t.source_format == "chat" and t.domain == "mcp"
        assert t.task == conv[0]["value"]
        assert json.loads(t.action_space) == json.loads(rec["tools"])
        envs = [u for u in t.turns if u.kind == "env"]
        observations = [m["value"] for m in conv if m["from"] == "observation"]
        assert [u.observation for u in envs] == observations  # verbatim, in order
        assert [(u.tool_name, json.loads(u.tool_args)) for u in envs] == [(n, a) for n, a, _ in calls]
        for u, (_, _, obs) in zip(envs, calls, strict=True):
            assert u.observation_kind == "tool_result" and u.is_error is None
            if obs is not None:
                assert u.observation == obs
        gpt = [m["value"] for m in conv if m["from"] == "gpt"]
        assert [u.action for u in t.turns if u.kind == "message"] == gpt
        humans = [m["value"] for m in conv if m["from"] == "human"][1:]
        assert [u.action for u in t.turns if u.kind == "user"] == humans
    first = trajs[0].turns[0]
    assert first.action == 'calculate_area {"dimensions":[5,3],"shape":"rectangle"}'
    assert first.locator == "conversations[1]+conversations[2]"
    assert [s["name"] for s in json.loads(trajs[0].action_space)] == ["calculate_area", "calculate_discount"]
    assert json.loads(trajs[2].turns[3].observation)["title"] == "The Shawshank Redemption"
    assert_schema_valid(trajs)


def test_llamafactory_glaive_sharegpt_jsonl() -> None:
    raw = [json.loads(line) for line in GLAIVE_JSONL.read_text().splitlines()]
    trajs = _trajs(GLAIVE_JSONL)
    _check_glaive(trajs, raw)
    assert [t.locator for t in trajs] == ["line:1", "line:2", "line:3"]
    assert {json.loads(t.metadata)["form"] for t in trajs} == {"sharegpt"}


def test_llamafactory_glaive_domain_override() -> None:
    assert {t.domain for t in _trajs(GLAIVE_JSONL, domain_override="web")} == {"web"}


def test_llamafactory_glaive_sharegpt_json_array() -> None:
    raw = json.loads(GLAIVE_ARRAY.read_text())
    _check_glaive(_trajs(GLAIVE_ARRAY), raw)


def test_the_same_records_one_line_per_array_or_pretty_printed(tmp_path: Path) -> None:
    """The reader takes a line format's records in any JSON container: the glaive array written on
    one line, JSON lines that each hold an array (a line that is not one is quarantined, the
    others kept), and one record pretty-printed over many lines."""
    raw = json.loads(GLAIVE_ARRAY.read_text())
    one_line = tmp_path / "one_line.json"
    one_line.write_text(json.dumps(raw))
    trajs = _trajs(one_line)
    _check_glaive(trajs, raw)
    assert [t.locator for t in trajs] == ["line:1/[0]", "line:1/[1]", "line:1/[2]"]  # ids as before: same locators
    lines = tmp_path / "arrays.jsonl"
    lines.write_text(f"{json.dumps(raw[:2])}\n{json.dumps(raw[2])}\n{json.dumps(raw[2:])}\n")
    recs = list(read_path(lines))
    assert [(r.locator, getattr(r, "reason", None)) for r in recs] == [
        ("line:1/[0]", None), ("line:1/[1]", None), ("line:2", "malformed_record"), ("line:3/[0]", None)]
    assert "expected a JSON array of chat records" in recs[2].detail
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps(raw[1], indent=2))
    (t,) = _trajs(pretty)
    assert t.locator == "$" and t.source_format == "chat"
    assert [(u.kind, u.action) for u in t.turns] == [(u.kind, u.action) for u in trajs[1].turns]


def test_hermes_sharegpt_tool_call_tags() -> None:
    (t,) = _trajs(HERMES)
    assert t.task == "Can you help me generate a random password with a length of 8 characters?"
    assert json.loads(t.metadata)["system"] == "You are a helpful assistant with access to functions. Use them if required"
    assert [u.kind for u in t.turns] == ["env", "message"]
    call = t.turns[0]
    assert call.tool_name == "generate_password" and json.loads(call.tool_args) == {"length": 8}
    assert call.observation_kind == "tool_result"
    assert json.loads(call.observation) == {"name": "generate_password", "content": {"password": "aB3$kL9!"}}
    assert call.metadata is None
    assert t.turns[1].action == "Here is your new password: aB3$kL9!"


def test_hermes_tags_in_openai_messages(tmp_path: Path) -> None:
    """The same Hermes call and result in OpenAI `messages` form (role/content), as Qwen-style chat
    logs are exported: the call is read from the assistant text, the result paired in order."""
    (src,) = [json.loads(line) for line in HERMES.read_text().splitlines()]
    roles = {"system": "system", "human": "user", "gpt": "assistant", "tool": "tool"}
    line = {"messages": [{"role": roles[m["from"]], "content": m["value"]} for m in src["conversations"]]}
    (tmp_path / "hermes_openai.jsonl").write_text(json.dumps(line) + "\n")
    (t,) = _trajs(tmp_path / "hermes_openai.jsonl")
    assert [u.kind for u in t.turns] == ["env", "message"]
    call = t.turns[0]
    assert call.tool_name == "generate_password" and json.loads(call.tool_args) == {"length": 8}
    assert call.locator == "messages[2]+messages[3]" and call.thought is None
    assert json.loads(call.observation)["content"] == {"password": "aB3$kL9!"}


def test_tool_message_with_text_outside_the_tags_is_kept_whole(tmp_path: Path) -> None:
    text = '<tool_response>\n{"name": "get_weather", "content": "18C"}\n</tool_response>\nNote: 2 calls left.'
    line = {"messages": [{"role": "user", "content": "Weather?"},
                         {"role": "assistant", "content": '<tool_call>\n{"name": "get_weather", "parameters": {"city": "Oslo"}}\n</tool_call>'},
                         {"role": "tool", "content": text}]}
    (tmp_path / "c.jsonl").write_text(json.dumps(line) + "\n")
    (t,) = _trajs(tmp_path / "c.jsonl")
    (call,) = t.turns
    assert call.tool_name == "get_weather" and json.loads(call.tool_args) == {"city": "Oslo"}
    assert call.observation == text


def test_json_array_of_line_records_is_read_as_those_lines(tmp_path: Path) -> None:
    """A JSON array of a line format's records (FireAct's chat lines here) is read element by
    element by the format that knows them, not taken as generic chat: the same turns as the
    lines give, locator `[i]`. An array of records no format knows stays unknown."""
    sample = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus" / "fireact" / "finetune_gpt_format_hotpotqa.jsonl"
    lines = sample.read_text().splitlines()[:3]
    (tmp_path / "a.json").write_text(json.dumps([json.loads(x) for x in lines], indent=1))
    (tmp_path / "a.jsonl").write_text("\n".join(lines) + "\n")
    arr, ref = list(read_path(tmp_path / "a.json")), list(read_path(tmp_path / "a.jsonl"))
    assert [t.source_format for t in arr] == ["fireact-chat"] * 3
    assert [t.locator for t in arr] == ["[0]", "[1]", "[2]"]
    per_line = [sum(m["role"] == "assistant" for m in json.loads(x)["messages"]) for x in lines]  # one turn each
    assert [len(t.turns) for t in arr] == [len(t.turns) for t in ref] == per_line == [2, 2, 2]
    assert [[(u.kind, u.action, u.observation) for u in t.turns] for t in arr] == \
        [[(u.kind, u.action, u.observation) for u in t.turns] for t in ref]
    (tmp_path / "b.json").write_text(json.dumps([{"question": "?", "answer": 1}]))
    (q,) = list(read_path(tmp_path / "b.json"))
    assert getattr(q, "reason", None) == "unknown_format"


def test_llamafactory_tags_renamed_to_role_and_content(tmp_path: Path) -> None:
    # LLaMA-Factory lets a dataset name its ShareGPT tags (`role_tag: role`, `content_tag: content`,
    # `messages`): the same conversations with `function_call`/`observation` roles read the same
    roles = {"human": "user", "gpt": "assistant", "function_call": "function_call", "observation": "observation"}
    raw = [json.loads(line) for line in GLAIVE_JSONL.read_text().splitlines()]
    lines = [{"messages": [{"role": roles[m["from"]], "content": m["value"]} for m in r["conversations"]],
              "tools": r["tools"]} for r in raw]
    (tmp_path / "renamed.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    renamed = _trajs(tmp_path / "renamed.jsonl")
    original = _trajs(GLAIVE_JSONL)
    def fields(t: Trajectory) -> list[tuple]:
        return [(u.kind, u.action, u.tool_name, u.tool_args, u.observation) for u in t.turns]

    assert [fields(t) for t in renamed] == [fields(t) for t in original]
    assert renamed[0].turns[0].locator == "messages[1]+messages[2]"


def test_anthropic_messages_content_blocks(tmp_path: Path) -> None:
    # Anthropic Messages API: assistant `tool_use` blocks, results as `tool_result` blocks of the next
    # user message (`content` a string or text blocks, `is_error`), `thinking` blocks, `system` as blocks
    rec = {
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "messages": [
            {"role": "user", "content": "List files, then count lines"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two commands.", "signature": "sig"},
                {"type": "text", "text": "Running both."},
                {"type": "tool_use", "id": "toolu_01", "name": "bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_02", "name": "bash", "input": {"command": "wc -l a.txt"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_02", "is_error": True,
                 "content": [{"type": "text", "text": "wc: a.txt: No such file"}]},
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "b.txt"},
                {"type": "text", "text": "Now b.txt please."}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Only b.txt exists."}]},
        ],
    }
    (tmp_path / "a.jsonl").write_text(json.dumps(rec) + "\n")
    (t,) = _trajs(tmp_path / "a.jsonl")
    assert t.task == "List files, then count lines"
    assert json.loads(t.metadata) == {"form": "anthropic", "system": "You are a coding agent."}
    assert [u.kind for u in t.turns] == ["env", "env", "user", "message"]
    ls, wc, user, reply = t.turns
    assert (ls.action, ls.tool_name, ls.tool_call_id, ls.observation, ls.is_error) == (
        'bash {"command":"ls"}', "bash", "toolu_01", "b.txt", None)
    assert ls.thought == "Two commands.\n\nRunning both." and wc.thought is None
    assert (wc.tool_call_id, wc.observation, wc.is_error, wc.observation_kind) == (
        "toolu_02", "wc: a.txt: No such file", True, "error")
    assert ls.locator == "messages[1].content[2]+messages[2].content[1]"
    assert wc.locator == "messages[1].content[3]+messages[2].content[0]"
    assert user.action == "Now b.txt please." and reply.action == "Only b.txt exists."
    assert_schema_valid([t])
