"""Sandbox tests run against a real Docker engine; without one they fail, saying how to start it."""

from __future__ import annotations

import pytest

from sandboxes.engine import EngineUnavailable, client


@pytest.fixture(scope="session")
def engine():
    try:
        return client()
    except EngineUnavailable as e:
        pytest.fail(f"these tests need a Docker engine: {e}", pytrace=False)


@pytest.fixture(scope="session")
def images(engine) -> dict[str, str]:
    """Tags of the built sandbox images (built on first use, cached by recipe hash afterwards)."""
    from sandboxes.images import build

    return {r.name: r.tag for r in build("swe")}


@pytest.fixture
def sb(images):
    """A started terminal sandbox (5 s actions, 256 MB, 64 pids), closed after the test, leaving no container."""
    from sandboxes.reaper import Session, containers_of
    from sandboxes.sandbox import Limits, Sandbox, SandboxConfig

    s = Session()
    box = Sandbox(SandboxConfig(image=images["terminal"], action_timeout_s=5, limits=Limits(memory_mb=256, pids=64)), s)
    box.start()
    yield box
    box.close()
    assert containers_of(session_id=s.id) == []
