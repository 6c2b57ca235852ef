"""The Docker engine: find one that answers, or start one (`sandboxes/start-engine.sh`).

Sandboxes need a real engine; nothing here fakes one. `client()` is what every sandbox module
calls: it returns a connected `docker.DockerClient` or raises `EngineUnavailable` with a message
that says how to start an engine, so a CLI run, a Dagster asset and a test all fail the same
clear way. `ensure_engine(start=True)` additionally runs the start script (root only), which is
what `.ci/run` and `make demo` rely on.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

START_SCRIPT = Path(__file__).resolve().parent / "start-engine.sh"

HOW_TO_START = (
    "start one with `sandboxes/start-engine.sh` (as root: installs docker.io and debootstrap if missing, "
    "then runs `dockerd --bridge=none --iptables=false --ip6tables=false` in the background), "
    "or point DOCKER_HOST at a running engine"
)

_lock = threading.Lock()
_clients: dict[tuple[str, float], Any] = {}


class EngineUnavailable(RuntimeError):
    """No Docker engine answers; the message says where we looked and how to start one."""


def where() -> str:
    """Where the engine is asked: `DOCKER_HOST`, else the default socket."""
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _import_docker() -> Any:
    try:
        import docker
    except ImportError as e:  # pragma: no cover - docker is a core dependency
        raise EngineUnavailable("the `docker` Python package is missing; install it with `pip install docker==7.2.0`") from e
    return docker


def _connect(docker: Any, timeout_s: float) -> Any:
    """A new DockerClient that has answered a ping (closed again if it did not)."""
    c = docker.from_env(timeout=int(timeout_s))
    try:
        c.ping()
    except BaseException:
        c.close()
        raise
    return c


def client(timeout_s: float = 120.0) -> Any:
    """A connected DockerClient (cached per process and timeout); raises EngineUnavailable.

    `timeout_s` is the HTTP read timeout; sandboxes use it as the backstop for an action whose
    output stream stalls past its own in-container timeout."""
    docker = _import_docker()
    key = (where(), timeout_s)
    with _lock:
        c = _clients.get(key)
        if c is not None:
            return c
        try:
            c = _connect(docker, timeout_s)
        except Exception as e:  # noqa: BLE001 - any failure to connect means "no engine"
            raise EngineUnavailable(f"no Docker engine answers at {where()} ({type(e).__name__}: {e}); {HOW_TO_START}") from e
        _clients[key] = c
        return c


def unreachable_reason(timeout_s: float = 10.0) -> str | None:
    """None when the engine answers a ping now, else why not. A fresh connection, not the cached
    client, whose pool may hold a dead socket: asked after a sandbox failure, it tells whether the
    sandbox failed or the engine is gone."""
    try:
        _connect(_import_docker(), timeout_s).close()
        return None
    except Exception as e:  # noqa: BLE001 - any failure to connect means "no engine"
        return f"{type(e).__name__}: {e}"


def answers() -> bool:
    try:
        client()
        return True
    except EngineUnavailable:
        return False


def ensure_engine(start: bool = True, wait_s: float = 60.0) -> Any:
    """A client for an engine that answers, starting dockerd through the start script if allowed."""
    try:
        return client()
    except EngineUnavailable:
        if not start:
            raise
    if os.geteuid() != 0:
        raise EngineUnavailable(f"no Docker engine answers at {where()} and starting one needs root; {HOW_TO_START}")
    env = {**os.environ, "WORLDLINE_DOCKERD_WAIT_S": str(int(wait_s))}
    r = subprocess.run(["bash", str(START_SCRIPT)], capture_output=True, text=True, env=env, timeout=wait_s + 600)
    if r.returncode != 0:
        raise EngineUnavailable(f"{START_SCRIPT} failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-800:]}; {HOW_TO_START}")
    return client()


_info: dict[str, dict[str, str]] = {}


def engine_info() -> dict[str, str]:
    """Version facts that go into every trajectory's environment fingerprint (asked once)."""
    if where() not in _info:
        v = client().version()
        _info[where()] = {"engine": str(v.get("Version")), "api": str(v.get("ApiVersion")),
                           "kernel": str(v.get("KernelVersion"))}
    return dict(_info[where()])
