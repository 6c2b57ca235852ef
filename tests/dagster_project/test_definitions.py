"""Dagster: definitions load, a partition materializes in-process, checks run, the sensor fires."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.assets import corpus_report, ingested_traces
from dagster_project.checks import corpus_contracts
from dagster_project.definitions import defs
from dagster_project.partitions import SOURCES, key
from dagster_project.resources import CorpusResource, DuckDBResource
from dagster_project.sensors import inbox_requests
from pipelines.contracts import run_contracts
from pipelines.inbox import FIRST_DAY, scan
from pipelines.ingest import ingest
from pipelines.query import connect
from tests.support.permissions import without_root_powers

DAY = "2026-11-01"
TESTS = Path(__file__).resolve().parent.parent
EPOCH = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()


def _drop(inbox: Path, source: str, files: list[Path], mtime: float = EPOCH) -> list[Path]:
    d = inbox / source
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        dst = d / f.name
        shutil.copy(f, dst)
        os.utime(dst, (mtime, mtime))
        out.append(dst)
    return out


@pytest.fixture
def setup(tmp_path: Path, sample: Path):
    inbox = tmp_path / "inbox"
    _drop(inbox, "swe", sorted((sample / "swe-agent").glob("*.traj")))
    _drop(inbox, "swe", [sample / "agentapi-terminal" / "claude.txt"])  # not a trajectory: quarantined
    _drop(inbox, "swe", [sample / "swe-agent" / "pydicom__pydicom-1458.traj"], mtime=EPOCH + 86400)  # next day
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["swe"])
    return corpus, instance


def test_definitions_load() -> None:
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "ingested_traces", "corpus_report", "mcp_trajectories", "sandbox_trajectories", "browser_trajectories",
        "android_trajectories", "cleaning_verdicts", "dedup_clusters", "turn_scores", "training_export", "thinking_traces"}
    assert defs.resolve_job_def("ingest_job") is not None
    parents = {k.to_user_string(): {p.to_user_string() for p in graph.get(k).parent_keys} for k in graph.get_all_asset_keys()}
    # the order the CLI stages have in `make demo`: what cleaning and dedup drop is not model-scored,
    # export and traces read the kept turns and the loss masks
    assert parents["cleaning_verdicts"] == {"ingested_traces", "mcp_trajectories", "sandbox_trajectories",
                                           "browser_trajectories"}
    # no device is the usual case: a failed android_trajectories must not hold the rest of a full run back
    assert "android_trajectories" not in {p for ps in parents.values() for p in ps}
    assert parents["dedup_clusters"] == {"cleaning_verdicts"}
    assert parents["turn_scores"] == {"dedup_clusters"}
    assert parents["training_export"] == {"dedup_clusters", "turn_scores"}
    assert parents["thinking_traces"] == {"turn_scores", "training_export"}  # the split is the export's
    # ... and it needs an LLM endpoint: without one, a full run still writes the report
    assert parents["corpus_report"] == {"ingested_traces", "mcp_trajectories", "sandbox_trajectories",
                                        "browser_trajectories", "dedup_clusters", "turn_scores", "training_export"}
    assert {c.name for c in corpus_contracts.check_specs} == {
        "schema_valid", "counts_reconcile", "quarantine_rate", "latest_batch_quarantine_rate", "unique_trajectory_id",
        "manifest_checksums"}
    assert ingested_traces.op.retry_policy is not None and corpus_report.op.retry_policy is None


def test_partition_materializes_with_checks_and_metadata(setup) -> None:
    corpus, instance = setup
    res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key("swe", DAY),
                         resources={"corpus": corpus}, instance=instance)
    assert res.success
    [mat] = res.asset_materializations_for_node("ingested_traces")
    md = {k: v.value for k, v in mat.metadata.items()}
    # 5 .traj files of DAY (5+11+11+7+21 turns; pydicom moved to the next day) + claude.txt
    assert (md["inputs"], md["records_in"], md["accepted"], md["quarantined"], md["turns"]) == (6, 6, 5, 1, 55)
    assert md["reconciles"] is True
    assert "| swe | swe-agent | 3 | 27 |" in md["by_domain_and_source"]
    assert "unknown_format" in md["quarantine_reasons"]
    assert md["see_more"].startswith("worldline query ")
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals == {"schema_valid": True, "counts_reconcile": True, "quarantine_rate": True,
                     "latest_batch_quarantine_rate": True, "unique_trajectory_id": True, "manifest_checksums": True}
    # the same partition again adds nothing, and its overview shows nothing (it showed the rows of the first run)
    again = dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    md1 = {k: v.value for k, v in again.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md1["new_inputs"], md1["accepted"], md1["batch"]) == (0, 0, "none (nothing new)")
    assert [md1[k] for k in ("by_domain_and_source", "quarantine_reasons", "example_turns")] == ["_none_"] * 3
    # the next day's partition holds only pydicom
    res2 = dg.materialize([ingested_traces], partition_key=key("swe", "2026-11-02"),
                          resources={"corpus": corpus}, instance=instance)
    md2 = {k: v.value for k, v in res2.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md2["inputs"], md2["accepted"], md2["turns"]) == (1, 1, 12)
    assert md2["by_domain_and_source"].splitlines()[2:] == ["| swe | swe-agent | 1 | 12 |"]
    rep = dg.materialize([corpus_report], resources={"corpus": corpus}, instance=instance)
    path = Path(rep.asset_materializations_for_node("corpus_report")[0].metadata["path"].value)
    html = path.read_text()
    assert "6 trajectories" in html and "Exit codes" in html and "<svg" in html


def test_duckdb_resource_sees_views(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    con = DuckDBResource(threads=1).connect(corpus.root)
    assert con.sql("SELECT count(*) FROM trajectories").fetchall() == [(5,)]
    assert con.sql("SELECT current_setting('threads')").fetchall() == [(1,)]


def test_corrupted_corpus_fails_the_right_checks(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    root = Path(corpus.root)
    part = sorted((root / "trajectories" / "domain=swe").glob("*.parquet"))[0]
    shutil.copy(part, part.with_name("part-copied-by-hand.parquet"))  # duplicate rows, unlisted file
    failed = {r.name for r in run_contracts(root) if not r.passed}
    assert failed == {"manifest_checksums"}  # readers read the manifest's files: the copy is reported, never read
    assert DuckDBResource().connect(root).sql("SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories").fetchall() == [(5, 5)]
    part.with_name("part-copied-by-hand.parquet").unlink()
    assert all(r.passed for r in run_contracts(root))
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte inside the file
    part.write_bytes(bytes(data))
    results = {r.name: r for r in run_contracts(root)}
    assert not results["manifest_checksums"].passed
    assert results["manifest_checksums"].metadata["checksum_mismatch"] == [str(part.relative_to(root))]
    res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key("swe", DAY),
                         resources={"corpus": corpus}, instance=instance, raise_on_error=False)
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals["manifest_checksums"] is False


def test_quarantine_rate_bound_is_configurable(setup) -> None:
    corpus, instance = setup
    dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus}, instance=instance)
    rates = {r.name: r for r in run_contracts(corpus.root, max_quarantine_rate=0.1)}
    assert rates["quarantine_rate"].passed is False  # 1 of 6 = 17 %
    assert rates["quarantine_rate"].metadata["rate"] == round(1 / 6, 4)


def test_sensor_waits_for_settled_files_and_adds_sources(setup, tmp_path: Path, sample: Path) -> None:
    corpus, _ = setup
    inbox = Path(corpus.inbox)
    (inbox / "newsrc").mkdir()
    half = inbox / "newsrc" / "upload.traj.part"
    half.write_bytes((sample / "swe-agent/ctf_pwn_warmup.traj").read_bytes()[:1000])
    os.utime(half, (EPOCH, EPOCH))
    r1 = inbox_requests(corpus, None, known_sources=["swe"])
    assert r1.run_requests == []  # first sight: nothing is known to be settled yet
    assert [req.partition_keys for req in r1.dynamic_partitions_requests] == [["newsrc"]]
    growing = _drop(inbox, "swe", [sample / "intercode" / "ic_ctf_gpt-4_25_turns.json"])[0]
    r2 = inbox_requests(corpus, r1.cursor, known_sources=["swe", "newsrc"])
    assert [(rq.partition_key.keys_by_dimension["source"], rq.partition_key.keys_by_dimension["day"]) for rq in r2.run_requests] == [
        ("swe", DAY), ("swe", "2026-11-02")]
    # the intercode file was new in tick 2: it is not in the requested set yet
    assert json.loads(r2.run_requests[0].tags["worldline/inputs"]) == 6
    with open(growing, "ab") as f:  # still being written
        f.write(b" ")
    os.utime(growing, (EPOCH, EPOCH))
    r3 = inbox_requests(corpus, r2.cursor, known_sources=["swe", "newsrc"])
    assert r3.run_requests == []  # changed since the last tick
    r4 = inbox_requests(corpus, r3.cursor, known_sources=["swe", "newsrc"])
    # the settled file alone: the six before it were requested already
    [[only]] = [rq.run_config["ops"]["ingested_traces"]["config"]["inputs"] for rq in r4.run_requests]
    assert only.startswith(f"{growing}|")
    r5 = inbox_requests(corpus, r4.cursor, known_sources=["swe", "newsrc"])
    assert r5.run_requests == []  # same files: never requested twice
    # an input moved out of the inbox requests nothing again (the partition's digest changed: the others were)
    moved = sorted((inbox / "swe").iterdir())[0]
    moved.rename(tmp_path / moved.name)
    r6 = inbox_requests(corpus, r5.cursor, known_sources=["swe", "newsrc"])
    assert r6.run_requests == []
    # a changed input is a new one, once settled
    with open(growing, "ab") as f:
        f.write(b"\n")
    os.utime(growing, (EPOCH, EPOCH))
    r7 = inbox_requests(corpus, r6.cursor, known_sources=["swe", "newsrc"])
    r8 = inbox_requests(corpus, r7.cursor, known_sources=["swe", "newsrc"])
    assert (r7.run_requests, [rq.tags["worldline/inputs"] for rq in r8.run_requests]) == ([], ["1"])


def _inputs(result: dg.SensorResult) -> list[str]:
    return sorted(k for rq in result.run_requests for k in rq.run_config["ops"]["ingested_traces"]["config"]["inputs"])


def test_the_sensor_cursor_does_not_grow_with_the_inbox(setup, tmp_path: Path) -> None:
    """The cursor held every input seen and requested (`path|sha256` twice): 8.6 MB a tick, stored with
    every tick, for a 50,000-file inbox. The requested inputs are in a file beside the corpus now."""
    from dagster_project.sensors import RequestedInputs

    corpus, _ = setup
    src = Path(corpus.inbox) / "bulk"
    src.mkdir()
    for i in range(400):
        f = src / f"session-{i:04d}-with-a-longish-name.jsonl"
        f.write_text(json.dumps({"messages": [{"role": "user", "content": f"hi {i}"}]}) + "\n")
        os.utime(f, (EPOCH, EPOCH))
    r1 = inbox_requests(corpus, None, ["swe", "bulk"])
    assert r1.run_requests == [] and len(r1.cursor) > 400 * 60  # first sight: every input pending
    r2 = inbox_requests(corpus, r1.cursor, ["swe", "bulk"])
    assert len(_inputs(r2)) == 407
    assert json.loads(r2.cursor) == {"generation": 1, "seen": {}}
    state = RequestedInputs(corpus).path
    assert state.parent == tmp_path and state.name.startswith(".corpus.inbox-")
    assert len(json.loads(state.read_bytes())["requested"]) == 407
    r3 = inbox_requests(corpus, r2.cursor, ["swe", "bulk"])
    assert (r3.run_requests, json.loads(r3.cursor)) == ([], {"generation": 1, "seen": {}})


def test_a_tick_dagster_did_not_commit_is_requested_again(setup) -> None:
    """A tick's requests are written with the next generation; its cursor says that generation only if
    Dagster committed it. Evaluated again from the older cursor, the same inputs are asked for (Dagster's
    run keys keep a run that did start from starting twice)."""
    corpus, _ = setup
    r1 = inbox_requests(corpus, None, ["swe"])
    r2 = inbox_requests(corpus, r1.cursor, ["swe"])
    again = inbox_requests(corpus, r1.cursor, ["swe"])  # r2's cursor was lost
    assert _inputs(again) == _inputs(r2) and len(_inputs(r2)) == 7
    assert [rq.run_key for rq in again.run_requests] == [rq.run_key for rq in r2.run_requests]
    assert inbox_requests(corpus, again.cursor, ["swe"]).run_requests == []
    # a reset cursor asks for everything again (ingest skips what the corpus holds)
    r_reset = inbox_requests(corpus, None, ["swe"])
    assert _inputs(inbox_requests(corpus, r_reset.cursor, ["swe"])) == _inputs(r2)


def test_a_cursor_from_before_the_state_file_keeps_its_requested_inputs(setup) -> None:
    corpus, _ = setup
    r1 = inbox_requests(corpus, None, ["swe"])
    r2 = inbox_requests(corpus, r1.cursor, ["swe"])
    old = json.dumps({"seen": {}, "requested_inputs": _inputs(r2)})  # the former cursor's form
    from dagster_project.sensors import RequestedInputs

    RequestedInputs(corpus).path.unlink()
    r3 = inbox_requests(corpus, old, ["swe"])
    assert r3.run_requests == [] and json.loads(r3.cursor) == {"generation": 1, "seen": {}}
    assert inbox_requests(corpus, r3.cursor, ["swe"]).run_requests == []


def test_a_claimed_folder_with_a_stray_file_counts_as_ingest_reads_it(setup, sample: Path) -> None:
    """The inbox offers a DroidBot output folder, with a notes file in it, as one input; ingest reads that file as an
    input of its own (quarantined: no format). `inputs` said 2 beside `new_inputs` 3."""
    corpus, instance = setup
    d = Path(corpus.inbox) / "phone" / "droidbot"
    shutil.copytree(sample / "droidbot", d)
    (d / "notes.log").write_text("tried it twice\n")
    _drop(Path(corpus.inbox), "phone", [sample / "tau-bench" / "gpt-4o-airline__tasks0-7.json"])
    for p in d.rglob("*"):
        os.utime(p, (EPOCH, EPOCH))
    os.utime(d, (EPOCH, EPOCH))
    instance.add_dynamic_partitions(SOURCES.name, ["phone"])
    res = dg.materialize([ingested_traces], partition_key=key("phone", DAY), resources={"corpus": corpus}, instance=instance)
    md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md["inbox_inputs"], md["inputs"], md["new_inputs"], md["already_ingested"]) == (2, 3, 3, 0)
    assert md["quarantined"] == 1 and md["reconciles"] is True


def test_the_sensor_itself_through_dagster(setup) -> None:
    """`inbox_sensor` as Dagster evaluates it: its resource, the instance's known sources, the cursor
    Dagster hands back."""
    from dagster_project.sensors import inbox_sensor

    corpus, instance = setup
    ctx = dg.build_sensor_context(instance=instance, resources={"corpus": corpus})
    first = inbox_sensor(ctx)
    assert first.run_requests == [] and first.dynamic_partitions_requests == []
    ctx = dg.build_sensor_context(instance=instance, cursor=first.cursor, resources={"corpus": corpus})
    second = inbox_sensor(ctx)
    assert [rq.partition_key for rq in second.run_requests] == [key("swe", DAY), key("swe", "2026-11-02")]
    assert len(_inputs(second)) == 7 and json.loads(second.cursor) == {"generation": 1, "seen": {}}


def test_a_state_file_that_is_not_the_sensors_fails_the_tick_naming_it(setup) -> None:
    from dagster_project.sensors import RequestedInputs

    corpus, _ = setup
    state = RequestedInputs(corpus).path
    state.write_text("[]")
    with pytest.raises(ValueError, match=re.escape(f"{state}: not an inbox sensor's state")):
        inbox_requests(corpus, None, ["swe"])


def test_the_batch_check_judges_its_own_runs_batch(setup, sample: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Partition runs take turns on the corpus: another one may commit between a run's ingest and
    its checks. The check judged the newest batch (the other run's, clean) and a partition of
    mostly broken files passed."""
    from dagster_project import checks
    from pipelines.contracts import latest_batch_quarantine_rate
    from pipelines.store import Corpus

    corpus, instance = setup
    inbox = Path(corpus.inbox)
    for i in range(3):
        (tmp_path / f"junk{i}.txt").write_text(f"not a trace {i}\n")
    _drop(inbox, "bad", [sample / "swe-agent" / "ctf_pwn_warmup.traj", *sorted(tmp_path.glob("junk*.txt"))])
    instance.add_dynamic_partitions(SOURCES.name, ["bad"])
    real = checks.run_contracts

    def another_run_commits_first(*a, **k):  # noqa: ANN002, ANN003, ANN202
        ingest([sample / "tau-bench"], corpus.root, progress=False)
        return real(*a, **k)

    monkeypatch.setattr(checks, "run_contracts", another_run_commits_first)
    res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key("bad", DAY), resources={"corpus": corpus},
                         instance=instance, raise_on_error=False)
    batch = res.asset_materializations_for_node("ingested_traces")[0].metadata["batch"].value
    [ev] = [e for e in res.get_asset_check_evaluations() if e.check_name == "latest_batch_quarantine_rate"]
    assert (ev.passed, ev.metadata["batch"].value, ev.metadata["rate"].value) == (False, batch, 0.75)
    newest = Corpus(corpus.root).manifest()["batches"][-1]["id"]
    assert newest != batch  # the other run's, which the check used to judge
    assert latest_batch_quarantine_rate(Corpus(corpus.root)).metadata["batch"] == newest
    assert not latest_batch_quarantine_rate(Corpus(corpus.root), batch="no-such-batch").passed


