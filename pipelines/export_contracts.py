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
    match the manifest. An export without Parquet: Megatron's documents (a mask per token, within
    seq_len, no first-token target), else the chat records' counts, against the manifest."""
    m = _manifest(out)
    fmt = next(f for f in MASK_CHECKS if f in m["settings"]["formats"])  # the most thorough the export has
    check = MASK_CHECKS[fmt]
    bad: list[str] = []
    for split, s in m["splits"].items():
        extra = {"drop_no_loss": m["settings"].get("drop_no_loss", True)} if fmt == "chat" else {}
        tokens, loss = check(out, s["shards"], m["settings"]["seq_len"], bad, **extra)
        if (tokens, loss) != (s["tokens"], s["loss_tokens"]):
            bad.append(f"{split}: {tokens} tokens / {loss} loss tokens in the files, manifest says "
                       f"{s['tokens']} / {s['loss_tokens']}")
    return ContractResult("export_masks", not bad, "labels, loss masks, positions and document boundaries agree",
                          {"format": fmt, "bad": bad[:MAX_LISTED], "problems": len(bad)})


def _files(shards: list[dict[str, Any]], fmt: str) -> list[str]:
    return [f["path"] for shard in shards for f in shard["files"].get(fmt, [])]


PARQUET_COLUMNS = ["input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens", "num_tokens", "num_loss_tokens",
                   "trajectory_ids", "windows"]


def _parquet_masks(out: Path, shards: list[dict[str, Any]], seq_len: int, bad: list[str]) -> tuple[int, int]:
    tokens = loss = 0
    for path in _files(shards, "parquet"):
        t = pq.read_table(out / path, columns=PARQUET_COLUMNS)
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
        num_tokens, num_loss = cols["num_tokens"].to_numpy(), cols["num_loss_tokens"].to_numpy()
        n_ids, n_windows = np.diff(cols["trajectory_ids"].offsets.to_numpy()), np.diff(cols["windows"].offsets.to_numpy())
        for r in range(len(off) - 1):
            n = off[r + 1] - off[r]
            cu = cols["cu_seqlens"][r].values.to_numpy()
            if n > seq_len or cu[0] != 0 or cu[-1] != n or np.any(np.diff(cu) <= 0):
                bad.append(f"{path} sample {r}: length {n} or cu_seqlens {cu.tolist()[:8]} invalid")
                continue
            if n_ids[r] != len(cu) - 1 or n_windows[r] != len(cu) - 1:
                bad.append(f"{path} sample {r}: {len(cu) - 1} documents by cu_seqlens, {n_ids[r]} trajectory_ids, "
                           f"{n_windows[r]} windows")
            n_loss = int(mask[off[r]:off[r + 1]].sum())
            if (num_tokens[r], num_loss[r]) != (n, n_loss):
                bad.append(f"{path} sample {r}: num_tokens {num_tokens[r]} / num_loss_tokens {num_loss[r]}, "
                           f"the sample has {n} / {n_loss}")
            expect = np.arange(n) - np.repeat(cu[:-1], np.diff(cu))
            if not np.array_equal(pos[off[r]:off[r + 1]], expect):
                bad.append(f"{path} sample {r}: position_ids do not restart at cu_seqlens")
            if mask[off[r] + cu[:-1]].any():
                bad.append(f"{path} sample {r}: a document's first token is a target")
        tokens += int(len(ids))
        loss += int(mask.sum())
    return tokens, loss


def _megatron_masks(out: Path, shards: list[dict[str, Any]], seq_len: int, bad: list[str]) -> tuple[int, int]:
    from pipelines.export_formats import read_indexed

    tokens = loss = 0
    for path in _files(shards, "megatron"):
        if not path.endswith("_loss_mask.idx"):
            continue
        prefix = path[: -len("_loss_mask.idx")]
        masks, _ = read_indexed(out / f"{prefix}_loss_mask")
        ids, _ = read_indexed(out / f"{prefix}_tokens")
        if len(ids) != len(masks):
            bad.append(f"{prefix}: {len(ids)} token documents, {len(masks)} loss-mask documents")
            continue
        for d, (i, k) in enumerate(zip(ids, masks, strict=True)):
            if len(i) != len(k) or len(i) > seq_len or not len(i) or k[0] or not set(np.unique(k).tolist()) <= {0, 1}:
                bad.append(f"{prefix} document {d}: {len(i)} tokens, {len(k)} mask values (first {k[:1].tolist()})")
            tokens += len(i)
            loss += int(k.sum())
    return tokens, loss


