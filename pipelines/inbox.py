"""The inbox: a folder where trace files are dropped, one sub-folder per source.

    INBOX/<source>/**/<files>

A file belongs to the partition (source, day) of its modification day (UTC). Only *settled*
files are offered: not hidden, not named like a partial download, and unmodified for
`settle_s` seconds, so a half-written file is never ingested.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PARTIAL_SUFFIXES = (".part", ".partial", ".tmp", ".crdownload", ".download", "~")
SOURCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class InboxFile:
    path: Path
    source: str
    day: str  # YYYY-MM-DD (UTC) of the last modification
    size: int
    mtime_ns: int

    @property
    def signature(self) -> str:
        return f"{self.path}|{self.size}|{self.mtime_ns}"


def sources(inbox: Path) -> list[str]:
    if not inbox.is_dir():
        return []
    return sorted(p.name for p in inbox.iterdir() if p.is_dir() and SOURCE_NAME.match(p.name))


def _partial(p: Path, source_dir: Path) -> bool:
    rel = p.relative_to(source_dir)
    return any(part.startswith(".") for part in rel.parts) or p.name.endswith(PARTIAL_SUFFIXES)


def scan(inbox: Path, settle_s: float = 5.0, now: float | None = None, only: str | None = None) -> Iterator[InboxFile]:
    """Settled files in the inbox (of one source with `only`), in a deterministic order."""
    now = time.time() if now is None else now
    for source in sources(inbox):
        if only is not None and source != only:
            continue
        sdir = inbox / source
        for p in sorted(sdir.rglob("*")):
            if not p.is_file() or _partial(p, sdir):
                continue
            st = p.stat()
            if now - st.st_mtime < settle_s:
                continue
            day = dt.datetime.fromtimestamp(st.st_mtime, dt.UTC).strftime("%Y-%m-%d")
            yield InboxFile(p, source, day, st.st_size, st.st_mtime_ns)


def files_for(inbox: Path, source: str, day: str, settle_s: float = 5.0) -> list[Path]:
    """The settled files of one partition."""
    return [f.path for f in scan(inbox, settle_s, only=source) if f.day == day]
