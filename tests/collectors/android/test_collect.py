"""Sessions on the device (the replayed recording, `conftest.py`): the bundled spec's sessions walk the
recorded app screen by screen; a script that no longer fits, a device that goes away, and text input
cannot type each end as the summary says, with the turns recorded so far."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors.android.collect import collect
from collectors.android.spec import default_specs
from pipelines.cli import main
from pipelines.query import run_query
from tests.collectors.android.conftest import FakeDevice, recorded_screen

START = "shell am start -S -W -n com.yanzhenjie.album.sample/.MainActivity"
DUMP = "exec-out uiautomator dump /dev/tty"


def _turns(out: Path) -> dict[str, list[tuple]]:
    _, rows = run_query(out, "SELECT t.native_id, u.action, u.is_error, u.observation, u.metadata FROM turns u "
                             "JOIN trajectories t USING (trajectory_id) ORDER BY t.native_id, u.turn_index")
    by: dict[str, list[tuple]] = {}
    for nid, *rest in rows:
        by.setdefault(nid.split("@")[0], []).append(tuple(rest))
    return by


def test_the_bundled_sessions_walk_the_recorded_app(device: FakeDevice, tmp_path: Path) -> None:
    out = tmp_path / "c"
    s = collect(default_specs(), out, settle_s=0)
    assert (s.sessions, s.turns, s.error_turns, dict(s.outcomes), s.failed) == (3, 12, 1, {"success": 3}, 0)
    turns = _turns(out)
    pick = turns["album/pick-photoframe#0"]
    assert [a for a, *_ in pick] == ["tap(10)", "tap(46)", "tap(25)", "tap(24)", "tap(27)", "tap(36)"]
    # each observation is the screen the recording reached by the same touch, as the DroidBot importer renders it
    assert [o for _, _, o, _ in pick] == [recorded_screen(p) for p in ("72eaed", "c8d120", "a4113a", "0b1fa5",
                                                                       "e2bfcc", "d3171c")]
    assert json.loads(pick[3][3]) == {
        "at": [656, 1116], "target": "id=cb_album_check",
        "view": "android.widget.CheckBox id=com.yanzhenjie.album.sample:id/cb_album_check bounds=[592,1052][720,1180] "
                "clickable checkable focusable"}
    cancel = turns["album/cancel-picking#0"]
    assert [(a, e) for a, e, *_ in cancel] == [("tap(40)", True), ("tap(10)", False), ("tap(47)", False),
                                               ("tap(9)", False), ("tap(14)", False)]
    assert cancel[0][2] == ("error: no view [40] on this screen (its views are [0] to [12])\n"
                            + recorded_screen("08bd71"))
    assert json.loads(cancel[2][3])["unchanged"] is True  # preview with nothing selected: the same screen
    assert [o for _, _, o, _ in cancel[3:]] == [recorded_screen("23f0ff"), recorded_screen("08bd71")]
    assert turns["album/leave-app#0"] == [("back()", False, recorded_screen("f7b58d"), None)]
    log = device.log()
    first = log.index(START)
    assert log[first:first + 9] == [START, DUMP, DUMP, "shell input tap 1344 208", DUMP, DUMP,
                                    "shell input tap 246 2456", DUMP, DUMP]
    assert not [ln for ln in log if ln.startswith(("unrecorded", "unsaved"))]  # every input followed the recording
    _, rows = run_query(out, "SELECT domain, source_format, outcome, reward, agent, initial_state, action_space, "
                             "env_fingerprint FROM trajectories ORDER BY native_id")
    assert {r[:5] for r in rows} == {("android", "android-live", "success", 1.0, "scripted")}
    assert {r[5] for r in rows} == {recorded_screen("08bd71")}
    assert [t["name"] for t in json.loads(rows[0][6])] == ["tap", "long_press", "type", "swipe", "back", "home",
                                                           "enter", "launch"]
    assert json.loads(rows[0][7])["device"] == {"ro.product.model": "droidbot-replay"}


def _spec(tmp_path: Path, sessions: str) -> Path:
    f = tmp_path / "app.yaml"
    f.write_text("name: app\npackage: com.yanzhenjie.album.sample\nactivity: .MainActivity\nsettle_s: 0\n"
                 "sessions:\n" + sessions)
    return f


def test_a_script_that_no_longer_fits(device: FakeDevice, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    spec = _spec(tmp_path, "  - name: s\n    task: t\n    steps:\n      - {do: tap, target: 'desc=\"Select Image\"'}\n"
                           "      - {do: tap, target: 'text=\"Nope\"'}\n      - {do: back}\n")
    out = tmp_path / "c"
    assert main(["collect", "android", str(spec), "--out", str(out), "--quiet"]) == 3
    printed = capsys.readouterr().out
    assert "outcomes: policy_error 1" in printed
    assert 'failed: app/s#0: step 1: the screen shows no text="Nope"' in printed
    (row,) = run_query(out, "SELECT num_turns, outcome, reward FROM trajectories")[1]
    assert row == (1, "policy_error", None)


def test_the_device_goes_away(device: FakeDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 getprops when the run starts, then: am start, 2 dumps, a tap, 2 dumps; the next command fails
    monkeypatch.setenv("FAKE_ADB_FAIL_AFTER", "10")
    out = tmp_path / "c"
    s = collect(default_specs(), out, only=["pick-photoframe", "leave-app"], settle_s=0)
    assert (s.sessions, s.turns, dict(s.outcomes)) == (2, 1, {"device_error": 2})
    assert s.failures == [
        "album/pick-photoframe#0: adb shell input tap 246 2456: exit 1: adb: device 'emulator-5554' not found",
        "album/leave-app#0: adb shell am start -S -W -n com.yanzhenjie.album.sample/.MainActivity: exit 1: "
        "adb: device 'emulator-5554' not found"]
    _, rows = run_query(out, "SELECT num_turns, outcome, initial_state IS NULL FROM trajectories ORDER BY native_id")
    assert rows == [(0, "device_error", True), (1, "device_error", False)]


def test_typing_swiping_and_keys(device: FakeDevice, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  - name: s\n    task: t\n    steps:\n"
                           "      - {do: type, target: 'desc=\"Select Image\"', text: it's 5 o'clock}\n"
                           "      - {do: type, index: 10, text: café}\n"
                           "      - {do: swipe, direction: up}\n      - {do: long_press, index: 10}\n"
                           "      - {do: enter}\n      - {do: home}\n      - {do: launch}\n")
    out = tmp_path / "c"
    s = collect([spec], out)
    assert (s.turns, s.error_turns, dict(s.outcomes)) == (7, 1, {"unjudged": 1})
    sent = [ln for ln in device.log() if ln.startswith(("shell input", "shell am"))]
    assert sent == [START, "shell input tap 1344 208", "shell input text 'it'\\''s%s5%so'\\''clock'",
                    "shell input swipe 720 1707 720 853 300", "shell input swipe 400 165 400 165 800",  # [10] of the picker
                    "shell input keyevent KEYCODE_ENTER", "shell input keyevent KEYCODE_HOME", START]
    turns = _turns(out)["app/s#0"]
    assert [(a, e) for a, e, *_ in turns] == [
        ("type(10, \"it's 5 o'clock\")", False), ("type(10, 'café')", True), ("swipe('up')", False),
        ("long_press(10)", False), ("enter()", False), ("home()", False), ("launch()", False)]
    assert turns[1][2].startswith("error: input text types printable ASCII only (no accents, emoji, tabs, new lines or other "
                                "control characters)\n[0] ")


def test_sessions_chosen_and_repeated(device: FakeDevice, tmp_path: Path) -> None:
    out = tmp_path / "c"
    s = collect(default_specs(), out, only=["album/leave-app"], repeat=2, settle_s=0)
    assert (s.sessions, s.turns, dict(s.outcomes)) == (2, 2, {"success": 2})
    assert len(set(s.trajectory_ids)) == 2
    with pytest.raises(ValueError, match=r"^--session nope: no such session in .*album.yaml; the sessions are "
                                         r"album/pick-photoframe, album/cancel-picking, album/leave-app$"):
        collect(default_specs(), tmp_path / "d", only=["nope"])
    assert not (tmp_path / "d").exists()


def test_no_device_writes_nothing(device: FakeDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("FAKE_ADB_DEVICES", "")
    assert main(["collect", "android", "--out", str(tmp_path / "c")]) == 1
    assert capsys.readouterr().err.startswith("worldline collect android: no Android device online: start an emulator")
    assert not (tmp_path / "c").exists()
    assert main(["collect", "android", "--out", str(tmp_path / "c"), "--settle", "-1"]) == 1
    assert "--settle must be 0 seconds or more, got -1.0" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_dumps_through_a_file_record_the_same_sessions(device: FakeDevice, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A device whose tty prints no dump (dumps go through a file) gives the sessions a tty gives."""
    collect(default_specs(), tmp_path / "tty", settle_s=0)
    monkeypatch.setenv("FAKE_ADB_NO_TTY", "1")
    monkeypatch.setenv("FAKE_ADB_HOME", str(tmp_path / "second-device"))  # started afresh
    (tmp_path / "second-device").mkdir()
    s = collect(default_specs(), tmp_path / "file", settle_s=0)
    assert (s.sessions, s.turns, dict(s.outcomes)) == (3, 12, {"success": 3})
    assert _turns(tmp_path / "file") == _turns(tmp_path / "tty")