def test_a_run_that_ingests_nothing_new_judges_no_batch(setup, sample: Path, tmp_path: Path) -> None:
    """A rerun (or backfill) of a partition already ingested commits no batch: its check judged the
    newest one, another partition's, and failed on that one's rate."""
    corpus, instance = setup
    for i in range(3):
        (tmp_path / f"junk{i}.txt").write_text(f"not a trace {i}\n")
    _drop(Path(corpus.inbox), "bad", [sample / "swe-agent" / "ctf_pwn_warmup.traj", *sorted(tmp_path.glob("junk*.txt"))])
    instance.add_dynamic_partitions(SOURCES.name, ["bad"])
    verdicts = []
    for source in ("swe", "bad", "swe"):  # the last: nothing new, after bad's batch
        res = dg.materialize([ingested_traces, corpus_contracts], partition_key=key(source, DAY), resources={"corpus": corpus},
                             instance=instance, raise_on_error=False)
        [ev] = [e for e in res.get_asset_check_evaluations() if e.check_name == "latest_batch_quarantine_rate"]
        verdicts.append((ev.passed, ev.metadata.get("note", dg.MetadataValue.text("")).value))
    assert verdicts == [(True, ""), (False, ""), (True, "this run ingested nothing new")]


def test_the_sensor_names_inbox_folders_it_cannot_take(setup, sample: Path) -> None:
    """A folder whose name cannot be a partition key was skipped without a word."""
    corpus, _ = setup
    inbox = Path(corpus.inbox)
    for name in ("team data", "_incoming", ".cache"):
        _drop(inbox, name, [sample / "swe-agent" / "ctf_pwn_warmup.traj"])
    logged: list[str] = []
    r = inbox_requests(corpus, None, ["swe"], log=logged.append)
    assert [m for m in logged if "not ingested" in m] == [
        "2 inbox folders are not ingested: a source's name is letters, digits, '.', '_' and '-', starting with a letter "
        "or digit, at most 100 characters: '_incoming', 'team data'"]  # a hidden one is left alone
    assert [req.partition_keys for req in r.dynamic_partitions_requests] == []


