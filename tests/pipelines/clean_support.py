"""Shared helpers for the clean / redact / dedup tests: the sample corpus, and planted variants of
real trajectories written through the collectors' corpus writer."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from pipelines.ingest import ingest
from pipelines.query import connect
from pipelines.sink import CollectionSink
from schemas.records import Trajectory, Turn

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "corpus"
# The sample directories whose importers are part of the foundation (not agentapi's plain text).
SUBSET = ("browsergym-workarena", "droidbot", "fireact", "intercode", "openhands", "swe-agent", "tau-bench")

_TRAJ_FIELDS = [f.name for f in dataclasses.fields(Trajectory) if f.name not in ("turns", "record_digest", "source")]
_TURN_FIELDS = [f.name for f in dataclasses.fields(Turn)]


def ingest_sample(dest: Path) -> Path:
    summary = ingest([SAMPLE / d for d in SUBSET], dest, progress=False)
    assert summary.quarantined == 0
    return dest


@pytest.fixture(scope="module")
def sample_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample subset, ingested once per test module (tests may add side tables to it)."""
    return ingest_sample(tmp_path_factory.mktemp("sample") / "corpus")


def copy_corpus(src: Path, dest: Path) -> Path:
    """The corpus without its side tables: their files and their manifest records (a recorded table whose
    file is gone fails its readers, as a damaged one does)."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("side", ".lock"))
    m = json.loads((dest / "manifest.json").read_text())
    m.pop("side", None)
    (dest / "manifest.json").write_text(json.dumps(m))
    return dest


def rows(corpus: Path, sql: str) -> list[tuple]:
    return connect(corpus).sql(sql).fetchall()


def trajectory_id(corpus: Path, source_like: str, index: int = 0) -> str:
    """The id of the `index`-th trajectory (by locator order) of a sample source."""
    ids = rows(corpus, f"SELECT trajectory_id FROM trajectories WHERE source LIKE '%{source_like}%' ORDER BY locator, trajectory_id")
    return ids[index][0]


def load(corpus: Path, tid: str) -> Trajectory:
    """A trajectory of the corpus as a record again (to plant a variant of it)."""
    con = connect(corpus)
    rel = con.sql(f"SELECT * FROM trajectories WHERE trajectory_id = '{tid}'")
    t = dict(zip(rel.columns, rel.fetchall()[0], strict=True))
    rel = con.sql(f"SELECT * FROM turns WHERE trajectory_id = '{tid}' ORDER BY turn_index")
    turns = [dict(zip(rel.columns, r, strict=True)) for r in rel.fetchall()]
    return Trajectory(record_digest=f"copy:{tid}", turns=[Turn(**{k: u[k] for k in _TURN_FIELDS}) for u in turns],
                      **{k: t[k] for k in _TRAJ_FIELDS if k in t})


def variant(base: Trajectory, name: str, **changes) -> Trajectory:
    """A copy of `base` under a new id (record digest `planted:<name>`), with `changes` applied."""
    turns = [dataclasses.replace(u) for u in base.turns]
    return dataclasses.replace(base, record_digest=f"planted:{name}", native_id=name, turns=turns, **changes)


def plant(corpus: Path, trajs: list[Trajectory]) -> list[str]:
    with CollectionSink(corpus, run_key="planted", source="planted", commit_every=10_000) as sink:
        for t in trajs:
            sink.add(t, "Planted")
    return [t.trajectory_id for t in trajs]
