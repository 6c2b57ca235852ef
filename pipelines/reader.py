"""From paths to records: walk inputs, detect the container and format by content, convert.

Yields `(Trajectory, importer)` for good records and `(QuarantineRecord, None)` for everything
that cannot be read, so that `records in = accepted + quarantined` holds for every input.
"""

from __future__ import annotations

import codecs
import errno
import io
import operator
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import IO, Any

import orjson

from collectors.base import FolderRecord, ImportContext, Importer
from collectors.registry import IMPORTERS
from pipelines.parquet_input import BadRows, Row, is_parquet, parquet_rows
from pipelines.sources import (
    ExtractionFailed,
    InputError,
    ReadLimits,
    close_input,
    display_name,
    extract_tar,
    is_tar,
    iter_lines,
    json_problem,
    open_input,
    parse_json,
    read_bounded,
    sha256_file,
    stream_problem,
)
from pipelines.store import EXTRACTION_FAILED, holds_worldline_data
from schemas.records import QuarantineRecord, RecordError, Trajectory, digest
from schemas.tables import DOMAINS

DEFAULT_LIMITS = ReadLimits()

Item = tuple[Trajectory, Importer] | tuple[QuarantineRecord, None]

_BY_CONTAINER: dict[str, list[Importer]] = {}
for _imp in IMPORTERS:
    _BY_CONTAINER.setdefault(_imp.container, []).append(_imp)
# Who may take one parsed line: specific line formats, then whole-document formats (a document
# written on one line), then the generic ones (chat), which take any record of their shape.
_CHAT = next(i for i in IMPORTERS if i.name == "chat")
_LINE_ORDER = ([i for i in _BY_CONTAINER.get("jsonl", []) if not i.generic] + _BY_CONTAINER.get("json", [])
               + [i for i in _BY_CONTAINER.get("jsonl", []) if i.generic])


@dataclass
class InputUnit:
    """One thing to import: a file, or a directory a directory-format importer claimed."""

    path: Path
    source: str  # the name shown to people and stored in `source` columns
    importer: Importer | None = None  # set for claimed directories
    files: list[Path] = field(default_factory=list)
    not_a_file: str | None = None  # what an entry of an input folder is that is neither file nor folder: not read
    # why a folder inside an input folder could not be listed, or an entry's type told: quarantined, not read
    unreadable: OSError | None = None

    @property
    def is_dir(self) -> bool:
        return self.importer is not None

    def size(self) -> int:
        if self.not_a_file is not None or self.unreadable is not None:
            return 0
        if self.is_dir:
            return sum(p.stat().st_size for p in self.files if p.is_file())
        return self.path.stat().st_size

    def sha256(self) -> str:
        """The content address; for an input that cannot be read, one of its path, size and mtime, so
        that it is quarantined (`read_unit` says why) and tried again once it changes."""
        from schemas.records import digest

        if self.not_a_file is not None:  # never opened: a pipe would block, a dangling link has nothing
            return digest("not a file", str(self.path), self.not_a_file)
        if self.unreadable is not None:  # once it can be listed, its files are inputs of their own
            try:  # a file added to it (its time changes) is a new failed read, not one recorded before
                return digest("unreadable entry", str(self.path), str(self.path.lstat().st_mtime_ns))
            except OSError:
                return digest("unreadable entry", str(self.path))
        try:
            if not self.is_dir:
                return sha256_file(self.path)
            parts = []
            for p in sorted(self.files):  # an entry that is no file (the importer reports it) is never opened
                parts += [str(p.relative_to(self.path)), sha256_file(p) if p.is_file() else "not a file"]
            return digest(*parts)
        except OSError:
            try:
                st = self.path.stat()
                return digest("unreadable", str(self.path), str(st.st_size), str(st.st_mtime_ns))
            except OSError:
                return digest("unreadable", str(self.path))


