"""Opening inputs safely: content-detected decompression with bomb limits, bounded line reads,
and tar extraction that refuses members escaping the archive.

Everything here streams; nothing holds more than one record (bounded by `max_record_bytes`).
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import hashlib
import io
import json
import lzma
import os
import tarfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
import zstandard

MiB = 1 << 20


@dataclass(frozen=True)
class ReadLimits:
    """Bounds that keep one bad input from exhausting the machine."""

    max_record_bytes: int = 64 * MiB  # one JSON document, one JSON line, one text log
    max_decompressed_bytes: int = 32 * 1024 * MiB  # per compressed input
    max_compression_ratio: float = 1000.0  # decompressed / compressed, checked past 16 MiB out
    ratio_grace_bytes: int = 16 * MiB
    head_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.max_record_bytes < 1:  # `readline` reads a negative size as "no bound"
            raise ValueError(f"--max-record-mb must be positive (got {self.max_record_bytes / MiB:g} MB)")


class InputError(Exception):
    """An input (or part of one) that must be quarantined; `reason` is the reason code."""

    def __init__(self, reason: str, detail: str, locator: str = "$"):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.locator = locator


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 * MiB):
            h.update(chunk)
    return h.hexdigest()


_MAGIC = {
    b"\x1f\x8b": "gzip",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
}


def compression_of(head: bytes) -> str | None:
    for magic, name in _MAGIC.items():
        if head.startswith(magic):
            return name
    if len(head) >= 4 and head[0] & 0xF0 == 0x50 and head[1:4] == b"\x2a\x4d\x18":
        return "zstd"  # a zstd skippable frame first (0x184D2A5?: pzstd's index, seekable-format metadata)
    return None


def display_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (a Latin-1 name, an old tar member), which Python
    keeps as lone surrogates that neither Arrow nor JSON can hold, shown as `\\xe9` escapes."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def is_tar(head: bytes) -> bool:
    """A tar archive: a POSIX or GNU header (`ustar` magic), an old v7 header (no magic: its checksum
    holds), or an archive with no members (its end: two blocks of zeros)."""
    if len(head) >= 262 and head[257:262] == b"ustar":
        return True
    if len(head) < 512:
        return False
    if len(head) >= 1024 and not any(head[:1024]):
        return True
    try:
        stored = int(head[148:156].replace(b"\0", b" ").strip() or b"x", 8)
    except ValueError:
        return False
    return head[0] != 0 and stored == sum(head[:148]) + 8 * 32 + sum(head[156:512])


class _GuardedReader(io.RawIOBase):
    """Decompressed stream that stops a compression bomb: caps total output and the ratio of
    output to compressed input consumed so far. Compressed data that breaks off (truncated,
    corrupt) ends the stream there, as if the file ended, and `stream_problem` says where and why:
    whoever reads it keeps everything before the break, and the reader adds one row for it."""

    def __init__(self, inner: IO[bytes], raw: IO[bytes], limits: ReadLimits, source: str, kind: str,
                 at_end: Callable[[], str | None] | None = None):
        self.inner, self.raw, self.limits, self.source, self.kind = inner, raw, limits, source, kind
        self.at_end = at_end  # what is wrong with the input once the decoder says it ended cleanly (zstd)
        self.out = 0
        self.problem: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:  # type: ignore[override]
        if self.problem is not None:
            return 0
        try:
            # read1: what one step decompressed (read(n) throws away the part of n it had when an error came)
            data = self.inner.read1(len(b))
        except (EOFError, OSError, zlib.error, zstandard.ZstdError, lzma.LZMAError) as e:
            # zlib's, zstd's and lzma's errors are no OSError: uncaught, one corrupt file would end the run
            self.problem = (f"{self.source}: the {self.kind} data breaks off after {self.out} bytes out "
                            f"({type(e).__name__}: {e}); what came before it is read")
            return 0
        n = len(data)
        if not n and self.at_end is not None and (cut := self.at_end()) is not None:
            self.problem = f"{self.source}: the {self.kind} data breaks off after {self.out} bytes out ({cut}); what came before it is read"
            return 0
        b[:n] = data
        self.out += n
        lim = self.limits
        if self.out > lim.max_decompressed_bytes:
            raise InputError(
                "decompression_limit",
                f"{self.source}: decompressed size exceeds {lim.max_decompressed_bytes} bytes",
            )
        if self.out > lim.ratio_grace_bytes:
            consumed = max(self.raw.tell(), 1)
            if self.out / consumed > lim.max_compression_ratio:
                raise InputError(
                    "compression_bomb",
                    f"{self.source}: compression ratio above {lim.max_compression_ratio:g} "
                    f"({self.out} bytes out of {consumed} compressed)",
                )
        return n


def open_input(path: Path, limits: ReadLimits, source: str) -> tuple[IO[bytes], str | None]:
    """Open `path` for reading its decompressed content; returns (stream, compression name)."""
    raw = open(path, "rb", buffering=MiB)
    head = raw.peek(8)[:8]
    raw.seek(0)
    kind = compression_of(head)
    if kind is None:
        return raw, None
    if kind == "gzip":
        inner: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb")
    elif kind == "zstd":
        inner = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
    elif kind == "bzip2":
        inner = bz2.BZ2File(raw, "rb")
    else:
        inner = lzma.LZMAFile(raw, "rb")
    guarded = _GuardedReader(inner, raw, limits, source, kind, (lambda: zstd_cut(path)) if kind == "zstd" else None)
    stream = io.BufferedReader(guarded, buffer_size=MiB)
    stream._worldline_raw = raw  # type: ignore[attr-defined]  # closed with the stream
    return stream, kind


_ZSTD_MAGIC = 0xFD2FB528


def zstd_cut(path: Path) -> str | None:
    """Where a zstd file stops being whole frames, in words, or None when it ends at a frame's end.
    The decoder reads a file cut inside a frame as if it ended there; this walks the frames' block
    headers (three bytes per block of at most 128 KiB) without decoding anything."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        pos = 0
        while pos < size:
            start = pos
            f.seek(pos)
            head = f.read(18)  # magic + the longest frame header
            if len(head) < 8:
                return f"a frame starting at byte {start} is cut off in its header"
            magic = int.from_bytes(head[:4], "little")
            if magic & 0xFFFFFFF0 == 0x184D2A50:  # a skippable frame: its length, then that many bytes
                pos += 8 + int.from_bytes(head[4:8], "little")
                if pos > size:
                    return f"a skippable frame starting at byte {start} is cut off"
                continue
            if magic != _ZSTD_MAGIC:
                return f"byte {start} starts no zstd frame"
            try:
                pos += zstandard.frame_header_size(head)  # the magic included
            except zstandard.ZstdError:
                return f"a frame starting at byte {start} is cut off in its header"
            checksum = head[4] & 0x04
            while True:
                f.seek(pos)
                bh = f.read(3)
                if len(bh) < 3:
                    return f"a frame starting at byte {start} is cut off at byte {size}"
                v = int.from_bytes(bh, "little")
                kind, length = (v >> 1) & 3, v >> 3
                pos += 3 + (1 if kind == 1 else length)  # an RLE block is one byte repeated
                if v & 1:
                    break
            pos += 4 if checksum else 0
            if pos > size:
                return f"a frame starting at byte {start} is cut off at byte {size}"
    return None


