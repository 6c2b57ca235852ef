"""Parity: a real model's loss over packed samples equals its loss over the same documents
unpacked, with the same masks. Packed rows use the export's `position_ids` (restarting per
document) and a block-diagonal causal mask from `cu_seqlens`; unpacked documents run alone.

Two models: SmolLM2-135M-Instruct (the project's real small model, rotary positions) and a tiny
GPT-2 built from a config with a fixed seed (learned absolute positions: wrong position ids would
show at once). Without the document mask the losses differ, so the check can fail."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from pipelines.export import export
from pipelines.loader import PackedShards, pad_collate
from tests.pipelines.export_support import build_corpus, small_config, tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, torch.Tensor]]:
    root = tmp_path_factory.mktemp("parity")
    out = root / "export"
    export(build_corpus(root), out, small_config(seq_len=256, formats=("parquet",)), tokenizer=tokenizer(), progress=False)
    multi = [s for split in ("train", "validation", "test") for s in PackedShards(out, split, shuffle=False)
             if len(s["cu_seqlens"]) >= 3]
    assert len(multi) >= 2, "the parity test needs packed samples of at least 2 documents"
    return sorted(multi, key=lambda s: len(s["input_ids"]))[:2]  # the shortest: CPU time


def _token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-target NLL, Hugging Face style: logits at i - 1 predict labels at i (-100 ignored)."""
    lp = torch.log_softmax(logits[:-1].float(), -1)
    tgt = labels[1:]
    keep = tgt != -100
    return -lp[keep].gather(-1, tgt[keep][:, None])[:, 0]


def _compare(model: Any, samples: list[dict[str, torch.Tensor]]) -> tuple[float, float, float, float]:
    """(packed total NLL, unpacked total NLL, max per-token difference, max per-token difference
    without the document mask)."""
    torch.set_num_threads(1)  # on a shared 2-core machine more threads are several times slower
    b = pad_collate(samples)
    with torch.inference_mode():
        packed = model(input_ids=b["input_ids"], position_ids=b["position_ids"],
                       attention_mask=b["attention_mask"]).logits
        leaky = model(input_ids=b["input_ids"], position_ids=b["position_ids"]).logits
        tot_p = tot_u = 0.0
        worst = worst_leaky = 0.0
        for i, s in enumerate(samples):
            cu = s["cu_seqlens"].tolist()
            n_targets = 0
            for a, z in zip(cu[:-1], cu[1:], strict=True):
                alone = model(input_ids=s["input_ids"][a:z][None]).logits[0]
                nu = _token_nll(alone, s["labels"][a:z])
                npk = _token_nll(packed[i, a:z], s["labels"][a:z])
                nl = _token_nll(leaky[i, a:z], s["labels"][a:z])
                assert len(nu) == len(npk) == int(s["loss_mask"][a:z].sum())
                n_targets += len(nu)
                worst = max(worst, float((nu - npk).abs().max()) if len(nu) else 0.0)
                tot_p += float(npk.sum())
                tot_u += float(nu.sum())
                worst_leaky = max(worst_leaky, float((nu - nl).abs().max()) if len(nu) else 0.0)
            assert n_targets == int(s["loss_mask"].sum()) and n_targets > 0
    return tot_p, tot_u, worst, worst_leaky


def test_smollm2_packed_loss_equals_unpacked(samples: list[dict[str, torch.Tensor]]) -> None:
    from transformers import AutoModelForCausalLM

    from pipelines.score_model import resolve_model

    try:
        path = resolve_model("smollm2")
    except FileNotFoundError as e:
        pytest.fail(f"the parity test needs SmolLM2: {e}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa",
                                                 local_files_only=True).eval()
    tot_p, tot_u, worst, leaky = _compare(model, samples)
    assert worst < 2e-4
    assert abs(tot_p - tot_u) < 1e-5 * tot_u
    assert leaky > 100 * 2e-4  # attention across documents would change the loss


def test_tiny_gpt2_packed_loss_equals_unpacked(samples: list[dict[str, torch.Tensor]]) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=49152, n_positions=256, n_embd=64, n_layer=2, n_head=4,
                     initializer_range=0.5, attn_implementation="sdpa")  # sharp attention: a leak shows
    model = GPT2LMHeadModel(cfg).eval()
    tot_p, tot_u, worst, leaky = _compare(model, samples)
    assert worst < 1e-4
    assert abs(tot_p - tot_u) < 1e-5 * tot_u
    assert leaky > 100 * 1e-4


def test_samples_are_what_the_parity_runs_on(samples: list[dict[str, torch.Tensor]]) -> None:
    for s in samples:
        cu = s["cu_seqlens"].tolist()
        assert s["position_ids"].tolist() == [p for a, z in zip(cu[:-1], cu[1:], strict=True) for p in range(z - a)]
        assert len(s["input_ids"]) <= 256 and len(cu) >= 3
