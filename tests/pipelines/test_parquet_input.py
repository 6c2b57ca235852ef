"""Parquet inputs (Hugging Face dataset shards): each row is read as the JSON line it was made from.

The Parquet files are made here from the project's real trace files the way a dataset on the Hub is
made from JSON lines: one struct column per top-level key, the union of every row's keys, null where a
row has none. Expected values are the JSON inputs' own records, read through the same importers.
"""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import tarfile
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.ingest import IngestConfig, ingest
from pipelines.parquet_input import BATCH_ROWS, without_nulls
from pipelines.reader import SNIFF_AHEAD, discover, read_path, read_unit
from pipelines.sources import ReadLimits
from schemas.records import QuarantineRecord, Trajectory
from tests.conftest import SAMPLE

DATA = Path(__file__).resolve().parents[1] / "data"
FIREACT_CHAT = SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl"
TAU_BENCH = SAMPLE / "tau-bench" / "gpt-4o-airline__tasks0-7.json"
MIXED_CHAT = DATA / "chat-variants" / "tongyi_deepresearch_user_results.jsonl"  # `messages` and `conversations` rows
GEMINI = DATA / "chat-variants" / "gemini_contents.jsonl"  # `functionResponse.response` with `output` or `error`


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def to_parquet(records: list[dict], path: Path, **write: object) -> Path:
    """What a Hub dataset made from these records holds: the union of the rows' keys, nulls for the rest."""
    pq.write_table(pa.Table.from_struct_array(pa.array(records)), path, **write)
    return path


def _comparable(t: Trajectory) -> dict:
    """A trajectory without what names its place (input, locator, ids), metadata with its nulls left out."""
    d = dataclasses.asdict(t)
    for k in ("source", "locator", "record_digest"):
        d.pop(k)
    if d["metadata"] is not None:
        d["metadata"] = without_nulls(orjson.loads(d["metadata"]))
    return d


def _trajectories(path: Path) -> list[Trajectory]:
    out = list(read_path(path))
    assert [r for r in out if isinstance(r, QuarantineRecord)] == []
    return out  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("source", "records", "trajectories", "turns"),
    [
        (FIREACT_CHAT, _lines, 500, 1385),
        (TAU_BENCH, lambda p: json.loads(p.read_text()), 8, 108),
        (MIXED_CHAT, _lines, 2, 7),
        (GEMINI, _lines, 2, 8),
    ],
    ids=["fireact-chat", "tau-bench", "messages-and-conversations", "gemini"],
)
def test_rows_import_as_the_json_records_they_were_made_from(tmp_path: Path, source: Path, records, trajectories: int,
                                                             turns: int) -> None:
    rows = records(source)
    parquet = to_parquet(rows, tmp_path / "train-00000-of-00001.parquet", row_group_size=100)
    want = _trajectories(source)
    got = _trajectories(parquet)
    assert (len(got), sum(len(t.turns) for t in got)) == (trajectories, turns) == (len(want), sum(len(t.turns) for t in want))
    assert [_comparable(t) for t in got] == [_comparable(t) for t in want]
    assert [t.locator for t in got] == [f"row:{i}" for i in range(len(rows))]
    assert len({t.trajectory_id for t in got}) == len(got)


def test_a_record_that_parquet_gives_nulls_is_read_as_in_json(tmp_path: Path) -> None:
    # the Gemini row whose function response holds only `error`: in Parquet it also holds `output: null`
    rows = _lines(GEMINI)
    table = pa.Table.from_struct_array(pa.array(rows))
    response = table.column("contents").combine_chunks().flatten()
    assert "output" in str(response.type) and "error" in str(response.type)
    got = _trajectories(to_parquet(rows, tmp_path / "g.parquet"))
    errors = [t.is_error for t in got[0].turns if t.kind == "env"]
    assert errors == [t.is_error for t in _trajectories(GEMINI)[0].turns if t.kind == "env"] == [None, True]


@pytest.mark.parametrize("wrap", ["zst", "tar"])
def test_compressed_and_archived_parquet(tmp_path: Path, wrap: str) -> None:
    rows = _lines(FIREACT_CHAT)[:100]
    parquet = to_parquet(rows, tmp_path / "part.parquet")
    want = [_comparable(t) for t in _trajectories(parquet)]
    if wrap == "zst":
        path = tmp_path / "part.parquet.zst"
        path.write_bytes(zstandard.ZstdCompressor().compress(parquet.read_bytes()))
    else:
        path = tmp_path / "shards.tar"
        with tarfile.open(path, "w") as tar:
            tar.add(parquet, arcname="data/part.parquet")
    parquet.unlink()
    got = _trajectories(path)
    assert [_comparable(t) for t in got] == want
    assert (len(got), [t.locator for t in got][:2]) == (100, ["row:0", "row:1"])


def test_a_row_over_the_record_limit_is_quarantined_alone(tmp_path: Path) -> None:
    rows = _lines(FIREACT_CHAT)[:10]
    rows[3]["messages"][1]["content"] = "Observation: " + "x" * 200_000
    path = to_parquet(rows, tmp_path / "big.parquet")
    (unit,) = discover([path])
    got = list(read_unit(unit, unit.sha256(), ReadLimits(max_record_bytes=100_000)))
    kinds = [(type(r).__name__, getattr(r, "reason", None), r.locator) for r, _ in got]
    assert kinds == [("Trajectory", None, f"row:{i}") for i in range(3)] + [
        ("QuarantineRecord", "record_too_large", "row:3")] + [("Trajectory", None, f"row:{i}") for i in range(4, 10)]


