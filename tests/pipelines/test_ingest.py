"""The ingest stage: good data lands, bad data is quarantined with a reason, counts reconcile."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import random
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import zstandard

from pipelines.cli import main
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import run_query
from pipelines.sources import MiB as MIB
from pipelines.sources import sha256_file
from pipelines.store import Corpus, CorpusLocked
from schemas import validate
from tests.support.memory import peak, reset_peak
from tests.support.permissions import without_root_powers

SWE = "swe-agent/function_calling_simple.traj"  # 5 steps: 5 assistant actions with tool results
SWE2 = "swe-agent/ctf_pwn_warmup.traj"  # 7 trajectory[] steps


def _chat_line(i: int) -> bytes:
    msgs = [
        {"role": "user", "content": f"list the files, task {i}"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}]},
        {"role": "tool", "tool_call_id": f"c{i}", "content": "a.txt\nb.txt"},
        {"role": "assistant", "content": "There are two files."},
    ]
    return json.dumps({"messages": msgs}).encode() + b"\n"


def _q(corpus: Path, sql: str) -> list[tuple]:
    return run_query(corpus, sql)[1]


@pytest.fixture
def inbox(tmp_path: Path, sample: Path) -> Path:
    d = tmp_path / "inbox"
    d.mkdir()
    shutil.copy(sample / SWE, d / "a.traj")
    shutil.copy(sample / SWE2, d / "b.traj")
    return d


REPO = Path(__file__).resolve().parents[2]


def _ingest_unprivileged(args: list[str | Path], corpus: Path, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """`worldline ingest ARGS --out CORPUS --quiet` in a process file permissions bind (root reads anything)."""
    cmd = without_root_powers([sys.executable, "-m", "pipelines.cli", "ingest", *map(str, args), "--out", str(corpus), "--quiet"])
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def _good_counts(corpus: Path) -> tuple[int, int]:
    return _q(corpus, "SELECT count(*), sum(num_turns) FROM trajectories WHERE source_format = 'swe-agent'")[0]


def test_ingest_writes_valid_tables_and_manifest(inbox: Path, tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined, s.turns) == (2, 2, 0, 12)
    assert s.by_domain == {"swe": [1, 5], "terminal": [1, 7]}
    for table in ("trajectories", "turns"):
        for f in (out / table).rglob("*.parquet"):
            assert validate(pq.read_table(f), table) == []
    m = Corpus(out).manifest()
    assert len(m["inputs"]) == 2 and len(m["batches"]) == 1
    for f in m["batches"][0]["files"]:
        assert sha256_file(out / f["path"]) == f["sha256"]
    assert sorted(p.name for p in (out / "trajectories").iterdir()) == ["domain=swe", "domain=terminal"]
    assert _q(out, "SELECT count(*) FROM turns")[0][0] == 12
    assert _q(out, "SELECT min(turn_index), max(turn_index) FROM turns WHERE domain='terminal'")[0] == (0, 6)


def test_reingest_is_a_noop_and_new_inputs_append(inbox: Path, tmp_path: Path, sample: Path) -> None:
    out = tmp_path / "corpus"
    ingest([inbox], out, progress=False)
    before = sorted(p.name for p in out.rglob("*.parquet"))
    again = ingest([inbox], out, progress=False)
    assert (again.new_inputs, again.skipped_inputs, again.duplicate_inputs, again.records) == (0, 2, 0, 0)
    assert "0 new, 2 already ingested\n" in again.render()
    assert sorted(p.name for p in out.rglob("*.parquet")) == before
    extra = tmp_path / "more"
    extra.mkdir()
    shutil.copy(sample / "swe-agent/pydicom__pydicom-1458.traj", extra / "p.traj")
    shutil.copy(sample / SWE, extra / "same-content-other-name.traj")
    s = ingest([extra], out, progress=False)
    assert (s.new_inputs, s.skipped_inputs, s.duplicate_inputs, s.trajectories, s.turns) == (1, 1, 0, 1, 12)
    (extra / "twin.traj").write_bytes((extra / "p.traj").read_bytes() + b"\n")  # new content, twice in one run
    shutil.copy(extra / "twin.traj", extra / "twin-again.traj")
    s = ingest([extra], out, progress=False)
    assert (s.new_inputs, s.skipped_inputs, s.duplicate_inputs) == (1, 3, 1)
    assert "1 new, 2 already ingested, 1 the same content as another input of this run (read once)\n" in s.render()
    assert _q(out, "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories")[0] == (4, 4)


def test_second_writer_gets_a_clear_error(inbox: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.reader import InputUnit

    out = tmp_path / "corpus"
    hashed: list[str] = []
    real_sha = InputUnit.sha256
    monkeypatch.setattr(InputUnit, "sha256", lambda self: hashed.append(self.source) or real_sha(self))
    with Corpus(out).writer():
        with pytest.raises(CorpusLocked, match=r"being written by another process \(pid \d+"):
            ingest([inbox], out, IngestConfig(workers=1), progress=False)
    assert hashed == []  # said at once, before every input was read to hash it
    assert ingest([inbox], out, progress=False).trajectories == 2  # lock released


def test_crashed_commit_is_completed_by_the_next_writer(inbox: Path, tmp_path: Path, monkeypatch) -> None:
    from pipelines import store

    out = tmp_path / "corpus"

    real = os.replace
    moved: list[str] = []

    def crash(src, dst):  # killed while moving the batch's files into place: the trajectories moved, not the turns
        if "/.staging-" in str(src) and "/turns/" in str(dst):
            raise KeyboardInterrupt
        moved.append(str(dst))
        real(src, dst)

    monkeypatch.setattr(store.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest([inbox], out, progress=False)
    monkeypatch.undo()
    assert any("/trajectories/" in m for m in moved)
    assert Corpus(out).committed_files()["trajectories"] == []
    # the half-moved batch is not read: no trajectories without their turns
    assert run_query(out, "SELECT (SELECT count(*) FROM trajectories), (SELECT count(*) FROM turns)")[1] == [(0, 0)]
    with Corpus(out).writer():
        pass  # recovery happens on taking the lock
    assert _good_counts(out) == (2, 12)
    assert Corpus(out).manifest()["batches"][0]["state"] == "committed"


def _assert_quarantined(out: Path, reason: str, source_suffix: str, locator: str | None = None) -> str:
    rows = _q(out, f"SELECT source, locator, detail FROM quarantine WHERE reason = '{reason}'")
    assert len(rows) == 1, rows
    source, loc, detail = rows[0]
    assert source.endswith(source_suffix)
    if locator is not None:
        assert loc == locator
    return detail


def test_truncated_json(inbox: Path, tmp_path: Path, sample: Path) -> None:
    data = (sample / SWE2).read_bytes()
    (inbox / "trunc.traj").write_bytes(data[: len(data) // 2])
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (3, 2, 1)
    detail = _assert_quarantined(out, "truncated_json", "trunc.traj", "$")
    assert "trunc.traj" in detail
    assert _good_counts(out) == (2, 12)


def test_invalid_utf8_in_a_document_and_in_one_line(inbox: Path, tmp_path: Path) -> None:
    (inbox / "bad.json").write_bytes(b'{"history": [{"role": "user", "message_type": "x", "content": "\xff\xfe"}]}\n')
    (inbox / "chat.jsonl").write_bytes(_chat_line(1) + b'{"messages": [{"role": "user", "content": "\xc3\x28"}]}\n' + _chat_line(3))
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (6, 4, 2)
    rows = _q(out, "SELECT source, locator, detail FROM quarantine WHERE reason = 'invalid_utf8' ORDER BY source")
    assert [(Path(r[0]).name, r[1]) for r in rows] == [("bad.json", "$"), ("chat.jsonl", "line:2")]
    assert "line 2: invalid UTF-8 at byte" in rows[1][2]
    assert _q(out, "SELECT count(*) FROM trajectories WHERE source LIKE '%chat.jsonl'")[0][0] == 2


def test_a_broken_first_line_is_one_record_of_the_file(inbox: Path, tmp_path: Path) -> None:
    # the first line once decided the format of the whole file: when no format took it, the lines
    # after it were neither read nor counted
    (inbox / "chat.jsonl").write_bytes(b'{"messages": "not a list"}\n' + _chat_line(2) + _chat_line(3))
    (inbox / "cut.jsonl").write_bytes(_chat_line(1)[:40] + b"\n" + _chat_line(2) + _chat_line(3))
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (8, 6, 2)
    rows = _q(out, "SELECT source, locator, reason FROM quarantine ORDER BY source")
    assert [(Path(r[0]).name, r[1], r[2]) for r in rows] == [
        ("chat.jsonl", "line:1", "malformed_record"), ("cut.jsonl", "line:1", "truncated_json")]
    assert _q(out, "SELECT count(*) FROM trajectories WHERE source_format = 'chat'")[0][0] == 4


def test_unknown_format_and_empty_file(inbox: Path, tmp_path: Path) -> None:
    (inbox / "notes.txt").write_text("just some notes\nnothing to see\n")
    (inbox / "empty.jsonl").write_bytes(b"")
    (inbox / "blank.json").write_bytes(b"\n  \n")
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (5, 2, 3)
    _assert_quarantined(out, "unknown_format", "notes.txt", "$")
    assert sorted(Path(r[0]).name for r in _q(out, "SELECT source FROM quarantine WHERE reason='empty_input'")) == [
        "blank.json", "empty.jsonl"]
    assert _good_counts(out) == (2, 12)


def test_record_missing_required_field(inbox: Path, tmp_path: Path, sample: Path) -> None:
    doc = json.loads((sample / SWE2).read_text())
    del doc["trajectory"][3]["observation"]
    (inbox / "missing.traj").write_text(json.dumps(doc))
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.trajectories, s.quarantined) == (2, 1)
    detail = _assert_quarantined(out, "missing_field", "missing.traj")
    assert "trajectory[3]" in detail and "'observation'" in detail


def test_a_single_2gb_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    f = tmp_path / "huge.jsonl"
    with open(f, "wb") as fh:
        fh.write(_chat_line(1))
        fh.seek(len(_chat_line(1)) + (2 << 30))  # a 2 GiB line of NUL bytes (sparse on disk)
        fh.write(b"\n" + _chat_line(3))
    out = tmp_path / "c"
    rss0 = reset_peak()
    s = ingest([f], out, IngestConfig(workers=1), progress=False)  # read here, where the peak is measured
    grown_mb = (peak() - rss0) / MIB
    assert (s.records, s.trajectories, s.quarantined) == (3, 2, 1)
    detail = _assert_quarantined(out, "record_too_large", "huge.jsonl", "line:2")
    assert "line 2: 2147483649 bytes" in detail
    assert grown_mb < 300, f"peak memory grew by {grown_mb:.0f} MB"


def test_compression_bomb(inbox: Path, tmp_path: Path) -> None:
    bomb = io.BytesIO()
    cctx = zstandard.ZstdCompressor(level=1)
    with cctx.stream_writer(bomb, closefd=False) as w:
        w.write(_chat_line(1))  # a good first record, then 256 MiB of spaces
        chunk = b" " * (1 << 20)
        for _ in range(256):
            w.write(chunk)
    assert len(bomb.getvalue()) < 64 << 10
    (inbox / "bomb.jsonl.zst").write_bytes(bomb.getvalue())
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (4, 3, 1)
    detail = _assert_quarantined(out, "compression_bomb", "bomb.jsonl.zst")
    assert "compression ratio above 1000" in detail


def test_corrupt_compressed_data(inbox: Path, tmp_path: Path) -> None:
    # zlib's and zstd's own errors are not OSError: they once escaped the reader and ended the run
    lines = b"".join(_chat_line(i) for i in range(3))
    gz, zst = gzip.compress(lines, mtime=0), zstandard.ZstdCompressor().compress(lines)
    (inbox / "a.jsonl.gz").write_bytes(gz[:40] + b"\xff\xfe" + gz[40:])
    (inbox / "b.jsonl.zst").write_bytes(zst[:20] + b"\xff" * 8 + zst[28:])
    bz, xz = bz2.compress(lines), lzma.compress(lines)
    (inbox / "c.jsonl.bz2").write_bytes(bz[:30] + b"\xff" * 8 + bz[38:])
    (inbox / "d.jsonl.xz").write_bytes(xz[: len(xz) // 2])  # cut off
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (7, 2, 5)
    rows = _q(out, "SELECT source, locator, reason, detail FROM quarantine ORDER BY source, reason")
    assert [(Path(r[0]).name, r[1], r[2]) for r in rows] == [
        ("a.jsonl.gz", "$", "corrupt_input"), ("b.jsonl.zst", "$", "corrupt_input"), ("c.jsonl.bz2", "$", "corrupt_input"),
        ("d.jsonl.xz", "$", "corrupt_input"), ("d.jsonl.xz", "$", "truncated_json")]  # the xz cut inside its first line
    assert rows[0][3].startswith(f"{inbox / 'a.jsonl.gz'}: the gzip data breaks off after 0 bytes out (error: ")
    assert rows[1][3].startswith(f"{inbox / 'b.jsonl.zst'}: the zstd data breaks off after 0 bytes out (ZstdError: ")
    assert rows[2][3].startswith(f"{inbox / 'c.jsonl.bz2'}: the bzip2 data breaks off after 0 bytes out (OSError: Invalid data stream)")
    got = len(lzma.LZMADecompressor().decompress(xz[: len(xz) // 2]))  # what the cut stream holds
    assert rows[3][3].startswith(f"{inbox / 'd.jsonl.xz'}: the xz data breaks off after {got} bytes out (EOFError: "
                                 "Compressed file ended before the end-of-stream marker was reached)")
    assert _good_counts(out) == (2, 12)


def test_zstd_cut_inside_a_frame_is_a_corrupt_input_row(tmp_path: Path) -> None:
    """zstandard's reader takes a file cut inside a frame for one that ended: a cut in the first block
    read as "the input is empty", a later one lost the rest without a row. Cut exactly between two
    frames, nothing can tell (the format has no end mark)."""
    rng = random.Random(0)
    lines = b"".join(_chat_line(rng.getrandbits(512)) for _ in range(3000))  # 3 blocks of 128 KiB and more
    one = zstandard.ZstdCompressor(level=1).compress(lines)
    two = one + zstandard.ZstdCompressor(level=1, write_checksum=True).compress(_chat_line(7))
    (tmp_path / "in").mkdir()
    cuts = {"head.zst": one[:7], "first-block.zst": one[:5000], "later.zst": one[: len(one) * 2 // 3],
            "checksum.zst": two[:-2], "between.zst": one, "whole.zst": two}
    for name, data in cuts.items():
        (tmp_path / "in" / name).write_bytes(data)
    out = tmp_path / "c"
    s = ingest([tmp_path / "in"], out, progress=False)
    assert s.reconciles
    rows = _q(out, "SELECT regexp_extract(source, '[^/]+$'), reason, detail FROM quarantine WHERE locator = '$' ORDER BY 1")
    where = {n: d.split("bytes out (", 1)[1] for n, r, d in rows if r == "corrupt_input"}
    assert where == {
        "checksum.zst": f"a frame starting at byte {len(one)} is cut off at byte {len(two) - 2}); what came before it is read",
        "first-block.zst": "a frame starting at byte 0 is cut off at byte 5000); what came before it is read",
        "head.zst": "a frame starting at byte 0 is cut off in its header); what came before it is read",
        "later.zst": f"a frame starting at byte 0 is cut off at byte {len(one) * 2 // 3}); what came before it is read"}
    assert [n for n, r, _ in rows if r != "corrupt_input"] == []
    got = dict(_q(out, "SELECT regexp_extract(source, '[^/]+$'), count(*) FROM trajectories GROUP BY 1"))
    assert (got["between.zst"], got["whole.zst"], got["checksum.zst"]) == (3000, 3001, 3001)  # only its checksum is cut
    assert 0 < got["later.zst"] < 3000 and "first-block.zst" not in got


def test_a_truncated_tar_gz_keeps_the_members_before_the_cut(tmp_path: Path) -> None:
    # the download of a .tar.gz stopped inside its last member: the members before it are whole
    rng = random.Random(0)
    members = {"a.jsonl": _chat_line(1) + _chat_line(2), "b.jsonl": _chat_line(3),
               "c.jsonl": b"".join(_chat_line(rng.getrandbits(512)) for _ in range(400))}  # hardly compressible
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    data = buf.getvalue()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "cut.tar.gz").write_bytes(data[: len(data) // 2])  # c.jsonl is most of the bytes
    out = tmp_path / "c"
    s = ingest([tmp_path / "in"], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (5, 3, 2)
    rows = _q(out, "SELECT locator, reason, detail FROM quarantine ORDER BY locator")
    assert [r[:2] for r in rows] == [("$", "corrupt_input"), ("member:c.jsonl", "corrupt_input")]
    assert "the gzip data breaks off after" in rows[0][2] and "(EOFError: " in rows[0][2]
    assert "the archive breaks off after 2 members, in c.jsonl (ReadError: unexpected end of data)" in rows[1][2]
    assert sorted(r[0].rsplit("!", 1)[1] for r in _q(out, "SELECT source FROM trajectories")) == [
        "a.jsonl", "a.jsonl", "b.jsonl"]


def test_a_file_in_a_tar_and_out_of_it_gives_distinct_ids(tmp_path: Path) -> None:
    """A member's ids come from the archive and its place in it: the same file as an input of its own, in
    another archive, or twice in one archive gave the same trajectory ids (the unique-id contract failed)."""
    from pipelines.contracts import run_contracts

    data = _chat_line(1) + _chat_line(2)
    (tmp_path / "x.jsonl").write_bytes(data)

    def tar(name: str, members: list[str]) -> Path:
        with tarfile.open(tmp_path / name, "w") as t:
            for m in members:
                info = tarfile.TarInfo(m)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        return tmp_path / name

    corpus = tmp_path / "c"
    for inputs in ([tmp_path / "x.jsonl"], [tar("one.tar", ["x.jsonl"])], [tar("two.tar", ["a/x.jsonl", "b/x.jsonl"])]):
        s = ingest(inputs, corpus, IngestConfig(workers=1), progress=False)
        assert (s.new_inputs, s.trajectories, s.quarantined) == (1, 2 * (1 + (inputs[0].name == "two.tar")), 0)
    assert _q(corpus, "SELECT count(*), count(DISTINCT trajectory_id) FROM trajectories") == [(8, 8)]
    assert {r.name: r.passed for r in run_contracts(corpus)}["unique_trajectory_id"]
    again = ingest([tmp_path / "two.tar"], tmp_path / "c2", IngestConfig(workers=1), progress=False)  # stable
    assert _q(tmp_path / "c2", "SELECT trajectory_id FROM trajectories ORDER BY 1") == \
        _q(corpus, "SELECT trajectory_id FROM trajectories WHERE source LIKE '%two.tar!%' ORDER BY 1")
    assert again.trajectories == 4


def test_tar_member_escaping_the_archive(tmp_path: Path, sample: Path) -> None:
    tar_path = tmp_path / "traces.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tar:
        tar.add(sample / SWE, arcname="ok/a.traj")
        tar.add(sample / SWE2, arcname="../../evil.traj")
    out = tmp_path / "c"
    s = ingest([tar_path], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (2, 1, 1)
    detail = _assert_quarantined(out, "unsafe_archive_member", "traces.tar.gz", "member:../../evil.traj")
    assert "path escapes the archive" in detail
    assert not (tmp_path / "evil.traj").exists()
    assert _q(out, "SELECT source FROM trajectories")[0][0] == f"{tar_path}!ok/a.traj"


def test_a_tar_that_breaks_off_keeps_the_members_before(inbox: Path, tmp_path: Path, sample: Path) -> None:
    # tarfile's errors are no OSError: a truncated archive once ended the run
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(sample / SWE, arcname="ok/a.traj")
        tar.add(sample / SWE2, arcname="ok/b.traj")
    data = buf.getvalue()
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        second = tar.getmembers()[1]
    (inbox / "cut.tar").write_bytes(data[: second.offset_data + 1000])  # b.traj's header, then 1000 of its bytes
    out = tmp_path / "c"
    s = ingest([inbox], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (4, 3, 1)
    detail = _assert_quarantined(out, "corrupt_input", "cut.tar", "member:ok/b.traj")
    assert detail.endswith("the archive breaks off after 1 members, in ok/b.traj (ReadError: unexpected end of data); "
                           "the rest is not read")
    assert sorted(Path(r[0]).name for r in _q(out, "SELECT source FROM trajectories")) == ["a.traj", "a.traj", "b.traj"]


def test_compressed_inputs_are_detected_by_content(tmp_path: Path, sample: Path) -> None:
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.bin").write_bytes(gzip.compress((sample / SWE).read_bytes()))
    (d / "b.data").write_bytes(zstandard.ZstdCompressor().compress((sample / SWE2).read_bytes()))
    (d / "c.x").write_bytes(bz2.compress((sample / SWE).read_bytes()))
    (d / "d.y").write_bytes(lzma.compress((sample / SWE2).read_bytes()))
    out = tmp_path / "c"
    s = ingest([d], out, progress=False)
    assert (s.trajectories, s.turns, s.quarantined) == (4, 24, 0)  # 5 and 7 turns, each file twice
    assert _q(out, "SELECT regexp_extract(source, '[^/]+$'), num_turns FROM trajectories ORDER BY 1") == [
        ("a.bin", 5), ("b.data", 7), ("c.x", 5), ("d.y", 7)]


def test_parallel_workers_write_the_same_rows(inbox: Path, tmp_path: Path, sample: Path) -> None:
    for i, name in enumerate(sorted(os.listdir(sample / "swe-agent"))):
        shutil.copy(sample / "swe-agent" / name, inbox / f"x{i}.traj")
    one = ingest([inbox], tmp_path / "one", IngestConfig(workers=1), progress=False)
    two = ingest([inbox], tmp_path / "two", IngestConfig(workers=2, task_bytes=1), progress=False)
    assert (one.trajectories, one.turns) == (two.trajectories, two.turns)
    sql = "SELECT trajectory_id, turn_index, action, observation FROM turns ORDER BY ALL"
    assert _q(tmp_path / "one", sql) == _q(tmp_path / "two", sql)


def test_cli_exit_codes_and_json_query(inbox: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "c"
    assert main(["ingest", str(inbox), "--out", str(out), "--quiet"]) == 0
    (inbox / "junk.txt").write_text("junk")
    assert main(["ingest", str(inbox), "--out", str(out), "--quiet"]) == 3
    assert "records in 1 = accepted 0 + quarantined 1" in capsys.readouterr().out
    assert main(["query", str(out), "SELECT domain, count(*) AS n FROM trajectories GROUP BY 1 ORDER BY 1", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"domain": "swe", "n": 1}, {"domain": "terminal", "n": 1}]
    assert main(["ingest", str(tmp_path / "nope"), "--out", str(out)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["query", str(out), "SELEC 1"]) == 1  # the SQL's error, not a traceback
    assert capsys.readouterr().err.startswith('worldline query: error: Parser Error: syntax error at or near "SELEC"')
    assert main(["query", str(out), "SELECT nope FROM trajectories"]) == 1
    assert 'Referenced column "nope" not found' in capsys.readouterr().err
    assert main(["stats", str(out)]) == 0
    assert "unknown_format" in capsys.readouterr().out


def test_discover_skips_vanished_entries_but_raises_on_unreadable_ones() -> None:
    # as Path.is_dir: a missing entry or a symlink loop is simply not a directory; EACCES must not
    # drop an input unseen (it would be in no count and no quarantine row)
    import errno

    from pipelines.reader import _is

    def failing(code: int):
        def test() -> bool:
            raise OSError(code, os.strerror(code))
        return test

    assert _is(failing(errno.ENOENT)) is False and _is(failing(errno.ELOOP)) is False
    with pytest.raises(PermissionError):
        _is(failing(errno.EACCES))


def test_a_symlink_back_up_the_tree_is_walked_once(tmp_path: Path) -> None:
    # each directory once, however many links lead back to it: the walk used to follow `up` until the
    # kernel's 40-link limit (41 copies of every input), and with two such links it doubled per level
    from pipelines.reader import discover

    d = tmp_path / "in" / "d"
    d.mkdir(parents=True)
    (d / "a.jsonl").write_bytes(_chat_line(1))
    (tmp_path / "in" / "b.jsonl").write_bytes(_chat_line(2))
    (d / "up").symlink_to("..")
    units = [u.path.relative_to(tmp_path) for u in discover([d])]
    assert units == [Path("in/d/a.jsonl"), Path("in/d/up/b.jsonl")]  # links to data elsewhere are followed


def test_folder_entries_that_are_not_files_are_counted_and_quarantined(tmp_path: Path) -> None:
    # a dangling link and a named pipe were dropped unseen: in no count and no quarantine row (a pipe is never opened)
    d = tmp_path / "in"
    d.mkdir()
    (d / "a.jsonl").write_bytes(_chat_line(1))
    (d / "dangling.json").symlink_to(tmp_path / "gone.json")
    (d / "loop.json").symlink_to(d / "loop.json")
    os.mkfifo(d / "pipe.jsonl")
    (d / "to-pipe.jsonl").symlink_to(d / "pipe.jsonl")
    (d / "old.json").symlink_to(tmp_path / "pipe-dumps" / "old.json")  # dangling: no pipe hint for its target's name
    s = ingest([d], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert (s.inputs, s.records, s.trajectories, s.quarantined, s.reasons) == (6, 6, 1, 5, {"not_a_file": 5})
    hint = " (write a pipe's content to a file first: `... > traces.jsonl`)"
    assert sorted(run_query(tmp_path / "c", "SELECT detail FROM quarantine")[1]) == [
        (f"{d / 'dangling.json'}: a symbolic link to {str(tmp_path / 'gone.json')!r}, which does not exist; "
         "only files and folders are read",),
        (f"{d / 'loop.json'}: a symbolic link in a loop; only files and folders are read",),
        (f"{d / 'old.json'}: a symbolic link to {str(tmp_path / 'pipe-dumps' / 'old.json')!r}, which does not exist; "
         "only files and folders are read",),
        (f"{d / 'pipe.jsonl'}: a named pipe (FIFO); only files and folders are read{hint}",),
        (f"{d / 'to-pipe.jsonl'}: a symbolic link to a named pipe (FIFO); only files and folders are read{hint}",)]
    again = ingest([d], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert (again.new_inputs, again.skipped_inputs) == (0, 6)


def test_a_pipe_given_as_an_input_is_quarantined_and_poisons_nothing(tmp_path: Path) -> None:
    """`worldline ingest /dev/stdin` (or `<(...)`, a FIFO): hashing read the pipe to its end, reading it again
    found nothing, and the row was keyed by the content's sha256, so the real file was then skipped as
    already ingested. A pipe is a not_a_file row (nothing opened), and the file imports after it."""
    import subprocess
    import sys

    f = tmp_path / "chat.jsonl"
    f.write_bytes(_chat_line(1) + _chat_line(2))
    corpus = tmp_path / "c"
    r = subprocess.run(f"cat {f} | {sys.executable} -m pipelines.cli ingest /dev/stdin --out {corpus} --quiet",
                       shell=True, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3, r.stderr
    [(detail,)] = run_query(corpus, "SELECT detail FROM quarantine")[1]
    assert detail.startswith("/dev/stdin: a symbolic link to a named pipe (FIFO); only files and folders are read")
    os.mkfifo(tmp_path / "fifo")
    s = ingest([tmp_path / "fifo"], corpus, IngestConfig(workers=1), progress=False)  # never opened: no hang
    assert (s.quarantined, s.reasons) == (1, {"not_a_file": 1})
    s = ingest([f], corpus, IngestConfig(workers=1), progress=False)
    assert (s.new_inputs, s.trajectories) == (1, 2)


def test_a_corpus_inside_its_inputs_is_not_read_as_input(inbox: Path, tmp_path: Path, capsys) -> None:
    # `ingest data --out data/corpus`, twice: the corpus's own Parquet files and manifest were read
    # as inputs of unknown format the second time
    out = inbox / "corpus"
    first = ingest([inbox], out, progress=False)
    again = ingest([inbox], out, progress=False)
    assert (first.records, first.quarantined) == (2, 0)
    assert (again.inputs, again.skipped_inputs, again.records) == (2, 2, 0)
    (tmp_path / "a-file").write_text("")
    assert main(["ingest", str(inbox), "--out", str(tmp_path / "a-file")]) == 1
    assert capsys.readouterr().err == f"worldline ingest: error: {tmp_path / 'a-file'} is a file, not a corpus directory\n"


def test_an_ingest_that_adds_nothing_still_leaves_a_corpus(tmp_path: Path, capsys) -> None:
    # an empty input directory: the next stages once said "not a corpus; create one with worldline ingest"
    (tmp_path / "empty").mkdir()
    out = tmp_path / "c"
    s = ingest([tmp_path / "empty"], out, progress=False)
    assert (s.inputs, s.records) == (0, 0)
    assert main(["query", str(out), "SELECT count(*) AS n FROM trajectories", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"n": 0}]
    assert main(["stats", str(out)]) == 0


def test_file_names_that_are_not_utf8(tmp_path: Path) -> None:
    # a Latin-1 name (an old system, an old tar) once ended the run: Python keeps its byte as a lone
    # surrogate, which neither Arrow nor the JSON manifest can hold
    d = tmp_path / "in"
    d.mkdir()
    (d / os.fsdecode(b"caf\xe9.jsonl")).write_bytes(_chat_line(1))
    with tarfile.open(d / "old.tar", "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as tar:
        for name in ("na\xefve.jsonl", "../\xe9vil.jsonl"):
            info = tarfile.TarInfo(name)
            info.size = len(_chat_line(2))
            tar.addfile(info, io.BytesIO(_chat_line(2)))
    out = tmp_path / "c"
    s = ingest([d], out, progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (3, 2, 1)
    assert sorted(r[0] for r in _q(out, "SELECT source FROM trajectories")) == [
        f"{d}/caf\\xe9.jsonl", f"{d}/old.tar!na\\xefve.jsonl"]
    assert _q(out, "SELECT locator, reason FROM quarantine") == [("member:../\\xe9vil.jsonl", "unsafe_archive_member")]


def test_a_record_arrow_cannot_hold_is_quarantined_and_the_rest_kept(tmp_path: Path) -> None:
    # a tool-call id that is an object (valid JSON, not text): the batch Arrow refuses is read again with every
    # record checked; that record goes to quarantine naming its turn, the group's other records stay
    from pipelines.query import connect

    good = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": None, "tool_calls": [
                             {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                         {"role": "tool", "tool_call_id": "a", "content": "ok"}]}
    bad = json.loads(json.dumps(good))
    bad["messages"][1]["tool_calls"][0]["id"] = {"n": 7}
    bad["messages"][2]["tool_call_id"] = {"n": 7}
    src = tmp_path / "in"
    src.mkdir()
    (src / "chat.jsonl").write_text("\n".join(json.dumps(x) for x in (good, bad, good | {"id": "g2"})) + "\n")
    s = ingest([src], tmp_path / "corpus", IngestConfig(workers=1), progress=False)
    assert (s.records, s.trajectories, s.quarantined, s.turns) == (3, 2, 1, 2)
    con = connect(tmp_path / "corpus")
    ((locator, reason, detail),) = con.sql("SELECT locator, reason, detail FROM quarantine").fetchall()
    assert (locator, reason) == ("line:2", "bad_value")
    assert detail.endswith("line:2: turn 0 (messages[1].tool_calls[0]+messages[2]): tool_call_id must be text, got dict {'n': 7}")
    assert con.sql("SELECT count(*) FROM turns").fetchall() == [(2,)]
    # the first attempt's files are gone: every file in the corpus is in the manifest
    assert sorted(str(p.relative_to(tmp_path / "corpus")) for p in (tmp_path / "corpus").rglob("*.parquet")) == sorted(
        f["path"] for b in json.loads((tmp_path / "corpus" / "manifest.json").read_text())["batches"] for f in b["files"])


def test_an_unreadable_input_is_quarantined_and_the_others_imported(tmp_path: Path, sample: Path) -> None:
    # one file the user may not read took the whole run down with a PermissionError traceback

    d = tmp_path / "in"
    d.mkdir()
    shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", d / "ok.traj")
    shutil.copy(sample / "swe-agent" / "function_calling_simple.traj", d / "secret.traj")
    (d / "secret.traj").chmod(0)
    run = _ingest_unprivileged([d], tmp_path / "c")
    assert run.returncode == 3, run.stderr
    assert "records in 2 = accepted 1 + quarantined 1" in run.stdout
    [(source, locator, reason, detail)] = run_query(tmp_path / "c", "SELECT source, locator, reason, detail FROM quarantine")[1]
    assert (source, locator, reason) == (str(d / "secret.traj"), "$", "unreadable")
    assert detail.endswith(f"[Errno 13] Permission denied: '{d / 'secret.traj'}'")
    (d / "secret.traj").chmod(0o644)  # once it can be read, the next ingest imports it
    again = ingest([d], tmp_path / "c", progress=False)
    assert (again.new_inputs, again.trajectories) == (1, 1)
    _failed_read_superseded(tmp_path / "c", str(d / "secret.traj"))


def _failed_read_superseded(corpus: Path, source: str, by: str | None = None) -> None:
    """The failed read's row stayed in the quarantine view (a corpus with nothing missing read 33%
    quarantined, and `check`'s rate contract failed for good): its input is `superseded_by` the one read
    since, and the view, the rate and the counts' reconciliation leave it out."""
    from pipelines.contracts import counts_reconcile, quarantine_rate

    entries = json.loads((corpus / "manifest.json").read_text())["inputs"]
    [(old, failed)] = [(k, e) for k, e in entries.items() if e["source"] == source and e["trajectories"] == 0]
    [(new, read)] = [(k, e) for k, e in entries.items() if e["source"].startswith(by or source) and e["trajectories"] == 1]
    # a folder that could not be listed is superseded by the run that listed it; a file or archive by its read
    assert failed["superseded_by"] == (f"listed by {read['batch']}" if "folder" in failed else new)
    assert "superseded_by" not in read
    assert run_query(corpus, "SELECT count(*) FROM quarantine")[1] == [(0,)]
    rate = quarantine_rate(Corpus(corpus))
    assert rate.passed and rate.metadata["quarantined"] == 0
    assert counts_reconcile(Corpus(corpus)).passed


