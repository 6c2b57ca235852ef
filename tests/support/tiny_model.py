"""A 2-layer GPT-2 with seeded random weights and SmolLM2's tokenizer, saved as a local Hugging Face
model directory: the model tier's `--model PATH` route in a second, without a download."""

from __future__ import annotations

from pathlib import Path


def save_tiny_gpt2(dest: Path) -> Path:
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from pipelines.score_model import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2"), local_files_only=True)
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=1024, n_embd=32, n_layer=2, n_head=2)).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest
