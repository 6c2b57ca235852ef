"""Checks of option values shared by every stage's config: one wording, the option named as the CLI
spells it, so that the CLI and the Dagster run config fail alike."""

from __future__ import annotations

from typing import Any


def at_least(option: str, value: Any, low: int | float) -> None:
    """A ValueError when `value` is below `low` (NaN too)."""
    if not value >= low:
        raise ValueError(f"{option} must be at least {low} (got {value})")
