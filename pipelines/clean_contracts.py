"""Data contracts over the clean and dedup side tables (Dagster asset checks call these).

Each returns a `pipelines.contracts.ContractResult`: what failed, where, and a query to see more.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.clean import REASONS, TURN_REASONS
from pipelines.contracts import ContractResult, run_named
from pipelines.query import connect
from pipelines.shell import query_command, worldline_command
from pipelines.side import corpus_state, side_info, verdicts_identity
from pipelines.store import Corpus


def _missing(name: str, table: str, stage: str) -> ContractResult:
    return ContractResult(name, False, f"side table `{table}` exists", {"error": f"no `{table}`: run `worldline {stage}` first"})


def cleaning_every_trajectory_judged(corpus: Corpus) -> ContractResult:
    """Every trajectory has a verdict: the verdicts are for the current corpus, kept plus dropped
    (each with a known reason) equals the trajectories in it, and the table holds the verdicts that
    `worldline clean` counted when it wrote them (rows lost or added since show as a difference)."""
    info = side_info(corpus, "cleaning")
    if info is None:
        return _missing("cleaning_every_trajectory_judged", "cleaning", "clean")
    con = connect(corpus.root)
    total = con.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    dropped = con.sql("SELECT count(DISTINCT trajectory_id) FROM cleaning WHERE turn_index IS NULL").fetchall()[0][0]
    # kept as `kept_trajectories` counts it (cleaning's part); emptied: every turn has a turn verdict (`--min-turns 0`)
    kept, emptied = con.sql("""
        WITH left_over AS (
            SELECT t.num_turns, t.num_turns - (SELECT count(*) FROM cleaning c WHERE c.trajectory_id = t.trajectory_id
                                               AND c.turn_index IS NOT NULL) AS n
            FROM trajectories t WHERE NOT EXISTS
                (SELECT 1 FROM cleaning c WHERE c.trajectory_id = t.trajectory_id AND c.turn_index IS NULL))
        SELECT count(*) FILTER (WHERE num_turns = 0 OR n > 0), count(*) FILTER (WHERE num_turns > 0 AND n = 0)
        FROM left_over""").fetchall()[0]
    unknown = [r[0] for r in con.sql("SELECT DISTINCT reason FROM cleaning").fetchall() if r[0] not in REASONS]
    misplaced = con.sql(f"""SELECT count(*) FROM cleaning WHERE (turn_index IS NULL) = (reason IN {tuple(TURN_REASONS) + ('',)!r})""").fetchall()[0][0]
    # a trajectory's verdict points at a trajectory (one with no turns too: `too_few_turns`), a turn's at a turn
    orphans = con.sql("""SELECT count(*) FROM cleaning c WHERE CASE WHEN c.turn_index IS NULL
                         THEN NOT EXISTS (SELECT 1 FROM trajectories t WHERE t.trajectory_id = c.trajectory_id)
                         ELSE NOT EXISTS (SELECT 1 FROM turns u WHERE u.trajectory_id = c.trajectory_id
                                          AND u.turn_index = c.turn_index) END""").fetchall()[0][0]
    current = info.get("corpus_state") == corpus_state(corpus)
    recorded = info.get("summary", {})
    judged = recorded.get("trajectories")
    counted = {
        "kept_trajectories": kept,
        "emptied_trajectories": emptied,
        "dropped_trajectories": dict(con.sql("""SELECT reason, count(DISTINCT trajectory_id) FROM cleaning
                                                WHERE turn_index IS NULL GROUP BY 1""").fetchall()),
        "dropped_turns": dict(con.sql("SELECT reason, count(*) FROM cleaning WHERE turn_index IS NOT NULL GROUP BY 1").fetchall()),
    }
    # (a table written before `emptied_trajectories` was recorded: none could be there without being counted kept)
    recorded = {"emptied_trajectories": 0, **recorded} if "kept_trajectories" in recorded else recorded
    differ = {k: {"recorded": recorded.get(k), "in_table": v} for k, v in counted.items() if recorded.get(k) != v}
    ok = (current and judged == total and kept + emptied + dropped == total and not differ and not unknown and not misplaced
          and not orphans)
    return ContractResult(
        "cleaning_every_trajectory_judged", ok,
        "verdicts are current; kept + emptied + dropped = trajectories = the verdicts recorded; known reasons; "
        "rows point at existing turns",
        {"trajectories": total, "judged": judged, "kept": kept, "emptied": emptied, "dropped": dropped, "current": current,
         "differs_from_recorded": differ,
         "unknown_reasons": unknown, "misplaced_rows": misplaced, "orphan_rows": orphans,
         "inspect": query_command(corpus.root, "SELECT reason, count(*) FROM cleaning GROUP BY 1"),
         **({} if current else {"rerun": worldline_command("clean", corpus.root)})},
    )


def duplicates_one_representative(corpus: Corpus) -> ContractResult:
    """Each duplicate cluster has at least two members and exactly one representative (the one
    every member names), and no trajectory is in two clusters."""
    if side_info(corpus, "duplicates") is None:
        return _missing("duplicates_one_representative", "duplicates", "dedup")
    con = connect(corpus.root)
    bad = con.sql("""
        SELECT cluster_id, count(*) AS members, count(*) FILTER (WHERE is_representative) AS reps,
               count(DISTINCT representative_id) AS named,
               bool_or(is_representative AND representative_id <> trajectory_id) AS self_mismatch
        FROM duplicates GROUP BY 1
        HAVING members < 2 OR reps <> 1 OR named <> 1 OR self_mismatch OR any_value(cluster_size) <> members
        ORDER BY 1 LIMIT 20""").fetchall()
    twice = con.sql("SELECT count(*) FROM (SELECT trajectory_id FROM duplicates GROUP BY 1 HAVING count(*) > 1)").fetchall()[0][0]
    clusters = con.sql("SELECT count(DISTINCT cluster_id) FROM duplicates").fetchall()[0][0]
    return ContractResult(
        "duplicates_one_representative", not bad and not twice,
        "every cluster: ≥2 members, exactly one representative; no trajectory in two clusters",
        {"clusters": clusters, "bad_clusters": [r[0] for r in bad], "in_two_clusters": twice},
    )


def dedup_current(corpus: Corpus) -> ContractResult:
    """The dedup tables were computed from the current corpus and the current cleaning verdicts."""
    sig = side_info(corpus, "dedup_signatures")
    dup = side_info(corpus, "duplicates")
    if sig is None or dup is None:
        return _missing("dedup_current", "duplicates", "dedup")
    state = corpus_state(corpus)
    clean = side_info(corpus, "cleaning")
    want_clean = verdicts_identity(clean) if sig.get("config", {}).get("use_cleaning") else None
    used_clean = sig.get("config", {}).get("cleaning_fingerprint")
    ok = sig.get("corpus_state") == state and dup.get("corpus_state") == state and used_clean == want_clean
    return ContractResult(
        "dedup_current", ok, "signatures and clusters cover the current corpus and cleaning verdicts",
        {"corpus_batches": state["batches"], "signatures_batches": sig.get("corpus_state", {}).get("batches"),
         "cleaning_fingerprint": want_clean, "used_cleaning_fingerprint": used_clean,
         **({} if ok else {"rerun": worldline_command("dedup", corpus.root)})},
    )


def shared_prefixes_counted_once(corpus: Corpus) -> ContractResult:
    """Each shared prefix is counted for training by exactly one kept trajectory."""
    if side_info(corpus, "shared_prefixes") is None:
        return _missing("shared_prefixes_counted_once", "shared_prefixes", "dedup")
    con = connect(corpus.root)
    bad = con.sql("""SELECT prefix_hash FROM shared_prefixes GROUP BY 1
                     HAVING count(*) FILTER (WHERE counts_for_training) <> 1 OR count(*) <> any_value(share_count) LIMIT 20""").fetchall()
    n = con.sql("SELECT count(DISTINCT prefix_hash) FROM shared_prefixes").fetchall()[0][0]
    return ContractResult("shared_prefixes_counted_once", not bad, "exactly one owner per shared prefix",
                          {"prefixes": n, "bad_prefixes": [str(r[0]) for r in bad]})


CLEAN_CONTRACTS = {"cleaning_every_trajectory_judged": cleaning_every_trajectory_judged}
DEDUP_CONTRACTS = {
    "duplicates_one_representative": duplicates_one_representative,
    "dedup_current": dedup_current,
    "shared_prefixes_counted_once": shared_prefixes_counted_once,
}


def run_clean_contracts(corpus_dir: Path | str, which: dict | None = None) -> list[ContractResult]:
    return run_named(which or {**CLEAN_CONTRACTS, **DEDUP_CONTRACTS}, Corpus(corpus_dir))
