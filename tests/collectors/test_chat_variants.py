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


def test_hermes_tool_calls_written_as_python_dicts() -> None:
    # NousResearch/Hermes-Function-Calling: prompt_assets/sys_prompt.yml shows the call as a Python dict and
    # utils.py validate_and_extract_tool_calls parses json.loads, then ast.literal_eval; a block neither
    # reads stays in the text instead of dropping the other calls
    first, mixed = _trajs(DATA / "hermes_pydict_toolcall.jsonl")
    assert [u.kind for u in first.turns] == ["env", "message"]
    call = first.turns[0]
    assert (call.tool_name, json.loads(call.tool_args)) == ("get_stock_fundamentals", {"symbol": "TSLA"})
    assert call.action == 'get_stock_fundamentals {"symbol":"TSLA"}'
    assert json.loads(call.observation) == {"name": "get_stock_fundamentals", "content": {"pe_ratio": 49.6}}
    assert call.locator == "conversations[2]+conversations[3]"
    assert [u.kind for u in mixed.turns] == ["env", "env", "message"]
    init, group = mixed.turns[:2]
    assert (init.tool_name, json.loads(init.tool_args)) == ("initialize_smart_home_system", {"device_list": ["Nest Thermostat"]})
    assert (group.tool_name, json.loads(group.tool_args)) == (
        "create_device_group", {"group_name": "Main", "devices": ["Nest Thermostat"], "active": True})
    # results paired by the name inside each response, not by position
    assert json.loads(init.observation)["content"] == {"ok": True}
    assert json.loads(group.observation)["content"] == {"group_id": 7}
    assert init.locator == "conversations[1][0]+conversations[2][1]"
    assert group.locator == "conversations[1][1]+conversations[2][0]"
    assert init.thought == 'Setting up.\n\n\n<tool_call>\n{"name": "broken", "arguments": {\n</tool_call>'


def test_tool_responses_sent_as_user_turns() -> None:
    # Alibaba-NLP/DeepResearch inference/react_agent.py: results come back as user messages holding only a
    # `<tool_response>` block (Qwen's chat template renders tool results so); its python tool's call is
    # `python\n<code>...</code>`, read as a call named by the first line with the rest as its input
    research, oslo = _trajs(DATA / "tongyi_deepresearch_user_results.jsonl")
    assert research.task == "Who founded Acme?"
    assert [u.kind for u in research.turns] == ["env", "env", "message", "user"]
    search, python = research.turns[:2]
    assert (search.tool_name, json.loads(search.tool_args)) == ("search", {"query": ["Acme founder"]})
    assert search.observation == "A Google search for 'Acme founder' found 1 result: Alice founded Acme in 1999."
    assert search.observation_kind == "tool_result" and search.locator == "messages[2]+messages[3]"
    assert search.thought == "<think>\nI should search.\n</think>"
    assert python.tool_name == "python"
    assert json.loads(python.tool_args) == {"input": "<code>\nprint(2025 - 1999)\n</code>"}
    assert python.observation == "stdout:\n26" and python.locator == "messages[4]+messages[5]"
    assert python.metadata is None
    # no call open: the block stays a user turn
    assert research.turns[3].action == "<tool_response>\nnot a result: no call is open\n</tool_response>"
    # text besides the block: not only results, so the user turn is kept whole and the call left unanswered
    assert [u.kind for u in oslo.turns] == ["message", "user", "message"]
    assert json.loads(oslo.turns[0].metadata) == {"result_missing": True}
    assert oslo.turns[1].action.endswith("And in Bergen?")


