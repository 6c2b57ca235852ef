"""Running a set of contracts: one that cannot run fails with the reason; the rest still run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.contracts import ContractResult, run_named
from pipelines.store import CorpusError


def test_a_contract_that_raises_fails_and_the_others_run() -> None:
    def ok(arg: int) -> ContractResult:
        return ContractResult("ok", arg == 3, "three")

    def broken(arg: int) -> ContractResult:
        raise KeyError("no such view")

    out = run_named({"first": ok, "broken": broken, "last": ok}, 3)
    assert [(r.name, r.passed, r.metadata) for r in out] == [
        ("ok", True, {}), ("broken", False, {"error": "KeyError: 'no such view'"}), ("ok", True, {})]


def test_a_failed_warning_reads_warn_and_a_broken_check_gives_its_docstring() -> None:
    def broken(arg: int) -> ContractResult:
        """Every row has a score."""
        raise ValueError("x")

    assert [r.description for r in run_named({"b": broken}, 0)] == ["Every row has a score."]
    # a contract given its bound (`run_contracts`' quarantine rates) still gives its own docstring
    import functools

    assert [r.description for r in run_named({"b": functools.partial(broken)}, 0)] == ["Every row has a score."]
    assert ContractResult("late", False, "computed now", {"batches": 2}, severity="warn").line() == \
        "WARN  late: computed now (batches=2)"
    assert ContractResult("bad", False, "valid").line() == "FAIL  bad: valid"


def test_the_quarantine_rate_threshold_is_passed_through(sample: Path, tmp_path: Path) -> None:
    from pipelines.contracts import run_contracts
    from pipelines.ingest import IngestConfig, ingest

    ingest([sample], tmp_path / "c", IngestConfig(workers=1), progress=False)  # 9 of 1,123 records quarantined
    by_name = {r.name: r for r in run_contracts(tmp_path / "c")}
    assert by_name["quarantine_rate"].passed
    strict = {r.name: r for r in run_contracts(tmp_path / "c", max_quarantine_rate=0.0)}
    assert not strict["quarantine_rate"].passed and strict["quarantine_rate"].metadata["quarantined"] == 9
    fine = {r.name: r for r in run_contracts(tmp_path / "c", max_quarantine_rate=0.001)}
    assert fine["quarantine_rate"].description == "quarantined / records in ≤ 0.1%"  # not rounded to 0%
    assert fine["latest_batch_quarantine_rate"].description == "the newest ingest quarantined ≤ 0.1% of its records"


def test_only_the_contracts_asked_for_run(sample: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Dagster run of one check runs that contract alone: manifest_checksums hashes every file."""
    from pipelines import contracts
    from pipelines.ingest import IngestConfig, ingest

    ingest([sample / "tau-bench"], tmp_path / "c", IngestConfig(workers=1), progress=False)
    ran: list[str] = []
    for name, fn in list(contracts.CONTRACTS.items()):
        monkeypatch.setitem(contracts.CONTRACTS, name, lambda c, _f=fn, _n=name, **kw: ran.append(_n) or _f(c, **kw))
    out = contracts.run_contracts(tmp_path / "c", 0.5, names=["latest_batch_quarantine_rate", "unique_trajectory_id"])
    assert [r.name for r in out] == ran == ["latest_batch_quarantine_rate", "unique_trajectory_id"]
    assert out[0].metadata["max_rate"] == 0.5 and all(r.passed for r in out)


