"""How far the inputs being converted right now have been read, for ingest's progress line.

A task is 64 MiB of input, and one large file (or archive) is one task: counting inputs as they
finish left the line still for the whole of such a file. The workers are not asked: this reads the
position of each input file they hold open from `/proc/PID/fdinfo` (Linux), as `pv -d` watches a
process, so the conversion path pays nothing. Elsewhere (no `/proc`) it finds nothing and the line
moves as inputs finish.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path


class OpenInputs:
    """Bytes read so far of the inputs (path -> size) open in this process or its worker processes."""

    def __init__(self, sizes: Iterable[tuple[Path, int]]):
        self.sizes = {os.path.realpath(p): n for p, n in sizes}
        self.seen: dict[str, int] = {}  # furthest position seen of each input seen open

    def read(self) -> dict[str, int]:
        """Bytes read of each input seen open so far (real path -> bytes): the furthest position seen.
        One no longer open may still be at work (an archive's members, extracted, are read after it is
        closed): only the caller knows when an input is finished."""
        now: dict[str, int] = {}  # an input open twice (a second look at its end) counts once, at its furthest
        for pid in [os.getpid(), *(p.pid for p in multiprocessing.active_children())]:
            fds = f"/proc/{pid}/fd"
            try:
                names = os.listdir(fds)
            except OSError:  # no /proc, or the worker is gone
                continue
            for fd in names:
                try:
                    target = os.readlink(f"{fds}/{fd}")
                    if target not in self.sizes:
                        continue
                    with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                        pos = int(f.readline().split()[1])  # "pos:\t<bytes>"
                except (OSError, ValueError, IndexError):  # closed meanwhile
                    continue
                now[target] = max(now.get(target, 0), min(pos, self.sizes[target]))
        for path, pos in now.items():
            self.seen[path] = max(self.seen.get(path, 0), pos)
        return dict(self.seen)


class Watch:
    """Calls `report(OpenInputs.read())` every `interval` seconds in a thread, until stopped."""

    def __init__(self, inputs: OpenInputs, report: Callable[[dict[str, int]], None], interval: float):
        self.inputs, self.report, self.interval = inputs, report, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ingest-progress", daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.report(self.inputs.read())
            except RuntimeError:  # the set of child processes changed while listed: the next tick sees it
                continue
