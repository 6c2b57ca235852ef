"""The shared option check: its wording, and NaN refused like any value below the bound."""

from __future__ import annotations

import pytest

from pipelines.cli import main
from schemas.options import at_least


def test_at_least() -> None:
    at_least("--workers", 1, 1)
    at_least("--threshold", 0.0, 0)
    for value, shown in ((0, "0"), (-3, "-3"), (float("nan"), "nan")):
        with pytest.raises(ValueError) as e:
            at_least("--workers", value, 1)
        assert str(e.value) == f"--workers must be at least 1 (got {shown})"


@pytest.mark.parametrize("command", [["score", "C"], ["export", "C", "--out", "O"], ["traces", "C"],
                                     ["collect", "sandbox", "--out", "O"], ["collect", "mcp", "--out", "O"],
                                     ["collect", "browser", "--out", "O"]])
def test_every_seed_past_63_bits_is_a_usage_error(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A seed goes into JSON metadata (64-bit integers): past that, runs crashed at their last write
    (`collect browser --seed 10**23` lost the whole run). Negative seeds are refused too."""
    for seed in (str(1 << 64), "-1"):
        with pytest.raises(SystemExit) as e:
            main([*command, "--seed", seed])
        assert e.value.code == 2
        assert f"argument --seed: expected an integer in [0, 2**63), got '{seed}'" in capsys.readouterr().err