def test_an_unreadable_sub_folder_is_quarantined_and_the_rest_imported(tmp_path: Path, sample: Path) -> None:
    # a folder inside an input the user may not list stopped the whole run ("error: Permission denied", exit 1)

    d = tmp_path / "in"
    (d / "private" / "deeper").mkdir(parents=True)
    shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", d / "ok.traj")
    shutil.copy(sample / "swe-agent" / "function_calling_simple.traj", d / "private" / "deeper" / "later.traj")
    shutil.copy(sample / "swe-agent" / "pydicom__pydicom-1458.traj", d / "zz.traj")
    # a link into it, before the files: its type cannot be told (it ended the folder's walk, `zz.traj` unseen)
    (d / "link.traj").symlink_to(d / "private" / "deeper" / "later.traj")
    (d / "private").chmod(0)
    try:
        run = _ingest_unprivileged([d], tmp_path / "c")
    finally:
        (d / "private").chmod(0o755)
    assert run.returncode == 3, run.stderr
    assert "records in 4 = accepted 2 + quarantined 2" in run.stdout
    assert run_query(tmp_path / "c", "SELECT source, locator, reason, detail FROM quarantine ORDER BY source")[1] == [
        (str(d / "link.traj"), "$", "unreadable", f"{d / 'link.traj'}: an entry that cannot be examined (Permission denied); not read"),
        (str(d / "private"), "$", "unreadable", f"{d / 'private'}: a folder that cannot be read (Permission denied); not read")]
    assert sorted(r[0] for r in run_query(tmp_path / "c", "SELECT source FROM trajectories")[1]) == [str(d / "ok.traj"), str(d / "zz.traj")]
    again = ingest([d], tmp_path / "c", progress=False)  # once it can be listed, its files are read (the link's: the same)
    assert (again.new_inputs, again.trajectories, again.duplicate_inputs) == (1, 1, 1)
    # the link comes first in the walk: the content is recorded under its name, and supersedes both failed reads
    _failed_read_superseded(tmp_path / "c", str(d / "private"), by=str(d / "link.traj"))
    _failed_read_superseded(tmp_path / "c", str(d / "link.traj"))


