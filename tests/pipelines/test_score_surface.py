"""Surface tier: categories, ratios and keep decisions against values worked out by hand."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pytest

from pipelines.score_surface import CATEGORIES, SurfaceConfig, keep_draws, score_surface, word_stats

COLUMNS = ["trajectory_id", "turn_index", "domain", "kind", "action", "observation"]


def _turns(rows: list[tuple]) -> pa.Table:
    """rows: (action, observation, kind); trajectory `hand`, turn_index = position."""
    return pa.table({
        "trajectory_id": ["hand"] * len(rows),
        "turn_index": pa.array(range(len(rows)), pa.int32()),
        "domain": ["terminal"] * len(rows),
        "kind": [r[2] if len(r) > 2 else "env" for r in rows],
        "action": [r[0] for r in rows],
        "observation": [r[1] for r in rows],
    })


# (action, observation, kind), then by hand: category, |A|, |O|, |A∩O|, overlap, novelty, jaccard, length_ratio
HAND = [
    # A={cat,notes,txt} O={alpha,beta,gamma,delta}: nothing shared, 22/13 chars
    (("cat notes.txt", "alpha beta gamma delta"), "retrieval", 3, 4, 0, 0.0, 1.0, 0.0, 22 / 13),
    # A={search,capital,of,france} O={paris}: all new but shorter than the request
    (("search[capital of France]", "Paris"), "action", 4, 1, 0, 0.0, 1.0, 0.0, 5 / 25),
    # the terminal echoing the command: O = A
    (("echo alpha beta gamma", "echo alpha beta gamma"), "echo", 4, 4, 4, 1.0, 0.0, 1.0, 1.0),
    # every new word is a stock acknowledgement (file, written, successfully)
    (("write config.yaml", "File written successfully."), "boilerplate", 3, 3, 0, 0.0, 1.0, 0.0, 26 / 17),
    # empty output: no words at all
    (("true", ""), "boilerplate", 1, 0, 0, 0.0, 0.0, 0.0, 0.0),
    # A={python,run,py} O={run,py,failed,in,python,step}: half new, 28/13 > 2
    (("python run.py", "run py failed in python step"), "expansion", 3, 6, 3, 1.0, 0.5, 0.5, 28 / 13),
    # A={tr,a,z,red,green,blue} ("A-Z" repeats a, z) O={red,green,blue}: a selection of the action
    (("tr a-z A-Z <<< 'red green blue'", "RED GREEN BLUE"), "transform", 6, 3, 3, 0.5, 0.0, 0.5, 14 / 31),
    # A={ls} O={ls,x}: overlap 1 but novelty 1/2 (no echo), 4/2 chars = 2 (not > 2: no expansion)
    (("ls", "ls x"), "transform", 1, 2, 1, 1.0, 0.5, 0.5, 2.0),
    # A={ls,la,srv,data,reports} O={data,x}: overlap 1/5 < 0.3, novelty 1/2, 6/24 chars
    (("ls -la /srv/data/reports", "data x"), "other", 5, 2, 1, 0.2, 0.5, 1 / 6, 6 / 24),
    # no observation: context only
    (("thinking about it", None, "message"), "context", 3, 0, 0, 0.0, 0.0, 0.0, 0.0),
    # an env turn with no recorded observation is context too
    (("reboot", None), "context", 1, 0, 0, 0.0, 0.0, 0.0, 0.0),
]


def _draw(seed: int, tid: str, idx: int) -> float:
    """The documented draw, re-derived here: blake2b-64 of 'seed␟trajectory_id␟turn_index'."""
    return int.from_bytes(hashlib.blake2b(f"{seed}\x1f{tid}\x1f{idx}".encode(), digest_size=8).digest(), "big") / 2**64


def test_hand_made_turns() -> None:
    t = score_surface(_turns([h[0] for h in HAND]))
    rows = t.to_pylist()
    for (_, cat, a, o, c, ov, nov, jac, ratio), r in zip(HAND, rows, strict=True):
        assert r["category"] == cat, r
        assert (r["action_words"], r["observation_words"], r["common_words"]) == (a, o, c), r
        assert r["overlap"] == pytest.approx(ov, abs=1e-12)
        assert r["novelty"] == pytest.approx(nov, abs=1e-12)
        assert r["jaccard"] == pytest.approx(jac, abs=1e-12)
        assert r["length_ratio"] == pytest.approx(ratio, abs=1e-12)
    ratios = SurfaceConfig().keep_ratio
    for r in rows:
        d = _draw(0, "hand", r["turn_index"])
        assert r["keep_draw"] == d
        assert r["keep"] == (d < ratios[r["category"]])
    # draws 0.370 0.205 0.666 0.988 0.757 0.806 0.607 0.969 0.664 0.212 0.014 against ratios
    # 1 1 .05 .1 .1 1 .5 .5 1 0 0
    assert [r["keep"] for r in rows] == [True, True, False, False, False, True, False, False, True, False, False]


def test_published_thresholds_at_their_edges() -> None:
    """novelty ≥ 60 % with ratio > 1 is retrieval; overlap ≥ 70 % with novelty < 30 % is echo."""
    act = " ".join(f"a{i}" for i in range(10))  # 29 chars
    echo_edge = " ".join([f"a{i}" for i in range(7)] + ["n1", "n2"])  # O=9: overlap .7, novelty 2/9 < .3
    not_echo = " ".join([f"a{i}" for i in range(7)] + ["n1", "n2", "n3"])  # novelty 3/10 = .3: not < .3
    retr_edge = "n1 n2 n3 a0 a1 " + "x" * 20  # O={n1,n2,n3,a0,a1,xxx..}: novelty 4/6 ≥ .6, 35/29 > 1
    act_edge = "n1 n2 n3 a0 a1 " + "x" * 14  # same words, 29/29 = 1: not > 1 -> action
    rows = score_surface(_turns([(act, echo_edge), (act, not_echo), (act, retr_edge), (act, act_edge)])).to_pylist()
    assert [r["category"] for r in rows] == ["echo", "transform", "retrieval", "action"]
    assert (rows[0]["overlap"], rows[0]["novelty"]) == (0.7, pytest.approx(2 / 9))
    assert (rows[1]["overlap"], rows[1]["novelty"]) == (0.7, pytest.approx(0.3))
    assert rows[2]["length_ratio"] == 35 / 29 and rows[3]["length_ratio"] == 1.0


def test_words_are_lowercased_unicode_and_deduplicated() -> None:
    st = word_stats(pa.array(["Grep ÉTÉ été foo_bar foo-bar", None]), pa.array(["été FOO_BAR 42 42", "x"]))
    # A={grep, été, foo_bar, foo, bar} O={été, foo_bar, 42}
    assert st["a"].tolist() == [5, 0]
    assert st["o"].tolist() == [3, 1]
    assert st["common"].tolist() == [2, 0]
    assert st["novel_content"].tolist() == [1, 1]


def test_chinese_and_japanese_words_are_characters() -> None:
    """A clause written without spaces was one word: an echo of it shared no word with its action
    (an `action`, kept whole, instead of an `echo`, kept 5 %)."""
    zh = "构建完成并且所有测试都在Linux上通过了"
    ja = "ビルドが完了し、すべてのテストが通過しました"
    rows = score_surface(_turns([(f"echo '{zh}'", zh + "今天"), (f"echo '{ja}'", ja + "。"),
                                 ("echo 'the build finished and all tests passed on linux'",
                                  "the build finished and all tests passed on linux today")])).to_pylist()
    assert [r["category"] for r in rows] == ["echo", "echo", "echo"]
    st = word_stats(pa.array(["写入 config"]), pa.array(["写入成功"]))
    assert (st["a"].tolist(), st["o"].tolist(), st["common"].tolist()) == ([3], [4], [2])


@pytest.mark.parametrize("kw, said", [
    ({"seed": 1 << 64}, "--seed 18446744073709551616: must be an integer in [0, 2**63)"),
    ({"seed": -1}, "--seed -1: must be an integer in [0, 2**63)"),
    ({"echo_min_overlap": float("nan")}, "SurfaceConfig.echo_min_overlap = nan is not a finite number"),
    ({"keep_ratios": tuple((c, 1.0) for c in CATEGORIES)}, "SurfaceConfig.keep_ratios['context'] must be 0: context turns never carry loss"),
])
def test_settings_that_crashed_late_or_misclassified_are_refused(kw: dict, said: str) -> None:
    """A seed past 64 bits crashed in orjson after the whole model tier; a NaN threshold turned its
    test off; a context ratio above 0 put loss on context turns (and failed turn_scores_valid)."""
    with pytest.raises(ValueError) as e:
        SurfaceConfig(**kw)
    assert str(e.value) == said.replace("\\", "")


def test_config_changes_ratios_and_seed() -> None:
    t = _turns([h[0] for h in HAND])
    cfg = SurfaceConfig(seed=7, keep_ratios=tuple((c, 0.0 if c == "context" else 1.0) for c in CATEGORIES))
    rows = score_surface(t, cfg).to_pylist()
    assert all(r["keep"] for r in rows if r["category"] != "context")
    assert [r["keep_draw"] for r in rows] == [_draw(7, "hand", i) for i in range(len(HAND))]
    assert cfg.fingerprint() != SurfaceConfig().fingerprint()
    with pytest.raises(ValueError, match="lacks categories"):
        SurfaceConfig(keep_ratios=(("echo", 0.1),))


def test_keep_draws_are_uniform_and_stable() -> None:
    d = keep_draws([f"t{i}" for i in range(20000)], list(range(20000)), 0)
    assert 0.0 <= d.min() and d.max() < 1.0
    assert abs(d.mean() - 0.5) < 0.01  # 20k uniforms: sd of the mean 0.002
    assert (d < 0.05).mean() == pytest.approx(0.05, abs=0.005)


# Real turns of the sample corpus, worked out by hand (word sets in the comments).
REAL = {
    # "search[which county is New Paltz in New York?]" -> "Ulster County"
    # A={search,which,county,is,new,paltz,in,york} O={ulster,county}: 13/46 chars
    ("5bb6f33b19398750b66347bc7b4fec7f", 1): ("other", 8, 2, 1, 1 / 8, 1 / 2, 1 / 9, 13 / 46),
    # "finish[Keyshia Cole]" -> "Episode finished, reward = True": all new, 31/20 chars
    ("2e22bb03cf424a90733d9d5408f4141d", 1): ("retrieval", 3, 4, 0, 0.0, 1.0, 0.0, 31 / 20),
    # "submit FLAG{p3rl_6_iz_EVEN_BETTER!!1}" -> "\nFLAG{p3rl_6_iz_EVEN_BETTER!!1}\n"
    # A={submit,flag,p3rl_6_iz_even_better,1} O={flag,p3rl_6_iz_even_better,1}: 32/37 chars
    ("274511686b8eaa8b830550d80f091dfa", 20): ("echo", 4, 3, 3, 3 / 4, 0.0, 3 / 4, 32 / 37),
    # 'execute[find /testbed -name "dir1"]' -> "/testbed/dir1\n"
    # A={execute,find,testbed,name,dir1} O={testbed,dir1}: 14/35 chars
    ("9675163bbd25fd07c7c568b5257f883b", 0): ("transform", 5, 2, 2, 2 / 5, 0.0, 2 / 5, 14 / 35),
    # 'execute[find /testbed -name "*.php" -exec true {} \;]' -> "" (the command printed nothing)
    # A={execute,find,testbed,name,php,exec,true}
    ("197f24afd72a2d97e36ce9c3832ea51d", 1): ("boilerplate", 7, 0, 0, 0.0, 0.0, 0.0, 0.0),
    # "submit" (InterCode's plain submit: no observation, nothing to predict)
    ("197f24afd72a2d97e36ce9c3832ea51d", 2): ("context", 1, 0, 0, 0.0, 0.0, 0.0, 0.0),
}


@pytest.fixture(scope="module")
def sample_turns(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    from pipelines.ingest import ingest
    from pipelines.query import connect

    root = Path(__file__).resolve().parents[2] / "data" / "sample" / "corpus"
    out = tmp_path_factory.mktemp("surface") / "corpus"
    ingest([root / "fireact", root / "intercode", root / "swe-agent"], out, progress=False)
    cols = ", ".join(COLUMNS)
    return connect(out).sql(f"SELECT {cols} FROM turns ORDER BY trajectory_id, turn_index").to_arrow_reader().read_all()


def test_real_turns(sample_turns: pa.Table) -> None:
    rows = {(r["trajectory_id"], r["turn_index"]): r for r in score_surface(sample_turns).to_pylist()}
    ratios = SurfaceConfig().keep_ratio
    for key, (cat, a, o, c, ov, nov, jac, ratio) in REAL.items():
        r = rows[key]
        assert r["category"] == cat, (key, r)
        assert (r["action_words"], r["observation_words"], r["common_words"]) == (a, o, c), key
        assert (r["overlap"], r["novelty"], r["jaccard"], r["length_ratio"]) == pytest.approx((ov, nov, jac, ratio), abs=1e-12)
        assert r["keep_draw"] == _draw(0, *key)
        assert r["keep"] == (r["keep_draw"] < ratios[cat])
    # the draws of these six: 0.776, 0.885, 0.703, 0.950, 0.080, 0.974 -> kept: other, retrieval, boilerplate
    assert [rows[k]["keep"] for k in REAL] == [True, True, False, False, True, False]


def test_batches_do_not_change_results(sample_turns: pa.Table) -> None:
    whole = score_surface(sample_turns)
    parts = pa.concat_tables(score_surface(b) for b in sample_turns.to_batches(max_chunksize=97))
    assert whole.equals(parts)


def test_long_observation_is_linear() -> None:
    """A 4 MB observation of distinct words goes through the vectorised path (no per-word Python)."""
    obs = " ".join(f"w{i}" for i in range(500_000))
    r = score_surface(_turns([("cat big.log", obs)])).to_pylist()[0]
    assert (r["observation_words"], r["category"]) == (500_000, "retrieval")