def test_a_partition_converts_with_beam_when_configured(setup) -> None:
    corpus, instance = setup
    beam = CorpusResource(root=corpus.root, inbox=corpus.inbox, settle_seconds=0, beam_runner="DirectRunner")
    res = dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": beam}, instance=instance)
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md["inputs"], md["records_in"], md["accepted"], md["quarantined"], md["turns"]) == (6, 6, 5, 1, 55)
    # Beam attempts name their parts with an attempt suffix; a local ingest does not
    assert [p.name for p in Path(corpus.root).glob("turns/**/*.parquet")]
    assert all(re.search(r"-\d{5}-[0-9a-f]{8}-\d{4}\.parquet$", p.name) for p in Path(corpus.root).glob("turns/**/*.parquet"))


def _touch_tree(root: Path, mtime: float) -> None:
    for p in [root, *root.rglob("*")]:
        os.utime(p, (mtime, mtime))


def _ids(root: Path | str) -> tuple[set, list]:
    con = connect(root)
    return ({r[0] for r in con.sql("SELECT trajectory_id FROM trajectories").fetchall()},
            con.sql("SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 1").fetchall())


def test_directory_formats_are_one_input_as_in_the_cli(tmp_path: Path, sample: Path) -> None:
    """A BrowserGym experiment, a DroidBot output and a Harbor trial are directories: the inbox offers
    each as one input, as `worldline ingest` walks them, not as files that no format knows alone."""
    inbox = tmp_path / "inbox"
    src = inbox / "gui"
    shutil.copytree(sample / "browsergym-workarena", src / "bg")
    shutil.copytree(sample / "droidbot", src / "droid")
    shutil.copytree(TESTS / "data" / "harbor" / "fix-git__Lh7Qa2", src / "trial")
    shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", src / "one.traj")
    (src / "droid" / "notes.txt~").write_text("an editor's backup: no download in progress")
    (src / "half.traj.part").write_text("{")  # a download in progress, on its own: not offered
    _touch_tree(src, EPOCH)
    offered = list(scan(inbox, settle_s=0))
    assert "half.traj.part" not in {i.path.name for i in offered}
    assert {(i.path.relative_to(src).as_posix(), i.day) for i in offered if i.path.is_dir()} == {
        ("bg/" + d.name, DAY) for d in (sample / "browsergym-workarena").iterdir() if d.is_dir()} | {
        ("droid", DAY), ("trial", DAY)}
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["gui"])
    res = dg.materialize([ingested_traces], partition_key=key("gui", DAY), resources={"corpus": corpus}, instance=instance)
    assert res.success
    (src / "half.traj.part").unlink()  # the download finished elsewhere: the CLI would read the partial file
    ingest([src], tmp_path / "cli", progress=False)
    assert _ids(corpus.root) == _ids(tmp_path / "cli")
    domains = connect(corpus.root).sql(
        "SELECT domain, source_format, count(*), sum(num_turns)::INT FROM trajectories GROUP BY ALL ORDER BY ALL")
    # the counts each format's own tests establish: the DroidBot run (41 events), three BrowserGym
    # experiments (12 steps), the Harbor trial's ATIF trajectory (6) and its three sub-agents (1 each: the
    # main history they were handed is the main trajectory's, not theirs)
    assert domains.fetchall() == [("android", "droidbot", 1, 41), ("terminal", "atif", 4, 9),
                                  ("terminal", "swe-agent", 1, 7), ("web", "browsergym", 3, 12)]
    # the CLI after Dagster (or the other way round) adds nothing
    again = ingest([src], corpus.root, progress=False)
    assert (again.new_inputs, again.records) == (0, 0)


