"""FireAct files other than the HotpotQA sample: multi-task / multi-method fine-tune data (CoT, ReAct and
Reflexion, HotpotQA + StrategyQA + MMLU), a Llama-2-13B eval dump, and the StrategyQA task data.

Fixtures and their origin: tests/data/fireact-variants/README.md. Expected values were read off the raw
files, independently of the importer (per record: messages / `^Action:` and `^Observation:` lines counted,
one turn per agent message and the observation that answers it, as the module docstring defines):
- gpt_format multimethod: assistant messages per line = [2, 1, 1, 10, 12]; final observations
  `reward = 1`, `1`, `1`, `False`, `1`; line 5's 11th assistant message has no `Action:` line.
- alpaca multimethod: `^Action:` lines per output = [1, 1, 8, 9], each followed by one `^Observation:`;
  outputs 2 and 3 end `reward = False`; output 3 has `Observation: None` after actions 1, 4 and 7.
- llama-2-13b dump: keys 4237, 1560; `^Action:` lines = [3, 3]; reward true / false.
"""

from __future__ import annotations

import json
from pathlib import Path

from collectors.fireact import FireActChatImporter, FireActTrajsImporter
from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid

DATA = Path(__file__).resolve().parent.parent / "data" / "fireact-variants"

REFLECT_5 = "Now that I haven't solved the task within 5 steps, let me do a reflection and think about how to improve my strategy. Thought: "
WRAP_UP_9 = "Now that I haven't solved the task within 9 steps, I need to wrap up and finish this task in the next step."


def _read(name: str) -> tuple[list[Trajectory], list[QuarantineRecord]]:
    recs = list(read_path(DATA / name))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    quarantined = [r for r in recs if isinstance(r, QuarantineRecord)]
    assert len(trajs) + len(quarantined) == len(recs)
    return trajs, quarantined


def _args(turn) -> dict:
    return json.loads(turn.tool_args)


# --- gpt_format/multitask_multimethod.jsonl ------------------------------------------------------------


def test_multimethod_chat_counts_and_rewards() -> None:
    trajs, q = _read("finetune_gpt_format_multitask_multimethod.jsonl")
    assert q == []
    assert [t.locator for t in trajs] == [f"line:{i}" for i in range(1, 6)]
    assert {t.source_format for t in trajs} == {"fireact-chat"}
    assert {t.domain for t in trajs} == {"search"}
    assert [len(t.turns) for t in trajs] == [2, 1, 1, 10, 12]
    assert [t.reward for t in trajs] == [1.0, 1.0, 1.0, 0.0, 1.0]
    assert [t.outcome for t in trajs] == ["success", "success", "success", "failure", "success"]
    assert sum(1 for t in trajs for u in t.turns if u.tool_name == "search") == 20
    assert sum(1 for t in trajs for u in t.turns if u.tool_name == "finish") == 5
    assert_schema_valid(trajs)


def test_multimethod_chat_mmlu_react_and_cot() -> None:
    trajs, _ = _read("finetune_gpt_format_multitask_multimethod.jsonl")
    react, cot_mmlu, cot_sqa = trajs[0], trajs[1], trajs[2]

    assert react.task.startswith("Question: A small creek becomes a rushing river")
    assert react.task.endswith("\nC. bunny rolls\nD. speaking deer")
    search, finish = react.turns
    assert search.kind == "env" and search.observation_kind == "search_results"
    assert search.action == "search[What happens when a creek becomes a river?]"
    assert search.tool_name == "search" and _args(search) == {"input": "What happens when a creek becomes a river?"}
    assert search.observation.startswith("Flowing water finds its way downhill initially as small creeks.")
    assert search.observation.endswith("a lake will form.")
    assert search.locator == "messages[1]+messages[2]"
    assert finish.action == "finish[B]" and _args(finish) == {"input": "B"}
    assert finish.observation == "Episode finished, reward = 1"
    assert finish.observation_kind == "tool_result" and finish.reward == 1.0

    # CoT: the whole reasoning is one thought, the only action is the answer.
    (only,) = cot_mmlu.turns
    assert only.kind == "env" and only.action == "finish[A]" and only.tool_name == "finish"
    assert only.thought.startswith("Decomposition is the process by which organic matter")
    assert only.thought.endswith("nutrients are released when wood is broken down.")
    assert only.reward == 1.0 and only.metadata is None
    (only,) = cot_sqa.turns
    assert cot_sqa.task == "Would an ancient visitor to Persia probably consume crocus threads?"
    assert only.action == "finish[yes]" and only.thought.endswith("So the answer is yes.")
    assert only.observation == "Episode finished, reward = 1" and only.reward == 1.0


