"""Data contracts over recorded Android data (`source_format` android-live), in the form of
pipelines.contracts. With no Android data every check passes with zero counts. The Dagster asset
checks of `android_trajectories` and the tests call `run_android_contracts`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collectors.android.collect import SOURCE_FORMAT
from pipelines.contracts import ContractResult, run_named
from pipelines.query import connect

_TURNS = f"""(SELECT u.*, t.initial_state FROM turns u JOIN trajectories t USING (trajectory_id)
              WHERE t.source_format = '{SOURCE_FORMAT}')"""


def indices_visible(con) -> ContractResult:
    """Every action on a view that the device took names a view the screen before it showed (the first
    screen for the first action): the agent acted on what it saw."""
    n, bad, example = con.sql(f"""
        WITH u AS (
            SELECT trajectory_id, turn_index, is_error, json_extract(tool_args, '$.index')::BIGINT AS idx,
                   coalesce(lag(observation) OVER (PARTITION BY trajectory_id ORDER BY turn_index),
                            initial_state) AS before
            FROM {_TURNS}),
        v AS (SELECT *, before IS NOT NULL AND regexp_matches(before, '(?m)^ *\\[' || idx || '\\] ') AS shown FROM u)
        SELECT count(*), count(*) FILTER (WHERE NOT shown),
               any_value(trajectory_id || ' turn ' || turn_index) FILTER (WHERE NOT shown)
        FROM v WHERE idx IS NOT NULL AND NOT is_error""").fetchall()[0]
    return ContractResult("android_indices_visible", bad == 0,
                          "every android-live action the device took names a view shown on the screen before it",
                          {"actions": n, "not_shown": bad, **({"example": example} if bad else {})})


def observations_typed(con) -> ContractResult:
    """Android turns are view hierarchies rendered from the root view `[0]` (an `error:` line first on
    error turns, and only there), with an error flag."""
    n, bad = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE observation_kind IS DISTINCT FROM 'view_hierarchy'
            OR is_error IS NULL OR observation IS NULL
            OR NOT regexp_matches(observation, CASE WHEN is_error THEN '^error: [^\\n]*\\n\\[0\\] ' ELSE '^\\[0\\] ' END))
        FROM {_TURNS}""").fetchall()[0]
    return ContractResult("android_observations_typed", bad == 0,
                          "android-live turns are view hierarchies from the root view, errors flagged and stated",
                          {"turns": n, "bad": bad})


def fingerprinted(con) -> ContractResult:
    """Every Android session that reached its app has its action space, first screen, and its package
    and spec in the fingerprint."""
    n, bad = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE action_space IS NULL OR initial_state IS NULL
            OR json_extract_string(env_fingerprint, '$.package') IS NULL
            OR json_extract_string(env_fingerprint, '$.spec_sha256') IS NULL)
        FROM trajectories WHERE source_format = '{SOURCE_FORMAT}' AND outcome IS DISTINCT FROM 'device_error'""").fetchall()[0]
    return ContractResult("android_fingerprinted", bad == 0,
                          "android sessions have action_space, initial_state, app package and spec hash",
                          {"sessions": n, "missing": bad})


ANDROID_CONTRACTS: dict[str, Callable] = {
    "android_indices_visible": indices_visible,
    "android_observations_typed": observations_typed,
    "android_fingerprinted": fingerprinted,
}


def run_android_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    return run_named(ANDROID_CONTRACTS, connect(corpus_dir))
