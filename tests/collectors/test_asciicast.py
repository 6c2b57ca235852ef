"""asciicast recordings, read through `pipelines.reader.read_path`.

Expected counts were taken from the raw files independently of the importer:
  tail -n +2 claude.cast | jq -c 'select(.[1]=="i")'
    -> [12.175677,"i","x\b\u001b[200~This is just a test.\u001b[201~"] and [14.334743,"i","\r"]:
       one Enter, so one turn. claude.txt lists two exchanges, but the first ("hello") was sent
       without `i` events (it only appears in the output, `❯ hello`), so it is part of the
       initial screen, not a turn.
  head -1 claude.cast | jq .timestamp -> 1771590373
The files under tests/data/asciicast were written from the published asciicast v2/v3 spec; their
turn counts are the Enter / Ctrl-C keystrokes in their `i` events (bash_session: ls, echo, <Up>,
sleep, ^C, exit = 6; python_v3: 2) or their markers (output_only_markers: 2).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.asciicast import AsciicastImporter, Screen
from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "asciicast"






def test_claude_cast(sample: Path) -> None:
    t = one_trajectory(sample / "agentapi-terminal" / "claude.cast")
    assert t.domain == "terminal" and t.source_format == "asciicast"
    assert len(t.turns) == 1
    (u,) = t.turns
    assert u.kind == "env" and u.observation_kind == "terminal_screen"
    assert u.action == "This is just a test."  # "x", backspace, then a bracketed paste
    assert json.loads(u.metadata)["input_raw"] == "x\b\x1b[200~This is just a test.\x1b[201~\r"
    # claude.txt: the agent's reply to the second user message
    assert "● Got it! Let me know if you need anything." in u.observation.split("\n")
    assert "\x1b" not in u.observation and "\x1b[" in u.stdout
    assert (
        "Harmonizing" not in u.observation and "Razzle" not in u.observation
    )  # spinner frames were overwritten
    # the first exchange of claude.txt was typed without `i` events: it is in the initial screen
    assert "❯ hello" in t.initial_state and "● Hello! How can I help you today?" in t.initial_state
    assert t.initial_state.startswith("╭─── Claude Code v2.1.49 ───")
    assert t.collected_at == datetime.fromtimestamp(1771590373, UTC)
    assert u.started_at == datetime.fromtimestamp(1771590373 + 12.175677, UTC)
    assert u.duration_s == pytest.approx(19.078841 - 14.334743)
    assert u.locator == "line:71-112"
    assert json.loads(t.env_fingerprint) == {
        "width": 80,
        "height": 1000,
        "env": {"SHELL": "/bin/bash", "TERM": "vt100"},
    }
    assert_schema_valid([t])


def test_agentapi_folder_only_the_cast_is_claimed(sample: Path) -> None:
    """The other agentapi files are not trajectories: neither text importer may claim them."""
    recs = list(read_path(sample / "agentapi-terminal"))
    trajs = [r for r in recs if isinstance(r, Trajectory)]
    assert [r.source_format for r in trajs] == ["asciicast"]
    assert all(r.importer is None for r in recs if isinstance(r, QuarantineRecord))


def test_bash_session() -> None:
    t = one_trajectory(DATA / "bash_session.cast")
    assert [u.action for u in t.turns] == ["ls", "echo hi", "<Up>", "sleep 10", "^C", "exit"]
    assert t.initial_state == "user@host:~/demo$"
    assert t.task == "list files"
    ls, echo, up, sleep, ctrl_c, _ = t.turns
    assert ls.observation == "user@host:~/demo$ ls\nproject  notes.txt\nuser@host:~/demo$"
    assert ls.duration_s == pytest.approx(1.5322 - 1.52)
    assert ls.started_at == datetime.fromtimestamp(1700000000 + 1.0, UTC)
    assert (
        echo.observation == "user@host:~/demo$ echo hi\nhi\nuser@host:~/demo$"
    )  # backspace applied on screen too
    assert json.loads(echo.metadata)["markers"] == [{"t": 5.0, "label": "after echo", "line": 18}]
    assert up.observation.startswith("user@host:~/demo$ echo hi\nhi")
    assert json.loads(sleep.metadata)["resizes"] == [{"t": 9.0, "size": "100x30"}]
    assert ctrl_c.observation == "^C\nuser@host:~/demo$" and ctrl_c.stdout.startswith("^C\r\n")
    assert_schema_valid([t])


def test_output_only_with_markers() -> None:
    t = one_trajectory(DATA / "output_only_markers.cast")
    assert [u.action for u in t.turns] == ["build", "test"]
    assert t.initial_state == "$"
    assert t.turns[0].observation == "$ make\ncc -o app main.c\n$"
    assert t.turns[1].observation == "$ ./app --test\n3 tests passed\n$"
    assert "\x1b[32m" in t.turns[1].stdout
    assert json.loads(t.metadata)["output_only"] is True


def test_output_only_without_markers() -> None:
    t = one_trajectory(DATA / "output_only.cast")
    (u,) = t.turns
    assert u.action is None and t.initial_state is None
    assert u.observation == "Downloading model.bin\n[##########] 100%\ndone"  # \r redraws collapse
    assert "30%" in u.stdout and json.loads(u.metadata) == {"output_only": True}
    assert t.collected_at is None and u.started_at is None  # no timestamp in the header
    assert_schema_valid([t])


def test_v3_intervals_and_exit() -> None:
    t = one_trajectory(DATA / "python_v3.cast")
    assert [u.action for u in t.turns] == ["1+1", "exit()"]
    assert t.initial_state == "Python 3.12.1\n>>>"
    assert t.turns[0].observation == ">>> 1+1\n2\n>>>"
    assert t.turns[0].started_at == datetime.fromtimestamp(1700000200 + 1.2, UTC)  # 0.2 + 1.0
    assert t.outcome == "exit:0" and json.loads(t.metadata)["exit_status"] == 0
    assert json.loads(t.env_fingerprint)["env"] == {"TERM": "xterm-256color"}


@pytest.mark.parametrize(
    "name, reason, where",
    [("bad_event.cast", "malformed_record", "line:3"), ("corrupt_middle.cast", "invalid_json", "line:3")],
)
def test_malformed_events_are_quarantined(name: str, reason: str, where: str) -> None:
    recs = list(read_path(DATA / name))
    assert len(recs) == 1 and isinstance(recs[0], QuarantineRecord)
    assert recs[0].reason == reason and recs[0].importer == "asciicast" and where in recs[0].detail
    assert recs[0].excerpt is None  # the record is the file's stream, not text to show


def test_truncated_last_line_is_tolerated() -> None:
    t = one_trajectory(DATA / "truncated_last_line.cast")
    assert [u.action for u in t.turns] == ["pwd"]
    assert json.loads(t.metadata)["truncated_last_line"].startswith("line:5:")


def test_sniff_is_strict(sample: Path) -> None:
    imp = AsciicastImporter()
    assert imp.sniff((sample / "agentapi-terminal" / "claude.cast").read_bytes()[:65536])
    assert not imp.sniff((DATA / "asciicast_v1.json").read_bytes())
    assert not imp.sniff(b'{"version": 2, "height": 24}\n[0.1, "o", "x"]\n')  # no width
    assert not imp.sniff(b'{"messages": [{"role": "user", "content": "hi"}]}\n')
    assert not imp.sniff(b'{"version": 2, "width": 80, "height": 24}\n{"role": "user"}\n')
    recs = list(read_path(DATA / "asciicast_v1.json"))
    assert [(type(r), r.importer) for r in recs] == [(QuarantineRecord, None)]


def test_screen_emulation() -> None:
    s = Screen(10, 3)
    s.feed("abc\x1b[")  # an escape sequence split across two events
    s.feed("2Dx\r\nline2\r\n\x1b[1Aover\x1b[K")
    assert s.take() == "axc\nover"
    s.feed("\r\n1\r\n2\r\n3\r\n4")  # past the bottom: rows scroll off but stay in the turn's text
    assert s.take() == "1\n2\n3\n4"
    s.feed("\r\n日本x")  # wide characters take two columns
    assert s.take() == "日本x" and s.c == 5
    s.feed("\x1b[2J\x1b[Hnew\x1b]0;title\x07")  # clear screen, home, an OSC title
    assert s.take() == "new"


def test_byte_order_mark_is_read_like_the_same_file_without(tmp_path: Path) -> None:
    # Windows tools (PowerShell 5 `Out-File -Encoding UTF8`) write a BOM before the header
    bom = tmp_path / "bom.cast"
    bom.write_bytes(b"\xef\xbb\xbf" + (DATA / "bash_session.cast").read_bytes())
    t, plain = one_trajectory(bom), one_trajectory(DATA / "bash_session.cast")
    assert len(t.turns) == len(plain.turns) > 0
    assert [(u.action, u.observation) for u in t.turns] == [(u.action, u.observation) for u in plain.turns]


def test_output_only_replay_resizes_where_the_recording_did(tmp_path: Path) -> None:
    # asciicast v2 `r` events ("COLSxROWS"): output before a resize was drawn at the earlier width
    cast = tmp_path / "resize.cast"
    cast.write_text("\n".join([
        '{"version": 2, "width": 40, "height": 10}',
        '[0.0, "o", "intro\\r\\n"]',
        '[0.5, "m", "step 1"]',
        '[0.6, "o", "0123456789ABCDEFGHIJ\\r\\n"]',
        '[0.7, "r", "10x5"]',
        '[1.0, "m", "step 2"]',
        '[1.1, "o", "abcdefghijklmnopqrst\\r\\n"]',
    ]) + "\n")
    t = one_trajectory(cast)
    assert [u.action for u in t.turns] == ["step 1", "step 2"]
    assert t.initial_state == "intro"
    assert [u.observation for u in t.turns] == ["0123456789ABCDEFGHIJ", "abcdefghij\nklmnopqrst"]
    assert json.loads(t.metadata)["resizes"] == [{"t": 0.7, "size": "10x5"}]
