"""pipelines.side: what a killed stage leaves behind is removed by the next writer of that table."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pyarrow as pa

from pipelines.query import STALE_UNLOCKED_S
from pipelines.side import SIDE_FILE, SideTableWriter, drop_orphaned_tmp, side_dir, side_path
from pipelines.store import Corpus
from tests.support.corpus import empty_corpus

SCHEMA = pa.schema([("trajectory_id", pa.string())])


def _aged(p: Path, seconds: float) -> None:
    t = time.time() - seconds
    os.utime(p, (t, t))


def test_a_dead_writers_temporary_file_is_removed_a_live_ones_kept(tmp_path: Path) -> None:
    corpus = Corpus(empty_corpus(tmp_path / "c"))
    d = side_dir(corpus, "cleaning")
    d.mkdir(parents=True)
    dead = d / f".{SIDE_FILE}.tmp-999999-7f00"  # a stage killed mid-write: nobody holds its lock
    young = d / f".{SIDE_FILE}.tmp-999999-7f01"  # just made: its writer takes the lock a moment later
    dead.write_bytes(b"PAR1 half a table")
    young.write_bytes(b"PAR1 just made")
    _aged(dead, STALE_UNLOCKED_S + 5)
    live = SideTableWriter(corpus, "cleaning", SCHEMA, "clean", "f", {})  # another writer, still running (its lock held)
    assert not dead.exists() and young.exists() and live.tmp.exists()
    _aged(live.tmp, STALE_UNLOCKED_S + 5)  # however old its file, a live writer's is kept
    assert drop_orphaned_tmp(d) == [] and live.tmp.exists()
    with SideTableWriter(corpus, "cleaning", SCHEMA, "clean", "f", {}) as w:
        w.write(pa.table({"trajectory_id": ["a"]}))
        w.commit()
    assert live.tmp.exists() and side_path(corpus, "cleaning").is_file()
    live.abort()
    assert sorted(p.name for p in d.iterdir()) == sorted([SIDE_FILE, young.name])
    fd = os.open(side_path(corpus, "cleaning"), os.O_RDONLY)  # a committed writer holds no lock any more
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)


def test_clean_and_dedup_wait_only_as_long_as_asked(tmp_path: Path) -> None:
    """`lock_wait_s` (Dagster's `corpus.lock_wait_seconds`) bounds how long a stage waits for another
    writer before its side tables are committed: it was 600 s whatever was asked."""
    import pytest

    from pipelines.clean import CleanConfig, clean
    from pipelines.dedup import DedupConfig, dedup
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.store import CorpusLocked
    from tests.conftest import SAMPLE

    corpus = tmp_path / "c"
    ingest([SAMPLE / "intercode"], corpus, IngestConfig(workers=1), progress=False)
    for run in (lambda: clean(corpus, CleanConfig(lock_wait_s=0.5), progress=False),
                lambda: dedup(corpus, DedupConfig(lock_wait_s=0.5), progress=False)):
        with Corpus(corpus).writer():
            t0 = time.monotonic()
            with pytest.raises(CorpusLocked):
                run()
            assert time.monotonic() - t0 < 30
        run()  # and with the lock free, it commits


def test_a_table_committed_after_the_corpus_changed_says_so(tmp_path: Path, capsys) -> None:
    """A stage that waited for an ingest to finish committed its table for the corpus as it was before, quietly
    (clean: verdicts for 965 of 180,965 trajectories, exit 0); it warns now, naming the rerun."""
    from pipelines.ingest import ingest
    from tests.conftest import SAMPLE

    root = tmp_path / "c"
    ingest([SAMPLE / "tau-bench"], root, progress=False)
    corpus = Corpus(root)
    with SideTableWriter(corpus, "cleaning", SCHEMA, "clean", "f", {}) as w:
        w.write(pa.table({"trajectory_id": ["a"]}))
        w.commit()
    assert capsys.readouterr().err == ""  # nothing changed meanwhile
    with SideTableWriter(corpus, "cleaning", SCHEMA, "clean", "f", {}) as w:
        w.write(pa.table({"trajectory_id": ["a"]}))
        ingest([SAMPLE / "intercode"], root, progress=False)  # committed while the stage ran
        capsys.readouterr()
        w.commit()
    assert capsys.readouterr().err == (f"clean: warning: the corpus {root} changed while clean ran (another process "
                                       "committed to it); `cleaning` covers the corpus as it was: run clean again\n")
