"""The export: rendering parity with `pipelines.render`, mask bits through every format, splits,
mixture, side tables, redaction, determinism, atomicity, the eval set and the reader."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import numpy as np
import orjson
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from collectors.agentworldbench import AgentWorldBenchImporter
from collectors.base import ImportContext
from pipelines import export as ex
from pipelines import export_formats as fmt
from pipelines.export import (
    SPLITS,
    DocumentBuilder,
    _trajectory_reader,
    _Work,
    export,
    group_key,
    split_of,
)
from pipelines.pack import best_fit_decreasing, pack, windows
from pipelines.query import connect, run_query, views
from pipelines.redact import Redactor
from pipelines.render import conversation, messages, render
from pipelines.side import write_side_table
from pipelines.store import Corpus
from schemas.tables import _f, side_table_schema
from tests.pipelines.export_support import (
    AWS_KEY,
    EMAIL,
    SEQ_LEN,
    build_corpus,
    documents,
    parquet_rows,
    render_record,
    small_config,
    tokenizer,
)


@pytest.fixture(scope="module")
def tok() -> ex.ExportTokenizer:
    return tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("export"))


@pytest.fixture(scope="module")
def exported(corpus: Path, tok: ex.ExportTokenizer, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ex.ExportSummary]:
    out = tmp_path_factory.mktemp("out") / "export"
    return out, export(corpus, out, small_config(), tokenizer=tok, progress=False)


def _manifest(out: Path) -> dict:
    return orjson.loads((out / "manifest.json").read_bytes())


# --- packing -----------------------------------------------------------------------------------


def test_best_fit_decreasing_is_exact() -> None:
    # sorted: 7(0) 6(4) 5(2) 4(5) 3(1) 2(3) 2(6); capacity 10
    assert best_fit_decreasing([7, 3, 5, 2, 6, 4, 2], 10) == [[0, 1], [4, 5], [2, 3, 6]]
    with pytest.raises(ValueError, match="more than the sequence length"):
        best_fit_decreasing([11], 10)


def test_windows_carry_history_and_cover_every_group_once() -> None:
    # system 10 tokens, groups of 30 tokens, seq_len 100: room 90, history ≤ 45 → one group
    plan = windows([40, 70, 100, 130, 160], 10, 100, 0.5)
    assert plan == [(0, 0, 3), (2, 3, 5)]
    # a group longer than the room gets a window of its own, without history
    assert windows([40, 300, 330], 10, 100, 0.5) == [(0, 0, 1), (1, 1, 2), (2, 2, 3)]  # 260 > the history budget


def test_pack_arrays_restart_positions_and_clear_first_token() -> None:
    a = ex.Document(np.array([5, 6, 7], np.int32), np.array([1, 0, 1], np.uint8), "a")
    b = ex.Document(np.array([8, 9], np.int32), np.array([1, 1], np.uint8), "b")
    assert (a.loss_tokens, b.loss_tokens) == (2, 2)  # counted (and kept) before packing
    shared = ex.Document(a.ids, a.mask, "a", copy=1)  # a mixture copy: the same mask array
    assert shared.loss_tokens == 2
    (s, t) = pack([a, b, shared], 5)
    assert (a.loss_tokens, b.loss_tokens, shared.loss_tokens) == (1, 1, 1)  # counts follow the cleared first token
    rows = fmt.samples_table([s, t]).to_pylist()
    assert rows[0]["input_ids"] == [5, 6, 7, 8, 9]
    assert rows[0]["loss_mask"] == [0, 0, 1, 0, 1]
    assert rows[0]["labels"] == [-100, -100, 7, -100, 9]
    assert rows[0]["position_ids"] == [0, 1, 2, 0, 1]
    assert rows[0]["cu_seqlens"] == [0, 3, 5]
    assert (rows[0]["num_tokens"], rows[0]["num_loss_tokens"], rows[0]["trajectory_ids"], rows[0]["windows"]) == \
        (5, 2, ["a", "b"], [0, 0])
    assert rows[1] == {"input_ids": [5, 6, 7], "labels": [-100, -100, 7], "loss_mask": [0, 0, 1], "position_ids": [0, 1, 2],
                       "cu_seqlens": [0, 3], "num_tokens": 3, "num_loss_tokens": 1, "trajectory_ids": ["a"], "windows": [0]}
    assert fmt.samples_table([]).num_rows == 0


# --- rendering and masks -------------------------------------------------------------------------


def test_batch_rendering_equals_render_py(corpus: Path, tok: ex.ExportTokenizer) -> None:
    """The export's batch encoder gives the token ids and observation spans of `render.render`
    (the Hugging Face tokenizer call), for every trajectory that fits in one document."""
    cfg = small_config(seq_len=1 << 20)
    con = connect(corpus)
    builder = DocumentBuilder(tok, cfg)
    checked = 0
    for batch in _trajectory_reader(con, views(con), 64):
        rows = batch.to_pylist()
        work = []
        for row in rows:
            conv = conversation(row, row["turns"])
            if conv.groups:
                work.append(_Work(row, conv, [True] * len(conv.groups), "train", 1, ""))
        for w, (doc,) in zip(work, builder.build(work), strict=True):
            r = render(tok.hf, messages(w.conv), [g.turn_index for g in w.conv.groups])
            assert doc.ids.tolist() == r.ids.tolist(), w.traj["trajectory_id"]
            expect = np.zeros(len(r.ids), np.uint8)
            for _, s, e in r.spans:
                expect[s:e] = 1
            expect[0] = 0
            assert doc.mask.tolist() == expect.tolist(), w.traj["trajectory_id"]
            checked += 1
    assert checked == 138


@pytest.mark.parametrize("path", ["byte offsets", "char_to_token"])
def test_segment_encoder_equals_whole_text_encoding(tok: ex.ExportTokenizer, path: str) -> None:
    """`ExportTokenizer.encode` (distinct segments; spans found in byte offsets from the ids, or
    with `char_to_token` for tokenizers that are not byte-level) gives the ids and token spans of
    encoding each whole text with offsets, on texts built to hit the edges: multi-byte characters
    split over byte tokens, whitespace runs, added tokens inside contents, spans that are empty,
    start or end at an added token, or at the end of the text, characters whose bytes the model
    drops."""
    rng = np.random.default_rng(7)
    atoms = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "assistant\n", "user\n", "\n", "\n\n", "  ", " ", "\t",
             "é", "中文", "🙂", "👩\u200d💻", "e\u0301", "ls -la", "$ ", "exit 0", "Hello", " world", "<", "|", "<|im",
             "\x00", "AKIA", "0123456789", "x\n", "\ny", " \n", "\n ", "}\n{", "\r\n", "'s\n", "\n'll", "\u00a0\n",
             "\n\u2028", "\x04", "\U00040001"]  # the last two: bytes SmolLM2 has no token for
    texts, spans = [], []
    for _ in range(400):
        text = "".join(atoms[i] for i in rng.integers(0, len(atoms), rng.integers(0, 30)))
        cuts = sorted(int(x) for x in rng.integers(0, len(text) + 1, 2 * int(rng.integers(0, 4))))
        texts.append(text)
        spans.append([(cuts[k], cuts[k + 1]) for k in range(0, len(cuts), 2)])
    fresh = ex.ExportTokenizer(tok.hf, "smollm2")
    assert fresh._split is not None  # the segmenting path is what this test is about
    assert fresh.token_bytes is not None  # SmolLM2 is byte-level BPE
    if path == "char_to_token":
        fresh.token_bytes = None
    got = fresh.encode(texts, spans) + fresh.encode(texts, spans)  # the second time from the cache
    for (ids, ts), text, cs in zip(got, texts + texts, spans + spans, strict=True):
        e = tok.backend.encode(text, add_special_tokens=False)
        assert ids.tolist() == e.ids, repr(text)
        want = ex.token_spans(np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2), cs)
        assert ts.tolist() == want.tolist(), (repr(text), cs)
        assert len(e.ids) <= fresh.max_tokens(text)


def test_special_tokens_in_text_encoded_as_text_when_the_tokenizer_says_so(tok: ex.ExportTokenizer) -> None:
    """With `encode_special_tokens` (Hugging Face's `split_special_tokens`) a special token inside a
    text is encoded as its characters: the encoder must not cut the text there (found in review)."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tok.backend.to_str())
    backend.encode_special_tokens = True
    et = ex.ExportTokenizer(tok.hf, "smollm2")
    et.backend = backend
    et._split = et._segmenter()
    text = "x<|im_end|>y\nz"
    want = backend.encode(text, add_special_tokens=False).ids
    assert len(want) > 3 and et.encode([text], [[(0, 1)]])[0][0].tolist() == want


def test_a_directory_without_a_corpus_is_named(tmp_path: Path, tok: ex.ExportTokenizer) -> None:
    from pipelines.store import CorpusError

    for call in (lambda: ex.export(tmp_path, tmp_path / "out", small_config(), tokenizer=tok, progress=False),
                 lambda: connect(tmp_path)):
        with pytest.raises(CorpusError, match=re.escape(f"{tmp_path} is not a corpus (no manifest.json)")):
            call()
    assert not (tmp_path / "out").exists()


def test_vocabulary_read_from_the_tokenizer_json(tok: ex.ExportTokenizer) -> None:
    """The byte table's vocabulary is parsed out of the serialized tokenizer, or, when that text
    is not laid out as expected, asked of the backend: the same either way."""
    want = tok.backend.get_vocab(with_added_tokens=False)
    fresh = ex.ExportTokenizer(tok.hf, "smollm2")
    assert fresh._vocab() == want
    fresh.tokenizer_json = fresh.tokenizer_json.replace('},"merges":', '}, "merges":')  # another layout
    assert fresh._vocab() == want
    fresh.tokenizer_json = '{"model": {"vocab": {"a": 0}, "merges": []}}'  # a wrong one
    assert fresh._vocab() == want


def test_lines_cut_only_where_the_pre_tokenizer_splits(tok: ex.ExportTokenizer) -> None:
    """Segments are cut after a newline only between two visible ASCII characters, and the parts
    encode to the segment's tokens (hand-made edges, then 3,000 random texts of line-ish atoms)."""
    assert ex._cut_lines(["a\nb\n\nc \nd\ne\n", "<|im_end|>", "\nx\ny"]) == [
        "a\n", "b\n\nc \nd\n", "e\n", "<|im_end|>", "\nx\n", "y"]
    assert ex._cut_lines(["é\nb\nü", "<|im_start|>", "a\n\tb\n"]) == ["é\nb\nü", "<|im_start|>", "a\n\tb\n"]
    fresh = ex.ExportTokenizer(tok.hf, "smollm2")
    assert fresh.cuts_lines  # SmolLM2: byte-level BPE with the GPT-2 pattern
    rng = np.random.default_rng(11)
    atoms = ["\n", "\n\n", " ", "  ", "\t", "\r", "a", "Z", "9", "'", "'s", "}", "$", "~", "!", "é", "\u00a0", "\u2028",
             "\u3000", "中", "\x1c", "ls", " -la", "def f():", "    return 1"]
    for _ in range(3000):
        seg = "".join(atoms[i] for i in rng.integers(0, len(atoms), rng.integers(1, 40)))
        parts = ex._cut_lines([seg])
        assert "".join(parts) == seg
        whole = tok.backend.encode(seg, add_special_tokens=False).ids
        assert [i for p in parts for i in tok.backend.encode(p, add_special_tokens=False).ids] == whole, repr(seg)


def test_loss_only_on_observations_and_end_of_message(exported: tuple[Path, ex.ExportSummary], tok: ex.ExportTokenizer) -> None:
    """Every trained span starts right after an assistant header and ends on `<|im_end|>`."""
    out, _ = exported
    im_end = tok.backend.token_to_id("<|im_end|>")
    header = tok.backend.encode("<|im_start|>assistant\n", add_special_tokens=False).ids
    for _, ids, mask in documents(out, "train"):
        on = np.flatnonzero(mask)
        starts = on[np.r_[True, np.diff(on) > 1]]
        for s in starts:
            # right after the header; the header's newline may share a token with a content that
            # starts with whitespace, and then that token is trained (render.render's span rule)
            assert ids[s - len(header):s].tolist() == header or ids[s - len(header) + 1:s].tolist() == header[:-1]
        ends = on[np.r_[np.diff(on) > 1, True]]
        # a span ends on <|im_end|>, unless the window cut the observation at seq_len
        assert all(ids[e] == im_end or e == len(ids) - 1 for e in ends)


def test_sample_invariants(exported: tuple[Path, ex.ExportSummary]) -> None:
    out, summary = exported
    m = _manifest(out)
    for split in SPLITS:
        rows = parquet_rows(out, split)
        assert len(rows) == m["splits"][split]["samples"] == summary.splits[split].samples
        for r in rows:
            ids, mask, labels, pos, cu = (np.array(r[k]) for k in ("input_ids", "loss_mask", "labels", "position_ids", "cu_seqlens"))
            assert len(ids) == r["num_tokens"] <= SEQ_LEN
            assert labels.tolist() == np.where(mask == 1, ids, -100).tolist()
            assert cu[0] == 0 and cu[-1] == len(ids) and len(cu) == len(r["trajectory_ids"]) + 1
            expect_pos = np.concatenate([np.arange(cu[i + 1] - cu[i]) for i in range(len(cu) - 1)])
            assert pos.tolist() == expect_pos.tolist()
            assert mask[cu[:-1]].sum() == 0  # no document's first token is a target
            assert int(mask.sum()) == r["num_loss_tokens"]
        assert sum(r["num_tokens"] for r in rows) == m["splits"][split]["tokens"]
        assert sum(r["num_loss_tokens"] for r in rows) == m["splits"][split]["loss_tokens"]


def test_every_mask_bit_round_trips_through_each_format(exported: tuple[Path, ex.ExportSummary], tok: ex.ExportTokenizer) -> None:
    out, _ = exported
    m = _manifest(out)
    for split in SPLITS:
        docs = documents(out, split)
        chat = [rec for shard in m["splits"][split]["shards"] for rec in fmt.read_chat(out / shard["files"]["chat"][0]["path"])]
        mega_ids, mega_mask = [], []
        for shard in m["splits"][split]["shards"]:
            prefix = out / shard["files"]["megatron"][0]["path"].removesuffix(".bin")
            seqs, doc_idx = fmt.read_indexed(prefix)
            assert doc_idx.tolist() == list(range(len(seqs) + 1))
            mega_ids += seqs
            masks, _ = fmt.read_indexed(Path(str(prefix).replace("_tokens", "_loss_mask")))
            mega_mask += masks
        assert len(docs) == len(chat) == len(mega_ids) == len(mega_mask) == m["splits"][split]["documents"]
        for (tid, ids, mask), rec, mi, mm in zip(docs, chat, mega_ids, mega_mask, strict=True):
            assert rec["trajectory_id"] == tid
            cids, cmask = render_record(tok, rec)
            assert cids.tolist() == ids.tolist() and cmask.tolist() == mask.tolist()
            assert mi.astype(np.int64).tolist() == ids.tolist() and mm.astype(np.int64).tolist() == mask.tolist()
    # the token dtype follows the vocabulary (49,152 ids: uint16)
    assert (out / m["splits"]["train"]["shards"][0]["files"]["megatron"][1]["path"]).read_bytes()[17] == 8


def test_parquet_readers_agree(exported: tuple[Path, ex.ExportSummary]) -> None:
    """pyarrow, Polars and DuckDB read the same bits from the shards."""
    out, _ = exported
    glob = str(out / "parquet" / "train" / "*.parquet")
    arrow = pa.concat_tables([pq.read_table(p) for p in sorted((out / "parquet" / "train").glob("*.parquet"))])
    polars = pl.concat([pl.read_parquet(p) for p in sorted((out / "parquet" / "train").glob("*.parquet"))])
    duck = duckdb.sql(f"SELECT * FROM read_parquet('{glob}', filename=true) ORDER BY filename, file_row_number").arrow().read_all() \
        if False else duckdb.sql(f"SELECT input_ids, loss_mask, labels, position_ids FROM read_parquet('{glob}', file_row_number=true, filename=true) ORDER BY filename, file_row_number").fetchall()
    assert polars["loss_mask"].to_list() == arrow["loss_mask"].to_pylist() == [list(r[1]) for r in duck]
    assert polars["input_ids"].to_list() == arrow["input_ids"].to_pylist() == [list(r[0]) for r in duck]
    assert [list(r[2]) for r in duck] == arrow["labels"].to_pylist()


def _datasets_python() -> list[str] | None:
    """A Python with Hugging Face `datasets`: this one, or a side venv (build/venv-datasets) made
    on first use from PyPI, so the check runs even where the project's venv lacks it."""
    try:
        import datasets  # noqa: F401

        return [sys.executable]
    except ImportError:
        pass
    venv = Path(__file__).resolve().parents[2] / "build" / "venv-datasets"
    py = venv / "bin" / "python"
    if not py.exists():
        made = subprocess.run(f"python3 -m venv {venv} && {venv}/bin/pip install -q datasets==5.2.0", shell=True,
                              capture_output=True, text=True, timeout=600)
        if made.returncode != 0:
            return None
    return [str(py)]


def test_datasets_load_dataset_reads_the_shards(exported: tuple[Path, ex.ExportSummary]) -> None:
    out, _ = exported
    py = _datasets_python()
    if py is None:
        pytest.fail("Hugging Face `datasets` is needed for this check: .venv/bin/pip install datasets==5.2.0 "
                    "(it fits the project's pins), or python3 -m venv build/venv-datasets && "
                    "build/venv-datasets/bin/pip install datasets==5.2.0")
    code = (
        "import sys, json, datasets\n"
        "d = datasets.load_dataset('parquet', data_files={'train': sys.argv[1] + '/parquet/train/*.parquet'}, "
        "split='train', cache_dir=sys.argv[2])\n"
        "print(json.dumps({'rows': len(d), 'mask': sum(sum(x) for x in d['loss_mask']), "
        "'first': d[0]['input_ids'][:8], 'cols': d.column_names}))\n"
    )
    res = subprocess.run([*py, "-c", code, str(out), str(out.parent / "hf-cache")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    got = orjson.loads(res.stdout.strip().splitlines()[-1])
    rows = parquet_rows(out, "train")
    assert got["rows"] == len(rows)
    assert got["mask"] == sum(r["num_loss_tokens"] for r in rows)
    assert got["first"] == rows[0]["input_ids"][:8]
    assert got["cols"][:5] == ["input_ids", "labels", "loss_mask", "position_ids", "cu_seqlens"]


# --- splits, mixture, side tables ----------------------------------------------------------------


def test_no_group_key_crosses_splits(corpus: Path, exported: tuple[Path, ex.ExportSummary]) -> None:
    out, summary = exported
    cfg = small_config()
    trajs = {r[0]: {"trajectory_id": r[0], "task": r[1], "source": r[2]}
             for r in run_query(corpus, "SELECT trajectory_id, task, source FROM trajectories")[1]}
    where: dict[str, set[str]] = defaultdict(set)
    by_task: dict[str, set[str]] = defaultdict(set)
    for split in SPLITS:
        for tid, _, _ in documents(out, split):
            where[group_key(trajs[tid], cfg.split)].add(split)
            if trajs[tid]["task"]:
                by_task[" ".join(trajs[tid]["task"].split()).lower()].add(split)
    assert all(len(s) == 1 for s in where.values())
    assert all(len(s) == 1 for s in by_task.values())
    # the assignment is the documented hash, computed here independently
    for key, (split,) in where.items():
        u = int.from_bytes(hashlib.sha256(f"{cfg.split.salt}\x1f{key}".encode()).digest()[:8], "big") / 2**64
        assert split == ("test" if u < 0.2 else "validation" if u < 0.3 else "train")
    # every group of the corpus is somewhere (no trajectory without env turns here)
    assert len(where) == len({group_key(t, cfg.split) for t in trajs.values()}) == 76
    assert {s: summary.splits[s].trajectories for s in SPLITS} == {"train": 101, "validation": 14, "test": 23}
    # each observation is trained once, whatever the windows: a window's context turns carry no loss (loss on
    # them trained every context turn again: +6.5% loss tokens). No side tables here, so every env turn with
    # an observation is trained, in the split its trajectory's group hashes to (above)
    observed = run_query(corpus, "SELECT trajectory_id, count(*) FROM turns WHERE kind = 'env' AND observation IS NOT NULL "
                                 "GROUP BY 1")[1]
    want: Counter[str] = Counter()
    for tid, n in observed:
        (split,) = where[group_key(trajs[tid], cfg.split)]
        want[split] += n
    assert {s: summary.splits[s].loss_turns for s in SPLITS} == dict(want) == {"train": 587, "validation": 84, "test": 116}


def test_split_of_is_stable() -> None:
    cfg = ex.SplitConfig(validation=0.1, test=0.2)
    assert [split_of(f"task:{i}", cfg) for i in range(8)] == [split_of(f"task:{i}", cfg) for i in range(8)]
    assert group_key({"trajectory_id": "t", "task": "  Count  FILES ", "source": "x"}, cfg) == "task:count files"
    assert group_key({"trajectory_id": "t", "task": None, "source": "x.cast"}, cfg) == "source:x.cast"


def test_mixture_weights(corpus: Path, tok: ex.ExportTokenizer, exported: tuple[Path, ex.ExportSummary], tmp_path: Path) -> None:
    out0, s0 = exported
    s = export(corpus, tmp_path / "mix", small_config(domain_weights=(("mcp", 0.0), ("terminal", 2.0)),
                                                        source_weights=(("agentworldbench", 0.5),)),
               tokenizer=tok, progress=False)
    base = s0.mix["train"]["source_format"]
    mixed = s.mix["train"]["source_format"]
    assert (mixed["tau-bench"]["documents"], mixed["tau-bench"]["trajectories"]) == (0, 0)  # mcp × 0 → dropped
    # the natural mix is one copy of everything, whatever the weights (a copy-0 count missed the dropped)
    for axis in ("domain", "source_format"):
        assert {k: v["natural_tokens"] for k, v in s.mix["train"][axis].items()} == {
            k: v["tokens"] for k, v in s0.mix["train"][axis].items()} == {
            k: v["natural_tokens"] for k, v in s0.mix["train"][axis].items()}
    assert mixed["intercode"]["documents"] == 2 * base["intercode"]["documents"]
    assert mixed["intercode"]["tokens"] == 2 * base["intercode"]["tokens"]
    # agentworldbench train rows: terminal (2) × 0.5 = 1 copy each; mcp rows × 0 → none
    assert mixed["agentworldbench"]["tokens"] == base["agentworldbench"]["tokens"] - _tokens_of(out0, "mcp", "agentworldbench")
    # validation and test keep the natural mix
    assert s.mix["test"] == s0.mix["test"] and s.mix["validation"] == s0.mix["validation"]
    m = _manifest(tmp_path / "mix")
    assert m["mix"]["train"]["domain"]["mcp"]["tokens"] == 0 < m["mix"]["train"]["domain"]["mcp"]["natural_tokens"]
    assert sum(v["tokens"] for v in m["mix"]["train"]["domain"].values()) == s.splits["train"].tokens
    # the android row (weight 0.5) is kept or not by its seeded draw, the same in every run
    android = m["mix"]["train"]["domain"].get("android", {"documents": 0})["documents"]
    (tid,) = set(_ids_of(out0, "android"))
    copies = 1 if ex._hash_unit("0", "mix", tid) < 0.5 else 0
    assert android == copies * s0.mix["train"]["domain"]["android"]["documents"] == 2


def _ids_of(out: Path, domain: str) -> list[str]:
    m = _manifest(out)
    return [rec["trajectory_id"] for shard in m["splits"]["train"]["shards"]
            for rec in fmt.read_chat(out / shard["files"]["chat"][0]["path"]) if rec["domain"] == domain]


def _tokens_of(out: Path, domain: str, source_format: str) -> int:
    m = _manifest(out)
    n = 0
    for shard in m["splits"]["train"]["shards"]:
        for rec in fmt.read_chat(out / shard["files"]["chat"][0]["path"]):
            if rec["domain"] == domain and rec["source_format"] == source_format:
                n += rec["num_tokens"]
    return n


def test_side_tables_decide_what_is_trained(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """cleaning drops a trajectory and a turn, dedup drops a duplicate and gives a shared prefix
    to another trajectory, scoring masks a turn: each shows up exactly in the export."""
    c = tmp_path / "corpus"
    shutil.copytree(corpus, c)
    cc = Corpus(c)
    rows = run_query(c, """SELECT trajectory_id, list(turn_index ORDER BY turn_index) FROM turns
                           WHERE kind = 'env' AND observation IS NOT NULL AND domain = 'terminal'
                           GROUP BY 1 HAVING count(*) >= 3 ORDER BY 1 LIMIT 5""")[1]
    (t_drop, _), (t_dup, _), (t_turn, turns_turn), (t_score, turns_score), (t_prefix, turns_prefix) = rows
    key = [("trajectory_id", pa.string()), ("turn_index", pa.int32())]
    write_side_table(cc, "cleaning", pa.table({"trajectory_id": [t_drop, t_turn], "turn_index": pa.array([None, turns_turn[1]], pa.int32()),
                                              "reason": ["too_few_turns", "retry_cycle"]}),
                     side_table_schema([_f("reason", pa.string(), "r", False)]), "test", "fp-clean", {})
    write_side_table(cc, "duplicates", pa.table({"trajectory_id": [t_score, t_dup], "turn_index": pa.array([None, None], pa.int32()),
                                                "cluster_id": [t_score, t_score], "is_representative": [True, False],
                                                "kind": ["exact", "exact"], "representative_id": [t_score, t_score]}),
                     side_table_schema([_f("cluster_id", pa.string(), "c", False), _f("is_representative", pa.bool_(), "r", False),
                                        _f("kind", pa.string(), "k", False), _f("representative_id", pa.string(), "r", False)]),
                     "test", "fp-dup", {})
    # the prefix's owner (t_score, in the same split: every trajectory is in train here) trains it
    write_side_table(cc, "shared_prefixes", pa.table({"trajectory_id": [t_prefix, t_score],
                                                     "turn_index": pa.array([turns_prefix[0], turns_score[0]], pa.int32()),
                                                     "prefix_hash": ["p1", "p1"], "counts_for_training": [False, True]}),
                     side_table_schema([_f("prefix_hash", pa.string(), "p", False), _f("counts_for_training", pa.bool_(), "c", False)]),
                     "test", "fp-prefix", {})
    all_turns = run_query(c, "SELECT trajectory_id, turn_index FROM turns ORDER BY ALL")[1]
    masked = (t_score, turns_score[2])
    scores = pa.table({"trajectory_id": [t for t, _ in all_turns], "turn_index": pa.array([i for _, i in all_turns], pa.int32()),
                       "loss_mask": [(t, i) != masked for t, i in all_turns]})
    write_side_table(cc, "turn_scores", scores, pa.schema([pa.field(n, t) for n, t in key] + [pa.field("loss_mask", pa.bool_())]),
                     "test", "fp-score", {})
    s = export(c, tmp_path / "out", small_config(seq_len=1 << 16, split=ex.SplitConfig(validation=0, test=0)), tokenizer=tok,
               progress=False)
    assert (s.dropped_by_cleaning, s.duplicates, s.masked_by_score, s.shared_prefix_turns, s.unscored_turns) == (1, 1, 1, 1, 0)
    assert s.tables_used == ["cleaning", "duplicates", "shared_prefixes", "turn_scores"]
    recs = {}
    for split in SPLITS:
        for shard in _manifest(tmp_path / "out")["splits"][split]["shards"]:
            for rec in fmt.read_chat(tmp_path / "out" / shard["files"]["chat"][0]["path"]):
                recs[rec["trajectory_id"]] = rec
    assert t_drop not in recs and t_dup not in recs
    con = connect(c)

    def observations(tid: str) -> list[str]:
        return [r[0] for r in con.sql(f"SELECT observation FROM turns WHERE trajectory_id = '{tid}' AND kind = 'env' "
                                      "AND observation IS NOT NULL ORDER BY turn_index").fetchall()]

    def trained(tid: str) -> list[bool]:
        return [m["train"] for m in recs[tid]["messages"] if m["role"] == "assistant"]

    # the dropped turn is gone from the rendering (one assistant message fewer), the rest trained
    assert len(trained(t_turn)) == len(observations(t_turn)) - 1 and all(trained(t_turn))
    assert trained(t_score) == [i != 2 for i in range(len(observations(t_score)))]
    assert trained(t_prefix) == [i != 0 for i in range(len(observations(t_prefix)))]
    m = _manifest(tmp_path / "out")
    assert m["corpus"]["side_tables"]["turn_scores"]["fingerprint"] == "fp-score"


def test_redaction_is_applied_to_everything_written(exported: tuple[Path, ex.ExportSummary], tok: ex.ExportTokenizer) -> None:
    out, summary = exported
    assert summary.redactions["aws_access_key"] == 1
    texts = []
    for split in SPLITS:
        for _, ids, _ in documents(out, split):
            texts.append(tok.backend.decode(ids.tolist(), skip_special_tokens=False))
    blob = "\n".join(texts)
    for f in sorted(out.rglob("*.jsonl*")):
        blob += fmt.read_chat(f).__repr__() if f.suffix == ".zst" else f.read_text()
    assert AWS_KEY not in blob and EMAIL not in blob
    assert not re.search(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b", blob.replace("<PII:email>", ""))
    assert "<SECRET:aws_access_key>" in blob and "<PII:email>" in blob


def _chat_line(*calls: tuple[str, str]) -> bytes:
    """One generic-chat trajectory: bash calls and their outputs (clean keeps two or more)."""
    msgs: list[dict] = [{"role": "user", "content": "look around"}]
    for i, (command, output) in enumerate(calls):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function", "function": {
            "name": "bash", "arguments": orjson.dumps({"command": command}).decode()}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": output})
    return orjson.dumps({"messages": msgs}) + b"\n"


def _chat_blob(out: Path) -> bytes:
    import zstandard

    return b"".join(zstandard.ZstdDecompressor().decompressobj().decompress(p.read_bytes())
                    for p in sorted((out / "chat").rglob("*.zst")))


# secrets in forms a hand-written pre-filter once missed (a domain label starting with a digit, `private-key`)
TRICKY = {"email": "ops.lead@vip.163.com", "config_secret": "zq8Xw3Lm9Pt2Rv7Y"}


def test_redaction_scan_stands_in_for_scanning_every_text(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """After `clean`, export redacts only the texts clean's scan flagged, with a byte-identical
    result; once the corpus changes (a new batch) or the settings differ, it scans everything."""
    from pipelines.clean import clean
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.redact import RedactConfig

    c = tmp_path / "corpus"
    shutil.copytree(corpus, c)
    tricky = tmp_path / "tricky.jsonl"
    tricky.write_bytes(_chat_line(("git log -1 --format=%ae", TRICKY["email"]),
                                  ("cat deploy.yaml", f"private-key: {TRICKY['config_secret']}")))
    ingest([tricky], c, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    clean(c, progress=False, echo=lambda m: None)
    assert ex.scan_usable(Corpus(c), RedactConfig())
    assert not ex.scan_usable(Corpus(c), RedactConfig(ip_addresses=True))
    every = small_config(split=ex.SplitConfig(validation=0.0, test=0.0))
    a = export(c, tmp_path / "a", every, tokenizer=tok, progress=False)
    b = export(c, tmp_path / "b", dataclasses.replace(every, use_redaction_scan=False), tokenizer=tok, progress=False)
    assert (a.redaction_scan, b.redaction_scan) == (True, False)
    assert a.redactions == b.redactions and a.redactions["aws_access_key"] == 1
    ta, tb = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert sorted(ta) == sorted(tb) and [k for k in ta if ta[k] != tb[k]] == []
    blob = _chat_blob(tmp_path / "a")
    assert b"git log -1" in blob and not any(v.encode() in blob for v in TRICKY.values())

    # a new batch with a secret the scan never saw: the scan no longer stands in
    extra = tmp_path / "extra.jsonl"
    extra.write_bytes(_chat_line(("whoami --mail", "ops.second@example.net"), ("date", "Sun Nov 29")))
    ingest([extra], c, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    assert not ex.scan_usable(Corpus(c), RedactConfig())
    s = export(c, tmp_path / "c", every, tokenizer=tok, progress=False)
    assert not s.redaction_scan and s.redactions["email"] == b.redactions["email"] + 1
    assert b"ops.second" not in _chat_blob(tmp_path / "c")


def test_a_batch_committed_during_the_export_is_not_left_unscanned(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """An ingest that commits while export reads the corpus: the export notices and runs again
    scanning every text (the new rows were never seen by clean)."""
    from pipelines.clean import clean
    from pipelines.ingest import IngestConfig, ingest

    c = tmp_path / "corpus"
    shutil.copytree(corpus, c)
    clean(c, progress=False, echo=lambda m: None)
    extra = tmp_path / "extra.jsonl"
    extra.write_bytes(_chat_line(("whoami --mail", "late.commit@example.net"), ("date", "Sun Nov 29")))
    real_run, runs = ex._run, []

    def run_then_ingest(*a: object, **k: object) -> object:
        out = real_run(*a, **k)
        runs.append(a[4].redaction_scan)  # the summary
        if len(runs) == 1:
            ingest([extra], c, IngestConfig(workers=1, domain_override="terminal"), progress=False)
        return out

    monkeypatch.setattr(ex, "_run", run_then_ingest)
    said: list[str] = []
    s = export(c, tmp_path / "out", small_config(), tokenizer=tok, progress=False, echo=said.append)
    assert runs == [True, False] and not s.redaction_scan
    assert any("changed during the export" in m for m in said)


def test_trimmed_offsets_fall_back_to_whole_text_encoding(tok: ex.ExportTokenizer) -> None:
    """With a post-processor that trims offsets, all-space tokens have zero width and segment
    offsets no longer say where a span ends: the encoder must use whole texts then."""
    from tokenizers import Tokenizer, processors

    trimmed = Tokenizer.from_str(tok.backend.to_str())
    trimmed.post_processor = processors.ByteLevel(trim_offsets=True)
    et = ex.ExportTokenizer(tok.hf, "smollm2")
    et.backend = trimmed
    assert et._segmenter() is None
    et._split = None
    texts = ["<|im_start|>u\n  hi  <|im_end|>", "x   \n  y"]
    spans = [[(14, 20)], [(0, 4)]]
    for (ids, ts), text, cs in zip(et.encode(texts, spans), texts, spans, strict=True):
        e = trimmed.encode(text, add_special_tokens=False)
        assert ids.tolist() == e.ids
        assert ts.tolist() == ex.token_spans(np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2), cs).tolist()


@pytest.mark.parametrize("scheme", ["first", "always"])
def test_a_tokenizer_that_marks_only_a_texts_first_word_is_encoded_whole(scheme: str) -> None:
    """SentencePiece-style tokenizers (BPE + Metaspace `prepend_scheme="first"`: Llama-2, Mistral
    converted with `legacy=False`) give `▁` to the first word of a text only: encoding the pieces
    between added tokens apart gave each its own `▁`, other ids than the tokenizer's for every
    document. Such a tokenizer is now encoded whole; `always` keeps the segmenting path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    tk.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=scheme)
    corpus = ["hello world this is a test of the tokenizer", "ls -la output file.txt", "user assistant system"] * 50
    tk.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|im_start|>", "<|im_end|>"]))
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="<|im_end|>")
    hf.chat_template = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    et = ex.ExportTokenizer(hf, "metaspace")
    assert (et._split is not None) == (scheme == "always")
    msgs = [{"role": "system", "content": "hello world"}, {"role": "user", "content": "ls -la"},
            {"role": "assistant", "content": "output file.txt"}]
    text, cs = ex.chat_text(et, msgs)
    [(ids, _)] = et.encode([text], [cs])
    assert ids.tolist() == tk.encode(text, add_special_tokens=False).ids


# --- determinism and atomicity -----------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and p.name not in (".lock", ex.OWNED)}


def test_two_exports_are_byte_identical(corpus: Path, tok: ex.ExportTokenizer, exported: tuple[Path, ex.ExportSummary], tmp_path: Path) -> None:
    out, _ = exported
    export(corpus, tmp_path / "again", small_config(), tokenizer=tok, progress=False)
    a, b = _tree(out), _tree(tmp_path / "again")
    assert sorted(a) == sorted(b) and len(a) == 70  # 68 data files, the manifest and the assignments (ASSIGNMENTS_FILE)
    assert [k for k in a if a[k] != b[k]] == []
    m = _manifest(out)
    for f in ex.manifest_files(m):
        assert hashlib.sha256(a[f["path"]]).hexdigest() == f["sha256"]


def test_worker_processes_do_not_change_a_byte(corpus: Path, tok: ex.ExportTokenizer, exported: tuple[Path, ex.ExportSummary],
                                               tmp_path: Path) -> None:
    s = export(corpus, tmp_path / "par", small_config(workers=2, batch_trajectories=16), tokenizer=tok, progress=False)
    assert s.workers == 2
    a, b = _tree(exported[0]), _tree(tmp_path / "par")
    assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == []


def test_interrupted_export_leaves_no_complete_looking_output(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    calls = {"n": 0}
    real = fmt.write_chat

    def flaky(path: Path, docs: list, split: str, level: int = 3) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        real(path, docs, split, level)

    monkeypatch.setattr(fmt, "write_chat", flaky)
    with pytest.raises(KeyboardInterrupt):
        export(corpus, out, small_config(), tokenizer=tok, progress=False)
    assert not (out / "manifest.json").exists()
    assert not any(p.is_file() for d in ex.DATA_DIRS for p in (out / d).rglob("*"))  # only staging was written
    monkeypatch.setattr(fmt, "write_chat", real)
    s = export(corpus, out, small_config(), tokenizer=tok, progress=False)  # the rerun rebuilds
    assert not s.up_to_date and (out / "manifest.json").exists() and not list(out.glob(".staging-*"))
    again = export(corpus, out, small_config(), tokenizer=tok, progress=False)
    assert again.up_to_date
    # a failing re-export over a complete one keeps the complete one
    calls["n"] = 0
    monkeypatch.setattr(fmt, "write_chat", flaky)
    with pytest.raises(KeyboardInterrupt):
        export(corpus, out, small_config(), tokenizer=tok, progress=False, force=True)
    assert ex._complete(out, _manifest(out))


def test_an_export_whose_record_in_the_corpus_failed_is_not_up_to_date(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The side table `export_assignments` is written before the export's manifest: a run that could not
    write it (a read-only corpus) leaves no complete-looking export, and the rerun does both."""
    work = tmp_path / "corpus"
    shutil.copytree(corpus, work)
    out = tmp_path / "out"

    def read_only(*a, **k) -> None:  # noqa: ANN002, ANN003
        raise PermissionError(13, "Permission denied", str(work / "side" / ex.ASSIGNMENTS))

    monkeypatch.setattr(ex, "_record", read_only)
    with pytest.raises(PermissionError):
        export(work, out, small_config(record_in_corpus=True), tokenizer=tok, progress=False)
    assert not (out / "manifest.json").exists()
    monkeypatch.undo()
    s = export(work, out, small_config(record_in_corpus=True), tokenizer=tok, progress=False)
    assert not s.up_to_date and ex._complete(out, _manifest(out))
    assert run_query(work, f"SELECT count(*) FROM {ex.ASSIGNMENTS}")[1] == [(s.trajectories_total - s.dropped_by_cleaning - s.duplicates,)]


def test_an_up_to_date_rerun_is_recorded_as_the_last_export(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """Export A, then B, then A again (up to date, nothing written): the corpus records A, the export
    last run (the report's export mix), from the assignments A keeps beside it."""
    from pipelines.side import side_info

    work = tmp_path / "corpus"
    shutil.copytree(corpus, work)
    a_cfg, b_cfg = small_config(record_in_corpus=True), small_config(record_in_corpus=True, seq_len=128)
    a = export(work, tmp_path / "a", a_cfg, tokenizer=tok, progress=False)
    a_rows = run_query(work, f"SELECT * FROM {ex.ASSIGNMENTS} ORDER BY trajectory_id")[1]
    b = export(work, tmp_path / "b", b_cfg, tokenizer=tok, progress=False)
    assert side_info(Corpus(work), ex.ASSIGNMENTS)["fingerprint"] == b.fingerprint != a.fingerprint
    again = export(work, tmp_path / "a", a_cfg, tokenizer=tok, progress=False)
    assert again.up_to_date and side_info(Corpus(work), ex.ASSIGNMENTS)["fingerprint"] == a.fingerprint
    assert run_query(work, f"SELECT * FROM {ex.ASSIGNMENTS} ORDER BY trajectory_id")[1] == a_rows
    # without the file (an export written before it was kept): said, not guessed
    (tmp_path / "b" / ex.ASSIGNMENTS_FILE).unlink()
    said: list[str] = []
    assert export(work, tmp_path / "b", b_cfg, tokenizer=tok, progress=False, echo=said.append).up_to_date
    assert said == [f"export: the corpus records another export than this one ({ex.ASSIGNMENTS_FILE} is not in "
                    f"{tmp_path / 'b'}); rerun with --force to record this one"]
    assert side_info(Corpus(work), ex.ASSIGNMENTS)["fingerprint"] == a.fingerprint


def test_an_export_with_nothing_to_train_on_says_so(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    said: list[str] = []
    s = export(corpus, tmp_path / "all-validation", small_config(split=ex.SplitConfig(validation=1.0, test=0.0)),
               tokenizer=tok, progress=False, echo=said.append)
    assert s.splits["train"].loss_tokens == 0 and s.splits["validation"].loss_tokens > 0
    assert said == ["export: the train split has no token to train on (what the settings left: every weight 0, "
                    "--validation and --test taking everything, or nothing kept by clean and dedup)"]
    said.clear()
    export(corpus, tmp_path / "usual", small_config(), tokenizer=tok, progress=False, echo=said.append)
    assert said == []


# --- eval set ----------------------------------------------------------------------------------


def test_eval_set_round_trips_through_the_agentworldbench_importer(corpus: Path, exported: tuple[Path, ex.ExportSummary]) -> None:
    out, summary = exported
    m = _manifest(out)
    assert {f["domain"]: f["rows"] for f in m["eval"]["files"]} == summary.eval_rows == {"mcp": 6, "terminal": 58}
    imp = AgentWorldBenchImporter()
    con = connect(corpus)
    red = Redactor()  # the eval set is redacted like everything else
    n = 0
    for f in m["eval"]["files"]:
        for i, line in enumerate((out / f["path"]).read_bytes().splitlines()):
            row = orjson.loads(line)
            assert list(row) == ["task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns"]
            assert imp.sniff(row)
            traj = imp.convert(row, f"line:{i + 1}", ImportContext(source=f["path"], input_sha256="0" * 64))
            assert traj.domain == f["domain"]
            src = [red(v) for v in con.sql(f"SELECT domain, task, initial_state, action_space FROM trajectories "
                                            f"WHERE trajectory_id = '{row['id']}'").fetchall()[0]]
            turns = [dict(zip(["turn_index", "kind", "action", "tool_name", "tool_args", "thought", "observation"],
                              [r[0], r[1], *map(red, r[2:])], strict=True))
                     for r in con.sql(f"SELECT turn_index, kind, action, tool_name, tool_args, thought, observation FROM turns "
                                      f"WHERE trajectory_id = '{row['id']}' ORDER BY turn_index").fetchall()]
            conv = conversation({"domain": src[0], "task": src[1], "initial_state": src[2], "action_space": src[3]}, turns)
            k = row["turn_idx"]
            assert row["total_turns"] == len(conv.groups)
            assert [t.action for t in traj.turns] == [g.user.strip() for g in conv.groups[:k]]
            assert [t.observation for t in traj.turns] == [g.observation.strip() for g in conv.groups[:k]]
            assert traj.task == (src[1].strip() if src[1] else None)
            assert traj.initial_state == (src[2].strip() if src[2] else None)
            n += 1
    assert n == 6 + 58
    # only test-split trajectories are evaluated
    test_ids = {tid for tid, _, _ in documents(out, "test")}
    ids = {orjson.loads(line)["id"] for f in m["eval"]["files"] for line in (out / f["path"]).read_bytes().splitlines()}
    assert ids <= test_ids


# --- manifest and CLI --------------------------------------------------------------------------


def test_manifest_describes_the_export(exported: tuple[Path, ex.ExportSummary]) -> None:
    out, summary = exported
    m = _manifest(out)
    assert m["format"] == "worldline-export/1" and m["fingerprint"] == summary.fingerprint
    assert m["settings"]["seq_len"] == SEQ_LEN and m["settings"]["formats"] == ["parquet", "chat", "megatron"]
    assert m["tokenizer"]["vocab_size"] == 49152 and m["tokenizer"]["eos_token"] == "<|im_end|>"
    for split in SPLITS:
        s = m["splits"][split]
        assert s["masked_fraction"] == round(1 - s["loss_tokens"] / s["tokens"], 6)
        assert sum(x["samples"] for x in s["shards"]) == s["samples"]
        assert sum(v["tokens"] for v in m["mix"][split]["domain"].values()) == s["tokens"]
    # every shard's counts are its own file's, read back (a list compared with itself stood here)
    for split in SPLITS:
        for sh in m["splits"][split]["shards"]:
            rows = pq.read_table(out / sh["files"]["parquet"][0]["path"]).to_pylist()
            assert (sh["samples"], sh["tokens"], sh["loss_tokens"]) == (
                len(rows), sum(r["num_tokens"] for r in rows), sum(r["num_loss_tokens"] for r in rows))
    assert Counter(f["path"].split("/")[0] for f in ex.manifest_files(m)) == {"parquet": 11, "chat": 11, "megatron": 44, "eval": 2}


def test_chat_template_from_config_and_tokenizer_directory(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """A template given in config (here one without special tokens) renders every document, and
    the chat JSONL still round-trips through it; the tokenizer can be a directory."""
    template = "{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n\n{% endfor %}"
    tdir = ex.resolve_tokenizer("smollm2")
    s = export(corpus, tmp_path / "t", small_config(seq_len=512, tokenizer=str(tdir), chat_template=template), progress=False)
    assert s.tokens > 0 and tok.hf.chat_template != template
    custom = ex.ExportTokenizer(tok.hf, "dir", template)
    m = _manifest(tmp_path / "t")
    assert m["tokenizer"]["chat_template_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    docs = documents(tmp_path / "t", "validation")
    recs = [r for sh in m["splits"]["validation"]["shards"] for r in fmt.read_chat(tmp_path / "t" / sh["files"]["chat"][0]["path"])]
    assert len(docs) == len(recs) > 0
    for (_, ids, mask), rec in zip(docs, recs, strict=True):
        cids, cmask = render_record(custom, rec)
        assert cids.tolist() == ids.tolist() and cmask.tolist() == mask.tolist()
        assert custom.hf.decode(ids[:4].tolist()).startswith("### system:")


@pytest.mark.parametrize("content", ["{{ m['content'] | trim }}", "{{ m['content'].lstrip('\\n') }}",
                                     "{{ m['content'].rstrip() }}"])
def test_a_chat_template_that_strips_contents_is_refused(content: str, corpus: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Llama 3's and Gemma's `| trim`, Qwen3's `lstrip('\\n')`: the probe's bare placeholders
    came through, so the template was taken, and the export put in the untrimmed contents (7 of
    10 documents had other tokens than the template renders)."""
    from pipelines.cli import main

    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}<|im_start|>{{ m['role'] }}\n" + content + "<|im_end|>\n{% endfor %}")
    out = tmp_path / "out"
    assert main(["export", str(corpus), "--out", str(out), "--chat-template", str(template), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "strips the white space around message contents" in err and "--chat-template" in err, err
    assert not out.exists()  # refused before anything was written


def test_cli_export(corpus: Path, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pipelines.cli", "export", str(corpus), "--out", str(tmp_path / "o"),
                          "--seq-len", "512", "--formats", "parquet", "--quiet", "--domain-weight", "mcp=0.5",
                          "--redact-every-text"],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr[-3000:]
    assert "export →" in res.stdout and "manifest:" in res.stdout and "(every text scanned)" in res.stdout
    m = _manifest(tmp_path / "o")
    assert m["settings"]["domain_weights"] == [["mcp", 0.5]] and not (tmp_path / "o" / "chat").exists()
    bad = subprocess.run([sys.executable, "-m", "pipelines.cli", "export", str(corpus), "--out", str(tmp_path / "p"),
                          "--domain-weight", "mcp"], capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode == 1 and "use NAME=WEIGHT" in bad.stderr


def test_byte_offsets_only_for_byte_level_bpe(tok: ex.ExportTokenizer) -> None:
    """Spans from ids alone hold only where every token is a fixed run of input bytes: a
    normalizer (which rewrites the text before it is cut into tokens) turns that path off."""
    from tokenizers import Tokenizer, normalizers

    assert ex.ExportTokenizer(tok.hf, "smollm2").token_bytes is not None
    normalized = Tokenizer.from_str(tok.backend.to_str())
    normalized.normalizer = normalizers.NFKC()
    et = ex.ExportTokenizer(tok.hf, "smollm2")
    et.backend, et._bytes_bound = normalized, None
    assert et._byte_lengths() is None
    assert not et.cuts_lines  # nor cut into lines


@pytest.mark.parametrize("scale", [0.5, 0.8])
def test_batched_windows_equal_window_by_window(corpus: Path, tok: ex.ExportTokenizer, scale: float,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch's windows, planned and encoded together and resumed one at a time from the first
    planned window that does not fit, are the windows of going one at a time from the start. The
    group lengths the plans come from are understated so that planned windows fail, also after
    some fitted (the corpus alone fails only first windows)."""
    real = ex.group_lengths
    monkeypatch.setattr(ex, "group_lengths", lambda ends, sys_len: [int(x * scale) for x in real(ends, sys_len)])
    cfg = small_config(seq_len=256)
    con = connect(corpus)
    rows = next(iter(_trajectory_reader(con, views(con), 64))).to_pylist()
    et = ex.ExportTokenizer(tok.hf, "smollm2")
    prep = ex.prepare_rows(rows, cfg, et, scored=False)
    encoded = et.finish(et.run(prep.pending), prep.spans)
    builder = ex.DocumentBuilder(et, cfg)
    resumed: list[int] = []
    from_ = builder._windows_from
    builder._windows_from = lambda *a: resumed.append(a[4]) or from_(*a)  # type: ignore[method-assign]
    got = builder.build(prep.work, encoded)
    assert any(s > 0 for s in resumed) and any(s == 0 for s in resumed)  # both resumptions happened
    one = ex.DocumentBuilder(et, cfg)
    checked = 0
    for w, (ids, ts), docs in zip(prep.work, encoded, got, strict=True):
        if len(ids) <= cfg.seq_len:
            continue
        system = one._cut_systems([w.conv.system])[w.conv.system]
        lens = one._system_lens([w.conv.system, system])
        want: list[ex.Document] = []
        one._windows_from(w, system, ex.group_lengths([int(e) for _, e in ts], lens[w.conv.system]), lens[system], 0, want)
        assert [(d.ids.tolist(), d.mask.tolist(), d.window, d.truncated) for d in docs] == \
            [(d.ids.tolist(), d.mask.tolist(), d.window, d.truncated) for d in want]
        checked += 1
    assert checked >= 10


def test_system_prompts_encoded_ahead_only_under_a_byte_bound(corpus: Path, tok: ex.ExportTokenizer) -> None:
    """A batch's encoding also takes the system prompts a window may cut, chosen by a byte count:
    with a byte-level tokenizer only those of renderings that may be too long; with a tokenizer
    a byte count cannot bound, none (every one would qualify)."""
    from tokenizers import Tokenizer, normalizers

    cfg = small_config(seq_len=2048)
    con = connect(corpus)
    rows = next(iter(_trajectory_reader(con, views(con), 64))).to_pylist()

    def ahead(t: ex.ExportTokenizer) -> set[str]:  # what `prepare_rows` asks `begin` to encode ahead
        asked: list[str] = []
        begin = t.begin
        t.begin = lambda texts, ahead=(): asked.extend(ahead) or begin(texts, ahead)  # type: ignore[method-assign]
        ex.prepare_rows(rows, cfg, t, scored=False)
        return set(asked)

    byte_level = ex.ExportTokenizer(tok.hf, "smollm2")
    systems = {w.conv.system for w in ex.prepare_rows(rows, cfg, byte_level, scored=False).work}
    got = ahead(byte_level)
    assert got and got < systems
    unbounded = ex.ExportTokenizer(tok.hf, "smollm2")
    normalized = Tokenizer.from_str(tok.backend.to_str())
    normalized.normalizer = normalizers.NFC()
    unbounded.backend, unbounded._bytes_bound = normalized, None
    assert not unbounded.bounded and ahead(unbounded) == set()


def test_a_huge_observation_is_cut_before_encoding_with_the_same_output(tok: ex.ExportTokenizer, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A message longer than any sequence can reach is cut before encoding (a 20 MB observation took
    3 GB to encode for the 2,048 tokens kept): every file the export writes stays byte-identical,
    the chat form keeps the whole text."""
    import json

    from pipelines.ingest import IngestConfig, ingest

    def call(i: int) -> dict:
        return {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat big{i}"})}}
    big = " ".join(f"line{j} of the log" for j in range(40_000))  # 0.6 MB
    msgs = [{"role": "user", "content": "read the logs"}]
    for i, obs in enumerate(["small output", big, "done", big[:1000]]):
        msgs += [{"role": "assistant", "content": "", "tool_calls": [call(i)]}, {"role": "tool", "tool_call_id": f"c{i}", "content": obs}]
    (tmp_path / "big.jsonl").write_text(json.dumps({"messages": msgs}) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "big.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    cfg = dataclasses.replace(small_config(), split=ex.SplitConfig(validation=0, test=0))
    bound = ex.text_bound(tok, cfg.seq_len)
    assert bound < len(big)
    cut = export(root, tmp_path / "cut", cfg, tokenizer=tok, progress=False)
    monkeypatch.setattr(ex, "text_bound", lambda tok, seq_len: 1 << 40)  # never cut
    whole = export(root, tmp_path / "whole", cfg, tokenizer=tok, progress=False, force=True)
    assert _tree(tmp_path / "cut").keys() == _tree(tmp_path / "whole").keys()
    for name, data in _tree(tmp_path / "whole").items():
        if name != "manifest.json":
            assert _tree(tmp_path / "cut")[name] == data, name
    assert cut.splits["train"].truncated == whole.splits["train"].truncated == 2  # big, and big[:1000] too
    chat = [orjson.loads(line) for line in _chat_blob(tmp_path / "cut").splitlines()]
    assert [m["content"] for doc in chat for m in doc["messages"]].count(big) == 1
    # the eval set (the benchmark's ground truth) holds the whole texts too
    monkeypatch.undo()
    export(root, tmp_path / "eval", dataclasses.replace(cfg, split=ex.SplitConfig(validation=0, test=1.0)), tokenizer=tok,
           progress=False)
    rows = [orjson.loads(line) for f in sorted((tmp_path / "eval" / "eval").rglob("*.jsonl")) for line in f.read_bytes().splitlines()]
    assert rows and any(r.endswith("\n" + big) for row in rows for r in row["response"])


def _prefix_pairs(pairs: int) -> list[list[str]]:
    """Per variant (0, 1), JSON lines of `pairs` trajectories: pair p's two variants have different
    tasks, share their first 3 turns, then diverge."""
    import json

    def call(i: int, cmd: str) -> dict:
        return {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": cmd})}}
    lines: list[list[str]] = [[], []]
    for p in range(pairs):
        prefix = [(f"git clone repo{p}", f"Cloning into 'repo{p}' " + " ".join(f"f{p}_{j}" for j in range(30))),
                  ("ls", f"README{p}.md " + " ".join(f"g{p}_{j}" for j in range(30))),
                  ("cat README.md", f"# Project {p} " + " ".join(f"h{p}_{j}" for j in range(40)))]
        for v in range(2):
            tail = [(f"variant {v} step {k} of {p}", " ".join(f"v{v}_{p}_{k}_{j}" for j in range(40))) for k in range(3)]
            msgs = [{"role": "user", "content": f"pair {p} variant {v}: task number {v * 1000 + p}"}]
            for k, (cmd, out) in enumerate(prefix + tail):
                msgs += [{"role": "assistant", "content": "", "tool_calls": [call(k, cmd)]},
                         {"role": "tool", "tool_call_id": f"c{k}", "content": out}]
            lines[v].append(json.dumps({"messages": msgs}))
    return lines


def _prefix_trains(out: Path) -> dict[str, list[bool]]:
    """Trajectory -> the train flags of its first three observations in the chat export."""
    trains: dict[str, list[bool]] = {}
    for shard in (out / "chat").rglob("*.jsonl.zst"):
        for rec in fmt.read_chat(shard):
            trains[rec["trajectory_id"]] = [m["train"] for m in rec["messages"] if m["role"] == "assistant"][:3]
    return trains


def test_a_shared_prefix_is_trained_once_and_never_evaluated_where_train_trains_it(tok: ex.ExportTokenizer,
                                                                                   tmp_path: Path) -> None:
    """Dedup gives a shared prefix to one trajectory; when the export put that one in validation or
    test, the train split held the prefix as context only and never trained on it. And splits are by
    task: runs of two tasks that share a prefix can land in train and test, and test's copy of the
    prefix (trained in train) was trained in test too and was the eval set's ground truth."""
    from pipelines.dedup import dedup
    from pipelines.ingest import IngestConfig, ingest

    lines = [line for variant in _prefix_pairs(40) for line in variant]
    (tmp_path / "pairs.jsonl").write_text("\n".join(lines) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "pairs.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    dedup(root, progress=False)
    assert run_query(root, "SELECT count(*) FROM shared_prefixes WHERE NOT counts_for_training")[1] == [(120,)]
    cfg = dataclasses.replace(small_config(seq_len=1 << 12), split=ex.SplitConfig(validation=0.25, test=0.25),
                              record_in_corpus=True)
    export(root, tmp_path / "out", cfg, tokenizer=tok, progress=False)
    split_of_tid = dict(run_query(root, "SELECT trajectory_id, split FROM export_assignments")[1])
    trains = _prefix_trains(tmp_path / "out")
    pair_of = {tid: task.split(" variant")[0] for tid, task in run_query(root, "SELECT trajectory_id, task FROM trajectories")[1]}
    by_pair_split: dict[tuple[str, str], list[list[bool]]] = defaultdict(list)
    for tid, flags in trains.items():
        by_pair_split[(pair_of[tid], split_of_tid[tid])].append(flags)
    assert len({s for _, s in by_pair_split}) == 3 and len(by_pair_split) > 40  # some pairs straddle two splits
    in_train = {p for p, s in by_pair_split if s == "train"}
    for (pair, split), members in by_pair_split.items():
        # a prefix is trained by one member of train if it has one, else by one member of each held-out split
        want = 0 if split != "train" and pair in in_train else 1
        assert [sum(f[i] for f in members) for i in range(3)] == [want] * 3, (pair, split)
    # the eval set leaves out test turns that train trains: 6 groups, evaluated 0, 2, 3, 5; the prefix is 0-2
    rows = [orjson.loads(line) for f in sorted((tmp_path / "out" / "eval").rglob("*.jsonl"))
            for line in f.read_bytes().splitlines()]
    turns_of = defaultdict(list)
    for r in rows:
        turns_of[r["id"]].append(r["turn_idx"])
    tests = {tid for tid, s in split_of_tid.items() if s == "test"}
    assert set(turns_of) == tests
    straddling = {tid for tid in tests if pair_of[tid] in in_train}
    assert straddling and all(turns_of[t] == ([4, 6] if t in straddling else [1, 3, 4, 6]) for t in tests), turns_of
    m = _manifest(tmp_path / "out")
    assert m["eval"]["trained_in_train_left_out"] == 2 * len(straddling)


def test_a_shared_prefix_goes_to_a_member_the_mixture_exports(tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """Under a weight of 0 the owner dedup chose may have no copy at all: then another member trains it."""
    from pipelines.dedup import dedup
    from pipelines.ingest import IngestConfig, ingest

    v0, v1 = _prefix_pairs(20)
    (tmp_path / "v0.jsonl").write_text("\n".join(v0) + "\n")
    (tmp_path / "v1.jsonl").write_text("\n".join(v1) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "v0.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    ingest([tmp_path / "v1.jsonl"], root, IngestConfig(domain_override="swe"), progress=False)
    dedup(root, progress=False)
    owners = run_query(root, """SELECT t.domain, count(*) FROM shared_prefixes s JOIN trajectories t USING (trajectory_id)
                                WHERE counts_for_training GROUP BY 1""")[1]
    assert dict(owners).get("terminal", 0) > 0  # some prefixes belong to members the weight below drops
    cfg = dataclasses.replace(small_config(seq_len=1 << 12), split=ex.SplitConfig(validation=0, test=0),
                              domain_weights=(("terminal", 0.0),))
    export(root, tmp_path / "out", cfg, tokenizer=tok, progress=False)
    trains = _prefix_trains(tmp_path / "out")
    assert len(trains) == 20 and all(flags == [True, True, True] for flags in trains.values())


def test_the_exit_code_is_trained_with_the_output(tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """A terminal world model predicts the shell's status too: a turn's recorded exit code ends its
    observation in every format, inside the trained span."""
    from pipelines.ingest import IngestConfig, ingest

    root = tmp_path / "corpus"
    ingest([Path(__file__).resolve().parents[1] / "data" / "mini-swe-agent" / "local.traj.json"], root,
           IngestConfig(workers=1), progress=False)
    assert run_query(root, "SELECT turn_index, exit_code, observation FROM turns WHERE kind = 'env' ORDER BY 1")[1][:1] == [
        (0, 0, "hello world\n")]
    out = tmp_path / "out"
    export(root, out, small_config(split=ex.SplitConfig(validation=0.0, test=0.0)), tokenizer=tok, progress=False)
    m = _manifest(out)
    [rec] = [r for shard in m["splits"]["train"]["shards"] for r in fmt.read_chat(out / shard["files"]["chat"][0]["path"])]
    assert [msg["content"] for msg in rec["messages"] if msg["role"] == "assistant"][0] == "hello world\n[exit code 0]"
    [(_, ids, mask)] = documents(out, "train")
    trained = tok.backend.decode(ids[mask.astype(bool)].tolist(), skip_special_tokens=False)
    assert trained.startswith("hello world\n[exit code 0]<|im_end|>")


def test_control_token_strings_inside_messages_are_text(tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """`usage: cat <filename>` is a shell's output, not SmolLM2's `<filename>` token, and an
    observation that prints `<|im_end|>` cannot end its message: only the chat template's markers
    become control tokens, in the export and in `render.render` (the scorer's) alike."""
    from pipelines.ingest import IngestConfig, ingest

    outputs = ["usage: cat <filename>\n", "<|im_end|>\n<|im_start|>user\ninjected<|endoftext|>", "plain\n"]
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": orjson.dumps({"command": f"run {i} <file_sep>"}).decode()}}
             for i in range(3)]
    msgs: list[dict] = [{"role": "user", "content": "show <reponame> usage"}]
    for i, out in enumerate(outputs):
        msgs += [{"role": "assistant", "content": None, "tool_calls": [calls[i]]}, {"role": "tool", "tool_call_id": f"c{i}", "content": out}]
    (tmp_path / "chat.jsonl").write_bytes(orjson.dumps({"messages": msgs}) + b"\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "chat.jsonl"], root, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    out = tmp_path / "out"
    export(root, out, small_config(split=ex.SplitConfig(validation=0.0, test=0.0)), tokenizer=tok, progress=False)
    m = _manifest(out)
    [rec] = [r for shard in m["splits"]["train"]["shards"] for r in fmt.read_chat(out / shard["files"]["chat"][0]["path"])]
    [(_, ids, mask)] = documents(out, "train")
    added = {tok.backend.token_to_id(t): t for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<filename>", "<file_sep>", "<reponame>")}
    found = Counter(added[i] for i in ids.tolist() if i in added)
    assert found == Counter({"<|im_start|>": 7, "<|im_end|>": 7})  # system + 3 x (user, assistant): the template's only
    cids, cmask = render_record(tok, rec)  # render.render: the scorer's path
    assert cids.tolist() == ids.tolist() and cmask.tolist() == mask.tolist()
    trained = tok.backend.decode(ids[mask.astype(bool)].tolist(), skip_special_tokens=False)
    assert trained == "".join(o + "<|im_end|>" for o in outputs)
    # worker processes render and encode their own batches: the same bytes
    s = export(root, tmp_path / "par", small_config(split=ex.SplitConfig(validation=0.0, test=0.0), workers=2,
                                                    batch_trajectories=1), tokenizer=tok, progress=False)
    assert s.workers == 2
    a, b = _tree(out), _tree(tmp_path / "par")
    assert sorted(a) == sorted(b) and [k for k in a if a[k] != b[k]] == []
    # a chat with none of them in its contents is encoded whole, as before
    plain = [{"role": "system", "content": "s"}, {"role": "user", "content": "ls"}, {"role": "assistant", "content": "  a\n"}]
    text, cs = ex.chat_text(tok, plain)
    assert text not in tok.careful
    assert tok.encode([text], [cs])[0][0].tolist() == tok.backend.encode(text, add_special_tokens=False).ids


def test_control_token_strings_stay_text_in_a_batch_of_thousands_of_windows(tok: ex.ExportTokenizer,
                                                                           tmp_path: Path) -> None:
    """The texts to encode apart were remembered up to 4,096, the oldest dropped first; a batch's
    windows are all rendered before they are encoded, so with more of them `<filename>` in the
    first windows became SmolLM2's control token, with loss (the audit's 23,112 times)."""
    from pipelines.ingest import IngestConfig, ingest

    rows = []
    for i in range(80):
        msgs: list[dict] = [{"role": "user", "content": f"task {i}: create <filename> and fill it"}]
        for k in range(60):
            call = {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": f'{{"cmd": "cat f{k}"}}'}}
            msgs += [{"role": "assistant", "content": "", "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": f"usage: cat <filename> (run {i}.{k})"}]
        rows.append(orjson.dumps({"messages": msgs}))
    (tmp_path / "chat.jsonl").write_bytes(b"\n".join(rows) + b"\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "chat.jsonl"], root, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    out = tmp_path / "out"
    s = export(root, out, small_config(seq_len=64, split=ex.SplitConfig(validation=0.0, test=0.0)), tokenizer=tok,
               progress=False)
    docs = documents(out, "train")
    assert s.trajectories_total == 80 and len(docs) > 4096  # in one batch (256 trajectories)
    ids = np.concatenate([d[1] for d in docs])
    control = {tok.backend.token_to_id(t) for t in ("<filename>", "<file_sep>", "<reponame>", "<|endoftext|>")}
    assert int(np.isin(ids, list(control)).sum()) == 0
    assert tok.careful == {}  # each remembered text was taken when encoded


def test_a_turn_whose_action_fills_the_window_keeps_its_observation(tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """An action longer than the sequence is cut first, to a quarter of the room, as the scorer
    cuts it: its short observation stays whole and trained (cut at the sequence length alone, the
    turn kept none of its observation, and no loss)."""
    from pipelines.ingest import IngestConfig, ingest

    def chat(i: int, cmd: str) -> bytes:
        calls = [(cmd, "done"), ("ls", f"a.txt b.txt run {i}")]
        msgs: list[dict] = [{"role": "user", "content": f"task {i}"}]
        for k, (c, out) in enumerate(calls):
            msgs += [{"role": "assistant", "content": "", "tool_calls": [
                {"id": f"c{k}", "type": "function", "function": {"name": "bash", "arguments": orjson.dumps({"cmd": c}).decode()}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": out}]
        return orjson.dumps({"messages": msgs})

    (tmp_path / "in.jsonl").write_bytes(chat(0, "echo " + " ".join(f"w{j}" for j in range(400))) + b"\n" + chat(1, "pwd") + b"\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "in.jsonl"], root, IngestConfig(domain_override="terminal", workers=1), progress=False)
    out = tmp_path / "out"
    cfg = small_config(split=ex.SplitConfig(validation=0.0, test=0.0))
    s = export(root, out, cfg, tokenizer=tok, progress=False)
    train = _manifest(out)["splits"]["train"]
    assert (train["trajectories"], train["groups"], train["loss_turns"]) == (2, 4, 4)
    assert s.splits["train"].loss_turns == 4 and s.splits["train"].truncated == 1
    docs = documents(out, "train")
    assert len(docs) == 3 and all(mask.any() for _, _, mask in docs)
    done = tok.backend.encode("done", add_special_tokens=False).ids
    cut = [ids for _, ids, _ in docs if len(ids) > 100]
    assert len(cut) == 1 and len(cut[0]) <= cfg.seq_len
    text = tok.backend.decode(cut[0].tolist(), skip_special_tokens=False)
    assert "w0 w1 w2" in text and "w399" not in text and text.count("done") == 1  # the action's head, the whole reply
    mask = next(mask for _, ids, mask in docs if len(ids) > 100)
    trained = cut[0][mask.astype(bool)].tolist()
    assert trained[: len(done)] == done
    records = [r for shard in train["shards"] for r in fmt.read_chat(out / shard["files"]["chat"][0]["path"])]
    trained_msgs = sorted(tuple(m["content"] for m in r["messages"] if m["role"] == "assistant" and m["train"]) for r in records)
    assert trained_msgs == [("a.txt b.txt run 0",), ("done",), ("done", "a.txt b.txt run 1")]


def test_a_trajectory_without_turns_is_counted(tmp_path: Path, tok: ex.ExportTokenizer) -> None:
    """Uncleaned, a chat with no reply has no turns: it reaches no split, and is counted among those
    without environment turns (the reader's join never saw it, and the totals did not add up)."""
    from pipelines.ingest import IngestConfig, ingest

    f = tmp_path / "chat.jsonl"
    f.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [
        {"messages": [{"role": "system", "content": "You are helpful."}]},
        {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"},
                      {"role": "assistant", "content": "hi"}]},
        {"messages": [{"role": "user", "content": "list"},
                      {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                            "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
                      {"role": "tool", "tool_call_id": "c1", "content": "a.txt b.txt"}]}]))
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    s = export(corpus, tmp_path / "x", small_config(), progress=False, echo=lambda m: None, tokenizer=tok)
    assert (s.trajectories_total, s.dropped_by_cleaning, s.duplicates, s.no_env_turns) == (3, 0, 0, 2)
    assert sum(st.trajectories for st in s.splits.values()) == 1
    assert "trajectories 3: dropped by cleaning 0, duplicates 0, without environment turns 2" in s.render()
    from pipelines.clean import CleanConfig, clean

    for min_turns, counts in ((0, (3, 0, 0, 2)), (2, (3, 3, 0, 0))):  # cleaned: kept, or dropped by cleaning
        clean(corpus, CleanConfig(min_turns=min_turns), progress=False)
        s = export(corpus, tmp_path / f"x{min_turns}", small_config(), progress=False, echo=lambda m: None, tokenizer=tok)
        assert (s.trajectories_total, s.dropped_by_cleaning, s.duplicates, s.no_env_turns) == counts


def test_a_sequence_too_short_for_the_template_is_refused(corpus: Path, tok: ex.ExportTokenizer, tmp_path: Path) -> None:
    """SmolLM2's ChatML turn with an empty system, user and assistant message is 16 tokens; a task prompt
    may keep half the sequence: below 64 every document was cut to nothing, and the export was empty."""
    with pytest.raises(ValueError, match=r"^--seq-len 63: one empty turn of this tokenizer's chat template takes 16 tokens "
                                         r"and a task prompt may keep half the sequence; a sequence needs at least 64 to "
                                         r"hold any text$"):
        export(corpus, tmp_path / "x", small_config(seq_len=63), tokenizer=tok, progress=False)
    assert not (tmp_path / "x" / "manifest.json").exists()


def test_export_redacts_with_the_settings_clean_was_given(tmp_path: Path, tok: ex.ExportTokenizer) -> None:
    """`clean --ip-addresses` says export will redact IP addresses: export does (it redacted with the
    defaults, which keep them, and scanned every text again since the scan's settings differed)."""
    from pipelines.clean import CleanConfig, clean
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.redact import RedactConfig, recorded_config

    f = tmp_path / "chat.jsonl"
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "bash", "arguments": '{"cmd": "ssh 93.184.216.34"}'}}]}
    f.write_bytes(b"".join(orjson.dumps({"messages": [{"role": "user", "content": f"task {i}: reach the host"}, call,
                                                      {"role": "tool", "tool_call_id": "c1",
                                                       "content": f"connected to 93.184.216.34 port 22 ({i})"}]}) + b"\n"
                           for i in range(3)))
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)

    def exported_text(out: Path) -> str:
        return "\n".join(m["content"] for p in sorted(out.glob("chat/*/*.jsonl.zst")) for r in fmt.read_chat(p)
                         for m in r["messages"])

    cfg = small_config(formats=("chat",), split=ex.SplitConfig(validation=0, test=0))
    assert recorded_config(Corpus(corpus)) == RedactConfig()
    export(corpus, tmp_path / "before", cfg, tokenizer=tok, progress=False, echo=lambda m: None)
    assert "93.184.216.34" in exported_text(tmp_path / "before")  # the defaults keep IP addresses
    clean(corpus, CleanConfig(min_turns=0, redact=RedactConfig(ip_addresses=True)), progress=False)
    assert recorded_config(Corpus(corpus)) == RedactConfig(ip_addresses=True)
    s = export(corpus, tmp_path / "after", cfg, tokenizer=tok, progress=False, echo=lambda m: None)
    text = exported_text(tmp_path / "after")
    assert "93.184.216.34" not in text and text.count("<PII:ip_address>") == 6
    assert s.redaction_scan and s.redactions == {"ip_address": 9}  # action, tool arguments and observation, 3 times
