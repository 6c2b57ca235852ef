"""BrowserGym experiment directories, read through `pipelines.reader.read_path`.

Expected counts were taken from the raw files independently of the importer:
  grep -c ' - browsergym.experiments.loop - INFO - action:$' DIR/experiment.log   -> actions (turns)
  grep -c ' - agent - INFO - # Instructions$' DIR/experiment.log                  -> prompts logged
  grep -c '^## InstanceStep' DIR/experiment_analysis.md                           -> actions + 1
  jq '.n_steps, .cum_reward, .terminated' DIR/summary_info.json
  grep -o '^```[a-z_]*(.*)```$' DIR/experiment.log                               -> the chosen actions
giving apple-watch 4/4/5 (n_steps 4), ipad-pro 3/3/4 (n_steps 3), loaner-laptop 5/5/6 (n_steps 5),
cum_reward 1 and terminated true for all three.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.browsergym import BrowserGymImporter
from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid

DATA = Path(__file__).resolve().parent.parent / "data" / "browsergym"
BG = "browsergym-workarena"


def _read(path: Path) -> list:
    return list(read_path(path))


def _one(path: Path) -> Trajectory:
    recs = _read(path)
    assert len(recs) == 1 and isinstance(recs[0], Trajectory), [getattr(r, "detail", r) for r in recs]
    return recs[0]




@pytest.mark.parametrize(
    "name, actions, first, last, last_page",
    [
        (
            "order-apple-watch_9",
            ["click('a252')", "click('a472')", "select_option('a192', '6')", "click('a233')"],
            ("click", {"bid": "a252"}),
            ("click", {"bid": "a233"}),
            "Order Status: REQ0010028 | ServiceNow",
        ),
        (
            "order-ipad-pro_14",
            ["click('a405')", "select_option('a271', '2')", "click('a312')"],
            ("click", {"bid": "a405"}),
            ("click", {"bid": "a312"}),
            "Order Status: REQ0010030 | ServiceNow",
        ),
        (
            "order-loaner-laptop_7",
            [
                "click('a409')",
                "select_option('a245', '10')",
                "select_option('a207', '1 week')",
                "fill('a197', \"I don't need it anymore, I just wanted to see what would happen if I clicked on this button\")",
                "click('a286')",
            ],
            ("click", {"bid": "a409"}),
            ("click", {"bid": "a286"}),
            "Order Status: REQ0010021 | ServiceNow",
        ),
    ],
)
def test_sample_experiments(
    sample: Path, name: str, actions: list[str], first: tuple, last: tuple, last_page: str
) -> None:
    t = _one(sample / BG / name)
    assert t.domain == "web" and t.source_format == "browsergym"
    assert len(t.turns) == len(actions)
    assert [u.action for u in t.turns] == actions
    assert all(u.kind == "env" and u.observation_kind == "accessibility_tree" for u in t.turns)
    assert (t.turns[0].tool_name, json.loads(t.turns[0].tool_args)) == first
    assert (t.turns[-1].tool_name, json.loads(t.turns[-1].tool_args)) == last
    assert t.initial_state.startswith(
        "RootWebArea 'Catalog | ServiceNow', url='https://dev282647.service-now.com/"
    )
    # every observation is an AXTree: a root line, then tab-indented [bid] lines
    for u in t.turns:
        lines = u.observation.split("\n")
        assert lines[0].startswith("RootWebArea '") and all(x.startswith("\t") for x in lines[1:])
        assert u.is_error is False  # the Markdown reports "No errors reported" for every action
    # the last action's page is not in the log; it comes from experiment_analysis.md
    assert t.turns[-1].observation.startswith(f"RootWebArea '{last_page}'")
    assert "experiment_analysis.md:" in t.turns[-1].locator
    assert json.loads(t.turns[-1].metadata)["observation_source"] == "experiment_analysis.md"
    assert json.loads(t.turns[0].metadata)["observation_source"] == "log"
    assert t.turns[0].thought and "```" not in t.turns[0].thought
    assert t.turns[0].duration_s is not None and t.turns[0].duration_s > 0
    assert t.turns[0].started_at is None  # log times are naive local time: kept in metadata only
    assert t.reward == 1.0 and t.outcome == "terminated"
    assert t.model == "gpt-4o-2024-08-06" and t.agent == "DemoAgentArgs"
    assert t.native_id == f"DemoAgentArgs_on_workarena.servicenow.{name}"
    assert t.task.startswith("Go to the hardware store and order ")
    meta = json.loads(t.metadata)
    assert meta["summary_info"]["n_steps"] == len(actions)
    assert meta["task_name"] == "workarena.servicenow." + name.rsplit("_", 1)[0]
    space = json.loads(t.action_space)
    assert (
        len(space) == 20
        and {"name": "click", "params": ["bid", "button", "modifiers"]}.items()
        <= next(a for a in space if a["name"] == "click").items()
    )
    assert_schema_valid([t])


def test_ipad_turn_fields(sample: Path) -> None:
    t = _one(sample / BG / "order-ipad-pro_14")
    u = t.turns[1]
    assert u.action == "select_option('a271', '2')"
    assert json.loads(u.tool_args) == {"bid": "a271", "options": "2"}
    assert u.observation.startswith(
        "RootWebArea 'iPad pro | ServiceNow', url='https://dev282647.service-now.com/"
    )
    assert u.locator == "experiment.log:788+experiment.log:795"
    state = json.loads(u.state)
    assert state["open_tabs"][0]["title"] == "iPad pro | ServiceNow" and state["url"].startswith(
        "https://dev282647"
    )
    assert (
        t.task
        == "Go to the hardware store and order 2 \"iPad pro\" with configuration {'Choose the colour': 'Space Grey', 'Choose the storage': '128'}"
    )


def test_sample_directory_claims_all_files(sample: Path) -> None:
    """The three experiment folders are three trajectories; their .md/.json are not offered alone."""
    recs = _read(sample / BG)
    assert [type(r) for r in recs] == [Trajectory] * 3
    assert sorted(len(r.turns) for r in recs) == [3, 4, 5]


def test_chat_mode_debug_log() -> None:
    """Newer log layout (no pid, `Agent chose action:` at DEBUG), chat mode, an action error, a
    mid-session user message, a retried prompt, no summary_info.json and no analysis Markdown."""
    t = _one(DATA / "chat_mode_debug")
    assert [u.kind for u in t.turns] == ["env", "user", "env", "env"]
    assert [u.action for u in t.turns] == [
        "click('13')",
        None,
        "click('14')",
        "send_msg_to_user('Done, I clicked cancel.')",
    ]
    first, user, second, final = t.turns
    assert first.is_error is True
    assert json.loads(first.metadata)["last_action_error"].startswith(
        "TimeoutError: Locator.click: Timeout 500ms exceeded."
    )
    assert first.observation.endswith("[13] button 'submit', disabled=True\n\t[14] button 'cancel'")
    assert first.duration_s == pytest.approx(0.808)
    assert (
        user.observation == "Actually, click cancel instead.\nSorry for the confusion."
        and user.observation_kind == "user_reply"
    )
    assert second.is_error is False and second.thought == "The user changed their mind, I will click cancel."
    assert (
        second.observation
        == "RootWebArea 'Click Button Task', url='file:///miniwob/click-button.html'\n\t[5] StaticText 'Cancelled.'"
    )
    assert final.observation is None and final.observation_kind == "none" and final.is_error is None
    assert (final.tool_name, json.loads(final.tool_args)) == (
        "send_msg_to_user",
        {"text": "Done, I clicked cancel."},
    )
    assert t.task == "Please click the submit button."
    assert t.reward is None and t.outcome is None and t.model is None
    meta = json.loads(t.metadata)
    assert meta["extra_prompts"] == 1 and meta["task_seed"] == 42
    assert meta["unread_files"] == ["package_versions.txt", "screenshot_step_0.png", "step_0.pkl.gz"]
    assert meta["log_problems"][0].startswith("line 270: WARNING: Exception uncaught")
    assert [a["name"] for a in json.loads(t.action_space)] == ["send_msg_to_user", "click", "fill"]
    assert_schema_valid([t])


def test_agentlab_debug_log() -> None:
    """AgentLab's layout (`name:lineno` loggers, `Agent thought:` at INFO, `Agent action:` at
    DEBUG, no prompts): the actions and thoughts are kept, without observations."""
    t = _one(DATA / "agentlab_debug")
    assert [u.action for u in t.turns] == ["click('256')", "send_msg_to_user('Quest Lumaflex Band')"]
    assert t.turns[0].thought == "I need to open the Reports menu to find the top-selling products."
    assert json.loads(t.turns[1].tool_args) == {"text": "Quest Lumaflex Band"}
    assert all(u.observation is None and u.observation_kind == "none" for u in t.turns)
    assert t.turns[0].locator == "experiment.log:6"
    assert (t.agent, t.reward, t.outcome) == ("GenericAgent-gpt-4o-mini", 1.0, "terminated")
    assert json.loads(t.metadata)["task_name"] == "webarena.310"
    assert_schema_valid([t])


def test_no_logged_actions_is_quarantined() -> None:
    recs = _read(DATA / "agentlab_info_only")
    assert len(recs) == 1 and isinstance(recs[0], QuarantineRecord)
    assert recs[0].reason == "no_turns" and recs[0].importer == "browsergym"
    assert "experiment.log" in recs[0].detail


def test_sniff_checks_log_content(sample: Path) -> None:
    imp = BrowserGymImporter()
    assert imp.sniff(sample / BG / "order-ipad-pro_14")
    assert imp.sniff(DATA / "chat_mode_debug")
    assert not imp.sniff(DATA / "other_app_log")  # a Python log, but not BrowserGym's
    assert not imp.sniff(sample / BG)  # the parent folder has no experiment.log
    assert not imp.sniff(sample / "droidbot")
    recs = _read(DATA / "other_app_log")
    assert [(type(r), r.reason, r.importer) for r in recs] == [(QuarantineRecord, "unknown_format", None)]


def test_domain_override_does_not_change_a_browser_run(sample: Path) -> None:
    (t,) = list(read_path(sample / BG / "order-ipad-pro_14", domain_override="os"))
    assert t.domain == "web"  # the format records a browser: `--domain` is for formats that do not say


# The loops' chat record (BrowserGym and AgentLab `loop.py`, `_send_chat_info`): logged at INFO as
# f"{think}\n\naction:\n{action}\n" (`"think" in agent_info` is always true for AgentInfo: `None` when empty).
def _chat_record(ts: str, logger: str, think: str | None, action: str) -> list[str]:
    return [f"{ts} - {logger} - INFO - {think}", "", "action:", *action.split("\n"), ""]


def test_agentlab_info_log_actions_after_the_think_text(tmp_path: Path) -> None:
    # AgentLab at its default level (INFO): `Agent thought:` and the chat record, no DEBUG `Agent action:`
    exp = tmp_path / "2024-07-10_14-02-10_GenericAgent-gpt-4o-mini_on_webarena.310_0"
    exp.mkdir()
    lg = "51234 - agentlab.experiments.loop:1003"
    lines = (DATA / "agentlab_debug" / "experiment.log").read_text().splitlines()
    log = [*lines[:2],
           "2024-07-10 14:02:23,512 - 51234 - agentlab.experiments.loop:243 - INFO - Agent thought: I need the Reports menu.",
           *_chat_record("2024-07-10 14:02:23,640", lg, "I need the Reports menu.", "click('256')"),
           *_chat_record("2024-07-10 14:02:29,801", lg, None, "send_msg_to_user('Quest Lumaflex Band')"),
           lines[-1]]
    (exp / "experiment.log").write_text("\n".join(log) + "\n")
    (exp / "summary_info.json").write_bytes((DATA / "agentlab_debug" / "summary_info.json").read_bytes())
    t = _one(exp)
    assert [u.action for u in t.turns] == ["click('256')", "send_msg_to_user('Quest Lumaflex Band')"]
    assert [u.thought for u in t.turns] == ["I need the Reports menu.", None]
    assert t.turns[0].locator == "experiment.log:4"


def test_debug_and_chat_records_of_one_action_are_one_step(tmp_path: Path) -> None:
    # a loop at DEBUG logs `Agent chose action:` and then the INFO chat record for the same action
    import shutil

    exp = tmp_path / "chat_mode_debug"
    shutil.copytree(DATA / "chat_mode_debug", exp)
    lines = (exp / "experiment.log").read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].endswith("DEBUG - Agent chose action:"):
            ts = lines[i][:23]
            j = i + 1
            while j < len(lines) and not lines[j][:4].isdigit():
                out.append(lines[j])
                j += 1
            answer = "\n".join(lines[i + 1 : j]).strip()
            out += _chat_record(ts, "browsergym.experiments.loop", None, answer)
            i = j
            continue
        i += 1
    assert sum(ln.endswith("INFO - None") for ln in out) == 3
    (exp / "experiment.log").write_text("\n".join(out) + "\n")
    # the recordings BrowserGym writes with `record_video` are claimed, not quarantined
    for d, name in (("task_video", "a1b2.webm"), ("chat_video", "c3d4.webm")):
        (exp / d).mkdir()
        (exp / d / name).write_bytes(b"\x1aE\xdf\xa3")
    (exp / "combined_video.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42")
    recs = _read(exp)
    assert [type(r) for r in recs] == [Trajectory]
    t, plain = recs[0], _one(DATA / "chat_mode_debug")
    assert [(u.kind, u.action, u.observation, u.thought, u.is_error) for u in t.turns] == [
        (u.kind, u.action, u.observation, u.thought, u.is_error) for u in plain.turns]
    assert len(t.turns) == 4
