"""DroidBot report directories, read through `pipelines.reader.read_path`.

Expected counts for the sample (data/sample/corpus/droidbot) were taken from the raw files
independently of the importer:
  ls events/*.json | wc -l                                     -> 41 events (one turn each)
  ls states/*.json | wc -l                                     -> 16 saved states
  jq -r .state_str states/*.json | sort > saved.txt
  jq -r .stop_state events/*.json | grep -vxFf saved.txt | wc -l -> 2 events lead to an unsaved state
  jq -r 'select(.start_state == .stop_state) | .tag' events/*.json | wc -l -> 13 unchanged
  jq -r .event.event_type events/*.json | sort | uniq -c      -> 33 touch, 4 key, 3 intent, 1 long_touch
  jq '.views | length' states/state_2017-08-11_155430.json    -> 49 views
The synthetic report under tests/data/droidbot was written from DroidBot's published event/state
shapes (droidbot/input_event.py, device_state.py): 5 events, 2 saved states.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

from collectors.android_views import render_tree
from collectors.droidbot import DroidBotImporter, views_to_tree
from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "droidbot"






def test_sample_report(sample: Path) -> None:
    t = one_trajectory(sample / "droidbot")
    assert t.domain == "android" and t.source_format == "droidbot" and t.agent == "droidbot"
    assert len(t.turns) == 41
    assert Counter(u.tool_name for u in t.turns) == {"touch": 33, "key": 4, "intent": 3, "long_touch": 1}
    metas = [json.loads(u.metadata) for u in t.turns]
    assert sum(m["missing_state"] for m in metas) == 2
    assert sum(m["unchanged"] for m in metas) == 13
    assert [m["tag"] for m in metas] == sorted(m["tag"] for m in metas)  # ordered by tag
    assert all(u.kind == "env" for u in t.turns)
    # missing states: no observation, but the turn still says which state it reached
    missing = [u for u, m in zip(t.turns, metas, strict=True) if m["missing_state"]]
    assert all(u.observation is None and u.observation_kind == "none" for u in missing)
    assert json.loads(missing[0].state) == {"state_str": "c871d40def92fccd628177c86619eb53"}
    # the first event: HOME on the launcher, whose state DroidBot never saved
    first = t.turns[0]
    assert first.action == "key(HOME)" and json.loads(first.tool_args) == {"name": "HOME"}
    assert first.locator == "events/event_2017-08-11_155422.json"
    assert t.initial_state is None  # the first event's start state was not saved either
    # the third event: a touch on the "Select Image" view, leading to the 49-view album screen
    u = t.turns[2]
    assert u.action == (
        "touch(view=<android.widget.TextView id=com.yanzhenjie.album.sample:id/action_check_image "
        'desc="Select Image" bounds=[1248,112][1440,304] clickable long-clickable focusable>)'
    )
    assert (
        u.tool_name == "touch"
        and json.loads(u.tool_args)["view"]["view_str"] == "25d432eda7b2d0ad7f023ad089cfd05d"
    )
    assert u.observation_kind == "view_hierarchy"
    lines = u.observation.split("\n")
    assert len(lines) == 49
    assert lines[0] == "[0] android.widget.FrameLayout bounds=[0,0][1440,2560]"
    assert u.locator == "events/event_2017-08-11_155427.json+states/state_2017-08-11_155430.json"
    state = json.loads(u.state)
    assert state["foreground_activity"] == "com.yanzhenjie.album.sample/com.yanzhenjie.album.AlbumActivity"
    assert (
        t.turns[1].action
        == "intent(am start com.yanzhenjie.album.sample/com.yanzhenjie.album.sample.MainActivity)"
    )
    assert json.loads(t.metadata)["app_package"] == "com.yanzhenjie.album.sample"
    assert json.loads(t.env_fingerprint) == {"droidbot_env": []}
    assert_schema_valid([t])


def test_synthetic_report_all_event_kinds() -> None:
    t = one_trajectory(DATA / "report_com.example.notes")
    assert t.native_id == "report_com.example.notes" and len(t.turns) == 5
    assert [u.action for u in t.turns] == [
        "intent(am start com.example.notes/com.example.notes.MainActivity)",
        "set_text(view=<android.widget.EditText id=com.example.notes:id/new_note bounds=[30,240][1050,360] "
        'clickable long-clickable editable focusable>, text="buy milk")',
        "scroll(view=<android.widget.ListView id=com.example.notes:id/list bounds=[0,390][1080,1920] "
        'scrollable focusable>, direction="DOWN")',
        "swipe(duration=1000, end_x=100, end_y=1000, start_x=900, start_y=1000)",
        "key(BACK)",
    ]
    set_text, scroll, swipe = t.turns[1], t.turns[2], t.turns[3]
    assert (
        '[3] android.widget.EditText id=com.example.notes:id/new_note text="buy milk"' in set_text.observation
    )
    assert (
        '[5] android.widget.TextView text="call mum\\nafter 6pm" bounds=[0,390][1080,520] clickable'
        in set_text.observation
    )
    assert set_text.observation.endswith(
        '[6] android.widget.ImageButton desc="Add" bounds=[960,1780][1060,1880] clickable disabled'
    )
    assert json.loads(scroll.metadata)["unchanged"] is True and scroll.observation == set_text.observation
    assert swipe.observation is None and json.loads(swipe.metadata)["missing_state"] is True
    assert t.turns[4].locator == "events/event_2024-03-01_101512.json+states/state_2024-03-01_101503.json"
    fp = json.loads(t.env_fingerprint)
    assert fp["device_model_number"] == "sdk_gphone64_x86_64" and fp["device_sdk_version"] == 33
    meta = json.loads(t.metadata)
    assert meta["app_package"] == "com.example.notes" and "nodes" not in meta["utg"]
    assert_schema_valid([t])


def test_consumes_report_files() -> None:
    names = {
        p.relative_to(DATA / "report_com.example.notes").as_posix()
        for p in DroidBotImporter().consumes(DATA / "report_com.example.notes")
    }
    assert {"utg.js", "index.html", "views/view_00000000000000000000000000000003.png"} <= names
    assert len([n for n in names if n.startswith("events/")]) == 5


def test_broken_event_file_is_quarantined_by_name() -> None:
    q, traj = list(read_path(DATA / "report_broken"))
    assert isinstance(q, QuarantineRecord) and isinstance(traj, Trajectory)
    assert (q.reason, q.importer, q.locator) == ("truncated_json", "droidbot", "events/event_2024-03-01_101503.json")
    assert "events/event_2024-03-01_101503.json" in q.detail and str(DATA / "report_broken") in q.detail
    assert q.excerpt is None  # the record is the folder: its path is the source already
    # the session keeps the readable event, and says which file it lost
    assert [u.locator for u in traj.turns] == ["events/event_2024-03-01_101500.json"]
    assert json.loads(traj.metadata)["unreadable_files"] == ["events/event_2024-03-01_101503.json"]


def _broken_copy(tmp_path: Path, *cut: str) -> Path:
    """The synthetic report with each file of `cut` cut to its first 40 bytes, as a killed run leaves it."""
    dst = tmp_path / "report_com.example.notes"
    shutil.copytree(DATA / "report_com.example.notes", dst)
    for rel in cut:
        (dst / rel).write_bytes((dst / rel).read_bytes()[:40])
    return dst


def test_a_cut_off_first_event_or_state_costs_only_that_file(tmp_path: Path) -> None:
    whole = one_trajectory(DATA / "report_com.example.notes")
    first, state = "events/event_2024-03-01_101500.json", "states/state_2024-03-01_101506.json"
    recs = list(read_path(_broken_copy(tmp_path, first, state)))
    assert [(type(r).__name__, r.locator, getattr(r, "reason", None)) for r in recs] == [
        ("QuarantineRecord", state, "truncated_json"), ("QuarantineRecord", first, "truncated_json"),
        ("Trajectory", "$", None)]
    t = recs[-1]
    assert [u.action for u in t.turns] == [u.action for u in whole.turns[1:]]
    # events whose screen was in the lost state file keep their action, without the screen
    lost = {u.locator.split("+")[0] for u in whole.turns[1:] if u.locator.endswith("+" + state)}
    assert len(lost) == 2  # set_text, and the scroll that left the screen as it was
    got = {u.locator: (u.observation, json.loads(u.metadata)["missing_state"]) for u in t.turns if u.locator in lost}
    assert got == dict.fromkeys(lost, (None, True))
    assert json.loads(t.metadata)["unreadable_files"] == [state, first]


def test_a_file_that_is_no_event_costs_only_itself(tmp_path: Path) -> None:
    dst = _broken_copy(tmp_path)
    (dst / "events" / "event_2024-03-01_101509.json").write_text('{"tag": "x"}')
    (dst / "droidbot_env.json").write_text("[")
    recs = list(read_path(dst))
    assert [(type(r).__name__, r.locator, getattr(r, "reason", None)) for r in recs] == [
        ("QuarantineRecord", "events/event_2024-03-01_101509.json", "malformed_record"),
        ("QuarantineRecord", "droidbot_env.json", "truncated_json"), ("Trajectory", "$", None)]
    assert len(recs[-1].turns) == 4 and recs[-1].env_fingerprint is not None
    assert "droidbot_env" not in json.loads(recs[-1].env_fingerprint)


def test_sniff_checks_event_content(sample: Path) -> None:
    imp = DroidBotImporter()
    assert imp.sniff(sample / "droidbot")
    assert not imp.sniff(DATA / "not_droidbot")  # events/*.json of another shape
    assert not imp.sniff(sample / "browsergym-workarena" / "order-ipad-pro_14")
    recs = list(read_path(DATA / "not_droidbot"))
    assert all(isinstance(r, QuarantineRecord) and r.importer is None for r in recs)


def test_views_from_parent_pointers_and_cycles() -> None:
    """Views given only by parent pointers build the same tree; a cycle does not loop forever."""
    flat = [
        {"temp_id": 0, "parent": -1, "class": "A", "bounds": [[0, 0], [10, 10]]},
        {"temp_id": 1, "parent": 0, "class": "B", "text": "x"},
        {"temp_id": 2, "parent": 0, "class": "C", "enabled": False},
    ]
    assert render_tree(views_to_tree(flat, "t")) == (
        '[0] A bounds=[0,0][10,10]\n  [1] B text="x"\n  [2] C disabled'
    )
    cyclic = [{"temp_id": 0, "children": [1]}, {"temp_id": 1, "children": [0]}]
    assert render_tree(views_to_tree(cyclic, "t")) == "[0] View\n  [1] View"
