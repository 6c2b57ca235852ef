"""Other published versions of the asciicast, uiautomator, DroidBot and AgentLab formats.

Fixtures: tests/data/gui-terminal-variants (origins, commits, licences and SUBSET notes in its
README.md). Expected values were read off the raw files by hand, not from the importers:
  - asciicast: turns = Enter / Ctrl-C / Ctrl-D keystrokes in `i` events (an input without one is
    one unsubmitted turn); output-only files are one turn without action; v3 times are intervals,
    so absolute times are running sums; durations run from Enter to the last `o` event.
  - uiautomator: 22 `<node>` elements in the subset, 3 with clickable="true".
  - DroidBot: 3 event files, no saved states; HOME has start_state == stop_state.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "gui-terminal-variants"
CAST = DATA / "asciicast"


def _meta(obj) -> dict:
    return json.loads(obj.metadata)


# ---------------------------------------------------------------- asciicast


def test_asciinema_server_v2_full() -> None:
    t = one_trajectory(CAST / "server_v2_full.cast")
    assert (t.domain, t.source_format, t.task) == ("terminal", "asciicast", "bashing :)")
    assert t.collected_at == datetime.fromtimestamp(1506410422, UTC)
    assert json.loads(t.env_fingerprint) == {
        "width": 96,
        "height": 26,
        "env": {"TERM": "screen-256color", "SHELL": "/bin/zsh"},
    }
    m = _meta(t)
    assert m["command"] == "/bin/bash -l" and m["idle_time_limit"] == 2.5
    assert m["header_other"]["theme"]["fg"] == "#aaaaaa"  # no column for it: kept as written
    assert t.initial_state == "foo bar"  # output before the first keystroke
    (u,) = t.turns  # one Enter
    assert u.action == "" and _meta(u)["submitted"] is True
    assert u.stdout == "baz quxżółć jaźń"
    assert "żółć jaźń" in u.observation
    assert u.started_at == datetime.fromtimestamp(1506410422 + 2.345670, UTC)
    assert u.duration_s == pytest.approx(8.456789 - 2.345670)
    assert u.locator == "line:3-5"
    assert_schema_valid([t])


def test_asciinema_server_v3_full_relative_times_and_resize() -> None:
    t = one_trajectory(CAST / "server_v3_full.cast")
    assert t.task == "bashing :)" and _meta(t)["asciicast_version"] == 3
    assert t.collected_at == datetime.fromtimestamp(1744302022, UTC)
    assert json.loads(t.env_fingerprint) == {
        "width": 96,
        "height": 26,
        "env": {"TERM": "xterm-ghostty", "SHELL": "/usr/bin/fish"},
        "term_version": "ghostty 1.1.3-889478f-nix",
    }
    assert _meta(t)["term_theme"]["bg"] == "#bbbbbb" and "header_other" not in _meta(t)
    (u,) = t.turns
    t_enter = 1.234567 + 1.0
    t_last = t_enter + 4.678987 + 1.0 + 2.456789
    assert u.action == ""
    assert u.started_at == datetime.fromtimestamp(1744302022 + t_enter, UTC)
    assert u.duration_s == pytest.approx(t_last - t_enter)
    assert _meta(u)["resizes"] == [{"t": pytest.approx(t_enter + 4.678987 + 1.0), "size": "80x24"}]
    assert u.stdout == "baz quxżółć jaźń"
    assert_schema_valid([t])


def test_asciinema_server_v3_comments_and_blank_lines_are_skipped() -> None:
    t = one_trajectory(CAST / "server_v3_blank_lines_and_comments.cast")
    (u,) = t.turns  # no `i` events and no markers: one output-only turn
    assert u.action is None and _meta(t)["output_only"] is True
    assert u.stdout == "foo barbaz quxżółć jaźńbye!"  # 4 `o` events, the 5 `#` lines skipped
    assert u.observation == "foo barbaz quxżółć jaźńbye!"


def test_asciinema_server_v2_integer_times() -> None:
    t = one_trajectory(CAST / "server_v2_int_time.cast")
    (u,) = t.turns
    assert u.action is None and u.observation == "foo barbaz qux"
    assert t.collected_at is None  # no timestamp in the header


def test_asciinema_player_v3_resizes_and_exit_status() -> None:
    t = one_trajectory(CAST / "player_resizing_v3_exit.cast")
    assert t.outcome == "exit:0"  # the `x` event
    m = _meta(t)
    assert m["exit_status"] == 0
    assert m["resizes"] == [{"t": 1.0, "size": "100x30"}, {"t": 2.0, "size": "50x10"}]
    (u,) = t.turns
    assert u.action is None and u.observation == "hello world!"
    assert json.loads(t.env_fingerprint)["width"] == 80  # the header size, not the last resize


def test_asciinema_player_markers_during_input() -> None:
    t = one_trajectory(CAST / "player_markers_input.cast")
    assert t.initial_state == "start"
    (u,) = t.turns  # "a" then Enter: one turn; markers do not split turns when there is input
    assert u.action == "a"
    assert [mk["label"] for mk in _meta(u)["markers"]] == ["first", "second"]
    assert u.observation.split("\n") == ["middle", "more", "end", "done"]
    assert u.duration_s == pytest.approx(2.0 - 0.9)


@pytest.mark.parametrize(
    ("name", "action", "raw"),
    [("player_ctrl_input.cast", "^P", "\x10"), ("player_keystroke_reel.cast", "abcde", "abcde")],
)
def test_asciinema_player_input_without_enter(name: str, action: str, raw: str) -> None:
    t = one_trajectory(CAST / name)
    (u,) = t.turns
    m = _meta(u)
    assert u.action == action and m["input_raw"] == raw and m["submitted"] is False
    assert u.duration_s is None and u.observation == "done"


def test_agg_demo_fish_session_output_only() -> None:
    t = one_trajectory(CAST / "agg_demo_first25.cast")
    assert t.collected_at == datetime.fromtimestamp(1660385020, UTC)
    (u,) = t.turns
    assert u.action is None and u.observation_kind == "terminal_screen"
    # fish redraws the command line with autosuggestions and cursor moves; the screen keeps the
    # final text only
    assert u.observation.split("\n") == [
        "marcin@puter ~> rec demo.cast",
        "asciinema: recording asciicast to demo.cast",
        "asciinema: exit opened program when you're done",
        "marcin@puter ~>",
    ]
    assert "\x1b" in u.stdout and "\x1b" not in u.observation
    assert_schema_valid([t])


# ---------------------------------------------------------------- uiautomator


def test_uiautomator_pretty_printed_multiline_attributes() -> None:
    t = one_trajectory(DATA / "uiautomator" / "youtube_pretty_subset.xml")
    assert (t.domain, t.source_format, t.turns) == ("android", "uiautomator", [])
    m = _meta(t)
    assert m["num_views"] == 22 and m["rotation"] == 0
    assert m["packages"] == ["com.google.android.youtube"]
    lines = t.initial_state.split("\n")
    assert len(lines) == 22
    assert lines[0] == "[0] android.widget.FrameLayout bounds=[0,0][1344,2992]"
    assert sum(ln.endswith("clickable focusable") for ln in lines) == 3
    # the "More options" button is 15 levels deep (count of open <node> elements above it)
    assert lines[21] == " " * 30 + '[21] android.widget.ImageView desc="More options" bounds=[1224,151][1344,295] clickable focusable'
    assert lines[17].strip() == (
        '[17] android.widget.ImageView id=com.google.android.youtube:id/youtube_logo desc="YouTube" bounds=[0,151][366,295]'
    )
    # no assert_schema_valid here: validating the empty turns table of a zero-turn trajectory
    # crashes the interpreter (pyarrow 25.0.1 pc.indices_nonzero on an empty ChunkedArray)


# ---------------------------------------------------------------- DroidBot


def _yelp() -> list:
    return list(read_path(DATA / "droidbot" / "report_com.yelp.android"))


def test_droidbot_2017_yelp_report_without_states() -> None:
    (t,) = [r for r in _yelp() if isinstance(r, Trajectory)]
    assert t.domain == "android" and t.source_format == "droidbot"
    assert [u.tool_name for u in t.turns] == ["key", "intent", "touch"]
    assert [u.action for u in t.turns] == [
        "key(HOME)",
        "intent(am start com.yelp.android/com.yelp.android.ui.activities.RootActivity)",
        'touch(view=<android.widget.Button id=com.yelp.android:id/accept_button text="Yes, turn it on" '
        "bounds=[737,2150][1387,2339] clickable>)",
    ]
    metas = [_meta(u) for u in t.turns]
    assert [m["unchanged"] for m in metas] == [True, False, False]
    assert all(m["missing_state"] for m in metas) and all(u.observation is None for u in t.turns)
    assert [m["tag"] for m in metas] == ["2017-08-11_202321", "2017-08-11_202324", "2017-08-11_202329"]
    assert _meta(t)["app_package"] == "com.yelp.android"
    assert_schema_valid([t])


def test_droidbot_report_byproducts_are_not_quarantined() -> None:
    recs = _yelp()
    assert [type(r).__name__ for r in recs] == ["Trajectory"], [
        getattr(r, "detail", None) for r in recs if isinstance(r, QuarantineRecord)
    ]


def test_droidbot_2016_event_list_layout_is_quarantined_not_misread() -> None:
    # DroidBot 2016 output: one droidbot_event.json list (no events/ dir, no state links)
    recs = list(read_path(DATA / "droidbot" / "droidbot_out_uiautomator_2016"))
    assert len(recs) == 1 and isinstance(recs[0], QuarantineRecord)
    assert recs[0].reason == "unknown_format"


# ---------------------------------------------------------------- AgentLab


def test_agentlab_dir_without_experiment_log_is_quarantined() -> None:
    # AgentLab's test experiment dirs hold summary_info.json and pickles only (no experiment.log)
    recs = list(read_path(DATA / "agentlab"))
    assert len(recs) == 1 and isinstance(recs[0], QuarantineRecord)
    assert recs[0].reason == "unknown_format" and recs[0].source.endswith("summary_info.json")
