"""The score stage end to end: the side table and its view, the CLI, the mask policy, the token
cap, carrying one tier's columns over when the other is re-run, and the data contracts."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.cli import main
from pipelines.query import run_query
from pipelines.score import MaskPolicy, ScoreConfig, apply_policy, score, score_contracts
from pipelines.score_model import ModelScoreConfig
from pipelines.score_surface import SurfaceConfig

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    from pipelines.ingest import ingest

    out = tmp_path / "corpus"
    ingest([ROOT / "data" / "sample" / "corpus" / d for d in ("fireact", "intercode")], out, progress=False)
    return out




def test_surface_tier_via_cli(corpus: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["score", str(corpus), "--tier", "surface", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "tier surface" in out and "retrieval" in out
    n_turns = run_query(corpus, "SELECT count(*) FROM turns")[1][0][0]
    rows = run_query(corpus, """SELECT count(*), count(DISTINCT (trajectory_id, turn_index)), count(cond_nll),
                                       count(*) FILTER (WHERE loss_mask <> keep) FROM turn_scores""")[1][0]
    assert rows == (n_turns, n_turns, 0, 0)  # one row per turn; no model tier; mask = keep
    assert all(r.passed for r in score_contracts(corpus)), [r.line() for r in score_contracts(corpus) if not r.passed]
    assert [(r.name, r.severity) for r in score_contracts(corpus)] == [  # a stale table warns; a wrong one fails
        ("turn_scores_cover_turns", "error"), ("turn_scores_valid", "error"), ("turn_scores_current", "warn")]
    assert main(["score", str(corpus), "--tier", "surface", "--quiet"]) == 0  # no model tier ran: none carried over
    assert "carried over" not in capsys.readouterr().out


def test_model_tier_with_cap_and_carry_over(corpus: Path, tiny_model_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    argv = ["score", str(corpus), "--tier", "both", "--model", str(tiny_model_dir), "--max-tokens", "3000", "--quiet"]
    assert main(argv) == 0
    assert "Loading weights" not in capfd.readouterr().err  # --quiet: not even transformers' bar
    scored = run_query(corpus, """SELECT count(DISTINCT trajectory_id), sum(tokens), min(tokens), count(*) FROM turn_scores
                                  WHERE cond_nll IS NOT NULL""")[1][0]
    assert 0 < scored[0] < run_query(corpus, "SELECT count(*) FROM trajectories")[1][0][0]
    assert scored[2] >= 1
    # the cap sample is deterministic: the same trajectories again
    first = run_query(corpus, "SELECT trajectory_id, turn_index, cond_nll FROM turn_scores WHERE cond_nll IS NOT NULL ORDER BY 1, 2")[1]
    assert main(argv) == 0
    again = run_query(corpus, "SELECT trajectory_id, turn_index, cond_nll FROM turn_scores WHERE cond_nll IS NOT NULL ORDER BY 1, 2")[1]
    assert [r[:2] for r in again] == [r[:2] for r in first]
    assert all(math.isclose(a[2], b[2], abs_tol=1e-4) for a, b in zip(first, again, strict=True))
    # a surface re-run with another seed keeps the model columns
    assert main(["score", str(corpus), "--tier", "surface", "--seed", "3", "--quiet"]) == 0
    kept = run_query(corpus, "SELECT trajectory_id, turn_index, cond_nll FROM turn_scores WHERE cond_nll IS NOT NULL ORDER BY 1, 2")[1]
    assert kept == again
    results = score_contracts(corpus)
    assert all(r.passed for r in results), [r.line() for r in results if not r.passed]


def test_policy_is_derived_from_stored_scores() -> None:
    t = pa.table({
        "category": ["retrieval", "echo", "retrieval", "retrieval", "retrieval", "context"],
        "keep": [True, True, True, True, False, False],
        "cond_nll": [2.0, 0.1, 0.05, 1.0, 2.0, None],
        "uncond_nll": [3.0, 3.0, 3.0, 0.4, 3.0, None],
        "ifd": [2 / 3, 0.1 / 3, 0.05 / 3, 2.5, 2 / 3, None],
    })
    ratios = SurfaceConfig().keep_ratio
    out = apply_policy(t, MaskPolicy(), ratios)
    # 0: kept, informative -> on; 1: kept echo but a copy (ifd .03) -> off; 2: copy -> off;
    # 3: generic (uncond .4 < .5) -> off; 4: not kept by the draw -> off (weight still its ratio); 5: context
    assert out["loss_mask"].to_pylist() == [True, False, False, False, False, False]
    assert out["loss_weight"].to_pylist() == [1.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    strict = apply_policy(t, MaskPolicy(max_ifd=1.0, min_uncond_nll=0.0), ratios)
    assert strict["loss_mask"].to_pylist() == [True, False, False, False, False, False]
    lax = apply_policy(t, MaskPolicy(min_ifd=0.0, min_uncond_nll=0.0), ratios)
    assert lax["loss_mask"].to_pylist() == [True, True, True, True, False, False]


def test_contract_catches_a_tampered_table(corpus: Path) -> None:
    import pyarrow.parquet as pq

    score(corpus, ScoreConfig(tier="surface"), progress=False)
    p = corpus / "side" / "turn_scores" / "data.parquet"
    t = pq.read_table(p)
    keep = t["keep"].to_pylist()
    keep[0] = not keep[0]
    t = t.set_column(t.schema.get_field_index("keep"), t.schema.field("keep"), pa.array(keep))
    pq.write_table(t.slice(1), p)  # one row missing, and a draw that disagrees with its keep
    bad = {r.name: r for r in score_contracts(corpus)}
    assert not bad["turn_scores_cover_turns"].passed
    assert bad["turn_scores_cover_turns"].metadata["missing"] == 1
    assert bad["turn_scores_valid"].passed  # the flipped row was the one removed
    keep[1] = not keep[1]
    t = t.set_column(t.schema.get_field_index("keep"), t.schema.field("keep"), pa.array(keep))
    pq.write_table(t, p)
    bad = {r.name: r for r in score_contracts(corpus)}
    assert not bad["turn_scores_valid"].passed and bad["turn_scores_valid"].metadata["keep_disagrees_with_draw"] == 2


def test_bad_arguments_are_usage_errors(corpus: Path, capsys: pytest.CaptureFixture) -> None:
    from pipelines.side import side_path
    from pipelines.store import Corpus

    assert main(["score", str(corpus), "--tier", "model", "--max-tokens", "0", "--quiet"]) == 1
    assert "--max-tokens 0" in capsys.readouterr().err
    # refused before anything runs: no table written
    assert main(["score", str(corpus), "--model", "/nonexistent", "--quiet"]) == 1
    assert capsys.readouterr().err == ("worldline score: error: --model '/nonexistent': not `smollm2`, a .gguf file or a "
                                       "Hugging Face model directory with config.json\n")
    assert main(["score", str(corpus), "--tier", "surface", "--max-tokens", "500", "--device", "cpu", "--quiet"]) == 1
    assert capsys.readouterr().err == ("worldline score: error: --max-tokens, --device apply only to the model tier; "
                                       "--tier surface runs no model\n")
    assert not side_path(Corpus(corpus), "turn_scores").exists()


def test_report_section(corpus: Path) -> None:
    from pipelines.query import connect
    from pipelines.score_report import section_scores

    assert "not scored yet" in section_scores(connect(corpus))
    score(corpus, ScoreConfig(tier="surface"), progress=False)
    html = section_scores(connect(corpus))
    assert "Loss on (% of turns) per domain" in html and "Novelty (surface)" in html
    assert "Conditional NLL" not in html  # no model tier yet


def test_model_tier_scores_every_observation_once(tmp_path: Path, tiny_model_dir: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No cap, a window (256) smaller than some trajectories: every turn with an observation gets
    exactly one model row; context turns get none; the summary's tokens are those forwarded."""
    from pipelines.ingest import ingest
    from pipelines.score_model import ModelScoreConfig, TurnScorer

    forwarded = [0]
    real_forward = TurnScorer._forward

    def counting(self, model, jobs, device):  # noqa: ANN001, ANN202
        forwarded[0] += sum(len(j.ids) for j in jobs)
        return real_forward(self, model, jobs, device)

    monkeypatch.setattr(TurnScorer, "_forward", counting)
    out = tmp_path / "c"
    ingest([ROOT / "data" / "sample" / "corpus" / "swe-agent"], out, progress=False)  # long sessions, long prompts
    s = score(out, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), max_context=256, dtype="float32")),
              progress=False)
    assert s.windowed_trajectories > 0 and s.truncated_turns > 0
    assert s.truncated_systems > 0 and f"{s.truncated_systems} system prompts cut to half the window" in s.render()
    # repeated observations are scored alone once; the summary says how many
    repeats = run_query(out, """SELECT count(*) - count(DISTINCT observation) FROM turn_scores s JOIN turns u
        USING (trajectory_id, turn_index) WHERE s.cond_nll IS NOT NULL AND NOT s.truncated""")[1][0][0]
    assert 0 < s.uncond_shared <= repeats + s.truncated_turns
    assert f"{s.uncond_shared} repeated observations scored alone once" in s.render()
    assert s.model_tokens == forwarded[0] > 0  # not the planned rows: the shared ones run once
    rows = run_query(out, """SELECT count(*) FILTER (WHERE category <> 'context'), count(cond_nll),
                                    count(*) FILTER (WHERE category = 'context' AND cond_nll IS NOT NULL),
                                    max(context_tokens + tokens), max(history_dropped) FROM turn_scores""")[1][0]
    assert rows[0] == rows[1] and rows[2] == 0 and rows[3] <= 256 and rows[4] > 0
    assert all(r.passed for r in score_contracts(out))


