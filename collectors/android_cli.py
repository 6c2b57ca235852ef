"""`worldline collect android [SPEC...] --out CORPUS`: record scripted sessions on an Android device
through adb.

Registered through `pipelines.cli.EXTENSIONS`. Exit codes: 0 every session ran its script (or its
agent finished); 3 some session could not (its screen lacked a view the script names, the agent's
endpoint failed, or an adb command failed; the summary lists them); 1 a bad spec, option or --out, or
no adb or device (the message says what to install or start); 130 interrupted (the sessions finished
so far are written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collectors.live import add_session_arguments


def _cmd_collect_android(a: argparse.Namespace) -> int:
    from collectors.android.collect import collect
    from collectors.android.device import DeviceUnavailable
    from collectors.android.spec import default_specs
    from collectors.live import agent_endpoint, run_session_command
    from collectors.specs import stderr_echo

    return run_session_command("collect android", lambda: collect(
        a.specs or default_specs(), a.out, serial=a.serial, adb=a.adb, repeat=a.repeat, only=a.session,
        policy=a.policy, openai=agent_endpoint(a), max_turns=a.max_turns, settle_s=a.settle,
        echo=None if a.quiet else stderr_echo), DeviceUnavailable)


def register(subparsers: argparse._SubParsersAction, collect_subparsers: argparse._SubParsersAction) -> None:
    """Add `worldline collect android`."""
    s = collect_subparsers.add_parser(
        "android", help="record scripted sessions on an Android device or emulator through adb (view hierarchies)",
        description="Start each session's app afresh on the device, take its steps through `adb shell input`, and "
                    "write `android` trajectories (source format android-live): AndroidWorld-style actions on the "
                    "[index] of a view, the `uiautomator dump` of the screen after each action as the observation.",
    )
    s.add_argument("specs", nargs="*", type=Path, help="app spec YAML files or folders (default: sandboxes/android/*.yaml)")
    s.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    s.add_argument("--serial", help="the device to drive (default: $ANDROID_SERIAL, else the only one `adb devices` lists online)")
    s.add_argument("--adb", help="the adb binary (default: $WORLDLINE_ADB, else adb on PATH)")
    s.add_argument("--settle", type=float, help="seconds to wait after each action before the screen is read "
                                                "(default: each spec's settle_s, 0.5 if it has none)")
    add_session_arguments(s, "app")
    s.set_defaults(func=_cmd_collect_android)
