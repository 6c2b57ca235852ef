"""Command lines the stages show their users (a summary's `see:` line, an asset's `see_more`), written
so that a shell runs them as shown. Light to import: ingest workers and collectors import it."""

from __future__ import annotations

import re
import shlex
from pathlib import Path


def query_command(root: Path | str, sql: str) -> str:
    """The `worldline query` command line that shows `sql`'s rows (a `see:` line, a `see_more`), as a shell
    takes it: the path quoted (spaces, quotes), the SQL in double quotes with what a shell would expand
    there escaped."""
    quoted = _SHELL_DQ.sub(r"\\\g<0>", sql)
    return f'{worldline_command("query", root)} "{quoted}"'


def worldline_command(*args: Path | str) -> str:
    """A `worldline` command line (a contract's `rerun`, an error's hint) with each argument quoted as a
    shell needs it: a corpus path with a space or a quote is one argument still."""
    return " ".join(["worldline", *(shlex.quote(str(a)) for a in args)])


_SHELL_DQ = re.compile(r'[\\"$`]')  # what a shell still reads inside double quotes
