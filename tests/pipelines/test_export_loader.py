"""The PyTorch reader of exported shards: seeded shuffle, ranks and workers without overlap, resume."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from pipelines.export import export
from pipelines.loader import PackedShards, document_attention_mask, pad_collate
from tests.pipelines.export_support import build_corpus, parquet_rows, small_config, tokenizer


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loader")
    o = root / "export"
    export(build_corpus(root), o, small_config(formats=("parquet",)), tokenizer=tokenizer(), progress=False)
    return o


def _key(s: dict[str, torch.Tensor]) -> tuple[int, ...]:
    return tuple(s["input_ids"].tolist())


def test_ranks_and_workers_split_the_epoch_without_overlap(out: Path) -> None:
    n = len(parquet_rows(out, "train"))
    assert n == 386  # 401 while InterCode's plain `submit` turns were environment turns (their repeated output)
    seen: list[tuple[int, int]] = []
    for rank in range(3):
        ds = PackedShards(out, "train", seed=7, rank=rank, world_size=3)
        assert ds.samples_per_rank() == n // 3 == 128
        per_worker = [list(ds.positions(w, 2)) for w in range(2)]
        assert len(per_worker[0]) + len(per_worker[1]) == 128
        assert not set(per_worker[0]) & set(per_worker[1])
        seen += per_worker[0] + per_worker[1]
    assert len(seen) == len(set(seen)) == 384  # the last n mod 3 samples sit this epoch out
    stream = [(b, int(r)) for b, rows in PackedShards(out, "train", seed=7, rank=0, world_size=1).order() for r in rows]
    assert sorted(seen) == sorted(stream[:384])
    # rank r reads the contiguous slice [r * (n // R), (r + 1) * (n // R)) of the epoch's stream, as documented
    # (any assignment of disjoint slices passed the checks above; a resumed rank must read its own)
    for rank in range(3):
        ds = PackedShards(out, "train", seed=7, rank=rank, world_size=3)
        assert list(ds.positions()) == stream[128 * rank:128 * (rank + 1)]


def test_dataloader_workers_reassemble_the_rank_stream_in_order(out: Path) -> None:
    ds = PackedShards(out, "train", seed=3, rank=1, world_size=2)
    direct = [_key(s) for s in ds]
    assert len(direct) == 386 // 2
    loaded = [tuple(s["input_ids"][0].tolist()) for s in DataLoader(ds, batch_size=1, num_workers=2)
              if True]
    assert loaded == direct


def test_seeded_shuffle_and_resume(out: Path) -> None:
    a = [_key(s) for s in PackedShards(out, "train", seed=1)]
    b = [_key(s) for s in PackedShards(out, "train", seed=1)]
    c = [_key(s) for s in PackedShards(out, "train", seed=2)]
    plain = [_key(s) for s in PackedShards(out, "train", shuffle=False)]
    assert a == b and a != c and sorted(a) == sorted(c) == sorted(plain)
    assert plain == [tuple(r["input_ids"]) for r in parquet_rows(out, "train")]
    resumed = [_key(s) for s in PackedShards(out, "train", seed=1, start_index=100)]
    assert resumed == a[100:]
    e1 = PackedShards(out, "train", seed=1)
    e1.set_epoch(1)
    assert [_key(s) for s in e1] != a
    # with workers, resuming gives the same tail
    ds = PackedShards(out, "train", seed=1, start_index=37)
    assert [tuple(s["input_ids"][0].tolist()) for s in DataLoader(ds, batch_size=1, num_workers=2)] == a[37:]


def test_a_resume_offset_belongs_to_its_epoch(out: Path) -> None:
    """After a resume at sample 100 of epoch 0, the next epoch is whole: set_epoch kept the offset,
    and every later epoch lost its first 100 samples (len() said so too)."""
    whole = [_key(s) for s in PackedShards(out, "train", seed=5, epoch=1)]
    ds = PackedShards(out, "train", seed=5, start_index=100)
    assert len(ds) == len(list(ds)) == 386 - 100
    ds.set_epoch(0)  # the same epoch: still resumed
    assert len(ds) == 386 - 100
    ds.set_epoch(1)
    assert len(ds) == 386 and [_key(s) for s in ds] == whole


@pytest.mark.parametrize("kw, said", [
    ({"rank": 1}, "rank=1, world_size=None: give both or neither"),
    ({"world_size": 4}, "rank=None, world_size=4: give both or neither"),
    ({"start_index": -3}, "start_index -3: must be at least 0"),
    ({"seed": -1}, "seed -1: must be at least 0"),
    ({"epoch": -1}, "epoch -1: must be at least 0"),
])
def test_arguments_that_would_read_the_wrong_samples_are_refused(out: Path, kw: dict, said: str) -> None:
    """rank alone fell back to rank 0 of 1 (every process read the whole epoch); a negative
    start_index gave len() 404 of 401 samples and reordered workers' batches; a negative seed or
    epoch failed later, inside a worker."""
    with pytest.raises(ValueError, match=re.escape(said)):
        PackedShards(out, "train", **kw)
    with pytest.raises(ValueError, match="epoch -2: must be at least 0"):
        PackedShards(out, "train").set_epoch(-2)


def test_tensors_and_collate(out: Path) -> None:
    s = next(iter(PackedShards(out, "validation", shuffle=False)))
    row = parquet_rows(out, "validation")[0]
    assert s["input_ids"].dtype == torch.long and s["loss_mask"].dtype == torch.uint8
    assert s["labels"].tolist() == row["labels"] and s["cu_seqlens"].tolist() == row["cu_seqlens"]
    m = document_attention_mask(torch.tensor([0, 2, 5]), 6)
    assert m.int().tolist() == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [0, 0, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0],
                                [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 1]]
    b = pad_collate([s, {k: v[:3] if k != "cu_seqlens" else torch.tensor([0, 3], dtype=torch.int32) for k, v in s.items()}])
    n = len(s["input_ids"])
    assert b["input_ids"].shape == (2, n) and b["labels"][1, 3:].eq(-100).all() and b["loss_mask"][1, 3:].eq(0).all()
    assert b["attention_mask"].shape == (2, 1, n, n)