def stream_problem(stream: IO[bytes]) -> str | None:
    """Where and why a compressed input broke off (`_GuardedReader`), or None."""
    return getattr(getattr(stream, "raw", None), "problem", None)


def close_input(stream: IO[bytes]) -> None:
    raw = getattr(stream, "_worldline_raw", None)
    stream.close()
    if raw is not None:
        raw.close()


def _left_in_file(stream: IO[bytes]) -> int | None:
    """Bytes left in a plain file; None for streams without a size (decompressed, pipes)."""
    try:
        return os.fstat(stream.fileno()).st_size - stream.tell()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return None


def read_bounded(stream: IO[bytes], limit: int, what: str) -> bytes:
    # `read(limit + 1)` makes CPython allocate the whole limit (64 MiB) up front and shrink it
    # after: 0.2-1.2 ms per input; ask for what the file holds (+1 notices one that grew).
    left = _left_in_file(stream)
    if left is not None and 0 <= left < limit:
        data = stream.read(left + 1)
        if len(data) > left:  # the file grew while we read it: go on, still bounded
            data += stream.read(limit + 1 - len(data))
    else:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError("record_too_large", f"{what}: larger than the {limit}-byte record limit")
    return data


def iter_lines(stream: IO[bytes], limit: int) -> Iterator[tuple[int, bytes | None, int]]:
    """Yield (line number, line bytes or None when over `limit`, line length). Over-long lines
    are skipped without ever being held in memory."""
    lineno = 0
    step = min(limit + 1, 8 * MiB)
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if len(line) > limit and not line.endswith(b"\n"):
            n = len(line)
            del line
            while True:
                rest = stream.readline(step)
                n += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield lineno, None, n
            continue
        yield lineno, line, len(line)


