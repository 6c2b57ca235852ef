"""Data contracts for sandbox trajectories (`source_format = 'sandbox'`), run as Dagster asset checks.

Each is a query over the corpus views that must find nothing wrong; the metadata names examples.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import duckdb

from pipelines.contracts import ContractResult, run_named
from pipelines.query import connect

_SB = "source_format = 'sandbox'"


def _examples(con: duckdb.DuckDBPyConnection, sql: str) -> list[str]:
    return [str(r[0]) for r in con.sql(sql + " LIMIT 10").fetchall()]


def fingerprinted(con: duckdb.DuckDBPyConnection) -> ContractResult:
    """Every sandbox trajectory with turns names its image id (sha256) and engine version."""
    bad = _examples(con, f"""SELECT native_id FROM trajectories WHERE {_SB} AND num_turns > 0 AND (env_fingerprint IS NULL
        OR json_extract_string(env_fingerprint, '$.image_id') NOT LIKE 'sha256:%'
        OR json_extract_string(env_fingerprint, '$.engine') IS NULL)""")
    return ContractResult("sandbox_fingerprinted", not bad, fingerprinted.__doc__.strip(), {"examples": bad})


def perturbations_labelled(con: duckdb.DuckDBPyConnection) -> ContractResult:
    """Every turn carries exactly its trajectory's perturbation name (null when unperturbed)."""
    bad = _examples(con, f"""SELECT DISTINCT t.native_id FROM trajectories t JOIN turns u USING (trajectory_id)
        WHERE t.{_SB} AND u.perturbation IS DISTINCT FROM json_extract_string(t.metadata, '$.perturbation.name')""")
    return ContractResult("sandbox_perturbations_labelled", not bad, perturbations_labelled.__doc__.strip(), {"examples": bad})


def shell_turns_complete(con: duckdb.DuckDBPyConnection) -> ContractResult:
    """Shell turns have an exit code, separate stdout/stderr whose sizes add up to the combined
    observation, a duration and a cwd; the only other turns are error turns that end a trajectory."""
    bad = _examples(con, f"""SELECT t.native_id || ' turn ' || u.turn_index FROM trajectories t JOIN turns u USING (trajectory_id)
        WHERE t.{_SB} AND ((u.observation_kind = 'stdout' AND (u.exit_code IS NULL OR u.stdout IS NULL OR u.stderr IS NULL
              OR length(u.observation) != length(u.stdout) + length(u.stderr) OR u.duration_s IS NULL
              OR json_extract_string(u.state, '$.cwd') IS NULL))
           OR (u.observation_kind = 'error' AND u.turn_index != t.num_turns - 1)
           OR u.observation_kind NOT IN ('stdout', 'error'))""")
    return ContractResult("sandbox_shell_turns_complete", not bad, shell_turns_complete.__doc__.strip().split("\n")[0],
                          {"examples": bad})


def outcomes_known(con: duckdb.DuckDBPyConnection) -> ContractResult:
    """Outcomes are success/failure (judged by checks), done (no checks), error or interrupted."""
    bad = _examples(con, f"""SELECT native_id || ': ' || coalesce(outcome, 'NULL') FROM trajectories WHERE {_SB}
        AND coalesce(outcome, '') NOT IN ('success', 'failure', 'done', 'error', 'interrupted')""")
    return ContractResult("sandbox_outcomes_known", not bad, outcomes_known.__doc__.strip(), {"examples": bad})


SANDBOX_CONTRACTS: dict[str, Callable[[duckdb.DuckDBPyConnection], ContractResult]] = {
    "sandbox_fingerprinted": fingerprinted,
    "sandbox_perturbations_labelled": perturbations_labelled,
    "sandbox_shell_turns_complete": shell_turns_complete,
    "sandbox_outcomes_known": outcomes_known,
}


def run_sandbox_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    return run_named(SANDBOX_CONTRACTS, connect(corpus_dir))
