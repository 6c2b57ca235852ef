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
vim_session.cast and less_session.cast are synthetic too (written for these tests, not copied from
any recording), modelled on what bash 5.1, vim 9 and less emit in an xterm: the alternate screen
`ESC[?1049h` / `ESC[?1049l`, vim's cursor-position and device-attribute queries and the terminal's
answers to them arriving as `i` events. Their expected values are worked out from the event bytes in
the comments of their tests.
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
    (v1,) = list(read_path(DATA / "asciicast_v1.json"))  # v1 is a JSON document: AsciicastV1Importer's
    assert isinstance(v1, Trajectory) and v1.task == "" and v1.turns[0].stdout == "$ ls\r\n"


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


# ---------------------------------------------------------------- full-screen programs, terminal replies


def test_vim_session_alternate_screen_and_terminal_replies() -> None:
    """vim_session.cast (40x10): bash prompt; `v`,`i`,`m`,Enter typed; vim enters the alternate
    screen, clears it, asks `ESC[6n` (after writing ▽ at row 2, col 1), `ESC[>c` and `OSC 11;?`; the
    terminal answers `ESC[2;2R`, `ESC[>0;95;0c`, `OSC 11;rgb:1e1e/1e1e/1e1e BEL` (lines 12-14, `i`
    events nobody typed); vim draws `~` on rows 2-9, "VIM - Vi IMproved" at (4,12), "version 9.0"
    at (6,15), the ruler "0,0-1" at (10,23) then 9 columns on "All"; `:` (vim writes ":" on row 10),
    `q` (writes "q"), Enter (vim leaves the alternate screen: the main screen comes back with the
    cursor below `user@host:~$ vim`), bash's prompt, then Ctrl-D (bash prints "exit")."""
    t = one_trajectory(DATA / "vim_session.cast")
    assert t.initial_state == "user@host:~$"
    assert [u.action for u in t.turns] == ["vim", ":", "q", "<Enter>", "^D"]  # the replies are no keys
    vim, colon, q, enter, ctrl_d = t.turns
    # the echoed command line (main screen), then vim's first screen (alternate screen, row 1 empty)
    assert vim.observation.split("\n") == [
        "user@host:~$ vim",
        "",
        "~",
        "~",
        "~" + " " * 10 + "VIM - Vi IMproved",
        "~",
        "~" + " " * 13 + "version 9.0",
        "~",
        "~",
        "~",
        " " * 22 + "0,0-1" + " " * 9 + "All",
    ]
    assert colon.observation == ":" and q.observation == ":q"  # the rows each key changed
    assert enter.observation == "user@host:~$"  # the restored main screen is not new output: only the prompt
    assert ctrl_d.observation == "exit"
    m = [json.loads(u.metadata) for u in t.turns]
    assert m[0]["input_raw"] == "vim\r"
    assert m[0]["terminal_replies"] == "\x1b[2;2R\x1b[>0;95;0c\x1b]11;rgb:1e1e/1e1e/1e1e\x07"
    assert [x.get("full_screen") for x in m] == [None, True, True, True, None]
    assert [x["input_raw"] for x in m[1:]] == [":", "q", "\r", "\x04"]
    assert vim.duration_s == pytest.approx(1.53 - 1.5)  # Enter to vim's last drawing before `:`
    assert enter.duration_s == pytest.approx(3.61 - 3.6) and enter.locator == "line:20-22"
    assert vim.locator == "line:3-15"
    assert_schema_valid([t])


