"""This process's peak resident memory from a point on. Linux keeps a high-water mark (`VmHWM`) that
writing 5 to `/proc/self/clear_refs` resets; `ru_maxrss` cannot be reset (a test late in a run would
see the run's earlier peak) and, after a fork, starts from the parent's."""

from __future__ import annotations

import re
from pathlib import Path

_STATUS = Path("/proc/self/status")


def _kb(field: str) -> int:
    m = re.search(rf"^{field}:\s+(\d+) kB", _STATUS.read_text(), re.M)
    assert m is not None, f"no {field} in {_STATUS}"
    return int(m.group(1)) * 1024


def reset_peak() -> int:
    """Start measuring: the peak becomes the current resident size, which is returned (bytes)."""
    Path("/proc/self/clear_refs").write_text("5")
    return _kb("VmRSS")


def peak() -> int:
    """The peak resident size (bytes) since the last `reset_peak`."""
    return _kb("VmHWM")
