"""Canonical form: each volatile kind becomes its token, the rest stays, both engines agree."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from pipelines.canonical import canonical, canonical_sql
from tests.pipelines.clean_support import rows, sample_corpus  # noqa: F401 - fixture

CASES = [
    ("2024-01-05T12:34:56.123Z started", "<TS> started"),
    ("at 2024-01-05 12:34:56+02:00 ok", "at <TS> ok"),
    ("-rw-r--r-- 1 root root 0 Jan  3 12:34 file.txt", "-rw-r--r-- 1 root root 0 <TS> file.txt"),
    ("Date: Mon, 02 Jan 2006 15:04:05 GMT", "Date: <TS>"),
    ("ts=1717171717 x", "ts=<TS> x"),
    ("elapsed 12:04:59.5", "elapsed <TIME>"),
    ("worker pid 4242 up, PID: 17, ppid=3", "worker pid <PID> up, PID: <PID>, ppid=<PID>"),
    ("sshd[1234]: Accepted key", "sshd[<PID>]: Accepted key"),
    ("[1] 12345", "[<JOB>] <PID>"),
    ("<object at 0x7f3a2b1c4d00>", "<object at <ADDR>>"),
    ("request 123e4567-e89b-12d3-a456-426614174000 done", "request <UUID> done"),
    ("wrote /tmp/tmpk2j3h4ab/out.txt and /tmp/pytest-of-root/pytest-3/x", "wrote <TMP>/out.txt and <TMP>/pytest-3/x"),
    ("cd /var/folders/xy/abc123/T/tmpq", "cd <TMP>"),
    ("made tmpab12cd_x", "made <TMP>"),
    ("== 3 passed in 0.12s ==", "== 3 passed in <DUR> =="),
    ("real\t0m1.234s", "real\t<DUR>"),
    ("took 350 ms, then 2.5 seconds", "took <DUR>, then <DUR>"),
    ("\x1b[1;31merror\x1b[0m: \x1b]0;title\x07x", "error: x"),
    ("line one\r\nline two\r\n", "line one\nline two\n"),
    ("Downloading 10%\rDownloading 55%\rDownloading 100%\ndone", "Downloading 100%\ndone"),
    (" 45%|████▌     | 45/100 [00:01<00:02, 30.1it/s]\r100%|██████████| 100/100 [00:03<00:00, 30.1it/s]\nok", "<PROGRESS>\nok"),
    ("a\n   ━━━━━━━━━━━━━━━━━━━━ 1.2/3.4 MB 2.1 MB/s eta 0:00:01\n   ━━━━━━━━━━━━━━━━━━━━ 3.4/3.4 MB 2.1 MB/s\nb", "a\n<PROGRESS>\nb"),
    ("trailing   \nx\t", "trailing\nx"),
    ("a\u00a0b\u2003\u2003c\u3000", "a b c"),  # Unicode spaces are spaces
    ("exit code 1; 42 files; version 3.11.4", "exit code 1; 42 files; version 3.11.4"),  # not volatile: kept
]


@pytest.mark.parametrize(("text", "want"), CASES)
def test_each_volatile_kind(text: str, want: str) -> None:
    assert canonical(text) == want
    con = duckdb.connect()
    assert con.execute(f"SELECT {canonical_sql('$1')}", [text]).fetchall()[0][0] == want


def test_none_and_empty() -> None:
    assert canonical(None) == "" and canonical("") == ""
    assert duckdb.connect().sql(f"SELECT {canonical_sql('NULL::VARCHAR')}").fetchall()[0][0] == ""


def test_runs_that_differ_only_in_volatile_values_are_equal() -> None:
    a = "[2026-01-05T10:00:00Z] pid=311 built /tmp/tmpaaaaaaaa/w in 1.5s at 0x7f0000001000 (id 0f8fad5b-d9cb-469f-a165-70867728950e)"
    b = "[2027-12-31T23:59:59Z] pid=98765 built /tmp/tmpzzzzzzzz/w in 22.75s at 0x7fffabcdef00 (id 7c9e6679-7425-40de-944b-e07fc1f90ae7)"
    assert a != b and canonical(a) == canonical(b) == "[<TS>] pid=<PID> built <TMP>/w in <DUR> at <ADDR> (id <UUID>)"


@pytest.mark.parametrize("text, want", [
    ("foo\r", "foo"), ("total 8\r\r\nfile_a.txt\r\r\n", "total 8\nfile_a.txt\n"), ("x\r\r", "x"),
    ("a\rb", "b"), ("a\r\rb", "b"), ("50%\r100%\ndone\r\n", "100%\ndone\n"),
])
def test_a_carriage_return_that_ends_a_line_erases_nothing(text: str, want: str) -> None:
    """Only a carriage return with text after it on its line redraws the line; `\r\r\n` and a last `\r`
    erased what was before them (in Python and in DuckDB alike)."""
    assert canonical(text) == want
    with duckdb.connect() as con:  # its own: an unfinished result on the default connection breaks later users of it
        assert con.execute(f"SELECT {canonical_sql('c')} FROM (SELECT $1 AS c)", [text]).fetchall() == [(want,)]


def test_python_and_duckdb_agree_on_every_sample_turn(sample_corpus: Path) -> None:  # noqa: F811 - fixture
    pairs = rows(sample_corpus, f"""SELECT action, observation, {canonical_sql('action')}, {canonical_sql('observation')}
                                    FROM turns ORDER BY trajectory_id, turn_index""")
    assert len(pairs) == 3702
    diff = [(a, o) for a, o, ca, co in pairs if canonical(a) != ca or canonical(o) != co]
    assert diff == []
    changed = sum(canonical(o) != (o or "") for _, o, _, _ in pairs)
    # observations with something volatile (timestamps, paths, durations, unicode spaces, ...); InterCode's plain
    # `submit` turns have none (6 of their 59 repeated observations had some)
    assert changed == 131