def test_tool_responses_with_text_around_them_split_per_open_call() -> None:
    # NousResearch/Hermes-Function-Calling functioncall.py: "Agent iteration {depth} to assist with user
    # query: ..." then one `<tool_response>` block per call, in one tool message
    (t,) = _trajs(DATA / "hermes_functioncall_iteration.jsonl")
    assert [u.kind for u in t.turns] == ["env", "env", "message"]
    price, fundamentals = t.turns[:2]
    assert price.tool_name == "get_current_stock_price"
    assert price.observation == '{"name": "get_current_stock_price", "content": 191.97}'
    assert json.loads(price.metadata) == {
        "outside_text": "Agent iteration 0 to assist with user query: Price and fundamentals of TSLA"}
    assert fundamentals.tool_name == "get_stock_fundamentals"
    assert fundamentals.observation == '{"name": "get_stock_fundamentals", "content": {"pe_ratio": 49.6}}'
    assert fundamentals.metadata is None
    assert (price.locator, fundamentals.locator) == ("messages[1][0]+messages[2][0]", "messages[1][1]+messages[2][1]")


def test_llamafactory_joined_parallel_observations() -> None:
    # hiyouga/LLaMA-Factory src/llamafactory/data/converter.py (OpenAIDatasetConverter) joins consecutive
    # tool messages with "\n</tool_response>\n<tool_response>\n"; split only when there is one piece per call
    joined, short = _trajs(DATA / "llamafactory_joined_observation.jsonl")
    assert [u.kind for u in joined.turns] == ["env", "env", "env", "message"]
    assert [(json.loads(u.tool_args)["city"], u.observation, u.locator) for u in joined.turns[:3]] == [
        ("Paris", '{"temp": 18}', "conversations[1][0]+conversations[2][0]"),
        ("Tokyo", '{"temp": 25}', "conversations[1][1]+conversations[2][1]"),
        ("Lima", '{"temp": 21}', "conversations[1][2]+conversations[2][2]"),
    ]
    # two pieces for three calls: which call each answers is unknown, so the text stays one result
    assert [u.kind for u in short.turns] == ["env", "message", "message", "message"]
    assert short.turns[0].observation == '{"temp": 18}\n</tool_response>\n<tool_response>\n{"temp": 25}'
    assert [json.loads(u.metadata) for u in short.turns[1:3]] == [{"result_missing": True}] * 2


def test_reused_tool_call_ids_pair_oldest_first() -> None:
    # providers such as DeepSeek, GLM and Kimi reuse an id within one assistant message
    (t,) = _trajs(DATA / "reused_tool_call_ids.jsonl")
    assert [u.kind for u in t.turns] == ["env", "env", "env"]
    assert [(json.loads(u.tool_args)["key"], u.tool_call_id, u.observation, u.locator) for u in t.turns] == [
        ("a", "call_0", "A", "messages[1].tool_calls[0]+messages[2]"),
        ("b", "call_0", "B", "messages[1].tool_calls[1]+messages[3]"),
        ("c", "call_0", "C", "messages[4].tool_calls[0]+messages[5]"),
    ]
    assert all(u.metadata is None for u in t.turns)


def test_openai_custom_tool_call() -> None:
    # openai-python src/openai/types/chat/chat_completion_message_custom_tool_call.py:
    # `{id, type: "custom", custom: {name, input}}`, `input` free text
    (t,) = _trajs(DATA / "openai_custom_tool_call.jsonl")
    assert [u.kind for u in t.turns] == ["env", "message"]
    call = t.turns[0]
    assert (call.tool_name, call.tool_call_id, json.loads(call.tool_args)) == ("shell", "call_1", {"input": "ls -la"})
    assert call.action == 'shell {"input":"ls -la"}'
    assert call.observation == "a.txt" and call.observation_kind == "tool_result"
    assert json.loads(call.metadata) == {"type": "custom"}
    assert_schema_valid([t])


def test_sharegpt_items_under_messages() -> None:
    # the ShareGPT `from`/`value` items under a `messages` key (LLaMA-Factory lets a dataset name its tags)
    (t,) = _trajs(DATA / "sharegpt_under_messages.jsonl")
    assert t.task == "Weather in Paris?" and json.loads(t.metadata) == {"form": "sharegpt"}
    assert [u.kind for u in t.turns] == ["env", "message"]
    call = t.turns[0]
    assert (call.tool_name, json.loads(call.tool_args), call.observation) == ("get_weather", {"city": "Paris"}, '{"temp": 18}')
    assert call.locator == "messages[1]+messages[2]"
    assert t.turns[1].action == "18C in Paris."