def test_less_session_keys_in_a_pager_are_turns_of_their_own() -> None:
    """less_session.cast (20x3): `less f.txt` + Enter; less enters the alternate screen, clears it
    and shows "line1", "line2" and its ":" prompt; `j`: less erases the prompt row, writes "line3"
    there and scrolls, ":" on the new bottom row; `q`: less erases the prompt row and leaves the
    alternate screen (the cursor goes back below `$ less f.txt`), bash prints "$ "; `echo hi` +
    Enter prints "hi" and a prompt."""
    t = one_trajectory(DATA / "less_session.cast")
    assert t.initial_state == "$"
    assert [(u.action, u.observation) for u in t.turns] == [
        ("less f.txt", "$ less f.txt\nline1\nline2\n:"),  # the command line stays, the pager's screen follows
        ("j", "line3\n:"),
        ("q", "$"),  # the erased prompt row is blank; the restored "$ less f.txt" is not new
        ("echo hi", "$ echo hi\nhi\n$"),  # the command after the pager starts clean
    ]
    assert [json.loads(u.metadata).get("full_screen") for u in t.turns] == [None, True, True, None]
    assert [u.duration_s for u in t.turns] == pytest.approx([1.31 - 1.3, 0.0004, 0.001, 0.0003])
    assert_schema_valid([t])


def test_terminal_replies_are_not_keys_and_real_keys_stay(tmp_path: Path) -> None:
    cast = tmp_path / "replies.cast"
    events = [
        [0.1, "o", "$ "],
        [0.2, "i", "\x1b[I"],  # focus in, before any keystroke
        # a, Up, b, Delete, F5, F1 (SS3), Shift-F3 (`ESC[1;2R`, no cursor position was asked), Alt-], Enter
        [1.0, "i", "a\x1b[Ab\x1b[3~\x1b[15~\x1bOP\x1b[1;2R\x1b]\r"],
        [1.1, "o", "\r\n\x1b[6n$ "],  # a program asks for the cursor position
        [1.2, "i", "\x1b[1;2R"],  # so this one is the answer
        [2.0, "i", "x\x1b[O\x1bP>|xterm(390)\x1b\\\x1b]11;rgb:0000/0000/0000\x1b\\\x1b[?62;22c"
                   "\x1b[?2004;2$y\x1b[?1u\x1b[0n\x1b[8;24;80t\x1b[200~p\x1b[I\x1b[201~\r"],
        [2.1, "o", "xp\r\n$ "],
    ]
    cast.write_text('{"version": 2, "width": 40, "height": 5}\n' + "".join(json.dumps(e) + "\n" for e in events))
    t = one_trajectory(cast)
    assert [u.action for u in t.turns] == [
        "a<Up>b<Delete><ESC[15~><ESCOP><ESC[1;2R><M-]>",
        "xp\x1b[I",  # inside a bracketed paste everything is pasted text; the markers are removed
    ]
    assert json.loads(t.metadata)["terminal_replies"] == "\x1b[I"
    first, second = (json.loads(u.metadata) for u in t.turns)
    assert first["terminal_replies"] == "\x1b[1;2R"  # answered after this turn's Enter: still this turn's
    assert second["terminal_replies"] == (
        "\x1b[O\x1bP>|xterm(390)\x1b\\\x1b]11;rgb:0000/0000/0000\x1b\\\x1b[?62;22c\x1b[?2004;2$y\x1b[?1u"
        "\x1b[0n\x1b[8;24;80t"
    )
    assert second["input_raw"] == "x\x1b[200~p\x1b[I\x1b[201~\r"


def test_a_turn_locator_covers_its_markers_and_resizes(tmp_path: Path) -> None:
    """A marker or resize after a turn's last output is in its metadata: its locator ended before them."""
    cast = tmp_path / "marks.cast"
    events = [[0.1, "o", "$ "], [1.0, "i", "ls\r"], [1.1, "o", "ls\r\nfoo\r\n$ "], [1.2, "r", "100x30"],
              [1.3, "m", "listed"], [2.0, "i", "pwd\r"], [2.1, "o", "pwd\r\n/root\r\n$ "], [2.2, "m", "done"]]
    cast.write_text('{"version": 2, "width": 80, "height": 24}\n' + "".join(json.dumps(e) + "\n" for e in events))
    t = one_trajectory(cast)
    assert [(u.action, u.locator) for u in t.turns] == [("ls", "line:3-6"), ("pwd", "line:7-9")]
    first, second = (json.loads(u.metadata) for u in t.turns)
    assert (first["resizes"], first["markers"]) == ([{"t": 1.2, "size": "100x30"}], [{"t": 1.3, "label": "listed", "line": 6}])
    assert second["markers"] == [{"t": 2.2, "label": "done", "line": 9}]


