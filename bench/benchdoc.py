"""Writing one benchmark's section of docs/benchmarks.md, leaving the other sections alone."""

from __future__ import annotations

import os
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
INTRO = (
    "# Benchmarks\n\nBenchmarks are not tests; each compares against a baseline in the same run, because "
    "these machines are noisy.\n"
)


def write_section(path: Path, heading: str, body: str, intro: str = INTRO) -> None:
    """Replace the section that starts with `heading` (or append it), atomically."""
    text = path.read_text() if path.exists() else intro
    section = f"{heading}\n\n{body.strip()}\n"
    start = text.find(heading)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        nxt = re.search(r"^## ", text[start + len(heading):], flags=re.M)
        end = start + len(heading) + nxt.start() if nxt else len(text)
        text = text[:start] + section + ("\n" + text[end:] if nxt else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def section_body(path: Path, heading: str) -> str:
    """The text of the section under `heading` (without it), or "" when there is none."""
    text = path.read_text() if path.exists() else ""
    start = text.find(heading)
    if start < 0:
        return ""
    rest = text[start + len(heading):]
    nxt = re.search(r"^## ", rest, flags=re.M)
    return (rest[: nxt.start()] if nxt else rest).strip()


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo where there is one)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def load_note(own_cores: float = 1.0) -> str:
    """Load averages with a word on whether other jobs shared the machine (`own_cores`: what
    the benchmark itself keeps busy)."""
    one, five, fifteen = os.getloadavg()
    busy = one > own_cores + 0.5
    return (
        f"load average (1/5/15 min) {one:.1f}/{five:.1f}/{fifteen:.1f} at the end ("
        + ("other jobs shared the machine: wall-clock figures vary between rounds"
           if busy else "no other jobs of note")
        + ")"
    )
