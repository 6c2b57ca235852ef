"""An Android device (emulator or phone) driven through `adb`: the screen as `uiautomator dump` gives it,
and input as `adb shell input` sends it.

Every call is one `adb` process (as `adb` itself works: each command a connection to its server), so
the collector needs nothing but the `adb` binary on PATH (Debian: `apt-get install adb`), or named by
`--adb` / `WORLDLINE_ADB`, and a device that `adb devices` lists as `device`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from collectors.android_views import Bounds, View, describe, walk
from collectors.uiautomator import find_dump, parse_hierarchy
from schemas.records import RecordError

KEYS = {"back": "KEYCODE_BACK", "home": "KEYCODE_HOME", "enter": "KEYCODE_ENTER"}
LONG_PRESS_MS = 800
DUMP_TRIES = 3
DUMP_RETRY_S = 0.5
# where a dump goes on a device whose `exec-out uiautomator dump /dev/tty` prints no document (shell-writable
# on every Android version, unlike /sdcard before storage is granted)
DUMP_FILE = "/data/local/tmp/worldline-dump.xml"
_DUMPED = b"dumped to:"  # uiautomator's line after a dump it wrote ("UI hierchary dumped to: PATH")
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
        """The index of the `nth` view (from 1, pre-order) that `target` matches. A view marked invisible
        (other sources mark them; `uiautomator dump` leaves them out) is not found: it is not shown."""
        hits = [i for i, v in enumerate(self.views) if "invisible" not in v.flags and target.matches(v)]
        return hits[nth - 1] if len(hits) >= nth else None

    def center(self, index: int) -> tuple[int, int] | str:
        """Where a tap on view `index` lands, or why it cannot (the message an agent sees)."""
        if not 0 <= index < len(self.views):
            return f"no view [{index}] on this screen (its views are [0] to [{len(self.views) - 1}])"
        b = self.views[index].bounds
        if not _has_area(b):
            return f"view [{index}] has no area on the screen ({describe(self.views[index])})"
        (x1, y1), (x2, y2) = b
        return (x1 + x2) // 2, (y1 + y2) // 2

    @property
    def area(self) -> Bounds:
        """The bounds of the window the dump shows (its root view's: the whole screen, or a dialog)."""
        root = self.views[0].bounds if self.views else None
        return root if _has_area(root) else ((0, 0), (1080, 1920))


def _has_area(b: Bounds | None) -> bool:
    return b is not None and b[1][0] > b[0][0] and b[1][1] > b[0][1]


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
    if not all(" " <= c <= "~" for c in text):
        raise ActionRefused("input text types printable ASCII only (no accents, emoji, tabs, new lines or other "
                            "control characters)")
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
        self.dump_via: str | None = None  # "tty" or "file": how this device's dumps are read, once one worked

    def setup(self) -> None:
        try:
            self._setup()
        except DeviceError as e:  # adb's server or the device failed before anything ran: nothing to keep
            raise DeviceUnavailable(f"{e}; check `adb devices`") from None

    def _setup(self) -> None:
        self.adb = adb_path(self.adb_arg)
        self.serial = self.serial or os.environ.get("ANDROID_SERIAL") or None  # as adb itself reads it
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
            # the line that says what went wrong, not a Java stack frame after it
            said = next((ln for ln in err if "Error" in ln or "Exception" in ln or ln.startswith("adb:")), err[-1] if err else "")
            raise DeviceError(f"adb {' '.join(args)}: exit {r.returncode}: {said.strip() or 'no message'}")
        return r.stdout

    def shell(self, *args: str) -> bytes:
        return self._adb("shell", *args)

    def dump(self) -> Screen:
        """The screen now. uiautomator fails now and then on a busy screen (`ERROR: could not get idle
        state.` while something animates): it is asked again, DUMP_TRIES times in all."""
        for attempt in range(DUMP_TRIES):
            doc, out = self._dump_xml()
            try:
                if doc is None:
                    said = out.decode(errors="replace").strip()[:200]
                    raise DeviceError(f"uiautomator dump gave no view hierarchy ({said or 'no output'})")
                try:
                    return Screen.parse(doc)
                except RecordError as e:
                    raise DeviceError(f"uiautomator dump: {e.detail}") from None
            except DeviceError:
                if attempt == DUMP_TRIES - 1:
                    raise
                time.sleep(DUMP_RETRY_S)
        raise AssertionError("unreachable")

    def _dump_xml(self) -> tuple[bytes | None, bytes]:
        """One dump: the document (None if there is none) and what uiautomator said. Straight to adb's
        stdout (`exec-out ... /dev/tty`, one call) unless this device's tty took the dump and printed nothing
        (a reported failure on some devices); from then on into DUMP_FILE, then `cat` (two calls). The
        file is removed first and read only after uiautomator says it wrote it, so a failed dump never
        returns the screen before."""
        if self.dump_via != "file":
            out = self._adb("exec-out", "uiautomator", "dump", "/dev/tty")
            doc = find_dump(out)
            if doc is not None or self.dump_via == "tty" or _DUMPED not in out:
                self.dump_via = self.dump_via or ("tty" if doc is not None else None)
                return doc, out  # a document, or uiautomator's own error (a busy screen): asked again as it is
            self.dump_via = "file"
        said = self.shell("rm", "-f", DUMP_FILE, "&&", "uiautomator", "dump", DUMP_FILE)
        if _DUMPED not in said:
            return None, said
        return find_dump(self._adb("exec-out", "cat", DUMP_FILE)), said

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
        errors = [ln.strip() for ln in out.splitlines() if ln.startswith("Error")]
        if errors:  # with -W, am says so on stdout and exits 0 (`Error type 3`, then what it is)
            raise DeviceError(f"am start -n {component}: {errors[-1]}")