def test_a_parquet_file_cut_short_is_one_quarantine_row(tmp_path: Path) -> None:
    path = to_parquet(_lines(FIREACT_CHAT)[:20], tmp_path / "cut.parquet")
    path.write_bytes(path.read_bytes()[:-100])  # the footer is gone
    got = list(read_path(path))
    assert [(r.reason, r.locator) for r in got] == [("corrupt_input", "$")]
    assert "not a readable Parquet file" in got[0].detail and str(path) in got[0].detail


def test_a_damaged_row_group_keeps_the_rows_before_it(tmp_path: Path) -> None:
    rows = _lines(FIREACT_CHAT)[: 3 * BATCH_ROWS]
    path = to_parquet(rows, tmp_path / "damaged.parquet", row_group_size=BATCH_ROWS, write_page_checksum=True,
                      compression="none")
    meta = pq.ParquetFile(path).metadata
    third = meta.row_group(2).column(0)
    data = bytearray(path.read_bytes())
    at = (third.data_page_offset or third.dictionary_page_offset) + third.total_compressed_size // 2
    data[at : at + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    got = list(read_path(path))
    assert [type(r).__name__ for r in got] == ["Trajectory"] * (2 * BATCH_ROWS) + ["QuarantineRecord"]
    assert (got[-1].reason, got[-1].locator) == ("corrupt_input", f"rows:{2 * BATCH_ROWS}-{3 * BATCH_ROWS - 1}")
    assert f"breaks off at row {2 * BATCH_ROWS} of {3 * BATCH_ROWS}" in got[-1].detail


def test_parquet_of_no_known_format_is_one_row(tmp_path: Path) -> None:
    path = to_parquet([{"text": f"document {i}", "score": i} for i in range(SNIFF_AHEAD + 10)], tmp_path / "web.parquet")
    got = list(read_path(path))
    assert [(r.reason, r.locator) for r in got] == [("unknown_format", "row:0")]
    assert f"nor do the next {SNIFF_AHEAD - 1} rows (columns: text, score)" in got[0].detail


def test_a_broken_first_row_takes_no_other_row_down(tmp_path: Path) -> None:
    rows = _lines(FIREACT_CHAT)[:5]
    rows[0]["messages"][0]["role"] = "robot"  # a role no chat has: the row matches no format, and FireAct refuses it
    path = to_parquet(rows, tmp_path / "first.parquet")
    got = list(read_path(path))
    assert [type(r).__name__ for r in got] == ["QuarantineRecord"] + ["Trajectory"] * 4
    assert got[0].locator == "row:0"


def test_ingest_counts_and_rereads_nothing(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    to_parquet(_lines(FIREACT_CHAT), inbox / "train.parquet")
    to_parquet(json.loads(TAU_BENCH.read_text()), inbox / "tau.parquet")
    corpus = tmp_path / "corpus"
    first = ingest([inbox], corpus, IngestConfig(workers=1), progress=False)
    assert (first.inputs, first.trajectories, first.turns, first.quarantined) == (2, 508, 1385 + 108, 0)
    again = ingest([inbox], corpus, IngestConfig(workers=1), progress=False)
    assert (again.new_inputs, again.trajectories) == (0, 0)


def test_memory_does_not_follow_the_row_group(tmp_path: Path) -> None:
    # one row group of 150 MB of distinct text: read page by page, the reader's resident memory grows by
    # a fraction of it (measured: 30 MB for 300 MB; read a column chunk at a time, 327 MB)
    rng = random.Random(7)
    rows = [{"messages": [{"role": "user", "content": rng.randbytes(1000).hex()},
                          {"role": "assistant", "content": "Thought: look.\nAction: search[x]"}]} for _ in range(75_000)]
    path = to_parquet(rows, tmp_path / "one-group.parquet", row_group_size=len(rows))
    del rows
    assert pq.ParquetFile(path).metadata.num_row_groups == 1 and path.stat().st_size > 150e6
    probe = (
        "import sys\n"
        "from collectors.base import ImportContext\n"
        "from pipelines.parquet_input import parquet_rows\n"
        "from pipelines.sources import ReadLimits\n"
        "from tests.support.memory import peak, reset_peak\n"
        "before = reset_peak()\n"
        "with open(sys.argv[1], 'rb') as f:\n"
        "    n = sum(1 for _ in parquet_rows(f, ImportContext(sys.argv[1], 'x'), ReadLimits()))\n"
        "print(n, peak() - before)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert int(out[0]) == 75_000
    assert int(out[1]) < 75e6, f"resident memory grew by {int(out[1]) / 1e6:.0f} MB reading a 150 MB row group"


def test_a_parquet_file_without_rows_is_empty_input(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    pq.write_table(pa.table({"messages": pa.array([], pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))}), path)
    assert [(r.reason, r.locator) for r in read_path(path)] == [("empty_input", "$")]
