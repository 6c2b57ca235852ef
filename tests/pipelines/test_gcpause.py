import gc

import pytest

from pipelines.gcpause import fewer_gc_passes


def test_raises_the_first_threshold_and_restores_all_three() -> None:
    before = gc.get_threshold()
    with fewer_gc_passes(123_456):
        assert gc.get_threshold() == (123_456, *before[1:])
        assert gc.isenabled()
    assert gc.get_threshold() == before


def test_restores_after_an_error_and_never_lowers() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), fewer_gc_passes(1):
        assert gc.get_threshold() == before  # a lower value than the current one is not applied
        raise RuntimeError("x")
    assert gc.get_threshold() == before


def test_overlapping_threads_restore_once_the_last_leaves() -> None:
    import threading

    before = gc.get_threshold()
    inside, leave_a = threading.Event(), threading.Event()

    def a() -> None:
        with fewer_gc_passes(200_000):
            inside.set()
            leave_a.wait(10)

    t = threading.Thread(target=a)
    t.start()
    inside.wait(10)
    with fewer_gc_passes(200_000):
        leave_a.set()
        t.join(10)
        assert gc.get_threshold()[0] == 200_000  # the other thread left first: still raised
    assert gc.get_threshold() == before


def test_automatic_collection_off_stays_off() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with fewer_gc_passes():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


def test_ingest_converts_with_fewer_gc_passes(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import pipelines.ingest as ingest_mod
    from tests.conftest import SAMPLE

    seen = []
    real = ingest_mod._convert_group

    def spy(*a, **k):
        seen.append(gc.get_threshold()[0])
        return real(*a, **k)

    monkeypatch.setattr(ingest_mod, "_convert_group", spy)
    before = gc.get_threshold()
    s = ingest_mod.ingest([SAMPLE / "intercode"], tmp_path / "c", ingest_mod.IngestConfig(workers=1), progress=False)
    assert s.trajectories == 124 and seen and all(t >= 100_000 for t in seen)
    assert gc.get_threshold() == before
