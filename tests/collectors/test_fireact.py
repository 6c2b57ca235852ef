"""FireAct importers, through the ingest reader (so sniffing must pick them for these files).

Expected counts were established from the raw files with jq, independently of the importers:
- sample jsonl: `wc -l` = 500 lines; turns = assistant messages per line,
  `jq -s '[.[] | [.messages[] | select(.role=="assistant")] | length] | add'` = 1385; per line
  1 (1 line, line 51), 2 (176), 3 (273), 4 (37), 5 (13); line 1 has 2.
- sample trajs: `jq length` = 465 keys; assistant messages over all `traj` lists = 1241; keys
  6238, 2866, 6952, 457 have 1, 4, 7, 4; `jq '[.[] | select(.reward==true)] | length'` = 200.
- tests/data/fireact/finetune_alpaca_format_mixed.json: `[.[] | .output | [scan("(?m)^Observation:")] | length]`
  = [3, 1, 2] (entry 2 has 3 `Action:` lines but the first two share one observation).
- tests/data/fireact/trajs_hotpotqa_text_llama.json: observations per `traj` string = [2, 2].
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "fireact"


def _split(records):
    trajs = [r for r in records if isinstance(r, Trajectory)]
    quarantined = [r for r in records if isinstance(r, QuarantineRecord)]
    return trajs, quarantined


def test_sample_chat_jsonl(sample: Path) -> None:
    trajs, q = _split(list(read_path(sample / "fireact" / "finetune_gpt_format_hotpotqa.jsonl")))
    assert q == []
    assert len(trajs) == 500
    assert {t.source_format for t in trajs} == {"fireact-chat"}
    assert {t.domain for t in trajs} == {"search"}
    assert sum(len(t.turns) for t in trajs) == 1385
    hist = collections.Counter(len(t.turns) for t in trajs)
    assert hist == {1: 1, 2: 176, 3: 273, 4: 37, 5: 13}
    by_loc = {t.locator: t for t in trajs}
    assert len(by_loc["line:51"].turns) == 1

    t = by_loc["line:1"]
    assert t.task.startswith("Who was once considered the best kick boxer in the world")
    first, last = t.turns
    assert first.kind == "env"
    assert first.action == "search[best kick boxer in the world unsportsmanlike conducts crimes of violence]"
    assert first.tool_name == "search"
    assert json.loads(first.tool_args) == {"input": "best kick boxer in the world unsportsmanlike conducts crimes of violence"}
    assert first.thought.startswith("I need to search for the best kick boxer")
    assert first.observation.startswith("Badr Hari (born 8 December 1984) is a Moroccan-Dutch kickboxer.")
    assert first.observation_kind == "search_results"
    assert first.locator == "messages[1]+messages[2]"
    assert last.tool_name == "finish" and last.action == "finish[Badr Hari]"
    assert last.observation == "Episode finished, reward = True"
    assert last.observation_kind == "tool_result"
    assert last.reward == 1.0
    assert t.reward == 1.0 and t.outcome == "success"


def test_sample_trajs_json(sample: Path) -> None:
    trajs, q = _split(list(read_path(sample / "fireact" / "trajs_hotpotqa_dev_ft_gpt-3.5-turbo.json")))
    assert q == []
    assert len(trajs) == 465
    assert {t.source_format for t in trajs} == {"fireact-trajs"}
    assert {t.domain for t in trajs} == {"search"}
    assert sum(len(t.turns) for t in trajs) == 1241
    by_id = {t.native_id: t for t in trajs}
    assert [len(by_id[k].turns) for k in ("6238", "2866", "6952", "457")] == [1, 4, 7, 4]
    assert sum(1 for t in trajs if t.reward == 1.0) == 200

    t = by_id["6238"]
    assert t.locator == "key:6238"
    assert t.task == "Who created the show with Wendy Schaal doing the voice of Francine?"
    meta = json.loads(t.metadata)
    assert meta["gt"] == "seth macfarlane" and meta["pred"] == "seth macfarlane" and meta["f1"] == 1.0 and meta["em"] is True
    assert t.turns[0].action == "finish[Seth MacFarlane]"
    assert t.turns[0].locator == "traj[1]+traj[2]"

    # The model ran on past its first action: only the first is executed, the rest is kept verbatim.
    bronx = by_id["2866"].turns[1]
    assert bronx.action == "search[scientific journal published in the Bronx first year]"
    trailing = json.loads(bronx.metadata)["trailing_text"]
    assert trailing.startswith("Thought: The search result still does not provide the specific information I need.")
    assert "Action: search[scientific journal published in the Bronx history]" in trailing

    # An action the harness could not run comes back as an exception: an error observation.
    click = by_id["457"].turns[1]
    assert click.tool_name == "click" and click.action == "click[Frige - Wikipedia]"
    assert click.observation == "('click', 'Frige - Wikipedia') generated an exception: Unknown tool name: click"
    assert click.is_error is True and click.observation_kind == "error"

    # Text after the closing bracket of an action is kept, not dropped.
    durant = by_id["6952"].turns[2]
    assert durant.action == "search[awards initiated following 1952-53 NBA season] Kevin Wayne Durant"
    assert json.loads(durant.tool_args) == {"input": "awards initiated following 1952-53 NBA season"}
    assert json.loads(durant.metadata)["action_suffix"] == "Kevin Wayne Durant"


def test_alpaca_form() -> None:
    trajs, q = _split(list(read_path(DATA / "finetune_alpaca_format_mixed.json")))
    assert q == []
    assert [t.source_format for t in trajs] == ["fireact-trajs"] * 3
    assert [t.domain for t in trajs] == ["search"] * 3
    assert [len(t.turns) for t in trajs] == [3, 1, 2]
    assert [t.locator for t in trajs] == ["[0]", "[1]", "[2]"]
    first = trajs[0]
    assert first.task == "Which magazine was started first Arthur's Magazine or First for Women?"
    assert first.turns[1].action == "search[First for Women start date]"
    assert first.turns[1].observation.startswith("First for Women is a woman's magazine")
    assert first.turns[2].reward == 1.0 and first.reward == 1.0
    assert trajs[1].turns[0].action == "finish[no]" and trajs[1].turns[0].reward == 1.0  # `reward = 1`
    mmlu = trajs[2]
    assert mmlu.task.startswith("Question: Which gas makes up most of Earth's atmosphere?\nA. oxygen")
    assert mmlu.turns[0].action == "search[composition of Earth's atmosphere]"
    assert json.loads(mmlu.turns[0].metadata)["trailing_text"] == (
        "Thought: The first search may be slow, I will also look up nitrogen.\nAction: search[percentage of nitrogen in air]"
    )
    assert mmlu.reward == 0.0 and mmlu.outcome == "failure"


def test_text_trajectories() -> None:
    trajs, q = _split(list(read_path(DATA / "trajs_hotpotqa_text_llama.json")))
    assert q == []
    assert [t.native_id for t in trajs] == ["6238", "3395"]
    assert [len(t.turns) for t in trajs] == [2, 2]
    t = trajs[0]
    assert t.task == "Who created the show with Wendy Schaal doing the voice of Francine?"
    assert t.turns[0].action == "search[Wendy Schaal voice of Francine show creator]"
    assert t.turns[0].observation.startswith('Schaal voices Francine Smith on the Fox animated series "American Dad!"')
    assert t.turns[0].thought == "I need to search who created the show with Wendy Schaal doing the voice of Francine."
    assert t.turns[0].locator == "traj:L7-L8+traj:L9-L9"
    assert trajs[1].reward == 0.0 and json.loads(trajs[1].metadata)["f1"] == 0.25


def test_chat_line_with_unanswered_action_and_a_broken_line() -> None:
    recs = list(read_path(DATA / "finetune_gpt_format_broken.jsonl"))
    trajs, q = _split(recs)
    assert len(trajs) == 1 and len(q) == 1
    last = trajs[0].turns[-1]
    assert last.kind == "message" and last.action == "finish[Super Bowl XLVIII]" and last.observation is None
    assert json.loads(last.metadata) == {"observation_missing": True}
    assert q[0].locator == "line:2" and q[0].importer == "fireact-chat"
    assert q[0].reason == "malformed_record"
    assert "line:2" in q[0].detail and "'messages' must be a list" in q[0].detail


def test_entry_without_traj_is_quarantined_by_key() -> None:
    trajs, q = _split(list(read_path(DATA / "trajs_missing_traj.json")))
    assert [t.native_id for t in trajs] == ["101"]
    assert len(q) == 1
    assert q[0].locator == "key:102" and q[0].reason == "missing_field"
    assert "key:102" in q[0].detail and "'traj'" in q[0].detail


def test_generic_chat_is_not_fireact() -> None:
    from collectors.fireact import FireActChatImporter

    plain = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello! How can I help?"}]}
    assert not FireActChatImporter().sniff(plain)
    with_calls = {
        "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function", "function": {"name": "w", "arguments": "{}"}}]},
        ]
    }
    assert not FireActChatImporter().sniff(with_calls)
    json_react = {  # ReAct with JSON actions (tau-bench's ReAct agent) is not FireAct's bracket syntax
        "messages": [
            {"role": "user", "content": "Cancel my order."},
            {"role": "assistant", "content": 'Thought:\nI need the order id.\nAction:\n{"name": "get_order", "arguments": {}}'},
            {"role": "user", "content": "API output: {}"},
        ]
    }
    assert not FireActChatImporter().sniff(json_react)


def test_domain_override() -> None:
    recs = list(read_path(DATA / "finetune_alpaca_format_mixed.json", domain_override="web"))
    assert {r.domain for r in recs} == {"web"}


def _texts(seed: int, n: int) -> list[str]:
    """Random ReAct-like texts built from the pieces the parsers look at (labels with and without
    numbers, spaces and tabs, brackets, non-ASCII names, newlines)."""
    import random

    pieces = ["Thought", "Action", "Observation", ":", " ", "\t", "\n", "1", " 2", "search", "finish", "é",
              "[", "]", "x y", "look up", "_a.b-c", "Episode finished", "\u00a0", "\u3000", ""]
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 14))) for _ in range(n)]


def test_fast_paths_agree_with_the_label_regexes() -> None:
    """The str-method shortcuts for the usual labels give exactly what the regexes they stand in for
    give, on 20,000 random texts and the sample's agent and user messages."""
    import re

    from collectors import fireact as F
    from tests.conftest import SAMPLE

    line_label = re.compile(r"^[ \t]*Action(?:[ \t]*\d+)?[ \t]*:", re.M)
    thought_label = re.compile(r"\s*Thought(?:[ \t]*\d+)?[ \t]*:[ \t]?")
    sample = [m["content"] for line in (SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl").read_text().splitlines()
              for m in json.loads(line)["messages"]]
    texts = _texts(0, 20_000) + sample
    for t in texts:
        m = line_label.search(t)
        assert F._label_line(t, "Action") == ((m.start(), m.end()) if m else None), repr(t)
        m = thought_label.match(t)
        assert F._strip_thought_label(t) == (t[m.end():].strip() if m else t.strip()), repr(t)
        for a in (t, t.strip(), f"search[{t}]", f"{t}[q]"):
            m = F._CALL.match(a)  # the regex `_parse_call` falls back to
            want = (m.group(1), m.group(2), m.group(3).strip() or None) if m else (None, None, None)
            assert F._parse_call(a) == want, repr(a)
        q, _, blocks = F.blocks_from_messages([{"role": "user", "content": "q"}, {"role": "user", "content": t}], "m", "w")
        m = F._OBS_PREFIX.match(t)
        assert [(b[0], b[1]) for b in blocks] == [("obs", t[m.end():].strip()) if m else ("user", t)], repr(t)
    assert F._input_args('a "b"\n\u00e9') == F.dumps({"input": 'a "b"\n\u00e9'})
