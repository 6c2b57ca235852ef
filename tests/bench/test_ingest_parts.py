"""bench/ingest_parts.py's CPU split: both sides convert the same records, and the table's derived lines."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.ingest_parts import cpu_split, split_table
from tests.conftest import SAMPLE

INPUTS = [SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl", SAMPLE / "tau-bench" / "gpt-4o-airline__tasks0-7.json"]


def test_both_sides_count_the_same_records_in_every_stage(tmp_path: Path) -> None:
    files = []
    for p in INPUTS:
        files.append(tmp_path / "in" / p.name)
        files[-1].parent.mkdir(exist_ok=True)
        shutil.copy(p, files[-1])
    staging = tmp_path / "staging"
    staging.mkdir()
    res = cpu_split(files, repeat=1, staging=staging)
    # 500 FireAct lines (1,385 turns) + 8 tau-bench tasks (108 turns)
    assert res["counts"] == {"baseline": (508, 1493), "project": (508, 1493)}
    assert list(res["baseline"]) == [
        "read the files and sha256 them",
        "parse (`json.loads`; the project: orjson, in `read_unit`)",
        "sniff and split into records",
        "convert the records (the importers: shared)",
        "rows as dicts",
        "`Table.from_pylist`",
        "Parquet (zstd 3)",
    ]
    assert list(res["project"]) == [
        "sha256 pass (`InputUnit.sha256`)",
        "read, parse, sniff, convert (`read_unit`)",
        "buffer the records (`TrajectoryBuffer.add`)",
        "Arrow arrays (`take`)",
        "Parquet (zstd 3; `PartWriter`, checksums included)",
        "of which: convert the records (the importers: shared)",
    ]
    assert list(res["baseline_fewer_gc"]) == list(res["baseline"])
    assert all(v >= 0 for side in ("baseline", "baseline_fewer_gc", "project") for v in res[side].values())
    assert list(staging.rglob("*.parquet")) == []  # the project's part files are written, then removed


def test_split_table_totals_and_the_share_outside_the_importers() -> None:
    res = {
        "baseline": {"parse": 1.0, "convert the records (the importers: shared)": 2.0, "rows as dicts": 1.0},
        "baseline_fewer_gc": {"parse": 0.75, "convert the records (the importers: shared)": 1.5, "rows as dicts": 0.75},
        "project": {"read_unit": 2.5, "buffer": 0.5, "of which: convert the records (the importers: shared)": 1.5},
    }
    lines = split_table(res).splitlines()
    assert lines[2] == "| parse | 1.000 | 25 | read_unit | 2.500 | 83 |"
    assert lines[4] == "| rows as dicts | 1.000 | 25 | of which: convert the records (the importers: shared) | 1.500 | 50 |"
    assert lines[5] == "| **total** | **4.000** | 100 | **total** | **3.000** | 100 |"
    # outside convert: 4 - 2 = 2 s against 3 - 1.5 = 1.5 s
    assert lines[7] == "- baseline / project CPU: 1.33; outside the importers' `convert`: 2.000 s against 1.500 s (1.33x)"
    assert lines[8] == "- the importers' `convert`: 2.000 s in the baseline (50% of its CPU), 1.500 s in the project (50%)"
    # 4 s with the default collector, 3 s with fewer passes
    assert lines[9] == ("- the baseline again under `fewer_gc_passes` (the project's collector setting): 3.000 s in all, "
                        "1.500 s of it `convert`; the default collector costs the baseline 1.000 s (25%), "
                        "and against that run the project's ratio is 1.00")
    assert len(lines) == 10


def test_the_baseline_writes_the_projects_trajectories_and_turns(tmp_path: Path) -> None:
    """bench/ingest.py compares the baseline with the project on the promise that both write the same rows."""
    import pyarrow.parquet as pq

    from bench.ingest import run_baseline
    from bench.ingest_ab import read_tables
    from pipelines.ingest import IngestConfig, ingest

    data = tmp_path / "in"
    data.mkdir()
    for p in INPUTS:
        shutil.copy(p, data / p.name)
    counts = run_baseline(data, tmp_path / "baseline", flush_bytes=0)
    assert {k: counts[k] for k in ("trajectories", "turns", "quarantined", "records", "files")} == {
        "trajectories": 508, "turns": 1493, "quarantined": 0, "records": 508, "files": 2}
    ingest([data], tmp_path / "corpus", IngestConfig(workers=1), progress=False)
    project = read_tables(tmp_path / "corpus")
    for table, keys in (("trajectories", ["trajectory_id"]), ("turns", ["trajectory_id", "turn_index"])):
        base = pq.read_table(tmp_path / "baseline" / f"{table}.parquet")
        base = base.sort_by([(k, "ascending") for k in keys]).select(project[table].column_names)
        assert base.equals(project[table]), table
