"""The Dagster code location: `dagster dev -m dagster_project.definitions` (or `make ui`)."""

from __future__ import annotations

import dagster as dg

from dagster_project.android_assets import (
    AndroidDevicesResource,
    android_contract_checks,
    android_trajectories,
)
from dagster_project.assets import corpus_report, ingested_traces
from dagster_project.browser_assets import BrowserSitesResource, browser_contract_checks, browser_trajectories
from dagster_project.checks import corpus_contracts
from dagster_project.clean_assets import cleaning_checks, cleaning_verdicts, dedup_checks, dedup_clusters
from dagster_project.export_assets import export_checks, training_export
from dagster_project.mcp_assets import McpServersResource, mcp_contract_checks, mcp_trajectories
from dagster_project.resources import build_resources
from dagster_project.sandbox_assets import SandboxPoolResource, sandbox_contract_checks, sandbox_trajectories
from dagster_project.score_assets import ScoringModelResource, turn_scores, turn_scores_checks
from dagster_project.sensors import daily_ingest, inbox_sensor, ingest_job
from dagster_project.traces_assets import thinking_traces, traces_checks, traces_resources

defs = dg.Definitions(
    assets=[
        ingested_traces, mcp_trajectories, sandbox_trajectories, browser_trajectories, android_trajectories,
        cleaning_verdicts, dedup_clusters, turn_scores, training_export, thinking_traces, corpus_report,
    ],
    asset_checks=[
        corpus_contracts, mcp_contract_checks, sandbox_contract_checks, browser_contract_checks, android_contract_checks,
        cleaning_checks, dedup_checks, turn_scores_checks, export_checks, traces_checks,
    ],
    jobs=[ingest_job],
    sensors=[inbox_sensor],
    schedules=[daily_ingest],
    resources={
        **build_resources(), **traces_resources(),
        "mcp_servers": McpServersResource(), "sandbox_pool": SandboxPoolResource(),
        "browser_sites": BrowserSitesResource(), "android_devices": AndroidDevicesResource(),
        "scoring_model": ScoringModelResource(),
    },
)