def _chat_counts(out: Path, shards: list[dict[str, Any]], seq_len: int, bad: list[str],
                 drop_no_loss: bool = True) -> tuple[int, int]:
    from pipelines.export_formats import read_chat

    tokens = loss = 0
    least = 1 if drop_no_loss else 0  # a document without a loss token is left out, unless told to keep it
    for path in _files(shards, "chat"):
        for r in read_chat(out / path):
            if not 0 < r["num_tokens"] <= seq_len or not least <= r["num_loss_tokens"] <= r["num_tokens"]:
                bad.append(f"{path} record {r['id']}: {r['num_tokens']} tokens, {r['num_loss_tokens']} loss tokens")
            tokens += r["num_tokens"]
            loss += r["num_loss_tokens"]
    return tokens, loss


MASK_CHECKS = {"parquet": _parquet_masks, "megatron": _megatron_masks, "chat": _chat_counts}


def _split_ids(out: Path, m: dict[str, Any]) -> dict[str, set[str]] | None:
    """The trajectory ids in each split's files (the Parquet shards', else the chat records'); None
    for an export of Megatron's files alone, which carry no ids."""
    from pipelines.export_formats import read_chat

    formats = m["settings"]["formats"]
    if "parquet" not in formats and "chat" not in formats:
        return None
    ids: dict[str, set[str]] = {}
    for split, s in m["splits"].items():
        got = ids.setdefault(split, set())
        if "parquet" in formats:
            for path in _files(s["shards"], "parquet"):
                for row in pq.read_table(out / path, columns=["trajectory_ids"]).column(0).to_pylist():
                    got.update(row)
        else:
            for path in _files(s["shards"], "chat"):
                got.update(r["trajectory_id"] for r in read_chat(out / path))
    return ids


NO_IDS = "an export of Megatron's files alone: they carry no trajectory ids (add parquet or chat to the formats)"


def export_splits_disjoint(out: Path, corpus: Path | None = None) -> ContractResult:
    """No trajectory, and (with the corpus) no split group (task), is in two splits."""

    m = _manifest(out)
    by_split = _split_ids(out, m)
    if by_split is None:
        return ContractResult("export_splits_disjoint", False, "no trajectory and no task in two splits",
                              {"not_checked": NO_IDS}, severity="warn")
    where: dict[str, set[str]] = {}
    for split, ids in by_split.items():
        for tid in ids:
            where.setdefault(tid, set()).add(split)
    crossing = sorted(t for t, s in where.items() if len(s) > 1)
    groups_crossing: list[str] = []
    if corpus is not None and where:
        by_group: dict[str, set[str]] = {}
        for tid, key in _group_keys(corpus, _split_config(m), set(where)).items():
            by_group.setdefault(key, set()).update(where[tid])
        groups_crossing = sorted(g for g, s in by_group.items() if len(s) > 1)
    return ContractResult("export_splits_disjoint", not crossing and not groups_crossing,
                          "no trajectory and no task in two splits",
                          {"trajectories": len(where), "crossing_trajectories": crossing[:MAX_LISTED],
                           "crossing_groups": groups_crossing[:MAX_LISTED]})


