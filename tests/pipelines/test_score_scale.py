"""The score stage at scale: the table streamed batch by batch equals the one the whole-table
algorithm wrote (a straightforward reference of it is kept here), its memory does not follow the
corpus, and it says how far it got."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import pipelines.score as score_mod
from pipelines.query import connect, run_query
from pipelines.score import MODEL_FIELDS, ScoreConfig, apply_policy, score, turn_scores_schema
from pipelines.score_surface import SurfaceConfig, score_surface
from pipelines.sources import MiB

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]
KEYS = ["trajectory_id", "turn_index"]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    from pipelines.ingest import ingest

    out = tmp_path / "corpus"
    ingest([ROOT / "data" / "sample" / "corpus" / d for d in ("fireact", "intercode")], out, progress=False)
    return out




# ---------------------------------------------------------------------------------------------
# the reference: the stage as it was, one table in memory


def reference_table(corpus: Path, cfg: SurfaceConfig, model: pa.Table | None) -> pa.Table:
    """Surface scores of every turn read in (trajectory_id, turn_index) order, left-joined with the
    model rows, sorted, the mask derived, cast to the table's schema: the whole-table algorithm
    `score` had before it streamed."""
    turns = connect(corpus).sql("""SELECT trajectory_id, turn_index, domain, kind, action, observation FROM turns
                                    ORDER BY trajectory_id, turn_index""").to_arrow_table()
    t = score_surface(turns, cfg)
    if model is not None and model.num_rows:
        t = t.join(model, keys=KEYS, join_type="left outer")
    else:
        for f in MODEL_FIELDS:
            t = t.append_column(f, pa.nulls(t.num_rows, f.type))
    t = t.sort_by([(k, "ascending") for k in KEYS])
    schema = turn_scores_schema()
    return apply_policy(t, score_mod.MaskPolicy(), cfg.keep_ratio).select(schema.names).cast(schema)


def reference_summary(t: pa.Table) -> tuple[dict, dict, list[int]]:
    """Categories, domains and the novelty histogram's counts, row by row."""
    cats: dict = {}
    doms: dict = {}
    for c, k, m, d in zip(*(t[n].to_pylist() for n in ("category", "keep", "loss_mask", "domain")), strict=True):
        e = cats.setdefault(c, [0, 0, 0])
        e[0], e[1], e[2] = e[0] + 1, e[1] + bool(k), e[2] + bool(m)
        dd = doms.setdefault(d, [0, 0])
        dd[0], dd[1] = dd[0] + 1, dd[1] + bool(m)
    nov = np.array([v for v, c in zip(t["novelty"].to_pylist(), t["category"].to_pylist(), strict=True) if c != "context"])
    edges = [0, 0.2, 0.4, 0.6, 0.8]
    hist = [int(((nov >= lo) & (nov < hi)).sum()) for lo, hi in zip(edges, edges[1:], strict=False)] + [int((nov >= 0.8).sum())]
    return cats, doms, hist


def _written(corpus: Path) -> pa.Table:
    t = pq.read_table(corpus / "side" / "turn_scores" / "data.parquet")
    return t.replace_schema_metadata(None)


