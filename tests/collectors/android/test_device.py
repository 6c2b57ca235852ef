"""The adb boundary: finding adb and the device (each failure says what to install or start), the
screen as `uiautomator dump` gives it, and input as `adb shell input` takes it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from collectors.android.device import (
    DUMP_FILE,
    DUMP_RETRY_S,
    ActionRefused,
    AdbDevice,
    DeviceError,
    DeviceUnavailable,
    Screen,
    text_arg,
)
from collectors.android.spec import parse_target
from tests.collectors.android.conftest import FakeDevice, recorded_screen


def test_no_adb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("WORLDLINE_ADB", raising=False)
    with pytest.raises(DeviceUnavailable, match=r"^no adb at 'adb': install it \(Debian: apt-get install adb\) or name "
                                                r"it with --adb / WORLDLINE_ADB$"):
        AdbDevice().setup()


@pytest.mark.parametrize(("listed", "serial", "message"), [
    ("", None, r"^no Android device online: start an emulator \(emulator -avd NAME\) or connect a phone"),
    ("emulator-5554\toffline", None, r"^no Android device online \(adb lists emulator-5554 \(offline\)\): start"),
    ("emulator-5554\tdevice\nR58M\tdevice", None, r"^2 devices online \(emulator-5554, R58M\): choose one with --serial$"),
    ("emulator-5554\tdevice", "R58M", r"^device R58M is not online \(adb devices: not listed\): start an emulator"),
])
def test_no_device(device: FakeDevice, monkeypatch: pytest.MonkeyPatch, listed: str, serial: str | None,
                   message: str) -> None:
    monkeypatch.setenv("FAKE_ADB_DEVICES", listed)
    with pytest.raises(DeviceUnavailable, match=message):
        AdbDevice(serial).setup()


def test_the_device_and_its_screen(device: FakeDevice) -> None:
    with AdbDevice() as d:
        assert (d.serial, d.description) == ("emulator-5554", "droidbot-replay emulator-5554, Android ? (SDK ?)")
        screen = d.dump()
    # the replay's dump, read back through uiautomator's XML, is the recorded screen as the DroidBot
    # importer renders it: the double serves the recording faithfully, and the collector's
    # observations read as imported Android data does
    assert screen.text == recorded_screen("08bd71")
    assert len(screen.views) == 13 and screen.packages == ["com.yanzhenjie.album.sample"]
    assert screen.find(parse_target('desc="Select Image"')) == 10
    assert screen.center(10) == (1344, 208)
    assert screen.center(14) == "no view [14] on this screen (its views are [0] to [12])"
    assert screen.area == ((0, 0), (1440, 2560))
    assert device.log()[-1] == "exec-out uiautomator dump /dev/tty"


def test_invisible_views_are_not_found() -> None:
    """Other sources mark views invisible (Appium's page source); a target never names one."""
    xml = (b'<hierarchy rotation="0"><node class="A" text="x" visible-to-user="false" bounds="[0,0][10,10]">'
           b'<node class="B" text="x" bounds="[0,0][0,0]" /></node></hierarchy>')
    s = Screen.parse(xml)
    assert s.find(parse_target('text="x"')) == 1 and s.find(parse_target('text="x"'), 2) is None
    assert s.center(1) == 'view [1] has no area on the screen (B text="x" bounds=[0,0][0,0])'
    assert s.area == ((0, 0), (10, 10))


def test_commands_that_fail(device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    with AdbDevice() as d:
        with pytest.raises(DeviceError, match=r"^am start -n com.example/.Main: Error: Activity class "
                                              r"\{com.example/.Main\} does not exist.$"):
            d.launch("com.example/.Main")
        monkeypatch.setenv("FAKE_ADB_FAIL_AFTER", "0")
        with pytest.raises(DeviceError, match=r"^adb exec-out uiautomator dump /dev/tty: exit 1: "
                                              r"adb: device 'emulator-5554' not found$"):
            d.dump()


def test_a_dump_that_is_not_one(tmp_path: Path) -> None:
    adb = tmp_path / "adb"
    adb.write_text("#!/bin/sh\ncase \"$*\" in *devices*) printf 'List of devices attached\\nX\\tdevice\\n';; "
                   "*uiautomator*) echo 'ERROR: null root node returned by UiTestAutomationBridge.';; esac\n")
    adb.chmod(0o755)
    d = AdbDevice(adb=adb)
    d.setup()
    t0 = time.monotonic()
    with pytest.raises(DeviceError, match=r"^uiautomator dump gave no view hierarchy \(ERROR: null root node"):
        d.dump()
    assert time.monotonic() - t0 >= 2 * DUMP_RETRY_S  # asked three times


def test_a_busy_screen_is_dumped_again(device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ADB_BUSY_DUMPS", "2")
    with AdbDevice() as d:
        assert d.dump().text == recorded_screen("08bd71")
    assert device.log().count("exec-out uiautomator dump /dev/tty") == 3


def test_a_tty_that_prints_no_dump(device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a device whose `exec-out` tty takes the dump and prints nothing, dumps go to a file: removed
    first, read only after uiautomator says it wrote it (a busy screen's failed dump never gives the
    screen before), and /dev/tty is not tried again."""
    monkeypatch.setenv("FAKE_ADB_NO_TTY", "1")
    to_file, cat = f"shell rm -f {DUMP_FILE} && uiautomator dump {DUMP_FILE}", f"exec-out cat {DUMP_FILE}"
    with AdbDevice() as d:
        assert d.dump().text == recorded_screen("08bd71")
        assert d.dump_via == "file"
        d.tap(1344, 208)  # `Select Image`
        monkeypatch.setenv("FAKE_ADB_BUSY_DUMPS", "3")  # the next dump (the third) fails as a busy screen's does
        assert d.dump().text == recorded_screen("72eaed")
    assert device.log()[-8:] == [
        "shell getprop ro.build.fingerprint", "exec-out uiautomator dump /dev/tty", to_file, cat,
        "shell input tap 1344 208", to_file, to_file, cat]


def test_a_tty_dump_that_worked_is_kept(device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """Once /dev/tty gave a dump, a later dump it says it wrote but does not print is a failed dump of
    that screen, asked again the same way (the device's tty works)."""
    with AdbDevice() as d:
        d.dump()
        monkeypatch.setenv("FAKE_ADB_NO_TTY", "1")
        with pytest.raises(DeviceError, match=r"^uiautomator dump gave no view hierarchy "
                                              r"\(UI hierchary dumped to: /dev/tty\)$"):
            d.dump()
    assert d.dump_via == "tty"
    assert device.log().count("exec-out uiautomator dump /dev/tty") == 4


def test_adb_that_fails_before_the_run(tmp_path: Path) -> None:
    adb = tmp_path / "adb"
    adb.write_text("#!/bin/sh\necho 'adb: failed to check server version: cannot connect to daemon' >&2\nexit 1\n")
    adb.chmod(0o755)
    with pytest.raises(DeviceUnavailable, match=r"^adb devices: exit 1: adb: failed to check server version: cannot "
                                                r"connect to daemon; check `adb devices`$"):
        AdbDevice(adb=adb).setup()


def test_android_serial_picks_the_device(device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_ADB_DEVICES", "R58M\tdevice\nemulator-5554\tdevice")
    monkeypatch.setenv("ANDROID_SERIAL", "emulator-5554")
    with AdbDevice() as d:
        assert d.serial == "emulator-5554"


@pytest.mark.parametrize("text", ["wool socks", "it's 50% off", 'say "hi" $(rm -rf /) `x` | & > ; \\ end', "% s %"])
def test_text_reaches_input_as_written(text: str) -> None:
    """The device's shell reads the argument back to what `input text` then types (%s as a space)."""
    arg = text_arg(text)
    said = subprocess.run(["sh", "-c", f"printf '%s' {arg}"], capture_output=True, text=True, check=True).stdout
    assert said.replace("%s", " ") == text


def test_text_as_input_takes_it() -> None:
    assert text_arg("wool socks") == "'wool%ssocks'"
    assert text_arg("it's 50%") == "'it'\\''s%s50%'"
    with pytest.raises(ActionRefused, match="cannot type the two characters %s"):
        text_arg("100%sure")
    with pytest.raises(ActionRefused, match="printable ASCII only"):
        text_arg("café")
    for bad in ["two\nlines", "nul\x00", "esc\x1b", "del\x7f"]:
        with pytest.raises(ActionRefused):
            text_arg(bad)


def test_the_real_adb(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Debian's adb itself, its server on a port of its own (stopped after) and its keys in a temporary
    home: no emulator runs here, so what it shows is the answer with no device, read as the collector
    reads it; on a machine with a device attached, that device is found instead."""
    adb = shutil.which("adb")
    assert adb is not None, "adb is not installed: apt-get install adb (`make setup services` does)"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("ANDROID_SERIAL", raising=False)
    for _ in range(3):  # a free port, closed before adb binds it: another process may take it in between
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("ANDROID_ADB_SERVER_PORT", str(port))
        started = subprocess.run([adb, "start-server"], capture_output=True, text=True, timeout=60)
        if started.returncode == 0:
            break
    assert started.returncode == 0, f"adb start-server failed three times: {started.stderr}"
    try:
        listed = subprocess.run([adb, "devices"], capture_output=True, text=True, timeout=60).stdout
        online = [ln.split("\t")[0] for ln in listed.splitlines()[1:] if ln.endswith("\tdevice")]
        if online:  # a developer's phone or emulator
            with AdbDevice(online[0], adb=adb) as d:
                assert d.dump().views
        else:
            with pytest.raises(DeviceUnavailable, match=r"^no Android device online: start an emulator"):
                AdbDevice(adb=adb).setup()
        with pytest.raises(DeviceUnavailable, match=r"^device nosuch-1 is not online \(adb devices: not listed\)"):
            AdbDevice("nosuch-1", adb=adb).setup()
    finally:
        subprocess.run([adb, "kill-server"], capture_output=True, timeout=30)


def test_adb_gone_mid_run_is_a_device_error(device: FakeDevice, tmp_path: Path) -> None:
    adb = tmp_path / "my-adb"
    adb.write_bytes(device.adb.read_bytes())
    adb.chmod(0o755)
    d = AdbDevice(adb=adb)
    d.setup()
    adb.unlink()
    with pytest.raises(DeviceError, match=rf"^adb exec-out uiautomator dump /dev/tty: cannot run {adb}: No such file"):
        d.dump()
