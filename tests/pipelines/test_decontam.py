"""Decontamination: option checks, the evaluation-set forms (AgentWorldBench rows included), and the
project's own exported evaluation set found in the corpus it came from."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from pipelines.clean import CleanConfig, clean
from pipelines.decontam import DecontamConfig, EvalIndex, EvalItem, load_eval_set, scan_trajectory
from pipelines.export import ExportConfig, SplitConfig, export
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import connect

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "corpus"


@pytest.mark.parametrize(("kw", "message"), [
    ({"n": 0}, "--ngram must be at least 1 (got 0)"),
    ({"n": -3}, "--ngram must be at least 1 (got -3)"),
    ({"min_overlap": 5.0}, "--min-overlap must be in (0, 1] (got 5.0)"),
    ({"min_overlap": -1.0}, "--min-overlap must be in (0, 1] (got -1.0)"),
    ({"min_overlap": 0.0}, "--min-overlap must be in (0, 1] (got 0.0)"),
    ({"min_overlap": float("nan")}, "--min-overlap must be in (0, 1] (got nan)"),
])
def test_config_rejects_values_that_flag_everything_or_nothing(kw: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        DecontamConfig(**kw)
    assert str(e.value) == message


def test_config_accepts_the_bounds() -> None:
    assert (DecontamConfig(n=1, min_overlap=1.0).n, DecontamConfig(min_overlap=0.01).min_overlap) == (1, 0.01)


def _row(tid: str, turn_idx: int, actions: list[str], task: str = "Count the lines of every log file.") -> dict:
    prompts = [f"### Turn {i + 1}\n" + (f"**Task Instruction:**\n{task}\n\n" if i == 0 else "")
               + f"**Action:**\n```\n{a}\n```" for i, a in enumerate(actions[:turn_idx])]
    prompts[-1] += "\n\nPlease analyze the input above and predict the realistic output/response that the environment would produce."
    return {"task": "terminal", "id": tid, "prompt": prompts,
            "response": [f"**Environment Observation:**\nout {i}" for i in range(turn_idx)],
            "current_prompt": prompts[-1], "system_str": "You are a Terminal World Model.",
            "turn_idx": turn_idx, "total_turns": len(actions)}


def test_agentworldbench_rows_of_one_session_make_one_item(tmp_path: Path) -> None:
    """`task` is the domain name, not text; the task instruction and the actions are in `prompt`."""
    acts = ["wc -l /var/log/*.log", "ls /var/log | head -n 3", "tail -n 2 /var/log/syslog"]
    d = tmp_path / "eval"
    d.mkdir()
    (d / "terminal_test.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in [
        _row("s1", 1, acts), _row("s1", 3, acts), _row("s2", 1, ["echo hi"], task="Say hi."),
    ]))
    (d / "plain.jsonl").write_bytes(orjson.dumps({"id": "q1", "question": "What is two plus two?"}) + b"\n")
    items, _ = load_eval_set(d)
    assert [(i.id, i.text) for i in items] == [
        ("q1", "What is two plus two?"),
        ("s1", "Count the lines of every log file.\nwc -l /var/log/*.log\nls /var/log | head -n 3\ntail -n 2 /var/log/syslog"),
        ("s2", "Say hi.\necho hi"),
    ]


def test_an_item_of_task_and_actions_matches_the_trajectory_that_holds_both() -> None:
    cfg = DecontamConfig(n=3, min_overlap=0.6)
    items = [EvalItem("s1", "Count the lines of every log file.\nwc -l /var/log/*.log\nls /var/log | head -n 3")]
    index = EvalIndex.build(items, cfg)
    acts = [(0, "wc -l /var/log/*.log"), (1, "ls /var/log | head -n 3")]
    [flag] = scan_trajectory(index, "t", "Count the lines of every log file.", acts, cfg)
    assert (flag.field, flag.turn_index, flag.matched, flag.total) == ("action", 0, 16, 16)
    # neither the task alone (5 of 16) nor the actions alone (9 of 16) would reach 0.6
    assert scan_trajectory(index, "t", "Count the lines of every log file.", [], cfg) == []
    assert scan_trajectory(index, "t", None, acts, cfg) == []


def test_the_first_matching_turn_is_named_not_the_first_turn() -> None:
    # 6 words, 4 trigrams, all of them in the action of turn 3; turns 0 and 2 hold none
    cfg = DecontamConfig(n=3)
    index = EvalIndex.build([EvalItem("e", "alpha beta gamma delta epsilon zeta")], cfg)
    acts = [(0, "unrelated words here"), (2, "ls -la"), (3, "alpha beta gamma delta epsilon zeta"), (5, "alpha beta gamma")]
    [flag] = scan_trajectory(index, "t", None, acts, cfg)
    assert (flag.field, flag.turn_index, flag.matched, flag.total) == ("action", 3, 4, 4)


def test_an_item_shorter_than_n_words_is_found_inside_a_longer_task() -> None:
    """A 7-word item under --ngram 8 became one 7-gram, and a longer text gives only 8-grams: it
    matched nothing, although two sample tasks hold it word for word. Two or three words are
    found only as a whole text (they occur everywhere)."""
    cfg = DecontamConfig()  # n = 8
    items = [EvalItem("seven", "Counts all files in the /testbed folder"), EvalItem("two", "list files")]
    index = EvalIndex.build(items, cfg)
    task = "Counts all files in the /testbed folder and its subfolders, recursively"
    [flag] = scan_trajectory(index, "t", task, [], cfg)
    assert (flag.eval_id, flag.field, flag.matched, flag.total) == ("seven", "task", 1, 1)
    assert scan_trajectory(index, "t", "Counts all files in the /tmp folder and its subfolders", [], cfg) == []
    assert [f.eval_id for f in scan_trajectory(index, "t", "please list files here", [], cfg)] == []
    assert [f.eval_id for f in scan_trajectory(index, "t", "List files", [], cfg)] == ["two"]


def test_exported_eval_set_finds_the_trajectories_it_came_from(tmp_path: Path) -> None:
    corpus, out = tmp_path / "corpus", tmp_path / "export"
    ingest([SAMPLE / "tau-bench", SAMPLE / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    s = export(corpus, out, ExportConfig(formats=("chat",), seq_len=256, record_in_corpus=False,
                                          split=SplitConfig(validation=0.1, test=0.2)), progress=False)
    # 66 while InterCode's plain `submit` was an environment turn: 10 rows asked for a submit's "output" (the
    # previous observation, repeated); without them the rows two runs contribute move to other turns
    assert s.eval_rows == {"mcp": 4, "terminal": 58}
    ids = {orjson.loads(line)["id"] for f in (out / "eval" / "agentworldbench").glob("*.jsonl")
           for line in f.read_bytes().splitlines()}
    s = clean(corpus, CleanConfig(decontam=DecontamConfig(eval_set=str(out / "eval" / "agentworldbench"))), progress=False)
    # every held-out trajectory with eval rows, found by its own item (the old reading found none)
    assert (len(ids), s.eval_items, s.contaminated) == (22, 22, 22)
    con = connect(corpus)
    own = con.sql("SELECT eval_id, field, overlap FROM contamination WHERE trajectory_id = eval_id ORDER BY 1").fetchall()
    assert own == [(i, "action", 1.0) for i in sorted(ids)]
    # one more flag: a held-out InterCode run also overlaps the item of another run of the same task
    other = con.sql("""SELECT t.task, c.matched_ngrams, c.item_ngrams FROM contamination c JOIN trajectories t USING (trajectory_id)
                       WHERE c.trajectory_id <> c.eval_id""").fetchall()
    # (of 21 n-grams while the run's trailing `submit` was a row's action: its last n-gram ended in it)
    assert other == [("Calculate md5 sum of the md5 sum of all the sorted files under /testbed/dir2/subdir2", 11, 20)]


def test_a_one_line_file_of_a_string_is_one_item(tmp_path: Path) -> None:
    """A JSON-lines evaluation set of plain strings with a single line parses as one JSON document (a
    string): it is that one item, as each line of a longer file is (it loaded nothing, silently)."""
    text = "I need to change my return flight from Texas to Newark. It currently departs at 3pm"
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    one.write_text(f'"{text}"\n')
    two.write_text(f'"{text}"\n"another item of enough words to count as an item here"\n')
    items_one, _ = load_eval_set(one)
    items_two, _ = load_eval_set(two)
    assert len(items_one) == 1 and len(items_two) == 2
    assert items_one[0].text == items_two[0].text == text


def test_an_evaluation_set_without_items_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines.cli import main
    from tests.support.corpus import empty_corpus

    f = tmp_path / "eval.jsonl"
    f.write_text('{"prompt_id": 1, "n": 2}\n{"prompt_id": 2}\n')
    with pytest.raises(ValueError, match=r"^evaluation set .*eval.jsonl: no items in it \(an item is a string"):
        load_eval_set(f)
    corpus = empty_corpus(tmp_path / "c")
    assert main(["clean", str(corpus), "--eval-set", str(f)]) != 0
    assert "no items in it" in capsys.readouterr().err


def test_the_eval_set_of_sessions_with_agent_messages_finds_them(tmp_path: Path) -> None:
    """An eval row's action holds the agent's messages before it (export folds them into the user
    message); clean scanned `action` alone and found none of the three runs their rows came from."""
    words = " ".join(f"word{j}" for j in range(60))
    lines = []
    for i in range(3):
        msgs = [{"role": "user", "content": f"session {i}: inspect the logs"}]
        for k in range(4):
            call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": orjson.dumps(
                {"cmd": f"grep -c ERROR log{i}_{k}.txt"}).decode()}}
            msgs += [{"role": "assistant", "content": f"I will look at part {k} of run {i}: {words}"},  # a message turn
                     {"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": f"{i * 10 + k}"}]
        lines.append(orjson.dumps({"messages": msgs}).decode())
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    corpus, out = tmp_path / "corpus", tmp_path / "export"
    ingest([tmp_path / "s.jsonl"], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    s = export(corpus, out, ExportConfig(formats=("chat",), seq_len=1024, record_in_corpus=False,
                                          split=SplitConfig(validation=0, test=1.0)), progress=False)
    assert s.eval_rows == {"terminal": 12}
    s = clean(corpus, CleanConfig(min_turns=0, decontam=DecontamConfig(eval_set=str(out / "eval" / "agentworldbench"))),
              progress=False)
    assert (s.eval_items, s.contaminated) == (3, 3)
    assert connect(corpus).sql("SELECT count(*) FROM contamination WHERE trajectory_id = eval_id AND overlap = 1").fetchall() == [(3,)]


def test_items_in_scripts_without_latin_letters_are_indexed_and_found() -> None:
    """`[a-z0-9]+` found no word in Chinese or Russian text: such an item was dropped unannounced and
    its copy in the corpus never flagged."""
    cfg = DecontamConfig(n=4)
    items = [EvalItem("zh", "打开设置应用并开启无线网络然后返回主屏幕"), EvalItem("ru", "откройте настройки и включите беспроводную сеть"),
             EvalItem("fr", "ouvrez les paramètres et activez le réseau sans fil"), EvalItem("empty", "!!! ---")]
    idx = EvalIndex.build(items, cfg)
    assert (idx.ids, idx.too_short) == (["zh", "ru", "fr"], 1)
    for item in items[:3]:
        [flag] = scan_trajectory(idx, "t", f"Task: {item.text}.", [], cfg)
        assert (flag.eval_id, flag.field, flag.overlap) == (item.id, "task", 1.0)
    assert scan_trajectory(idx, "t", "打开设置应用", [], cfg) == []  # 3 of the item's 17 four-character n-grams
