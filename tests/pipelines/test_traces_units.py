"""The model-free parts of the thinking-trace stage: strict parsing, the published form, judge
replies, templates and seeds, the generation cache, the rate limiter, and query selection over the
sample corpus (kept turns, splits, balance, weights)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from pipelines.clean import clean
from pipelines.dedup import dedup
from pipelines.export import SplitConfig, group_key, split_of
from pipelines.ingest import ingest
from pipelines.query import connect
from pipelines.render import Group
from pipelines.score import ScoreConfig, score
from pipelines.traces.engine import ChatRequest
from pipelines.traces.form import assistant_content, parse_candidate
from pipelines.traces.generate import EndpointGenerator, GenerationCache, RateLimiter, Sampling, cache_key
from pipelines.traces.prompts import (
    TEMPLATES,
    PromptLimits,
    PromptQuery,
    candidate_seed,
    choose_template,
    clip,
    judge_messages,
    parse_judgement,
)
from pipelines.traces.queries import QueryConfig, load_queries, select_queries

GOOD = "<think>\nls lists the directory.\n</think>\n<predicted_observation>\na.txt\nb.txt\n</predicted_observation>"


@pytest.mark.parametrize(("text", "finish", "reason"), [
    ("", "stop", "empty"),
    ("   \n", "stop", "empty"),
    ("Sure! <think>x</think><predicted_observation>y</predicted_observation>", "stop", "text_before_think"),
    ("<predicted_observation>y</predicted_observation>", "stop", "missing_think"),
    ("<think>a</think><think>b</think><predicted_observation>y</predicted_observation>", "stop", "repeated_think"),
    ("<think>a", "stop", "unclosed_think"),
    ("<think>a", "length", "truncated"),
    ("<think>a</think>", "stop", "missing_prediction"),
    ("<think>a</think>", "length", "truncated"),
    ("<think>a</think>y</predicted_observation>", "stop", "missing_prediction"),
    ("<think>a</think> so: <predicted_observation>y</predicted_observation>", "stop", "text_between_blocks"),
    ("<think>a</think><predicted_observation>y<predicted_observation>z</predicted_observation>", "stop", "repeated_prediction"),
    ("<think>a</think><predicted_observation>y", "stop", "unclosed_prediction"),
    ("<think>a</think><predicted_observation>y", "length", "truncated"),
    ("<think>a</think>\n<predicted_obs", "length", "truncated"),  # cut inside the opening tag
    ("<think>a</think>\n\n<", "length", "truncated"),
    ("<think>a</think>\n<predicted_obs", "stop", "missing_prediction"),
    ("<think>a</think>\nthe output is", "length", "missing_prediction"),
    ("<think>a</think><predicted_observation>y</predicted_observation> hope this helps", "stop", "text_after_prediction"),
    ("<think> \n </think><predicted_observation>y</predicted_observation>", "stop", "empty_think"),
])
def test_strict_parse_rejects_with_reason(text: str, finish: str, reason: str) -> None:
    p = parse_candidate(text, finish)
    assert (p.ok, p.reason, p.prediction) == (False, reason, None)


def test_strict_parse_accepts_and_round_trips() -> None:
    p = parse_candidate(GOOD, "stop")
    assert (p.ok, p.reasoning, p.prediction) == (True, "ls lists the directory.", "a.txt\nb.txt")
    # complete even if the budget ran out right after the closing tag
    assert parse_candidate(GOOD + "\n", "length").ok
    # an empty observation is a real outcome; leading spaces of terminal output survive
    assert parse_candidate("<think>mkdir prints nothing</think><predicted_observation></predicted_observation>").prediction == ""
    assert parse_candidate("<think>r</think>\n<predicted_observation>\n  indented\n\n</predicted_observation>").prediction == "  indented\n"
    # (`foo\r`: its published form ends `foo\r\n</predicted_observation>`, which read back as `foo`, and the
    # stage wrote an SFT row its own check refused)
    for pred in ("", "x", "\nleading newline", "  spaced  ", "two\nlines\n", "foo\r", "\r\nx\r\n", "\r"):
        content = assistant_content("why", pred)
        q = parse_candidate(content)
        assert (q.ok, q.reasoning, q.prediction) == (True, "why", pred)
    assert assistant_content("r", "p") == "<think>\nr\n</think>\n\n<predicted_observation>\np\n</predicted_observation>"
    # a generation framed with CRLF on both sides
    assert parse_candidate("<think>r</think><predicted_observation>\r\na\r\nb\r\n</predicted_observation>").prediction == "a\r\nb"


def test_judge_replies() -> None:
    j = parse_judgement('Here: {"format": 5, "factuality": 3, "consistency": 4, "realism": 5, "quality": 3} done')
    assert (j.ok, j.score, j.criteria["factuality"]) == (True, 0.75, 3)  # mean 4 → (4 - 1) / 4
    assert parse_judgement('{"format": 1, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}').score == 0.0
    assert parse_judgement('{"format": 5}').reason == "missing criteria ['factuality', 'consistency', 'realism', 'quality']"
    assert parse_judgement('{"format": 6, "factuality": 1, "consistency": 1, "realism": 1, "quality": 1}').reason == \
        "criterion 'format' is 6, not an integer from 1 to 5"
    assert parse_judgement("4/5").reason == "no JSON object"
    assert parse_judgement(None).reason == "empty"


def test_judge_sees_prediction_not_reasoning() -> None:
    q = PromptQuery("terminal", "You are the environment. Domain: terminal.", [Group(0, "pwd", "/root")], "ls")
    msgs = judge_messages(q, "a.txt", "PREDICTION-TEXT", PromptLimits())
    text = "\n".join(m["content"] for m in msgs)
    assert "PREDICTION-TEXT" in text and "a.txt" in text and "pwd" in text and "<think>" not in text


def test_the_judge_sees_half_the_system_prompt_limit() -> None:
    """`--max-system-chars 1` gave the judge the whole system prompt (1 // 2 = 0: no limit)."""
    system = "S" * 5000
    q = PromptQuery("terminal", system, [], "ls")

    def env(lim: PromptLimits) -> str:
        return judge_messages(q, "a.txt", "P", lim)[-1]["content"].split("## Action")[0]

    assert system in env(PromptLimits(max_system_chars=0))  # no limit
    assert system not in env(PromptLimits(max_system_chars=1)) and len(env(PromptLimits(max_system_chars=1))) < 100
    assert 1900 < env(PromptLimits(max_system_chars=4000)).count("S") < 2000  # head and tail of 2,000, the note within


def test_templates_and_seeds_are_deterministic() -> None:
    q = PromptQuery("terminal", "SYSTEM", [Group(0, "pwd", "/root"), Group(1, "cat f", "x" * 100)], "ls -l")
    lim = PromptLimits(max_observation_chars=60, max_history_chars=70)
    for name, fn in TEMPLATES.items():
        m = fn(q, lim)
        assert m == fn(q, lim) and m[0]["role"] == "system" and m[-1]["role"] == "user", name
        assert "ls -l" in m[-1]["content"] and "<predicted_observation>" in m[0]["content"], name
        assert m[1]["content"] != q.user and m[2]["role"] == "assistant", name  # the worked example
    # the 100-character observation is clipped to 60 with the omission stated (the note takes 33:
    # 17 head + 9 tail characters kept); the history (8 + 64 characters) exceeds 70, so the
    # oldest turn leaves the window
    assert clip("x" * 100, 60) == "x" * 17 + "\n[... 74 characters omitted ...]\n" + "x" * 9
    chat = TEMPLATES["chat"](q, lim)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert chat[3]["content"] == "cat f"
    names = ("chat", "transcript", "compact")
    picks = Counter(choose_template(names, 0, f"t{i}:0") for i in range(300))
    assert set(picks) == set(names) and min(picks.values()) > 60  # all used, roughly evenly
    assert choose_template(names, 0, "abc:1") == choose_template(names, 0, "abc:1")
    assert candidate_seed(0, "abc:1", 0) != candidate_seed(0, "abc:1", 1) != candidate_seed(1, "abc:1", 1)
    with pytest.raises(ValueError, match="unknown prompt templates"):
        choose_template(("chat", "poem"), 0, "x")


def test_cache_key_and_cache(tmp_path: Path) -> None:
    msgs = [{"role": "user", "content": "ls"}]
    s = Sampling(64, 0.7, 0.95)
    k = cache_key("m", msgs, s, 1)
    assert k == cache_key("m", [{"role": "user", "content": "ls"}], Sampling(64, 0.7, 0.95), 1)
    changed = {cache_key("m2", msgs, s, 1), cache_key("m", msgs, Sampling(65, 0.7, 0.95), 1), cache_key("m", msgs, s, 2),
               cache_key("m", [{"role": "user", "content": "ls "}], s, 1), cache_key("m", msgs, s, 1, kind="judge")}
    assert len(changed) == 5 and k not in changed
    c = GenerationCache(tmp_path / "c.sqlite")
    c.put(k, {"text": "x"})
    c.close()
    c2 = GenerationCache(tmp_path / "c.sqlite")  # persisted: a new process sees it
    assert (c2.get(k), c2.get("nope"), len(c2)) == ({"text": "x"}, None, 1)
    c2.close()


def test_rate_limiter() -> None:
    rl = RateLimiter(20.0, burst=1)
    t0 = time.monotonic()
    for _ in range(6):
        rl.acquire()
    assert time.monotonic() - t0 >= 0.25 - 1e-3  # 1 immediately, then 5 at 50 ms intervals
    t0 = time.monotonic()
    RateLimiter(None).acquire()
    assert time.monotonic() - t0 < 0.05


def test_chat_request_defaults() -> None:
    r = ChatRequest([{"role": "user", "content": "x"}])
    assert (r.max_tokens, r.temperature, r.seed, r.continue_final_message) == (256, 0.0, 0, False)


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import SAMPLE

    out = tmp_path_factory.mktemp("queries") / "corpus"
    ingest([SAMPLE], out, progress=False)
    clean(out, progress=False)
    dedup(out, progress=False)
    score(out, ScoreConfig(tier="surface"), progress=False)
    return out


def test_queries_respect_kept_turns_splits_and_balance(scored: Path) -> None:
    con = connect(scored)
    cfg = QueryConfig(max_queries=40, max_target_chars=2000)
    sel = select_queries(scored, cfg, con)
    assert sel.views == {"turns": "kept_turns", "trajectories": "kept_trajectories", "scores": "turn_scores",
                         "splits": "pipelines.export.split_of (computed)"}
    qs = sel.queries
    assert len(qs) == 40 and len({q.query_id for q in qs}) == 40
    ids = [(q.trajectory_id, q.turn_index) for q in qs]
    kept = set(con.sql("SELECT trajectory_id, turn_index FROM kept_turns WHERE counts_for_training").fetchall())
    masked = set(con.sql("SELECT trajectory_id, turn_index FROM turn_scores WHERE NOT loss_mask").fetchall())
    assert all(i in kept for i in ids) and not any(i in masked for i in ids)
    # split-aware: the export's split function, recomputed here from the raw trajectory rows
    rows = {r[0]: {"trajectory_id": r[0], "task": r[1], "source": r[2]}
            for r in con.sql("SELECT trajectory_id, task, source FROM trajectories").fetchall()}
    for q in qs:
        assert q.split == split_of(group_key(rows[q.trajectory_id], SplitConfig()), SplitConfig()) == "train"
    assert sel.excluded_split > 0
    # balance: round-robin over domain × source strata (water-filling): with d the deepest full
    # round, each stratum gives min(size, d), and the first strata (sorted) with more give one extra
    per = Counter(q.stratum for q in qs)
    sizes = sel.strata
    d = 0
    while sum(min(n, d + 1) for n in sizes.values()) <= 40:
        d += 1
    extra = 40 - sum(min(n, d) for n in sizes.values())
    expected = {}
    for st in sorted(sizes):
        expected[st] = min(sizes[st], d) + (1 if sizes[st] > d and extra > 0 else 0)
        extra -= 1 if sizes[st] > d and extra > 0 else 0
    assert dict(per) == {k: v for k, v in expected.items() if v}
    assert [q.rank for q in qs] == sorted(q.rank for q in qs)
    # the evaluation splits stay apart: queries drawn from `test` share no trajectory with train's
    test = select_queries(scored, QueryConfig(max_queries=40, max_target_chars=2000, query_splits=("test",)), con)
    assert test.queries and {q.split for q in test.queries} == {"test"}
    assert not {q.trajectory_id for q in qs} & {q.trajectory_id for q in test.queries}
    # deterministic and independent of max_queries: a smaller run is a prefix of a larger one
    again = select_queries(scored, QueryConfig(max_queries=20, max_target_chars=2000), con)
    assert [q.query_id for q in again.queries] == [q.query_id for q in qs[:20]]


def test_queries_weighting_and_texts(scored: Path) -> None:
    con = connect(scored)
    only_retrieval = tuple((c, 1.0 if c == "retrieval" else 0.0) for c in
                           ("retrieval", "expansion", "action", "other", "transform", "boilerplate", "echo", "context"))
    sel = select_queries(scored, QueryConfig(max_queries=15, category_weights=only_retrieval, balance=()), con)
    assert len(sel.queries) == 15 and {q.category for q in sel.queries} == {"retrieval"}
    assert set(sel.strata) == {"all"}
    cfg = QueryConfig(max_queries=6, history_turns=2, domains=("terminal",), max_target_chars=300)
    qs = load_queries(scored, select_queries(scored, cfg, con).queries, cfg, con)
    assert {q.domain for q in qs} == {"terminal"}
    for q in qs:
        real = con.sql(f"SELECT observation FROM turns WHERE trajectory_id = '{q.trajectory_id}' "
                       f"AND turn_index = {q.turn_index}").fetchall()[0][0]
        assert q.observation == real and len(q.history) <= 2
        assert q.system.startswith("You are the environment of an agent session.") and "Domain: terminal." in q.system
        assert all(g.turn_index < q.turn_index for g in q.history)


def test_a_malformed_reply_fails_its_request_not_the_run() -> None:
    """A proxy's HTML page, a body cut short and content as a list of parts, then a good reply:
    the first two are that request's EndpointError, the run goes on."""
    import http.server
    import json
    import threading

    good = {"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    parts = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "image_url"},
                                                  {"type": "text", "text": "b"}]}, "finish_reason": "length"}]}
    replies = [b"<html>502 from the proxy</html>", None, json.dumps(parts).encode(), json.dumps(good).encode()]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            body = replies.pop(0)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "100" if body is None else str(len(body)))
            self.end_headers()
            self.wfile.write(b'{"choices": [' if body is None else body)  # None: cut short of its length

        def log_message(self, *a: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gen = EndpointGenerator(f"http://127.0.0.1:{server.server_port}/v1", "m", concurrency=1, retries=0)
        got: dict[int, object] = {}
        gen.complete_many([ChatRequest([{"role": "user", "content": str(i)}]) for i in range(4)], got.__setitem__)
    finally:
        server.shutdown()
        server.server_close()
    assert "the reply is not JSON" in str(got[0]) and type(got[0]).__name__ == "EndpointError"
    assert "broken reply after 1 attempts (IncompleteRead" in str(got[1]) and type(got[1]).__name__ == "EndpointError"
    assert (got[2].text, got[2].finish_reason) == ("ab", "length")
    assert (got[3].text, got[3].prompt_tokens, got[3].completion_tokens) == ("ok", 3, 1)


def test_quantiles_are_nearest_rank() -> None:
    from pipelines.traces.stage import _quantile

    assert [_quantile([5, 1, 4, 2, 3], q) for q in (0.0, 0.25, 0.5, 0.75, 1.0)] == [1, 2, 3, 4, 5]
    assert [_quantile(list(range(1, 10)), q) for q in (0.25, 0.5, 0.75)] == [3, 5, 7]
    assert _quantile([], 0.5) is None


def test_no_rejected_in_sft_compares_within_a_query() -> None:
    from types import SimpleNamespace

    from pipelines.traces.checks import check_no_rejected

    text = assistant_content("r", "y")
    kept = {"query_id": "q2", "candidate": 0, "ok": True, "selected": True, "kept": True, "reject_reason": None,
            "score": 1.0, "prediction": "y", "text": text}
    sft = [{"query_id": "q2", "candidate": 0, "score": 1.0, "threshold": 0.5, "prediction": "y",
            "messages": [{"role": "assistant", "content": text}]}]
    rejected = {"query_id": "q1", "candidate": 0, "ok": False, "selected": False, "kept": False,
                "reject_reason": "judge_invalid", "score": None, "prediction": "y", "text": text}
    assert check_no_rejected(SimpleNamespace(cands=[rejected, kept], sft=sft)).passed  # the same text, another query
    own = {**rejected, "query_id": "q2", "candidate": 1}
    r = check_no_rejected(SimpleNamespace(cands=[own, kept], sft=sft))
    assert not r.passed and r.metadata["problems"] == ["q2: a rejected candidate's text is in the SFT set"]


def test_the_computed_split_groups_by_the_exports_columns(tmp_path: Path, sample: Path) -> None:
    """A trajectory the export did not assign gets the split of the export's SplitConfig: its `group_by`
    may name any trajectory column (only task and source were read, so `domain` fell back to one split
    per trajectory, and eval-split turns became queries)."""
    from pipelines.traces.queries import trajectory_splits

    corpus = tmp_path / "c"
    ingest([sample / "intercode"], corpus, progress=False)
    cfg = SplitConfig(validation=0, test=0.5, group_by=("domain",))
    splits, _ = trajectory_splits(corpus, connect(corpus), cfg)
    assert len(splits) == 124 and set(splits.values()) == {split_of(group_key({"domain": "terminal"}, cfg), cfg)}


def test_query_texts_are_redacted_as_clean_was_told(tmp_path: Path) -> None:
    """`clean --ip-addresses` says what export and traces redact: the query texts hide the address
    after it, and keep it before (the defaults keep IP addresses)."""
    import orjson

    from pipelines.clean import CleanConfig
    from pipelines.ingest import IngestConfig
    from pipelines.redact import RedactConfig
    from pipelines.traces.queries import Query

    f = tmp_path / "chat.jsonl"
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "bash", "arguments": '{"cmd": "ssh 93.184.216.34"}'}}]}
    f.write_bytes(orjson.dumps({"messages": [{"role": "user", "content": "reach the host"}, call,
                                             {"role": "tool", "tool_call_id": "c1",
                                              "content": "connected to 93.184.216.34 port 22"}]}) + b"\n")
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    [tid] = [r[0] for r in connect(corpus).sql("SELECT trajectory_id FROM trajectories").fetchall()]

    def texts() -> str:
        [q] = load_queries(corpus, [Query("q", tid, 0, "terminal", "openai_chat", "train", "all", None, 1.0, 0)])
        return "\n".join([q.system, q.user, q.observation])

    before = texts()
    assert "93.184.216.34" in before and "<PII:ip_address>" not in before
    clean(corpus, CleanConfig(min_turns=0, redact=RedactConfig(ip_addresses=True)), progress=False)
    after = texts()
    assert "93.184.216.34" not in after and after.count("<PII:ip_address>") == 2  # the command and its output
