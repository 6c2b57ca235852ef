from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor

from pipelines.procs import die_with_parent


def test_an_idle_worker_leaves_ctrl_c_to_its_parent() -> None:
    # Ctrl-C reaches the terminal's whole process group: an idle worker (the pool started during ingest's walk)
    # died printing a KeyboardInterrupt traceback; the parent stops its pool itself
    with ProcessPoolExecutor(max_workers=1, initializer=die_with_parent, initargs=(os.getpid(),)) as pool:
        worker = pool.submit(os.getpid).result(timeout=30)
        os.kill(worker, signal.SIGINT)
        time.sleep(0.3)
        assert pool.submit(os.getpid).result(timeout=30) == worker  # the same worker, still serving
