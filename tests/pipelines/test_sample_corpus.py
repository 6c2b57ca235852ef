"""The whole bundled sample, ingested at once: every file lands with the right importer and
domain, and only the agentapi screen fixtures (not trajectories) are quarantined.

The expected numbers were counted from the raw files independently of the importers (jq/grep;
see each importer's test for how): e.g. InterCode 60+60+4 records with 401+290+35 turns,
tau-bench 15+5+11+30+12+12+11+12 tool/user turns, FireAct 500 lines / 1385 actions and 465 keys /
1241 actions, BrowserGym 4+3+5 actions, DroidBot 41 event files, claude.cast one Enter.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.contracts import run_contracts
from pipelines.ingest import ingest
from pipelines.query import run_query

EXPECTED = [
    ("agentapi-terminal", "terminal", "asciicast", 1, 1),
    ("browsergym-workarena", "web", "browsergym", 3, 12),
    ("droidbot", "android", "droidbot", 1, 41),
    ("fireact", "search", "fireact-chat", 500, 1385),
    ("fireact", "search", "fireact-trajs", 465, 1241),
    ("intercode", "terminal", "intercode", 124, 726),
    ("openhands", "swe", "openhands-events", 3, 12),
    ("openhands", "swe", "openhands-output", 3, 110),
    ("swe-agent", "swe", "swe-agent", 4, 39),
    ("swe-agent", "terminal", "swe-agent", 2, 28),
    ("tau-bench", "mcp", "tau-bench", 8, 108),
]


def test_whole_sample_corpus(tmp_path: Path, sample: Path) -> None:
    out = tmp_path / "corpus"
    s = ingest([sample], out, progress=False)
    assert (s.inputs, s.skipped_inputs) == (31, 1)  # the two agentapi user.txt files are identical
    assert s.reconciles and s.quarantined == 9 and s.reasons == {"unknown_format": 9}
    rows = run_query(out, """
        SELECT regexp_extract(source, 'corpus/([^/]+)', 1), domain, source_format, count(*), sum(num_turns)::INT
        FROM trajectories GROUP BY ALL ORDER BY ALL""")[1]
    assert rows == EXPECTED
    quarantined = run_query(out, "SELECT source FROM quarantine")[1]
    assert all("/agentapi-terminal/" in q[0] and q[0].endswith(".txt") for q in quarantined)
    failed = [r.line() for r in run_contracts(out) if not r.passed]
    assert failed == []
    # every turn's trajectory exists, and turn indexes are dense 0..n-1
    assert run_query(out, """SELECT count(*) FROM trajectories t
                             WHERE num_turns <> (SELECT count(*) FROM turns u WHERE u.trajectory_id = t.trajectory_id)
                                OR num_turns > 0 AND num_turns - 1 <> (SELECT max(turn_index) FROM turns u
                                                                        WHERE u.trajectory_id = t.trajectory_id)""")[1] == [(0,)]