def test_old_files_belong_to_the_first_day_and_future_ones_wait(setup, tmp_path: Path, sample: Path) -> None:
    corpus, instance = setup
    inbox = Path(corpus.inbox)
    old = _drop(inbox, "arch", [sample / "swe-agent" / "ctf_pwn_warmup.traj"],
                mtime=dt.datetime(2019, 6, 1, tzinfo=dt.UTC).timestamp())[0]
    ahead = _drop(inbox, "arch", [sample / "swe-agent" / "function_calling_simple.traj"],
                  mtime=dt.datetime.now(dt.UTC).timestamp() + 3600)[0]
    future: list[Path] = []
    assert [(i.path, i.day) for i in scan(inbox, 0, only="arch", on_future=future.append)] == [(old, FIRST_DAY)]
    assert future == [ahead]
    logged: list[str] = []
    r1 = inbox_requests(corpus, None, ["swe", "arch"], log=logged.append)
    r2 = inbox_requests(corpus, r1.cursor, ["swe", "arch"], log=logged.append)
    assert "1 inbox inputs are modified in the future" in logged[0]
    [req] = [rq for rq in r2.run_requests if rq.partition_key.keys_by_dimension["source"] == "arch"]
    assert req.partition_key.keys_by_dimension["day"] == FIRST_DAY
    instance.add_dynamic_partitions(SOURCES.name, ["arch"])
    res = dg.materialize([ingested_traces], partition_key=req.partition_key, resources={"corpus": corpus},
                         instance=instance, run_config=req.run_config)
    md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    assert (md["inputs"], md["accepted"]) == (1, 1)


