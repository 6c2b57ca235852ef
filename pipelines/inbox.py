"""The inbox: a folder where trace files are dropped, one sub-folder per source.

    INBOX/<source>/**/<files>

The inbox offers *inputs* as `worldline ingest INBOX/<source>` would see them (`reader.discover`):
a file, or a directory that a directory format claims (a BrowserGym experiment, a DroidBot output,
a Harbor trial) together with every file under it. An input belongs to the partition
(source, day) of the UTC day its newest file was last modified; days before `FIRST_DAY` (files
unpacked with their old times kept) belong to `FIRST_DAY`. Only *settled* inputs are offered: not
hidden, no file named like a partial download, and nothing modified for `settle_s` seconds, so a
half-written file is never ingested (a partial-named file inside a claimed directory only counts
by its age). An input modified in the future (a clock off) waits until then.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipelines.reader import discover

PARTIAL_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".download", "~")
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
FIRST_DAY = "2024-01-01"  # the first day partition (dagster_project.partitions)


@dataclass(frozen=True)
class InboxInput:
    path: Path  # what `ingest` is given: a file, or a claimed directory
    source: str
    day: str  # YYYY-MM-DD (UTC) of the newest modification, not before FIRST_DAY
    files: tuple[tuple[str, int, int], ...]  # (path, size, mtime_ns) of every file it holds

    @property
    def signature(self) -> str:
        """Changes when any of its files is added, removed, resized or touched."""
        h = hashlib.sha256()
        for p, size, mtime_ns in self.files:
            h.update(f"{p}\0{size}\0{mtime_ns}\n".encode("utf-8", "surrogateescape"))
        return h.hexdigest()[:16]

    @property
    def key(self) -> str:
        """`path|signature`: what a sensor's run asks for (`ingested_traces`' `inputs`)."""
        return f"{self.path}|{self.signature}"


def _folders(inbox: Path) -> list[str]:
    return sorted(p.name for p in inbox.iterdir() if p.is_dir()) if inbox.is_dir() else []


def sources(inbox: Path) -> list[str]:
    return [n for n in _folders(inbox) if SOURCE_NAME.match(n)]


def misnamed_sources(inbox: Path) -> list[str]:
    """Folders of the inbox whose names cannot be a source (a partition key): not ingested, so
    the sensor says so. Hidden ones (`.name`) are left alone on purpose."""
    return [n for n in _folders(inbox) if not n.startswith(".") and not SOURCE_NAME.match(n)]


def day_of(mtime_ns: int) -> str:
    day = dt.datetime.fromtimestamp(mtime_ns / 1e9, dt.UTC).strftime("%Y-%m-%d")
    return max(day, FIRST_DAY)


def _hidden(p: Path, source_dir: Path) -> bool:
    return any(part.startswith(".") for part in p.relative_to(source_dir).parts)


def scan(inbox: Path, settle_s: float = 5.0, now: float | None = None, only: str | None = None,
         on_future: Callable[[Path], None] | None = None,
         on_error: Callable[[str, OSError], None] | None = None) -> Iterator[InboxInput]:
    """Settled inputs in the inbox (of one source with `only`), in a deterministic order.
    `on_future` hears of each input held back because a file's modification time is in the future;
    `on_error` of a folder of a source that could not be listed (a directory it may not read): it
    is said, the rest of the source is walked and offered, and so are the other sources (a source
    whose own folder cannot be listed offers nothing)."""
    now = time.time() if now is None else now
    for source in sources(inbox):
        if only is not None and source != only:
            continue
        try:
            yield from _scan_source(inbox / source, source, settle_s, now, on_future, on_error)
        except OSError as e:
            if on_error is None:
                raise
            on_error(source, e)


def _scan_source(sdir: Path, source: str, settle_s: float, now: float, on_future: Callable[[Path], None] | None,
                 on_error: Callable[[str, OSError], None] | None) -> Iterator[InboxInput]:
    claimed: Path | None = None
    for unit in discover([sdir]):
        if unit.unreadable is not None:  # a folder it may not list: said, and the rest of the source walked
            if on_error is None:
                raise unit.unreadable
            on_error(source, unit.unreadable)
            continue
        if claimed is not None and unit.path.is_relative_to(claimed):
            continue  # a file of the claimed directory that its format does not read: part of it
        if _hidden(unit.path, sdir):
            continue
        if unit.is_dir:
            # every file counts for the settle time (a download into it keeps it young); a stray
            # partial-named file in it does not hold it back for ever
            claimed = unit.path
            paths = sorted(p for p in unit.path.rglob("*") if p.is_file())
        elif unit.path.name.endswith(PARTIAL_SUFFIXES):
            continue
        else:
            paths = [unit.path]
        try:
            stats = [(str(p), st.st_size, st.st_mtime_ns) for p in paths if (st := p.stat())]
        except FileNotFoundError:
            continue  # gone while we looked: not settled
        newest = max((s[2] for s in stats), default=0)
        if newest / 1e9 > now + settle_s and on_future is not None:
            on_future(unit.path)
        if now - newest / 1e9 < settle_s:
            continue
        yield InboxInput(unit.path, source, day_of(newest), tuple(stats))


def inputs_for(inbox: Path, source: str, day: str, settle_s: float = 5.0,
               on_error: Callable[[str, OSError], None] | None = None) -> list[InboxInput]:
    """The settled inputs of one partition; `on_error` as `scan`'s (the sensor offers the inputs found
    before a folder it could not read: a run that raised there would fail on every retry)."""
    return [i for i in scan(inbox, settle_s, only=source, on_error=on_error) if i.day == day]
