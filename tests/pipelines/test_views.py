"""The derived views `kept_turns` / `kept_trajectories`, whatever order the stages ran in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.clean import clean
from pipelines.clean_contracts import run_clean_contracts
from pipelines.dedup import dedup
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import connect, run_query
from pipelines.side import stale_side_tables
from pipelines.store import Corpus


def _call(cid: str, cmd: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}


@pytest.fixture
def clusters(tmp_path: Path) -> Path:
    """5 clusters of 3 near-duplicates; the member dedup ranks first (most turns) ends with a sandbox
    crash, which cleaning drops."""
    lines = []
    for c in range(5):
        steps = [(f"make test{c} part {k}", f"cluster {c} step {k}: " + " ".join(f"w{c}_{k}_{j}" for j in range(40)))
                 for k in range(8)]
        for variant in range(3):
            st = steps + ([("make install", "Error response from daemon: Container 3f2a9b1c4d5e is not running")]
                          if variant == 0 else [])
            msgs = [{"role": "user", "content": f"build project {c}"}]
            for k, (cmd, out) in enumerate(st):
                msgs.append({"role": "assistant", "content": "", "tool_calls": [_call(f"c{k}", cmd)]})
                msgs.append({"role": "tool", "tool_call_id": f"c{k}", "content": out + ("" if variant < 2 else " (rerun)")})
            lines.append(json.dumps({"messages": msgs}))
    (tmp_path / "order.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path / "order.jsonl"


@pytest.mark.parametrize("order", [("clean", "dedup"), ("dedup", "clean")])
def test_no_cluster_is_lost_whatever_the_order(clusters: Path, tmp_path: Path, order: tuple[str, str]) -> None:
    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    for stage in order:
        (clean if stage == "clean" else dedup)(root, progress=False)
    dropped = run_query(root, "SELECT count(*) FROM cleaning WHERE turn_index IS NULL AND reason = 'env_sandbox_crash'")[1][0][0]
    kept = run_query(root, "SELECT count(*) FROM kept_trajectories")[1][0][0]
    stale = stale_side_tables(Corpus(root))
    if order == ("clean", "dedup"):
        # the crashed members are dropped first; each cluster of the other two keeps one
        assert (dropped, kept, stale) == (5, 5, {})
    else:
        # dedup chose the crashed member, which cleaning then drops: one survivor stands for each cluster
        # (none is lost, none kept twice), and dedup is reported stale until it runs again
        assert (dropped, kept) == (5, 5)
        assert stale == {name: "computed against other cleaning verdicts than the current ones; rerun `worldline dedup`"
                         for name in ("duplicates", "shared_prefixes")}
        dedup(root, progress=False)
        assert run_query(root, "SELECT count(*) FROM kept_trajectories")[1][0][0] == 5
        assert stale_side_tables(Corpus(root)) == {}


def test_tables_from_before_an_ingest_are_stale(clusters: Path, tmp_path: Path, sample: Path) -> None:
    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    clean(root, progress=False)
    dedup(root, progress=False)
    ingest([sample / "tau-bench"], root, progress=False)
    assert stale_side_tables(Corpus(root)) == {
        name: f"computed before the corpus last changed; rerun `worldline {stage}`"
        for name, stage in (("cleaning", "clean"), ("redactions", "clean"), ("duplicates", "dedup"), ("shared_prefixes", "dedup"))}
    failed = {r.name: r.metadata.get("rerun") for r in run_clean_contracts(root) if not r.passed}  # and the fix
    assert failed == {"cleaning_every_trajectory_judged": f"worldline clean {root}", "dedup_current": f"worldline dedup {root}"}


def test_a_clean_rerun_that_drops_the_same_leaves_dedup_current(clusters: Path, tmp_path: Path) -> None:
    """Another redaction option changes no verdict: dedup was reported stale (check failed, and the
    next dedup recomputed every signature); verdicts that do change still make it stale."""
    from pipelines.clean import CleanConfig
    from pipelines.redact import RedactConfig

    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    clean(root, progress=False)
    dedup(root, progress=False)
    clean(root, CleanConfig(redact=RedactConfig(ip_addresses=True)), progress=False)
    assert stale_side_tables(Corpus(root)) == {}
    assert all(r.passed for r in run_clean_contracts(root))
    clean(root, CleanConfig(min_turns=99), progress=False)  # drops every trajectory
    assert stale_side_tables(Corpus(root)) == {
        name: "computed against other cleaning verdicts than the current ones; rerun `worldline dedup`"
        for name in ("duplicates", "shared_prefixes")}


def test_dedup_between_an_ingest_and_clean_is_stale_until_it_runs_again(clusters: Path, tmp_path: Path, sample: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Cleaning rerun with the same settings on a grown corpus gives other verdicts: the dedup that used the old
    ones is stale, and its next run computes again instead of reusing signatures filtered by them."""
    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    clean(root, progress=False)
    dedup(root, progress=False)
    ingest([sample / "tau-bench"], root, progress=False)
    dedup(root, progress=False)  # on the grown corpus, with the verdicts of the smaller one
    assert "dedup: side table cleaning is stale: computed before the corpus last changed" in capsys.readouterr().err
    clean(root, progress=False)
    assert stale_side_tables(Corpus(root)) == {
        name: "computed against other cleaning verdicts than the current ones; rerun `worldline dedup`"
        for name in ("duplicates", "shared_prefixes")}
    again = dedup(root, progress=False)
    assert not again.signatures_reused and stale_side_tables(Corpus(root)) == {}
    fresh = tmp_path / "fresh"  # the same inputs in one go
    ingest([clusters], fresh, IngestConfig(domain_override="terminal"), progress=False)
    ingest([sample / "tau-bench"], fresh, progress=False)
    clean(fresh, progress=False)
    once = dedup(fresh, progress=False)
    assert (again.considered, again.kept, again.clusters) == (once.considered, once.kept, once.clusters)


