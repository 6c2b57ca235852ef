"""Seeded mutation fuzzing of the reader over every fixture and sample file.

Two kinds of damage, a few of each per input, the same every run (fixed seeds):
- structural: one value somewhere in a JSON or JSON-lines file replaced by a value of another type,
  or its key or element deleted;
- byte-level: a cut, a flipped byte, invalid UTF-8, NUL bytes, a line repeated, dropped or swapped,
  in any input, compressed ones and files inside claimed directories included.

What must hold for every damaged input: reading never raises (bad input is quarantined, the run goes
on), every quarantine row names its file, and damage inside one record changes no other record.
This found a JSON-lines file losing every line after a first one no format recognised, and a corrupt
gzip stream ending the run."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipelines.reader import discover, read_path
from schemas.records import QuarantineRecord, Trajectory

ROOT = Path(__file__).resolve().parents[2]
INPUTS = [ROOT / "data" / "sample" / "corpus", ROOT / "tests" / "data"]
MAX_BYTES = 400_000  # the larger sample files add time, not cases
PER_INPUT = 6
VALUES: list[Any] = [None, 0, -7, 3.5, True, "", "zz", [], {}, [None], {"k": None}, 2**70, [1, "a"], {"a": [1]}]
DELETE = object()
# keys whose values other records refer to (a subagent's session id in its parent's metadata, tau2's
# task definitions and run info): damage there may rightly change several records
SHARED_CONTEXT = {"subagent_trajectories", "tasks", "info", "meta"}


def _json_files() -> list[Path]:
    """The JSON and JSON-lines inputs with a value to damage (not the bad-input fixtures that are no
    JSON to begin with, nor an empty list)."""
    files = []
    for p in sorted(p for root in INPUTS for p in root.rglob("*") if p.suffix in (".json", ".jsonl", ".traj")):
        if p.is_file() and p.stat().st_size <= MAX_BYTES:
            try:
                _, doc = _load(p)
            except (ValueError, UnicodeDecodeError):
                continue
            if len(list(_paths(doc))) > 1:
                files.append(p)
    return files


def _paths(obj: Any, path: tuple = ()) -> Iterator[tuple]:
    yield path
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _paths(v, (*path, k))


def _damaged(doc: Any, path: tuple, value: Any) -> Any:
    doc = copy.deepcopy(doc)
    parent = doc
    for k in path[:-1]:
        parent = parent[k]
    if value is DELETE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _load(path: Path) -> tuple[bool, Any]:
    text = path.read_text()
    if path.suffix == ".jsonl":
        return True, [json.loads(line) for line in text.splitlines() if line.strip()]
    return False, json.loads(text)


def _dump(lines: bool, doc: Any, path: Path) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in doc) if lines else json.dumps(doc, indent=1))


def _read(path: Path) -> tuple[dict[str, Any], list[QuarantineRecord]]:
    """Trajectories by locator (without the record digest, which hashes the whole input), quarantine rows."""
    trajs: dict[str, Any] = {}
    quarantined = []
    for r in read_path(path):
        if isinstance(r, Trajectory):
            trajs[r.locator] = {**dataclasses.asdict(r), "record_digest": None, "source": None}
        else:
            quarantined.append(r)
    return trajs, quarantined


def _named(quarantined: list[QuarantineRecord], path: Path) -> list[str]:
    return [f"{q.locator} {q.reason}: {q.detail}" for q in quarantined if str(path) not in (q.detail or "")]


FILES = _json_files()


@pytest.mark.parametrize("src", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_structural_damage_stays_in_its_record(src: Path, tmp_path: Path) -> None:
    lines, doc = _load(src)
    dst = tmp_path / src.name
    _dump(lines, doc, dst)
    before, _ = _read(dst)
    rng = random.Random(str(src.relative_to(ROOT)))
    candidates = list(_paths(doc))[1:]
    assert candidates, f"{src}: nothing to damage"
    for _ in range(PER_INPUT):
        path = rng.choice(candidates)
        value = rng.choice([*VALUES, DELETE])
        _dump(lines, _damaged(doc, path, value), dst)
        what = f"{src.name} at {path} set to {'<deleted>' if value is DELETE else repr(value)}"
        after, quarantined = _read(dst)  # must not raise
        assert not _named(quarantined, dst), what
        changed = [loc for loc, t in before.items() if after.get(loc) != t]
        formats = {t["source_format"] for t in before.values()}
        if len(path) >= 3 and path[0] not in SHARED_CONTEXT and "mcp-traffic" not in formats:
            # a session of captured MCP traffic spans lines: damage to one line may move its start
            assert len(changed) <= 1, f"{what}: {len(changed)} of {len(before)} records changed: {changed[:5]}"


def _byte_damage(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data))
    lines = data.split(b"\n")
    j = rng.randrange(len(lines))
    return [
        data[:i],  # cut
        data[:i] + bytes([rng.randrange(256)]) + data[i + 1:],  # a flipped byte
        data[:i] + b"\xff\xfe" + data[i:],  # invalid UTF-8
        data[:i] + b"\x00\x00" + data[i:],  # NUL bytes
        b"\n".join(lines[:j + 1] + lines[j:]),  # a line repeated
        b"\n".join(lines[:j] + lines[j + 1:]),  # a line dropped
        b"\n".join(lines[:j] + lines[j + 1:j + 2] + lines[j:j + 1] + lines[j + 2:]),  # two lines swapped
    ][rng.randrange(7)]


UNITS = [u for u in discover(INPUTS) if u.is_dir or 0 < u.path.stat().st_size <= MAX_BYTES]


@pytest.mark.parametrize("unit", UNITS, ids=lambda u: str(u.path.relative_to(ROOT)))
def test_byte_damage_is_quarantined_not_raised(unit, tmp_path: Path) -> None:
    rng = random.Random(str(unit.path.relative_to(ROOT)))
    dst = tmp_path / unit.path.name
    files = sorted(p for p in unit.path.rglob("*") if p.is_file()) if unit.is_dir else [unit.path]
    for _ in range(PER_INPUT):
        src = rng.choice([p for p in files if p.stat().st_size])
        if unit.is_dir:
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(unit.path, dst)
            target = dst / src.relative_to(unit.path)
        else:
            target = dst
        target.write_bytes(_byte_damage(src.read_bytes(), rng))
        _, quarantined = _read(dst)  # must not raise
        assert not _named(quarantined, dst), src


def test_counts_reconcile_over_damaged_inputs(tmp_path: Path) -> None:
    """Through the whole ingest stage (two workers, so the process pool and its counting too): a mix
    of damaged copies of the fixtures, each input's records in = accepted + quarantined, the tables
    hold exactly the counted rows, and a second ingest of the same inputs adds nothing."""
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.query import run_query

    rng = random.Random(7)
    src = tmp_path / "in"
    src.mkdir()
    for i, f in enumerate(rng.sample(FILES, 60)):
        lines, doc = _load(f)
        for j in range(2):
            path = rng.choice(list(_paths(doc))[1:])
            _dump(lines, _damaged(doc, path, rng.choice([*VALUES, DELETE])), src / f"{i:02d}-{j}-{f.name}")
        (src / f"{i:02d}-b-{f.name}").write_bytes(_byte_damage(f.read_bytes(), rng))
    out = tmp_path / "corpus"
    s = ingest([src], out, IngestConfig(workers=2), progress=False)
    assert s.reconciles and s.quarantined > 0 and s.trajectories > 0
    count = lambda sql: run_query(out, sql)[1][0][0]  # noqa: E731
    assert count("SELECT count(*) FROM trajectories") == s.trajectories
    assert count("SELECT count(*) FROM quarantine") == s.quarantined
    assert count("SELECT coalesce(sum(num_turns), 0) FROM trajectories") == count("SELECT count(*) FROM turns") == s.turns
    inputs = json.loads((out / "manifest.json").read_text())["inputs"].values()
    assert all(e["records"] == e["trajectories"] + e["quarantined"] for e in inputs)
    assert sum(e["records"] for e in inputs) == s.records
    again = ingest([src], out, IngestConfig(workers=2), progress=False)
    assert (again.records, count("SELECT count(*) FROM trajectories")) == (0, s.trajectories)
