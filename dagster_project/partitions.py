"""Coarse partitions: (source × day). Sources are dynamic: a new inbox folder adds one. Dagster
orders the dimensions by name, so a key reads `day|source` (`2026-11-01|sample`)."""

from __future__ import annotations

import dagster as dg

from pipelines.inbox import FIRST_DAY

SOURCES = dg.DynamicPartitionsDefinition(name="sources")
DAYS = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, timezone="UTC", end_offset=1)
SOURCE_DAY = dg.MultiPartitionsDefinition({"source": SOURCES, "day": DAYS})


def key(source: str, day: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"source": source, "day": day})
