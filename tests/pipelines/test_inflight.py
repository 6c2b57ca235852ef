"""The progress of inputs being read now: positions of the open input files of this process and
its worker processes, read from /proc (Linux, where the tests and CI run)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from pipelines.inflight import OpenInputs


def _hold_open(path: str, at: int, ready, done) -> None:  # a worker reading an input: open, part read
    with open(path, "rb") as f:
        f.seek(at)
        ready.set()
        done.wait(30)


def test_positions_of_inputs_open_here_and_in_a_worker(tmp_path: Path) -> None:
    a, b, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "other.jsonl"
    for p in (a, b, other):
        p.write_bytes(b"x" * 10_000)
    inputs = OpenInputs([(a, 10_000), (tmp_path / "." / "b.jsonl", 10_000)])  # compared as real paths
    assert inputs.read() == {}  # nothing open yet
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    worker = ctx.Process(target=_hold_open, args=(str(b), 7_000, ready, done))
    worker.start()
    try:
        assert ready.wait(30)
        with open(a, "rb") as fa, open(other, "rb") as fo:
            fa.seek(2_500)
            fo.seek(9_000)  # not an input: not counted
            assert inputs.read() == {str(a): 2_500, str(b): 7_000}
            fa.seek(1_000)  # furthest seen is kept
            assert inputs.read() == {str(a): 2_500, str(b): 7_000}
    finally:
        done.set()
        worker.join(30)
    assert inputs.read() == {str(a): 2_500, str(b): 7_000}  # closed: the caller says when an input is finished


def test_ingest_progress_counts_inputs_read_and_finished_once(capsys, monkeypatch) -> None:
    from pipelines import ingest, progress

    monkeypatch.setattr(progress.time, "monotonic", lambda: 100.0)
    monkeypatch.setattr(progress.StatusLine, "due", lambda self, force=False: True)
    bar = ingest.Progress(10_000_000, enabled=True)
    bar.in_flight({"/in/a.jsonl": 4_000_000, "/in/b.jsonl": 6_000_000})  # both read to the end, neither finished
    bar.advance(4_000_000, "/in/a.jsonl", Path("/in/a.jsonl"))  # a finished: counted once
    bar.advance(6_000_000, "/in/b.jsonl", Path("/in/b.jsonl"))
    lines = [line.split(" MB ")[0] for line in capsys.readouterr().err.splitlines()]
    assert lines == ["ingest  99.9% 10.0/10.0", "ingest  99.9% 10.0/10.0", "ingest 100.0% 10.0/10.0"]


def test_without_a_progress_line_nothing_is_watched_or_resolved(tmp_path: Path, monkeypatch) -> None:
    """The watch resolves every input's path, and the line each finished one's: parent CPU taken from
    the workers (0.29 s over the 1 GiB benchmark input) where no line is drawn (`--quiet`, the benchmark)."""
    from pipelines import ingest

    def refuse(*a, **k):  # noqa: ANN002, ANN003
        raise AssertionError("a watch without a progress line")

    real = ingest.os.path.realpath
    resolved: list[str] = []

    def counting(p, *a, **k):  # noqa: ANN001, ANN002, ANN003
        resolved.append(str(p))
        return real(p, *a, **k)

    d = tmp_path / "in"
    d.mkdir()
    for i in range(3):
        (d / f"{i}.jsonl").write_text(f'{{"messages": [{{"role": "user", "content": "hi {i}"}}, {{"role": "assistant", "content": "yo"}}]}}\n')
    monkeypatch.setattr(ingest, "OpenInputs", refuse)
    monkeypatch.setattr(ingest.os.path, "realpath", counting)
    s = ingest.ingest([d], tmp_path / "c", ingest.IngestConfig(workers=1), progress=False)
    assert s.trajectories == 3
    assert [p for p in resolved if p.endswith(".jsonl")] == []  # none per input (the corpus checks resolve the folder)
