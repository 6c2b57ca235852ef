"""`worldline traces CORPUS --out DIR --endpoint URL --model NAME [-k K]`: arguments and run.

Kept apart from `pipelines.cli` (which only registers it) so the main parser stays small; nothing
heavy is imported until the command runs. The API key is read from the environment variable named
by `--api-key-env` (which must then be set: a key meant for one endpoint is not sent to another by a
fallback), by default `WORLDLINE_TRACES_API_KEY`, then `OPENAI_API_KEY`; never from the command line,
and it is recorded nowhere.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from schemas.options import int_option, seed_option


def _pairs(items: list[str], what: str) -> tuple[tuple[str, float], ...]:
    out = {}
    for it in items:
        name, sep, v = it.partition("=")
        try:
            out[name.strip()] = float(v)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"{what} {it!r}: use NAME=VALUE, e.g. terminal=0.6")
    return tuple(sorted(out.items()))


def add_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("corpus", type=Path)
    s.add_argument("--out", required=True, type=Path, help="output directory (SFT set, candidates, cache)")
    s.add_argument("--endpoint", default=os.environ.get("WORLDLINE_TRACES_BASE_URL"),
                   help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1), or `local` for an in-process model; "
                        "default: $WORLDLINE_TRACES_BASE_URL")
    s.add_argument("--model", default=os.environ.get("WORLDLINE_TRACES_MODEL"),
                   help="model name at the endpoint (with --endpoint local: `smollm2`, a .gguf or a HF directory); "
                        "default: $WORLDLINE_TRACES_MODEL")
    s.add_argument("-k", type=int_option, default=4, help="candidates per query")
    s.add_argument("--api-key-env", help="environment variable holding the key (default: WORLDLINE_TRACES_API_KEY, "
                   "then OPENAI_API_KEY); one named here must be set, no other is tried")
    s.add_argument("--max-queries", type=int_option, default=1000, help="turns to ask about")
    s.add_argument("--domains", default="", help="comma-separated domains (default: all)")
    s.add_argument("--balance", default="domain,source_format", help="strata to balance queries across (empty: none)")
    s.add_argument("--per-stratum", type=int_option, default=0, help="at most this many queries per domain × source (0: no cap)")
    s.add_argument("--max-target-chars", type=int_option, default=4000, help="longest real observation to predict")
    s.add_argument("--history-turns", type=int_option, default=8, help="earlier environment turns in each query")
    s.add_argument("--max-tokens", type=int_option, default=512, help="generation budget per candidate")
    s.add_argument("--temperature", type=float, default=0.8, help="sampling temperature")
    s.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass")
    s.add_argument("--templates", default="chat,transcript,compact", help="prompt-template variants to draw from")
    s.add_argument("--no-few-shot", action="store_true", help="no worked example in the teacher prompt")
    s.add_argument("--prefill-think", action="store_true",
                   help="start the answer with `<think>` (needs continue_final_message: vLLM, SGLang, serve_local)")
    s.add_argument("--max-system-chars", type=int_option, default=6000, help="system prompt (task, action space) in the teacher prompt (0: no limit)")
    s.add_argument("--max-observation-chars", type=int_option, default=3000, help="per history observation in the teacher prompt (0: no limit)")
    s.add_argument("--max-history-chars", type=int_option, default=12000, help="all history turns together in the teacher prompt (0: no history)")
    s.add_argument("--threshold", type=float, default=0.5, help="keep the best candidate at or above this score")
    s.add_argument("--domain-threshold", action="append", default=[], metavar="DOMAIN=T", help="per-domain threshold")
    s.add_argument("--judge", action="store_true", help="also grade candidates with an LLM judge (same endpoint)")
    s.add_argument("--judge-model", help="judge model at the endpoint (default: --model)")
    s.add_argument("--judge-endpoint", help="judge base URL (default: --endpoint)")
    s.add_argument("--judge-weight", type=float, help="with --judge: the judge's share of a candidate's score (default 0.3)")
    s.add_argument("--judge-required", action="store_true", help="reject candidates the judge cannot grade")
    s.add_argument("--judge-max-tokens", type=int_option, help="generation budget per judge verdict (default 160)")
    s.add_argument("--concurrency", type=int_option, default=8, help="requests in flight")
    s.add_argument("--rps", type=float, help="rate limit: requests per second")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds per request")
    s.add_argument("--retries", type=int_option, default=4, help="retries of a transient failure")
    s.add_argument("--seed", type=seed_option, default=0, help="seeds the choice of queries and templates, and the sampling")
    s.add_argument("--cache", type=Path, help="generation cache file (default: OUT/cache.sqlite)")
    s.add_argument("--no-side-table", action="store_true", help="do not record the run in the corpus (side table traces)")
    s.add_argument("--threads", type=int_option, default=0, help="with --endpoint local: torch threads")
    s.add_argument("--quiet", action="store_true", help="no progress lines")


def _generator(endpoint: str, model: str, a: argparse.Namespace):  # noqa: ANN202 - a Generator
    from pipelines.traces.generate import EndpointGenerator, LocalGenerator, check_client_options

    if endpoint == "local":
        from pipelines.traces.engine import EngineConfig, LocalEngine

        check_client_options(a.concurrency, a.rps, a.timeout, a.retries)
        return LocalGenerator(LocalEngine(EngineConfig(model=model, max_batch=a.concurrency, threads=a.threads)))
    key = os.environ.get(a.api_key_env) if a.api_key_env else None  # None: the generator's default variables
    return EndpointGenerator(endpoint, model, key, a.concurrency, a.rps, a.timeout, a.retries)


def run(a: argparse.Namespace) -> int:
    from collectors.policies import EndpointError
    from pipelines.traces.generate import Sampling
    from pipelines.traces.prompts import PromptLimits
    from pipelines.traces.queries import QueryConfig
    from pipelines.traces.stage import JudgeConfig, TracesConfig, traces

    if not a.endpoint or not a.model:
        raise ValueError("traces needs --endpoint URL (or `local`) and --model NAME, "
                         "or WORLDLINE_TRACES_BASE_URL and WORLDLINE_TRACES_MODEL")
    if a.threads < 0:  # (docs/traces.md lists it with the checks; it was refused only with `local`)
        raise ValueError(f"--threads must be at least 0 (got {a.threads})")
    if a.api_key_env and not os.environ.get(a.api_key_env):  # never fall back to another variable's key
        raise ValueError(f"--api-key-env {a.api_key_env}: that environment variable is not set (or is empty)")
    judge_options = {"weight": a.judge_weight, "max_tokens": a.judge_max_tokens, "required": a.judge_required or None}
    judge = JudgeConfig(**{k: v for k, v in judge_options.items() if v is not None})  # the defaults are JudgeConfig's
    # any judge option given, even at its default value, without --judge is refused
    given = sorted([f"--judge-{k.replace('_', '-')}" for k, v in judge_options.items() if v is not None]
                   + [flag for flag, value in (("--judge-model", a.judge_model), ("--judge-endpoint", a.judge_endpoint))
                      if value is not None])
    if not a.judge and given:
        raise ValueError(f"{', '.join(given)} set without --judge: add --judge to grade candidates with an LLM judge")
    q = QueryConfig(max_queries=a.max_queries, domains=tuple(d for d in a.domains.split(",") if d),
                    per_stratum=a.per_stratum, balance=tuple(b for b in a.balance.split(",") if b), max_target_chars=a.max_target_chars, history_turns=a.history_turns,
                    seed=a.seed)
    cfg = TracesConfig(
        queries=q, k=a.k, sampling=Sampling(a.max_tokens, a.temperature, a.top_p),
        templates=tuple(t for t in a.templates.split(",") if t),
        limits=PromptLimits(a.max_system_chars, a.max_observation_chars, a.max_history_chars, not a.no_few_shot),
        prefill="<think>\n" if a.prefill_think else "", seed=a.seed, threshold=a.threshold,
        thresholds=_pairs(a.domain_threshold, "--domain-threshold"),
        judge=judge if a.judge else None,
        write_side_table=not a.no_side_table, cache_path=str(a.cache) if a.cache else None)
    try:
        gen = _generator(a.endpoint, a.model, a)
        judge = _generator(a.judge_endpoint or a.endpoint, a.judge_model or a.model, a) if a.judge else None
        if judge is not None and a.endpoint == "local" and (a.judge_endpoint or a.endpoint) == "local" \
                and (a.judge_model or a.model) == a.model:
            judge = gen  # one model in memory
        summary = traces(a.corpus, a.out, gen, cfg, judge, progress=not a.quiet, echo=lambda m: print(m, file=sys.stderr))
    except EndpointError as e:
        print(f"worldline traces: error: {e}", file=sys.stderr)
        return 1
    print(summary.render())
    return 0
