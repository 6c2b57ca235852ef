"""Canonical form of volatile content, for hashing and comparison only (the data stays verbatim).

Two runs of the same agent session differ in wall-clock times, process ids, heap addresses,
temporary directory names, request ids, durations, terminal colour codes and progress bars. None of
that is what a world model should learn to tell apart, so exact and near-duplicate detection, the
"GUI observation did not change" filter, retry detection and shared-prefix detection compare
canonical text, in which each such value is replaced by a typed token (`<TS>`, `<PID>`, ...).

One list of rules, two engines: `canonical()` runs them with Python's `re` (ASCII mode) on single
strings; `canonical_sql()` builds the same chain of `regexp_replace` calls for DuckDB (RE2: linear
time, vectorized, parallel), which is what corpus-scale stages use. The rules are therefore written
in the common subset of both syntaxes — no look-around, no `\\s` (RE2's lacks `\\v`), explicit ASCII
classes — and a test checks that both engines agree on every turn of the sample corpus.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]*"
_DAYS = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)[a-z]*"
_WS = r" \t\n\r\f\v"  # ASCII whitespace, spelled out so that both engines agree
_BAR = r"(?:[█▉▊▋▌▍▎▏░▒▓━╸╺╾]{2,}|\[[=#>. -]{4,}\]|\|[#█ ]{4,}\|)"
_RATE = r"(?:[0-9]%|[0-9] ?[kKMGT]?i?B/s|it/s|s/it|\beta\b|[0-9]+/[0-9]+)"


@dataclass(frozen=True)
class Rule:
    """One substitution. `needs` is a literal that must occur for the rule to match at all: a
    cheap pre-check that skips the regex (Python) or the call (DuckDB) for most strings."""

    name: str
    pattern: str
    replacement: str
    needs: str | None = None


# Order matters: escapes and carriage returns first (they hide the text behind them), progress
# bars before the numbers in them, timestamps before bare times and durations, UUIDs before hex.
RULES: tuple[Rule, ...] = (
    # ANSI/VT100 escape sequences: CSI (colours, cursor moves), OSC (titles, links), two-byte ESC.
    Rule("ansi", r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]", "", "\x1b"),
    # A carriage return that does not end a line redraws it: only what was drawn last is visible. Those that
    # end a line (`\r\r\n` of a pty, a last `foo\r`) go first: the text before them is what stays visible.
    Rule("crlf", r"\r+\n", "\n", "\r"),
    Rule("trailing_cr", r"\r+$", "", "\r"),
    Rule("carriage_return", r"[^\n\r]*\r", "", "\r"),
    # Unicode spaces (no-break, en/em, thin, ideographic, zero-width) are spaces: terminal and web
    # pages pad with them, and they would otherwise read as letters of one long "word".
    Rule("unicode_space", "[\u00a0\u1680\u2000-\u200b\u202f\u205f\u3000\ufeff]+", " "),
    # Progress bars (tqdm, pip/rich, wget, curl, docker pull, apt): the whole line, then runs of them.
    Rule("progress", rf"(?m)^[^\n]*{_BAR}[^\n]*{_RATE}[^\n]*$|^[^\n]*{_RATE}[^\n]*{_BAR}[^\n]*$", "<PROGRESS>"),
    Rule("progress_runs", r"<PROGRESS>(?:\n<PROGRESS>)+", "<PROGRESS>", "<PROGRESS>\n<PROGRESS>"),
    # Date-times: ISO 8601 / RFC 3339, RFC 2822 / HTTP dates, syslog and `ls -l` style, `date`.
    Rule(
        "timestamp",
        r"\b[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?(?: ?Z| ?[+-][0-9]{2}:?[0-9]{2}| ?UTC)?\b"
        rf"|\b(?:{_DAYS},? +)?[0-9]{{1,2}} +{_MONTHS} +[0-9]{{4}} +[0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}})?(?: +(?:GMT|UTC|[+-][0-9]{{4}}))?"
        rf"|\b(?:{_DAYS} +)?{_MONTHS} +[0-9]{{1,2}} +[0-9]{{2}}:[0-9]{{2}}(?::[0-9]{{2}})?(?: +(?:[A-Z]{{3,4}} +)?[0-9]{{4}})?"
        r"|\b[0-9]{4}/[0-9]{2}/[0-9]{2}[ T][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?"
        # Unix epoch seconds or milliseconds of 2017..2033 (10 or 13 digits).
        r"|\b1[5-9][0-9]{8}(?:[0-9]{3}|\.[0-9]+)?\b",
        "<TS>",
    ),
    Rule("time", r"\b[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:[.,][0-9]+)?\b", "<TIME>", ":"),
    Rule("uuid", r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b", "<UUID>", "-"),
    Rule("hex_address", r"\b0x[0-9a-fA-F]{6,16}\b", "<ADDR>", "0x"),
    # Temporary paths: the random directory under a temp root (the rest of the path is kept), and
    # `tempfile.mkdtemp()`-style names (tmp + 8 random characters).
    Rule(
        "temp_path",
        rf"(?:/private)?/var/folders/[^/{_WS}]+/[^/{_WS}]+/T(?:/[^/{_WS}'\"]+)?"
        rf"|/(?:tmp|var/tmp|dev/shm)/[^/{_WS}'\":,;)\]]+"
        rf"|[A-Za-z]:\\Users\\[^\\{_WS}]+\\AppData\\Local\\Temp(?:\\[^\\{_WS}'\"]+)?"
        r"|\btmp[a-z0-9_]{8}\b",
        "<TMP>",
    ),
    # Process ids: "pid 123", "PID: 123", "pid=123", "process 123", "sshd[123]:", job "[1] 123".
    Rule("pid", r"(?i)\b(pid|ppid|process)\b([ :=#]{0,3})[0-9]{1,7}\b", r"\1\2<PID>"),
    Rule("pid_brackets", r"\b([A-Za-z][A-Za-z0-9_.-]*)\[[0-9]{1,7}\]:", r"\1[<PID>]:", "]:"),
    Rule("pid_job", r"(?m)^\[[0-9]{1,3}\]\+? +[0-9]{1,7}$", "[<JOB>] <PID>", "["),
    # Durations: "0m1.234s", "0.12s", "350 ms", "3.2 seconds".
    Rule(
        "duration",
        r"\b[0-9]+m[0-9]+(?:\.[0-9]+)?s\b|\b[0-9]+(?:\.[0-9]+)?(?:ms|us|ns|s)\b|[0-9]+(?:\.[0-9]+)?µs"
        r"|\b[0-9]+(?:\.[0-9]+)? (?:milliseconds?|seconds?|secs?|minutes?|mins?|hours?|hrs?|ms)\b",
        "<DUR>",
    ),
    Rule("trailing_space", r"(?m)[ \t]+$", ""),
)

_COMPILED: list[tuple[Rule, re.Pattern[str]]] = [(r, re.compile(r.pattern, re.ASCII)) for r in RULES]


def canonical(text: str | None) -> str:
    """The canonical form of one string (None becomes the empty string)."""
    if not text:
        return ""
    for rule, rx in _COMPILED:
        if rule.needs is None or rule.needs in text:
            text = rx.sub(rule.replacement, text)
    return text


def _sql_str(s: str) -> str:
    """A SQL string literal; DuckDB strings have no backslash escapes, so only quotes need care.
    Control characters are spelled with chr() so the SQL text stays printable."""
    out, lit = [], []
    for ch in s:
        if ch in "\x00\x07\x1b\r" or (ord(ch) < 32 and ch not in "\n\t"):
            if lit:
                out.append("'" + "".join(lit).replace("'", "''") + "'")
                lit = []
            out.append(f"chr({ord(ch)})")
        else:
            lit.append(ch)
    if lit or not out:
        out.append("'" + "".join(lit).replace("'", "''") + "'")
    return " || ".join(out)


def _scoped(pattern: str) -> str:
    """`(?m)p` → `(?m:p)`, so that patterns with their own flags can be alternatives of one regex."""
    flags = ""
    while len(pattern) > 3 and pattern.startswith("(?") and pattern[2] in "im" and pattern[3] == ")":
        flags, pattern = flags + pattern[2], pattern[4:]
    return f"(?{flags}:{pattern})" if flags else f"(?:{pattern})"


# Matches wherever any rule would: most texts have nothing volatile (96% of the sample corpus's
# observations), and one RE2 pass over them replaces sixteen.
ANY_RULE = "|".join(_scoped(r.pattern) for r in RULES)


# For screens (accessibility trees, view hierarchies): what a terminal's output varies in, not a
# screen's values. A combo box set from "5 minutes" to "30 minutes", "Process 3 of 10" become
# "Process 4 of 10" are what the action changed, not noise (durations and process ids went).
SCREEN_RULES: tuple[Rule, ...] = tuple(r for r in RULES if r.name not in ("duration", "pid", "pid_brackets", "pid_job"))


def canonical_sql(expr: str, rules: tuple[Rule, ...] = RULES) -> str:
    """A DuckDB expression computing `canonical(expr)` (NULL becomes ''), or its form under `rules`
    (`SCREEN_RULES`). `expr` is evaluated twice: pass a column, not a computation."""
    sql = f"coalesce({expr}, '')"
    for rule in rules:
        # Patterns are given to RE2 verbatim: control characters stay as regex escapes (\x1b, \r).
        pattern = "'" + rule.pattern.replace("'", "''") + "'"
        # No CASE on `rule.needs` here: it would repeat the nested expression and grow it
        # exponentially; RE2 skips to a literal first byte on its own.
        sql = f"regexp_replace({sql}, {pattern}, {_sql_str(rule.replacement)}, 'g')"
    whole = ANY_RULE if rules is RULES else "|".join(_scoped(r.pattern) for r in rules)
    any_rule = "'" + whole.replace("'", "''") + "'"
    return f"(CASE WHEN regexp_matches(coalesce({expr}, ''), {any_rule}) THEN {sql} ELSE coalesce({expr}, '') END)"
