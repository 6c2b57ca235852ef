"""Protocol Buffers wire format and TFRecord framing, decoded in plain Python (no generated code).

Why: AndroidControl ships `tf.train.Example` records in TFRecord files whose accessibility trees are
serialized android_env protos. Reading them with TensorFlow and the android_env package would pull
two heavy dependencies into the core for a few dozen field numbers; the wire format is small and
stable, so it is decoded here.

Wire format (https://protobuf.dev/programming-guides/encoding/): each field is a varint key
`(field_number << 3) | wire_type` followed by a varint (0), 8 little-endian bytes (1), a varint
length and that many bytes (2) or 4 little-endian bytes (5); wire types 3/4 (groups, deprecated)
are skipped as a whole; 6 and 7 do not exist and are errors. As in the official parsers, a field of
an unknown number, or whose wire type does not fit its declared type, is skipped; a repeated scalar
is read both packed (one length-delimited run) and unpacked (one key per value); a message field
that occurs twice is merged. Truncation, over-long varints and impossible wire types raise
`WireError`, naming the field path and the byte offset inside the message that holds it.

Message schemas, field numbers as published (field names as in the .proto files):
  tensorflow/tensorflow  tensorflow/core/example/example.proto   Example{features=1}
  tensorflow/tensorflow  tensorflow/core/example/feature.proto   Features{map<string,Feature> feature=1}
      Feature{oneof kind: bytes_list=1, float_list=2, int64_list=3}; BytesList{repeated bytes value=1};
      FloatList{repeated float value=1 [packed]}; Int64List{repeated int64 value=1 [packed]}
  google-deepmind/android_env  android_env/proto/a11y/android_accessibility_forest.proto
      AndroidAccessibilityForest{repeated AndroidAccessibilityWindowInfo windows=1}
  google-deepmind/android_env  android_env/proto/a11y/android_accessibility_window_info.proto
      AndroidAccessibilityWindowInfo{bounds_in_screen=1 ProtoRect, display_id=2, id=3, layer=4, title=5,
      window_type=6 (UNKNOWN_TYPE=0, TYPE_APPLICATION=1, TYPE_INPUT_METHOD=2, TYPE_SYSTEM=3,
      TYPE_ACCESSIBILITY_OVERLAY=4, TYPE_SPLIT_SCREEN_DIVIDER=5), is_accessibility_focused=7,
      is_active=8, is_focused=9, is_in_picture_in_picture_mode=10, tree=11}
  google-deepmind/android_env  android_env/proto/a11y/android_accessibility_tree.proto
      AndroidAccessibilityTree{repeated AndroidAccessibilityNodeInfo nodes=1}
  google-deepmind/android_env  android_env/proto/a11y/android_accessibility_node_info.proto
      AndroidAccessibilityNodeInfo: see `NODE` below (1-31; `actions`=24 and `clickable_spans`=26 are
      not decoded: nothing here renders them, and skipping them halves the decoding time)
  google-deepmind/android_env  android_env/proto/a11y/rect.proto  ProtoRect{left=1, top=2, right=3, bottom=4}

TFRecord framing (tensorflow/tensorflow tensorflow/core/lib/io/record_writer.h and the format notes
in tensorflow/python/lib/io/python_io.py): each record is `uint64 length` (little-endian), `uint32
masked crc32c of those 8 bytes`, `length` bytes of data, `uint32 masked crc32c of the data`; the mask
is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (mod 2**32). CRC32C is the Castagnoli CRC (reflected
polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF).

The length CRC is always verified: it is what tells a TFRecord apart from any other bytes, and a
wrong one means the framing is lost (nothing after it can be trusted). The data CRC is verified too:
the table-driven pure-Python CRC (`crc32c_py`) would cost several times the conversion of a large
episode, so long records are computed with numpy (already a core dependency) over 256-byte lanes in
lockstep, the lane CRCs then chained with a precomputed "append 256 zero bytes" operator, the same
value bit for bit (the tests compare both paths on random data and on the standard check value); short
ones take the pure loop. The figures are in docs/benchmarks.md ("Raw-stream formats",
`bench/stream_formats.py`).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np

VARINT, I64, LEN, SGROUP, EGROUP, I32 = 0, 1, 2, 3, 4, 5
_MAX_GROUP_DEPTH = 100  # the official parsers' default recursion limit
MiB = 1 << 20

Buffer = bytes | bytearray | memoryview


class WireError(ValueError):
    """Bytes that are not a valid protobuf message; the message names the field path and byte offset."""


# ---------------------------------------------------------------------------------------------
# Wire-level reading


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:  # the common one-byte case
            return b, pos + 1
    start, result, shift = pos, 0, 0
    while pos < end:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError(f"varint longer than 10 bytes at byte {start}")
    raise WireError(f"truncated varint at byte {start}")


def iter_fields(buf: Buffer) -> Iterator[tuple[int, int, int, Any]]:
    """(field number, wire type, byte offset, value) of each field of one message, in order: an int for
    varint and fixed fields, a memoryview slice (no copy) for length-delimited ones and groups."""
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos, end = 0, len(mv)
    while pos < end:
        at = pos
        key, pos = read_varint(mv, pos, end)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise WireError(f"field number 0 at byte {at}")
        if wt == VARINT:
            value, pos = read_varint(mv, pos, end)
        elif wt == LEN:
            n, pos = read_varint(mv, pos, end)
            if n > end - pos:
                raise WireError(
                    f"field {num} at byte {at}: length {n} runs past the end ({end - pos} bytes left)"
                )
            value, pos = mv[pos : pos + n], pos + n
        elif wt in (I64, I32):
            n = 8 if wt == I64 else 4
            if n > end - pos:
                raise WireError(f"field {num} at byte {at}: truncated fixed{n * 8} ({end - pos} bytes left)")
            value, pos = int.from_bytes(mv[pos : pos + n], "little"), pos + n
        elif wt == SGROUP:
            start = pos
            pos = _skip_group(mv, num, pos, end, at)
            value = mv[start:pos]
        elif wt == EGROUP:
            raise WireError(f"field {num} at byte {at}: end-group tag without a start-group")
        else:
            raise WireError(f"field {num} at byte {at}: invalid wire type {wt}")
        yield num, wt, at, value


def _skip_group(mv: memoryview, num: int, pos: int, end: int, at: int) -> int:
    """The position after the end-group tag that closes group `num` (deprecated wire types 3/4)."""
    stack = [num]
    while pos < end:
        key, pos = read_varint(mv, pos, end)
        n, wt = key >> 3, key & 7
        if wt == VARINT:
            _, pos = read_varint(mv, pos, end)
        elif wt in (LEN, I64, I32):
            size, pos = read_varint(mv, pos, end) if wt == LEN else (8 if wt == I64 else 4, pos)
            pos += size
            if pos > end:
                break
        elif wt == SGROUP:
            stack.append(n)
            if len(stack) > _MAX_GROUP_DEPTH:
                raise WireError(f"group {num} at byte {at}: nested deeper than {_MAX_GROUP_DEPTH}")
        elif wt == EGROUP:
            if stack.pop() != n:
                raise WireError(f"group {num} at byte {at}: end-group tag {n} does not match")
            if not stack:
                return pos
        else:
            raise WireError(f"group {num} at byte {at}: invalid wire type {wt}")
    raise WireError(f"group {num} at byte {at}: truncated (no end-group tag)")


def _int64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v >> 63 else v


def _int32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def packed_varints(payload: memoryview) -> list[int]:
    out, pos, end = [], 0, len(payload)
    while pos < end:
        v, pos = read_varint(payload, pos, end)
        out.append(v)
    return out


def packed_floats(payload: memoryview) -> list[float]:
    if len(payload) % 4:
        raise WireError(f"packed floats: {len(payload)} bytes is not a multiple of 4")
    return [v for (v,) in struct.iter_unpack("<f", payload)]


# ---------------------------------------------------------------------------------------------
# Schema-driven decoding (messages with scalar, string, bytes, message and repeated fields)

_WIRE_OF = {
    "int32": VARINT,
    "int64": VARINT,
    "enum": VARINT,
    "bool": VARINT,
    "string": LEN,
    "bytes": LEN,
    "message": LEN,
    "float": I32,
}
_CONVERT = {"int32": _int32, "enum": _int32, "int64": _int64, "bool": bool}


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # int32 | int64 | enum | bool | float | string | bytes | message
    repeated: bool = False
    message: Message | None = None


@dataclass(frozen=True)
class Message:
    name: str
    fields: dict[int, Field] = field(default_factory=dict)

    def default(self) -> dict[str, Any]:
        """Every field at its proto3 default: 0, false, "", empty list; None for an absent message."""
        zero = {"string": "", "bytes": b"", "bool": False, "float": 0.0, "message": None}
        return {f.name: [] if f.repeated else zero.get(f.kind, 0) for f in self.fields.values()}


def decode(msg: Message, buf: Buffer) -> dict[str, Any]:
    """One message as a dict of its declared fields (defaults for absent ones). Raises WireError."""
    out = msg.default()
    _decode_into(msg, buf, out, msg.name)
    return out


def _decode_into(msg: Message, buf: Buffer, out: dict[str, Any], path: str) -> None:
    fields = msg.fields
    try:
        items = list(iter_fields(buf))
    except WireError as e:
        raise WireError(f"{path}: {e}") from None
    for num, wt, at, value in items:
        f = fields.get(num)
        if f is None:
            continue
        want = _WIRE_OF[f.kind]
        if wt != want and not (f.repeated and wt == LEN and want in (VARINT, I32)):
            continue  # a wire type that does not fit the declared type: an unknown field, as upstream
        name = f.name
        if f.kind == "message":
            assert f.message is not None
            if f.repeated:
                sub = f.message.default()
                _decode_into(f.message, value, sub, f"{path}.{name}[{len(out[name])}]")
                out[name].append(sub)
            else:
                if out[name] is None:
                    out[name] = f.message.default()
                _decode_into(f.message, value, out[name], f"{path}.{name}")
        elif f.kind == "string":
            try:
                text = bytes(value).decode("utf-8")
            except UnicodeDecodeError as e:
                raise WireError(
                    f"{path}.{name} at byte {at}: invalid UTF-8 ({e.reason} at {e.start})"
                ) from None
            _store(out, f, text)
        elif f.kind == "bytes":
            _store(out, f, value)
        elif wt == LEN:  # packed repeated scalars
            try:
                raw = packed_floats(value) if f.kind == "float" else packed_varints(value)
            except WireError as e:
                raise WireError(f"{path}.{name} at byte {at}: {e}") from None
            conv = _CONVERT.get(f.kind)
            out[name].extend(map(conv, raw) if conv else raw)
        else:
            v = (
                struct.unpack("<f", value.to_bytes(4, "little"))[0]
                if f.kind == "float"
                else _CONVERT[f.kind](value)
            )
            _store(out, f, v)


def _store(out: dict[str, Any], f: Field, value: Any) -> None:
    if f.repeated:
        out[f.name].append(value)
    else:
        out[f.name] = value


# ---------------------------------------------------------------------------------------------
# tf.train.Example (hand-written: the oneof and the map need their own rules, and screenshots must
# stay zero-copy slices)


@dataclass(frozen=True)
class Feature:
    """One `tf.train.Feature`: which list it holds (None when none is set) and its values; bytes values
    are memoryview slices of the record."""

    kind: str | None
    values: list


_FEATURE_KINDS = {1: "bytes_list", 2: "float_list", 3: "int64_list"}


def decode_example(data: Buffer) -> dict[str, Feature]:
    """`tf.train.Example` -> {feature name: Feature}. A map key given twice keeps the last entry, and a
    Features message given twice is merged, as the official parser does. Raises WireError."""
    features: dict[str, Feature] = {}
    for num, wt, at, value in _fields(data, "Example"):
        if num != 1 or wt != LEN:
            continue
        for fnum, fwt, fat, entry in _fields(value, f"Example.features (at byte {at})"):
            if fnum != 1 or fwt != LEN:
                continue
            where = f"Example.features.feature (at byte {at} + {fat})"
            key, feat = "", Feature(None, [])
            for enum, ewt, _, evalue in _fields(entry, where):
                if enum == 1 and ewt == LEN:
                    try:
                        key = bytes(evalue).decode("utf-8")
                    except UnicodeDecodeError:
                        raise WireError(f"{where}: key is not UTF-8") from None
                elif enum == 2 and ewt == LEN:
                    feat = _feature(evalue, f"{where} {key!r}")
            features[key] = feat
    return features


def _fields(buf: Buffer, where: str) -> list[tuple[int, int, int, Any]]:
    try:
        return list(iter_fields(buf))
    except WireError as e:
        raise WireError(f"{where}: {e}") from None


def _feature(buf: memoryview, where: str) -> Feature:
    kind: str | None = None
    values: list = []
    for num, wt, _, value in _fields(buf, where):
        if num not in _FEATURE_KINDS or wt != LEN:
            continue
        if _FEATURE_KINDS[num] != kind:  # another member of the oneof replaces the one before
            kind, values = _FEATURE_KINDS[num], []
        values.extend(_list_values(kind, value, f"{where} {kind}"))
    return Feature(kind, values)


def _list_values(kind: str, buf: memoryview, where: str) -> list:
    out: list = []
    for num, wt, at, value in _fields(buf, where):
        if num != 1:
            continue
        try:
            if kind == "bytes_list" and wt == LEN:
                out.append(value)
            elif kind == "int64_list" and wt == LEN:
                out.extend(map(_int64, packed_varints(value)))
            elif kind == "int64_list" and wt == VARINT:
                out.append(_int64(value))
            elif kind == "float_list" and wt == LEN:
                out.extend(packed_floats(value))
            elif kind == "float_list" and wt == I32:
                out.append(struct.unpack("<f", value.to_bytes(4, "little"))[0])
        except WireError as e:
            raise WireError(f"{where} at byte {at}: {e}") from None
    return out


def peek_feature_keys(prefix: bytes) -> list[str]:
    """The feature names visible in the first bytes of a serialized Example (for sniffing: the record
    itself may be megabytes, but each map entry starts with its key). Never raises."""
    keys: list[str] = []
    try:
        key, pos = read_varint(prefix, 0, len(prefix))
        if key != (1 << 3 | LEN):
            return keys
        _, pos = read_varint(prefix, pos, len(prefix))  # the length of Features: may run past the prefix
        end = len(prefix)
        while pos < end:
            key, pos = read_varint(prefix, pos, end)
            if key != (1 << 3 | LEN):
                return keys
            size, pos = read_varint(prefix, pos, end)
            entry_end = pos + size
            k, p = read_varint(prefix, pos, end)
            if k == (1 << 3 | LEN):
                n, p = read_varint(prefix, p, end)
                if p + n <= min(end, entry_end):
                    keys.append(prefix[p : p + n].decode("utf-8"))
            pos = entry_end
    except (WireError, UnicodeDecodeError):
        pass
    return keys


# ---------------------------------------------------------------------------------------------
# android_env accessibility forest

RECT = Message(
    "ProtoRect",
    {
        1: Field("left", "int32"),
        2: Field("top", "int32"),
        3: Field("right", "int32"),
        4: Field("bottom", "int32"),
    },
)
NODE = Message(
    "AndroidAccessibilityNodeInfo",
    {
        1: Field("unique_id", "int32"),
        2: Field("bounds_in_screen", "message", message=RECT),
        3: Field("class_name", "string"),
        4: Field("content_description", "string"),
        5: Field("hint_text", "string"),
        6: Field("package_name", "string"),
        7: Field("text", "string"),
        8: Field("text_selection_start", "int64"),
        9: Field("text_selection_end", "int64"),
        10: Field("view_id_resource_name", "string"),
        11: Field("window_id", "int32"),
        12: Field("is_checkable", "bool"),
        13: Field("is_checked", "bool"),
        14: Field("is_clickable", "bool"),
        15: Field("is_editable", "bool"),
        16: Field("is_enabled", "bool"),
        17: Field("is_focusable", "bool"),
        18: Field("is_focused", "bool"),
        19: Field("is_long_clickable", "bool"),
        20: Field("is_password", "bool"),
        21: Field("is_scrollable", "bool"),
        22: Field("is_selected", "bool"),
        23: Field("is_visible_to_user", "bool"),
        25: Field("child_ids", "int32", repeated=True),
        27: Field("depth", "int32"),
        28: Field("labeled_by_id", "int32"),
        29: Field("label_for_id", "int32"),
        30: Field("drawing_order", "int32"),
        31: Field("tooltip_text", "string"),
    },
)
TREE = Message("AndroidAccessibilityTree", {1: Field("nodes", "message", repeated=True, message=NODE)})
WINDOW = Message(
    "AndroidAccessibilityWindowInfo",
    {
        1: Field("bounds_in_screen", "message", message=RECT),
        2: Field("display_id", "int32"),
        3: Field("id", "int32"),
        4: Field("layer", "int32"),
        5: Field("title", "string"),
        6: Field("window_type", "enum"),
        7: Field("is_accessibility_focused", "bool"),
        8: Field("is_active", "bool"),
        9: Field("is_focused", "bool"),
        10: Field("is_in_picture_in_picture_mode", "bool"),
        11: Field("tree", "message", message=TREE),
    },
)
FOREST = Message(
    "AndroidAccessibilityForest", {1: Field("windows", "message", repeated=True, message=WINDOW)}
)
WINDOW_TYPES = {
    0: "UNKNOWN_TYPE",
    1: "TYPE_APPLICATION",
    2: "TYPE_INPUT_METHOD",
    3: "TYPE_SYSTEM",
    4: "TYPE_ACCESSIBILITY_OVERLAY",
    5: "TYPE_SPLIT_SCREEN_DIVIDER",
}


def decode_forest(data: Buffer) -> list[dict[str, Any]]:
    """An `AndroidAccessibilityForest` -> its windows (dicts of the fields above). Raises WireError."""
    return decode(FOREST, data)["windows"]


# ---------------------------------------------------------------------------------------------
# CRC32C

_POLY = 0x82F63B78  # Castagnoli, reflected
_MASK_DELTA = 0xA282EAD8
_LANE = 256  # bytes per numpy lane: the fastest width on MiB-sized records (bench/stream_formats.py)
_NUMPY_FROM = 12 << 10  # the lanes cost about one numpy step per lane byte whatever the size: below this
# the pure-Python loop is faster (measured crossover 10-12 KiB, bench/stream_formats.py)


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_TABLE = _table()
_TABLE_NP = np.array(_TABLE, dtype=np.uint32)


def _crc_register(data: Buffer, crc: int) -> int:
    """The CRC register after feeding `data` to it (no initial value or final xor applied)."""
    t = _TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def crc32c_py(data: Buffer) -> int:
    """CRC32C, one byte at a time in plain Python: the reference, and the path for short inputs."""
    return _crc_register(data, 0xFFFFFFFF) ^ 0xFFFFFFFF


@functools.cache
def _zeros_operator() -> tuple[list[int], ...]:
    """The CRC register after `_LANE` zero bytes as a linear map of the register before them, as four
    byte-indexed tables (a register of 32 bits is the xor of its bits' images)."""
    basis = [_crc_register(bytes(_LANE), 1 << i) for i in range(32)]
    tables = []
    for k in range(4):
        tab = []
        for v in range(256):
            acc = 0
            for bit in range(8):
                if v >> bit & 1:
                    acc ^= basis[8 * k + bit]
            tab.append(acc)
        tables.append(tab)
    return tuple(tables)


def crc32c(data: Buffer) -> int:
    """CRC32C of `data`. Long inputs run as `_LANE`-byte lanes through numpy in lockstep (each lane's
    CRC from a zero register), then the lanes are chained: register(A+B) = zeros_op(register(A)) ^
    register_from_zero(B), because the CRC register is linear in its state and its input."""
    return crc32c_py(data) if len(data) < _NUMPY_FROM else _crc32c_lanes(data)


def _crc32c_lanes(data: Buffer) -> int:
    head = len(data) % _LANE
    reg = _crc_register(memoryview(data)[:head], 0xFFFFFFFF)
    lanes = np.frombuffer(data, dtype=np.uint8, offset=head).reshape(-1, _LANE).T.copy()
    c = np.zeros(lanes.shape[1], dtype=np.uint32)
    idx = np.empty_like(c)
    for row in lanes:
        np.bitwise_xor(c, row, out=idx)
        idx &= 0xFF
        c >>= 8
        c ^= _TABLE_NP[idx]
    t0, t1, t2, t3 = _zeros_operator()
    for lane_reg in c.tolist():
        reg = t0[reg & 0xFF] ^ t1[(reg >> 8) & 0xFF] ^ t2[(reg >> 16) & 0xFF] ^ t3[reg >> 24] ^ lane_reg
    return reg ^ 0xFFFFFFFF


def masked_crc32c(data: Buffer) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# TFRecord framing

HEADER_BYTES = 12
FOOTER_BYTES = 4


class TFRecord:
    """One record's data and where it sat (index from 0, byte offset in the decompressed stream).
    A plain class: its `str` is what a quarantine excerpt shows instead of megabytes of data."""

    __slots__ = ("index", "offset", "data")

    def __init__(self, index: int, offset: int, data: bytes):
        self.index, self.offset, self.data = index, offset, data

    def __str__(self) -> str:
        return f"TFRecord {self.index} at byte {self.offset} ({len(self.data)} bytes)"

    __repr__ = __str__


@dataclass(frozen=True)
class FramingProblem:
    """A record that cannot be used while the framing around it is intact (reading goes on)."""

    reason: str
    detail: str
    index: int
    offset: int


class FramingError(Exception):
    """The framing is lost or the input ends inside a record: nothing after `offset` can be read."""

    def __init__(self, reason: str, detail: str, index: int, offset: int):
        super().__init__(detail)
        self.reason, self.detail, self.index, self.offset = reason, detail, index, offset


def tfrecord_length(head: bytes) -> int | None:
    """The first record's data length when `head` starts with a TFRecord header whose CRC checks."""
    if len(head) < HEADER_BYTES:
        return None
    (stored,) = struct.unpack_from("<I", head, 8)
    if masked_crc32c(head[:8]) != stored:
        return None
    return struct.unpack_from("<Q", head)[0]


def read_tfrecords(
    stream: IO[bytes], max_record_bytes: int, verify_data: bool = True
) -> Iterator[TFRecord | FramingProblem]:
    """The records of a TFRecord stream, one at a time (memory: one record of at most `max_record_bytes`).

    Yields a FramingProblem for a record that is skipped while the framing holds (`record_too_large`,
    `bad_data_crc`); raises FramingError where reading cannot go on (`bad_length_crc`,
    `truncated_record`, `corrupt_input` for a compressed stream that fails)."""
    index = offset = 0
    while True:
        header = _read(stream, HEADER_BYTES, index, offset)
        if not header:
            return
        where = f"record {index} at byte {offset}"
        if len(header) < HEADER_BYTES:
            raise FramingError(
                "truncated_record",
                f"{where}: the input ends inside the record header ({len(header)} of {HEADER_BYTES} bytes)",
                index,
                offset,
            )
        length, stored = struct.unpack("<QI", header)
        if masked_crc32c(header[:8]) != stored:
            raise FramingError(
                "bad_length_crc",
                f"{where}: the length field's CRC does not match "
                f"(stored {stored:#010x}, computed {masked_crc32c(header[:8]):#010x}): the record "
                "framing is lost and the rest of the input is not read",
                index,
                offset,
            )
        if length > max_record_bytes:
            _skip(stream, length + FOOTER_BYTES, index, offset, where, max_record_bytes)
            yield FramingProblem(
                "record_too_large",
                f"{where}: {length} bytes, above the {max_record_bytes}-byte record limit (skipped)",
                index,
                offset,
            )
        else:
            data = _read(stream, length, index, offset)
            footer = _read(stream, FOOTER_BYTES, index, offset) if len(data) == length else b""
            if len(footer) < FOOTER_BYTES:
                got = len(data) + len(footer)
                raise FramingError(
                    "truncated_record",
                    f"{where}: the input ends inside the record ({got} of "
                    f"{length + FOOTER_BYTES} bytes after the header)",
                    index,
                    offset,
                )
            (stored,) = struct.unpack("<I", footer)
            if verify_data and masked_crc32c(data) != stored:
                yield FramingProblem(
                    "bad_data_crc",
                    f"{where}: the data CRC does not match (stored {stored:#010x}, "
                    f"computed {masked_crc32c(data):#010x}): the record is corrupt",
                    index,
                    offset,
                )
            else:
                yield TFRecord(index, offset, data)
        index += 1
        offset += HEADER_BYTES + length + FOOTER_BYTES


def _read(stream: IO[bytes], n: int, index: int, offset: int) -> bytes:
    """Up to `n` bytes (fewer only at the end of the input); a failing read is a FramingError. (Compressed data
    that breaks off ends the stream there instead: `pipelines.sources.stream_problem` reports it.)"""
    try:
        data = stream.read(n)
        while len(data) < n:
            more = stream.read(n - len(data))
            if not more:
                break
            data += more
    except OSError as e:
        raise FramingError(
            "corrupt_input",
            f"record {index} at byte {offset}: the input stream failed: {type(e).__name__}: {e}",
            index,
            offset,
        ) from None
    return data


def _skip(stream: IO[bytes], n: int, index: int, offset: int, where: str, limit: int) -> None:
    """Read past `n` bytes without holding them."""
    left = n
    while left:
        got = len(_read(stream, min(left, MiB), index, offset))
        if not got:
            raise FramingError(
                "record_too_large",
                f"{where}: {n - FOOTER_BYTES} bytes, above the {limit}-byte "
                f"record limit, and the input ends inside it",
                index,
                offset,
            )
        left -= got