def parse_json(data: bytes | str) -> Any:
    """`orjson.loads`, also accepting the `NaN`, `Infinity` and `-Infinity` that Python's `json.dump`
    writes by default (InterCode, tau-bench and FireAct results hold them): they become null, as
    JSON has no such numbers and a NaN reward or score means none was recorded. orjson refuses them,
    and only then is the standard library's parser tried, so good input pays nothing; input that
    neither takes raises orjson's error."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as err:
        if not _has_nonfinite(data):
            raise
        try:
            obj = json.loads(data, parse_constant=_nonfinite, parse_int=_int_as_orjson)
            orjson.dumps(obj)  # nothing orjson refuses for another reason (a lone surrogate, a 65-bit integer)
        except (ValueError, RecursionError, TypeError):  # JSONDecodeError, UnicodeDecodeError; orjson's refusals
            raise err from None
        return obj


def _has_nonfinite(data: bytes | str) -> bool:
    if isinstance(data, str):
        return "NaN" in data or "Infinity" in data
    return b"NaN" in data or b"Infinity" in data


def _nonfinite(name: str) -> None:
    return None


def _int_as_orjson(text: str) -> int | float:
    """An integer as orjson reads it: beyond 64 bits, a float."""
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 64) else float(value)


def json_problem(data: bytes | str, err: Exception) -> tuple[str, str]:
    """(quarantine reason, what is wrong) of JSON that did not parse: `invalid_utf8` (at which byte),
    `truncated_json` (the parser ran out of input: orjson's "unexpected end" / "EOF", the standard
    library's "Unterminated ..."), else `invalid_json` with the parser's message."""
    if isinstance(data, bytes):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as u:
            return "invalid_utf8", f"invalid UTF-8 at byte {u.start}"
    msg = str(err)
    low = msg.lower()
    truncated = "unexpected end" in low or "eof" in low or "unterminated" in low
    return ("truncated_json" if truncated else "invalid_json"), msg


@dataclass(frozen=True)
class TarRejection:
    member: str
    reason: str
    detail: str


class ExtractionFailed(Exception):
    """The extracted members could not be written (no space left, a quota, a read-only folder): the
    machine's problem, not the archive's, so no member is read and the archive is tried again."""

    def __init__(self, folder: Path, error: OSError):
        super().__init__(f"its members could not be written to {folder} ({error.strerror or error}): free space there "
                         "or set TMPDIR to a folder with room")


# what opening a member's file may fail with that is the folder's fault, not the member's name's
_LOCAL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO, errno.EMFILE, errno.ENFILE})


def _write_all(out: IO[bytes], chunk: bytes, folder: Path) -> None:
    view = memoryview(chunk)
    try:
        while view:
            n = out.write(view)
            view = view[n:]
    except OSError as e:
        raise ExtractionFailed(folder, e) from e


def extract_tar(stream: IO[bytes], dest: Path, limits: ReadLimits, source: str) -> list[TarRejection]:
    """Extract regular files of a tar stream under `dest`; refuse absolute paths, `..`, links and
    devices (each becomes a rejection to quarantine) instead of trusting the archive. An archive that
    breaks off (truncated, corrupt, a bomb) keeps the members extracted before; the rest is one rejection.
    Raises `ExtractionFailed` when `dest` cannot take the members."""
    rejected: list[TarRejection] = []
    dest = dest.resolve()
    done, reading, partial, total = 0, "", None, 0
    written: dict[Path, str] = {}  # where each member landed: a later one of the same path replaces it, as with `tar x`
    try:
        with tarfile.open(fileobj=stream, mode="r|*") as tar:
            for m in tar:
                name = display_name(m.name)  # for the rows; `m.name` is what lands on disk
                if m.isdir():
                    continue
                if not m.isfile():
                    rejected.append(TarRejection(name, "unsafe_archive_member", f"{source}!{name}: not a regular file (links and devices are not extracted)"))
                    continue
                if m.issparse():  # a few bytes that extract to their whole size in zeros: no bomb check sees them
                    rejected.append(TarRejection(name, "unsafe_archive_member", f"{source}!{name}: a sparse file "
                                                 f"({m.size} bytes, mostly holes) is not extracted"))
                    continue
                target = (dest / m.name).resolve()
                if os.path.isabs(m.name) or ".." in Path(m.name).parts or not str(target).startswith(str(dest) + os.sep):
                    rejected.append(TarRejection(name, "unsafe_archive_member", f"{source}!{name}: path escapes the archive"))
                    continue
                if m.size > limits.max_decompressed_bytes:
                    rejected.append(TarRejection(name, "decompression_limit", f"{source}!{name}: member larger than {limits.max_decompressed_bytes} bytes"))
                    continue
                if total + m.size > limits.max_decompressed_bytes:  # the archive's members together, as one input
                    rejected.append(TarRejection(name, "decompression_limit", f"{source}!{name}: the archive's members "
                                                 f"come to more than {limits.max_decompressed_bytes} bytes; the rest is not read"))
                    break
                total += m.size
                f = tar.extractfile(m)
                assert f is not None
                try:  # a name the file system refuses (too long; a file where a folder is, or the reverse)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    # unbuffered: a write that fails fails in `_write_all`, not again when the file is closed
                    out = open(target, "wb", buffering=0)  # noqa: SIM115 - closed below, or unlinked on a break
                except OSError as e:
                    if e.errno in _LOCAL_ERRNOS:
                        raise ExtractionFailed(dest.parent, e) from e
                    rejected.append(TarRejection(name, "unextractable_member", f"{source}!{name}: cannot be extracted here ({type(e).__name__}: {e})"))
                    continue
                if (before := written.pop(target, None)) is not None:
                    rejected.append(TarRejection(before, "duplicate_archive_member", f"{source}!{before}: replaced by a later "
                                                 f"member of the same path ({name}), as `tar x` does; this one is not read"))
                reading, partial = name, target
                with out:
                    while chunk := f.read(4 * MiB):
                        _write_all(out, chunk, dest.parent)
                reading, partial = "", None
                written[target] = name
                done += 1
    except (tarfile.TarError, EOFError, OSError, InputError) as e:
        # tarfile's own errors are no OSError: uncaught, a truncated tar would end the run
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink()  # a member cut short is not read as if it were whole
        reason = e.reason if isinstance(e, InputError) else "corrupt_input"
        where = f", in {reading}" if reading else ""
        rejected.append(TarRejection(reading or "*", reason, f"{source}: the archive breaks off after {done} "
                                     f"members{where} ({type(e).__name__}: {e}); the rest is not read"))
    return rejected