def remove_stale_extractions() -> int:
    """Remove the archive extractions of processes that are gone: a worker killed when a run was
    interrupted (Ctrl-C stops the pool; SIGTERM ends the process) left its members in the temporary
    folder, tens of MB each, for good. Returns how many were removed."""
    removed = 0
    for d in Path(tempfile.gettempdir()).glob(f"{TAR_PREFIX}*"):
        pid = d.name.removeprefix(TAR_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or not d.is_dir() or d.is_symlink():
            continue  # an older name (no process id) is left: whose it is cannot be told
        try:
            os.kill(int(pid), 0)
            continue  # alive (or another user's: PermissionError)
        except ProcessLookupError:
            pass
        except (PermissionError, OverflowError):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed += 1
    return removed


def discover(paths: Iterable[Path], source_prefix: str | None = None, root: Path | None = None,
             skip: Iterable[Path] = (), corpora: list[Path] | None = None,
             listed: set[str] | None = None) -> Iterator[InputUnit]:
    """Expand paths into input units, in a deterministic order. Directories claimed by a
    directory-format importer become one unit; their consumed files are not offered again.
    Directories in `skip` (the corpus being written, when it lies among the inputs) are not walked,
    nor are Worldline corpora (their Parquet parts are no trace format) or the folders an export or the
    traces stage wrote (`holds_worldline_data`): with `corpora`, those are appended to it. `listed`
    receives the absolute path of every folder listed (what a folder's failed read waits for:
    `store.supersede_failed_reads`)."""
    skipped = {(st.st_dev, st.st_ino) for d in skip if (st := _stat_dir(Path(d))) is not None}
    for path in paths:
        path = Path(path)
        if path.is_dir():
            yield from _walk(path, source_prefix, root if root is not None else path.parent, set(skipped), corpora,
                             listed=listed)
        elif path.is_file():
            yield InputUnit(path, _display(path, source_prefix, root))
        elif (what := _what_is(path)) is not None:  # a pipe (`/dev/stdin`, `<(...)`): read once, it could not be
            # hashed and then read again; as in a folder, a quarantine row says what it is, and nothing is opened
            yield InputUnit(path, _display(path, source_prefix, root), not_a_file=what)
        else:
            raise FileNotFoundError(f"input {path} does not exist")


def _display(path: Path, prefix: str | None, root: Path | None) -> str:
    if prefix is None:
        return display_name(str(path))
    rel = path.relative_to(root) if root is not None else path
    return f"{prefix}!{display_name(str(rel))}"



def _walk(directory: Path, prefix: str | None, root: Path, seen: set[tuple[int, int]],
          corpora: list[Path] | None = None, consumed: set[Path] | None = None, top: bool = True,
          listed: set[str] | None = None) -> Iterator[InputUnit]:
    """`consumed`: inside a folder a directory-format importer claimed, the files it reads (the
    other entries are offered by the same rules as anywhere else; no sub-folder is claimed again).
    A folder below `top` that cannot be listed, or an entry whose type cannot be told, is one
    `unreadable` unit: the rest of the walk goes on (an input given that cannot be read raises, as the
    command's failure)."""
    st = _stat_dir(directory)
    if st is None or (st.st_dev, st.st_ino) in seen:  # a symlink back up the tree: walked already (two such links would
        return  # make the walk exponential)
    seen.add((st.st_dev, st.st_ino))
    try:
        is_data = holds_worldline_data(directory)
        if not is_data:  # scandir's entries know their type without a stat per file (an input of many small files)
            with os.scandir(directory) as it:
                entries = sorted(it, key=operator.attrgetter("name"))
    except OSError as err:
        if top:
            raise
        if not isinstance(err, FileNotFoundError):  # (gone while walked: nothing to say)
            yield InputUnit(directory, _display(directory, prefix, root), unreadable=err)
        return
    if is_data:
        if corpora is not None:
            corpora.append(directory)
        return
    if listed is not None:
        listed.add(os.path.abspath(directory))
    if consumed is None:
        for imp in _BY_CONTAINER.get("dir", []):
            try:
                claimed = imp.sniff(directory)
            except OSError:
                claimed = False
            if claimed:
                files = sorted(imp.consumes(directory))
                yield InputUnit(directory, _display(directory, prefix, root), imp, files)
                consumed = set(files)
                break
    for e in entries:
        p = directory / e.name
        try:
            if _is(e.is_dir):
                yield from _walk(p, prefix, root, seen, corpora, consumed, top=False, listed=listed)
                continue
            if consumed is not None and p in consumed:
                continue
            is_file = _is(e.is_file)
        except OSError as err:  # a link into a folder the user may not search, say: unreadable, as such a folder
            yield InputUnit(p, _display(p, prefix, root), unreadable=err)
            continue
        if is_file:
            yield InputUnit(p, _display(p, prefix, root))
        elif (what := _what_is(p)) is not None:  # counted and quarantined, not dropped unseen
            yield InputUnit(p, _display(p, prefix, root), not_a_file=what)


def _what_is(p: Path) -> str | None:
    """What a folder entry that is neither a file nor a folder is, in words; None when it is gone."""
    try:
        mode = p.lstat().st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"an entry that cannot be examined ({e.strerror})"
    if stat.S_ISLNK(mode):
        try:
            target = p.stat().st_mode
        except OSError as e:
            return "a symbolic link in a loop" if e.errno == errno.ELOOP else f"a symbolic link to {os.readlink(p)!r}, which does not exist"
        return f"a symbolic link to {_kind(target)}"
    return _kind(mode)


_FIFO = "a named pipe (FIFO)"


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISFIFO, _FIFO),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return what
    return "neither a file nor a folder"


