"""bench/ingest_ab.py: its output check (two corpora of the same rows agree whatever their file layout; one
changed value is found and named by table, column and key) and its checkouts of a git revision."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from bench.ingest_ab import first_difference, read_tables
from pipelines.ingest import IngestConfig, ingest
from tests.conftest import SAMPLE

INPUTS = [SAMPLE / "fireact" / "finetune_gpt_format_hotpotqa.jsonl", SAMPLE / "tau-bench" / "gpt-4o-airline__tasks0-7.json"]


def test_same_rows_in_other_files_agree_and_one_changed_value_is_named(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    ingest(INPUTS, a, IngestConfig(workers=1), progress=False)
    # the other corpus gets the same inputs in the other order and in two batches: other part files
    ingest(INPUTS[1:], b, IngestConfig(workers=1), progress=False)
    ingest(INPUTS[:1], b, IngestConfig(workers=1), progress=False)
    assert sorted(p.relative_to(a) for p in a.rglob("*.parquet")) != sorted(p.relative_to(b) for p in b.rglob("*.parquet"))
    tables = read_tables(a)
    # 500 FireAct lines (1,385 turns) + 8 tau-bench tasks (108 turns), nothing quarantined
    assert {k: t.num_rows for k, t in tables.items()} == {"trajectories": 508, "turns": 1493}
    assert "domain" in tables["turns"].column_names and tables["turns"].num_columns == 22
    assert first_difference(a, b) is None

    # change one observation in b's FireAct turns
    [part] = [p for p in (b / "turns").rglob("*.parquet") if "domain=search" in str(p)]
    t = pq.read_table(part)
    first = pc.min(t["trajectory_id"]).as_py()
    row = pc.index(t["trajectory_id"], first).as_py()  # its turn 0: turns are written in order
    assert t["turn_index"][row].as_py() == 0
    ids, idx = tables["turns"]["trajectory_id"].to_pylist(), tables["turns"]["turn_index"].to_pylist()
    at = list(zip(ids, idx, strict=True)).index((first, 0))
    obs = t["observation"].to_pylist()
    old = obs[row]
    obs[row] = old + "!"
    pq.write_table(t.set_column(t.schema.get_field_index("observation"), "observation", [obs]), part)
    diff = first_difference(a, b)
    assert diff is not None
    assert diff.startswith(f"turns.observation differs first at sorted row {at} {{'trajectory_id': '{first}', 'turn_index': 0}}: ")
    assert diff.endswith(f"{old!r:.120} vs {old + '!'!r:.120}")


def test_a_revision_is_checked_out_into_a_worktree_that_close_removes(tmp_path: Path) -> None:
    from bench.ingest_ab import ROOT, Side, _git

    rev = _git("rev-parse", "--short", "HEAD")
    side = Side("old", "HEAD", work=tmp_path)
    try:
        assert side.root == tmp_path / f"old-{rev}"
        assert side.label == f"`{rev}` (HEAD)"
        assert (side.root / "pipelines" / "ingest.py").read_bytes() == _git_show(f"{rev}:pipelines/ingest.py")
        assert str(side.root) in _git("worktree", "list")
    finally:
        side.close()
    assert not side.root.exists() and str(side.root) not in _git("worktree", "list")
    here = Side("new", str(ROOT / "pipelines"), work=tmp_path)
    assert (here.root, here.worktree) == (ROOT / "pipelines", None)
    with pytest.raises(SystemExit, match="git rev-parse --verify"):
        Side("old", "no-such-revision-xyz", work=tmp_path)


def _git_show(spec: str) -> bytes:
    import subprocess

    from bench.ingest_ab import ROOT

    return subprocess.run(["git", "show", spec], cwd=ROOT, check=True, capture_output=True).stdout