def _assert_equal(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.equals(want.schema.remove_metadata(), check_metadata=True)  # field docs too
    assert got.num_rows == want.num_rows
    for name in want.column_names:  # value by value, nulls and NaN included, in row order
        assert got[name].equals(want[name]), name


def test_streamed_table_equals_the_whole_table_reference(corpus: Path, tiny_model_dir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Small batches everywhere (surface scoring, the written batches, the model tier's sorted
    ranges): the same table, row for row, as the whole-table algorithm, for a surface run, a model
    run that carries the surface columns over, and a surface re-run that carries the model columns
    over."""
    from pipelines.score_model import ModelScoreConfig

    monkeypatch.setattr(score_mod, "WRITE_ROWS", 700)
    small = {"batch_rows": 500, "batch_bytes": 30_000, "sort_bytes": 50_000, "memory_limit": "64MB"}
    s = score(corpus, ScoreConfig(tier="surface", **small), progress=False)
    want = reference_table(corpus, SurfaceConfig(), None)
    _assert_equal(_written(corpus), want)
    cats, doms, hist = reference_summary(want)
    assert (s.turns, s.categories, s.domains) == (want.num_rows, cats, doms)
    assert list(s.categories) == list(cats)  # in order of first appearance, as the manifest had them
    assert [n for _, n in s.histograms["novelty (surface)"]] == hist

    m = score(corpus, ScoreConfig(tier="model", max_tokens=3000, **small,
                                  model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")), progress=False)
    after_model = _written(corpus)
    model_rows = after_model.select(KEYS + [f.name for f in MODEL_FIELDS]).filter(pc.is_valid(after_model["cond_nll"]))
    assert m.model_turns == model_rows.num_rows > 0 and m.carried == ["surface"]
    _assert_equal(after_model, reference_table(corpus, SurfaceConfig(), model_rows))

    seed3 = SurfaceConfig(seed=3)
    s3 = score(corpus, ScoreConfig(tier="surface", surface=seed3, **small), progress=False)
    want3 = reference_table(corpus, seed3, model_rows)
    _assert_equal(_written(corpus), want3)
    assert s3.carried == ["model"] and "cond_nll (nats/token)" in s3.histograms
    assert (s3.categories, s3.domains) == reference_summary(want3)[:2]


def test_model_tier_reads_trajectories_as_the_grouping_query_did(corpus: Path) -> None:
    """The model tier's input, read as sorted md5 ranges and grouped here, is row for row what the
    one query grouping every trajectory's turns into a list gave (the reference, kept here), with
    and without the cleaning filter, in one range or many."""
    from pipelines.clean import clean

    def grouped(con, seed: int, skip: str) -> list[dict]:  # noqa: ANN001
        return con.sql(f"""
            SELECT md5('{seed}:' || tr.trajectory_id) AS prio, tr.trajectory_id, tr.domain, tr.task,
                   tr.action_space, tr.initial_state,
                   list({{'turn_index': u.turn_index, 'kind': u.kind, 'action': u.action, 'tool_name': u.tool_name,
                          'tool_args': u.tool_args, 'thought': u.thought, 'observation': u.observation,
                          'exit_code': u.exit_code}}
                        ORDER BY u.turn_index) AS turns
            FROM trajectories tr JOIN turns u ON u.trajectory_id = tr.trajectory_id {skip}
            GROUP BY ALL ORDER BY prio""").to_arrow_table().to_pylist()

    clean(corpus, progress=False)
    con = connect(corpus)
    con.execute("CREATE TEMP TABLE kept AS SELECT trajectory_id, md5('3:' || trajectory_id) AS prio FROM kept_trajectories")
    for seed, skip, kept in ((0, "", None), (3, "WHERE tr.trajectory_id IN (SELECT trajectory_id FROM kept_trajectories)", "kept")):
        want = grouped(con, seed, skip)
        assert len(want) > 900
        for ranges in (1, 9):
            assert list(score_mod._prioritized(con, seed, kept, ranges)) == want, (seed, kept, ranges)


# ---------------------------------------------------------------------------------------------
# memory

_WORDS = [f"w{i:05d}" for i in range(20_000)]
_LONG = [c * 600 for c in "klmn"]  # 600 B of text that is one word: bytes to hold, little to score


def _chat(rng: random.Random, i: int, turns: int, obs_words: int) -> str:
    msgs = [{"role": "user", "content": f"task {i}"}]
    for k in range(turns):
        call = {"id": f"c{k}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": " ".join(rng.choices(_WORDS, k=4))})}}
        msgs += [{"role": "assistant", "content": "", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}",
                  "content": " ".join(rng.choices(_WORDS, k=obs_words)) + " " + _LONG[k % 4]}]
    return json.dumps({"messages": msgs})


def _make_corpus(root: Path, copies: int) -> Path:
    """400 sessions of 10 tool calls (4,000 turns; observations of 20 random words and one
    600-byte word) ingested, then `copies - 1` more of each under other trajectory ids, as further parts of
    the same batch (a corpus `copies` times larger in seconds), all in row groups of 1,024 rows."""
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.sources import sha256_file
    from pipelines.store import Corpus, write_json_atomic

    rng = random.Random(0)
    src = root / "in.jsonl"
    if not src.exists():
        src.write_text("\n".join(_chat(rng, i, 10, 20) for i in range(400)) + "\n")
    out = root / f"corpus-x{copies}"
    ingest([src], out, IngestConfig(domain_override="terminal", workers=1), progress=False)
    corpus = Corpus(out)
    m = corpus.manifest()
    files = m["batches"][0]["files"]
    for f in list(files):
        t = pq.read_table(out / f["path"])
        for k in range(copies):  # the ingested part itself too, in the small row groups
            tid = pc.binary_join_element_wise(t["trajectory_id"], pa.scalar(f"{k:x}"), "-") if k else t["trajectory_id"]
            rel = f["path"].replace(".parquet", f"-copy{k}.parquet") if k else f["path"]
            pq.write_table(t.set_column(t.schema.get_field_index("trajectory_id"), t.schema.field("trajectory_id"), tid)
                           .cast(t.schema), out / rel, row_group_size=1024, compression="zstd")
            if k:
                files.append({**f, "path": rel, "sha256": sha256_file(out / rel)})
            else:
                f["sha256"] = sha256_file(out / rel)
    write_json_atomic(corpus.manifest_path, m)
    return out


_PROBE = """
import sys
from pipelines.query import connect
from pipelines.score import ScoreConfig, score
from tests.support.memory import peak, reset_peak
import pipelines.score
cfg = ScoreConfig(tier="surface", batch_rows=1024, memory_limit="32MB", threads=2)
pipelines.score.WRITE_ROWS = 4096
connect(sys.argv[1]).sql("SELECT count(*) FROM turns").fetchall()
rss0 = reset_peak()
s = score(sys.argv[1], cfg, progress=False)
print(s.turns, peak() - rss0)
"""


def _score_growth(corpus: Path) -> tuple[int, float]:
    r = subprocess.run([sys.executable, "-c", _PROBE, str(corpus)], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert r.returncode == 0, r.stderr
    turns, grown = r.stdout.splitlines()[-1].split()  # (DuckDB's own progress bar may come before)
    return int(turns), int(grown) / MiB


def test_memory_does_not_follow_the_corpus(tmp_path: Path) -> None:
    """Five times the turns (80k against 16k; 54 MB of observations against 11 MB): the peak of a
    surface run grows by about the same, 90-110 MB here (most of it what a first run sets up), in
    batches of 1,024 turns and a DuckDB limit of 32 MB. Scoring the corpus as one table, as the
    stage did, grew by 240 MB at 16k turns and 700 MB at 80k.

    The bound allows the larger run DuckDB's whole limit more than the smaller (a small corpus
    leaves part of DuckDB's buffers unfilled; a CI run measured 95 against 128 MB, most runs
    differ by 10-20 MB) and 16 MB of allocator noise; each size's peak is the lower of two runs,
    as the noise only ever adds."""
    small, big = _make_corpus(tmp_path, 4), _make_corpus(tmp_path, 20)
    (n_small, g_small), (n_big, g_big) = (min(_score_growth(c) for _ in range(2)) for c in (small, big))
    assert (n_small, n_big) == (16_000, 80_000)
    duckdb_limit = 32
    assert g_big < g_small + duckdb_limit + 16, f"peak grew by {g_small:.0f} MB at {n_small} turns, {g_big:.0f} MB at {n_big}"


# ---------------------------------------------------------------------------------------------
# progress


def _lines(err: str, phase: str) -> list[str]:
    return [x for x in err.splitlines() if x.startswith(f"score ({phase}) ")] or [f"(no score ({phase}) line)"]


def test_progress_is_printed(corpus: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture) -> None:
    """Every phase shows a line when it starts and one when it ends (in a log: plain lines, one
    every 10 s between), the model tier with the trajectories it went through and scored."""
    from pipelines.score_model import ModelScoreConfig

    n = run_query(corpus, "SELECT count(*) FROM turns")[1][0][0]
    score(corpus, ScoreConfig(tier="surface"), progress=True)
    err = capsys.readouterr().err
    assert _lines(err, "surface")[-1].startswith(f"score (surface) {n:,}/{n:,} turns"), err
    assert _lines(err, "write")[-1].startswith(f"score (write) {n:,}/{n:,} turns"), err

    s = score(corpus, ScoreConfig(tier="model", max_tokens=2000, model=ModelScoreConfig(model=str(tiny_model_dir),
                                                                                       dtype="float32")), progress=True)
    err = capsys.readouterr().err
    seen = s.model_trajectories + s.passed_over
    last = _lines(err, "model")[-1]
    assert last.startswith(f"score (model) {seen:,}/{s.model_trajectories_total:,} trajectories · "
                           f"{s.model_trajectories:,} scored · {s.model_tokens:,} tokens"), err
    assert s.model_trajectories > 0
    assert _lines(err, "surface") == ["(no score (surface) line)"]  # the surface columns carried over
    assert _lines(err, "write")[-1].startswith(f"score (write) {n:,}/{n:,} turns"), err

    score(corpus, ScoreConfig(tier="surface"), progress=False)
    assert capsys.readouterr().err == ""


def test_a_memory_limit_duckdb_does_not_take_fails_before_the_run(corpus: Path) -> None:
    with pytest.raises(ValueError, match=r"^--memory-limit 'lots': DuckDB does not take it \("):
        ScoreConfig(memory_limit="lots")
    assert not list(corpus.glob(".score-work-*"))


def test_text_slices_keep_each_slice_under_budget_and_a_longer_turn_alone() -> None:
    # text sizes (action + observation bytes): 3, 4, 10 (above the budget of 8), 2, 2, null
    b = pa.record_batch({"action": ["ab", "abcd", None, "a", "b", None], "observation": ["c", None, "x" * 10, "c", "d", None]})
    slices = score_mod._text_slices(b, 8)
    assert [s.num_rows for s in slices] == [2, 1, 3]
    assert pa.Table.from_batches(slices).equals(pa.Table.from_batches([b]))
