"""The run's read limits reach the importers that read their own stream (`ImportContext.limits`).

Expected values come from the files themselves (line lengths, file sizes, TFRecord length fields)."""

from __future__ import annotations

import struct
from pathlib import Path

from pipelines.reader import discover, read_unit
from pipelines.sources import ReadLimits

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
