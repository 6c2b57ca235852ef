"""The export's data contracts fail on what they guard against, whatever formats were written, and
pass on a valid export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.export import ExportTokenizer, SplitConfig, export
from pipelines.export_contracts import run_export_contracts
from pipelines.ingest import IngestConfig, ingest
from pipelines.query import run_query
from tests.pipelines.export_support import build_corpus, small_config, tokenizer


@pytest.fixture(scope="module")
def tok() -> ExportTokenizer:
    return tokenizer()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_corpus(tmp_path_factory.mktemp("contracts"))


def _results(out: Path, corpus: Path | None) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.passed, r.severity) for r in run_export_contracts(out, corpus)}


def _bump_manifest_tokens(out: Path) -> None:
    m = orjson.loads((out / "manifest.json").read_bytes())
    m["splits"]["train"]["tokens"] += 1
    (out / "manifest.json").write_bytes(orjson.dumps(m))


ALL_PASS = {"export_complete": (True, "error"), "export_masks": (True, "error"), "export_formats_agree": (True, "error"),
            "export_splits_disjoint": (True, "error"), "export_eval_set": (True, "error")}


@pytest.mark.parametrize("formats", [("chat",), ("megatron",)])
def test_an_export_without_parquet_is_checked_from_its_own_files(formats: tuple[str, ...], corpus: Path,
                                                                 tok: ExportTokenizer, tmp_path: Path) -> None:
    """Three of the four contracts read only Parquet shards and passed on anything else (the
    splits contract reported 0 trajectories of 109)."""
    out = tmp_path / "out"
    export(corpus, out, small_config(formats=formats), tokenizer=tok, progress=False)
    got = _results(out, corpus)
    if formats == ("chat",):
        assert got == ALL_PASS
        [r] = [r for r in run_export_contracts(out, corpus) if r.name == "export_splits_disjoint"]
        trained = sum(s["trajectories"] for s in orjson.loads((out / "manifest.json").read_bytes())["splits"].values())
        assert r.metadata["trajectories"] == trained > 0
    else:  # Megatron's files carry no trajectory ids: said, as a warning, not passed
        assert got == {**ALL_PASS, "export_splits_disjoint": (False, "warn")}
        [r] = [r for r in run_export_contracts(out, corpus) if r.name == "export_splits_disjoint"]
        assert "carry no trajectory ids" in r.metadata["not_checked"]
        # without the corpus, the eval rows' split cannot be checked either: a warning, not a pass
        assert _results(out, None)["export_eval_set"] == (False, "warn")
    [masks] = [r for r in run_export_contracts(out, corpus) if r.name == "export_masks"]
    assert masks.metadata["format"] == formats[0]
    _bump_manifest_tokens(out)
    [masks] = [r for r in run_export_contracts(out, corpus) if r.name == "export_masks"]
    assert not masks.passed and "manifest says" in masks.metadata["bad"][0], masks.metadata


def test_documents_without_loss_kept_on_purpose_pass(corpus: Path, tok: ExportTokenizer, tmp_path: Path) -> None:
    """`drop_no_loss=False` keeps documents without a loss token (here: scoring masked every turn
    of every other trajectory): the chat check refused every one of them."""
    import shutil

    import pyarrow as pa

    from pipelines.side import write_side_table
    from pipelines.store import Corpus

    c = tmp_path / "corpus"
    shutil.copytree(corpus, c)
    turns = run_query(c, "SELECT trajectory_id, turn_index, dense_rank() OVER (ORDER BY trajectory_id) FROM turns ORDER BY ALL")[1]
    write_side_table(Corpus(c), "turn_scores", pa.table({
        "trajectory_id": [t for t, _, _ in turns], "turn_index": pa.array([i for _, i, _ in turns], pa.int32()),
        "loss_mask": [r % 2 == 0 for _, _, r in turns]}),
        pa.schema([pa.field("trajectory_id", pa.string()), pa.field("turn_index", pa.int32()), pa.field("loss_mask", pa.bool_())]),
        "test", "fp-score", {})
    out = tmp_path / "out"
    s = export(c, out, small_config(formats=("chat",), drop_no_loss=False, seq_len=128), tokenizer=tok, progress=False)
    from pipelines.export_formats import read_chat

    zero = sum(1 for f in (out / "chat").rglob("*.jsonl.zst") for r in read_chat(f) if r["num_loss_tokens"] == 0)
    assert zero > 0 and s.tokens > 0
    assert _results(out, c) == ALL_PASS


def _rewrite_parquet(path: Path, change: Any) -> None:
    t = pq.read_table(path)
    rows = t.to_pylist()
    change(rows[0])
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), path)


@pytest.mark.parametrize("change, said", [
    (lambda r: r.update(num_tokens=r["num_tokens"] + 1), "sample 0: num_tokens"),
    (lambda r: r.update(num_loss_tokens=r["num_loss_tokens"] - 1), "sample 0: num_tokens"),
    (lambda r: r.update(windows=r["windows"][:-1]), "sample 0: "),
    (lambda r: r.update(trajectory_ids=[*r["trajectory_ids"], "x"]), "sample 0: "),
])
def test_parquet_counts_and_document_lists_are_checked(corpus: Path, tok: ExportTokenizer, tmp_path: Path,
                                                      change: Any, said: str) -> None:
    """A sample's num_tokens / num_loss_tokens columns and its trajectory_ids and windows lists
    (one per document by cu_seqlens) are what a trainer reads: `export_masks` did not look."""
    out = tmp_path / "out"
    export(corpus, out, small_config(formats=("parquet",)), tokenizer=tok, progress=False)
    assert _results(out, corpus) == ALL_PASS
    m = orjson.loads((out / "manifest.json").read_bytes())
    path = m["splits"]["train"]["shards"][0]["files"]["parquet"][0]["path"]
    _rewrite_parquet(out / path, change)
    [r] = [r for r in run_export_contracts(out, corpus) if r.name == "export_masks"]
    assert not r.passed and r.metadata["problems"] == 1 and r.metadata["bad"][0].startswith(f"{path} {said}"), r.metadata


def test_formats_holding_other_documents_fail(corpus: Path, tok: ExportTokenizer, tmp_path: Path) -> None:
    """Megatron's documents and the chat records are the Parquet documents, shard by shard: a
    Megatron token or a chat record's window that differs is named (each format passed its own checks)."""
    from pipelines.export_formats import read_chat

    out = tmp_path / "out"
    export(corpus, out, small_config(), tokenizer=tok, progress=False)
    assert _results(out, corpus) == ALL_PASS
    [ok] = [r for r in run_export_contracts(out, corpus) if r.name == "export_formats_agree"]
    m = orjson.loads((out / "manifest.json").read_bytes())
    assert ok.metadata["shards"] == sum(len(s["shards"]) for s in m["splits"].values()) > 1
    files = m["splits"]["train"]["shards"][1]["files"]
    [tokens_bin] = [f["path"] for f in files["megatron"] if f["path"].endswith("_tokens.bin")]
    data = bytearray((out / tokens_bin).read_bytes())
    data[2] ^= 1  # the first document's second token (uint16)
    (out / tokens_bin).write_bytes(bytes(data))
    chat = out / files["chat"][0]["path"]
    recs = list(read_chat(chat))
    recs[3]["window"] += 1
    import zstandard
    chat.write_bytes(zstandard.ZstdCompressor().compress(b"".join(orjson.dumps(r) + b"\n" for r in recs)))
    [r] = [r for r in run_export_contracts(out, corpus) if r.name == "export_formats_agree"]
    first = recs[0]
    assert not r.passed and r.metadata["problems"] == 2
    assert r.metadata["bad"] == [
        f"train shard 1 document 0 ({first['trajectory_id']} window {first['window']}): Megatron's tokens or loss mask "
        "differ from Parquet's",
        f"train shard 1 document 3: chat record {(recs[3]['trajectory_id'], recs[3]['window'], recs[3]['num_tokens'], recs[3]['num_loss_tokens'])}"
        f", expected {(recs[3]['trajectory_id'], recs[3]['window'] - 1, recs[3]['num_tokens'], recs[3]['num_loss_tokens'])}"]
    for fmt_ in ("parquet", "chat", "megatron"):  # one format alone has nothing to agree with
        one = tmp_path / fmt_
        export(corpus, one, small_config(formats=(fmt_,)), tokenizer=tok, progress=False)
        [r] = [r for r in run_export_contracts(one, corpus) if r.name == "export_formats_agree"]
        assert r.passed and r.metadata["shards"] == 0


