"""An Android device (emulator or phone) driven through `adb`: the screen as `uiautomator dump` gives it,
and input as `adb shell input` sends it.

Every call is one `adb` process (as `adb` itself works: each command a connection to its server), so
the collector needs nothing but the `adb` binary on PATH (Debian: `apt-get install adb`), or named by
`--adb` / `WORLDLINE_ADB`, and a device that `adb devices` lists as `device`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from collectors.android_views import Bounds, View, describe, walk
from collectors.uiautomator import parse_hierarchy
from schemas.records import RecordError

_DOC = re.compile(rb"(?:<\?xml[^>]*\?>\s*)?<hierarchy\b.*?</hierarchy\s*>", re.S)
KEYS = {"back": "KEYCODE_BACK", "home": "KEYCODE_HOME", "enter": "KEYCODE_ENTER"}
LONG_PRESS_MS = 800
SWIPE_MS = 300


class DeviceUnavailable(RuntimeError):
    """No adb, or no device to drive: the message says what to install or start."""


class DeviceError(RuntimeError):
    """An adb command that failed while a session ran (the device went away, a command timed out)."""


class ActionRefused(ValueError):
    """An action the device cannot take as asked (text `input text` cannot type): an error turn."""


@dataclass
class Screen:
    """One dump: its views in the rendering's pre-order (a view's `[n]` is its position here)."""

    xml: bytes
    views: list[View]
    text: str
    packages: list[str]

    @classmethod
    def parse(cls, xml: bytes) -> Screen:
        h = parse_hierarchy(xml)
        views = [v for root in h.roots for _, v in walk(root)]
        return cls(xml, views, h.render(), sorted(h.packages))

    def find(self, target, nth: int = 1) -> int | None:
        """The index of the `nth` view (from 1, pre-order) that `target` matches, visible ones first."""
        hits = [i for i, v in enumerate(self.views) if "invisible" not in v.flags and target.matches(v)]
        hits += [i for i, v in enumerate(self.views) if "invisible" in v.flags and target.matches(v)]
        return hits[nth - 1] if len(hits) >= nth else None

    def center(self, index: int) -> tuple[int, int] | str:
        """Where a tap on view `index` lands, or why it cannot (the message an agent sees)."""
        if not 0 <= index < len(self.views):
            return f"no view [{index}] on this screen (its views are [0] to [{len(self.views) - 1}])"
        b = self.views[index].bounds
        if b is None or b[1][0] <= b[0][0] or b[1][1] <= b[0][1]:
            return f"view [{index}] has no area on the screen ({describe(self.views[index])})"
        (x1, y1), (x2, y2) = b
        return (x1 + x2) // 2, (y1 + y2) // 2

    @property
    def size(self) -> tuple[int, int]:
        """The screen's width and height: the largest bounds of a view (the root's, on a phone)."""
        boxes: list[Bounds] = [v.bounds for v in self.views if v.bounds is not None]
        return (max((b[1][0] for b in boxes), default=1080), max((b[1][1] for b in boxes), default=1920))


def adb_path(explicit: Path | str | None = None) -> str:
    """The adb to run: `explicit`, else $WORLDLINE_ADB, else `adb` on PATH."""
    name = str(explicit or os.environ.get("WORLDLINE_ADB") or "adb")
    found = shutil.which(name)
    if found is None:
        raise DeviceUnavailable(f"no adb at {name!r}: install it (Debian: apt-get install adb) or name it with "
                                "--adb / WORLDLINE_ADB")
    return found


def text_arg(text: str) -> str:
    """`input text`'s argument as the device's shell reads it: %s for a space (what `input` expects),
    the whole quoted for the shell."""
    if not text.isascii() or any(c in text for c in "\n\r\t"):
        raise ActionRefused("input text types printable ASCII only (no accents, emoji, tabs or new lines)")
    if "%s" in text:  # `input` reads %s as a space and has no escape for it
        raise ActionRefused("input text cannot type the two characters %s (it reads them as a space)")
    return "'" + text.replace(" ", "%s").replace("'", "'\\''") + "'"


class AdbDevice:
    """`setup()` finds adb and the device (the only one online, or `serial`) and reads its build."""

    def __init__(self, serial: str | None = None, adb: Path | str | None = None, timeout_s: float = 30.0):
        self.serial = serial
        self.adb_arg = adb
        self.adb = ""
        self.timeout_s = timeout_s
        self.props: dict[str, str] = {}

    def setup(self) -> None:
        self.adb = adb_path(self.adb_arg)
        listed = self._adb("devices", to_device=False).decode(errors="replace").splitlines()
        states = dict(line.split("\t", 1) for line in listed[1:] if "\t" in line)
        online = [s for s, st in states.items() if st.strip() == "device"]
        start = ("start an emulator (emulator -avd NAME) or connect a phone with USB debugging on, "
                 "and check that `adb devices` lists it as `device`")
        if self.serial is None:
            if not online:
                others = ", ".join(f"{s} ({st.strip()})" for s, st in states.items())
                raise DeviceUnavailable(f"no Android device online{f' (adb lists {others})' if others else ''}: {start}")
            if len(online) > 1:
                raise DeviceUnavailable(f"{len(online)} devices online ({', '.join(online)}): choose one with --serial")
            self.serial = online[0]
        elif states.get(self.serial, "").strip() != "device":
            raise DeviceUnavailable(f"device {self.serial} is not online (adb devices: "
                                    f"{states.get(self.serial, 'not listed').strip()}): {start}")
        for key in ("ro.product.model", "ro.build.version.release", "ro.build.version.sdk", "ro.build.fingerprint"):
            self.props[key] = self.shell("getprop", key).decode(errors="replace").strip()

    def teardown(self) -> None:
        """Nothing to stop: adb's own server outlives the run, as it does for every adb user."""

    def __enter__(self) -> AdbDevice:
        self.setup()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    @property
    def description(self) -> str:
        p = self.props
        return (f"{p.get('ro.product.model') or 'device'} {self.serial}, Android {p.get('ro.build.version.release') or '?'} "
                f"(SDK {p.get('ro.build.version.sdk') or '?'})")

    def _adb(self, *args: str, to_device: bool = True) -> bytes:
        cmd = [self.adb, *(["-s", self.serial] if self.serial and to_device else []), *args]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=self.timeout_s, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise DeviceError(f"adb {' '.join(args)}: no answer in {self.timeout_s:g}s") from None
        except OSError as e:  # adb removed or made unrunnable mid-run
            raise DeviceError(f"adb {' '.join(args)}: cannot run {self.adb}: {e.strerror or e}") from None
        if r.returncode != 0:
            err = (r.stderr or r.stdout).decode(errors="replace").strip().splitlines()
            raise DeviceError(f"adb {' '.join(args)}: exit {r.returncode}: {err[-1] if err else 'no message'}")
        return r.stdout

    def shell(self, *args: str) -> bytes:
        return self._adb("shell", *args)

    def dump(self) -> Screen:
        out = self._adb("exec-out", "uiautomator", "dump", "/dev/tty")
        m = _DOC.search(out)
        if m is None:
            said = out.decode(errors="replace").strip()[:200]
            raise DeviceError(f"uiautomator dump gave no view hierarchy ({said or 'no output'})")
        try:
            return Screen.parse(m.group(0))
        except RecordError as e:
            raise DeviceError(f"uiautomator dump: {e.detail}") from None

    def tap(self, x: int, y: int) -> None:
        self.shell("input", "tap", str(x), str(y))

    def long_press(self, x: int, y: int) -> None:
        self.shell("input", "swipe", str(x), str(y), str(x), str(y), str(LONG_PRESS_MS))

    def swipe(self, x1: int, y1: int, x2: int, y2: int) -> None:
        self.shell("input", "swipe", str(x1), str(y1), str(x2), str(y2), str(SWIPE_MS))

    def type_text(self, text: str) -> None:
        self.shell("input", "text", text_arg(text))

    def key(self, name: str) -> None:
        self.shell("input", "keyevent", KEYS[name])

    def launch(self, component: str) -> None:
        """Start the app afresh (`-S` stops it first) and wait for its activity (`-W`)."""
        out = self.shell("am", "start", "-S", "-W", "-n", component).decode(errors="replace")
        if "Error" in out:  # am exits 0 when the activity does not exist, and says so
            line = [ln for ln in out.splitlines() if "Error" in ln][-1]  # `Error type 3`, then what it is
            raise DeviceError(f"am start -n {component}: {line.strip()}")
