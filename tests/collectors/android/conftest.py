"""The device for these tests: `tests/support/fake_adb.py` replaying the sample corpus's DroidBot
exploration of the Album sample app (recorded real screens), behind an `adb` the collector runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from collectors.android_views import Bounds, View, render_tree
from collectors.droidbot import views_to_tree
from tests.conftest import SAMPLE
from tests.support.fake_adb import install

RECORDING = SAMPLE / "droidbot"


@dataclass
class FakeDevice:
    adb: Path
    home: Path

    def log(self) -> list[str]:
        """The commands the device received (without `-s SERIAL`), and the replay's notes."""
        return [ln.replace("-s emulator-5554 ", "") for ln in (self.home / "log").read_text().splitlines()]


@pytest.fixture
def device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    adb, env = install(tmp_path / "fake-adb", RECORDING)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("WORLDLINE_ADB", str(adb))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)  # the collector honours it, as adb does
    return FakeDevice(adb, Path(env["FAKE_ADB_HOME"]))


def recorded_screen(prefix: str) -> str:
    """A saved state of the recording (`prefix` of its state_str) as the DroidBot importer renders it,
    less what a `uiautomator dump` of that screen would not hold: the views DroidBot marks invisible
    (with what is under them), and bounds past the screen's edge."""
    for f in sorted((RECORDING / "states").glob("*.json")):
        st = json.loads(f.read_text())
        if st["state_str"].startswith(prefix):
            roots = views_to_tree(st["views"], f.name)
            assert roots[0].bounds is not None
            return render_tree([_shown(r, roots[0].bounds) for r in roots])
    raise KeyError(prefix)


def _shown(v: View, screen: Bounds) -> View:
    (sx1, sy1), (sx2, sy2) = screen
    b = v.bounds
    clipped = None if b is None else ((max(b[0][0], sx1), max(b[0][1], sy1)), (min(b[1][0], sx2), min(b[1][1], sy2)))
    return replace(v, bounds=clipped, children=[_shown(c, screen) for c in v.children if "invisible" not in c.flags])