def _stat_dir(directory: Path) -> os.stat_result | None:
    try:
        return directory.stat()
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None  # gone (or not there yet), as `_is` treats entries
        raise


def _is(test: Callable[[], bool]) -> bool:
    """`DirEntry.is_dir`/`is_file`, False where the entry is missing or a symlink loop (as `Path.is_dir`);
    other errors (EACCES) raise, as they did, instead of dropping the input unseen."""
    try:
        return test()
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise


def read_unit(
    unit: InputUnit,
    sha256: str,
    limits: ReadLimits = DEFAULT_LIMITS,
    domain_override: str | None = None,
) -> Iterator[Item]:
    """All records of one input unit. Never raises for bad content: it quarantines it."""
    if domain_override is not None and domain_override not in DOMAINS:
        raise ValueError(f"--domain {domain_override!r} is not one of {list(DOMAINS)}")
    ctx = ImportContext(unit.source, sha256, domain_override, unit.path, limits)
    if unit.not_a_file is not None:
        # a pipe, or a link to one (never a dangling link whose target's name says "pipe")
        hint = " (write a pipe's content to a file first: `... > traces.jsonl`)" if unit.not_a_file.endswith(_FIFO) else ""
        yield _q(ctx, "$", "not_a_file", f"{unit.source}: {unit.not_a_file}; only files and folders are read{hint}"), None
        return
    if unit.unreadable is not None:
        what = "a folder that cannot be read" if os.path.isdir(unit.path) else "an entry that cannot be examined"
        yield _q(ctx, "$", "unreadable", f"{unit.source}: {what} ({unit.unreadable.strerror or unit.unreadable}); "
                 "not read"), None
        return
    if unit.is_dir:
        assert unit.importer is not None
        try:
            yield from _convert_all(unit.importer, unit.importer.split(unit.path, ctx), ctx, split_locator="$")
        except OSError as e:  # a file of the directory that cannot be read
            yield _q(ctx, "$", "unreadable", f"{unit.source}: {e}"), None
        return
    try:
        stream, _ = open_input(unit.path, limits, unit.source)
    except OSError as e:
        yield _q(ctx, "$", "unreadable", f"{unit.source}: {e}"), None
        return
    try:
        yield from _read_stream(stream, ctx, limits)
        if (problem := stream_problem(stream)) is not None:
            yield _q(ctx, "$", "corrupt_input", problem), None
    except InputError as e:
        yield _q(ctx, e.locator, e.reason, e.detail), None
    except (EOFError, OSError, ValueError) as e:  # a failing read, an archive tarfile cannot open, and the like
        yield _q(ctx, "$", "corrupt_input", f"{unit.source}: {type(e).__name__}: {e}"), None
    finally:
        close_input(stream)


def read_path(path: Path, domain_override: str | None = None, limits: ReadLimits = DEFAULT_LIMITS) -> Iterator[Trajectory | QuarantineRecord]:
    """Every record under `path` (a file, archive or directory): the importer tests' entry point."""
    for unit in discover([Path(path)]):
        for rec, _imp in read_unit(unit, unit.sha256(), limits, domain_override):
            yield rec


_BOM = b"\xef\xbb\xbf"


class _AsUtf8(io.RawIOBase):
    """A stream of text in `encoding` read as UTF-8, decoded as it is read: a UTF-16 file streams, with
    the same bounds, as the UTF-8 one. Text that is not `encoding` ends it with an `invalid_encoding` row."""

    def __init__(self, raw: IO[bytes], encoding: str, source: str, chunk: int = 1 << 16):
        self.raw, self.encoding, self.source, self.chunk = raw, encoding, source, chunk
        self.decoder = codecs.getincrementaldecoder(encoding)()
        self.pending = b""
        self.done = False
        self.consumed = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # noqa: ANN001 - a writable buffer
        n = 0
        while n < len(b) and (self.pending or not self.done):
            if not self.pending:
                data = self.raw.read(self.chunk)
                self.done = not data
                try:
                    self.pending = self.decoder.decode(data, final=self.done).encode("utf-8")
                except UnicodeDecodeError as e:
                    raise InputError("invalid_encoding", f"{self.source}: starts with a {self.encoding.upper()} byte "
                                     f"order mark but is not {self.encoding.upper()} near byte {self.consumed + e.start}") from None
                self.consumed += len(data)
            k = min(len(b) - n, len(self.pending))
            b[n : n + k] = self.pending[:k]
            self.pending = self.pending[k:]
            n += k
        return n