def _check_responses(t: Trajectory, field: str) -> None:
    prefix = f"{field}[" if field else "["
    assert t.task == "What's the weather in Paris?" and t.source_format == "chat"
    assert [u.kind for u in t.turns] == ["env", "env", "message"]
    weather, shell, answer = t.turns
    assert (weather.tool_name, weather.tool_call_id, json.loads(weather.tool_args)) == ("get_weather", "call_abc", {"city": "Paris"})
    assert weather.thought == "Need the weather tool." and weather.observation == "18C, sunny"
    assert weather.locator == f"{prefix}2]+{prefix}4]" and weather.metadata is None
    assert (shell.tool_name, shell.tool_call_id, json.loads(shell.tool_args)) == ("shell", "call_def", {"input": "date"})
    assert shell.thought is None and shell.observation == "Mon Sep  1" and json.loads(shell.metadata) == {"type": "custom"}
    assert shell.locator == f"{prefix}3]+{prefix}5]"
    assert (answer.action, answer.thought, answer.locator) == ("It is 18C and sunny.", None, f"{prefix}6]")


def test_openai_responses_item_lists() -> None:
    # openai-python src/openai/types/responses/ (function_call, function_call_output, custom_tool_call,
    # reasoning, message items); openai-agents-python `result.to_input_list()` is the list people save:
    # under `input` (with `instructions`), under `messages`, or as a bare array
    with_input, under_messages = _trajs(DATA / "openai_responses_items.jsonl")
    _check_responses(with_input, "input")
    assert json.loads(with_input.metadata) == {"form": "responses", "model": "gpt-5", "system": "You are a weather agent."}
    assert with_input.model == "gpt-5"
    _check_responses(under_messages, "messages")
    (bare,) = _trajs(DATA / "openai_responses_items.json")
    _check_responses(bare, "")
    assert bare.locator == "$" and json.loads(bare.metadata) == {"form": "responses"}
    assert_schema_valid([with_input, under_messages, bare])


def test_openai_responses_sniff() -> None:
    from collectors.chat import ChatImporter

    imp = ChatImporter()
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert imp.sniff([{"role": "user", "content": "x"}, call])
    assert imp.sniff({"input": [call]})
    assert not imp.sniff([{"role": "user", "content": "x"}])  # no Responses item: not claimed
    assert not imp.sniff({"input": [call, {"type": "other"}]})
    assert not imp.sniff({"input": "What is 2+2?"})


def test_anthropic_server_tool_results_in_the_assistant_message() -> None:
    # anthropic-sdk-python types/server_tool_use_block.py and web_search_tool_result_block.py: the call and
    # its result are blocks of the same assistant message, then the answer text
    (t,) = _trajs(DATA / "anthropic_server_tool.jsonl")
    assert json.loads(t.metadata) == {"form": "anthropic"}
    assert [u.kind for u in t.turns] == ["env", "env", "message"]
    found, failed, answer = t.turns
    assert (found.tool_name, found.tool_call_id, json.loads(found.tool_args)) == ("web_search", "srvtoolu_01", {"query": "Acme news"})
    assert found.thought == "Searching." and found.is_error is None and found.observation_kind == "tool_result"
    assert json.loads(found.observation) == [{"type": "web_search_result", "url": "https://acme.example/news",
                                              "title": "Acme ships Y", "encrypted_content": "abc"}]
    assert json.loads(found.metadata) == {"type": "server_tool_use"}
    assert found.locator == "messages[1].content[1]+messages[1].content[2]"
    assert (failed.tool_call_id, failed.is_error, failed.observation_kind, failed.thought) == ("srvtoolu_02", True, "error", None)
    assert json.loads(failed.observation) == {"type": "web_search_tool_result_error", "error_code": "max_uses_exceeded"}
    assert (answer.action, answer.locator) == ("Acme shipped Y.", "messages[1].content[5]")
    assert_schema_valid([t])