def test_only_terminal_replies_is_an_output_only_recording(tmp_path: Path) -> None:
    cast = tmp_path / "replies_only.cast"
    cast.write_text('{"version": 2, "width": 40, "height": 5}\n[0.1, "o", "\\u001b[6nhi"]\n'
                    '[0.2, "i", "\\u001b[1;3R"]\n')
    t = one_trajectory(cast)
    (u,) = t.turns
    assert u.action is None and u.observation == "hi"
    assert json.loads(t.metadata)["terminal_replies"] == "\x1b[1;3R"


def test_empty_input_events_are_an_output_only_recording(tmp_path: Path) -> None:
    """An `i` event with no data (valid: the data is a string) holds no key: the recording is read as
    the same file without it (it gave no turn at all, its output only in `initial_stdout`)."""
    head = '{"version": 2, "width": 80, "height": 24, "timestamp": 1700000000}\n'
    events = ['[0.1, "o", "$ "]\n', '[0.5, "i", ""]\n', '[1.0, "o", "ls\\r\\nfoo\\r\\n$ "]\n']
    with_empty, without = tmp_path / "empty_i.cast", tmp_path / "no_i.cast"
    with_empty.write_text(head + "".join(events))
    without.write_text(head + events[0] + events[2])
    got, want = one_trajectory(with_empty), one_trajectory(without)
    assert [(u.action, u.observation) for u in got.turns] == [(u.action, u.observation) for u in want.turns] == [
        (None, "$ ls\nfoo\n$")]
    assert json.loads(got.metadata)["output_only"] is True


def test_screen_alternate_screen_is_a_separate_canvas() -> None:
    s = Screen(20, 3)
    s.feed("$ vim\r\n\x1b[?1049h\x1b[H\x1b[2Jhello")
    assert s.take() == "$ vim\nhello"  # rows written before entering stay, then what was drawn there
    s.feed("\r\nworld\x1b[?1049l$ ")
    assert s.take() == "world\n$"  # drawn on the alternate screen before leaving; the restored rows are not new
    s.feed("\r\x1b[?1049h\x1b[?1049l")
    assert s.take() == ""
    assert s.cpr_asked == 0
    s.feed("\x1b[6n\x1b[?6n")
    assert s.cpr_asked == 2


def test_asciicast_v1_is_an_output_only_recording(tmp_path: Path) -> None:
    # asciinema 1.x wrote one JSON document; `stdout` frames are [delay since the previous frame, text]
    doc = {"version": 1, "width": 20, "height": 4, "duration": 1.5, "command": "/bin/bash", "title": "demo",
           "env": {"TERM": "xterm-256color", "SHELL": "/bin/bash"},
           "stdout": [[0.1, "$ "], [0.9, "ls\r\n"], [0.25, "a.txt  b.txt\r\n"], [0.25, "$ "]]}
    p = tmp_path / "old.json"
    p.write_text(json.dumps(doc, indent=2))
    (t,) = list(read_path(p))
    assert (t.source_format, t.domain, t.task, len(t.turns)) == ("asciicast", "terminal", "demo", 1)
    turn = t.turns[0]
    assert (turn.kind, turn.action, turn.locator) == ("env", None, "stdout[0:4]")
    assert turn.stdout == "$ ls\r\na.txt  b.txt\r\n$ "
    assert turn.observation == "$ ls\na.txt  b.txt\n$"
    assert json.loads(t.metadata) == {"asciicast_version": 1, "title": "demo", "command": "/bin/bash", "duration": 1.5,
                                      "output_only": True}  # the frames are the turn's stdout, not metadata too
    assert json.loads(t.env_fingerprint) == {"width": 20, "height": 4, "env": doc["env"]}
    doc["stdout"][2] = [0.25]
    p.write_text(json.dumps(doc))
    (q,) = list(read_path(p))
    assert (q.reason, q.importer) == ("malformed_record", "asciicast-v1") and "stdout[2]: a frame is [delay, text]" in q.detail