def test_an_eval_row_of_a_training_trajectory_fails(corpus: Path, tok: ExportTokenizer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    export(corpus, out, small_config(split=SplitConfig(validation=0.0, test=0.3)), tokenizer=tok, progress=False)
    assert _results(out, corpus) == ALL_PASS
    m = orjson.loads((out / "manifest.json").read_bytes())
    train_id = pq.read_table(out / m["splits"]["train"]["shards"][0]["files"]["parquet"][0]["path"],
                             columns=["trajectory_ids"]).column(0)[0].as_py()[0]
    path = out / m["eval"]["files"][0]["path"]
    lines = path.read_bytes().splitlines()
    row = orjson.loads(lines[0])
    row["id"] = train_id
    path.write_bytes(b"\n".join([orjson.dumps(row), *lines[1:]]) + b"\n")
    for where in (corpus, None):  # from the files alone, and with the corpus's split of the task too
        [r] = [r for r in run_export_contracts(out, where) if r.name == "export_eval_set"]
        assert not r.passed
        assert f"line 1: trajectory {train_id} is in the train split's files" in r.metadata["bad"][0]


def test_eval_rows_of_a_test_trajectory_left_without_documents_pass(tok: ExportTokenizer, tmp_path: Path) -> None:
    """A test trajectory whose every turn another one owns (a shared prefix) has no document, so no
    shard names it, yet its eval rows are the test split's: the contract failed a valid export."""
    from pipelines.dedup import dedup

    def chat(turns: int) -> bytes:
        msgs: list[dict] = [{"role": "user", "content": "inspect the repository and report the python version used"}]
        for k in range(turns):
            call = {"id": f"c{k}", "type": "function",
                    "function": {"name": "bash", "arguments": orjson.dumps({"cmd": f"step {k} of the inspection"}).decode()}}
            msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"c{k}", "content": f"output number {k}: " + "lorem ipsum " * 5}]
        return orjson.dumps({"messages": msgs})

    (tmp_path / "in.jsonl").write_bytes(chat(3) + b"\n" + chat(5) + b"\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "in.jsonl"], root, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    dedup(root, progress=False)
    out = tmp_path / "out"
    export(root, out, small_config(split=SplitConfig(validation=0.0, test=1.0), record_in_corpus=True), tokenizer=tok,
           progress=False, echo=lambda m: None)
    assert run_query(root, "SELECT split, documents > 0 FROM export_assignments ORDER BY 2")[1] == [("test", False),
                                                                                                  ("test", True)]
    assert _results(out, root) == ALL_PASS
    assert _results(out, None) == ALL_PASS


def test_worldline_check_runs_the_export_contracts(corpus: Path, tok: ExportTokenizer, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`worldline check CORPUS --export DIR`: a file changed in place, its size the same (which an
    up-to-date rerun of the export does not read), fails export_complete and the command."""
    from pipelines.cli import main

    out = tmp_path / "out"
    export(corpus, out, small_config(), tokenizer=tok, progress=False, echo=lambda m: None)
    assert main(["check", str(corpus), "--export", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(f"export {out}:")
    assert [ln.split(":")[0] for ln in lines[at + 1:]] == ["PASS  export_complete", "PASS  export_masks",
                                                           "PASS  export_formats_agree", "PASS  export_splits_disjoint", "PASS  export_eval_set"]
    [part] = sorted((out / "parquet" / "train").glob("part-*.parquet"))[:1]
    data = bytearray(part.read_bytes())
    data[100:104] = b"XXXX"
    part.write_bytes(bytes(data))
    assert export(corpus, out, small_config(), tokenizer=tok, progress=False, echo=lambda m: None).up_to_date
    assert main(["check", str(corpus), "--export", str(out)]) == 1
    assert "FAIL  export_complete" in capsys.readouterr().out
    # an export of another corpus: said at once (its splits passed against the other corpus's trajectories
    # and the eval set failed with "is in the corpus: no such split"); of this corpus grown since, it still checks
    from tests.conftest import SAMPLE

    other = tmp_path / "other"
    ingest([SAMPLE / "tau-bench"], other, progress=False)
    assert main(["check", str(other), "--export", str(out)]) == 1
    assert capsys.readouterr().err == (f"worldline check: error: {out} was exported from {corpus} (1 batch), not from the "
                                       f"corpus {other} as it is or was; check it with that corpus\n")
    import shutil

    grown = tmp_path / "grown"
    shutil.copytree(corpus, grown)
    ingest([SAMPLE / "tau-bench"], grown, progress=False)
    main(["check", str(grown), "--export", str(out)])
    assert "was exported from" not in capsys.readouterr().err
    # a traces output that is not there: each of its checks fails, saying so
    assert main(["check", str(corpus), "--traces", str(tmp_path / "no-traces")]) == 1
    lines = capsys.readouterr().out.splitlines()
    after = lines[lines.index(f"traces {tmp_path / 'no-traces'}:") + 1:]
    assert after and all(ln.startswith("FAIL  ") for ln in after if not ln.startswith("      "))