def test_model_tier_skips_trajectories_cleaning_drops(corpus: Path, tiny_model_dir: Path) -> None:
    """With a `cleaning` side table, the model tier scores only `kept_trajectories`; every turn
    still gets its surface row."""
    from pipelines.clean import clean
    from pipelines.score_model import ModelScoreConfig

    clean(corpus, progress=False)
    dropped = run_query(corpus, "SELECT count(*) FROM trajectories ANTI JOIN kept_trajectories USING (trajectory_id)")[1][0][0]
    assert dropped > 0  # fireact has one-turn sessions (too_few_turns)
    s = score(corpus, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"), max_tokens=2000),
              progress=False)
    assert s.skipped_dropped == dropped
    rows = run_query(corpus, """SELECT count(*) FILTER (WHERE s.cond_nll IS NOT NULL AND k.trajectory_id IS NULL),
                                       count(*) = (SELECT count(*) FROM turns)
                                FROM turn_scores s LEFT JOIN kept_trajectories k USING (trajectory_id)""")[1][0]
    assert rows == (0, True)


def test_the_model_is_not_loaded_when_cleaning_dropped_every_trajectory(tmp_path: Path, tiny_model_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing left to score: the model tier loaded the model anyway, and the summary hid how many
    trajectories cleaning and dedup had dropped (its model line shows only when something was scored)."""
    import json

    from pipelines.clean import clean
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig, TurnScorer

    def one_turn(i: int) -> str:
        call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})}}
        return json.dumps({"messages": [{"role": "user", "content": f"task {i}"},
                                        {"role": "assistant", "content": "", "tool_calls": [call]},
                                        {"role": "tool", "tool_call_id": "c", "content": f"line {i}"}]})
    (tmp_path / "in.jsonl").write_text("\n".join(one_turn(i) for i in range(3)) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "in.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    clean(root, progress=False)
    assert run_query(root, "SELECT count(*) FROM kept_trajectories")[1][0][0] == 0  # one turn each: too_few_turns

    def no_load(self: TurnScorer) -> None:
        raise AssertionError("the model was loaded with nothing to score")
    monkeypatch.setattr(TurnScorer, "setup", no_load)
    s = score(root, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")), progress=False)
    assert (s.skipped_dropped, s.model_trajectories_total, s.model_trajectories, s.turns) == (3, 0, 0, 3)
    assert "model tier: nothing to score (3 dropped by cleaning/dedup skipped); the model was not loaded" in s.render()
    assert run_query(root, "SELECT count(*), count(cond_nll) FROM turn_scores")[1] == [(3, 0)]
    assert all(r.passed for r in score_contracts(root)), [r.line() for r in score_contracts(root) if not r.passed]

    def no_units(units: list, scorer: TurnScorer) -> list:
        raise AssertionError(f"{len(units)} units sent to workers with nothing to score")
    s = score(root, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")), progress=False,
              runner=no_units)  # a distributed model tier: no unit either
    assert (s.skipped_dropped, s.model_trajectories_total) == (3, 0)


def test_a_trajectory_without_turns_is_not_counted_as_left_unscored(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The model tier's total counted a trajectory with no turns (nothing to score): a cap that cut nothing
    said "capped ... 1 of 2 trajectories scored"."""
    import json

    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps({"messages": m}) for m in [
        [{"role": "user", "content": "hi"}],
        [{"role": "user", "content": "list"}, {"role": "assistant", "content": "", "tool_calls": [call]},
         {"role": "tool", "tool_call_id": "c", "content": "a.txt"}]]) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "in.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    assert sorted(run_query(root, "SELECT num_turns FROM trajectories")[1]) == [(0,), (1,)]
    said: list[str] = []
    s = score(root, ScoreConfig(max_tokens=100_000, model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")),
              progress=False, echo=said.append)
    assert (s.model_trajectories, s.model_trajectories_total, s.passed_over) == (1, 1, 0)
    assert not [m for m in said if "capped" in m], said


def test_the_token_cap_passes_over_a_trajectory_too_large_and_fills_up(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Under `--max-tokens`, the sample used to end at the first trajectory that did not fit: one
    large trajectory early in the md5 order left the small ones after it unscored."""
    import json

    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    def chat(i: int, words: int) -> str:
        call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})}}
        return json.dumps({"messages": [{"role": "user", "content": f"task {i}"},
                                        {"role": "assistant", "content": "", "tool_calls": [call]},
                                        {"role": "tool", "tool_call_id": "c", "content": " ".join(f"w{i}x{j}" for j in range(words))}]})
    (tmp_path / "in.jsonl").write_text("\n".join([chat(0, 3000)] + [chat(i, 20) for i in range(1, 6)]) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "in.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    big = run_query(root, "SELECT trajectory_id FROM trajectories WHERE task = 'task 0'")[1][0][0]
    # a seed whose md5(seed:trajectory_id) order puts the large one first
    seed = next(s for s in range(100) if run_query(root, f"""SELECT trajectory_id FROM trajectories
                ORDER BY md5('{s}:' || trajectory_id) LIMIT 1""")[1][0][0] == big)
    s = score(root, ScoreConfig(surface=SurfaceConfig(seed=seed), max_tokens=1500,
                                model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")), progress=False)
    assert (s.model_trajectories, s.passed_over) == (5, 1)
    assert run_query(root, """SELECT t.task = 'task 0', count(s.cond_nll) > 0 FROM turn_scores s
                              JOIN trajectories t USING (trajectory_id) GROUP BY 1 ORDER BY 1""")[1] == [(False, True), (True, False)]


def test_a_huge_observation_is_cut_before_planning_with_the_same_scores(tmp_path: Path, tiny_model_dir: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import pipelines.score as score_mod
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    big = " ".join(f"line{j} of the log" for j in range(40_000))  # 0.6 MB, far past a 1,024-token window

    def call(i: int) -> dict:
        return {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat f{i}"})}}
    msgs = [{"role": "user", "content": "read the logs"}]
    for i, obs in enumerate(["small output", big, "done"]):
        msgs += [{"role": "assistant", "content": "", "tool_calls": [call(i)]}, {"role": "tool", "tool_call_id": f"c{i}", "content": obs}]
    (tmp_path / "big.jsonl").write_text(json.dumps({"messages": msgs}) + "\n")
    root = tmp_path / "corpus"
    ingest([tmp_path / "big.jsonl"], root, IngestConfig(domain_override="terminal"), progress=False)
    cfg = ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"))
    sql = "SELECT * FROM turn_scores ORDER BY turn_index"
    cut = score(root, cfg, progress=False)
    cut_rows = run_query(root, sql)[1]
    seen: list[int] = []
    default_bound = score_mod.text_bound
    monkeypatch.setattr(score_mod, "text_bound", lambda scorer: seen.append(default_bound(scorer)) or 1 << 40)  # never cut
    whole = score(root, cfg, progress=False)
    assert seen[0] < len(big)  # the default bound cuts it
    assert run_query(root, sql)[1] == cut_rows and cut.truncated_turns == whole.truncated_turns == 1
    assert cut.model_tokens == whole.model_tokens


def test_scores_from_before_cleaning_changed_are_not_current(corpus: Path, tiny_model_dir: Path) -> None:
    """The model tier scores what cleaning and dedup keep when it runs; verdicts that change later
    make its choice stale (a warning), as an ingest after scoring does."""
    from pipelines.clean import CleanConfig, clean
    from pipelines.score_model import ModelScoreConfig

    clean(corpus, progress=False)
    score(corpus, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"), max_tokens=500),
          progress=False)
    assert {r.name: r.passed for r in score_contracts(corpus)}["turn_scores_current"] is True
    clean(corpus, CleanConfig(min_turns=1), progress=False)  # other verdicts: other trajectories kept
    current = {r.name: r for r in score_contracts(corpus)}["turn_scores_current"]
    assert not current.passed and current.metadata["model_tier_verdicts_current"] is False
    score(corpus, ScoreConfig(tier="surface"), progress=False)  # the model columns carried over, and their choice with them
    assert {r.name: r.passed for r in score_contracts(corpus)}["turn_scores_current"] is False


def test_the_model_tier_after_a_new_ingest_scores_the_new_turns_too(corpus: Path, tiny_model_dir: Path) -> None:
    """The surface rows of a table written before the ingest do not decide which turns the new table
    holds: every turn has its row, and the table is current."""
    from pipelines.ingest import ingest
    from pipelines.score_model import ModelScoreConfig
    from pipelines.side import stale_side_tables
    from pipelines.store import Corpus

    score(corpus, ScoreConfig(tier="surface"), progress=False)
    ingest([ROOT / "data" / "sample" / "corpus" / "swe-agent"], corpus, progress=False)
    s = score(corpus, ScoreConfig(tier="model", model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"),
                                  max_tokens=2000), progress=False)
    n_turns = run_query(corpus, "SELECT count(*) FROM turns")[1][0][0]
    assert run_query(corpus, "SELECT count(*), count(DISTINCT (trajectory_id, turn_index)) FROM turn_scores")[1][0] == (
        n_turns, n_turns)
    assert "surface" not in s.carried and s.turns == n_turns
    assert stale_side_tables(Corpus(corpus)) == {}
    assert all(r.passed for r in score_contracts(corpus)), [r.line() for r in score_contracts(corpus) if not r.passed]


def test_carried_surface_columns_keep_their_settings_on_record(corpus: Path, tiny_model_dir: Path) -> None:
    import orjson
    import pyarrow.parquet as pq

    from pipelines.score_model import ModelScoreConfig
    from pipelines.side import side_path
    from pipelines.store import Corpus

    score(corpus, ScoreConfig(tier="surface", surface=SurfaceConfig(seed=7)), progress=False)
    s = score(corpus, ScoreConfig(tier="model", model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"),
                                  max_tokens=500), progress=False)
    assert s.carried == ["surface"]
    doc = orjson.loads(pq.read_schema(side_path(Corpus(corpus), "turn_scores")).metadata[b"worldline.config"])
    assert doc["surface"]["seed"] == 7
    assert doc["surface_fingerprint"] == SurfaceConfig(seed=7).fingerprint() != SurfaceConfig().fingerprint()


def test_the_table_fingerprint_follows_what_it_holds(corpus: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    """A model tier added under the same options changes the loss masks: the table's fingerprint (which an
    export records) changes with it, so an export made before is no longer up to date. A surface re-run that
    carries the model columns over, with the same settings, is the same table."""
    from pipelines.export import export
    from pipelines.score_model import ModelScoreConfig
    from pipelines.side import side_info
    from pipelines.store import Corpus
    from tests.pipelines.export_support import small_config, tokenizer

    surface = score(corpus, ScoreConfig(tier="surface", max_tokens=500), progress=False)
    tok = tokenizer()
    assert not export(corpus, tmp_path / "x", small_config(), tokenizer=tok, progress=False, echo=lambda m: None).up_to_date
    model = score(corpus, ScoreConfig(tier="model", max_tokens=500,
                                      model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")), progress=False)
    assert model.model_turns > 0 and model.fingerprint != surface.fingerprint
    assert side_info(Corpus(corpus), "turn_scores")["fingerprint"] == model.fingerprint
    assert not export(corpus, tmp_path / "x", small_config(), tokenizer=tok, progress=False, echo=lambda m: None).up_to_date
    again = score(corpus, ScoreConfig(tier="surface", max_tokens=500), progress=False)
    assert again.carried == ["model"] and again.fingerprint == model.fingerprint


def test_a_model_tier_run_says_which_surface_settings_it_did_not_apply(corpus: Path, tiny_model_dir: Path) -> None:
    """`--tier model --seed 5` over surface columns drawn with seed 0 keeps them (the keep draw is the
    surface tier's): said, not silent; the fingerprint on record is the table's, seed 0's."""
    from pipelines.score_model import ModelScoreConfig
    from pipelines.side import side_info
    from pipelines.store import Corpus

    score(corpus, ScoreConfig(tier="surface"), progress=False)
    keep = run_query(corpus, "SELECT sum(keep::INT), sum(keep_draw) FROM turn_scores")[1]
    said: list[str] = []
    s = score(corpus, ScoreConfig(tier="model", surface=SurfaceConfig(seed=5), max_tokens=300,
                                  model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")),
              progress=False, echo=said.append)
    assert s.carried == ["surface"]
    assert run_query(corpus, "SELECT sum(keep::INT), sum(keep_draw) FROM turn_scores")[1] == keep
    assert [m for m in said if not m.startswith("score: model tier capped")] == [
        "score: --tier model keeps the surface columns (category, keep) computed with other settings "
        "(seed 0, not 5); --tier surface or both applies this run's"]
    said.clear()
    s0 = score(corpus, ScoreConfig(tier="model", max_tokens=300, model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")),
               progress=False, echo=said.append)
    assert [m for m in said if not m.startswith("score: model tier capped")] == []  # the same settings: nothing to say
    # under the cap the seed picked which trajectories have model scores: another table, another fingerprint
    assert s0.fingerprint != s.fingerprint
    assert side_info(Corpus(corpus), "turn_scores")["config"]["model"]["sample_seed"] == 0


def test_a_trajectory_without_turns_is_not_counted_as_dropped(tmp_path: Path, tiny_model_dir: Path) -> None:
    import orjson

    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    f = tmp_path / "chat.jsonl"
    f.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in [
        {"messages": [{"role": "system", "content": "sys only"}, {"role": "user", "content": "hello there"}]},
        {"messages": [{"role": "user", "content": "list"}, call, {"role": "tool", "tool_call_id": "c1", "content": "a b"}]}]))
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    s = score(corpus, ScoreConfig(tier="both", model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32")),
              progress=False)
    assert (s.skipped_dropped, s.model_turns) == (0, 1)  # neither clean nor dedup ran: nothing dropped


def test_the_model_tier_says_when_the_verdicts_it_skips_by_are_stale(corpus: Path, tiny_model_dir: Path) -> None:
    from pipelines.clean import clean
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    clean(corpus, progress=False)
    ingest([ROOT / "data" / "sample" / "corpus" / "tau-bench"], corpus, IngestConfig(workers=1), progress=False)
    said: list[str] = []
    score(corpus, ScoreConfig(tier="surface"), progress=False, echo=said.append)
    assert said == []  # the surface tier does not read them
    score(corpus, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), dtype="float32"), max_tokens=200),
          progress=False, echo=said.append)
    assert said[0] == ("score: side table cleaning is stale: computed before the corpus last changed; rerun "
                       "`worldline clean` (the model tier skips by it as it is)")