def test_cr_lf_in_one_input_event_is_one_enter(tmp_path: Path) -> None:
    """`cat nofile\\r\\n` in one `i` event was two Enters: the command got no output and an empty second
    turn took it all."""
    p = tmp_path / "crlf.cast"
    p.write_text("\n".join([
        '{"version": 2, "width": 80, "height": 24, "timestamp": 1700000000}',
        '[0.1, "o", "$ "]', '[1.0, "i", "cat nofile\\r\\n"]',
        '[1.01, "o", "cat nofile\\r\\ncat: nofile: No such file or directory\\r\\n$ "]',
        '[2.0, "i", "ls\\r"]', '[2.01, "o", "ls\\r\\na.txt\\r\\n$ "]']) + "\n")
    [t] = [r for r in read_path(p) if isinstance(r, Trajectory)]
    assert [(u.action, u.observation) for u in t.turns] == [
        ("cat nofile", "$ cat nofile\ncat: nofile: No such file or directory\n$"), ("ls", "$ ls\na.txt\n$")]  # as with `\r` alone


def _cast(tmp_path: Path, events: list[str]) -> Trajectory:
    p = tmp_path / "run.cast"
    p.write_text("\n".join(['{"version": 2, "width": 80, "height": 24, "timestamp": 1700000000}', *events]) + "\n")
    [t] = [r for r in read_path(p) if isinstance(r, Trajectory)]
    return t


def test_several_lines_in_one_input_event_are_one_turn(tmp_path: Path) -> None:
    """A paste without bracketed-paste mode (or piped, typed-ahead input) puts several lines in one `i`
    event; the shell's answers to all of them follow it and cannot be told apart. They were a turn per
    line: every line but the last with no output, the last with everything."""
    t = _cast(tmp_path, [
        '[0.1, "o", "$ "]', '[1.0, "i", "echo one\\recho two\\r"]',
        '[1.01, "o", "echo one\\r\\none\\r\\n$ echo two\\r\\ntwo\\r\\n$ "]',
        '[2.0, "i", "ls\\r\\r"]', '[2.01, "o", "ls\\r\\na.txt\\r\\n$ \\r\\n$ "]'])
    assert [(u.action, u.observation) for u in t.turns] == [
        ("echo one\necho two", "$ echo one\none\n$ echo two\ntwo\n$"), ("ls", "$ ls\na.txt\n$\n$")]
    meta = json.loads(t.turns[0].metadata)
    assert (meta["input_raw"], meta["t_enter"], t.turns[0].duration_s) == ("echo one\recho two\r", 1.0, 0.01)


def test_a_line_left_unfinished_in_the_same_event_joins_the_turn(tmp_path: Path) -> None:
    # `echo one\recho tw` pasted, the shell answers the first line, then `o` and Enter are typed
    t = _cast(tmp_path, [
        '[0.1, "o", "$ "]', '[1.0, "i", "echo one\\recho tw"]',
        '[1.01, "o", "echo one\\r\\none\\r\\n$ echo tw"]', '[1.5, "i", "o\\r"]',
        '[1.51, "o", "o\\r\\ntwo\\r\\n$ "]', '[2.0, "i", "^C"]'])
    assert [u.action for u in t.turns] == ["echo one\necho two", "^C"]
    assert t.turns[0].observation == "$ echo one\none\n$ echo two\ntwo\n$"
    assert json.loads(t.turns[0].metadata)["t_enter"] == 1.0 and t.turns[0].duration_s == 0.51