def test_an_archive_this_machine_cannot_extract_is_tried_again(tmp_path: Path) -> None:
    """No room to extract an archive's members (here a file size limit: `write` fails with EFBIG, as
    with ENOSPC on a full TMPDIR) is no damage to the archive: it was a `corrupt_input` row, the
    members extracted before it imported, the rest lost for good (the archive recorded as ingested)."""
    import io
    import resource
    import subprocess
    import sys
    import tarfile

    members = {f"part{k}.jsonl": b"".join(_chat_line(k * 1000 + i) for i in range(1000)) for k in range(3)}
    assert all(len(data) > 300_000 for data in members.values())
    with tarfile.open(tmp_path / "runs.tar.gz", "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

    def small_files() -> None:  # the corpus's own files (one quarantine row, a manifest) stay far below it
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))

    cmd = [sys.executable, "-m", "pipelines.cli", "ingest", str(tmp_path / "runs.tar.gz"), "--out", str(tmp_path / "c"),
           "--quiet", "--workers", "1"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120,
                         preexec_fn=small_files)
    assert run.returncode == 3, run.stderr
    assert "records in 1 = accepted 0 + quarantined 1" in run.stdout
    [(locator, reason, detail)] = run_query(tmp_path / "c", "SELECT locator, reason, detail FROM quarantine")[1]
    assert (locator, reason) == ("$", "extraction_failed")
    assert detail.startswith(f"{tmp_path / 'runs.tar.gz'}: its members could not be written to ")
    assert detail.endswith("(File too large): free space there or set TMPDIR to a folder with room; nothing of the "
                           "archive is read, and the next ingest tries it again")
    from pipelines.contracts import counts_reconcile, quarantine_rate

    # failing again is a second row, and the manifest counts both (one entry per attempt: it held one)
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120,
                         preexec_fn=small_files)
    assert run.returncode == 3 and run_query(tmp_path / "c", "SELECT count(*) FROM quarantine")[1] == [(2,)]
    assert counts_reconcile(Corpus(tmp_path / "c")).passed
    # read from another place (moved): its content is what the failed reads wait for, wherever it lies
    (tmp_path / "moved").mkdir()
    (tmp_path / "runs.tar.gz").rename(tmp_path / "moved" / "runs.tar.gz")
    again = ingest([tmp_path / "moved" / "runs.tar.gz"], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert (again.new_inputs, again.trajectories, again.quarantined) == (1, 3000, 0)
    assert run_query(tmp_path / "c", "SELECT count(DISTINCT trajectory_id), count(*) FROM trajectories")[1] == [(3000, 3000)]
    assert ingest([tmp_path / "moved" / "runs.tar.gz"], tmp_path / "c", progress=False).new_inputs == 0  # read once
    assert run_query(tmp_path / "c", "SELECT count(*) FROM quarantine")[1] == [(0,)]  # both failed extractions: superseded
    assert quarantine_rate(Corpus(tmp_path / "c")).passed and counts_reconcile(Corpus(tmp_path / "c")).passed
    (tmp_path / "moved" / "runs.tar.gz").rename(tmp_path / "runs.tar.gz")
    # another archive at a place that failed: the failed one's data is still missing, and its row stays
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("big.jsonl")
        info.size = len(members["part0.jsonl"])
        tar.addfile(info, io.BytesIO(members["part0.jsonl"]))
    other = [*cmd[:cmd.index(str(tmp_path / "runs.tar.gz"))], str(tmp_path / "other.tar.gz"), *cmd[cmd.index(str(tmp_path / "runs.tar.gz")) + 1:]]
    assert subprocess.run(other, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120,
                          preexec_fn=small_files).returncode == 3
    with tarfile.open(tmp_path / "other.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "runs.tar.gz", arcname="replaced.tar.gz")  # small enough now, and other content
    assert ingest([tmp_path / "other.tar.gz"], tmp_path / "c", IngestConfig(workers=1), progress=False).new_inputs == 1
    assert run_query(tmp_path / "c", "SELECT source, reason FROM quarantine")[1] == [(str(tmp_path / "other.tar.gz"), "extraction_failed")]
    assert counts_reconcile(Corpus(tmp_path / "c")).passed
    # inside another archive, which is read and recorded whole, it is not tried again: the row says so
    inner = (tmp_path / "runs.tar.gz").read_bytes()
    with tarfile.open(tmp_path / "outer.tar", "w") as tar:
        for name, data in (("runs.tar.gz", inner), ("small.jsonl", _chat_line(99_999))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    cmd[cmd.index(str(tmp_path / "runs.tar.gz"))] = str(tmp_path / "outer.tar")
    cmd[cmd.index(str(tmp_path / "c"))] = str(tmp_path / "c2")
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], timeout=120,
                         preexec_fn=small_files)
    assert run.returncode == 3, run.stderr
    assert "records in 2 = accepted 1 + quarantined 1" in run.stdout
    [(source, reason, detail)] = run_query(tmp_path / "c2", "SELECT source, reason, detail FROM quarantine")[1]
    assert (source, reason) == (f"{tmp_path / 'outer.tar'}!runs.tar.gz", "extraction_failed")
    assert detail.endswith("(File too large): free space there or set TMPDIR to a folder with room; nothing of it is read, and "
                           "as it lies inside an archive that was read, no later ingest of that archive reads it: extract it "
                           "and ingest it on its own once there is room")


def test_a_failed_read_is_superseded_by_a_read_of_the_same_place_only(tmp_path: Path, sample: Path, monkeypatch) -> None:
    """Matched by resolved path: another project's `in/secret.traj` (the same name from another working
    folder) hid the row; the same file given by its absolute path did not; and a file read fine, then
    unreadable, then readable again (its content in the corpus all along) kept its row for good."""

    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "in").mkdir(parents=True)
        shutil.copy(sample / "swe-agent" / "ctf_pwn_warmup.traj", root / "in" / "ok.traj")
    shutil.copy(sample / "swe-agent" / "function_calling_simple.traj", a / "in" / "secret.traj")
    shutil.copy(sample / "swe-agent" / "pydicom__pydicom-1458.traj", b / "in" / "secret.traj")
    corpus = tmp_path / "c"

    def ingest_unprivileged(cwd: Path) -> None:
        run = _ingest_unprivileged(["in"], corpus, cwd)
        assert run.returncode in (0, 3), run.stderr

    def open_rows() -> list[tuple]:
        return run_query(corpus, "SELECT source, reason FROM quarantine ORDER BY ALL")[1]

    (a / "in" / "secret.traj").chmod(0)
    try:
        ingest_unprivileged(a)
        assert open_rows() == [("in/secret.traj", "unreadable")]
        monkeypatch.chdir(b)
        ingest([Path("in")], corpus, IngestConfig(workers=1), progress=False)  # b's in/secret.traj: another file
        assert open_rows() == [("in/secret.traj", "unreadable")]
    finally:
        (a / "in" / "secret.traj").chmod(0o644)
    s = ingest([a / "in"], corpus, IngestConfig(workers=1), progress=False)  # the same file, by another spelling
    assert (s.new_inputs, s.trajectories, open_rows()) == (1, 1, [])
    # read fine, then unreadable, then readable again with the same content: a run that adds nothing supersedes
    # (touched: an unreadable file's key is its path, size and time, and this one's first failed read is superseded)
    os.utime(a / "in" / "secret.traj", (1_700_000_000, 1_700_000_000))
    (a / "in" / "secret.traj").chmod(0)
    try:
        ingest_unprivileged(a)
        assert open_rows() == [("in/secret.traj", "unreadable")]
    finally:
        (a / "in" / "secret.traj").chmod(0o644)
    s = ingest([a / "in"], corpus, IngestConfig(workers=1), progress=False)
    assert (s.new_inputs, open_rows()) == (0, [])
    from pipelines.contracts import counts_reconcile, quarantine_rate

    assert quarantine_rate(Corpus(corpus)).passed and counts_reconcile(Corpus(corpus)).passed


