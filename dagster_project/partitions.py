"""Coarse partitions: (source × day). Sources are dynamic: a new inbox folder adds one."""

from __future__ import annotations

import dagster as dg

SOURCES = dg.DynamicPartitionsDefinition(name="sources")
DAYS = dg.DailyPartitionsDefinition(start_date="2024-01-01", timezone="UTC", end_offset=1)
SOURCE_DAY = dg.MultiPartitionsDefinition({"source": SOURCES, "day": DAYS})


def key(source: str, day: str) -> dg.MultiPartitionKey:
    return dg.MultiPartitionKey({"source": source, "day": day})
