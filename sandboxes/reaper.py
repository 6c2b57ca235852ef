"""Containers never outlive their collector: labels, a registry, signal handling, a reaper.

How each way of dying is covered:

- normal end, exception: `Sandbox.close()` in `finally`.
- Ctrl-C / SIGTERM: `interruptible()` turns SIGTERM into KeyboardInterrupt in the main thread and
  removes every container in this process's registry at once (workers blocked in an exec see
  their container vanish and return), then `finally` blocks run as usual; atexit does the same.
  The caller's `on_interrupt` runs before the removal: a collector sets its stop flag there, so
  that a worker whose container vanishes knows it was interrupted (not a container failure).
- SIGKILL (nothing in the process runs): the container's main process is a watchdog reading
  stdin from an attach socket only the collector holds (`stdin_once`); the kernel closes that
  socket when the collector dies, the watchdog reads EOF and exits, and the engine removes the
  container (`auto_remove`). This takes well under a second and needs nothing to run afterwards.
- anything else (engine restarted while the collector died, a collector killed between create
  and attach, volumes of two-phase sandboxes): every container and volume carries the labels
  below; `reap_orphans()` runs at every collector start (and as `worldline sandbox reap`) and
  removes those whose owner process is gone: a pid that is not running, or is running but with
  another start time (a reused pid).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sandboxes.engine import client

LABEL = "worldline.sandbox"

_live: set[str] = set()
_live_volumes: set[str] = set()
_lock = threading.Lock()


def _start_ticks(pid: int) -> str | None:
    """The process start time (clock ticks since boot, /proc/PID/stat field 22): with the pid,
    it identifies a process across pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode()
    except OSError:
        return None
    return data.rsplit(")", 1)[1].split()[19]


@dataclass
class Session:
    """Who owns a container: this process on this host, one id per collection run."""

    id: str = field(default_factory=lambda: secrets.token_hex(4))
    pid: int = field(default_factory=os.getpid)
    host: str = field(default_factory=socket.gethostname)

    def labels(self) -> dict[str, str]:
        return {LABEL: "1", "worldline.session": self.id, "worldline.pid": str(self.pid),
                "worldline.pidstart": _start_ticks(self.pid) or "", "worldline.host": self.host}


def register(container_id: str) -> None:
    with _lock:
        _live.add(container_id)


def unregister(container_id: str) -> None:
    with _lock:
        _live.discard(container_id)


def register_volume(name: str) -> None:
    with _lock:
        _live_volumes.add(name)


def unregister_volume(name: str) -> None:
    with _lock:
        _live_volumes.discard(name)


def remove_all_live() -> int:
    """Force-remove every container (and volume) this process created and has not removed."""
    with _lock:
        ids, vols = list(_live), list(_live_volumes)
        _live.clear()
        _live_volumes.clear()
    if not ids and not vols:
        return 0
    try:
        docker = client()
    except Exception:  # noqa: BLE001 - engine gone: the watchdog and the reaper cover it
        return 0
    n = 0
    for cid in ids:
        try:
            docker.api.remove_container(cid, force=True)
            n += 1
        except Exception:  # noqa: BLE001 - already gone
            pass
    for v in vols:
        try:
            docker.api.remove_volume(v, force=True)
        except Exception:  # noqa: BLE001
            pass
    return n


atexit.register(remove_all_live)


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get("worldline.host") not in (None, "", socket.gethostname()):
        return True  # another host's collector: not ours to judge
    try:
        pid = int(labels.get("worldline.pid", ""))
    except ValueError:
        return False
    ticks = _start_ticks(pid)
    return ticks is not None and ticks == labels.get("worldline.pidstart", ticks)


@dataclass
class ReapReport:
    containers: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    networks: list[str] = field(default_factory=list)


def reap_orphans() -> ReapReport:
    """Remove sandbox containers, networks and volumes whose collector process no longer exists
    (containers first: a network or volume in use cannot go)."""
    docker = client()
    rep = ReapReport()
    for c in docker.api.containers(all=True, filters={"label": LABEL}):
        if not _owner_alive(c.get("Labels") or {}):
            try:
                docker.api.remove_container(c["Id"], force=True)
                rep.containers.append((c.get("Names") or [c["Id"][:12]])[0].lstrip("/"))
            except Exception:  # noqa: BLE001 - removed meanwhile (auto_remove)
                pass
    for n in docker.api.networks(filters={"label": LABEL}):
        if not _owner_alive(n.get("Labels") or {}):
            try:
                docker.api.remove_network(n["Id"])
                rep.networks.append(n["Name"])
            except Exception:  # noqa: BLE001 - still in use by a dying container
                pass
    for v in (docker.api.volumes(filters={"label": LABEL}) or {}).get("Volumes") or []:
        if not _owner_alive(v.get("Labels") or {}):
            try:
                docker.api.remove_volume(v["Name"], force=True)
                rep.volumes.append(v["Name"])
            except Exception:  # noqa: BLE001 - still in use by a dying container
                pass
    return rep


def containers_of(session_id: str | None = None, pid: int | None = None) -> list[dict]:
    """Sandbox containers (running or not) of a session or a collector pid."""
    flt = [LABEL]
    if session_id:
        flt.append(f"worldline.session={session_id}")
    if pid is not None:
        flt.append(f"worldline.pid={pid}")
    return client().api.containers(all=True, filters={"label": flt})


@contextlib.contextmanager
def interruptible(on_interrupt: Callable[[int], bool | None] | None = None) -> Iterator[None]:
    """SIGTERM behaves like Ctrl-C, and either removes this process's containers at once.

    `on_interrupt(signum)` runs first, before any container is removed (a collector sets its stop
    flag there: a worker that then sees its container vanish knows why). When it returns True the
    handler does not raise KeyboardInterrupt: the caller is in a step that must not be cut in two
    (committing a batch) and raises it itself afterwards.

    Only in the main thread (signal handlers can only be set there); elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame: object) -> None:
        defer = on_interrupt(signum) if on_interrupt is not None else False
        remove_all_live()
        if not defer:
            raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, on_signal)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
