"""AgentWorldBench importer, through the ingest reader.

The files under tests/data/agentworldbench/ were written for these tests in the published layout
(parallel `prompt`/`response` lists, `### Turn N` / `**Action:**` prompts, `**Environment Observation:**`
responses, the instruction suffix on the last prompt) and in the alternating chat-history form.
Expected counts from jq over the raw files: `[.task, .turn_idx, (.prompt|length), (.response|length)]`
- terminal_test.jsonl: ["terminal",1,1,1], ["terminal",2,2,2], ["terminal",3,3,3] -> 1, 2, 3 turns;
- mcp_test.jsonl: ["mcp",2,2,2] -> 2 turns; ["mcp",4,2,2] (turn_idx past the history: malformed);
  ["robotics",1,1,1] (no known domain);
- android_chat_history.jsonl: ["android",2,3,1], user messages in `prompt` = 2 -> 2 turns.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "agentworldbench"


def test_terminal_rows_are_session_prefixes() -> None:
    recs = list(read_path(DATA / "terminal_test.jsonl"))
    assert all(isinstance(r, Trajectory) for r in recs)
    assert [r.source_format for r in recs] == ["agentworldbench"] * 3
    assert [r.domain for r in recs] == ["terminal"] * 3
    assert [len(r.turns) for r in recs] == [1, 2, 3]
    keys = {json.loads(r.metadata)["session_key"] for r in recs}
    assert len(keys) == 1 and next(iter(keys)).startswith("terminal:40213:")
    assert [json.loads(r.metadata)["turn_idx"] for r in recs] == [1, 2, 3]

    last = recs[2]
    assert last.native_id == "40213"
    assert last.task == "Count the Python files under /app/src and write the number to /app/count.txt."
    assert last.initial_state == "root@a1b2c3:/app#"
    meta = json.loads(last.metadata)
    assert meta["system_prompt"].startswith("# Role and Objective\n\nYou are a **Terminal World Model**")
    assert meta["total_turns"] == 4
    assert meta["instruction_suffix"].startswith("Please analyze the input above")
    t1, t2, t3 = last.turns
    assert json.loads(t1.action) == [{"keystrokes": "ls src\n", "duration": 0.1}]
    assert json.loads(t1.tool_args) == [{"keystrokes": "ls src\n", "duration": 0.1}] and t1.tool_name is None
    assert t1.observation == "root@a1b2c3:/app# ls src\nmain.py  tests  util.py\nroot@a1b2c3:/app#"
    assert t1.observation_kind == "terminal_screen" and t1.kind == "env"
    assert t2.locator == "prompt[1]+response[1]"
    # The evaluated turn's observation was wrapped in <predicted_observation> tags: stripped.
    assert t3.observation == (
        "root@a1b2c3:/app# find src -name '*.py' | wc -l > count.txt\nroot@a1b2c3:/app# cat count.txt\n3\nroot@a1b2c3:/app#"
    )
    assert json.loads(t3.metadata)["evaluated"] is True
    assert "evaluated" not in json.loads(t2.metadata)
    assert "Please analyze" not in t3.action


def test_mcp_rows_and_bad_rows() -> None:
    recs = list(read_path(DATA / "mcp_test.jsonl"))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    q = [r for r in recs if isinstance(r, QuarantineRecord)]
    assert len(trajs) == 1 and len(q) == 2
    t = trajs[0]
    assert t.domain == "mcp" and len(t.turns) == 2 and t.initial_state is None
    assert t.task == "Summarise the open issues listed in /workspace/issues.md."
    read = t.turns[1]
    assert read.tool_name == "filesystem-read_file"
    assert json.loads(read.tool_args) == {"path": "/workspace/issues.md"}
    assert read.observation == "# Open issues\n- #12 Login fails on Safari\n- #15 Export drops the last row"
    assert read.observation_kind == "tool_result"
    assert json.loads(t.metadata)["benchmark_task"] == "toolathlon/issue-summary"

    bad, unknown = q
    assert bad.locator == "line:2" and bad.reason == "malformed_record" and bad.importer == "agentworldbench"
    assert "turn_idx 4" in bad.detail and "line:2" in bad.detail
    assert unknown.locator == "line:3" and unknown.reason == "unknown_domain" and "'robotics'" in unknown.detail

    # With --domain, the row whose task names no domain is imported with it; a task that names its
    # domain keeps it.
    recs = list(read_path(DATA / "mcp_test.jsonl", domain_override="os"))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    assert [r.domain for r in trajs] == ["mcp", "os"]
    assert trajs[1].turns[0].action == "move_arm(x=0.2, y=0.1)"


def test_chat_history_form_without_optional_fields() -> None:
    (t,) = list(read_path(DATA / "android_chat_history.jsonl"))
    assert isinstance(t, Trajectory)
    assert t.domain == "android" and len(t.turns) == 2
    assert t.task == "Open the Settings app and turn on Wi-Fi."
    assert t.initial_state.startswith('[ 0] | android.widget.FrameLayout | res="com.google.android.apps.nexuslauncher:id/workspace"')
    first, current = t.turns
    assert first.tool_name == "click" and json.loads(first.tool_args) == {"index": 1}
    assert first.observation.startswith('[ 0] | android.widget.FrameLayout | res="com.android.settings:id/main_content"')
    assert first.observation_kind == "view_hierarchy"
    assert first.locator == "prompt[0]+prompt[1]"
    assert current.locator == "prompt[2]+response[0]"
    assert current.observation.endswith('text="Wi-Fi" checked="false" | bounds=[900,420][1040,500] | clickable')
    meta = json.loads(t.metadata)
    assert "system_prompt" not in meta and "total_turns" not in meta


def test_sniff_is_specific() -> None:
    from collectors.agentworldbench import AgentWorldBenchImporter

    imp = AgentWorldBenchImporter()
    assert not imp.sniff({"messages": [{"role": "user", "content": "x"}]})
    assert not imp.sniff({"prompt": "x", "response": "y"})


def test_android_phone_state_heading_is_part_of_the_state(tmp_path: Path) -> None:
    # android rows (Qwen/AgentWorldBench): `**Current State:**\n**Current Phone State:**\n• ...`, and each
    # response `**Environment Observation:**\n**Current Phone State:**\n• ...`: one screen, one text
    screen = "**Current Phone State:**\n\u2022 **App:** Files (com.google.android.documentsui)\n\u2022 **Keyboard:** Hidden"
    launcher = "**Current Phone State:**\n\u2022 **App:** Pixel Launcher (com.google.android.apps.nexuslauncher)\n\u2022 **Keyboard:** Hidden"
    turn1 = ("### Turn 1\n**Task Instruction:**\nCheck file_1.txt.\n\n**Current State:**\n" + launcher
             + '\n\n**Action:**\n```json\n{"action_type": "open_app", "app_name": "Files"}\n```')
    turn2 = "### Turn 2\n**Current State:**\n" + screen + '\n\n**Action:**\n```json\n{"action_type": "click", "index": 3}\n```'
    row = {"task": "android", "id": 2, "prompt": [turn1, turn2 + "\n\nPlease analyze the input above and predict."],
           "response": ["**Environment Observation:**\n" + screen, "**Environment Observation:**\n" + screen.replace("Hidden", "Shown")],
           "current_prompt": turn2, "turn_idx": 2}
    (tmp_path / "android_test.jsonl").write_text(json.dumps(row) + "\n")
    (t,) = list(read_path(tmp_path / "android_test.jsonl"))
    assert t.domain == "android" and len(t.turns) == 2
    assert t.initial_state == launcher
    assert t.turns[0].observation == screen
    assert json.loads(t.turns[1].metadata)["state_before"] == screen
