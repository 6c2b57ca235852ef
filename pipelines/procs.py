"""Worker processes that do not outlive the run that started them."""

from __future__ import annotations

import os
import signal


def die_with_parent(parent: int) -> None:
    """A pool worker's initializer: the kernel kills the worker when the process that started it dies
    (SIGTERM or SIGKILL of an ingest or an export), instead of leaving it working for nobody and
    holding what the parent held: a forked export worker inherits the open lock file of the output
    folder, so an orphan kept every later export out (Linux only).

    A worker also ignores SIGINT: Ctrl-C reaches the terminal's whole process group, and an idle worker
    printed a KeyboardInterrupt traceback for it; the parent, interrupted, stops its pool (or dies, and
    the kernel kills the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)
    except (OSError, AttributeError):
        pass
