"""Arrow schemas of the Worldline corpus (`trajectories`, `turns`, `quarantine`, side tables)."""

from schemas.tables import (
    DOMAINS,
    OBSERVATION_KINDS,
    QUARANTINE,
    SCHEMA_VERSION,
    TABLES,
    TRAJECTORIES,
    TURN_KINDS,
    TURNS,
    side_table_schema,
)
from schemas.validate import Violation, validate

__all__ = [
    "DOMAINS",
    "OBSERVATION_KINDS",
    "QUARANTINE",
    "SCHEMA_VERSION",
    "TABLES",
    "TRAJECTORIES",
    "TURNS",
    "TURN_KINDS",
    "Violation",
    "side_table_schema",
    "validate",
]