def _skip_blanks(stream: IO[bytes], head_bytes: int) -> tuple[int, bytes] | None:
    """Reads past the whitespace a stream starts with: (how many newlines it held, up to `head_bytes`
    of what follows), or None when there is nothing but whitespace."""
    newlines = 0
    while chunk := stream.read(1 << 16):
        rest = chunk.lstrip()
        newlines += chunk.count(b"\n", 0, len(chunk) - len(rest))
        if rest:
            return newlines, rest + stream.read(max(0, head_bytes - len(rest)))
    return None


class _AfterBlanks(io.RawIOBase):
    """A stream that started with whitespace, as its newlines (so that line numbers stay the file's),
    then `head` (read ahead for sniffing), then the rest of `inner`."""

    def __init__(self, newlines: int, head: bytes, inner: IO[bytes]):
        self.newlines, self.head, self.inner = newlines, head, inner

    @property
    def problem(self) -> str | None:  # `stream_problem` of the stream underneath (a cut compressed input)
        return stream_problem(self.inner)

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self.newlines:
            n = min(len(b), self.newlines)
            b[:n] = b"\n" * n
            self.newlines -= n
            return n
        if self.head:
            n = min(len(b), len(self.head))
            b[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.inner.read1(len(b))
        b[: len(data)] = data
        return len(data)


def _wide_encoding(head: bytes) -> str | None:
    """The codec of text that starts with a UTF-32 or UTF-16 byte order mark (checked in that order:
    UTF-32 LE's mark begins with UTF-16 LE's); Python's codecs read the mark and drop it."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "utf-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    return None


def _read_stream(stream: IO[bytes], ctx: ImportContext, limits: ReadLimits) -> Iterator[Item]:
    head = stream.peek(limits.head_bytes)[: limits.head_bytes] if hasattr(stream, "peek") else b""
    if head.startswith(_BOM):  # a UTF-8 byte order mark (Windows editors write one): not content
        stream.read(len(_BOM))
        head = head[len(_BOM):]
    if not head.strip():  # blank so far: skip the blanks as a stream (they may go on past any window)
        skipped = _skip_blanks(stream, limits.head_bytes)
        if skipped is None:
            if stream_problem(stream) is None:  # else not empty: broken from the start (read_unit says so)
                yield _q(ctx, "$", "empty_input", f"{ctx.source}: the input is empty"), None
            return
        newlines, head = skipped
        stream = io.BufferedReader(_AfterBlanks(newlines, head, stream), buffer_size=max(limits.head_bytes, 1 << 16))
    if (encoding := _wide_encoding(head)) is not None:  # UTF-16/32 with its byte order mark (PowerShell's `>`)
        stream = io.BufferedReader(_AsUtf8(stream, encoding, ctx.source), buffer_size=max(limits.head_bytes, 1 << 16))
        head = stream.peek(limits.head_bytes)[: limits.head_bytes]
    if is_tar(head):
        yield from _read_tar(stream, ctx, limits)
        return
    if is_parquet(head):
        yield from _read_parquet(stream, ctx, limits)
        return
    imp = _sniff(_BY_CONTAINER.get("text", []), head)  # guarded: a sniffer that raises declines
    if imp is not None:
        yield from _convert_all(imp, imp.split(stream, ctx), ctx, split_locator="$")
        return
    first = head.lstrip()[:1]
    if first in (b"{", b"["):
        yield from _read_json(stream, ctx, limits)
        return
    body = head[: head.rfind(b"\n") + 1]  # the head's whole lines
    if _looks_like_lines(body) or (body.count(b"\n") < 3 and _json_after_first_line(head)):
        yield from _read_json(stream, ctx, limits, lines_only=True)  # JSON lines whose first line is not JSON at all
        return
    yield _q(ctx, "$", "unknown_format", f"{ctx.source}: content matches no known trace format", head), None


def _read_json(stream: IO[bytes], ctx: ImportContext, limits: ReadLimits, lines_only: bool = False) -> Iterator[Item]:
    """JSON lines, or one JSON document (`lines_only`: JSON lines for certain)."""
    lines = iter_lines(stream, limits.max_record_bytes)
    first_line: bytes | None = None
    first_no = 0
    for lineno, line, n in lines:
        if line is None:
            yield _too_large(ctx, lineno, n, limits), None
            yield from _read_unsniffed(_json_lines(lines, ctx, limits), ctx, limits, [])
            return
        if line.strip():
            first_line, first_no = line, lineno
            break
    if first_line is None:
        yield _q(ctx, "$", "empty_input", f"{ctx.source}: the input is empty"), None
        return
    try:
        first_obj: Any = parse_json(first_line)
    except orjson.JSONDecodeError as e:
        # a pretty-printed document (its first line alone is not JSON), or JSON lines whose first line is broken
        ahead: list[_Unsniffed] = []
        if not lines_only:
            consumed, ahead = _peek_lines(lines, first_line, ctx, limits)
            if not ahead:
                data = consumed + read_bounded(stream, limits.max_record_bytes - len(consumed), ctx.source)
                # the blank lines before it back in: positions in errors and line numbers count from the file's start
                yield from _read_doc(b"\n" * (first_no - 1) + data, ctx, limits)
                return
        yield _bad_json(ctx, f"line:{first_no}", f"{ctx.source} line {first_no}", first_line, e), None
        yield from _read_unsniffed(_json_lines(lines, ctx, limits), ctx, limits, ahead)
        return
    # The first line is complete JSON: JSON lines (one record, or one array of records, per line),
    # or a one-line document. Records of whole-document formats may also come one per line.
    fmt = _sniff_unit(first_obj)
    parsed = _json_lines(lines, ctx, limits)
    if fmt is None:
        yield from _read_unsniffed(parsed, ctx, limits, [_Unsniffed(first_no, first_obj, len(first_line), first_line[:300])])
        return
    yield from _unit_records(fmt, first_obj, f"line:{first_no}", ctx)
    yield from _read_jsonl(parsed, ctx, fmt)


# How far the reader looks for the first record it recognises before calling an input unknown: a
# broken first record must not take the good ones after it down (they are read in the format the
# first recognised one names, and the broken one is quarantined by that format's `convert`)
SNIFF_AHEAD = 64


@dataclass
class _Unsniffed:
    """A parsed line read before the input's format is known."""

    lineno: int
    obj: Any
    size: int
    head: bytes  # for the excerpt, should the input turn out unknown


def _peek_lines(lines: Iterator[tuple[int, bytes | None, int]], first: bytes, ctx: ImportContext,
                limits: ReadLimits) -> tuple[bytes, list[_Unsniffed]]:
    """After a first line that is not JSON: (the bytes read, the next two non-blank lines when both are
    JSON objects or arrays, else []). Two such lines (or one and the end) cannot follow the first line
    of a valid pretty-printed document: a value that ends its line without a comma is its container's
    last element, so the next line closes the container. Reads at most `SNIFF_AHEAD` lines."""
    consumed = [first]
    size = len(first)
    ahead: list[_Unsniffed] = []
    for lineno, line, _ in lines:
        if line is None or size + len(line) > limits.max_record_bytes:
            # as a document it is too large too (`read_bounded`'s verdict)
            raise InputError("record_too_large", f"{ctx.source}: larger than the {limits.max_record_bytes}-byte record limit")
        consumed.append(line)
        size += len(line)
        if line.strip():
            try:
                obj = parse_json(line)
            except orjson.JSONDecodeError:
                break
            if not isinstance(obj, dict | list):
                break
            ahead.append(_Unsniffed(lineno, obj, len(line), line[:300]))
            if len(ahead) == 2:
                return b"".join(consumed), ahead
        if len(consumed) > SNIFF_AHEAD:
            break
    else:
        return b"".join(consumed), ahead  # the end: one container line after the first is JSON lines too
    return b"".join(consumed), []


def _too_large(ctx: ImportContext, lineno: int, n: int, limits: ReadLimits) -> QuarantineRecord:
    return _q(ctx, f"line:{lineno}", "record_too_large",
              f"{ctx.source} line {lineno}: {n} bytes, above the {limits.max_record_bytes}-byte record limit")


def _read_unsniffed(parsed: Iterator[_Line | QuarantineRecord], ctx: ImportContext, limits: ReadLimits,
                    held: list[_Unsniffed]) -> Iterator[Item]:
    """JSON lines whose first records matched no format: the first recognised record of the first
    `SNIFF_AHEAD` names the format of all, the held ones included. Lines that are not JSON (or too
    large) are quarantined as such on the way. If no record is recognised, the unrecognised ones and
    whatever follows them are one `unknown_format` row. Holds at most `SNIFF_AHEAD` records and one
    record's worth of bytes."""
    fmt = next((f for h in held if (f := _sniff_unit(h.obj)) is not None), None)
    size = sum(h.size for h in held)
    gave_up = False
    for item in parsed if fmt is None else ():
        if type(item) is QuarantineRecord:
            yield item, None
            continue
        lineno, obj, line = item
        if (fmt := _sniff_unit(obj)) is not None:
            held.append(_Unsniffed(lineno, obj, len(line), b""))
            break
        if len(held) >= SNIFF_AHEAD or size + len(line) > limits.max_record_bytes:
            gave_up = True  # this line goes with the rest, unread
            break
        held.append(_Unsniffed(lineno, obj, len(line), line[:300]))
        size += len(line)
    if fmt is None and held and not gave_up and all(_no_messages(h.obj) for h in held):
        # only chat records with no messages (each `{"messages": []}`): what the chat format makes of such a line
        # among others (a trajectory of no turns), not an unknown format. Not a sniff: a first such line would
        # then name chat the format of a file whose later lines are FireAct's, say
        fmt = _LineFormat(_CHAT)
    if fmt is None:
        if held:
            first, more = held[0], len(held) - 1
            tail = (f", nor do the next {more} JSON lines" if more else "") + (
                "; the rest of the input is not read" if gave_up else "")
            yield _q(ctx, f"line:{first.lineno}", "unknown_format",
                     f"{ctx.source} line {first.lineno}: JSON matches no known trace format{tail}", first.head), None
        return
    for h in held:
        yield from _unit_records(fmt, h.obj, f"line:{h.lineno}", ctx)
    yield from _read_jsonl(parsed, ctx, fmt)


def _read_parquet(stream: IO[bytes], ctx: ImportContext, limits: ReadLimits) -> Iterator[Item]:
    """A Parquet file's rows, each read as a JSON line with the same fields (locator `row:N`, 0-based).
    As with JSON lines, the first recognised row of the first `SNIFF_AHEAD` names the format of all;
    if none is, they and the rest of the file are one `unknown_format` row."""
    rows = parquet_rows(stream, ctx, limits)
    held: list[Row] = []
    fmt: _LineFormat | None = None
    for item in rows:
        if type(item) is BadRows:
            yield _q(ctx, item.locator, item.reason, item.detail), None
            continue
        held.append(item)
        if (fmt := _sniff_unit(item.value)) is not None or len(held) >= SNIFF_AHEAD:
            break
    if fmt is None:
        if held:
            more = f", nor do the next {len(held) - 1} rows" if len(held) > 1 else ""
            yield _q(ctx, f"row:{held[0].index}", "unknown_format",
                     f"{ctx.source} row {held[0].index}: Parquet row matches no known trace format{more} "
                     f"(columns: {', '.join(held[0].value)}); the rest of the input is not read", held[0].value), None
        return
    for row in chain(held, rows):
        if type(row) is BadRows:
            yield _q(ctx, row.locator, row.reason, row.detail), None
        else:
            yield from _unit_records(fmt, row.value, f"row:{row.index}", ctx)


def _looks_like_lines(data: bytes) -> bool:
    """Whether a text that is not one JSON document is JSON lines with broken lines: most of its
    (first 1,000) non-blank lines are JSON objects or arrays on their own, at least two of them.
    A pretty-printed document, even a broken one, has hardly any such line."""
    lines = [ln for ln in data.split(b"\n", 1000)[:1000] if ln.strip()]
    containers = 0
    for ln in lines:
        try:
            containers += isinstance(parse_json(ln), dict | list)
        except orjson.JSONDecodeError:
            pass
    return containers >= 2 and 2 * containers >= len(lines)


def _json_after_first_line(head: bytes) -> bool:
    """Whether the line after the first starts like JSON: where lines are longer than the head, too few
    whole lines are in it to judge by `_looks_like_lines`, and this is the sign left."""
    rest = head.lstrip()
    nl = rest.find(b"\n")
    return nl >= 0 and rest[nl + 1 :].lstrip()[:1] in (b"{", b"[")


def _no_messages(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("messages") == [] and len(obj) <= 2  # (and an id, say)


@dataclass(frozen=True)
class _LineFormat:
    """How one line-sized object is read: as a record of `imp`, or as a JSON array of them."""

    imp: Importer
    array: bool = False


def _sniff_unit(obj: Any) -> _LineFormat | None:
    imp = _sniff_line(obj)
    if imp is not None:
        return _LineFormat(imp)
    if isinstance(obj, list):
        # an array of records that one per line would be JSON lines (LLaMA-Factory's chat data
        # files, a dump of AgentWorldBench rows): each element read as a line, locator `[i]`; as
        # with JSON lines, the first element recognised decides the format of all
        for el in obj[:SNIFF_AHEAD]:
            if (imp := _sniff_line(el)) is not None:
                return _LineFormat(imp, array=True)
    return None


def _unit_records(fmt: _LineFormat, obj: Any, loc: str, ctx: ImportContext) -> Iterator[Item]:
    """The records of one line-sized object at `loc` (`$`: a whole document)."""
    if not fmt.array:
        yield from _line_records(fmt.imp, obj, loc, ctx)
        return
    if not isinstance(obj, list):
        yield _q(ctx, loc, "malformed_record", f"{ctx.source} {loc}: expected a JSON array of {fmt.imp.name} records "
                 f"(as the first line), got {type(obj).__name__}", importer=fmt.imp, excerpt=obj), None
        return
    prefix = "" if loc == "$" else f"{loc}/"  # `line:N/[i]`, as the locators of a line's records always were
    for i, rec in enumerate(obj):
        yield from _line_records(fmt.imp, rec, f"{prefix}[{i}]", ctx)


def _line_records(imp: Importer, obj: Any, loc: str, ctx: ImportContext) -> Iterator[Item]:
    """The records of one record-sized object (a JSON line, or an element of a JSON array) at `loc`."""
    if imp.container == "jsonl":
        yield from _convert_one(imp, obj, loc, ctx)
        return
    prefixed = ((loc if sub == "$" else f"{loc}/{sub}", rec) for sub, rec in imp.split(obj, ctx))
    yield from _convert_all(imp, prefixed, ctx, loc)


_NOT_JSON = object()


_Line = tuple[int, Any, bytes]  # (line number, the parsed line, its bytes)


def _json_lines(lines: Iterator[tuple[int, bytes | None, int]], ctx: ImportContext,
                limits: ReadLimits) -> Iterator[_Line | QuarantineRecord]:
    """Each non-blank line parsed, or the quarantine row of a line that is too large or not JSON."""
    for lineno, line, n in lines:
        if line is None:
            yield _too_large(ctx, lineno, n, limits)
        elif line.strip():
            try:
                obj = parse_json(line)
            except orjson.JSONDecodeError as e:
                yield _bad_json(ctx, f"line:{lineno}", f"{ctx.source} line {lineno}", line, e)
            else:
                yield lineno, obj, line


def _read_jsonl(parsed: Iterator[_Line | QuarantineRecord], ctx: ImportContext, fmt: _LineFormat) -> Iterator[Item]:
    for item in parsed:
        if type(item) is QuarantineRecord:
            yield item, None
            continue
        lineno, obj, _ = item
        loc = f"line:{lineno}"
        if fmt.array:
            yield from _unit_records(fmt, obj, loc, ctx)
        else:  # the common case, without a generator more per line
            yield from _line_records(fmt.imp, obj, loc, ctx)


def _read_doc(data: bytes, ctx: ImportContext, limits: ReadLimits) -> Iterator[Item]:
    try:
        doc = parse_json(data)
    except orjson.JSONDecodeError as e:
        if _looks_like_lines(data):  # JSON lines with more broken lines than the first
            yield from _read_json(io.BufferedReader(io.BytesIO(data)), ctx, limits, lines_only=True)  # type: ignore[arg-type]
            return
        yield _bad_json(ctx, "$", ctx.source, data, e), None
        return
    imp = _sniff(_BY_CONTAINER.get("json", []), doc)
    if imp is not None:
        yield from _convert_all(imp, imp.split(doc, ctx), ctx, "$")
        return
    fmt = _sniff_unit(doc)  # a record of a line format, pretty-printed, or an array of them
    if fmt is None and _no_messages(doc):  # as a JSON line of it (`_read_unsniffed`)
        fmt = _LineFormat(_CHAT)
    if fmt is None:
        yield _q(ctx, "$", "unknown_format", f"{ctx.source}: JSON document matches no known trace format", data), None
        return
    yield from _unit_records(fmt, doc, "$", ctx)


def _bad_json(ctx: ImportContext, loc: str, where: str, data: bytes, e: Exception) -> QuarantineRecord:
    reason, problem = json_problem(data, e)
    return _q(ctx, loc, reason, f"{where}: {problem}", data)


def _sniff(importers: list[Importer], sample: Any) -> Importer | None:
    for imp in importers:
        try:
            if imp.sniff(sample):
                return imp
        except Exception:  # a sniffer must never take the run down  # noqa: BLE001
            continue
    return None


def _sniff_line(obj: Any) -> Importer | None:
    return _sniff(_LINE_ORDER, obj)


def _convert_all(imp: Importer, records: Iterator[tuple[str, Any]], ctx: ImportContext, split_locator: str) -> Iterator[Item]:
    it = iter(records)
    while True:
        try:
            locator, record = next(it)
        except StopIteration:
            return
        except (RecordError, InputError) as e:
            yield _q(ctx, getattr(e, "locator", None) or split_locator, e.reason, f"{ctx.source}: {e.detail}", importer=imp), None
            return
        except Exception as e:  # noqa: BLE001 - malformed input surfaces as arbitrary errors
            yield _q(ctx, split_locator, "malformed_record", f"{ctx.source}: {imp.name} could not split the input: {type(e).__name__}: {e}", importer=imp), None
            return
        if isinstance(record, RecordError):  # this record only (see `Importer.split`)
            yield _q(ctx, record.locator or locator, record.reason, f"{ctx.source}: {record.detail}", importer=imp), None
            continue
        yield from _convert_one(imp, record, locator, ctx)


def _convert_one(imp: Importer, record: Any, locator: str, ctx: ImportContext) -> Iterator[Item]:
    try:
        traj = imp.convert(record, locator, ctx)
    except RecordError as e:
        yield _q(ctx, e.locator or locator, e.reason, _at(ctx, locator, e.detail), importer=imp, excerpt=record), None
        return
    except Exception as e:  # noqa: BLE001
        yield _q(ctx, locator, "malformed_record", f"{ctx.source} {locator}: {imp.name}: {type(e).__name__}: {e}", importer=imp, excerpt=record), None
        return
    traj.source = ctx.source
    if traj.domain not in DOMAINS:
        yield _q(ctx, locator, "bad_domain", f"{ctx.source} {locator}: domain {traj.domain!r} is not one of {list(DOMAINS)}", importer=imp), None
        return
    yield traj, imp


_RETRIED = "; nothing of the archive is read, and the next ingest tries it again"
TAR_PREFIX = "worldline-tar-"  # + the extracting process's id: `remove_stale_extractions` knows whose it is


def _extracted(path: Path | None) -> bool:
    """Whether `path` is a member of an archive, extracted by `_read_tar`."""
    return path is not None and any(p.name.startswith(TAR_PREFIX) for p in path.parents)


def _read_tar(stream: IO[bytes], ctx: ImportContext, limits: ReadLimits) -> Iterator[Item]:
    # an archive inside another is no input of its own: the outer one, read, is recorded whole, and no later
    # ingest of it reads again what this one could not (its other members are in the corpus by then)
    then = _RETRIED if not _extracted(ctx.path) else (
        "; nothing of it is read, and as it lies inside an archive that was read, no later ingest of that archive "
        "reads it: extract it and ingest it on its own once there is room")
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"{TAR_PREFIX}{os.getpid()}-"))
    except OSError as e:
        yield _q(ctx, "$", EXTRACTION_FAILED, f"{ctx.source}: {ExtractionFailed(Path(tempfile.gettempdir()), e)}{then}"), None
        return
    try:
        try:
            rejected = extract_tar(stream, tmp, limits, ctx.source)
        except ExtractionFailed as e:  # the members read so far are not read either: the next ingest reads them all
            yield _q(ctx, "$", EXTRACTION_FAILED, f"{ctx.source}: {e}{then}"), None
            return
        for r in rejected:
            yield _q(ctx, f"member:{r.member}", r.reason, r.detail), None
        corpora: list[Path] = []
        units = 0
        for unit in discover([tmp], source_prefix=ctx.source, root=tmp, corpora=corpora):
            # a member's identity is the archive's and its place in it (not its own content's: the same file as
            # an input of its own, in another archive or twice in this one would give the same trajectory ids)
            member = digest(ctx.input_sha256, "tar member", unit.path.relative_to(tmp).as_posix())
            units += 1
            yield from read_unit(unit, member, limits, ctx.domain_override)
        if not units and not rejected:  # recorded as ingested, it would be skipped for good, unseen
            held = (f"only Worldline corpora ({', '.join(c.relative_to(tmp).as_posix() for c in corpora[:3])}), which "
                    "are not read" if corpora else "no files")
            yield _q(ctx, "$", "empty_input", f"{ctx.source}: the archive holds {held}"), None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _at(ctx: ImportContext, locator: str, detail: str) -> str:
    """A record's error named by file and record, once: importers often start theirs with the
    record's locator already (`simulations[0] messages[3]: ...`)."""
    if detail.startswith(locator) and detail[len(locator):len(locator) + 1] in (":", " "):
        return f"{ctx.source} {detail}"
    return f"{ctx.source} {locator}: {detail}"


def _q(ctx: ImportContext, locator: str, reason: str, detail: str, excerpt: Any = None, importer: Importer | None = None) -> QuarantineRecord:
    return QuarantineRecord(
        source=ctx.source,
        locator=locator,
        reason=reason,
        detail=detail,
        importer=importer.name if importer else None,
        input_sha256=ctx.input_sha256,
        excerpt=_excerpt(excerpt),
    )


def _excerpt(value: Any, n: int = 300) -> str | None:
    if value is None or hasattr(value, "read") or isinstance(value, Path | FolderRecord):
        return None  # a text format's record is its stream, a directory format's its folder: nothing to show
    if isinstance(value, bytes | bytearray):
        return bytes(value[:n]).decode("utf-8", "replace")
    if isinstance(value, str):
        return value[:n]
    try:
        return orjson.dumps(value, default=str)[:n].decode("utf-8", "replace")
    except TypeError:
        return repr(value)[:n]
