"""The on-disk formats of a training export, and readers for the two that have no common library.

Every format is written shard by shard; shard *i* of every format holds the same documents (the
documents of the samples of Parquet shard *i*, in sample order), so a shard can be checked
against its twin in another format. Each file is written under a temporary name and renamed, so a
file with a final name is always complete. Output bytes depend only on the data (no timestamps,
single-threaded compression), so two exports of the same corpus and settings are byte-identical.

**Parquet** (`parquet/<split>/part-NNNNN.parquet`, zstd): one row per packed sample, columns
`input_ids`, `labels`, `position_ids`, `cu_seqlens` (list<int32>), `loss_mask` (list<uint8>),
`num_tokens`, `num_loss_tokens` (int32), `trajectory_ids` (list<string>, one per document) and
`windows` (list<int32>, the window index of each document). Row groups of `row_group_samples`
rows are the reader's unit of shuffling. Read with `datasets.load_dataset("parquet", ...)`,
Polars, DuckDB or `pipelines.loader`.

**Chat JSONL.zst** (`chat/<split>/part-NNNNN.jsonl.zst`): one JSON object per document:
`{"id", "trajectory_id", "window", "copy", "split", "domain", "source_format", "num_tokens",
"num_loss_tokens", "truncated", "messages": [{"role", "content", "train"}]}`. `train` is true on an assistant message (an
observation) whose tokens carry loss. Rendering `messages` through the export's chat template
reproduces the document's tokens exactly, with each message's content encoded as text
(`pipelines.render.render`): a special token's string inside a content (an observation that
prints `<|im_end|>`) is its text's tokens, never the control token. `apply_chat_template(...,
tokenize=True)` makes it the control token, so it reproduces the tokens only of documents without
such strings. Where `truncated` is true the rendering is cut at `num_tokens` (a single turn longer
than the sequence length; an action cut to fit is cut already in `messages`).

**Megatron indexed binary** (`megatron/<split>/part-NNNNN_tokens.{bin,idx}` and
`part-NNNNN_loss_mask.{bin,idx}`): two indexed datasets with identical sequence lengths, one
sequence (and one Megatron "document") per exported document. `.bin` is the raw little-endian
array of every sequence back to back (tokens: uint16 when the vocabulary has fewer than 65,500
ids, else int32; loss mask: uint8). `.idx` is Megatron-LM's `MMapIndexedDataset` index:

    9 bytes  magic b"MMIDIDX\\x00\\x00"
    <Q       version (1)
    <B       dtype code (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16)
    <Q       sequence count N
    <Q       document-index count D (= N + 1 here)
    int32[N] sequence lengths (elements)
    int64[N] sequence byte offsets into .bin
    int64[D] document indices: 0, then the end sequence index of each document

The loss mask is aligned with the tokens, as in the Parquet form: mask[i] = 1 trains the
prediction of token i from the tokens before it. Megatron-LM's GPT dataset predicts labels =
tokens[1:], so the mask of its labels is mask[1:]. Stock Megatron-LM reads neither mask nor
document lengths: its `GPTDataset` builds its own loss mask (ones; `--eod-mask-loss` zeroes the
loss of predictions made from an EOD token), and `--reset-position-ids --reset-attention-mask`
cut a packed sample at every EOD token, its tokenizer's end-of-sequence id. Where that id is the
chat template's end-of-message marker (SmolLM2, the default tokenizer here: `<|im_end|>`; Qwen
instruct models) every message would lose the history before it; where it is not, the documents
hold no EOD token and nothing is cut. Training on the masks needs a dataset class that reads the
`_loss_mask` dataset beside the tokens (shifted as above) and, when several documents share a
sample, resets positions and attention where a document ends (the lengths are in the index). The
Parquet form carries all of this ready to use (`labels`, `position_ids`, `cu_seqlens`).
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.pack import IGNORE_INDEX, Document, Sample

FORMATS = ("parquet", "chat", "megatron")

PARQUET_SCHEMA = pa.schema([
    pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("labels", pa.list_(pa.int32()), nullable=False),
    pa.field("loss_mask", pa.list_(pa.uint8()), nullable=False),
    pa.field("position_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("cu_seqlens", pa.list_(pa.int32()), nullable=False),
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("num_loss_tokens", pa.int32(), nullable=False),
    pa.field("trajectory_ids", pa.list_(pa.string()), nullable=False),
    pa.field("windows", pa.list_(pa.int32()), nullable=False),
])

MMAP_MAGIC = b"MMIDIDX\x00\x00"
DTYPE_CODES: dict[int, type] = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
                                7: np.float32, 8: np.uint16}
_CODE_OF = {np.dtype(v): k for k, v in DTYPE_CODES.items()}


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _publish(tmp: Path, path: Path) -> None:
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def token_dtype(vocab_size: int) -> type:
    """Megatron's choice: uint16 below 65,500 ids, else int32."""
    return np.uint16 if vocab_size < 65500 else np.int32