def export_eval_set(out: Path, corpus: Path | None = None) -> ContractResult:
    """Every evaluation row has the AgentWorldBench fields, reads back through the importer, and
    comes from the test split: its trajectory is in no training or validation file and (with the
    corpus) its task falls in the test split. A test trajectory whose documents were all left out
    (no turn with loss) is in no file, yet its eval rows are the test split's."""
    from collectors.agentworldbench import AgentWorldBenchImporter
    from collectors.base import ImportContext
    from pipelines.evalset import FIELDS

    m = _manifest(out)
    by_split = _split_ids(out, m) or {}
    elsewhere = {tid: split for split, ids in by_split.items() if split != "test" for tid in ids}
    imp = AgentWorldBenchImporter()
    bad: list[str] = []
    rows = 0
    read: dict[str, str] = {}  # trajectory id -> the first row that names it
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
            if row["id"] in elsewhere:
                bad.append(f"{where}: trajectory {row['id']} is in the {elsewhere[row['id']]} split's files")
            read.setdefault(row["id"], where)
    meta: dict[str, Any] = {"rows": rows, "bad": bad[:MAX_LISTED]}
    if corpus is not None:
        splits = _splits_of(corpus, _split_config(m), set(read))
        bad += [f"{w}: trajectory {t} is in the {splits.get(t, 'corpus: no such')} split"
                for t, w in read.items() if splits.get(t) != "test"]
        meta["bad"] = bad[:MAX_LISTED]
    elif not by_split:  # the rows are checked, their split could not be: a warning, as the splits contract's
        meta["split_not_checked"] = NO_IDS + ", and no corpus was given"
        return ContractResult("export_eval_set", False, "the eval set is AgentWorldBench JSONL from the test split", meta,
                              severity="error" if bad else "warn")
    return ContractResult("export_eval_set", not bad, "the eval set is AgentWorldBench JSONL from the test split", meta)


def _split_config(m: dict[str, Any]) -> Any:
    from pipelines.export import SplitConfig

    return SplitConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in m["settings"]["split"].items()})


def _group_keys(corpus: Path, cfg: Any, ids: set[str]) -> dict[str, str]:
    """The split group (task) of each of `ids`, from the corpus, as the export keyed it."""
    import pyarrow as pa

    from pipelines.export import group_key
    from pipelines.query import connect

    cols = sorted({"trajectory_id", *cfg.group_by})
    con = connect(corpus)
    try:
        con.register("_ids", pa.table({"trajectory_id": sorted(ids)}, schema=pa.schema([("trajectory_id", pa.string())])))
        rows = con.sql(f"SELECT {', '.join('t.' + c for c in cols)} FROM trajectories t SEMI JOIN _ids USING (trajectory_id)"
                       ).fetchall()
    finally:
        con.close()
    return {d["trajectory_id"]: group_key(d, cfg) for d in (dict(zip(cols, r, strict=True)) for r in rows)}


def _splits_of(corpus: Path, cfg: Any, ids: set[str]) -> dict[str, str]:
    """The split of each of `ids` by the export's settings (its task's, as the export assigned it)."""
    from pipelines.export import split_of

    return {t: split_of(k, cfg) for t, k in _group_keys(corpus, cfg, ids).items()}


def _parquet_documents(out: Path, paths: list[str]) -> list[tuple[str, int, np.ndarray, np.ndarray]]:
    """(trajectory id, window, ids, mask) of each document of the samples, in order."""
    docs = []
    for path in paths:
        t = pq.read_table(out / path, columns=["input_ids", "loss_mask", "cu_seqlens", "trajectory_ids", "windows"])
        cols = {c: t.column(c).combine_chunks() for c in t.column_names}
        off = cols["input_ids"].offsets.to_numpy()
        ids, mask = cols["input_ids"].values.to_numpy(), cols["loss_mask"].values.to_numpy()
        for base, cu, tids, wins in zip(off, *(cols[c].to_pylist() for c in ("cu_seqlens", "trajectory_ids", "windows")),
                                        strict=False):
            docs += [(tid, w, ids[base + a:base + z], mask[base + a:base + z])
                     for tid, w, a, z in zip(tids, wins, cu, cu[1:], strict=False)]
    return docs


