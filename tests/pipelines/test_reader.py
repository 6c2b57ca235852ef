"""The reader: the run's read limits reach the importers that read their own stream
(`ImportContext.limits`), and a broken first record takes no other record down.

Expected values come from the files themselves (line lengths, file sizes, TFRecord length fields,
the records of the unbroken fixture)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct
from pathlib import Path

import pytest

from pipelines.reader import SNIFF_AHEAD, discover, read_unit
from pipelines.sources import ReadLimits
from pipelines.store import CORPUS_FORMAT
from schemas.records import QuarantineRecord

DATA = Path(__file__).resolve().parents[1] / "data"


def _read(path: Path, max_record_bytes: int) -> list[tuple[str, str | None, str]]:
    (unit,) = discover([path])
    return [(type(r).__name__, getattr(r, "reason", None), r.locator)
            for r, _ in read_unit(unit, unit.sha256(), ReadLimits(max_record_bytes=max_record_bytes))]


def test_text_stream_importers_honour_the_runs_record_limit() -> None:
    # MCP traffic (JSON lines read by the importer): only the lines above the limit are quarantined
    traffic = DATA / "mcp-traffic" / "bare.jsonl"
    sizes = [len(line) for line in traffic.read_bytes().split(b"\n")]
    limit = sorted(sizes)[-1] - 1
    long_lines = [f"line:{i}" for i, n in enumerate(sizes, 1) if n > limit]
    got = _read(traffic, limit)
    assert [loc for kind, reason, loc in got if reason == "record_too_large"] == long_lines
    assert sum(kind == "Trajectory" for kind, _, _ in got) == 1

    # asciicast: a line above the limit ends the recording with record_too_large
    cast = DATA / "asciicast" / "bash_session.cast"
    lines = cast.read_bytes().splitlines(keepends=True)
    longest = max(len(line) for line in lines)
    assert _read(cast, longest) == [("Trajectory", None, "$")]
    assert _read(cast, longest - 1) == [("QuarantineRecord", "record_too_large", "$")]

    # uiautomator: the whole dump is one record
    dump = DATA / "uiautomator" / "settings_wifi.xml"
    size = dump.stat().st_size
    assert _read(dump, size)[0][0] == "Trajectory"
    assert _read(dump, size - 1) == [("QuarantineRecord", "record_too_large", "$")]

    # AndroidControl: a record whose length field is above the limit is skipped, the next ones read
    shard = DATA / "android-control" / "mixed_records.tfrecord"
    (first_len,) = struct.unpack("<Q", shard.read_bytes()[:8])
    at_limit, below = _read(shard, first_len), _read(shard, first_len - 1)
    assert at_limit[0] == ("Trajectory", None, "record:0")
    assert below[0] == ("QuarantineRecord", "record_too_large", "record:0")
    assert len(below) == len(at_limit)


def test_a_text_sniffer_that_raises_declines(monkeypatch) -> None:
    # every input's head goes past the raw-stream sniffers first; one that fails must not end the input
    from collectors.asciicast import AsciicastImporter

    def broken(self, head: bytes) -> bool:
        raise ValueError("sniffer bug")

    path = DATA / "chat" / "openai_tools.jsonl"
    expected = _read(path, ReadLimits().max_record_bytes)
    assert sum(kind == "Trajectory" for kind, _, _ in expected) == 3
    monkeypatch.setattr(AsciicastImporter, "sniff", broken)
    assert _read(path, ReadLimits().max_record_bytes) == expected


# ---------------------------------------------------------------------------------------------
# A broken first record takes no other record down. The reader (JSON lines, arrays of records) and
# the whole-document sniffers of files with many records look past it; each case breaks the first
# record of a real fixture and expects every other record exactly as it was, and one quarantine row
# at the broken record's locator that names the file.

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus"


def _records(path: Path) -> tuple[dict[str, tuple], list]:
    """(trajectories by locator, without the per-input record digest; quarantine rows)."""
    trajs: dict[str, tuple] = {}
    quarantined = []
    for unit in discover([path]):
        for r, _ in read_unit(unit, unit.sha256()):
            if isinstance(r, QuarantineRecord):
                quarantined.append(r)
            else:
                trajs[r.locator] = (r.source_format, r.domain, r.task, tuple(dataclasses.astuple(t) for t in r.turns))
    return trajs, quarantined


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write_lines(path: Path, recs: list) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _break_chat_line(src: Path, dst: Path) -> None:
    recs = _lines(src)
    recs[0]["messages"] = "not a list of messages"
    _write_lines(dst, recs)


def _cut_first_line(src: Path, dst: Path) -> None:
    lines = src.read_bytes().splitlines(keepends=True)
    dst.write_bytes(lines[0][: len(lines[0]) // 2] + b"\n" + b"".join(lines[1:]))


def _break_array_element(src: Path, dst: Path) -> None:
    doc = json.loads(src.read_text())
    doc[0]["conversations"] = 7
    dst.write_text(json.dumps(doc, indent=1))


def _break_first_task(src: Path, dst: Path) -> None:
    doc = json.loads(src.read_text())
    del doc[next(iter(doc))]["turn_history"]
    dst.write_text(json.dumps(doc, indent=1))


def _break_first_run(src: Path, dst: Path) -> None:
    doc = json.loads(src.read_text())
    doc[0]["traj"] = "not a list of messages"
    dst.write_text(json.dumps(doc, indent=1))


def _break_first_entry(src: Path, dst: Path) -> None:
    doc = json.loads(src.read_text())
    doc[next(iter(doc))] = "not an entry"
    dst.write_text(json.dumps(doc, indent=1))


def _break_first_method(src: Path, dst: Path) -> None:
    recs = _lines(src)
    recs[0]["message"]["method"] = None
    _write_lines(dst, recs)


BROKEN_FIRST = {
    # fixture: (how to break its first record, the first record's locator, the quarantine reason)
    "chat/openai_tools.jsonl": (_break_chat_line, "line:1", "malformed_record"),
    "chat-variants/tongyi_deepresearch_user_results.jsonl": (_cut_first_line, "line:1", "invalid_json"),
    "chat-variants/llamafactory_glaive_toolcall_en_demo.subset.json": (_break_array_element, "[0]", "malformed_record"),
    "sample:intercode/ic_ctf_gpt-4_25_turns.json": (_break_first_task, "key:0", "missing_field"),
    "tau-bench/react_and_minimal.json": (_break_first_run, "[0]", "malformed_record"),
    "fireact-variants/trajs_hotpotqa_dev_llama-2-13b.json": (_break_first_entry, None, "malformed_record"),
    "mcp-traffic/proxy-envelope.jsonl": (_break_first_method, "line:1", "invalid_jsonrpc"),
}


@pytest.mark.parametrize("fixture", sorted(BROKEN_FIRST))
def test_a_broken_first_record_takes_no_other_record_down(fixture: str, tmp_path: Path) -> None:
    breaks, locator, reason = BROKEN_FIRST[fixture]
    src = SAMPLE / fixture.removeprefix("sample:") if fixture.startswith("sample:") else DATA / fixture
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    before, q_before = _records(dst)
    assert len(before) >= 2
    breaks(src, dst)
    after, q_after = _records(dst)
    assert [(r.locator, r.reason) for r in q_after[1:]] == [(r.locator, r.reason) for r in q_before]
    q = q_after[0]
    first = locator or next(iter(before))
    assert (q.locator, q.reason) == (first, reason)
    assert str(dst) in q.detail
    kept = {loc: rec for loc, rec in before.items() if loc != first}
    if fixture.startswith("mcp-traffic"):
        # the session that began with the broken request now begins at its response (line 2)
        assert after.pop("line:2")[:3] == before["line:1"][:3]
    assert after == kept


def test_json_lines_of_no_known_format_are_one_quarantine_row(tmp_path: Path) -> None:
    few, many = tmp_path / "few.jsonl", tmp_path / "many.jsonl"
    _write_lines(few, [{"x": i} for i in range(3)])
    _write_lines(many, [{"x": i} for i in range(SNIFF_AHEAD + 10)])
    (_, [q]) = _records(few)
    assert (q.locator, q.reason) == ("line:1", "unknown_format")
    assert q.detail == f"{few} line 1: JSON matches no known trace format, nor do the next 2 JSON lines"
    (_, [q]) = _records(many)
    assert q.detail == (f"{many} line 1: JSON matches no known trace format, nor do the next {SNIFF_AHEAD - 1} "
                        "JSON lines; the rest of the input is not read")
    # lines that are not JSON are quarantined as such, the others as the input's one unknown_format row
    few.write_bytes(b'{"x": 1}\n{"x": \n{"x": 3}\n')
    assert [(q.locator, q.reason) for q in _records(few)[1]] == [("line:2", "truncated_json"), ("line:1", "unknown_format")]


def test_chat_records_with_no_messages_alone_are_what_they_are_among_others(tmp_path: Path) -> None:
    # `{"messages": []}` among other chat lines is a trajectory of no turns; a file of only such lines was
    # `unknown_format` (the chat sniffer wants messages to judge by)
    only, doc, mixed = tmp_path / "only.jsonl", tmp_path / "doc.json", tmp_path / "mixed.jsonl"
    _write_lines(only, [{"messages": []}, {"messages": [], "id": "b"}])
    doc.write_text('{\n  "messages": []\n}\n')  # pretty-printed: one document
    _write_lines(mixed, [{"messages": []}, {"x": 1}])
    trajs, quarantined = _records(only)
    assert {loc: (fmt, turns) for loc, (fmt, _, _, turns) in trajs.items()} == {"line:1": ("chat", ()), "line:2": ("chat", ())}
    assert quarantined == []
    trajs, quarantined = _records(doc)
    assert [(loc, fmt, turns) for loc, (fmt, _, _, turns) in trajs.items()] == [("$", "chat", ())] and quarantined == []
    trajs, (q,) = _records(mixed)  # with a line of no known format: not taken for chat
    assert trajs == {} and (q.locator, q.reason) == ("line:1", "unknown_format")
    # and a first line of no messages does not name the format of what follows (FireAct's chat lines)
    fireact = tmp_path / "fireact.jsonl"
    fireact.write_bytes(b'{"messages": []}\n' + (SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl").read_bytes())
    formats = {fmt for fmt, *_ in _records(fireact)[0].values()}
    assert formats == {"fireact-chat"}, formats


def test_a_document_written_one_record_per_line_is_still_a_document(tmp_path: Path) -> None:
    # `[` on the first line, then records each ending with a comma: not JSON lines with a broken first line
    src = DATA / "tau-bench" / "react_and_minimal.json"
    doc = json.loads(src.read_text())
    dst = tmp_path / src.name
    dst.write_text("[\n" + ",\n".join(json.dumps(r) for r in doc) + "\n]\n")
    after, quarantined = _records(dst)
    assert not quarantined and after == _records(src)[0] and len(after) == len(doc)


def _chat(i: int) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": f"hi {i}"},
                                    {"role": "assistant", "content": f"hello {i}"}]}).encode() + b"\n"


def _rows(path: Path, max_record_bytes: int | None = None) -> list[tuple[str, str | None, str]]:
    return _read(path, max_record_bytes or ReadLimits().max_record_bytes)


def test_lines_after_many_bad_lines_are_read(tmp_path: Path) -> None:
    # more too-large lines than the look-ahead holds, then good ones: every line has its row
    f = tmp_path / "big.jsonl"
    big = [json.dumps({"messages": [{"role": "user", "content": "x" * 2000}]}).encode() + b"\n" for _ in range(70)]
    f.write_bytes(b"".join(big) + b"".join(_chat(i) for i in range(30)))
    got = _rows(f, 1000)
    assert [r for r in got if r[0] == "QuarantineRecord"] == [
        ("QuarantineRecord", "record_too_large", f"line:{i}") for i in range(1, 71)]
    assert [r[2] for r in got if r[0] == "Trajectory"] == [f"line:{i}" for i in range(71, 101)]


def test_json_lines_with_several_broken_lines_and_of_arrays(tmp_path: Path) -> None:
    # broken, good, broken, then 47 good: not a document, though its second line alone is not enough to tell
    f = tmp_path / "f.jsonl"
    f.write_bytes(_chat(0)[:30] + b"\n" + _chat(1) + _chat(2)[:30] + b"\n" + b"".join(_chat(i) for i in range(3, 50)))
    got = _rows(f)
    assert got[:3] == [("QuarantineRecord", "truncated_json", "line:1"), ("Trajectory", None, "line:2"),
                       ("QuarantineRecord", "truncated_json", "line:3")]
    assert [r[2] for r in got[3:]] == [f"line:{i}" for i in range(4, 51)]
    # JSON lines each holding an array of records, the first line cut
    g = tmp_path / "g.jsonl"
    arrays = [b"[" + _chat(2 * i).strip() + b", " + _chat(2 * i + 1).strip() + b"]\n" for i in range(20)]
    g.write_bytes(arrays[0][:30] + b"\n" + b"".join(arrays[1:]))
    got = _rows(g)
    assert got[0] == ("QuarantineRecord", "truncated_json", "line:1")
    assert [r[2] for r in got[1:]] == [f"line:{i}/[{j}]" for i in range(2, 21) for j in (0, 1)]


def test_a_document_larger_than_the_limit_is_one_row_whatever_its_lines(tmp_path: Path) -> None:
    # neither of the first two lines is JSON: a document, and too large a one (the look-ahead once
    # passed a negative limit on and read the whole rest of the file)
    f = tmp_path / "b.json"
    f.write_bytes(b'{"a": ' + b"1" * 494 + b"\n" + b"x" * 500 + b"\n" + b"".join(_chat(i) for i in range(2000)))
    assert _rows(f, 1000) == [("QuarantineRecord", "record_too_large", "$")]


def test_a_byte_order_mark_before_json_lines(tmp_path: Path) -> None:
    f = tmp_path / "bom.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + _chat(0) + _chat(1))
    assert _rows(f) == [("Trajectory", None, "line:1"), ("Trajectory", None, "line:2")]
    # a mark and nothing else (or blank lines) is an empty input, not unknown_format
    for body in (b"", b"\n\r\n  \n"):
        f.write_bytes(b"\xef\xbb\xbf" + body)
        assert _rows(f) == [("QuarantineRecord", "empty_input", "$")]
    f.write_bytes(b"\xef\xbb\xbf\n\n" + _chat(0))
    assert _rows(f) == [("Trajectory", None, "line:3")]


def test_a_tar_member_the_file_system_refuses_is_one_row(tmp_path: Path) -> None:
    import io
    import tarfile

    tar_path = tmp_path / "t.tar"
    with tarfile.open(tar_path, "w") as tar:
        for name, data in [("a.jsonl", _chat(0)), ("x/y.jsonl", _chat(1)), ("x", _chat(2)),
                           ("n" * 300 + ".jsonl", _chat(3)), ("z.jsonl", _chat(4))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    got = _rows(tar_path)
    assert [r[:2] for r in got if r[0] == "QuarantineRecord"] == [("QuarantineRecord", "unextractable_member")] * 2
    assert [r[2] for r in got if r[0] == "QuarantineRecord"] == ["member:x", "member:" + "n" * 300 + ".jsonl"]
    assert sum(r[0] == "Trajectory" for r in got) == 3  # a.jsonl, x/y.jsonl, z.jsonl


def test_nan_written_by_python_costs_no_record(tmp_path: Path) -> None:
    """InterCode, tau-bench and FireAct results are written with Python's json, which writes NaN for a
    missing float: the record holding it imports with that value null, and no other record is lost."""
    ic = tmp_path / "ic_results.json"
    task = {"environment": "ic_bash", "query": "q", "turn_history": {
        "actions": ["ls"], "observations": ["a"], "rewards": [1.0], "valid_action": [True]}}
    ic.write_text(json.dumps({"0": {**task, "task_id": 0},
                              "1": {**task, "task_id": 1, "turn_history": {**task["turn_history"], "rewards": [float("nan")]}}}))
    tb = tmp_path / "tau.jsonl"
    run = {"info": {}, "traj": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    tb.write_text(json.dumps({**run, "task_id": 0, "reward": 1.0}) + "\n" + json.dumps({**run, "task_id": 1, "reward": float("inf")}) + "\n")
    assert "NaN" in ic.read_text() and "Infinity" in tb.read_text()
    got = {}
    for unit in discover([tmp_path]):
        for r, _ in read_unit(unit, unit.sha256()):
            assert not isinstance(r, QuarantineRecord), r.detail
            got[(r.source_format, r.locator)] = [t.reward for t in r.turns], r.reward
    assert got == {("intercode", "line:1/key:0"): ([1.0], 1.0), ("intercode", "line:1/key:1"): ([None], None),
                   ("tau-bench", "line:1"): ([None], 1.0), ("tau-bench", "line:2"): ([None], None)}


def test_json_lines_whose_first_line_is_not_json_at_all(tmp_path: Path) -> None:
    # a first line that does not even start like JSON (a log line, a banner) costs only itself
    src = SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl"
    good = src.read_bytes().split(b"\n")[:3]
    p = tmp_path / "banner.jsonl"
    p.write_bytes(b"# exported 2026-01-01\n" + b"\n".join(good) + b"\n")
    trajs, quarantined = _records(p)
    assert sorted(trajs) == ["line:2", "line:3", "line:4"]
    assert [(q.locator, q.reason) for q in quarantined] == [("line:1", "invalid_json")]
    # lines longer than the 64 KiB the reader looks at first (trajectories often are)
    long = [json.dumps({"messages": [{"role": "user", "content": f"task {i} " + "x" * 80_000},
                                     {"role": "assistant", "content": "done"}]}).encode() for i in range(3)]
    p.write_bytes(b"# exported 2026-01-01\n" + b"\n".join(long) + b"\n")
    trajs, quarantined = _records(p)
    assert sorted(trajs) == ["line:2", "line:3", "line:4"] and [(q.locator, q.reason) for q in quarantined] == [("line:1", "invalid_json")]
    # text with only a JSON line or two among other lines is still no JSON lines
    p.write_bytes(b"a log\n" + good[0] + b"\nmore log\nand more\n")
    assert [(q.locator, q.reason) for q in _records(p)[1]] == [("$", "unknown_format")]


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32"])
def test_utf16_and_utf32_with_a_byte_order_mark_read_as_utf8(codec: str, tmp_path: Path) -> None:
    # Windows PowerShell's `>` writes UTF-16 with a byte order mark: the same records as the UTF-8 file
    src = SAMPLE / "tau-bench" / "gpt-4o-airline__tasks0-7.json"
    p = tmp_path / src.name
    bom = {"utf-16": b"", "utf-16-be": b"\xfe\xff", "utf-32": b""}[codec]  # Python writes the mark for utf-16/32
    p.write_bytes(bom + src.read_text(encoding="utf-8").encode(codec))
    assert p.read_bytes()[:2] in (b"\xff\xfe", b"\xfe\xff")
    assert _records(p) == _records(src)
    p.write_bytes(b"\xff\xfe" + "[1]".encode("utf-16-le") + b"\x00")  # an odd byte at the end: not UTF-16
    assert [(q.locator, q.reason) for q in _records(p)[1]] == [("$", "invalid_encoding")]


def test_utf16_json_lines_stream_as_utf8_ones_do(tmp_path: Path) -> None:
    # decoded as read, not whole: a UTF-16 file of many small lines is not one record over the record limit
    src = SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl"
    lines = src.read_bytes().split(b"\n")[:300]
    utf8, utf16 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    utf8.write_bytes(b"\n".join(lines) + b"\n")
    utf16.write_bytes(utf8.read_text(encoding="utf-8").encode("utf-16"))
    limit = 4 * max(map(len, lines))
    assert utf16.stat().st_size > 10 * limit
    got = _read(utf16, limit)
    assert got == _read(utf8, limit) and len(got) == 300 and {r[0] for r in got} == {"Trajectory"}
    # broken further on (past the first 64 KiB read ahead): the lines before it are kept, then one row says where
    data = utf16.read_bytes()
    utf16.write_bytes(data[: len(data) * 3 // 4 // 2 * 2] + b"\x00\xd8" + b"a\x00" * 8)  # a lone high surrogate
    got = _read(utf16, limit)
    assert got[-1][:2] == ("QuarantineRecord", "invalid_encoding") and got[0][0] == "Trajectory"


def _tar(path: Path, members: list[tuple[str, bytes | None]]) -> Path:
    """A tar of `members` in order; None: a folder."""
    import io
    import tarfile

    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def test_a_tar_member_replaced_by_a_later_one_of_the_same_path_is_one_row(tmp_path: Path) -> None:
    """`tar x` keeps the last of two members of one path (`tar -r` appends newer versions): the one
    replaced is a row naming both, not lost unseen; the records in and out reconcile."""
    t = _tar(tmp_path / "t.tar", [("x.jsonl", _chat(0) + _chat(1)), ("y.jsonl", _chat(2)), ("./x.jsonl", _chat(3))])
    got = _rows(t)
    assert [r for r in got if r[0] == "QuarantineRecord"] == [("QuarantineRecord", "duplicate_archive_member", "member:x.jsonl")]
    assert sorted(r[2] for r in got if r[0] == "Trajectory") == ["line:1", "line:1"]  # ./x.jsonl's and y.jsonl's
    q = [r for unit in discover([t]) for r, _ in read_unit(unit, unit.sha256()) if isinstance(r, QuarantineRecord)]
    assert q[0].detail == f"{t}!x.jsonl: replaced by a later member of the same path (./x.jsonl), as `tar x` does; this one is not read"


@pytest.mark.parametrize(("members", "detail"), [
    ([("e/", None), ("e/sub/", None)], "the archive holds no files"),
    ([("c/manifest.json", json.dumps({"format": CORPUS_FORMAT}).encode()), ("c/.lock", b"")], "the archive holds only Worldline corpora (c), which are not read"),
])
def test_an_archive_with_nothing_to_read_is_one_empty_input_row(tmp_path: Path, members: list, detail: str) -> None:
    """Recorded as ingested with no row, it would be skipped by every later run without a word."""
    t = _tar(tmp_path / "t.tar", members)
    got = [r for unit in discover([t]) for r, _ in read_unit(unit, unit.sha256())]
    assert [(r.locator, r.reason, r.detail) for r in got] == [("$", "empty_input", f"{t}: {detail}")]


def test_blanks_before_the_content_past_the_sniff_window_cost_nothing(tmp_path: Path) -> None:
    """More leading whitespace than the sniffing window (64 KiB): the records after it import, with the
    file's own line numbers; a file of blanks only is `empty_input`. It used to be one
    `record_too_large` row for the whole file."""
    lines = tmp_path / "lead.jsonl"
    lines.write_bytes(b"\n" * 70_000 + _chat(0) + b" \t\r\n" * 30_000 + _chat(1) + b"{broken\n")
    assert _rows(lines) == [("Trajectory", None, "line:70001"), ("Trajectory", None, "line:100002"),
                            ("QuarantineRecord", "invalid_json", "line:100003")]
    doc = tmp_path / "lead.json"
    doc.write_bytes(b" " * 200_000 + b"[" + _chat(2).rstrip() + b",\n" + _chat(3).rstrip() + b"]")
    assert [r[0] for r in _rows(doc)] == ["Trajectory", "Trajectory"]
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n \t" * 100_000)
    assert _rows(blank) == [("QuarantineRecord", "empty_input", "$")]