def test_anthropic_code_execution_results_are_output_and_exit_code() -> None:
    """They were kept as the result block's JSON, their return code a field in it."""
    (t,) = _trajs(DATA / "anthropic_code_execution.jsonl")
    assert [u.kind for u in t.turns] == ["env", "env", "message"]
    py, sh, answer = t.turns
    assert (py.tool_name, py.tool_call_id, py.thought) == ("code_execution", "srvtoolu_11", "I'll compute it.")
    assert (py.observation, py.stdout, py.stderr, py.exit_code, py.is_error, py.observation_kind) == (
        "5.5\n", "5.5\n", None, 0, False, "stdout")
    assert json.loads(py.metadata) == {"type": "server_tool_use", "files": ["file_011"]}
    err = "ls: cannot access '/nope': No such file or directory\n"
    assert (sh.tool_name, json.loads(sh.tool_args), sh.observation, sh.stdout, sh.stderr, sh.exit_code, sh.is_error) == (
        "bash_code_execution", {"command": "ls /nope"}, err, None, err, 2, True)
    assert sh.locator == "messages[1].content[3]+messages[1].content[4]"
    assert answer.action == "The mean is 5.5; /nope does not exist."
    assert_schema_valid([t])


def test_a_responses_request_logged_with_its_output() -> None:
    """`output` was left in the metadata (the model's answer and calls lost), and a text `input` was not claimed."""
    history, text_input = _trajs(DATA / "openai_responses_logged.jsonl")
    assert history.task == "How many entries are in /etc?"
    assert [(u.kind, u.action, u.observation, u.thought, u.locator) for u in history.turns] == [
        ("env", 'shell {"cmd":"ls /etc | wc -l"}', "212\n", None, "input[1]+input[2]"),
        ("message", "There are 212 entries.", None, "The count is known.", "output[1]")]
    meta = json.loads(history.metadata)
    assert (meta["form"], meta["system"], "output" in meta, history.model) == ("responses", "You are a shell agent.", False, "gpt-5")
    assert text_input.task == "What's the weather in Paris?"
    (call,) = text_input.turns
    assert (call.tool_name, call.tool_call_id, call.locator, json.loads(call.metadata)) == (
        "get_weather", "call_9", "output[0]", {"result_missing": True})
    assert json.loads(text_input.metadata)["usage"] == {"input_tokens": 52, "output_tokens": 18}
    assert_schema_valid([history, text_input])