def test_a_sensor_run_ingests_what_the_sensor_saw_settle(setup, tmp_path: Path, sample: Path) -> None:
    corpus, instance = setup
    inbox = Path(corpus.inbox)
    r1 = inbox_requests(corpus, None, ["swe"])
    late = _drop(inbox, "swe", [sample / "intercode" / "ic_ctf_gpt-4_25_turns.json"])[0]  # arrives after tick 1
    r2 = inbox_requests(corpus, r1.cursor, ["swe"])
    req = next(rq for rq in r2.run_requests if rq.partition_key.keys_by_dimension["day"] == DAY)
    keys = req.run_config["ops"]["ingested_traces"]["config"]["inputs"]
    assert len(keys) == 6 and not any(k.startswith(f"{late}|") for k in keys)
    with open(inbox / "swe" / "ctf_pwn_warmup.traj", "ab") as f:  # one of them changes before the run starts
        f.write(b"\n")
    os.utime(inbox / "swe" / "ctf_pwn_warmup.traj", (EPOCH, EPOCH))
    res = dg.materialize([ingested_traces], partition_key=req.partition_key, resources={"corpus": corpus},
                         instance=instance, run_config=req.run_config)
    md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
    # neither the late file nor the changed one: the day's 55 turns less ctf_pwn_warmup's 7, and claude.txt
    assert (md["inputs"], md["accepted"], md["quarantined"], md["turns"]) == (5, 4, 1, 48)
    assert len(md["config_fingerprint"]) == 16


