"""Running a command as a user whom file permissions bind: root reads anything, so as root the
command runs under `setpriv` without the capabilities that let it."""

from __future__ import annotations

import os
import shutil

import pytest


def without_root_powers(cmd: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return cmd
    if shutil.which("setpriv") is None:
        pytest.fail("running as root, this test needs setpriv (util-linux) to drop root's file capabilities")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner", "--", *cmd]
