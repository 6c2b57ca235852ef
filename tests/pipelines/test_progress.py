from __future__ import annotations

import itertools

import pytest

from pipelines import progress
from pipelines.progress import StatusLine


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines drawn as on a terminal (in place, ended by a newline), every one due (a clock of 20 s a call)."""
    real_init = StatusLine.__init__

    def as_on_a_terminal(self: StatusLine, *a, **k) -> None:  # noqa: ANN002, ANN003
        real_init(self, *a, **k)
        self.tty = True

    monkeypatch.setattr(StatusLine, "__init__", as_on_a_terminal)
    clock = itertools.count(100.0, 20.0)
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))


def test_lines_are_throttled_and_plain_when_not_a_terminal(capsys) -> None:
    line = StatusLine(enabled=True)  # stderr is captured: not a terminal, so one line per 10 s
    assert line.due() is True
    line.show("a")
    assert line.due() is False  # within the interval
    assert line.due(force=True) is True
    line.show("b")
    line.finish()
    assert capsys.readouterr().err == "a\nb\n"


def test_first_line_after_one_interval_and_disabled_shows_nothing() -> None:
    assert StatusLine(enabled=True, first_at_once=False).due() is False
    off = StatusLine(enabled=False)
    assert off.due() is False and off.due(force=True) is False


def test_count_progress_line(capsys, monkeypatch) -> None:

    clock = iter([100.0, 101.0, 104.0, 105.0])  # start; first call (due, elapsed); second call (not due)
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = progress.CountProgress("export", 10, "trajectories", enabled=True)
    bar(3, 800)  # the first line at once
    bar(2, 200)  # within 10 s of it: nothing
    assert capsys.readouterr().err == "export 3/10 trajectories · 800 tokens · 200 tokens/s · 4 s\n"
    assert (bar.done, bar.tokens) == (5, 1000)


def test_ingest_progress_ends_on_what_was_done(capsys, monkeypatch) -> None:
    # many small inputs finished within one interval: the only line drawn said "0.0% 0.0/15.0 MB" to the end
    from pipelines import ingest

    clock = iter([100.0, 100.0, 101.0, 101.5, 102.0])  # start; due, elapsed; not due; the last line's elapsed
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = ingest.Progress(3_000_000, enabled=True)
    bar.advance(1_000_000, "a.jsonl")  # the first line at once
    bar.advance(2_000_000, "b.jsonl")  # within the interval: not drawn
    bar.finish()
    assert capsys.readouterr().err.splitlines() == ["ingest  33.3% 1.0/3.0 MB 1.0 MB/s a.jsonl",
                                                    "ingest 100.0% 3.0/3.0 MB 1.5 MB/s b.jsonl"]


def test_ingest_messages_past_the_limit_are_counted_in_one_line(tmp_path, monkeypatch) -> None:
    from pipelines import ingest

    monkeypatch.setattr(ingest, "MAX_MESSAGES", 2)
    good = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    (tmp_path / "m.jsonl").write_text(good + "{broken\n" * 5)
    said: list[str] = []
    s = ingest.ingest([tmp_path / "m.jsonl"], tmp_path / "c", ingest.IngestConfig(workers=1), progress=False, echo=said.append)
    assert s.quarantined == 5
    assert [m.split(": ")[1] for m in said[:2]] == ["invalid_json", "invalid_json"]
    assert said[2:] == ["... and 3 more quarantined records not shown here (each has its row in the quarantine view)"]
    # two tasks of five each: the limit and the count are the run's
    (tmp_path / "n.jsonl").write_text(good.replace("hi", "hey") + "{broken\n" * 5)
    said.clear()
    s = ingest.ingest([tmp_path], tmp_path / "d", ingest.IngestConfig(workers=1, task_bytes=1), progress=False, echo=said.append)
    assert s.quarantined == 10 and len(said) == 3
    assert said[2] == "... and 8 more quarantined records not shown here (each has its row in the quarantine view)"


def test_listing_and_hashing_draw_a_line_when_they_take_long(tmp_path, capsys, monkeypatch) -> None:
    # a walk of millions of files, or terabytes to hash, said nothing until the ingest's own line began
    from pipelines import ingest
    from pipelines.reader import discover

    for i, n in enumerate([1_000_000, 500_000, 250_000]):
        (tmp_path / f"in{i}.jsonl").write_bytes(b"{}\n" + b" " * (n - 3))
    # the start; each input found; the walk's last line; each input hashed; the hashing's last line
    clock = iter([100.0, 111.0, 112.0, 113.0, 114.0, 125.0, 126.0, 127.0, 128.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    hashes = ingest.InputHashes(ingest.IngestConfig(workers=1), progress=True)
    for unit in discover([tmp_path]):
        hashes.add(unit)
    hashes.end_walk()
    shas, sizes = hashes.result()
    assert sizes == [1_000_000, 500_000, 250_000] and len(set(shas)) == 3
    assert capsys.readouterr().err.splitlines() == [
        "listing inputs: 1 found, 1.0 MB",  # one interval (10 s when not a terminal) after the start
        "listing inputs: 3 found, 1.8 MB",  # drawn within the interval: the walk's line ends on what was found
        "hashing  57.1% 1.0/1.8 MB, 1/3 inputs",
        "hashing 100.0% 1.8/1.8 MB, 3/3 inputs",  # drawn within the interval: it ends on what was done
    ]


def test_a_quick_walk_and_hash_draw_nothing(tmp_path, capsys) -> None:
    from pipelines import ingest
    from pipelines.reader import discover

    (tmp_path / "a.jsonl").write_text("{}\n")
    hashes = ingest.InputHashes(ingest.IngestConfig(workers=1), progress=True)
    for unit in discover([tmp_path]):
        hashes.add(unit)
    hashes.result()
    assert capsys.readouterr().err == ""


def test_an_error_after_the_walk_line_starts_a_line_of_its_own(tmp_path, capsys, terminal) -> None:
    # on a terminal the walk's line was left open, and the error (a missing input, a locked corpus, Ctrl-C)
    # was printed on the end of it
    from pipelines import ingest

    (tmp_path / "a.jsonl").write_text("{}\n")
    with pytest.raises(FileNotFoundError):
        ingest.ingest([tmp_path / "a.jsonl", tmp_path / "missing"], tmp_path / "c", ingest.IngestConfig(workers=1))
    err = capsys.readouterr().err
    assert err.startswith("\rlisting inputs: 1 found, 0.0 MB") and err.endswith("\n") and err.count("\n") == 1


def test_an_error_while_reading_starts_a_line_of_its_own(tmp_path, capsys, monkeypatch, terminal) -> None:
    # on a terminal, Ctrl-C or a failing group left the ingest's line open for the error's message
    from pipelines import ingest

    chat = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n'
    (tmp_path / "a.jsonl").write_text(chat)
    (tmp_path / "b.jsonl").write_text(chat * 2)
    real = ingest.process_group
    calls: list[int] = []

    def interrupted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:  # the first group read (its line drawn), then Ctrl-C
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(ingest, "process_group", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ingest.ingest([tmp_path], tmp_path / "c", ingest.IngestConfig(workers=1, task_bytes=1))
    err = capsys.readouterr().err
    assert "\ringest " in err and err.endswith("\n")