def _shard_disagreements(out: Path, files: dict[str, list[dict[str, Any]]], where: str) -> list[str]:
    """How one shard's formats disagree: Megatron's documents are the Parquet documents' tokens and
    masks, the chat records their ids, windows and counts (in order); without Parquet, the chat
    records' counts are Megatron's."""
    from pipelines.export_formats import read_chat, read_indexed

    paths = {f: [x["path"] for x in xs] for f, xs in files.items()}
    pq_docs = _parquet_documents(out, paths["parquet"]) if "parquet" in paths else None
    mega = None
    if "megatron" in paths:
        mega = []
        for p in paths["megatron"]:
            if p.endswith("_tokens.idx"):
                prefix = out / p[: -len("_tokens.idx")]
                ids, _ = read_indexed(prefix.with_name(prefix.name + "_tokens"))
                masks, _ = read_indexed(prefix.with_name(prefix.name + "_loss_mask"))
                mega += list(zip(ids, masks, strict=False))
    chat = [r for p in paths.get("chat", []) for r in read_chat(out / p)] if "chat" in paths else None
    bad: list[str] = []

    def count(name: str, n: int, want: int) -> bool:
        if n != want:
            bad.append(f"{where}: {n} {name} documents, {want} {'Parquet' if pq_docs is not None else 'Megatron'} ones")
        return n == want

    if pq_docs is not None and mega is not None and count("Megatron", len(mega), len(pq_docs)):
        for d, ((tid, w, ids, mask), (mi, mm)) in enumerate(zip(pq_docs, mega, strict=True)):
            if not (np.array_equal(ids, mi.astype(np.int64)) and np.array_equal(mask, mm.astype(np.int64))):
                bad.append(f"{where} document {d} ({tid} window {w}): Megatron's tokens or loss mask differ from Parquet's")
    if chat is not None:
        if pq_docs is not None:
            want = [(tid, w, len(ids), int(mask.sum())) for tid, w, ids, mask in pq_docs]
            got = [(r["trajectory_id"], r["window"], r["num_tokens"], r["num_loss_tokens"]) for r in chat]
        elif mega is not None:
            want = [(len(i), int(m.sum())) for i, m in mega]
            got = [(r["num_tokens"], r["num_loss_tokens"]) for r in chat]
        else:
            return bad
        if count("chat", len(got), len(want)):
            bad += [f"{where} document {d}: chat record {g}, expected {x}" for d, (g, x) in enumerate(zip(got, want, strict=True))
                    if g != x]
    return bad


def export_formats_agree(out: Path, corpus: Path | None = None) -> ContractResult:
    """Each shard's formats hold the same documents: a trainer reading Megatron's or the chat
    form's files gets what the Parquet samples (which `export_masks` checks) hold."""
    m = _manifest(out)
    formats = m["settings"]["formats"]
    bad: list[str] = []
    shards = 0
    if len([f for f in formats if f in MASK_CHECKS]) > 1:
        for split, s in m["splits"].items():
            for i, shard in enumerate(s["shards"]):
                shards += 1
                bad += _shard_disagreements(out, shard["files"], f"{split} shard {i}")
    return ContractResult("export_formats_agree", not bad, "every format holds the same documents",
                          {"formats": formats, "shards": shards, "bad": bad[:MAX_LISTED], "problems": len(bad)})


EXPORT_CONTRACTS: dict[str, Callable[[Path, Path | None], ContractResult]] = {
    "export_complete": export_complete,
    "export_masks": export_masks,
    "export_formats_agree": export_formats_agree,
    "export_splits_disjoint": export_splits_disjoint,
    "export_eval_set": export_eval_set,
}


def other_corpus(out: Path | str, corpus: Path | str) -> str | None:
    """Why the export in `out` is not of `corpus` (None when it is, or cannot be told): the committed batches it
    was made from are not the first of this corpus's (batch ids begin with their time; a corpus only grows).
    Its splits then checked out against trajectories of another corpus and the eval set failed obscurely."""
    from pipelines.side import batches_digest, committed_batch_ids
    from pipelines.store import Corpus

    m = orjson.loads((Path(out) / "manifest.json").read_bytes()) if (Path(out) / "manifest.json").is_file() else {}
    state = (m.get("corpus") or {}).get("state") or {}
    n, digest = state.get("batches"), state.get("batches_digest")
    if not isinstance(n, int) or not isinstance(digest, str):
        return None
    ids = committed_batch_ids(Corpus(corpus).manifest())
    if len(ids) >= n and batches_digest(ids[:n]) == digest:
        return None
    return (f"{out} was exported from {(m.get('corpus') or {}).get('path')} ({n} batch{'' if n == 1 else 'es'}), not from the corpus "
            f"{corpus} as it is or was; check it with that corpus")


def run_export_contracts(out: Path | str, corpus: Path | str | None = None) -> list[ContractResult]:
    out = Path(out)
    if not (out / "manifest.json").exists():
        return [export_complete(out)] + [ContractResult(n, False, "needs a complete export", {"error": f"no manifest in {out}"})
                                         for n in list(EXPORT_CONTRACTS)[1:]]
    c = Path(corpus) if corpus is not None else None
    return run_named({n: (lambda o, fn=fn: fn(o, c)) for n, fn in EXPORT_CONTRACTS.items()}, out)
