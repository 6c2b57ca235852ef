"""Starting the sandboxes of upcoming trajectories while the workers run the current ones.

A container start is engine work (namespaces, mounts, cgroups) as long as a whole `docker run`
to its first output, and a perturbed trajectory nearly always needs its own configuration, so
without this much of a short trajectory's time is its container start. `SandboxWarmer` looks a few jobs ahead of the
workers, starts the sandbox each will ask for, and hands it over when asked for an equal
configuration; anything not taken is removed on `close()` (and by the interrupt handler, like
every live sandbox of the session).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from sandboxes.reaper import Session
from sandboxes.sandbox import Sandbox, SandboxConfig

STALE_S = 1.0  # a worker asks for its sandbox within milliseconds of beginning its job


class SandboxWarmer:
    """Keeps up to `ahead` started sandboxes for the next jobs that need one, after the latest job
    a worker began (`began(i)`): `configs[i]` is job i's configuration, None for jobs it cannot
    prepare (two-phase set-ups, service networks) and ones a worker's reused container will
    likely serve."""

    def __init__(self, configs: Sequence[SandboxConfig | None], session: Session, ahead: int = 2):
        self.configs = list(configs)
        self.session = session
        self.ahead = max(0, ahead)
        self._ready: list[tuple[int, Sandbox]] = []  # (job index it was started for, sandbox)
        self._inflight: SandboxConfig | None = None  # being started now
        self._cursor = 0  # next job index to consider
        self._began = -1
        self._began_at: dict[int, float] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self.started = self.taken = self.wasted = self.failed = 0
        self._thread = threading.Thread(target=self._loop, name="sandbox-warmer", daemon=True)
        if self.ahead and any(c is not None for c in self.configs):
            self._thread.start()

    def began(self, index: int) -> None:
        """A worker began job `index`: look further ahead."""
        with self._cond:
            self._began = max(self._began, index)
            self._began_at[index] = time.monotonic()
            self._cond.notify_all()

    def take(self, cfg: SandboxConfig) -> Sandbox | None:
        """A started sandbox of configuration `cfg`, or None (the caller starts its own)."""
        with self._cond:
            while True:
                for k, (_, sb) in enumerate(self._ready):
                    if sb.cfg == cfg and not sb.closed:
                        del self._ready[k]
                        self.taken += 1
                        self._cond.notify_all()
                        return sb
                # one being started for this configuration lands sooner than a new start would
                if self._stopped or self._inflight is None or self._inflight != cfg:
                    return None
                self._cond.wait(1.0)

    def _next_job(self) -> int | None:
        """Index of the next job to start a sandbox for, waiting until it is within reach."""
        with self._cond:
            while not self._stopped:
                self._drop_stale()
                while self._cursor < len(self.configs) and self.configs[self._cursor] is None:
                    self._cursor += 1
                if self._cursor >= len(self.configs):
                    return None
                if len(self._ready) < self.ahead:
                    i = self._cursor
                    self._cursor += 1
                    if i > self._began:
                        return i
                    continue  # a worker already began it: too late
                self._cond.wait(0.5)
            return None

    def _drop_stale(self) -> None:
        """Remove ready sandboxes whose job began a while ago without them (its worker reused a
        container) and that no job within reach can use either. Called with the lock held."""
        reach = range(self._began + 1, min(len(self.configs), self._began + 1 + self.ahead))
        now = time.monotonic()
        keep = []
        for i, sb in self._ready:
            if now - self._began_at.get(i, now) < STALE_S or any(self.configs[j] == sb.cfg for j in reach):
                keep.append((i, sb))
            else:
                self.wasted += 1
                sb.close(wait=False)
        self._ready = keep

    def _loop(self) -> None:
        while True:
            i = self._next_job()
            if i is None:
                return
            cfg = self.configs[i]
            assert cfg is not None
            with self._cond:
                self._inflight = cfg
            sb = None
            try:
                sb = Sandbox(cfg, self.session, f"warm{i}").start()
                sb.started_ahead = True
            except Exception:  # noqa: BLE001 - the worker starts (and reports) its own
                pass
            finally:
                with self._cond:
                    self._inflight = None  # a waiting take() must not wait on a start that is over
                    self._cond.notify_all()
                    if sb is None:
                        self.failed += 1
                    else:
                        self.started += 1
                        if self._stopped:
                            self.wasted += 1
                            sb.close(wait=False)
                        else:
                            self._ready.append((i, sb))

    def close(self) -> None:
        """Stop looking ahead and remove every sandbox not taken."""
        with self._cond:
            self._stopped = True
            left, self._ready = self._ready, []
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        with self._cond:
            left += self._ready
            self._ready = []
        for _, sb in left:
            self.wasted += 1
            sb.close(wait=False)

    def stats(self) -> dict[str, int]:
        return {"started": self.started, "taken": self.taken, "wasted": self.wasted, "failed": self.failed}