def test_seed_without_dagster_home_uses_the_default_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from dagster_project import seed

    monkeypatch.setattr(seed, "REPO", tmp_path)  # where `make ui` keeps .dagster_home
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.delenv("WORLDLINE_CONFIG", raising=False)
    monkeypatch.setenv("WORLDLINE_INBOX", str(tmp_path / "inbox"))
    (tmp_path / "inbox" / "lab").mkdir(parents=True)
    monkeypatch.setattr("sys.argv", ["seed"])
    seed.main()
    assert os.environ["DAGSTER_HOME"] == str(tmp_path / ".dagster_home")
    assert (tmp_path / ".dagster_home" / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"
    assert "added ['lab']" in capsys.readouterr().out


def test_every_stage_option_of_the_cli_is_dagster_config() -> None:
    """A thin shell each: what `worldline clean|dedup|export|score` can set, a Dagster run can too."""
    from dagster_project.clean_assets import CleanRunConfig, DedupRunConfig
    from dagster_project.export_assets import ExportRunConfig
    from dagster_project.score_assets import ScoringModelResource
    from pipelines.cli import build_parser

    renamed = {"no_retry_identical": "retry_identical", "ignore_cleaning": "use_cleaning", "recompute": "reuse_signatures",
               "redact_every_text": "use_redaction_scan", "domain_weight": "domain_weights",
               "source_weight": "source_weights", "batch_tokens": "max_batch_tokens",
               "beam": "beam_runner", "beam_option": "beam_options"}  # score: a runner set is --beam
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for stage, cfg in [("clean", CleanRunConfig), ("dedup", DedupRunConfig), ("export", ExportRunConfig),
                       ("score", ScoringModelResource)]:
        options = {a.dest for a in sub.choices[stage]._actions} - {"help", "corpus", "quiet"}
        assert {renamed.get(o, o) for o in options} <= set(cfg.model_fields), stage


def test_a_source_that_cannot_be_walked_does_not_stop_the_others(tmp_path: Path, sample: Path) -> None:
    """A directory the sensor may not read raised out of every tick, for every source."""
    import subprocess
    import sys

    inbox = tmp_path / "inbox"
    _drop(inbox, "ok", [sample / "swe-agent" / "ctf_pwn_warmup.traj"])
    locked = inbox / "bad" / "locked"
    locked.mkdir(parents=True)
    _drop(inbox, "bad", [sample / "swe-agent" / "function_calling_simple.traj", sample / "swe-agent" / "pydicom__pydicom-1458.traj"])
    locked.chmod(0)
    # the partition run reads its inputs as the sensor did (it raised there, failing every retry)
    code = ("import json, sys; from pathlib import Path; from pipelines.inbox import inputs_for, scan; errors = []; "
            "items = list(scan(Path(sys.argv[1]), 0, on_error=lambda s, e: errors.append((s, e.strerror)))); "
            "found = [i.path.name for i in items]; again = []; "
            "run = [i.path.name for i in inputs_for(Path(sys.argv[1]), 'bad', items[0].day, 0, on_error=lambda s, e: again.append(s))]; "
            "print(json.dumps([found, errors, run, again]))")
    cmd = [sys.executable, "-c", code, str(inbox)]
    cmd = without_root_powers(cmd)  # root reads anything
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120)
    locked.chmod(0o755)
    assert run.returncode == 0, run.stderr
    found, errors, partition, again = json.loads(run.stdout)
    # `bad` is walked in name order past `locked`, which is said (the walk broke off there: `pydicom...` was not offered)
    assert found == ["function_calling_simple.traj", "pydicom__pydicom-1458.traj", "ctf_pwn_warmup.traj"]
    assert errors == [["bad", "Permission denied"]]
    assert (partition, again) == (["function_calling_simple.traj", "pydicom__pydicom-1458.traj"], ["bad"])


