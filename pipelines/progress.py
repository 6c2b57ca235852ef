"""The one-line progress display every long stage uses: redrawn in place on a terminal, a plain
line every 10 s otherwise (logs stay readable), and nothing when disabled."""

from __future__ import annotations

import sys
import time


class StatusLine:
    def __init__(self, enabled: bool = True, first_at_once: bool = True, width: int = 100):
        self.enabled, self.width = enabled, width
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        # the first line at once, or after one interval
        self.last = self.t0 - self.interval if first_at_once else self.t0
        self.shown = False
        self.said = ""  # the last line shown

    @property
    def interval(self) -> float:
        return 0.5 if self.tty else 10.0

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.t0, 1e-9)

    def due(self, force: bool = False) -> bool:
        """True (and the clock restarts) when a new line may be shown now."""
        if not self.enabled:
            return False
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return False
        self.last = now
        return True

    def show(self, line: str) -> None:
        self.shown, self.said = True, line
        print(("\r" + line.ljust(self.width)) if self.tty else line, end="" if self.tty else "\n",
              file=sys.stderr, flush=True)

    def finish(self, final: str | None = None) -> None:
        """End a line drawn on a terminal (a later `show` starts the next; a second `finish` adds nothing).
        `final`: what was done in the end, drawn first if a line was shown and it said something else."""
        if self.shown and final is not None and final != self.said and self.due(force=True):
            self.show(final)
        if self.enabled and self.tty and self.shown:
            print(file=sys.stderr)
        self.shown = False


class CountProgress:
    """Items done of a total, with tokens and the token rate: `bar(items, tokens)`."""

    def __init__(self, label: str, total: int, unit: str, enabled: bool, first_at_once: bool = True):
        self.label, self.total, self.unit = label, total, unit
        self.done, self.tokens = 0, 0
        self.line = StatusLine(enabled, first_at_once=first_at_once)

    def __call__(self, n: int, tokens: int = 0) -> None:
        self.done += n
        self.tokens += tokens
        if self.line.due():
            el = self.line.elapsed
            self.line.show(f"{self.label} {self.done:,}/{self.total:,} {self.unit} · {self.tokens:,} tokens · "
                           f"{self.tokens / el:,.0f} tokens/s · {el:,.0f} s")

    def finish(self) -> None:
        self.line.finish()
