"""Worker processes that do not outlive the run that started them."""

from __future__ import annotations

import os
import signal


def die_with_parent(parent: int) -> None:
    """A pool worker's initializer: the kernel kills the worker when the process that started it dies
    (SIGTERM or SIGKILL of an ingest or an export), instead of leaving it working for nobody and
    holding what the parent held: a forked export worker inherits the open lock file of the output
    folder, so an orphan kept every later export out (Linux only)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the call above
            os._exit(1)
    except (OSError, AttributeError):
        pass
