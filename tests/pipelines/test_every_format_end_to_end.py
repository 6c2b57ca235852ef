"""Every fixture format through every CPU stage: ingest, clean, dedup, surface scoring and export.

The importer tests check each format's rows; this checks that the rows of every format (including
the odd ones: trajectories without turns, tool use inside user replies, asciicast screens) flow
through the later stages, and that what export leaves out is accounted for.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.clean import clean
from pipelines.dedup import dedup
from pipelines.export import export
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import connect
from pipelines.score import ScoreConfig, score
from tests.pipelines.export_support import small_config, tokenizer

ROOT = Path(__file__).resolve().parents[2]


def test_every_fixture_format_reaches_the_export(tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    s = ingest([ROOT / "tests" / "data"], corpus, IngestConfig(workers=1), progress=False)
    assert s.records == s.trajectories + s.quarantined and s.trajectories > 0
    ingested = {r[0] for r in connect(corpus).sql("SELECT DISTINCT source_format FROM trajectories").fetchall()}
    clean(corpus, progress=False, echo=lambda m: None)
    dedup(corpus, progress=False)
    score(corpus, ScoreConfig(tier="surface"), progress=False)
    out = tmp_path / "export"
    summary = export(corpus, out, small_config(seq_len=1024), progress=False, echo=lambda m: None, tokenizer=tokenizer())
    con = connect(corpus)
    # formats whose kept trajectories have at least one kept environment turn with loss: each must
    # reach some split of the export
    trainable = {r[0] for r in con.sql(
        "SELECT DISTINCT t.source_format FROM kept_trajectories t JOIN kept_turns k USING (trajectory_id) "
        "JOIN turn_scores s USING (trajectory_id, turn_index) "
        "WHERE k.kind = 'env' AND k.counts_for_training AND s.loss_mask").fetchall()}
    exported = {f for split in summary.mix.values() for f in split.get("source_format", {})}
    assert trainable - exported == set()
    # fixed, not derived from the stages' own output (a stage dropping a whole format would drop it from
    # `trainable` too): every format ingested reaches the export but a uiautomator dump, one screen and no turn
    assert exported == {"agentworldbench", "android-control", "asciicast", "atif", "browsergym", "chat", "droidbot",
                        "fireact-chat", "fireact-trajs", "intercode", "mcp-traffic", "mini-swe-agent", "openhands-events",
                        "openhands-output", "swe-agent", "tau-bench", "tau2-bench"}
    assert ingested - exported == {"uiautomator"}
    # every kept trajectory is in exactly one split, or counted as having no environment turn
    kept = con.sql("SELECT count(*) FROM kept_trajectories").fetchall()[0][0]
    assert sum(st.trajectories for st in summary.splits.values()) + summary.no_env_turns == kept