def test_a_mostly_broken_drop_fails_however_large_the_corpus(sample: Path, tmp_path: Path) -> None:
    """The corpus-wide rate hides a new batch of broken files; the newest ingest's own rate does not."""
    from pipelines.contracts import run_contracts
    from pipelines.ingest import IngestConfig, ingest

    ingest([sample], tmp_path / "c", IngestConfig(workers=1), progress=False)  # 9 of 1,123 records quarantined
    first = {r.name: r for r in run_contracts(tmp_path / "c")}["latest_batch_quarantine_rate"]
    assert first.passed and (first.metadata["records_in"], first.metadata["quarantined"]) == (1123, 9)
    drop = tmp_path / "drop"
    drop.mkdir()
    (drop / "a.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"\n')
    (drop / "b.json").write_text('{"truncated": ')
    (drop / "c.jsonl").write_text('{"messages": [{"role": "user", "content": "ls"}, {"role": "assistant", "content": "done"}]}\n')
    ingest([drop], tmp_path / "c", IngestConfig(workers=1), progress=False)
    by_name = {r.name: r for r in run_contracts(tmp_path / "c")}
    assert by_name["quarantine_rate"].passed  # 11 of 1,126
    r = by_name["latest_batch_quarantine_rate"]
    assert not r.passed
    md = r.metadata
    assert (md["records_in"], md["quarantined"], md["rate"]) == (3, 2, 0.6667)
    assert sorted(md["inputs"]) == [f"{drop / 'a.jsonl'}: 1", f"{drop / 'b.json'}: 1"]
    assert sum(md["reasons"].values()) == 2


def test_a_path_that_is_not_a_corpus_is_one_error_not_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines.cli import main
    from pipelines.contracts import run_contracts

    missing = tmp_path / "nonexistent"
    with pytest.raises(CorpusError) as e:
        run_contracts(missing)
    assert str(e.value) == f"{missing} is not a corpus (no manifest.json); create one with `worldline ingest`"
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="is not a corpus"):
        run_contracts(tmp_path / "empty")
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "manifest.json").write_bytes(b'{"format": "worldline-export", "splits": {}}')  # not a corpus's
    with pytest.raises(CorpusError) as e:
        run_contracts(tmp_path / "export")
    assert str(e.value) == f"{tmp_path / 'export' / 'manifest.json'}: not a Worldline corpus manifest (format 'worldline-export')"
    assert main(["check", str(missing)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"worldline check: error: {missing} is not a corpus (no manifest.json); create one with `worldline ingest`\n"
    assert not missing.exists()


@pytest.mark.parametrize("rate", [-1.0, 5.0, 1.01, float("nan")])
def test_the_quarantine_rate_bound_must_be_a_share(rate: float, tmp_path: Path) -> None:
    from pipelines.contracts import run_contracts

    with pytest.raises(ValueError) as e:
        run_contracts(tmp_path / "nonexistent", max_quarantine_rate=rate)  # checked before the corpus
    assert str(e.value) == f"--max-quarantine-rate must be in [0, 1] (got {rate})"


def test_collection_contracts_name_their_formats() -> None:
    """`worldline check` finds each collector's data by the source format its collector writes."""
    from collectors.android.collect import SOURCE_FORMAT as ANDROID
    from collectors.browser.collect import SOURCE_FORMAT as BROWSER
    from collectors.mcp.recorder import SOURCE_FORMAT as MCP
    from pipelines.contracts import COLLECTION_CONTRACTS
    from sandboxes.collect import SOURCE_FORMAT as SANDBOX

    assert list(COLLECTION_CONTRACTS) == [MCP, SANDBOX, BROWSER, ANDROID]


def test_collection_contracts_on_unreadable_trajectories(tmp_path: Path, sample: Path) -> None:
    from pipelines.cli import main
    from pipelines.contracts import run_collection_contracts

    corpus = tmp_path / "c"
    assert main(["ingest", str(sample / "swe-agent"), "--out", str(corpus)]) == 0
    assert run_collection_contracts(corpus) == []  # no collector's data
    for f in (corpus / "trajectories").rglob("*.parquet"):
        f.write_bytes(b"not parquet")
    (r,) = run_collection_contracts(corpus)
    assert (r.name, r.passed) == ("collection_contracts", False)
    assert r.metadata["error"].startswith("InvalidInputException: ") and "too small to be a Parquet file" in r.metadata["error"]


def test_a_side_table_recorded_but_missing_fails_schema_valid(sample: Path, tmp_path: Path) -> None:
    """Its folder deleted, the views read the corpus as if dedup never ran (kept_* keep the duplicates):
    every check passed."""
    import shutil

    from pipelines.contracts import run_contracts
    from pipelines.dedup import dedup
    from pipelines.ingest import IngestConfig, ingest

    corpus = tmp_path / "c"
    ingest([sample / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    dedup(corpus, progress=False)
    assert all(r.passed for r in run_contracts(corpus))
    shutil.rmtree(corpus / "side" / "duplicates")
    [schema] = [r for r in run_contracts(corpus) if r.name == "schema_valid"]
    assert not schema.passed and schema.metadata["bad_files"] == [
        "side/duplicates/data.parquet: side table duplicates is recorded but missing; rerun `worldline dedup`"]


def test_check_runs_the_contracts_of_the_stages_that_ran(sample: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines.clean import clean
    from pipelines.cli import main
    from pipelines.ingest import IngestConfig, ingest

    corpus = tmp_path / "c"
    ingest([sample / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    assert main(["check", str(corpus)]) == 0
    assert "cleaning_every_trajectory_judged" not in capsys.readouterr().out  # clean has not run
    clean(corpus, progress=False)
    assert main(["check", str(corpus)]) == 0
    assert "PASS  cleaning_every_trajectory_judged" in capsys.readouterr().out
    ingest([sample / "tau-bench"], corpus, IngestConfig(workers=1), progress=False)  # the verdicts are now stale
    assert main(["check", str(corpus)]) == 1
    assert "FAIL  cleaning_every_trajectory_judged" in capsys.readouterr().out


def test_a_stale_score_warns_and_a_warning_does_not_fail_check(sample: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """Turns ingested after `score` have no rows yet (export trains them unscored): check exited 1
    on the cover check, and on any warning, where the docs say a stale score only warns."""
    from pipelines.cli import main
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score import ScoreConfig, score

    corpus = tmp_path / "c"
    ingest([sample / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    score(corpus, ScoreConfig(tier="surface"), progress=False)
    assert main(["check", str(corpus)]) == 0
    assert "PASS  turn_scores_cover_turns" in capsys.readouterr().out
    ingest([sample / "tau-bench"], corpus, IngestConfig(workers=1), progress=False)
    assert main(["check", str(corpus)]) == 0
    out = capsys.readouterr().out
    assert "WARN  turn_scores_cover_turns: exactly one turn_scores row per turn (turns added since score ran have none yet)" in out
    assert "WARN  turn_scores_current" in out and "FAIL" not in out
    # a row lost with the corpus unchanged is broken, not stale
    score(corpus, ScoreConfig(tier="surface"), progress=False)
    import pyarrow.parquet as pq

    p = corpus / "side" / "turn_scores" / "data.parquet"
    pq.write_table(pq.read_table(p).slice(1), p)
    assert main(["check", str(corpus)]) == 1
    assert "FAIL  turn_scores_cover_turns" in capsys.readouterr().out


def test_a_damaged_turn_scores_fails_its_contracts_and_the_report_section_only(sample: Path, tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """check stopped at the first unreadable turn_scores ("worldline check: error: ...", pointing back at
    check), and no other contract ran; the report wrote no page at all."""
    from pipelines.clean import clean
    from pipelines.cli import main
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.report import write_report
    from pipelines.score import ScoreConfig, score

    corpus = tmp_path / "c"
    ingest([sample / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    clean(corpus, progress=False)
    score(corpus, ScoreConfig(tier="surface"), progress=False)
    f = corpus / "side" / "turn_scores" / "data.parquet"
    f.write_bytes(f.read_bytes()[:1000])
    assert main(["check", str(corpus)]) == 1
    out = capsys.readouterr().out
    assert "PASS  cleaning_every_trajectory_judged" in out  # the stages before it still judged
    for name in ("turn_scores_cover_turns", "turn_scores_valid", "turn_scores_current"):
        assert f"FAIL  {name}: turn_scores could not be read" in out
    page = write_report(corpus, tmp_path / "r.html").read_text()
    assert "<h2>Scores</h2><p class=note>not shown: " in page and "side table turn_scores cannot be read" in page
    assert "Exit codes" in page  # the other sections are there


def test_schema_valid_counts_unknown_values_and_orphan_turns(sample: Path, tmp_path: Path) -> None:
    """A trajectory's row gone (its turns orphaned), a domain and a turn kind no stage knows: each counted."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.contracts import schema_valid
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.store import Corpus

    corpus = tmp_path / "c"
    ingest([sample / "tau-bench"], corpus, IngestConfig(workers=1), progress=False)
    assert schema_valid(Corpus(corpus)).passed
    [tf] = sorted((corpus / "trajectories").rglob("*.parquet"))
    [uf] = sorted((corpus / "turns").rglob("*.parquet"))
    trajs, turns = pq.read_table(tf), pq.read_table(uf)
    gone = trajs.column("trajectory_id")[0].as_py()
    orphans = pc.sum(pc.equal(turns.column("trajectory_id"), gone)).as_py()  # that trajectory's turns, counted in the file
    assert orphans == trajs.column("num_turns")[0].as_py() > 0
    trajs = trajs.slice(1)
    domains = trajs.column("domain").to_pylist()
    trajs = trajs.set_column(trajs.schema.get_field_index("domain"), trajs.schema.field("domain"),
                             pa.array(["moon", *domains[1:]], pa.string()))
    kinds = turns.column("kind").to_pylist()
    turns = turns.set_column(turns.schema.get_field_index("kind"), turns.schema.field("kind"),
                             pa.array([*kinds[:-1], "bogus"], pa.string()))
    pq.write_table(trajs, tf)
    pq.write_table(turns, uf)
    result = schema_valid(Corpus(corpus))
    assert not result.passed and result.metadata["bad_files"] == []
    assert result.metadata["bad_values"] == {"trajectories.domain": 1, "turns.kind": 1, "turns.orphans": orphans}
