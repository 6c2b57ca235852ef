"""Checks of option values shared by every stage's config: one wording, the option named as the CLI
spells it, so that the CLI and the Dagster run config fail alike."""

from __future__ import annotations

import re
from typing import Any


def at_least(option: str, value: Any, low: int | float) -> None:
    """A ValueError when `value` is below `low` (NaN too)."""
    if not value >= low:
        raise ValueError(f"{option} must be at least {low} (got {value})")


INT_LIMIT = 1 << 63  # integer settings (seeds, token counts) go into JSON metadata (orjson: 64-bit) and numpy


def check_seed(option: str, value: Any) -> None:
    """A ValueError for a seed that is no integer in [0, 2**63): a larger one crashed at the last write."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < INT_LIMIT:
        raise ValueError(f"{option} {value}: must be an integer in [0, 2**63)")


def seed_option(text: str) -> int:
    """argparse type of every `--seed`: refused as a usage error, before any work."""
    import argparse

    try:
        value = int(text)
        check_seed("--seed", value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {text!r}") from None
    return value


def int_option(text: str) -> int:
    """argparse type of an integer option: one that fits 64 bits (settings go into JSON metadata and numpy; a
    larger one was a traceback from deep inside a stage)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not -INT_LIMIT < value < INT_LIMIT:
        raise argparse.ArgumentTypeError(f"{text}: must be below 2**63 in magnitude")
    return value


def max_processes() -> int:
    """The most worker processes a stage starts: far past any gain on this machine, well short of a fork bomb."""
    import os

    return max(64, 8 * (os.cpu_count() or 1))


def process_count(option: str, value: Any) -> None:
    """A `--workers` value: 0 (automatic) up to `max_processes()`."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{option} must be 0 (automatic) or more (got {value})")
    if value > (cap := max_processes()):
        raise ValueError(f"{option} {value}: more processes than this machine can use (at most {cap} here)")


_MEMORY_VALUE = re.compile(r"\s*(-?\d+(?:\.\d*)?|-?\.\d+)\s*[a-z]*\s*", re.I)


def check_memory_limit(limit: str) -> None:
    """A `--memory-limit` DuckDB takes (asked on a throwaway connection: `1G`, `512MiB`, `50%`, `-1` or
    `none` for no limit, ...) that leaves it some memory, checked up front so that a bad value fails
    before the run, not as a DuckDB parser error inside it."""
    import duckdb

    if not isinstance(limit, str):
        raise ValueError(f"--memory-limit must be text such as 256MB (got {limit!r})")
    try:
        duckdb.connect().execute("SET memory_limit = ?", [limit])
    except duckdb.Error as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--memory-limit {limit!r}: DuckDB does not take it ({first}); "
                         "e.g. 256MB, 1.5GiB, 50%, or -1 for no limit") from None
    m = _MEMORY_VALUE.fullmatch(limit)
    if m and float(m.group(1)) <= 0 and limit.strip() != "-1":
        raise ValueError(f"--memory-limit {limit!r}: must be positive (or -1 or none for no limit)")
