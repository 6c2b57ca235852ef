"""The device for these tests: `tests/support/fake_adb.py` replaying the sample corpus's DroidBot
exploration of the Album sample app (recorded real screens), behind an `adb` the collector runs."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from collectors.android_views import render_tree
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
    return FakeDevice(adb, Path(env["FAKE_ADB_HOME"]))


def recorded_screen(prefix: str) -> str:
    """A saved state of the recording as the DroidBot importer renders it (`prefix` of its state_str)."""
    for f in sorted((RECORDING / "states").glob("*.json")):
        st = json.loads(f.read_text())
        if st["state_str"].startswith(prefix):
            return render_tree(views_to_tree(st["views"], f.name))
    raise KeyError(prefix)