def test_a_folder_that_could_not_be_listed_waits_for_a_listing(tmp_path: Path) -> None:
    """A folder's failed read was superseded by a read of one file in it (its other files never read, nothing
    said), an empty one's row stayed for good, and a file added to it while still unreadable went unseen."""

    d = tmp_path / "in"
    (d / "private").mkdir(parents=True)
    (d / "empty").mkdir()
    (d / "ok.jsonl").write_bytes(_chat_line(0))
    (d / "private" / "a.jsonl").write_bytes(_chat_line(1))
    (d / "private" / "b.jsonl").write_bytes(_chat_line(2))
    corpus = tmp_path / "c"

    def unprivileged(*paths: Path) -> None:
        run = _ingest_unprivileged(list(paths), corpus)
        assert run.returncode in (0, 3), run.stderr

    def open_rows() -> list[tuple]:
        return sorted(run_query(corpus, "SELECT source FROM quarantine")[1])

    (d / "private").chmod(0o311)  # its files can be opened by name, the folder not listed
    (d / "empty").chmod(0)
    try:
        unprivileged(d)
        assert open_rows() == [(str(d / "empty"),), (str(d / "private"),)]
        unprivileged(d / "private" / "a.jsonl")  # one file of it read: the folder is not listed, b.jsonl unread
        assert open_rows() == [(str(d / "empty"),), (str(d / "private"),)]
        (d / "private" / "c.jsonl").write_bytes(_chat_line(3))  # added while it cannot be listed: said again
        unprivileged(d)
        assert open_rows() == [(str(d / "empty"),), (str(d / "private"),), (str(d / "private"),)]
    finally:
        (d / "private").chmod(0o755)
        (d / "empty").chmod(0o755)
    s = ingest([d], corpus, IngestConfig(workers=1), progress=False)  # listed: both folders, an empty one too
    assert (s.new_inputs, open_rows()) == (2, [])  # b and c (a was read before)
    assert sorted(r[0] for r in run_query(corpus, "SELECT source FROM trajectories")[1]) == [
        str(d / "ok.jsonl"), str(d / "private" / "a.jsonl"), str(d / "private" / "b.jsonl"), str(d / "private" / "c.jsonl")]
    from pipelines.contracts import counts_reconcile, quarantine_rate

    assert quarantine_rate(Corpus(corpus)).passed and counts_reconcile(Corpus(corpus)).passed


