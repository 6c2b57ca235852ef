"""Data contracts over a written export: what a training run relies on, checked from the files.

Dagster runs them as asset checks of `training_export`; tests run them too. Each returns a
`ContractResult` naming the file, sample or row it is about.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow.parquet as pq

from pipelines.contracts import ContractResult, run_named
from pipelines.sources import sha256_file

MAX_LISTED = 20


def _manifest(out: Path) -> dict[str, Any]:
    return orjson.loads((out / "manifest.json").read_bytes())


def export_complete(out: Path, corpus: Path | None = None) -> ContractResult:
    """The manifest exists and every file it lists is there with its sha256."""
    if not (out / "manifest.json").exists():
        return ContractResult("export_complete", False, "the manifest lists every file with its checksum",
                              {"error": f"{out / 'manifest.json'} missing: no complete export here"})
    from pipelines.export import manifest_files

    m = _manifest(out)
    bad = []
    files = list(manifest_files(m))
    for f in files:
        p = out / f["path"]
        if not p.is_file():
            bad.append(f"{f['path']}: missing")
        elif sha256_file(p) != f["sha256"]:
            bad.append(f"{f['path']}: sha256 differs from the manifest")
    return ContractResult("export_complete", not bad, "the manifest lists every file with its checksum",
                          {"files": len(files), "bad": bad[:MAX_LISTED]})


def export_masks(out: Path, corpus: Path | None = None) -> ContractResult:
    """Every packed sample: labels = input_ids where loss_mask else -100, positions restart at
    each cu_seqlens boundary, no document's first token is a target, length ≤ seq_len, counts
    match the manifest."""
    m = _manifest(out)
    seq_len = m["settings"]["seq_len"]
    bad: list[str] = []
    for split, s in m["splits"].items():
        tokens = loss = 0
        for shard in s["shards"]:
            path = shard["files"].get("parquet", [{}])[0].get("path")
            if path is None:
                continue
            t = pq.read_table(out / path, columns=["input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens"])
            cols = {c: t.column(c).combine_chunks() for c in t.column_names}
            off = cols["input_ids"].offsets.to_numpy()
            ids, lab, mask, pos = (cols[c].values.to_numpy() for c in ("input_ids", "labels", "loss_mask", "position_ids"))
            if not (np.array_equal(off, cols["labels"].offsets.to_numpy()) and np.array_equal(off, cols["loss_mask"].offsets.to_numpy())
                    and np.array_equal(off, cols["position_ids"].offsets.to_numpy())):
                bad.append(f"{path}: columns of different lengths")
                continue
            if not np.array_equal(lab, np.where(mask == 1, ids, -100)):
                row = int(np.searchsorted(off, np.flatnonzero(lab != np.where(mask == 1, ids, -100))[0], "right") - 1)
                bad.append(f"{path} sample {row}: labels disagree with loss_mask")
            for r in range(len(off) - 1):
                n = off[r + 1] - off[r]
                cu = cols["cu_seqlens"][r].values.to_numpy()
                if n > seq_len or cu[0] != 0 or cu[-1] != n or np.any(np.diff(cu) <= 0):
                    bad.append(f"{path} sample {r}: length {n} or cu_seqlens {cu.tolist()[:8]} invalid")
                    continue
                expect = np.arange(n) - np.repeat(cu[:-1], np.diff(cu))
                if not np.array_equal(pos[off[r]:off[r + 1]], expect):
                    bad.append(f"{path} sample {r}: position_ids do not restart at cu_seqlens")
                if mask[off[r] + cu[:-1]].any():
                    bad.append(f"{path} sample {r}: a document's first token is a target")
            tokens += int(len(ids))
            loss += int(mask.sum())
        if "parquet" in m["settings"]["formats"] and (tokens, loss) != (s["tokens"], s["loss_tokens"]):
            bad.append(f"{split}: {tokens} tokens / {loss} loss tokens in the shards, manifest says {s['tokens']} / {s['loss_tokens']}")
    return ContractResult("export_masks", not bad, "labels, loss masks, positions and document boundaries agree",
                          {"bad": bad[:MAX_LISTED], "problems": len(bad)})


def export_splits_disjoint(out: Path, corpus: Path | None = None) -> ContractResult:
    """No trajectory, and (with the corpus) no split group (task), is in two splits."""
    from pipelines.export import SplitConfig, group_key

    m = _manifest(out)
    where: dict[str, set[str]] = {}
    for split, s in m["splits"].items():
        for shard in s["shards"]:
            path = shard["files"].get("parquet", [{}])[0].get("path")
            if path is None:
                continue
            for ids in pq.read_table(out / path, columns=["trajectory_ids"]).column(0).to_pylist():
                for tid in ids:
                    where.setdefault(tid, set()).add(split)
    crossing = sorted(t for t, s in where.items() if len(s) > 1)
    groups_crossing: list[str] = []
    if corpus is not None and where:
        from pipelines.query import connect

        cfg = SplitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in m["settings"]["split"].items()})
        con = connect(corpus)
        cols = sorted({"trajectory_id", *cfg.group_by})
        by_group: dict[str, set[str]] = {}
        for row in con.sql(f"SELECT {', '.join(cols)} FROM trajectories").fetchall():
            d = dict(zip(cols, row, strict=True))
            if d["trajectory_id"] in where:
                by_group.setdefault(group_key(d, cfg), set()).update(where[d["trajectory_id"]])
        groups_crossing = sorted(g for g, s in by_group.items() if len(s) > 1)
    return ContractResult("export_splits_disjoint", not crossing and not groups_crossing,
                          "no trajectory and no task in two splits",
                          {"trajectories": len(where), "crossing_trajectories": crossing[:MAX_LISTED],
                           "crossing_groups": groups_crossing[:MAX_LISTED]})


def export_eval_set(out: Path, corpus: Path | None = None) -> ContractResult:
    """Every evaluation row has the AgentWorldBench fields, reads back through the importer, and
    comes from the test split."""
    from collectors.agentworldbench import AgentWorldBenchImporter
    from collectors.base import ImportContext
    from pipelines.evalset import FIELDS

    m = _manifest(out)
    test_ids: set[str] = set()
    for shard in m["splits"]["test"]["shards"]:
        path = shard["files"].get("parquet", [{}])[0].get("path")
        if path is not None:
            for ids in pq.read_table(out / path, columns=["trajectory_ids"]).column(0).to_pylist():
                test_ids.update(ids)
    imp = AgentWorldBenchImporter()
    bad: list[str] = []
    rows = 0
    for f in m["eval"]["files"]:
        for i, line in enumerate((out / f["path"]).read_bytes().splitlines()):
            rows += 1
            row = orjson.loads(line)
            where = f"{f['path']} line {i + 1}"
            if list(row) != list(FIELDS):
                bad.append(f"{where}: fields {list(row)}")
                continue
            try:
                traj = imp.convert(row, f"line:{i + 1}", ImportContext(source=f["path"], input_sha256="0" * 64))
            except Exception as e:  # noqa: BLE001 - what the importer rejects is what we report
                bad.append(f"{where}: the AgentWorldBench importer rejects it ({e})")
                continue
            if len(traj.turns) != row["turn_idx"]:
                bad.append(f"{where}: {len(traj.turns)} turns read back, turn_idx {row['turn_idx']}")
            if test_ids and row["id"] not in test_ids:
                bad.append(f"{where}: trajectory {row['id']} is not in the test split")
    return ContractResult("export_eval_set", not bad, "the eval set is AgentWorldBench JSONL from the test split",
                          {"rows": rows, "bad": bad[:MAX_LISTED]})


EXPORT_CONTRACTS: dict[str, Callable[[Path, Path | None], ContractResult]] = {
    "export_complete": export_complete,
    "export_masks": export_masks,
    "export_splits_disjoint": export_splits_disjoint,
    "export_eval_set": export_eval_set,
}


def run_export_contracts(out: Path | str, corpus: Path | str | None = None) -> list[ContractResult]:
    out = Path(out)
    if not (out / "manifest.json").exists():
        return [export_complete(out)] + [ContractResult(n, False, "needs a complete export", {"error": f"no manifest in {out}"})
                                         for n in list(EXPORT_CONTRACTS)[1:]]
    c = Path(corpus) if corpus is not None else None
    return run_named({n: (lambda o, fn=fn: fn(o, c)) for n, fn in EXPORT_CONTRACTS.items()}, out)
