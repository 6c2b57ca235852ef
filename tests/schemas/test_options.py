"""The shared option check: its wording, and NaN refused like any value below the bound."""

from __future__ import annotations

import pytest

from schemas.options import at_least


def test_at_least() -> None:
    at_least("--workers", 1, 1)
    at_least("--threshold", 0.0, 0)
    for value, shown in ((0, "0"), (-3, "-3"), (float("nan"), "nan")):
        with pytest.raises(ValueError) as e:
            at_least("--workers", value, 1)
        assert str(e.value) == f"--workers must be at least 1 (got {shown})"
