"""Dagster orchestration of the Worldline core. Nothing in the core imports this package."""
