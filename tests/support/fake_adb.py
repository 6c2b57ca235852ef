"""A stand-in for `adb` with one device that replays a DroidBot exploration: the test double at the one
boundary that cannot run here (an Android emulator), driven by recorded real data.

The device shows the screens the recording saved, as `uiautomator dump` writes them: DroidBot's view
lists turned back into the dump's nested XML, without the views DroidBot marks invisible (a dump skips
views not visible to the user) and with bounds clipped to the screen (a dump gives the visible part).
It moves between them as the recording did: a tap
inside the bounds of a view that a recorded touch hit goes where that touch went (the smallest such
view), a key goes where the recorded key went, `am start` where the recorded intent went. An input
the recording never sent from that screen leaves the screen as it is (a replay knows only what was
recorded) and is logged as `unrecorded`. The device starts on the first screen the recording saved.

Environment: FAKE_ADB_RECORDING (a DroidBot output folder), FAKE_ADB_HOME (a folder for the device's
state, `screen`, and `log`, one line per command); optional FAKE_ADB_DEVICES (`adb devices` lines
after the header, default `emulator-5554<TAB>device`), FAKE_ADB_FAIL_AFTER (this many commands
answered, then every command fails as a device that went away does), FAKE_ADB_BUSY_DUMPS (the first
this many dumps fail as uiautomator does on a screen that will not settle), FAKE_ADB_LAG (after an
input that changes the screen, this many dumps still show the old one, as during an animation),
FAKE_ADB_NO_TTY (a dump to /dev/tty says it wrote one and prints nothing, as on devices where
`exec-out` has no usable tty; a dump to a file, read back with `exec-out cat`, works).

Run as `python fake_adb.py ARGS...`; `install(folder, recording)` writes an `adb` script that does.
"""

from __future__ import annotations

import json
import os
import sys
from html import escape
from pathlib import Path

SERIAL = "emulator-5554"
_FLAGS = ("checkable", "checked", "clickable", "enabled", "focusable", "focused", "scrollable", "long-clickable",
          "password", "selected")
_DROIDBOT_FLAG = {"long-clickable": "long_clickable", "password": "is_password"}


def install(folder: Path, recording: Path, **env: str) -> tuple[Path, dict[str, str]]:
    """An executable `adb` in `folder` that runs this script, and the environment it needs."""
    folder.mkdir(parents=True, exist_ok=True)
    adb = folder / "adb"
    # each adb call is a process: -S skips the site packages it does not need, and attributes are escaped
    # with `html.escape` because xml.sax.saxutils imports urllib (together 125 -> 56 ms a call)
    adb.write_text(f"#!/bin/sh\nexec {sys.executable} -S {Path(__file__).resolve()} \"$@\"\n")
    adb.chmod(0o755)
    home = folder / "device"
    home.mkdir(exist_ok=True)
    return adb, {"FAKE_ADB_RECORDING": str(recording), "FAKE_ADB_HOME": str(home), **env}


class Recording:
    def __init__(self, folder: Path):
        self.states: dict[str, dict] = {}
        self.first: str | None = None
        for f in sorted((folder / "states").glob("state_*.json")):
            st = json.loads(f.read_text())
            self.states[st["state_str"]] = st
            self.first = self.first or st["state_str"]
        self.events = [json.loads(f.read_text()) for f in sorted((folder / "events").glob("event_*.json"))]

    def dump(self, screen: str) -> str:
        views = self.states[screen]["views"]
        roots = [i for i, v in enumerate(views) if v.get("parent", -1) == -1]
        (sx1, sy1), (sx2, sy2) = views[roots[0]].get("bounds") or [[0, 0], [1440, 2560]]  # the screen

        def node(i: int, sibling: int) -> str:
            v = views[i]
            (x1, y1), (x2, y2) = v.get("bounds") or [[0, 0], [0, 0]]
            x1, y1, x2, y2 = max(x1, sx1), max(y1, sy1), min(x2, sx2), min(y2, sy2)  # the visible part, as dumped
            attrs = {"index": str(sibling), "text": v.get("text") or "", "resource-id": v.get("resource_id") or "",
                     "class": v.get("class") or "", "package": v.get("package") or "",
                     "content-desc": v.get("content_description") or ""}
            for flag in _FLAGS:
                value = v.get(_DROIDBOT_FLAG.get(flag, flag), flag == "enabled")
                attrs[flag] = "true" if value else "false"
            attrs["bounds"] = f"[{x1},{y1}][{x2},{y2}]"
            shown = [c for c in v.get("children") or [] if views[c].get("visible") is not False]
            inner = "".join(node(c, k) for k, c in enumerate(shown))
            head = "<node " + " ".join(f'{k}="{escape(a)}"' for k, a in attrs.items())
            return f"{head}>{inner}</node>" if inner else f"{head} />"

        body = "".join(node(r, k) for k, r in enumerate(roots))
        return f"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">{body}</hierarchy>"

    def after(self, screen: str, kind: str, *args: object) -> str | None:
        """Where the recording went from `screen` on this input, or None if it never sent it there."""
        hits = []
        for e in self.events:
            ev = e["event"]
            if kind == "intent":
                if ev.get("event_type") == "intent" and str(ev.get("intent", "")).split()[-1:] == [args[0]]:
                    return e["stop_state"]
                continue
            if e.get("start_state") != screen:
                continue
            if kind == "key" and ev.get("event_type") == "key" and ev.get("name") == args[0]:
                return e["stop_state"]
            if kind in ("touch", "long_touch") and ev.get("event_type") == kind and ev.get("view"):
                (x1, y1), (x2, y2) = ev["view"].get("bounds") or [[0, 0], [0, 0]]
                x, y = args
                if x1 <= x < x2 and y1 <= y < y2:  # type: ignore[operator]
                    hits.append(((x2 - x1) * (y2 - y1), e["stop_state"]))
        return min(hits)[1] if hits else None


