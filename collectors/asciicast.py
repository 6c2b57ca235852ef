"""asciicast terminal recordings (asciinema v2; v3 is read too).

v2: a header line `{"version": 2, "width", "height", "timestamp"?, "env"?, "title"?, ...}`, then
one event per line `[t, code, data]` with `t` seconds since the start and code `o` (output),
`i` (input), `m` (marker) or `r` (resize, data `COLSxROWS`). v3 differs only in the header
(`"term": {"cols", "rows", "type"}`), in `t` being the interval since the previous event, in
`#` comment lines and in an `x` event carrying the exit status.

Turns: a turn is the input typed up to Enter (`\\r` or `\\n` in `i` events, outside a
bracketed paste) and all output from its first keystroke until the next input begins (the echo
of the typed text, then the response). Ctrl-C and Ctrl-D also end an input: they act at once.
The action is the text as typed, with backspaces applied, bracketed-paste markers removed and
other keys written as `<Up>`, `<Tab>`, `^C`, ...; the raw keystrokes go to `metadata.input_raw`.
Several lines in one input event (a paste without bracketed-paste mode, piped or typed-ahead input)
are one turn, its action the lines joined by newlines (empty lines left out), up to the Enter of the
last: the shell answers them all after the event and their output cannot be told apart. `t_enter`
is then the first line's Enter.
Output before the first keystroke is the trajectory's `initial_state`.

Full-screen programs (vim, less, htop: those on the alternate screen, `ESC[?1049h` / `47` /
`1047`) read keys, not lines. While the alternate screen is shown, a turn is a burst of keys and
the program's answer: a keystroke starts a new turn once output has arrived since the previous
keystroke (keys the program did not answer, like vim's `d` before `dd`, stay in one turn). The
action is the keys as pressed (`j`, `:`, `<Enter>`, `<BS>`, `^C`: no key submits, no backspace
is applied), `metadata.full_screen=true`, `submitted=true` and `t_enter` is the time of its last
keystroke. Leaving the alternate screen ends such a turn: the next keystroke, at the shell,
starts an ordinary line turn. The turn whose command started the program keeps the output up to
the first key (the program's first screen).

Terminal replies are not keystrokes: the terminal answers a program's queries on the input
stream (cursor position `ESC[<r>;<c>R`, device attributes `ESC[?...c` / `ESC[>...c`, status and
window reports, mode reports, focus in / out `ESC[I` / `ESC[O`, OSC colour answers, DCS
strings; see `_is_reply`). They are left out of the action, start no turn and go to the turn's
`metadata.terminal_replies` (before the first keystroke: the trajectory's).

Observation: `stdout` keeps the raw output (escape sequences included). `observation` is the
text a person would see: the output is played through a small terminal emulator (cursor
movement, carriage return, erase, scrolling, alternate screen) and the screen lines the turn
wrote are returned, in order, without escape sequences. Plain regex stripping is not enough for
TUIs that redraw with cursor movement (Claude Code, vim, progress bars); it interleaves frames.
The main and the alternate screen are separate canvases: a turn's lines are those it wrote on
the main screen before entering the alternate one, then those it drew there, then those written
after leaving it; the main screen's rows restored on leaving are not new output.

Output-only recordings (no keystrokes in `i` events; asciinema records input only with `--stdin`): when the
recording has markers, each marker starts a turn whose action is the marker's label (output
before the first marker is the initial state); without markers the whole recording is one turn
with no action (`metadata.output_only=true`), so its content is kept but it yields no
(action, observation) pair.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import UTC, datetime
from typing import IO, Any

import orjson

from collectors.base import ImportContext, Importer
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps

_TOKEN = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC
    r"|\x1b[PX^_].*?(?:\x1b\\|$)"  # DCS / SOS / PM / APC
    r"|\x1b[ -/]*[0-~]"  # other escapes (charset, keypad, save/restore, index, ...)
    r"|\x1b"
    r"|[\x00-\x1f\x7f]"
    r"|[^\x00-\x1f\x7f\x1b]+",
    re.S,
)


# An escape sequence cut off at the end of an event: its rest comes in the next `o` event.
_INCOMPLETE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|[ -/]*)$")
_MAX_CARRY = 4096


def _params(seq: str, default: int = 1) -> list[int]:
    body = seq[2:-1].lstrip("?>=<")
    out = []
    for p in body.split(";") if body else []:
        try:
            out.append(int(p))
        except ValueError:
            out.append(0)
    return out or [default]


class Screen:
    """A minimal VT100-style screen over an unbounded canvas, tracking which rows each turn wrote.

    The viewport is the last `height` rows; rows above it have scrolled off and are frozen.
    `take()` returns the text of the rows written since the previous `take()` and forgets frozen
    rows, so memory stays bounded by the viewport plus one turn's scroll-off.
    """

    def __init__(self, width: int, height: int):
        self.w = max(1, width)
        self.h = max(1, height)
        self.rows: list[list[str]] = [[]]
        self.base = 0  # absolute index of rows[0]
        self.top = 0  # absolute index of the viewport's first row
        self.r = 0
        self.c = 0
        self.saved = (0, 0)
        # the main screen (rows, base, top, cursor row in the viewport, column) while the alternate one is shown
        self.alt: tuple[list[list[str]], int, int, int, int] | None = None
        self.dirty: set[int] = set()
        self.pending: list[str] = []  # lines written before a switch of screens, not yet taken
        self.cpr_asked = 0  # cursor position requests (`ESC[6n`) not yet answered
        self.carry = ""

    def resize(self, width: int, height: int) -> None:
        self.w, self.h = max(1, width), max(1, height)
        self.r = min(self.r, self.top + self.h - 1)
        self.c = min(self.c, self.w - 1)

    def _row(self, r: int) -> list[str]:
        while self.base + len(self.rows) <= r:
            self.rows.append([])
        return self.rows[r - self.base]

    def _lf(self) -> None:
        if self.r >= self.top + self.h - 1:
            self.top += 1
        self.r += 1
        self._row(self.r)

    def _put(self, text: str) -> None:
        if text.isascii():  # fast path: one slice assignment per screen row
            while text:
                if self.c >= self.w:
                    self.c = 0
                    self._lf()
                chunk, text = text[: self.w - self.c], text[self.w - self.c :]
                row = self._row(self.r)
                end = self.c + len(chunk)
                if len(row) < end:
                    row.extend(" " * (end - len(row)))
                row[self.c : end] = chunk
                self.c = end
                self.dirty.add(self.r)
            return
        for ch in text:
            wide = not ch.isascii() and unicodedata.east_asian_width(ch) in ("W", "F")
            if unicodedata.combining(ch) and self.c > 0:
                row = self._row(self.r)
                if self.c - 1 < len(row):
                    row[self.c - 1] += ch
                continue
            n = 2 if wide else 1
            if self.c + n > self.w:
                self.c = 0
                self._lf()
            row = self._row(self.r)
            if len(row) < self.c + n:
                row.extend(" " * (self.c + n - len(row)))
            row[self.c] = ch
            if wide:
                row[self.c + 1] = ""
            self.c += n
            self.dirty.add(self.r)

    def _erase_line(self, r: int, start: int, end: int | None) -> None:
        row = self._row(r)
        end = len(row) if end is None else min(end, len(row))
        for i in range(start, end):
            row[i] = " "
        self.dirty.add(r)

    def feed(self, data: str) -> None:
        data, self.carry = self.carry + data, ""
        cut = _INCOMPLETE.search(data, max(0, len(data) - _MAX_CARRY))
        if cut is not None:
            data, self.carry = data[: cut.start()], data[cut.start() :]
        for m in _TOKEN.finditer(data):
            tok = m.group(0)
            ch = tok[0]
            if ch not in "\x1b\x7f" and ch >= " ":
                self._put(tok)
            elif ch == "\r":
                self.c = 0
            elif ch in "\n\x0b\x0c":
                self._lf()
            elif ch == "\b":
                self.c = max(0, self.c - 1)
            elif ch == "\t":
                self.c = min(self.w - 1, (self.c // 8 + 1) * 8)
            elif ch == "\x1b" and len(tok) > 1:
                self._escape(tok)

    def _escape(self, tok: str) -> None:
        if tok[1] == "[":
            self._csi(tok)
        elif tok == "\x1bM":
            self.r = max(self.top, self.r - 1)
        elif tok == "\x1bD":
            self._lf()
        elif tok == "\x1bE":
            self.c = 0
            self._lf()
        elif tok == "\x1b7":
            self.saved = (self.r - self.top, self.c)
        elif tok == "\x1b8":
            self.r, self.c = self.top + self.saved[0], self.saved[1]
        elif tok == "\x1bc":
            self._clear_viewport()
            self.r, self.c = self.top, 0

    def _clear_viewport(self) -> None:
        for r in range(self.top, self.top + self.h):
            if r < self.base + len(self.rows):
                self._row(r).clear()
                self.dirty.add(r)

    def _csi(self, tok: str) -> None:
        final = tok[-1]
        private = tok[2:3] == "?"
        if final == "n" and _params(tok, 0)[0] == 6:  # a cursor position request: the terminal answers on input
            self.cpr_asked += 1
            return
        if private:
            if final in "hl" and any(p in (47, 1047, 1049) for p in _params(tok, 0)):
                self._alt_screen(final == "h")
            return
        p = _params(tok, 1)
        n = max(1, p[0])
        bottom = self.top + self.h - 1
        if final == "A":
            self.r = max(self.top, self.r - n)
        elif final in "Be":
            self.r = min(bottom, self.r + n)
        elif final in "Ca":
            self.c = min(self.w - 1, self.c + n)
        elif final == "D":
            self.c = max(0, self.c - n)
        elif final == "E":
            self.r, self.c = min(bottom, self.r + n), 0
        elif final == "F":
            self.r, self.c = max(self.top, self.r - n), 0
        elif final in "G`":
            self.c = min(self.w - 1, n - 1)
        elif final in "Hf":
            row = p[0] if p[0] > 0 else 1
            col = p[1] if len(p) > 1 and p[1] > 0 else 1
            self.r, self.c = min(bottom, self.top + row - 1), min(self.w - 1, col - 1)
        elif final == "d":
            self.r = min(bottom, self.top + n - 1)
        elif final == "J":
            mode = _params(tok, 0)[0]
            if mode == 0:
                self._erase_line(self.r, self.c, None)
                for r in range(self.r + 1, min(bottom + 1, self.base + len(self.rows))):
                    self._erase_line(r, 0, None)
            elif mode == 1:
                for r in range(self.top, self.r):
                    self._erase_line(r, 0, None)
                self._erase_line(self.r, 0, self.c + 1)
            else:
                self._clear_viewport()
        elif final == "K":
            mode = _params(tok, 0)[0]
            if mode == 0:
                self._erase_line(self.r, self.c, None)
            elif mode == 1:
                self._erase_line(self.r, 0, self.c + 1)
            else:
                self._erase_line(self.r, 0, None)
        elif final == "X":
            self._erase_line(self.r, self.c, self.c + n)
        elif final == "P":
            row = self._row(self.r)
            del row[self.c : self.c + n]
            self.dirty.add(self.r)
        elif final == "@":
            row = self._row(self.r)
            if self.c <= len(row):
                row[self.c : self.c] = [" "] * n
                del row[self.w :]
            self.dirty.add(self.r)
        elif final == "s":
            self.saved = (self.r - self.top, self.c)
        elif final == "u":
            self.r, self.c = self.top + self.saved[0], self.saved[1]
        # SGR (m), modes (h/l), scroll regions and the rest do not change the text

    def _alt_screen(self, enter: bool) -> None:
        """Switch between the main and the alternate screen, two separate canvases (the main one is
        kept untouched while the other is shown, as a terminal does). What was written on the screen
        being left since the last `take()` is kept for the next one, in order; the screen switched to
        starts with nothing written, so rows restored on leaving are not new output."""
        if enter and self.alt is None:
            self.pending += self._written()
            self.alt = (self.rows, self.base, self.top, self.r - self.top, self.c)
            self.rows = [[] for _ in range(self.h)]
            self.base = self.top = 0
            self.r = min(self.alt[3], self.h - 1)
        elif not enter and self.alt is not None:
            self.pending += self._written()
            self.rows, self.base, self.top, r, c = self.alt
            self.alt = None
            self.r, self.c = self.top + min(r, self.h - 1), min(c, self.w - 1)
            self._row(self.r)

    def _written(self) -> list[str]:
        lines = ["".join(self.rows[r - self.base]).rstrip() for r in sorted(self.dirty) if r >= self.base]
        self.dirty = set()
        return lines

    def take(self) -> str:
        """Text of the rows written since the last call, on either screen, in the order the screens
        were shown; blank runs collapsed to one line."""
        lines = self.pending + self._written()
        self.pending = []
        keep_from = min(self.top, self.r) - self.base
        if keep_from > 0:
            del self.rows[:keep_from]
            self.base += keep_from
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        while out and not out[-1]:
            out.pop()
        return "\n".join(out)


_KEYS = {
    "A": "<Up>",
    "B": "<Down>",
    "C": "<Right>",
    "D": "<Left>",
    "H": "<Home>",
    "F": "<End>",
    "Z": "<S-Tab>",
    "2~": "<Insert>",
    "3~": "<Delete>",
    "5~": "<PageUp>",
    "6~": "<PageDown>",
}


class _Input:
    """Keystrokes of one input line, composed into the text the user meant; or, in a full-screen
    program (`keys=True`), the keys as pressed: Enter is `<Enter>`, backspace `<BS>`, and no key
    submits (each key acts at once)."""

    def __init__(self, keys: bool = False) -> None:
        self.parts: list[tuple[bool, str]] = []  # (is_key, text): literal characters or key names
        self.raw: list[str] = []
        self.replies: list[str] = []  # the terminal's answers to the program's queries (not typed)
        self.paste = False
        self.keys = keys

    def key(self, tok: str) -> bool:
        """Feed one token; True if it submits the line (Enter, Ctrl-C, Ctrl-D outside a paste)."""
        if self.paste:
            if tok == "\x1b[201~":
                self.paste = False
            else:
                self.parts.append((False, tok))
            return False
        if tok == "\x1b[200~":
            self.paste = True
        elif tok in ("\r", "\n"):
            if self.keys:
                self.parts.append((True, "<Enter>"))
                return False
            return True
        elif tok in ("\x03", "\x04"):
            self.parts.append((True, "^" + chr(ord(tok) + 64)))
            return not self.keys
        elif tok in ("\x7f", "\b"):
            if self.keys:
                self.parts.append((True, "<BS>"))
            elif self.parts and not self.parts[-1][0]:
                self.parts.pop()
            elif self.parts:  # after a key (history recall, completion) the effect is unknown
                self.parts.append((True, "<BS>"))
        elif tok == "\t":
            self.parts.append((True, "<Tab>"))
        elif tok == "\x1b":
            self.parts.append((True, "<Esc>"))
        elif tok.startswith(("\x1b[", "\x1bO")):
            body = tok[2:]
            name = _KEYS.get(body if body.endswith("~") else body[-1:])
            self.parts.append((True, name or f"<ESC{tok[1:]}>"))
        elif tok.startswith("\x1b"):
            self.parts.append((True, f"<M-{tok[1:]}>"))
        elif len(tok) == 1 and tok < " ":
            self.parts.append((True, "^" + chr(ord(tok) + 64)))
        else:
            self.parts.append((False, tok))
        return False

    def value(self) -> str:
        return "".join(t for _, t in self.parts)


_INPUT_TOKEN = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # an OSC string, whole (only with its terminator)
    r"|\x1b[P_^X][^\x1b]*\x1b\\"  # DCS / APC / PM / SOS, whole (only with its terminator)
    r"|\x1b\[[0-?]*[ -/]*[@-~]|\x1bO.|\x1b.?|[\x00-\x1f\x7f]|[^\x00-\x1f\x7f\x1b]",
    re.S,
)
_CSI_PARTS = re.compile(r"\x1b\[([0-?]*)([ -/]*)([@-~])")


def _is_reply(tok: str, screen: Screen) -> bool:
    """Whether an input token is the terminal answering a program's query, not a key anyone pressed:
    OSC / DCS / APC strings (colour answers `ESC]11;rgb:...`, XTVERSION, DECRQSS), CSI with a `?`,
    `>` or `=` parameter prefix (device attributes `ESC[?...c` / `ESC[>...c`, DEC mode reports
    `ESC[?...$y`, keyboard-protocol flags `ESC[?...u`), device status / cursor position reports
    (`ESC[...n`, `ESC[<row>;<col>R`), window reports (`ESC[...t`), ANSI mode reports (`ESC[...$y`)
    and focus in / out (`ESC[I`, `ESC[O`). Keys never have these shapes, except `ESC[1;<m>R`, which
    is also a modified F3 (xterm): it is a report only when the program asked for the cursor
    position. Mouse reports (`ESC[<...M`, `ESC[M...`) are the user's input and stay."""
    if len(tok) < 3 or tok[0] != "\x1b":
        return False
    if tok[1] in "]P_^X":  # a whole string with its terminator (an Alt key is two characters)
        return True
    m = _CSI_PARTS.fullmatch(tok)
    if m is None:
        return False
    params, inter, final = m.groups()
    if params[:1] in ("?", ">", "="):
        return True
    if (final == "y" and inter == "$") or final in "nt" or (final in "IO" and not params and not inter):
        return True
    if final == "R" and not inter and re.fullmatch(r"\d+;\d+", params):
        asked = screen.cpr_asked > 0
        screen.cpr_asked = max(0, screen.cpr_asked - 1)
        return asked or not re.fullmatch(r"1;([2-9]|1[0-6])", params)
    return False


