"""pipelines.side: what a killed stage leaves behind is removed by the next writer of that table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from pipelines.side import SIDE_FILE, SideTableWriter, side_dir, side_path
from pipelines.store import Corpus
from tests.support.corpus import empty_corpus


def test_a_dead_writers_temporary_file_is_removed_a_live_ones_kept(tmp_path: Path) -> None:
    corpus = Corpus(empty_corpus(tmp_path / "c"))
    d = side_dir(corpus, "cleaning")
    d.mkdir(parents=True)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout
    dead = d / f".{SIDE_FILE}.tmp-{int(gone)}-7f00"  # a stage killed mid-write (its pid exited above)
    live = d / f".{SIDE_FILE}.tmp-{os.getppid()}-7f01"  # a writer still running (this test's parent process)
    dead.write_bytes(b"PAR1 half a table")
    live.write_bytes(b"PAR1 being written")
    schema = pa.schema([("trajectory_id", pa.string())])
    with SideTableWriter(corpus, "cleaning", schema, "clean", "f", {}) as w:
        w.write(pa.table({"trajectory_id": ["a"]}))
        w.commit()
    assert not dead.exists() and live.exists()
    assert sorted(p.name for p in d.iterdir()) == sorted([SIDE_FILE, live.name])
    assert side_path(corpus, "cleaning").is_file()