def test_the_screen_is_read_once_it_settles(device: FakeDevice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An animation: after the key, the first dump still shows the screen before; the turn records the
    screen two dumps in a row agree on."""
    monkeypatch.setenv("FAKE_ADB_LAG", "1")
    out = tmp_path / "c"
    s = collect(default_specs(), out, only=["leave-app"], settle_s=0)
    assert dict(s.outcomes) == {"success": 1}
    log = device.log()
    assert log[log.index("shell input keyevent KEYCODE_BACK") + 1:] == [DUMP, DUMP, DUMP]
    assert _turns(out)["album/leave-app#0"][0][2] == recorded_screen("f7b58d")


def test_sigterm_ends_the_run_as_ctrl_c_does_keeping_finished_sessions(device: FakeDevice, tmp_path: Path) -> None:
    """SIGTERM (`timeout`, a scheduler) killed `collect android` (exit 143) with nothing written, where
    Ctrl-C exits 130 with the finished sessions in the corpus, as the README says of every collector."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "collect", "android", "--out", str(out), "--repeat", "30",
                             "--settle", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL))
    assert proc.stderr is not None
    progress = []
    deadline = time.monotonic() + 120
    while len(progress) < 2 and time.monotonic() < deadline:  # two sessions finished
        line = proc.stderr.readline()
        assert line, f"the run ended early: {proc.wait()} {proc.stdout.read() if proc.stdout else ''}"
        if line.startswith("["):
            progress.append(line)
    os.kill(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "worldline collect android: interrupted (finished sessions are written)" in stderr
    n = run_query(out, "SELECT count(*) FROM trajectories")[1][0][0]
    assert 2 <= n < 90