def _is_header(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if obj.get("version") == 2:
        return isinstance(obj.get("width"), int) and isinstance(obj.get("height"), int)
    if obj.get("version") == 3:
        term = obj.get("term")
        return (
            isinstance(term, dict) and isinstance(term.get("cols"), int) and isinstance(term.get("rows"), int)
        )
    return False


class AsciicastImporter(Importer):
    name = "asciicast"
    container = "text"
    version = "5"  # 2: full-screen programs (alternate screen) and terminal replies read as described above;
    # 3: input events that hold no key make an output-only recording;
    # 4: a turn's locator covers the markers and resizes its metadata holds;
    # 5: several lines in one input event are one turn

    def sniff(self, head: bytes) -> bool:
        nl = head.find(b"\n")
        first = head if nl < 0 else head[:nl]
        try:
            obj = parse_json(first)
        except orjson.JSONDecodeError:
            return False
        if not _is_header(obj):
            return False
        rest = head[nl + 1 :].lstrip() if nl >= 0 else b""
        return not rest or rest[:1] in (b"[", b"#")

    def split(self, stream: IO[bytes], ctx: ImportContext):
        yield "$", stream

    def convert(self, stream: IO[bytes], locator: str, ctx: ImportContext) -> Trajectory:
        lines = self._lines(stream, ctx.limits.max_record_bytes)
        try:
            lineno, raw = next(lines)
        except StopIteration:
            raise RecordError("empty_input", "line:1: no asciicast header") from None
        try:
            header = parse_json(raw)
        except orjson.JSONDecodeError as e:
            raise RecordError("invalid_json", f"line:{lineno}: header: {e}") from None
        if not _is_header(header):
            raise RecordError("malformed_record", f"line:{lineno}: not an asciicast v2/v3 header")
        version = header["version"]
        width = header["width"] if version == 2 else header["term"]["cols"]
        height = header["height"] if version == 2 else header["term"]["rows"]
        ts = header.get("timestamp")
        t0 = (
            datetime.fromtimestamp(ts, UTC)
            if isinstance(ts, int | float) and not isinstance(ts, bool)
            else None
        )

        b = _Builder(width, height, t0)
        t_abs = 0.0
        pending_error: RecordError | None = None
        for lineno, raw in lines:
            if pending_error is not None:  # a bad line followed by more: the file is corrupt
                raise pending_error
            if not raw.strip() or (version == 3 and raw.lstrip().startswith(b"#")):
                continue
            try:
                ev = parse_json(raw)
            except orjson.JSONDecodeError as e:
                pending_error = RecordError("invalid_json", f"line:{lineno}: event: {e}")
                continue
            if not (
                isinstance(ev, list)
                and len(ev) >= 3
                and isinstance(ev[0], int | float)
                and not isinstance(ev[0], bool)
                and isinstance(ev[1], str)
                and isinstance(ev[2], str)
            ):
                raise RecordError(
                    "malformed_record", f"line:{lineno}: event is not [time, code, data]: {raw[:100]!r}"
                )
            t_abs = round(t_abs + ev[0], 6) if version == 3 else float(ev[0])
            b.event(lineno, t_abs, ev[1], ev[2])
        return _recording(header, version, width, height, t0, b, pending_error.detail if pending_error else None,
                          ctx, locator)

    @staticmethod
    def _lines(stream: IO[bytes], limit: int):
        n = 0
        while True:
            line = stream.readline(limit + 1)
            if not line:
                return
            n += 1
            if len(line) > limit:
                raise RecordError("record_too_large", f"line:{n}: longer than {limit} bytes")
            yield n, line


class AsciicastV1Importer(Importer):
    """asciicast v1 (asciinema before 2.0): one JSON document `{"version": 1, "width", "height",
    "duration", "command", "title", "env", "stdout": [[delay, text], ...]}`, each frame's delay in
    seconds since the previous one. It records output only, so it reads as a v2 recording without
    keystrokes: one turn without action (`metadata.output_only`), located `stdout[0:N]`."""

    name = "asciicast-v1"
    container = "json"

    def sniff(self, doc: Any) -> bool:
        return (isinstance(doc, dict) and doc.get("version") == 1 and isinstance(doc.get("stdout"), list)
                and isinstance(doc.get("width"), int) and isinstance(doc.get("height"), int))

    def convert(self, doc: dict, locator: str, ctx: ImportContext) -> Trajectory:
        frames = doc["stdout"]
        b = _Builder(doc["width"], doc["height"], None, whole=f"stdout[0:{len(frames)}]")
        t = 0.0
        for i, fr in enumerate(frames):
            if not (isinstance(fr, list) and len(fr) == 2 and isinstance(fr[0], int | float) and not isinstance(fr[0], bool)
                    and isinstance(fr[1], str)):
                raise RecordError("malformed_record", f"stdout[{i}]: a frame is [delay, text], got {str(fr)[:100]!r}")
            t = round(t + fr[0], 6)
            b.event(i + 1, t, "o", fr[1])
        return _recording(doc, 1, doc["width"], doc["height"], None, b, None, ctx, locator)


def _recording(header: dict, version: int, width: int, height: int, t0: datetime | None, b: _Builder,
               truncated: str | None, ctx: ImportContext, locator: str) -> Trajectory:
    """The trajectory of a recording whose events `b` has read."""
    turns, initial, extra = b.finish()
    env = header.get("env") if isinstance(header.get("env"), dict) else None
    if version == 3 and isinstance(header["term"].get("type"), str):
        env = {**(env or {}), "TERM": header["term"]["type"]}
    fingerprint = {"width": width, "height": height, "env": env}
    if version == 3 and header["term"].get("version") is not None:
        fingerprint["term_version"] = header["term"]["version"]  # the recording terminal's version
    used = {"version", "width", "height", "timestamp", "env", "term", "title", "command", "duration",
            "idle_time_limit", "tags", "stdout"}  # v1: its frames are the events
    meta = {
        "asciicast_version": version,
        "title": header.get("title"),
        "command": header.get("command"),
        "duration": header.get("duration"),
        "idle_time_limit": header.get("idle_time_limit"),
        "tags": header.get("tags"),
        "truncated_last_line": truncated,
        # header fields this reader has no column for (v2 `theme`, v3 `term.theme`, ...), kept as written
        "header_other": {k: v for k, v in header.items() if k not in used} or None,
        "term_theme": header["term"].get("theme") if version == 3 else None,
        **extra,
    }
    return Trajectory(
        domain="terminal",  # the environment the format records: `--domain` does not change it
        source_format="asciicast",
        native_id=None,
        record_digest=ctx.record_digest(locator),
        turns=turns,
        task=header.get("title") if isinstance(header.get("title"), str) else None,
        initial_state=initial,
        outcome=f"exit:{extra['exit_status']}" if extra.get("exit_status") is not None else None,
        env_fingerprint=dumps(fingerprint),
        collected_at=t0,
        metadata=dumps({k: v for k, v in meta.items() if v is not None}),
        locator=locator,
    )


class _Builder:
    """Turns from the event sequence, in one pass."""

    def __init__(self, width: int, height: int, t0: datetime | None, whole: str | None = None):
        self.whole = whole  # the locator of a recording read as one turn (default: its event lines)
        self.screen = Screen(width, height)
        self.size0 = (width, height)
        self.resize_lines: list[tuple[int, int, int]] = []  # (line, cols, rows): replayed by `_output_only`
        self.t0 = t0
        self.turns: list[dict] = []
        self.cur: dict | None = None  # the turn being typed or answered
        self.pre_out: list[tuple[int, float, str]] = []  # output before the first keystroke
        self.pre_screen: str | None = None
        self.markers: list[dict] = []  # markers before the first keystroke
        self.resizes: list[dict] = []
        self.exit_status: Any = None
        self.has_input = False
        self.replies: list[str] = []  # terminal replies before the first keystroke
        self.last_line = 1

    def _start(self, lineno: int, t: float) -> dict:
        if self.cur is None and not self.turns:
            self.pre_screen = self.screen.take()
        elif self.cur is not None:
            self._close()
        self.cur = {
            "input": _Input(keys=self.screen.alt is not None),
            "t_first": t,
            "t_enter": None,
            "typing": False,  # a line after the first of a turn that holds several, not yet ended
            "t_last_out": None,
            "answered": False,  # output arrived since the last keystroke
            "out": [],
            "first_line": lineno,
            "last_line": lineno,
            "markers": [],
            "resizes": [],
        }
        return self.cur

    def _close(self) -> None:
        cur = self.cur
        assert cur is not None
        cur["screen"] = self.screen.take()
        self.turns.append(cur)
        self.cur = None

    def _new_turn(self) -> bool:
        """Whether the next keystroke starts a turn: see the module docstring."""
        cur = self.cur
        if cur is None:
            return True
        if cur["input"].paste:
            return False
        alt = self.screen.alt is not None
        if cur["input"].keys:  # a key turn in a full-screen program: answered, or the program has left
            return cur["answered"] or not alt
        return (cur["t_enter"] is not None and not cur["typing"]) or (alt and cur["answered"])

    def event(self, lineno: int, t: float, code: str, data: str) -> None:
        self.last_line = lineno
        if code == "i":
            tokens = _INPUT_TOKEN.findall(data)
            if not tokens:
                self.has_input = True
            prev = None
            ended = None  # the line turn an Enter (or ^C/^D) of this event ended
            for tok in tokens:
                cur = self.cur
                if not (cur is not None and cur["input"].paste) and _is_reply(tok, self.screen):
                    (cur["input"].replies if cur is not None else self.replies).append(tok)
                    continue
                line_turn = cur is not None and not cur["input"].keys and not cur["input"].paste
                if line_turn and ((tok == "\n" and prev == "\r") or (cur is ended and tok in ("\r", "\n"))):
                    # CR LF (a script's or Windows' line end) is one Enter, not two; an empty line after one
                    # in the same event adds nothing
                    cur["input"].raw.append(tok)
                    prev = tok
                    continue
                prev = tok
                self.has_input = True
                if cur is not None and cur is ended:  # more lines in this event: their output is not told apart
                    cur["input"].parts.append((False, "\n"))
                    cur["typing"] = True
                    ended = None
                elif self._new_turn():
                    cur = self._start(lineno, t)
                assert cur is not None
                cur["input"].raw.append(tok)
                cur["last_line"] = lineno
                cur["answered"] = False
                submits = cur["input"].key(tok)
                if cur["input"].keys:
                    cur["t_enter"] = t
                elif submits:
                    cur["t_enter"] = t if cur["t_enter"] is None else cur["t_enter"]  # a joined turn ran at its first
                    cur["typing"] = False
                    ended = cur if cur["input"].value() else None
        elif code == "o":
            self.screen.feed(data)
            if self.cur is None:
                self.pre_out.append((lineno, t, data))
            else:
                self.cur["out"].append(data)
                self.cur["t_last_out"] = t
                self.cur["last_line"] = lineno
                self.cur["answered"] = True
        elif code == "m":
            mark = {"t": t, "label": data, "line": lineno}
            (self.cur["markers"] if self.cur is not None else self.markers).append(mark)
            self._covers(lineno)
        elif code == "r":
            m = re.match(r"^(\d+)x(\d+)$", data.strip())
            if m:
                self.screen.resize(int(m[1]), int(m[2]))
                self.resize_lines.append((lineno, int(m[1]), int(m[2])))
            rz = {"t": t, "size": data}
            (self.cur["resizes"] if self.cur is not None else self.resizes).append(rz)
            self._covers(lineno)
        elif code == "x":
            self.exit_status = int(data) if data.strip().lstrip("-").isdigit() else data
        # unknown codes are ignored: the format reserves them for extensions

    def _covers(self, lineno: int) -> None:
        """A marker or resize kept in the current turn's metadata is within its locator's lines."""
        if self.cur is not None:
            self.cur["last_line"] = lineno

    def _time(self, t: float | None):
        if self.t0 is None or t is None:
            return None
        return datetime.fromtimestamp(self.t0.timestamp() + t, UTC)

    def finish(self) -> tuple[list[Turn], str | None, dict]:
        extra: dict[str, Any] = {
            "exit_status": self.exit_status,
            "resizes": self.resizes or None,
            "terminal_replies": "".join(self.replies) or None,
        }
        if not self.has_input or (self.cur is None and not self.turns):  # input events with no key in any: output only
            return self._output_only(extra)
        if self.cur is not None:
            self._close()
        turns = []
        for cur in self.turns:
            inp: _Input = cur["input"]
            submitted = cur["t_enter"] is not None
            end = cur["t_last_out"]
            duration = None
            if submitted:
                duration = round(max(0.0, (end or cur["t_enter"]) - cur["t_enter"]), 6)
            meta = {
                "input_raw": "".join(inp.raw),
                "terminal_replies": "".join(inp.replies) or None,
                "full_screen": inp.keys or None,
                "t": cur["t_first"],
                "t_enter": cur["t_enter"],
                "submitted": submitted,
                "markers": cur["markers"] or None,
                "resizes": cur["resizes"] or None,
            }
            turns.append(
                Turn(
                    kind="env",
                    action=inp.value(),
                    observation=cur["screen"],
                    observation_kind="terminal_screen",
                    stdout="".join(cur["out"]),
                    started_at=self._time(cur["t_first"]),
                    duration_s=duration,
                    locator=f"line:{cur['first_line']}-{cur['last_line']}",
                    metadata=dumps({k: v for k, v in meta.items() if v is not None}),
                )
            )
        extra["markers"] = self.markers or None
        extra["initial_stdout"] = "".join(d for _, _, d in self.pre_out) or None
        return turns, self.pre_screen or None, extra

    def _output_only(self, extra: dict) -> tuple[list[Turn], str | None, dict]:
        """No keystrokes were recorded: split at markers if any, else one turn without action."""
        extra["output_only"] = True
        if not self.markers:
            turn = Turn(
                kind="env",
                action=None,
                observation=self.screen.take(),
                observation_kind="terminal_screen",
                stdout="".join(d for _, _, d in self.pre_out),
                started_at=self._time(0.0),
                locator=self.whole or f"line:2-{self.last_line}",
                metadata=dumps({"output_only": True}),
            )
            return [turn], None, extra
        # Replay the output through a fresh screen of the header's size, resized where the recording
        # was, cutting at each marker.
        extra["split"] = "markers"
        screen = Screen(*self.size0)
        resizes = list(self.resize_lines)

        def resize_before(line: int | None) -> None:
            while resizes and (line is None or resizes[0][0] < line):
                _, cols, rows = resizes.pop(0)
                screen.resize(cols, rows)

        marks = sorted(self.markers, key=lambda m: m["line"])
        events = self.pre_out
        j = 0
        while j < len(events) and events[j][0] < marks[0]["line"]:
            resize_before(events[j][0])
            screen.feed(events[j][2])
            j += 1
        resize_before(marks[0]["line"])
        initial = screen.take() or None
        turns = []
        for k, mark in enumerate(marks):
            stop = marks[k + 1]["line"] if k + 1 < len(marks) else None
            out = []
            t_last = None
            while j < len(events) and (stop is None or events[j][0] < stop):
                resize_before(events[j][0])
                screen.feed(events[j][2])
                out.append(events[j][2])
                t_last = events[j][1]
                j += 1
            resize_before(stop)
            turns.append(
                Turn(
                    kind="env",
                    action=mark["label"],
                    observation=screen.take(),
                    observation_kind="terminal_screen",
                    stdout="".join(out),
                    started_at=self._time(mark["t"]),
                    duration_s=round(max(0.0, t_last - mark["t"]), 6) if t_last is not None else 0.0,
                    locator=f"line:{mark['line']}-{(stop - 1) if stop else self.last_line}",
                    metadata=dumps({"output_only": True, "action_from": "marker"}),
                )
            )
        return turns, initial, extra
