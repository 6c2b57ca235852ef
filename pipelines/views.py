"""Views derived from the stages' side tables; `pipelines.query.connect` defines them.

- `kept_turns`: the rows of `turns` that survive cleaning and dedup — minus trajectories that
  `cleaning` drops whole, minus turns it drops (`retry_cycle`, `gui_no_change`), minus trajectories
  that `duplicates` marks as non-representative (when cleaning drops a cluster's representative,
  as after dedup run before clean, the first member cleaning keeps stands for the cluster: no
  cluster is lost, none is kept twice) — with one more column, `counts_for_training`:
  false for a turn of a shared prefix that another kept trajectory is trained on
  (`shared_prefixes`), true otherwise. Context turns are kept; only the loss counts once.
- `kept_trajectories`: the rows of `trajectories` that keep at least one turn by the same rules, and
  those with no turn at all that no stage dropped whole (cleaning's `too_few_turns` does, by default).

Each part applies only when its side table exists, so the views are useful after `clean` alone; before
any of them ran, every turn and trajectory is kept (the views exist from the first ingest, so a query
written against them runs at every stage of a corpus).
"""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

WHOLE_DROPS = "SELECT DISTINCT trajectory_id FROM cleaning WHERE turn_index IS NULL"  # trajectories cleaning drops


def duplicates_left_out(side_tables: Iterable[str]) -> str:
    """SQL for the trajectory ids `kept_turns` leaves out as duplicates: the members `duplicates` does
    not mark representative, or, with `cleaning`, all but one member per cluster that cleaning keeps
    (dedup's representative unless cleaning drops it, as after dedup run before clean or with
    --ignore-cleaning: then the first member it keeps, by trajectory id)."""
    if "cleaning" not in set(side_tables):
        return "SELECT trajectory_id FROM duplicates WHERE NOT is_representative"
    return """SELECT trajectory_id FROM (
                SELECT trajectory_id, row_number() OVER (PARTITION BY cluster_id ORDER BY is_representative DESC,
                                                         trajectory_id) AS k
                FROM duplicates ANTI JOIN (""" + WHOLE_DROPS + """) cw USING (trajectory_id)) WHERE k > 1"""


def define_derived_views(con: duckdb.DuckDBPyConnection, side_tables: Iterable[str]) -> None:
    have = set(side_tables)
    joins, traj_joins = [], []
    if "cleaning" in have:
        whole = f"({WHOLE_DROPS})"
        joins.append(f"ANTI JOIN {whole} cw USING (trajectory_id)")
        joins.append("ANTI JOIN (SELECT DISTINCT trajectory_id, turn_index FROM cleaning WHERE turn_index IS NOT NULL) ct "
                     "USING (trajectory_id, turn_index)")
        traj_joins.append(f"ANTI JOIN {whole} cw USING (trajectory_id)")
    if "duplicates" in have:
        nonrep = f"({duplicates_left_out(have)})"
        joins.append(f"ANTI JOIN {nonrep} dd USING (trajectory_id)")
        traj_joins.append(f"ANTI JOIN {nonrep} dd USING (trajectory_id)")
    counts = "true"
    if "shared_prefixes" in have:
        # a prefix counts once, in its owner; when cleaning or dedup leave the owner out (dedup ran
        # with --ignore-cleaning, or before clean), in the first sharer they keep instead: the
        # recorded owner first, then by trajectory_id
        owners = (f"(SELECT trajectory_id, turn_index, row_number() OVER (PARTITION BY prefix_hash ORDER BY counts_for_training "
                  f"DESC, trajectory_id) = 1 AS counts_for_training FROM shared_prefixes {' '.join(traj_joins)})")
        joins.append(f"LEFT JOIN {owners} sp USING (trajectory_id, turn_index)")
        counts = "coalesce(sp.counts_for_training, true)"
    con.execute(f"CREATE OR REPLACE VIEW kept_turns AS SELECT u.*, {counts} AS counts_for_training FROM turns u {' '.join(joins)}")
    # a trajectory with turns is kept while one of them is; one with none was never judged by turns (cleaning's
    # too_few_turns drops it, when asked to): kept until a stage drops it, as the views promise
    con.execute(f"CREATE OR REPLACE VIEW kept_trajectories AS SELECT t.* FROM trajectories t {' '.join(traj_joins)} "
                "WHERE t.num_turns = 0 OR t.trajectory_id IN (SELECT trajectory_id FROM kept_turns)")
