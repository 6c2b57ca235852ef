"""Shared by the export tests: a small real corpus, the real tokenizer, and independent readers.

The corpus: the sample's InterCode runs (64 tasks, long bash sessions that need windows at a short
sequence length) and tau-bench sessions, the AgentWorldBench test rows, and one planted row whose
observation holds an AWS key and an e-mail address (redaction must replace both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

from pipelines.export import ExportConfig, ExportTokenizer
from pipelines.ingest import IngestConfig, ingest
from pipelines.render import render

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample" / "corpus"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
EMAIL = "jane.doe@example.org"
PLANTED = {
    "task": "terminal", "id": "planted-secret", "total_turns": 2, "turn_idx": 2,
    "system_str": "You are a Terminal World Model.",
    "prompt": ["### Turn 1\n**Task Instruction:**\nShow the AWS credentials file.\n\n**Action:**\n```\ncat ~/.aws/credentials\n```",
               "### Turn 2\n**Action:**\n```\ngit log -1 --format=%ae\n```"],
    "response": [f"**Environment Observation:**\n[default]\naws_access_key_id = {AWS_KEY}\nregion = eu-west-1",
                 f"**Environment Observation:**\n{EMAIL}"],
    "current_prompt": "### Turn 2\n**Action:**\n```\ngit log -1 --format=%ae\n```",
}
SEQ_LEN = 256


def tokenizer() -> ExportTokenizer:
    try:
        return ExportTokenizer.load("smollm2")
    except FileNotFoundError as e:
        pytest.fail(f"the export tests need the SmolLM2 tokenizer: {e}")


def build_corpus(root: Path) -> Path:
    planted = root / "inputs" / "planted_test.jsonl"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(orjson.dumps(PLANTED) + b"\n")
    corpus = root / "corpus"
    inputs = [SAMPLE / "intercode", SAMPLE / "tau-bench", ROOT / "tests" / "data" / "agentworldbench", planted]
    ingest(inputs, corpus, IngestConfig(workers=1), progress=False)
    return corpus


def small_config(**kw: Any) -> ExportConfig:
    base: dict[str, Any] = {"seq_len": SEQ_LEN, "shard_tokens": 12_000, "row_group_samples": 8,
                            "pack_buffer_tokens": 6_000, "record_in_corpus": False,
                            "split": __import__("pipelines.export", fromlist=["SplitConfig"]).SplitConfig(validation=0.1, test=0.2)}
    base.update(kw)
    return ExportConfig(**base)


def parquet_rows(out: Path, split: str) -> list[dict[str, Any]]:
    m = orjson.loads((out / "manifest.json").read_bytes())
    rows: list[dict[str, Any]] = []
    for shard in m["splits"][split]["shards"]:
        rows += pq.read_table(out / shard["files"]["parquet"][0]["path"]).to_pylist()
    return rows


def documents(out: Path, split: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(trajectory_id, ids, mask) per document, cut out of the packed samples by cu_seqlens."""
    docs = []
    for r in parquet_rows(out, split):
        cu = r["cu_seqlens"]
        for k, tid in enumerate(r["trajectory_ids"]):
            a, z = cu[k], cu[k + 1]
            docs.append((tid, np.array(r["input_ids"][a:z], np.int64), np.array(r["loss_mask"][a:z], np.int64)))
    return docs


def render_record(tok: ExportTokenizer, rec: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """A chat JSONL record → (ids, mask) through `pipelines.render.render` and the Hugging Face
    tokenizer call: a path independent of the export's batch encoder."""
    msgs = [{"role": m["role"], "content": m["content"]} for m in rec["messages"]]
    train = [m["train"] for m in rec["messages"] if m["role"] == "assistant"]
    r = render(tok.hf, msgs, list(range(len(train))))
    ids = np.asarray(r.ids, np.int64)
    mask = np.zeros(len(ids), np.int64)
    for (_, s, e), t in zip(r.spans, train, strict=True):
        if t:
            mask[s:e] = 1
    if rec["truncated"]:
        ids, mask = ids[: rec["num_tokens"]], mask[: rec["num_tokens"]]
    mask[0] = 0
    return ids, mask