# ---------------------------------------------------------------------------------------------
# Parquet


def _list(offsets: np.ndarray, values: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32), pa.int32()), pa.array(values, typ))


def samples_table(samples: list[Sample]) -> pa.Table:
    """The Parquet rows of `samples`: the documents' ids and masks laid end to end, labels
    (`IGNORE_INDEX` where the mask is 0), positions restarting at every document and the
    documents' offsets (`cu_seqlens`), built for all samples at once from whole numpy buffers: no
    per-token Python, and no numpy call per sample."""
    docs = [d for s in samples for d in s.docs]
    per_sample = np.fromiter((len(s.docs) for s in samples), dtype=np.int64, count=len(samples))
    dlen = np.fromiter((len(d) for d in docs), dtype=np.int64, count=len(docs))
    bounds = np.zeros(len(docs) + 1, dtype=np.int64)  # token offset of each document, and the end
    np.cumsum(dlen, out=bounds[1:])
    first = np.zeros(len(samples) + 1, dtype=np.int64)  # index of each sample's first document, and the end
    np.cumsum(per_sample, out=first[1:])
    tok_at = bounds[first]  # token offset of each sample, and the end
    ids = np.concatenate([d.ids for d in docs]).astype(np.int32, copy=False) if docs else np.zeros(0, np.int32)
    mask = np.concatenate([d.mask for d in docs]).astype(np.uint8, copy=False) if docs else np.zeros(0, np.uint8)
    pos = (np.arange(len(ids), dtype=np.int64) - np.repeat(bounds[:-1], dlen)).astype(np.int32)
    labels = np.where(mask.astype(bool), ids, IGNORE_INDEX).astype(np.int32)
    # cu_seqlens of sample i: its documents' offsets from the sample's start, the end included
    cu_len = per_sample + 1
    cu_at = np.zeros(len(samples) + 1, dtype=np.int64)
    np.cumsum(cu_len, out=cu_at[1:])
    pick = np.repeat(first[:-1] - cu_at[:-1], cu_len) + np.arange(cu_at[-1], dtype=np.int64)
    cu = (bounds[pick] - np.repeat(tok_at[:-1], cu_len)).astype(np.int32)
    loss = np.zeros(len(mask) + 1, dtype=np.int64)
    np.cumsum(mask, out=loss[1:])
    cols: dict[str, Any] = {
        "input_ids": _list(tok_at, ids, pa.int32()),
        "labels": _list(tok_at, labels, pa.int32()),
        "loss_mask": _list(tok_at, mask, pa.uint8()),
        "position_ids": _list(tok_at, pos, pa.int32()),
        "cu_seqlens": _list(cu_at, cu, pa.int32()),
        "num_tokens": pa.array(np.diff(tok_at).astype(np.int32), pa.int32()),
        "num_loss_tokens": pa.array((loss[tok_at[1:]] - loss[tok_at[:-1]]).astype(np.int32), pa.int32()),
        "trajectory_ids": pa.array([[d.trajectory_id for d in s.docs] for s in samples], pa.list_(pa.string())),
        "windows": pa.array([[d.window for d in s.docs] for s in samples], pa.list_(pa.int32())),
    }
    return pa.Table.from_pydict(cols, schema=PARQUET_SCHEMA)


def write_parquet(path: Path, samples: list[Sample], row_group_samples: int, metadata: dict[str, str]) -> None:
    table = samples_table(samples).replace_schema_metadata({k.encode(): v.encode() for k, v in metadata.items()})
    tmp = _tmp(path)
    pq.write_table(table, tmp, compression="zstd", compression_level=3, row_group_size=row_group_samples,
                   use_dictionary=["trajectory_ids"], write_statistics=False)
    _publish(tmp, path)


# ---------------------------------------------------------------------------------------------
# chat JSONL.zst