def test_a_symbolic_link_loop_given_as_an_input_is_quarantined(tmp_path: Path) -> None:
    # `ingest ./*` picking up a link loop ended in a RuntimeError traceback ("Symlink loop from ...") before reading anything
    (tmp_path / "a.jsonl").write_bytes(_chat_line(1))
    (tmp_path / "loopA").symlink_to(tmp_path / "loopB")
    (tmp_path / "loopB").symlink_to(tmp_path / "loopA")
    s = ingest([tmp_path / "a.jsonl", tmp_path / "loopA"], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert (s.inputs, s.trajectories, s.quarantined, s.reasons) == (2, 1, 1, {"not_a_file": 1})
    assert run_query(tmp_path / "c", "SELECT detail FROM quarantine")[1] == [
        (f"{tmp_path / 'loopA'}: a symbolic link in a loop; only files and folders are read",)]


def test_inputs_inside_the_corpus_and_bad_options_are_refused(tmp_path: Path, sample: Path, capsys) -> None:
    d = tmp_path / "in2"
    shutil.copytree(sample / "tau-bench", d)
    assert main(["ingest", str(d), "--out", str(d)]) == 1  # read nothing and said "0 inputs", exit 0
    assert capsys.readouterr().err == (f"worldline ingest: error: input {d} is the corpus --out {d} or inside it; "
                                       "write the corpus elsewhere (inside the input folder is fine)\n")
    assert not (d / "manifest.json").exists()
    for args, message in [(["--max-record-mb", "0"], "--max-record-mb must be positive (got 0 MB)"),
                          (["--max-record-mb", "-1"], "--max-record-mb must be positive (got -1 MB)"),
                          (["--max-record-mb", "inf"], "--max-record-mb must be a finite number of MB (got inf)"),
                          (["--task-mb", "nan"], "--task-mb must be a finite number of MB (got nan)"),
                          (["--workers", "-1"], "--workers must be 0 (automatic) or more (got -1)")]:
        assert main(["ingest", str(d), "--out", str(tmp_path / "c"), *args]) == 1
        assert capsys.readouterr().err == f"worldline ingest: error: {message}\n"
    assert not (tmp_path / "c").exists()


def test_domain_replaces_a_guess_but_not_a_recorded_environment(tmp_path: Path, sample: Path) -> None:
    s = ingest([sample / "swe-agent" / "pydicom__pydicom-1458.traj", sample / "droidbot"], tmp_path / "c",
               IngestConfig(domain_override="web"), progress=False)
    assert s.quarantined == 0
    assert run_query(tmp_path / "c", "SELECT source_format, domain FROM trajectories ORDER BY 1")[1] == [
        ("droidbot", "android"), ("swe-agent", "web")]


def test_paths_with_no_files_say_so(tmp_path: Path, capsys) -> None:
    (tmp_path / "inbox" / "sub").mkdir(parents=True)
    assert main(["ingest", str(tmp_path / "inbox"), "--out", str(tmp_path / "c")]) == 0  # nothing failed
    out = capsys.readouterr().out
    assert out.splitlines()[1:] == ["  records in 0 = accepted 0 + quarantined 0", "  turns 0",
                                    "  nothing to read: the paths given hold no files"]
    assert Corpus(tmp_path / "c").require().manifest()["batches"] == []  # an empty corpus the later stages read


def test_inputs_that_are_only_corpora_are_an_error_and_write_nothing(tmp_path: Path, sample: Path, capsys) -> None:
    """Before, an empty corpus was written and the run exited 0, as if the corpus had been copied."""
    old = tmp_path / "old"
    assert main(["ingest", str(sample / "intercode"), "--out", str(old), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ingest", str(old), "--out", str(tmp_path / "c")]) == 1
    assert capsys.readouterr().err == (f"worldline ingest: error: nothing to ingest: {old} is a Worldline corpus, not traces; "
                                       "`worldline query` reads a corpus, and `collect mcp --replay` replays one\n")
    assert not (tmp_path / "c").exists()


def test_the_corpus_report_beside_a_corpus_in_its_input_folder_is_not_read(tmp_path: Path, sample: Path) -> None:
    """`worldline report` writes beside the corpus: with the corpus inside its input folder, the report was
    read as an input (unknown_format, exit 3), a new one after every report."""
    from pipelines.report import write_report

    inbox = tmp_path / "in"
    shutil.copytree(sample / "intercode", inbox / "intercode")
    corpus = inbox / "corpus"
    assert ingest([inbox], corpus, IngestConfig(workers=1), progress=False).quarantined == 0
    assert write_report(corpus) == inbox / "report.html"
    s = ingest([inbox], corpus, IngestConfig(workers=1), progress=False)
    assert (s.inputs, s.new_inputs, s.quarantined) == (3, 0, 0)
    (inbox / "notes.html").write_text("<html>mine</html>")  # any other file is still an input
    assert ingest([inbox], corpus, IngestConfig(workers=1), progress=False).reasons == {"unknown_format": 1}


def test_a_corpus_among_the_inputs_is_not_read_and_is_named(tmp_path: Path, sample: Path, capsys) -> None:
    """Its Parquet parts and lock are no trace format: before, each was quarantined as unknown_format."""
    inbox = tmp_path / "inbox"
    shutil.copytree(sample / "tau-bench", inbox / "tau")
    assert main(["ingest", str(sample / "intercode"), "--out", str(inbox / "old-corpus"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["ingest", str(inbox), "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    assert f"  not read: 1 folder(s) that are Worldline corpora or outputs, not traces: {inbox / 'old-corpus'}" in out.splitlines()
    assert _q(tmp_path / "c", "SELECT count(*) FROM quarantine") == [(0,)]
    assert _q(tmp_path / "c", "SELECT DISTINCT source_format FROM trajectories") == [("tau-bench",)]
    # the corpus written inside its own input folder is not reported (it is the output, skipped as before)
    for _ in range(2):
        assert main(["ingest", str(inbox), "--out", str(inbox / "new-corpus")]) == 0
        said = capsys.readouterr().out
        assert f"  not read: 1 folder(s) that are Worldline corpora or outputs, not traces: {inbox / 'old-corpus'}" in said.splitlines()


def test_a_corpus_inside_a_claimed_folder_is_not_read_and_a_rerun_adds_nothing(tmp_path: Path, sample: Path) -> None:
    """A DroidBot output folder (claimed whole by its importer) holding the corpus: the corpus is
    skipped as anywhere else, so the second run reads nothing new and quarantines nothing."""
    d = tmp_path / "db"
    shutil.copytree(sample / "droidbot", d)
    first = ingest([d], d / "corpus", progress=False)
    again = ingest([d], d / "corpus", progress=False)
    assert (first.trajectories, first.quarantined, again.trajectories, again.quarantined) == (1, 0, 0, 0)
    assert _q(d / "corpus", "SELECT (SELECT count(*) FROM trajectories), (SELECT count(*) FROM quarantine)") == [(1, 0)]


def test_entries_of_a_claimed_folder_that_are_no_files_each_have_a_row(tmp_path: Path, sample: Path) -> None:
    """Beside a DroidBot session: a pipe and a dangling link are `not_a_file` rows, as in any folder; an
    event file that is a dangling link or a pipe costs only itself, and the session keeps its 41 turns."""
    d = tmp_path / "db"
    shutil.copytree(sample / "droidbot", d)
    os.mkfifo(d / "pipe")
    (d / "dangling").symlink_to("/nonexistent")
    (d / "events" / "event_2099-01-01_000000.json").symlink_to("/nonexistent")
    os.mkfifo(d / "events" / "zz.json")
    s = ingest([d], tmp_path / "c", progress=False)
    assert (s.trajectories, s.quarantined, s.records) == (1, 4, 5)
    assert _q(tmp_path / "c", "SELECT source, locator, reason FROM quarantine ORDER BY ALL") == [
        (str(d), "events/event_2099-01-01_000000.json", "unreadable"), (str(d), "events/zz.json", "not_a_file"),
        (f"{d}/dangling", "$", "not_a_file"), (f"{d}/pipe", "$", "not_a_file")]
    assert _q(tmp_path / "c", "SELECT num_turns, metadata->>'unreadable_files' FROM trajectories") == [
        (41, '["events/event_2099-01-01_000000.json","events/zz.json"]')]


def test_an_export_in_the_input_folder_is_not_read_again(tmp_path: Path, sample: Path, capsys) -> None:
    """An export written into the input folder (the corpus may live there too) was ingested on the next
    run: its chat records as new trajectories, and the held-out evaluation set's rows with them."""
    inbox = tmp_path / "in"
    shutil.copytree(sample / "tau-bench", inbox / "tau-bench")
    corpus = inbox / "corpus"
    first = ingest([inbox], corpus, IngestConfig(workers=1), progress=False)
    assert main(["export", str(corpus), "--out", str(inbox / "export"), "--formats", "chat", "--quiet"]) == 0
    capsys.readouterr()
    again = ingest([inbox], corpus, IngestConfig(workers=1), progress=False)
    assert (again.new_inputs, again.trajectories) == (0, 0)
    assert again.corpora_skipped == [str(inbox / "export")]  # (the corpus written is not among them)
    assert run_query(corpus, "SELECT count(*) FROM trajectories")[1] == [(first.trajectories,)]


def test_zstd_that_starts_with_a_skippable_frame_is_read(tmp_path: Path) -> None:
    """pzstd (and the seekable format) write a skippable frame before the data: the input was
    `unknown_format`."""
    import struct

    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"ls\"}"}}
    lines = "".join(json.dumps({"messages": [{"role": "user", "content": f"list {i}"},
                                             {"role": "assistant", "content": "", "tool_calls": [call]},
                                             {"role": "tool", "tool_call_id": "c", "content": "a.txt"}]}) + "\n"
                    for i in range(3)).encode()
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"\x00\x00\x00\x00"
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "p.jsonl.zst").write_bytes(skippable + zstandard.ZstdCompressor().compress(lines))
    s = ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1, domain_override="terminal"), progress=False)
    assert (s.trajectories, s.turns, s.quarantined) == (3, 3, 0)


def test_an_input_that_goes_away_mid_run_is_one_row_and_read_when_it_is_back(tmp_path: Path, sample: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A file moved or made unreadable after it was hashed: its size raised outside the reader's error
    handling and the whole run ended with nothing committed; and one unreadable when read was recorded
    under the content's hash, so the next run skipped it for good once it was readable again."""
    from pipelines import ingest as ingest_module

    inbox = tmp_path / "in"
    shutil.copytree(sample / "intercode", inbox)
    victim = sorted(inbox.iterdir())[0]
    kept = tmp_path / "kept"
    real_groups = ingest_module._groups

    def groups_then_move(*a, **k):  # noqa: ANN002, ANN003, ANN202 - after hashing, before reading
        shutil.move(victim, kept)
        return real_groups(*a, **k)

    monkeypatch.setattr(ingest_module, "_groups", groups_then_move)
    first = ingest([inbox], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert first.reasons == {"unreadable": 1} and first.trajectories > 0
    monkeypatch.setattr(ingest_module, "_groups", real_groups)
    shutil.move(kept, victim)
    again = ingest([inbox], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert (again.new_inputs, again.quarantined) == (1, 0) and again.trajectories > 0
    whole = ingest([sample / "intercode"], tmp_path / "whole", IngestConfig(workers=1), progress=False)
    assert first.trajectories + again.trajectories == whole.trajectories


def test_a_sparse_tar_member_is_not_extracted(tmp_path: Path) -> None:
    """A sparse member is a few bytes in the archive and its whole size on disk: 107 bytes of tar.zst
    wrote 229 MB to the temporary folder (no ratio check sees it) before it was found to be no trace."""
    import subprocess

    (tmp_path / "src").mkdir()
    big = tmp_path / "src" / "holes.bin"
    with open(big, "wb") as f:
        f.truncate(64 * MIB)
    (tmp_path / "in").mkdir()
    subprocess.run(["tar", "--sparse", "-cf", str(tmp_path / "in" / "sp.tar"), "-C", str(tmp_path / "src"), "holes.bin"],
                   check=True)
    s = ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1), progress=False)
    assert s.reasons == {"unsafe_archive_member": 1}
    [(detail,)] = run_query(tmp_path / "c", "SELECT detail FROM quarantine")[1]
    assert detail.endswith(f"!holes.bin: a sparse file ({64 * MIB} bytes, mostly holes) is not extracted")


def test_an_archives_members_together_stay_under_the_decompression_limit(tmp_path: Path) -> None:
    """The limit held per member only: any number of members, each under it, filled the temporary folder."""
    from pipelines.sources import ReadLimits, extract_tar

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for i in range(3):
            info = tarfile.TarInfo(f"m{i}.jsonl")
            info.size = 400
            tar.addfile(info, io.BytesIO(b"x" * 400))
    buf.seek(0)
    (tmp_path / "out").mkdir()
    rejected = extract_tar(buf, tmp_path / "out", ReadLimits(max_decompressed_bytes=1000), "a.tar")
    assert [(r.member, r.reason) for r in rejected] == [("m2.jsonl", "decompression_limit")]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["m0.jsonl", "m1.jsonl"]


def test_an_interrupted_runs_archive_extractions_are_removed_by_the_next(tmp_path: Path, sample: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C kills the pool's workers (SIGTERM the process) before they remove the archive members they
    extracted: tens of MB per worker stayed in the temporary folder for good."""
    import subprocess
    import tempfile

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # read TMPDIR again
    try:
        gone = subprocess.Popen(["true"])
        gone.wait()  # a process id that has ended
        stale = tmp_path / "tmp" / f"worldline-tar-{gone.pid}-abc"
        mine = tmp_path / "tmp" / f"worldline-tar-{os.getpid()}-def"
        for d in (stale, mine):
            (d / "member").mkdir(parents=True)
        ingest([sample / "tau-bench"], tmp_path / "c", IngestConfig(workers=1), progress=False)
        assert (stale.exists(), mine.exists()) == (False, True)
    finally:
        tempfile.tempdir = None


def test_a_quarantine_message_is_one_line_whatever_the_file_is_called(tmp_path: Path) -> None:
    """A file name with a newline split the message in two, the second line free to look like another."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "evil\nquarantined $: fake: forged line").write_text("not json at all\n")
    said: list[str] = []
    ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1), progress=False, echo=said.append)
    assert len(said) == 1 and "\n" not in said[0] and "evil\\nquarantined $: fake" in said[0], said


@pytest.mark.parametrize("kind", ["empty", "v7"])
def test_an_empty_or_old_style_tar_is_read_as_a_tar(kind: str, tmp_path: Path, sample: Path) -> None:
    """An archive with no members was `unknown_format` (the README says `empty_input`), and a v7 tar (no
    `ustar` magic) was read as JSON lines: its records named after the archive, its first line quarantined."""
    import subprocess

    (tmp_path / "in").mkdir()
    if kind == "empty":
        subprocess.run(["tar", "-cf", str(tmp_path / "in" / "x.tar"), "--files-from", "/dev/null"], check=True)
        s = ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1), progress=False)
        assert (s.reasons, s.trajectories) == ({"empty_input": 1}, 0)
        return
    shutil.copy(sample / "tau-bench" / sorted(p.name for p in (sample / "tau-bench").iterdir())[0], tmp_path / "t.json")
    subprocess.run(["tar", "--format=v7", "-cf", str(tmp_path / "in" / "old.tar"), "-C", str(tmp_path), "t.json"], check=True)
    s = ingest([tmp_path / "in"], tmp_path / "c", IngestConfig(workers=1), progress=False)
    plain = ingest([tmp_path / "t.json"], tmp_path / "p", IngestConfig(workers=1), progress=False)
    assert (s.quarantined, s.trajectories) == (0, plain.trajectories) and plain.trajectories > 0
    assert {r[0] for r in run_query(tmp_path / "c", "SELECT source FROM trajectories")[1]} == {f"{tmp_path / 'in' / 'old.tar'}!t.json"}
