"""Fewer garbage-collector passes while a stage allocates millions of short-lived objects.

Parsed JSON, records and row tuples hold no reference cycles, so reference counting frees them;
but every 700 allocations CPython's default collector scans the young objects, and now and then
everything alive (the whole buffered batch), a cost ingest need not pay. Raising the first
threshold keeps cycle collection (memory stays bounded) at a fraction of the passes.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, int, int] = (0, 0, 0)


@contextmanager
def fewer_gc_passes(gen0: int = 100_000) -> Iterator[None]:
    """Raise the first threshold to at least `gen0` until the last concurrent user leaves (the
    setting is per interpreter, and threads of one process may overlap). A threshold of 0
    (automatic collection off) stays 0."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            if _saved[0]:
                gc.set_threshold(max(gen0, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
