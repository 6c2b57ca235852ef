"""Data contracts over recorded MCP data (`source_format` mcp-live), in the form of pipelines.contracts.

They hold on any corpus: with no MCP data every check passes with zero counts. The Dagster asset
checks of `mcp_trajectories` and the tests call `run_mcp_contracts`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collectors.mcp.raw import TABLE
from collectors.mcp.recorder import SOURCE_FORMAT, STARTUP_FAILURES
from pipelines.contracts import ContractResult, run_named
from pipelines.query import connect, views


def _mcp_turns(con) -> str:
    return f"(SELECT u.* FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.source_format = '{SOURCE_FORMAT}')"


def raw_reachable(con) -> ContractResult:
    """Every recorded MCP turn has its raw JSON-RPC row in `mcp_raw`."""
    n = con.sql(f"SELECT count(*) FROM {_mcp_turns(con)}").fetchall()[0][0]
    if TABLE not in views(con):
        missing = n
    else:
        missing = con.sql(f"SELECT count(*) FROM {_mcp_turns(con)} u ANTI JOIN {TABLE} r "
                          "ON r.trajectory_id = u.trajectory_id AND r.turn_index = u.turn_index").fetchall()[0][0]
    return ContractResult("mcp_raw_reachable", missing == 0, "every mcp-live turn has its raw JSON-RPC in side/mcp_raw",
                          {"turns": n, "missing_raw": missing})


def faults_labelled(con) -> ContractResult:
    """Every perturbed turn names its fault in metadata and keeps the unperturbed response."""
    rows = con.sql(f"""SELECT count(*) FILTER (WHERE perturbation IS NOT NULL),
        count(*) FILTER (WHERE perturbation IS NOT NULL AND (json_extract_string(metadata, '$.fault.kind') IS DISTINCT FROM perturbation
                         OR NOT json_exists(metadata, '$.unperturbed_observation'))),
        count(*) FILTER (WHERE perturbation IS NULL AND json_exists(metadata, '$.fault'))
        FROM {_mcp_turns(con)}""").fetchall()[0]
    perturbed, bad, unlabelled = rows
    return ContractResult("mcp_faults_labelled", bad == 0 and unlabelled == 0,
                          "perturbed turns name their fault and keep the unperturbed response; no unlabelled faults",
                          {"perturbed_turns": perturbed, "bad": bad, "unlabelled": unlabelled})


def fingerprinted(con) -> ContractResult:
    """Every MCP session that got past the health check has its action space and fingerprint."""
    rows = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE action_space IS NULL
            OR json_extract_string(env_fingerprint, '$.tool_schema_sha256') IS NULL
            OR json_extract_string(env_fingerprint, '$.server_name') IS NULL)
        FROM trajectories WHERE source_format = '{SOURCE_FORMAT}' AND outcome NOT IN {STARTUP_FAILURES!r}""").fetchall()[0]
    return ContractResult("mcp_fingerprinted", rows[1] == 0,
                          "sessions past the health check have action_space, server name and tool-schema hash",
                          {"sessions": rows[0], "missing": rows[1]})


def observations_typed(con) -> ContractResult:
    """MCP env turns are tool results or errors, with an error flag, and errors are flagged."""
    rows = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE observation_kind NOT IN ('tool_result', 'error')
            OR is_error IS NULL OR observation IS NULL OR (observation_kind = 'error' AND NOT is_error))
        FROM {_mcp_turns(con)}""").fetchall()[0]
    return ContractResult("mcp_observations_typed", rows[1] == 0,
                          "mcp-live turns are tool_result/error observations with is_error set",
                          {"turns": rows[0], "bad": rows[1]})


MCP_CONTRACTS: dict[str, Callable] = {
    "mcp_raw_reachable": raw_reachable,
    "mcp_faults_labelled": faults_labelled,
    "mcp_fingerprinted": fingerprinted,
    "mcp_observations_typed": observations_typed,
}


def run_mcp_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    return run_named(MCP_CONTRACTS, connect(corpus_dir))
