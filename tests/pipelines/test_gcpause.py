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
