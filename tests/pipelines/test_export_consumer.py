"""A training team's use of an export: the documented DataLoader pattern over `PackedShards` with
a batch size above 1 and several workers yields the rank's stream in order, and a resume at
batches × batch size continues it without repeating or skipping a sample."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
import torch
from torch.utils.data import DataLoader

from pipelines.export import export
from pipelines.ingest import IngestConfig, ingest
from pipelines.loader import PackedShards, pad_collate
from tests.pipelines.export_support import parquet_rows, small_config, tokenizer

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split()


def _session(i: int) -> dict:
    """An AgentWorldBench-form terminal session: 3 turns, observations of a few dozen words."""
    prompts, responses = [], []
    for k in range(3):
        head = f"### Turn {k + 1}\n" + (f"**Task Instruction:**\nconsumer task {i}\n\n" if k == 0 else "")
        prompts.append(f"{head}**Action:**\n```\ncmd{i} {k}\n```")
        obs = " ".join(WORDS[(i * 7 + k * 3 + j) % len(WORDS)] for j in range(20 + 5 * k + i % 13))
        responses.append(f"**Environment Observation:**\n{obs}")
    return {"task": "terminal", "id": f"consumer-{i}", "total_turns": 3, "turn_idx": 3,
            "system_str": "You are a Terminal World Model.", "prompt": prompts, "response": responses,
            "current_prompt": prompts[-1]}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("consumer")
    src = root / "inputs" / "consumer_test.jsonl"
    src.parent.mkdir()
    src.write_bytes(b"".join(orjson.dumps(_session(i)) + b"\n" for i in range(120)))
    ingest([src], root / "corpus", IngestConfig(workers=1), progress=False)
    o = root / "export"
    export(root / "corpus", o, small_config(formats=("parquet",)), tokenizer=tokenizer(), progress=False)
    return o


def _key(ids: torch.Tensor) -> tuple[int, ...]:
    return tuple(ids.tolist())


def _loaded(ds: PackedShards, batch_size: int, workers: int) -> list[tuple[int, ...]]:
    """Samples in the order a DataLoader yields them, padding cut off by `cu_seqlens`."""
    out = []
    for b in DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=pad_collate):
        for i, cu in enumerate(b["cu_seqlens"]):
            out.append(_key(b["input_ids"][i, : int(cu[-1])]))
    return out


def test_workers_are_dealt_whole_batches(out: Path) -> None:
    ds = PackedShards(out, "train", shuffle=False, batch_size=4)
    assert [len(list(ds.positions(w, 2))) for w in range(2)] == [44, 44]
    assert list(ds.positions(0, 2))[:8] == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    assert list(ds.positions(1, 2))[:8] == [(0, 4), (0, 5), (0, 6), (0, 7), (1, 4), (1, 5), (1, 6), (1, 7)]
    with pytest.raises(ValueError, match="batch_size 0"):
        PackedShards(out, "train", batch_size=0)


@pytest.mark.parametrize("batch", [4, 5])  # 88 samples: 22 whole batches of 4; 17 of 5 and one of 3
def test_dataloader_with_batches_and_workers_yields_the_stream_in_order(out: Path, batch: int) -> None:
    rows = parquet_rows(out, "train")
    assert len(rows) == 88
    direct = [_key(s["input_ids"]) for s in PackedShards(out, "train", seed=5)]
    assert sorted(direct) == sorted(tuple(r["input_ids"]) for r in rows)
    loaded = _loaded(PackedShards(out, "train", seed=5, batch_size=batch), batch, 2)
    assert loaded == direct
    # resume after 3 batches: the rest of the stream, nothing repeated, nothing skipped
    resumed = _loaded(PackedShards(out, "train", seed=5, batch_size=batch, start_index=3 * batch), batch, 2)
    assert resumed == direct[3 * batch:]
    assert len(set(loaded[: 3 * batch] + resumed)) == 88