def test_multimethod_chat_reflexion() -> None:
    trajs, _ = _read("finetune_gpt_format_multitask_multimethod.jsonl")
    t = trajs[3]
    assert t.task == "In what Year was Tori Spelling's Academy Award Winning Co-Star from Mother, May I Sleep with Danger? born?"
    assert [u.tool_name for u in t.turns] == ["search"] * 9 + ["finish"]
    assert [_args(u)["input"] for u in t.turns] == [
        "Tori Spelling's Academy Award Winning Co-Star from Mother, May I Sleep with Danger?",
        "Academy Award Winning Co-Star in Mother, May I Sleep with Danger?",
        "Academy Award winner in Mother, May I Sleep with Danger?",
        "cast of Mother, May I Sleep with Danger?",
        "Academy Award winner in cast of Mother, May I Sleep with Danger?",
        "Academy Award winners who have worked with Tori Spelling",
        "full cast of Mother, May I Sleep with Danger?",
        "Has Ivan Sergei won an Academy Award?",
        "Has Todd Caldecott won an Academy Award?",
        "Unable to find the answer",
    ]
    assert all(u.kind == "env" and u.metadata is None for u in t.turns)
    assert [u.locator for u in t.turns] == [f"messages[{2 * i + 1}]+messages[{2 * i + 2}]" for i in range(10)]
    # The reflection is part of the thought of the 6th action (FireAct writes it inline, same message).
    reflect = t.turns[5]
    assert reflect.thought.startswith(REFLECT_5 + "The search results have not provided the name of the Academy Award")
    assert reflect.observation.startswith("Tori Spelling ; The Stinkers Bad Movie Awards.")
    assert t.turns[3].observation == (
        "Top cast ; Tori Spelling \u00b7 Laurel Lewisohn ; Ivan Sergei \u00b7 Billy Jones - aka Kevin Shane ; "
        "Todd Caldecott \u00b7 Jackson ; Gabrielle Miller ; Lochlyn Munro \u00b7 Kevin Shane."
    )
    # `Thought: ... Action: finish[x]` on one line, then `Action: finish[x]` on its own line: the harness
    # (`split("\nAction: ")`) executed the line-start one; the inline copy stays in the thought.
    last = t.turns[-1]
    assert last.action == "finish[Unable to find the answer]"
    assert last.thought == WRAP_UP_9 + " Action: finish[Unable to find the answer]"
    assert last.observation == "Episode finished, reward = False"
    assert last.reward == 0.0 and t.reward == 0.0 and t.outcome == "failure"


def test_multimethod_chat_answered_message_without_action() -> None:
    trajs, _ = _read("finetune_gpt_format_multitask_multimethod.jsonl")
    t = trajs[4]
    assert t.task == "Was a woman Prime Minister directly before or after Stanley Baldwin?"
    assert [u.tool_name for u in t.turns] == ["search"] * 10 + [None, "finish"]
    assert [_args(u)["input"] for u in t.turns[:10]] == [
        "who was the Prime Minister directly before Stanley Baldwin?",
        "Stanley Baldwin predecessor",
        "list of UK Prime Ministers",
        "UK Prime Ministers before and after Stanley Baldwin",
        "who was the Prime Minister before Stanley Baldwin?",
        "Stanley Baldwin predecessor",
        "UK Prime Ministers before Stanley Baldwin",
        "Stanley Baldwin predecessor and successor",
        "Prime Minister of UK before Stanley Baldwin",
        "Stanley Baldwin predecessor and successor",
    ]
    assert t.turns[2].observation == "Rishi Sunak"
    assert t.turns[5].thought.startswith(REFLECT_5 + "The search results are not providing")
    assert t.turns[9].thought.startswith(WRAP_UP_9 + " Thought: The search results are still not providing")
    # Agent text with no `Action:` that still got an observation: an env turn whose action is the raw text.
    odd = t.turns[10]
    assert odd.kind == "env" and odd.tool_name is None and odd.tool_args is None and odd.thought is None
    assert odd.action == (
        "Thought: Stanley Baldwin was succeeded by Neville Chamberlain and preceded by Ramsay MacDonald, "
        "both of whom are not women. So, the answer is no."
    )
    assert odd.observation.startswith("Baldwin retired in 1937 and was succeeded by Neville Chamberlain. At that time,")
    assert odd.observation_kind == "tool_result" and odd.reward is None
    assert json.loads(odd.metadata) == {"action_unparsed": True}
    assert odd.locator == "messages[21]+messages[22]"
    last = t.turns[11]
    assert last.action == "finish[no]" and last.reward == 1.0 and last.locator == "messages[23]+messages[24]"
    assert t.reward == 1.0 and t.outcome == "success"