def chat_record(doc: Document, split: str) -> dict[str, Any]:
    return {
        "id": f"{doc.trajectory_id}:{doc.window}:{doc.copy}",
        "trajectory_id": doc.trajectory_id,
        "window": doc.window,
        "copy": doc.copy,
        "split": split,
        "domain": doc.domain,
        "source_format": doc.source_format,
        "num_tokens": len(doc),
        "num_loss_tokens": doc.loss_tokens,
        "truncated": doc.truncated,
        "messages": doc.messages,
    }


def write_chat(path: Path, docs: list[Document], split: str, level: int = 3) -> None:
    import zstandard

    data = b"".join(orjson.dumps(chat_record(d, split), option=orjson.OPT_SORT_KEYS) + b"\n" for d in docs)
    tmp = _tmp(path)
    with open(tmp, "wb") as f:
        f.write(zstandard.ZstdCompressor(level=level, write_checksum=True, write_content_size=True).compress(data))
    _publish(tmp, path)


def read_chat(path: Path) -> list[dict[str, Any]]:
    import zstandard

    with open(path, "rb") as f:
        data = zstandard.ZstdDecompressor().decompress(f.read())
    return [orjson.loads(line) for line in data.splitlines() if line]


# ---------------------------------------------------------------------------------------------
# Megatron indexed binary


def write_indexed(prefix: Path, sequences: list[np.ndarray], dtype: type) -> None:
    """`prefix.bin` + `prefix.idx` in Megatron's MMapIndexedDataset layout (one document per sequence)."""
    dt = np.dtype(dtype).newbyteorder("<")
    lens = np.array([len(s) for s in sequences], dtype=np.int32)
    ptrs = np.zeros(len(sequences), dtype=np.int64)
    if len(sequences) > 1:
        np.cumsum(lens[:-1].astype(np.int64) * dt.itemsize, out=ptrs[1:])
    doc_idx = np.arange(len(sequences) + 1, dtype=np.int64)
    bin_path, idx_path = prefix.with_name(prefix.name + ".bin"), prefix.with_name(prefix.name + ".idx")
    tmp_bin, tmp_idx = _tmp(bin_path), _tmp(idx_path)
    with open(tmp_bin, "wb") as f:
        for s in sequences:
            f.write(np.ascontiguousarray(s, dtype=dt).tobytes())
    with open(tmp_idx, "wb") as f:
        f.write(MMAP_MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", _CODE_OF[np.dtype(dtype)]))
        f.write(struct.pack("<Q", len(sequences)))
        f.write(struct.pack("<Q", len(doc_idx)))
        f.write(lens.astype("<i4").tobytes())
        f.write(ptrs.astype("<i8").tobytes())
        f.write(doc_idx.astype("<i8").tobytes())
    _publish(tmp_bin, bin_path)
    _publish(tmp_idx, idx_path)


def read_indexed(prefix: Path) -> tuple[list[np.ndarray], np.ndarray]:
    """(sequences, document indices) of a Megatron indexed dataset: a reader independent of the
    writer's arrays, for tests and audits (Megatron itself memory-maps the same bytes)."""
    idx = Path(str(prefix) + ".idx").read_bytes()
    if idx[:9] != MMAP_MAGIC:
        raise ValueError(f"{prefix}.idx: not a Megatron MMapIndexedDataset index (magic {idx[:9]!r})")
    version, = struct.unpack_from("<Q", idx, 9)
    code, = struct.unpack_from("<B", idx, 17)
    n, d = struct.unpack_from("<QQ", idx, 18)
    if version != 1:
        raise ValueError(f"{prefix}.idx: index version {version}, expected 1")
    off = 34
    lens = np.frombuffer(idx, "<i4", n, off)
    ptrs = np.frombuffer(idx, "<i8", n, off + 4 * n)
    doc_idx = np.frombuffer(idx, "<i8", d, off + 12 * n)
    dtype = np.dtype(DTYPE_CODES[code]).newbyteorder("<")
    data = np.memmap(str(prefix) + ".bin", dtype=np.uint8, mode="r")
    seqs = [np.frombuffer(data, dtype, int(ln), int(p)) for ln, p in zip(lens, ptrs, strict=True)]
    return seqs, np.asarray(doc_idx)


def write_megatron(prefix: Path, docs: list[Document], vocab_size: int) -> list[Path]:
    tok, mask = prefix.with_name(prefix.name + "_tokens"), prefix.with_name(prefix.name + "_loss_mask")
    write_indexed(tok, [d.ids for d in docs], token_dtype(vocab_size))
    write_indexed(mask, [d.mask for d in docs], np.uint8)
    return [Path(str(p) + ext) for p in (tok, mask) for ext in (".bin", ".idx")]