def test_openai_responses_builtin_tools() -> None:
    # openai-python src/openai/types/responses/: response_function_shell_tool_call(_output).py,
    # response_apply_patch_tool_call(_output).py, response_input_item_param.py (LocalShellCall, its output
    # naming the call in `id`; McpListTools, McpApprovalRequest/Response, McpCall, ImageGenerationCall,
    # ComputerCallOutput), response_function_web_search.py, response_file_search_tool_call.py,
    # response_code_interpreter_tool_call.py, response_computer_tool_call.py
    client, hosted = _trajs(DATA / "openai_responses_builtin_tools.jsonl")
    assert client.task == "Fix the failing test, then find the weather in Paris." and client.model == "gpt-5.1"
    assert json.loads(client.metadata) == {"form": "responses", "model": "gpt-5.1", "unread_items": {"item_reference": 1}}
    assert [u.kind for u in client.turns] == ["env", "env", "env", "env", "env", "env", "message", "message"]
    shell, patch, bad_patch, ls, pwd, search, opened, answer = client.turns
    # two commands: the output chunks in order, each stdout then stderr; the last exit code is the turn's
    assert (shell.tool_name, shell.action, shell.thought) == ("shell", "pytest -q\necho done", "Run the tests first.")
    assert (shell.observation, shell.stdout, shell.stderr) == ("1 failed\ndone\nwarn\n", "1 failed\ndone\n", "warn\n")
    assert (shell.exit_code, shell.is_error, shell.observation_kind) == (0, False, "stdout")
    assert json.loads(shell.metadata) == {"type": "shell_call", "exit_codes": [1, 0]}
    assert (shell.tool_call_id, shell.locator) == ("call_sh1", "input[2]+input[3]")
    assert json.loads(patch.tool_args) == {"type": "update_file", "path": "src/calc.py",
                                           "diff": "@@\n-    return a - b\n+    return a + b\n"}
    assert (patch.observation, patch.is_error, patch.locator) == ("Updated src/calc.py", None, "input[4]+input[5]")
    assert (bad_patch.observation, bad_patch.is_error, bad_patch.observation_kind) == ("src/old.py: no such file", True, "error")
    # the argv as a shell reads it; an output item names its call in `id` (two calls open, answered in
    # reverse order)
    assert (ls.action, ls.observation, ls.observation_kind, ls.locator) == ("ls -la 'my dir'", "total 0\n", "stdout", "input[8]+input[11]")
    assert (ls.tool_name, ls.tool_call_id, ls.exit_code) == ("local_shell", "call_ls1", None)
    assert (pwd.action, pwd.observation, pwd.locator) == ("pwd", "/repo\n", "input[9]+input[10]")
    assert (search.tool_name, json.loads(search.tool_args)) == ("web_search", {"type": "search", "query": "weather Paris"})
    assert json.loads(search.observation) == [{"type": "url", "url": "https://weather.example/paris"}]
    assert (search.observation_kind, search.locator) == ("search_results", "input[12]")
    # an opened page's text is not in the log
    assert (opened.tool_name, opened.observation, opened.locator) == ("web_search", None, "input[13]")
    assert json.loads(opened.metadata) == {"type": "web_search_call", "status": "completed", "result_missing": True}
    assert (answer.action, answer.locator) == ("Fixed; 18C in Paris.", "input[15]")

    assert hosted.task == "Summarise the sales file and list the open issues."
    assert [u.kind for u in hosted.turns] == ["env", "env", "env", "env", "env", "message", "message"]
    files, code, issues, missing_repo, click, image, done = hosted.turns
    assert (files.tool_name, json.loads(files.tool_args), files.observation_kind) == ("file_search", {"queries": ["sales 2024"]}, "search_results")
    assert json.loads(files.observation) == [{"file_id": "file_1", "filename": "sales.pdf", "score": 0.92,
                                              "text": "Q1 sales rose 8%.", "attributes": {}}]
    assert (code.action, code.observation, code.observation_kind) == ("print(1+1)", "2\n", "stdout")
    assert json.loads(code.metadata) == {"type": "code_interpreter_call", "status": "completed", "container_id": "cntr_1",
                                         "images": ["https://files.example/plot.png"]}
    assert (issues.tool_name, json.loads(issues.tool_args), issues.observation) == ("list_issues", {"repo": "acme/app"}, "[#12 Crash on start]")
    assert (issues.is_error, json.loads(issues.metadata)["approval_request_id"]) == (None, "mcpr_1")
    assert (missing_repo.observation, missing_repo.is_error, missing_repo.observation_kind) == ("Repository not found", True, "error")
    shot = "data:image/png;base64,iVBORw0KGgo="
    assert (click.tool_name, json.loads(click.tool_args)) == ("computer", {"type": "click", "button": "left", "x": 10, "y": 20})
    assert json.loads(click.observation) == {"type": "computer_screenshot",
                                             "image_url": f"data:image/png;base64,<{len(shot)} characters not kept>"}
    assert (image.tool_name, image.observation) == ("image_generation", None)
    assert json.loads(image.metadata) == {"type": "image_generation_call", "status": "completed", "result_base64_chars": 8}
    assert done.action == "Done."
    meta = json.loads(hosted.metadata)
    assert meta["unread_items"] == {"tool_search_call": 1}
    assert [a["type"] for a in meta["mcp_approvals"]] == ["mcp_approval_request", "mcp_approval_response"]
    # no top-level `tools`: the remote MCP server's list is the action space
    assert json.loads(hosted.action_space) == [{"name": "list_issues", "server_label": "github",
                                                "input_schema": {"type": "object", "properties": {"repo": {"type": "string"}}}}]
    assert_schema_valid([client, hosted])