def _component(comp: str) -> str:
    pkg, _, act = comp.partition("/")
    return f"{pkg}/{pkg}{act}" if act.startswith(".") else comp


def _dump(home: Path, rec: Recording, screen: str) -> str | None:
    """The screen's dump document, or None after printing uiautomator's error (FAKE_ADB_BUSY_DUMPS)."""
    dumps = home / "dumps"
    k = int(dumps.read_text()) + 1 if dumps.exists() else 1
    dumps.write_text(str(k))
    if k <= int(os.environ.get("FAKE_ADB_BUSY_DUMPS", "0")):
        print("ERROR: could not get idle state.")
        return None
    lag = home / "lag"
    if lag.exists():  # the screen before the input, still animating away
        left, old = lag.read_text().split(" ", 1)
        lag.write_text(f"{int(left) - 1} {old}") if int(left) > 1 else lag.unlink()
        screen = old
    return rec.dump(screen)


def main(argv: list[str]) -> int:
    home = Path(os.environ["FAKE_ADB_HOME"])
    with (home / "log").open("a") as log:
        log.write(" ".join(argv) + "\n")
    devices = os.environ.get("FAKE_ADB_DEVICES", f"{SERIAL}\tdevice")
    if argv[:1] == ["devices"]:
        print("List of devices attached\n" + (devices + "\n" if devices else ""))
        return 0
    if argv[:1] == ["-s"]:
        if argv[1] != SERIAL or f"{SERIAL}\tdevice" not in devices:
            print(f"adb: device '{argv[1]}' not found", file=sys.stderr)
            return 1
        argv = argv[2:]
    count = home / "count"
    n = int(count.read_text()) + 1 if count.exists() else 1
    count.write_text(str(n))
    if "FAKE_ADB_FAIL_AFTER" in os.environ and n > int(os.environ["FAKE_ADB_FAIL_AFTER"]):
        print(f"adb: device '{SERIAL}' not found", file=sys.stderr)
        return 1
    rec = Recording(Path(os.environ["FAKE_ADB_RECORDING"]))
    state = home / "screen"
    screen = state.read_text() if state.exists() else rec.first or ""
    nxt: str | None = screen
    match argv:
        case ["shell", "getprop", prop]:
            print({"ro.product.model": "droidbot-replay"}.get(prop, ""))
        case ["exec-out", "uiautomator", "dump", "/dev/tty"]:
            xml = _dump(home, rec, screen)
            if xml is not None and not os.environ.get("FAKE_ADB_NO_TTY"):
                sys.stdout.write(xml)
            if xml is not None:
                print("UI hierchary dumped to: /dev/tty")
            return 0
        case ["shell", "rm", "-f", path, "&&", "uiautomator", "dump", again] if path == again:
            saved = home / "files" / path.replace("/", "_")
            saved.unlink(missing_ok=True)
            if (xml := _dump(home, rec, screen)) is not None:
                saved.parent.mkdir(exist_ok=True)
                saved.write_text(xml)
                print(f"UI hierchary dumped to: {path}")
            return 0
        case ["exec-out", "cat", path]:
            saved = home / "files" / path.replace("/", "_")
            if not saved.exists():
                print(f"cat: {path}: No such file or directory", file=sys.stderr)
                return 1
            sys.stdout.write(saved.read_text())
            return 0
        case ["shell", "input", "tap", x, y]:
            nxt = rec.after(screen, "touch", int(x), int(y))
        case ["shell", "input", "swipe", x1, y1, x2, y2, ms] if (x1, y1) == (x2, y2) and int(ms) >= 500:
            nxt = rec.after(screen, "long_touch", int(x1), int(y1))
        case ["shell", "input", "keyevent", key] if key.startswith("KEYCODE_"):
            nxt = rec.after(screen, "key", key.removeprefix("KEYCODE_"))
        case ["shell", "input", ("swipe" | "text"), *_]:
            nxt = None
        case ["shell", "am", "start", *opts, "-n", comp] if set(opts) <= {"-S", "-W"}:
            nxt = rec.after(screen, "intent", _component(comp))
            if nxt is None:
                print(f"Starting: Intent {{ cmp={comp} }}\nError type 3\nError: Activity class {{{comp}}} does not exist.")
                return 0
            print(f"Starting: Intent {{ cmp={comp} }}\nStatus: ok\nActivity: {comp}\nComplete")
        case _:
            print(f"fake adb: not a command this stand-in knows: {' '.join(argv)}", file=sys.stderr)
            return 1
    if nxt is None or nxt not in rec.states:  # not recorded, or the recording never saved that screen
        with (home / "log").open("a") as log:
            log.write(f"unrecorded: {' '.join(argv)} on {screen[:6]}\n" if nxt is None else f"unsaved: {nxt[:6]}\n")
        nxt = screen
    if nxt != screen and int(os.environ.get("FAKE_ADB_LAG", "0")) > 0:
        (home / "lag").write_text(f"{os.environ['FAKE_ADB_LAG']} {screen}")
    state.write_text(nxt)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