# --- alpaca_format/hotpotqa_multimethod.json -----------------------------------------------------------


def test_multimethod_alpaca() -> None:
    trajs, q = _read("finetune_alpaca_format_hotpotqa_multimethod.json")
    assert q == []
    assert [t.locator for t in trajs] == ["[0]", "[1]", "[2]", "[3]"]
    assert {t.source_format for t in trajs} == {"fireact-trajs"}
    assert all(t.native_id is None for t in trajs)
    assert [len(t.turns) for t in trajs] == [1, 1, 8, 9]
    assert [t.reward for t in trajs] == [1.0, 1.0, 0.0, 0.0]
    assert [t.outcome for t in trajs] == ["success", "success", "failure", "failure"]
    assert_schema_valid(trajs)

    # CoT, output without a trailing newline after the last observation.
    (cot,) = trajs[0].turns
    assert cot.action == "finish[William A. Fowler]" and cot.observation == "Episode finished, reward = 1"
    assert cot.thought.startswith("The developer of the Chandrasekhar virial equations is Subrahmanyan Chandrasekhar.")
    assert cot.locator == "output:L1-L2+output:L3-L3" and cot.reward == 1.0
    # Quotes inside the finish brackets are part of the answer.
    (quoted,) = trajs[1].turns
    assert quoted.action == "finish[\"Thank God I'm a Country Boy\"]"
    assert _args(quoted) == {"input": "\"Thank God I'm a Country Boy\""} and quoted.metadata is None

    film = trajs[2]
    assert film.task.startswith("Who is the director of the upcoming Candian drama film in which the actress who made her film d\u00e9but")
    assert [u.tool_name for u in film.turns] == ["search"] * 7 + ["finish"]
    assert film.turns[0].action == "search[actress who made her film d\u00e9but in The Darjeeling Limited]"
    assert film.turns[0].observation == "Amara Karunakaran"
    assert film.turns[5].action == "search[Amara Karunakaran filmography]"
    assert film.turns[5].thought.startswith(REFLECT_5 + "The search results have not provided any information")
    assert film.turns[-1].action == "finish[Unable to find the answer]"
    assert film.turns[-1].observation == "Episode finished, reward = False" and film.turns[-1].reward == 0.0
    assert film.turns[-1].locator == "output:L22-L23+output:L24-L24"

    tennis = trajs[3]
    assert tennis.task == (
        "Q1: Which tennis player has won more ranked matches, Svetlana Kuznetsova or Julien Benneteau? A1: Svetlana Kuznetsova"
    )
    assert [u.tool_name for u in tennis.turns] == ["search"] * 8 + ["finish"]
    # A search that found nothing is written `Observation: None`: kept verbatim, not an error.
    assert [i for i, u in enumerate(tennis.turns) if u.observation == "None"] == [0, 3, 6]
    assert {tennis.turns[i].observation_kind for i in (0, 3, 6)} == {"search_results"}
    assert all(u.is_error is None for u in tennis.turns)
    assert tennis.turns[5].thought.startswith(REFLECT_5 + "I have been unable to find")
    assert tennis.turns[7].thought.endswith("or I could try a different search engine.")
    assert tennis.turns[-1].action == "finish[Unable to find the exact number of ranked matches won by Svetlana Kuznetsova.]"
    assert tennis.turns[-1].reward == 0.0