def test_a_corpus_setting_that_is_not_a_corpus_fails_at_once(tmp_path: Path) -> None:
    """A CorpusError is the settings' (here: the root is a file): it was retried three times, 110 s."""
    import time

    (tmp_path / "inbox" / "swe").mkdir(parents=True)
    (tmp_path / "afile").write_text("x")
    corpus = CorpusResource(root=str(tmp_path / "afile"), inbox=str(tmp_path / "inbox"), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["swe"])
    t0 = time.monotonic()
    res = dg.materialize([ingested_traces], partition_key=key("swe", DAY), resources={"corpus": corpus},
                         instance=instance, raise_on_error=False)
    assert not res.success and time.monotonic() - t0 < 9  # the first retry waits 10 s
    [failure] = [e for e in res.all_events if e.event_type_value == "STEP_FAILURE"]
    assert "CorpusError" in failure.step_failure_data.error.message and "afile" in failure.step_failure_data.error.message
    assert not [e for e in res.all_events if e.event_type_value == "STEP_UP_FOR_RETRY"]


def test_see_more_lists_only_the_partition_source(tmp_path: Path, sample: Path) -> None:
    """`source LIKE '%/team_a/%'` matched team-a's inputs too (`_` is any character in LIKE)."""
    inbox = tmp_path / "inbox"
    _drop(inbox, "team-a", [sample / "swe-agent" / "pydicom__pydicom-1458.traj"])
    _drop(inbox, "team_a", sorted((sample / "swe-agent").glob("*.traj"))[:2])
    corpus = CorpusResource(root=str(tmp_path / "corpus"), inbox=str(inbox), settle_seconds=0)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions(SOURCES.name, ["team-a", "team_a"])
    for source in ("team-a", "team_a"):
        res = dg.materialize([ingested_traces], partition_key=key(source, DAY), resources={"corpus": corpus},
                             instance=instance)
        md = {k: v.value for k, v in res.asset_materializations_for_node("ingested_traces")[0].metadata.items()}
        sql = re.fullmatch(r'worldline query \S+ "(.*)"', md["see_more"])[1]
        rows = connect(corpus.root).sql(sql).fetchall()
        assert len(rows) == md["accepted"] == (1 if source == "team-a" else 2)


def test_the_report_of_a_relative_corpus_root_goes_beside_it(tmp_path: Path, sample: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Root `.`: `Path('.').parent` is `.`, so the report was refused as inside the corpus (`worldline report .` works)."""
    ingest([sample / "swe-agent"], tmp_path / "corpus", progress=False)
    monkeypatch.chdir(tmp_path / "corpus")
    res = dg.materialize([corpus_report], resources={"corpus": CorpusResource(root=".", inbox=str(tmp_path / "inbox"))})
    assert Path(res.asset_materializations_for_node("corpus_report")[0].metadata["path"].value) == tmp_path / "report.html"
    assert (tmp_path / "report.html").is_file()
    from dagster_project.export_assets import export_out
    from dagster_project.traces_assets import TracesRunConfig, traces_out

    here = CorpusResource(root=".", inbox=str(tmp_path / "inbox"))  # `Path('.').parent / 'export'` was inside it
    assert (export_out(here), traces_out(here, TracesRunConfig())) == (tmp_path / "export", tmp_path / "traces")