def test_a_stage_after_a_crashed_commit_judges_only_committed_batches(clusters: Path, tmp_path: Path, sample: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest killed while moving its files into place leaves a batch `committing`: the next stage reads the
    batches before it (not trajectories without their turns), and its table is stale once the batch is finished."""
    import os

    from pipelines import store

    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    real = os.replace

    def killed(src, dst):  # noqa: ANN001, ANN202
        if "/.staging-" in str(src) and "/turns/" in str(dst):
            raise KeyboardInterrupt
        real(src, dst)

    monkeypatch.setattr(store.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        ingest([sample / "tau-bench"], root, progress=False)
    monkeypatch.undo()
    s = clean(root, progress=False)  # saving its tables finishes the crashed batch (under the lock)
    assert (s.trajectories, s.kept_trajectories) == (15, 10)  # the 15 committed ones; the 5 crashed members dropped
    assert stale_side_tables(Corpus(root)) == {
        name: "computed before the corpus last changed; rerun `worldline clean`" for name in ("cleaning", "redactions")}
    again = clean(root, progress=False)
    assert again.trajectories > 15 and stale_side_tables(Corpus(root)) == {}


def test_dedup_ignoring_cleaning_keeps_one_member_per_cluster(clusters: Path, tmp_path: Path) -> None:
    from pipelines.dedup import DedupConfig

    root = tmp_path / "corpus"
    ingest([clusters], root, IngestConfig(domain_override="terminal"), progress=False)
    clean(root, progress=False)
    dedup(root, DedupConfig(use_cleaning=False), progress=False)  # chooses the crashed members again
    assert run_query(root, "SELECT count(*) FROM duplicates WHERE is_representative AND trajectory_id IN "
                           "(SELECT trajectory_id FROM cleaning WHERE turn_index IS NULL)")[1] == [(5,)]
    assert run_query(root, "SELECT count(*) FROM kept_trajectories")[1] == [(5,)]
    assert stale_side_tables(Corpus(root)) == {}  # as asked: not stale, and nothing lost or doubled


def test_kept_views_exist_before_any_stage(tmp_path: Path, sample: Path) -> None:
    """A query written against kept_turns runs on a corpus just ingested: everything is kept."""
    ingest([sample / "tau-bench"], tmp_path / "c", progress=False)
    con = connect(tmp_path / "c")
    assert con.sql("SELECT count(*), count(*) FILTER (WHERE counts_for_training) FROM kept_turns").fetchall() == \
        con.sql("SELECT count(*), count(*) FROM turns").fetchall()
    assert con.sql("SELECT count(*) FROM kept_trajectories").fetchall() == \
        con.sql("SELECT count(*) FROM trajectories WHERE num_turns > 0").fetchall()


def test_a_trajectory_without_turns_is_kept_until_a_stage_drops_it(tmp_path: Path) -> None:
    """Before any stage ran every trajectory is kept, one with no turns too (the view required a kept
    turn); cleaning's too_few_turns drops it, and with --min-turns 0 it stays."""
    from pipelines.clean import CleanConfig

    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    f = tmp_path / "chat.jsonl"
    f.write_text("\n".join(json.dumps(x) for x in [
        {"messages": [{"role": "user", "content": "only a task"}]},
        {"messages": [{"role": "user", "content": "list"}, call, {"role": "tool", "tool_call_id": "c1", "content": "a"},
                      call, {"role": "tool", "tool_call_id": "c1", "content": "b"}]}]) + "\n")
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)

    def kept() -> list[tuple]:
        return run_query(corpus, "SELECT num_turns FROM kept_trajectories ORDER BY 1")[1]

    assert kept() == [(0,), (2,)]
    clean(corpus, CleanConfig(min_turns=0), progress=False)
    assert kept() == [(0,), (2,)]
    clean(corpus, progress=False)  # --min-turns 2
    assert kept() == [(2,)]