def test_a_window_too_small_for_the_model_fails_before_the_surface_pass(tiny_model_dir: Path, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`--max-context 20` was refused only by the scorer's setup, after the whole surface pass
    (minutes on a large corpus): the model's tokenizer and config say so before any turn is read."""
    import pipelines.score as score_module
    from pipelines.ingest import ingest
    from pipelines.score_model import ModelScoreConfig

    out = tmp_path / "c"
    ingest([ROOT / "data" / "sample" / "corpus" / "tau-bench"], out, progress=False)
    monkeypatch.setattr(score_module, "_score", lambda *a, **k: pytest.fail("the corpus was scored"))
    with pytest.raises(ValueError, match=r"^--max-context 20: one empty turn of this model's chat template takes "):
        score(out, ScoreConfig(model=ModelScoreConfig(model=str(tiny_model_dir), max_context=20, dtype="float32")),
              progress=False)


@pytest.mark.parametrize("argv, said", [
    (["--max-tokens", str(10**20)], "argument --max-tokens: 100000000000000000000: must be below 2**63 in magnitude"),
    (["--batch-tokens", str(10**20)], "argument --batch-tokens: 100000000000000000000: must be below 2**63 in magnitude"),
])
def test_integers_past_64_bits_are_one_line_before_any_work(argv: list[str], said: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """They were taken, and the run crashed in orjson ("Integer exceeds 64-bit range") once the
    surface and model tiers were done, writing nothing. The command line refuses them as usage errors
    (exit 2); the configs themselves (Python, Dagster) with a ValueError."""
    with pytest.raises(SystemExit) as e:
        main(["score", str(tmp_path / "none"), *argv])
    assert e.value.code == 2 and said in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"^--max-tokens 100000000000000000000: must be positive and below 2\*\*63"):
        ScoreConfig(max_tokens=10**20)
    with pytest.raises(ValueError, match=r"^--batch-tokens 100000000000000000000: must be below 2\*\*63"):
        ModelScoreConfig(max_batch_tokens=10**20)


def test_a_nan_mask_bound_is_refused() -> None:
    """A NaN bound made its test false for every turn, turning it off without a word."""
    for kw in ({"min_ifd": math.nan}, {"min_uncond_nll": math.nan}, {"max_ifd": math.nan}):
        with pytest.raises(ValueError, match=f"MaskPolicy.{next(iter(kw))} is NaN"):
            MaskPolicy(**kw)


def test_a_surface_rerun_on_a_grown_corpus_says_the_new_turns_lack_model_scores(tiny_model_dir: Path, tmp_path: Path) -> None:
    """`--tier surface` after an ingest carried the model columns over: the new turns had none, the
    summary said only "(carried over: model)" and turn_scores_current passed."""
    from pipelines.ingest import ingest
    from pipelines.score_model import ModelScoreConfig

    out = tmp_path / "c"
    model = ModelScoreConfig(model=str(tiny_model_dir), max_context=512, dtype="float32")
    ingest([ROOT / "data" / "sample" / "corpus" / "tau-bench"], out, progress=False)
    score(out, ScoreConfig(model=model), progress=False)
    ingest([ROOT / "data" / "sample" / "corpus" / "intercode"], out, progress=False)
    lines: list[str] = []
    s = score(out, ScoreConfig(tier="surface"), progress=False, echo=lines.append)
    assert s.carried == ["model"] and s.model_stale
    assert "  model tier: carried over from an earlier corpus; the turns added since have no model scores (run --tier model)" \
        in s.render().splitlines()
    assert lines == [f"score: the model tier's columns are carried over from a run on an earlier corpus: turns ingested since "
                     f"have no model scores (their loss follows the surface tier alone); run `worldline score {out} --tier model`"]
    [current] = [r for r in score_contracts(out) if r.name == "turn_scores_current"]
    assert not current.passed and current.metadata["model_tier_corpus_current"] is False
    assert current.metadata["rerun"] == f"worldline score {out} --tier model"
    s = score(out, ScoreConfig(tier="model", model=model), progress=False)
    assert not s.model_stale and all(r.passed for r in score_contracts(out))


def test_a_trajectory_without_an_observation_is_not_counted_as_model_scored(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A chat with no tool call has turns but nothing to score: it counted as a trajectory the model
    tier scored ("1 of 2 trajectories scored" with 0 turns under --max-tokens 1)."""
    import json

    from pipelines.ingest import IngestConfig, ingest
    from pipelines.score_model import ModelScoreConfig

    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}
    rows = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
            {"messages": [{"role": "user", "content": "list"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c1", "content": "a.txt"}]}]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "c"
    ingest([tmp_path / "chat.jsonl"], out, IngestConfig(domain_override="terminal", workers=1), progress=False)
    model = ModelScoreConfig(model=str(tiny_model_dir), max_context=256, dtype="float32")
    s = score(out, ScoreConfig(model=model), progress=False)
    assert (s.model_trajectories, s.model_trajectories_total, s.model_turns) == (1, 1, 1)
    s = score(out, ScoreConfig(model=model, max_tokens=1), progress=False)
    assert (s.model_trajectories, s.model_trajectories_total, s.model_turns) == (0, 1, 0)
