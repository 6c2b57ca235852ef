"""Data contracts over recorded browser data (`source_format` browser-live), in the form of
pipelines.contracts. With no browser data every check passes with zero counts. The Dagster asset
checks of `browser_trajectories` and the tests call `run_browser_contracts`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collectors.browser.collect import SOURCE_FORMAT
from pipelines.contracts import ContractResult, run_named
from pipelines.query import connect

_TURNS = f"""(SELECT u.*, t.initial_state FROM turns u JOIN trajectories t USING (trajectory_id)
              WHERE t.source_format = '{SOURCE_FORMAT}')"""


def refs_visible(con) -> ContractResult:
    """Every action on a ref that the page took names a ref the observation before it showed (the
    start page's tree for the first): the agent acted on what it saw."""
    n, bad, example = con.sql(f"""
        WITH u AS (
            SELECT trajectory_id, turn_index, is_error, json_extract_string(tool_args, '$.ref') AS ref,
                   coalesce(lag(observation) OVER (PARTITION BY trajectory_id ORDER BY turn_index),
                            initial_state) AS before
            FROM {_TURNS})
        SELECT count(*), count(*) FILTER (WHERE before IS NULL OR NOT contains(before, '[ref=' || ref || ']')),
               any_value(trajectory_id || ' turn ' || turn_index)
                   FILTER (WHERE before IS NULL OR NOT contains(before, '[ref=' || ref || ']'))
        FROM u WHERE ref IS NOT NULL AND NOT is_error""").fetchall()[0]
    return ContractResult("browser_refs_visible", bad == 0,
                          "every browser-live action the page took names a ref shown in the observation before it",
                          {"actions": n, "not_shown": bad, **({"example": example} if bad else {})})


def faults_labelled(con) -> ContractResult:
    """A turn labelled with an injected fault shows its 503 page, and no 503 page shows up before a fault
    was injected in its session."""
    rows = con.sql(f"""
        WITH u AS (
            SELECT *, regexp_matches(observation, '(?m)^title: 503 Service Unavailable$') AS shows_503,
                   count(perturbation) OVER (PARTITION BY trajectory_id ORDER BY turn_index) AS faults_so_far
            FROM {_TURNS})
        SELECT count(*) FILTER (WHERE perturbation IS NOT NULL),
               count(*) FILTER (WHERE perturbation = 'http_error' AND (NOT shows_503
                                OR json_extract(state, '$.http_status')::INT IS DISTINCT FROM 503)),
               count(*) FILTER (WHERE shows_503 AND faults_so_far = 0)
        FROM u""").fetchall()[0]
    perturbed, bad, unlabelled = rows
    return ContractResult("browser_faults_labelled", bad == 0 and unlabelled == 0,
                          "perturbed browser-live turns show the injected 503 page; no 503 page before a fault",
                          {"perturbed_turns": perturbed, "bad": bad, "unlabelled": unlabelled})


def observations_typed(con) -> ContractResult:
    """Browser turns are accessibility trees headed by the page's url and title (an `error:` line first
    on error turns, and only there), with an error flag."""
    rows = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE observation_kind IS DISTINCT FROM 'accessibility_tree'
            OR is_error IS NULL OR observation IS NULL
            OR NOT regexp_matches(observation, CASE WHEN is_error THEN '^error: [^\\n]*\\n(dialog: [^\\n]*\\n)*url: '
                                                    ELSE '^(dialog: [^\\n]*\\n)*url: ' END))
        FROM {_TURNS}""").fetchall()[0]
    return ContractResult("browser_observations_typed", rows[1] == 0,
                          "browser-live turns are accessibility trees with url and title, errors flagged and stated",
                          {"turns": rows[0], "bad": rows[1]})


def fingerprinted(con) -> ContractResult:
    """Every browser session has its action space, and its browser and site in the fingerprint."""
    rows = con.sql(f"""SELECT count(*), count(*) FILTER (WHERE action_space IS NULL OR initial_state IS NULL
            OR json_extract_string(env_fingerprint, '$.browser') IS NULL
            OR json_extract_string(env_fingerprint, '$.site_sha256') IS NULL)
        FROM trajectories WHERE source_format = '{SOURCE_FORMAT}' AND outcome IS DISTINCT FROM 'browser_error'""").fetchall()[0]
    return ContractResult("browser_fingerprinted", rows[1] == 0,
                          "browser sessions have action_space, initial_state, browser version and site hash",
                          {"sessions": rows[0], "missing": rows[1]})


BROWSER_CONTRACTS: dict[str, Callable] = {
    "browser_refs_visible": refs_visible,
    "browser_faults_labelled": faults_labelled,
    "browser_observations_typed": observations_typed,
    "browser_fingerprinted": fingerprinted,
}


def run_browser_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    return run_named(BROWSER_CONTRACTS, connect(corpus_dir))
