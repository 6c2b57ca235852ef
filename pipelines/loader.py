"""A PyTorch reader for exported Parquet shards: shuffled, split across ranks and data-loader
workers without overlap, resumable from a sample index.

The stream of one epoch is defined once, globally: the export's row groups (blocks of
`row_group_samples` samples, the unit of I/O) in an order drawn from `seed + epoch`, each block's
samples in an order drawn from the same generator. Rank r of R takes the contiguous slice
[r·⌊N/R⌋, (r+1)·⌊N/R⌋) of that stream (the last N mod R samples are left out of the epoch, so every
rank yields the same number and none waits at the end), so a rank reads only its own blocks.
Within a rank, the positions q ≥ start are dealt to the data-loader workers in runs of
`batch_size`: worker w of W yields the positions with ⌊(q - start) / batch_size⌋ ≡ w (mod W), in
order. PyTorch's DataLoader makes each batch from one worker's samples and takes batches
round-robin from worker 0, so with the same `batch_size` here and in the DataLoader (default 1, for
`DataLoader(ds, batch_size=1)` or a per-sample stream) the rank sees exactly its slice in order,
whatever the number of workers. (Dealt one sample at a time, a DataLoader with batch_size B > 1
and W workers would yield positions 0, W, 2W, ... as its first batch: out of order, and a resume
at batches × B would repeat some samples and skip others.)

Resume: `start_index` is the number of samples this rank has already consumed in the epoch
(batches × batch size); the stream continues at that position, identically to an uninterrupted run.
It belongs to the epoch it was given with: `set_epoch` to another epoch starts that one at 0.

`rank` and `world_size` are given together (a data-parallel rank need not be the global one) or
not at all (then torch.distributed's, or 0 of 1 when it is not initialised: build the dataset after
`init_process_group`). `set_epoch` changes the dataset in this process: DataLoader workers that
persist across epochs (`persistent_workers=True`) keep the copy they started with, and repeat its
epoch; make a new DataLoader per epoch, or do not keep the workers.

Usage: `DataLoader(PackedShards(dir, "train", batch_size=B), batch_size=B, num_workers=W,
collate_fn=pad_collate)`.

torch is imported here (and by the parity test), nowhere else in the export.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import torch
from torch.utils.data import IterableDataset, get_worker_info

COLUMNS = ("input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens")


def _blocks(root: Path, manifest: dict[str, Any], split: str) -> list[tuple[str, int, int]]:
    """(shard path, row group, rows) for every row group of the split, in shard order."""
    out = []
    for shard in manifest["splits"][split]["shards"]:
        f = shard["files"]["parquet"][0]["path"]
        md = pq.ParquetFile(root / f).metadata
        out += [(f, g, md.row_group(g).num_rows) for g in range(md.num_row_groups)]
    return out


class PackedShards(IterableDataset):
    """Samples of one split of an export as dicts of tensors (`input_ids`, `labels`,
    `position_ids`, `cu_seqlens` int64/int32, `loss_mask` uint8). `batch_size`: the batch size
    of the DataLoader that reads it with workers (see the module docstring)."""

    def __init__(self, export_dir: Path | str, split: str = "train", seed: int = 0, shuffle: bool = True,
                 rank: int | None = None, world_size: int | None = None, start_index: int = 0, epoch: int = 0,
                 batch_size: int = 1):
        self.root = Path(export_dir)
        self.manifest = orjson.loads((self.root / "manifest.json").read_bytes())
        if split not in self.manifest["splits"]:
            raise ValueError(f"{self.root}: no split {split!r} (have {sorted(self.manifest['splits'])})")
        if "parquet" not in self.manifest["settings"]["formats"]:
            raise ValueError(f"{self.root}: exported without the parquet format")
        if (rank is None) != (world_size is None):
            raise ValueError(f"rank={rank}, world_size={world_size}: give both or neither (neither: torch.distributed's)")
        if rank is None or world_size is None:
            dist = torch.distributed
            on = dist.is_available() and dist.is_initialized()
            rank = dist.get_rank() if on else 0
            world_size = dist.get_world_size() if on else 1
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} outside world size {world_size}")
        if batch_size < 1:
            raise ValueError(f"batch_size {batch_size}: must be at least 1 (the DataLoader's batch size)")
        for name, v in (("seed", seed), ("epoch", epoch), ("start_index", start_index)):
            if v < 0:
                raise ValueError(f"{name} {v}: must be at least 0")
        self.split, self.seed, self.shuffle = split, seed, shuffle
        self.rank, self.world_size = rank, world_size
        self.start_index, self.epoch, self.batch_size = start_index, epoch, batch_size
        self.blocks = _blocks(self.root, self.manifest, split)

    def set_epoch(self, epoch: int) -> None:
        """The epoch to read next; another epoch than the current one starts at its first sample
        (a resume's `start_index` counted samples of its own epoch only)."""
        if epoch < 0:
            raise ValueError(f"epoch {epoch}: must be at least 0")
        if epoch != self.epoch:
            self.start_index = 0
        self.epoch = epoch

    def __len__(self) -> int:
        return self.samples_per_rank() - min(self.start_index, self.samples_per_rank())

    def samples_per_rank(self) -> int:
        return sum(n for _, _, n in self.blocks) // self.world_size

    def order(self) -> list[tuple[int, np.ndarray]]:
        """The epoch's global stream: (block number, row order within the block) in stream order."""
        rng = np.random.default_rng([self.seed, self.epoch])
        ids = rng.permutation(len(self.blocks)) if self.shuffle else np.arange(len(self.blocks))
        out = []
        for b in ids:
            n = self.blocks[b][2]
            out.append((int(b), rng.permutation(n) if self.shuffle else np.arange(n)))
        return out

    def positions(self, worker: int = 0, workers: int = 1) -> Iterator[tuple[int, int]]:
        """(block, row) of every sample this (rank, worker) yields, in order."""
        per = self.samples_per_rank()
        lo, hi = self.rank * per, (self.rank + 1) * per
        pos = 0
        for b, rows in self.order():
            n = len(rows)
            a, z = max(lo, pos), min(hi, pos + n)
            for p in range(a, z):
                q = p - lo
                if q >= self.start_index and (q - self.start_index) // self.batch_size % workers == worker:
                    yield b, int(rows[p - pos])
            pos += n
            if pos >= hi:
                break

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        cache: tuple[int, dict[str, list]] | None = None
        for b, r in self.positions(worker, workers):
            if cache is None or cache[0] != b:
                path, group, _ = self.blocks[b]
                t = pq.ParquetFile(self.root / path).read_row_group(group, columns=list(COLUMNS))
                cache = (b, {c: t.column(c) for c in COLUMNS})
            cols = cache[1]
            yield {c: _tensor(cols[c], r, c) for c in COLUMNS}


def _tensor(col: Any, row: int, name: str) -> torch.Tensor:
    arr = col[row].values.to_numpy(zero_copy_only=False)
    if name == "loss_mask":
        return torch.from_numpy(arr.astype(np.uint8))
    if name == "cu_seqlens":
        return torch.from_numpy(arr.astype(np.int32))
    return torch.from_numpy(arr.astype(np.int64))


def document_attention_mask(cu_seqlens: torch.Tensor, length: int) -> torch.Tensor:
    """Boolean [length, length] mask: causal, and only within each document (block diagonal).
    Positions past the last document (padding) attend to themselves only."""
    doc = torch.full((length,), -1, dtype=torch.long)
    for i in range(len(cu_seqlens) - 1):
        doc[int(cu_seqlens[i]):int(cu_seqlens[i + 1])] = i
    pad = doc < 0
    doc[pad] = -2 - torch.arange(int(pad.sum()))
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return causal & (doc[:, None] == doc[None, :])


def additive_mask(mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The boolean document mask as an additive one (0 / most negative), for attention
    implementations that add the mask to the scores (eager) instead of selecting with it (SDPA)."""
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def pad_collate(batch: list[dict[str, torch.Tensor]], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Right-pad a batch to its longest sample: input_ids with `pad_id`, labels -100, loss_mask
    0, position_ids 0; `attention_mask` is [B, 1, L, L] boolean document-causal (SDPA selects
    with it; for eager attention pass `additive_mask(...)`); `cu_seqlens` stays a list (one tensor per sample) for varlen kernels."""
    L = max(len(b["input_ids"]) for b in batch)
    B = len(batch)
    out = {
        "input_ids": torch.full((B, L), pad_id, dtype=torch.long),
        "labels": torch.full((B, L), -100, dtype=torch.long),
        "loss_mask": torch.zeros((B, L), dtype=torch.uint8),
        "position_ids": torch.zeros((B, L), dtype=torch.long),
        "attention_mask": torch.zeros((B, 1, L, L), dtype=torch.bool),
    }
    for i, b in enumerate(batch):
        n = len(b["input_ids"])
        for k in ("input_ids", "labels", "loss_mask", "position_ids"):
            out[k][i, :n] = b[k]
        out["attention_mask"][i, 0] = document_attention_mask(b["cu_seqlens"], L)
    out["cu_seqlens"] = [b["cu_seqlens"] for b in batch]  # type: ignore[assignment]
    return out
