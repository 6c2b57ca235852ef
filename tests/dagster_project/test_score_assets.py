"""Dagster: `turn_scores` materializes through the ScoringModelResource and its checks pass."""

from __future__ import annotations

import os
from pathlib import Path

import dagster as dg
import pytest

from dagster_project.resources import CorpusResource
from dagster_project.score_assets import ScoringModelResource, turn_scores, turn_scores_checks
from pipelines.ingest import ingest
from pipelines.side import side_info
from pipelines.store import Corpus

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def corpus(tmp_path: Path) -> CorpusResource:
    out = tmp_path / "corpus"
    ingest([ROOT / "data" / "sample" / "corpus" / "intercode"], out, progress=False)
    return CorpusResource(root=str(out), inbox=str(tmp_path / "inbox"), settle_seconds=0)


def test_model_settings_with_the_surface_tier_are_refused(corpus: CorpusResource) -> None:
    """They were ignored (the CLI refuses them): a run that was meant to cap or load a model scored the surface alone."""
    res = dg.materialize([turn_scores], raise_on_error=False, resources={
        "corpus": corpus, "scoring_model": ScoringModelResource(tier="surface", model="/no/such/model.gguf", max_tokens=100)})
    assert not res.success
    [failure] = [e for e in res.all_events if e.is_step_failure]
    assert ("scoring_model: model, max_tokens apply only to the model tier; tier surface runs no model"
            in failure.step_failure_data.error.cause.message)
    assert side_info(Corpus(corpus.root), "turn_scores") is None


def test_surface_tier_materializes_with_checks(corpus: CorpusResource) -> None:
    res = dg.materialize([turn_scores, turn_scores_checks], resources={
        "corpus": corpus, "scoring_model": ScoringModelResource(tier="surface")})
    assert res.success
    [mat] = res.asset_materializations_for_node("turn_scores")
    md = {k: v.value for k, v in mat.metadata.items()}
    assert md["tier"] == "surface" and md["turns"] > 0
    assert md["fingerprint"] == side_info(Corpus(corpus.root), "turn_scores")["fingerprint"]
    assert "| retrieval |" in md["categories"] and "| terminal |" in md["loss_by_domain"]
    assert {e.check_name: e.passed for e in res.get_asset_check_evaluations()} == {
        "turn_scores_cover_turns": True, "turn_scores_valid": True, "turn_scores_current": True}


def test_model_tier_uses_the_resource_model(corpus: CorpusResource, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from tests.support.tiny_model import save_tiny_gpt2

    d = save_tiny_gpt2(tmp_path / "tiny")
    res = dg.materialize([turn_scores, turn_scores_checks], resources={
        "corpus": corpus, "scoring_model": ScoringModelResource(model=str(d), tier="both", max_tokens=2000, dtype="float32")})
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("turn_scores")[0].metadata.items()}
    assert md["device"] == "cpu" and md["dtype"] == "float32" and 0 < md["model_tokens"] <= 2000
    assert all(e.passed for e in res.get_asset_check_evaluations())


def test_model_tier_on_beam_workers(tmp_path: Path) -> None:
    """`beam_runner` set: the asset's model tier runs as a Beam pipeline whose workers load the
    model; this process loads none; a setting Beam cannot honour fails the run with its reason."""
    pytest.importorskip("torch")
    from pipelines.score import MIN_UNITS
    from tests.support.tiny_model import save_tiny_gpt2

    out = tmp_path / "corpus"
    ingest([ROOT / "data" / "sample" / "corpus" / "intercode" / "ic_ctf_gpt-4_25_turns.json"], out, progress=False)
    corpus = CorpusResource(root=str(out), inbox=str(tmp_path / "inbox"), settle_seconds=0)
    settings = {"model": str(save_tiny_gpt2(tmp_path / "tiny")), "dtype": "float32", "beam_runner": "DirectRunner"}
    model = ScoringModelResource(**settings)
    assert model.scorer() is None
    res = dg.materialize([turn_scores, turn_scores_checks], resources={"corpus": corpus, "scoring_model": model})
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("turn_scores")[0].metadata.items()}
    assert (md["model_runner"], md["model_units"], md["device"]) == ("Beam DirectRunner", MIN_UNITS, "cpu")
    assert md["model_trajectories"] > 0 and md["model_tokens"] > 0
    assert all(e.passed for e in res.get_asset_check_evaluations())
    capped = ScoringModelResource(**settings, max_tokens=1000)
    res = dg.materialize([turn_scores], resources={"corpus": corpus, "scoring_model": capped}, raise_on_error=False)
    assert not res.success
    [failure] = [e for e in res.all_events if e.is_step_failure]
    assert "--max-tokens takes trajectories in one order" in str(failure.step_failure_data.error)


def test_joins_the_definitions() -> None:
    """The lines the code location adds: the asset, its checks and the resource resolve together."""
    from dagster_project.assets import corpus_report, ingested_traces
    from dagster_project.checks import corpus_contracts
    from dagster_project.resources import build_resources

    defs = dg.Definitions(assets=[ingested_traces, corpus_report, turn_scores],
                          asset_checks=[corpus_contracts, turn_scores_checks],
                          resources={**build_resources(), "scoring_model": ScoringModelResource()})
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {"ingested_traces", "turn_scores"}
    assert {c.name for c in turn_scores_checks.check_specs} == {
        "turn_scores_cover_turns", "turn_scores_valid", "turn_scores_current"}