# --- trajs/ Llama-2-13B eval dump ----------------------------------------------------------------------


def test_llama_13b_dump() -> None:
    trajs, q = _read("trajs_hotpotqa_dev_llama-2-13b.json")
    assert q == []
    assert [t.native_id for t in trajs] == ["4237", "1560"]
    assert [t.locator for t in trajs] == ["key:4237", "key:1560"]
    assert [len(t.turns) for t in trajs] == [3, 3]
    assert [[u.tool_name for u in t.turns] for t in trajs] == [["search", "search", "finish"]] * 2
    assert [t.reward for t in trajs] == [1.0, 0.0]
    assert [t.outcome for t in trajs] == ["success", "failure"]
    assert_schema_valid(trajs)

    tunak, census = trajs
    assert tunak.task == "\"Tunak\", is a bhangra/pop love song by an artist born in which year ?"
    assert tunak.turns[0].action == "search[Tunak bhangra/pop love song artist]"
    assert tunak.turns[0].observation.startswith("Daler Mehndi's \u201cTunak Tunak Tun\u201d is the global song")
    assert tunak.turns[0].thought == "I need to find out who the artist is and then search for their birth year."
    assert tunak.turns[0].locator == "traj:L7-L8+traj:L9-L9"
    assert tunak.turns[1].observation == "August 18, 1967"
    assert tunak.turns[2].action == "finish[1967]" and tunak.turns[2].reward == 1.0
    meta = json.loads(tunak.metadata)
    assert (meta["gt"], meta["pred"], meta["em"], meta["f1"]) == ("1967", "1967", True, 1.0)
    assert "traj_by_line" not in meta

    assert census.turns[1].action == "search[2011 census population of Shillong]"
    assert census.turns[1].observation == "143,229"
    assert census.turns[2].action == "finish[143,229]" and _args(census.turns[2]) == {"input": "143,229"}
    assert census.turns[2].observation == "Episode finished, reward = False" and census.turns[2].reward == 0.0
    meta = json.loads(census.metadata)
    assert (meta["gt"], meta["pred"], meta["em"], meta["f1"]) == ("143007", "143229", False, 0)


# --- task data shipped next to the trajectories ---------------------------------------------------------


def test_strategyqa_task_data_is_not_a_trajectory() -> None:
    doc = json.loads((DATA / "strategyqa_dev.json").read_text())
    assert not FireActTrajsImporter().sniff(doc)
    assert not FireActChatImporter().sniff(doc[0])
    trajs, q = _read("strategyqa_dev.json")
    assert trajs == []
    assert len(q) == 1 and q[0].reason == "unknown_format" and q[0].importer is None


def test_tool_calling_chat_with_react_text_is_generic_chat(tmp_path: Path) -> None:
    """OpenAI chat whose assistant writes ReAct text beside structured `tool_calls`, answered by
    `role: tool`: the generic chat importer's (FireAct's format has no structured calls)."""
    react = {"messages": [{"role": "user", "content": "Question: Who wrote X?"},
                          {"role": "assistant", "content": "Thought: I need to search X.\nAction: search[X]"},
                          {"role": "user", "content": "Observation: Y wrote X."},
                          {"role": "assistant", "content": "Thought: Y.\nAction: finish[Y]"}]}
    tools = {"messages": [
        {"role": "user", "content": "Who wrote X?"},
        {"role": "assistant", "content": "Thought: I should search.\nAction: search[X author]",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": '{"q": "X author"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "Y wrote X"},
        {"role": "assistant", "content": "Y"}]}
    assert not FireActChatImporter().sniff(tools) and FireActChatImporter().sniff(react)
    f = tmp_path / "tools.jsonl"  # the first line decides a file's format: it was FireAct's, and every line quarantined
    f.write_text(json.dumps(tools) + "\n" + json.dumps(tools) + "\n")
    recs = list(read_path(f))
    assert all(isinstance(r, Trajectory) for r in recs), [getattr(r, "detail", r) for r in recs]
    assert [r.source_format for r in recs] == ["chat", "chat"]
    call = recs[0].turns[0]
    assert (call.kind, call.tool_name, call.observation, call.tool_call_id) == ("env", "search", "Y wrote X", "c1")
