from __future__ import annotations

from pipelines.progress import StatusLine


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
    from pipelines import progress

    clock = iter([100.0, 101.0, 104.0, 105.0])  # start; first call (due, elapsed); second call (not due)
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    bar = progress.CountProgress("export", 10, "trajectories", enabled=True)
    bar(3, 800)  # the first line at once
    bar(2, 200)  # within 10 s of it: nothing
    assert capsys.readouterr().err == "export 3/10 trajectories · 800 tokens · 200 tokens/s · 4 s\n"
    assert (bar.done, bar.tokens) == (5, 1000)