def test_openai_responses_sniff_later_item_kinds() -> None:
    from collectors.chat import ChatImporter

    imp = ChatImporter()
    call = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
    assert imp.sniff({"input": [call, {"type": "tool_search_call"}, {"type": "tool_search_output"}]})
    assert imp.sniff([{"role": "user", "content": "x"}, {"type": "shell_call", "call_id": "s", "action": {}}])
    assert not imp.sniff([{"type": "tool_search_call"}])  # only kinds this importer cannot read: not claimed
    assert not imp.sniff({"input": [call, {"type": "Shell Call"}]})


def test_gemini_contents() -> None:
    # Gemini API / Vertex AI tuning JSONL (`systemInstruction`, `contents`, `tools[].functionDeclarations`;
    # google-genai SDK dumps in snake_case): functionCall / functionResponse parts, code execution parts,
    # thought parts
    rest, sdk = _trajs(DATA / "gemini_contents.jsonl")
    assert (rest.task, rest.source_format) == ("Weather in Paris and Rome?", "chat")
    assert json.loads(rest.metadata) == {"form": "gemini", "system": "You are a travel assistant."}
    assert json.loads(rest.action_space)[0]["functionDeclarations"][0]["name"] == "get_weather"
    assert [u.kind for u in rest.turns] == ["env", "env", "message"]
    paris, rome, answer = rest.turns
    # the responses come back in the other order: paired by id
    assert (paris.tool_call_id, json.loads(paris.tool_args), json.loads(paris.observation)) == ("fc_1", {"city": "Paris"}, {"output": {"temp_c": 18}})
    assert (paris.thought, paris.is_error, paris.locator) == ("Checking both cities.", None, "contents[1].parts[1]+contents[2].parts[1]")
    assert (rome.tool_call_id, json.loads(rome.observation), rome.is_error, rome.observation_kind) == ("fc_2", {"error": "station offline"}, True, "error")
    assert rome.thought is None and rome.locator == "contents[1].parts[2]+contents[2].parts[0]"
    assert (answer.action, answer.locator) == ("Paris is 18C; Rome is unavailable.", "contents[3].parts[0]")

    assert sdk.task == "What is the sum of the first 10 primes?" and json.loads(sdk.metadata) == {"form": "gemini"}
    assert [u.kind for u in sdk.turns] == ["env", "env", "message", "user", "env"]
    ok, failed, said, user, product = sdk.turns
    assert (ok.tool_name, ok.action, ok.observation) == ("code_execution", "print(sum([2, 3, 5, 7, 11, 13, 17, 19, 23, 29]))", "129\n")
    assert (ok.thought, ok.is_error, ok.observation_kind, ok.locator) == ("Add them up in code.", False, "stdout", "contents[1].parts[1]+contents[1].parts[2]")
    assert (failed.action, failed.is_error, json.loads(failed.metadata)) == ("1/0", True, {"outcome": "OUTCOME_FAILED"})
    assert failed.observation == "ZeroDivisionError: division by zero\n"
    assert (said.action, said.locator, user.action) == ("The sum is 129.", "contents[1].parts[5]", "And the product?")
    # no ids: paired by name; an older `function` role holds the response
    assert (product.tool_name, json.loads(product.tool_args), product.observation) == ("multiply_all", {"numbers": [2, 3, 5]}, '{"output":30}')
    assert product.locator == "contents[3].parts[0]+contents[4].parts[0]"
    assert_schema_valid([rest, sdk])


def test_gemini_contents_sniff() -> None:
    from collectors.chat import ChatImporter

    imp = ChatImporter()
    assert imp.sniff({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    assert not imp.sniff({"contents": "hi"})
    assert not imp.sniff({"contents": [{"role": "user", "text": "hi"}]})  # no parts: not Gemini contents
