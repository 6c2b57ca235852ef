"""Dedup: datasketch-identical signatures, exact / near clusters on the real sample and on planted
copies, representatives, shared prefixes, thresholds without re-hashing, and quality on a
generated workload with known duplicates."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pytest
from datasketch import MinHash

from pipelines.clean import clean
from pipelines.clean_contracts import run_clean_contracts
from pipelines.dedup import DedupConfig, _components, dedup, shingle_hashes, signatures_of_texts, token_hashes
from pipelines.dedup_workload import StepPool, generate, pairwise_scores, write_corpus
from schemas.records import Trajectory, Turn
from tests.pipelines.clean_support import (  # noqa: F401
    copy_corpus,
    load,
    plant,
    rows,
    sample_corpus,
    trajectory_id,
    variant,
)


def _bytes(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = "".join(texts).encode()
    lens = np.array([len(t.encode()) for t in texts])
    ends = np.cumsum(lens)
    return np.frombuffer(data, np.uint8), ends - lens, ends


def test_tokens_are_words_lowercased_within_ranges() -> None:
    th, tr = token_hashes(*_bytes(["Hello, hello WORLD!", "ab", "cd", "", "naïve ab"]))
    assert tr.tolist() == [0, 0, 0, 1, 2, 4, 4]
    assert th[0] == th[1] and th[1] != th[2]  # case-insensitive
    assert th[3] == th[6] and th[3] != th[4]  # "ab" twice; "ab"+"cd" never joins into "abcd"
    assert len(set(th.tolist())) == 5


def test_cjk_characters_are_tokens_and_unicode_punctuation_separates() -> None:
    """Chinese and Japanese have no spaces: a whole observation, its full-width punctuation
    included, was one token, so two 99%-equal texts shared no shingle; ’ — “ glued words."""
    th, tr = token_hashes(*_bytes(["你好，世界。", "日本語abc", "don’t—stop “x”", "naïve"]))
    assert tr.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]
    ref = {t: token_hashes(*_bytes([t]))[0][0] for t in ("你", "好", "世", "界", "abc", "don", "t", "stop", "x")}
    assert th[:4].tolist() == [ref[c] for c in "你好世界"] and th[7] == ref["abc"]
    assert th[8:12].tolist() == [ref[w] for w in ("don", "t", "stop", "x")]
    assert th[12] == token_hashes(*_bytes(["NAÏVE".replace("Ï", "ï")]))[0][0]  # two-byte letters stay in the word
    # a character cut off by the end of a range is no token boundary problem: it stays a word byte run
    data = "ab你".encode()
    th, tr = token_hashes(np.frombuffer(data, np.uint8), np.array([0]), np.array([len(data) - 1]))
    assert tr.tolist() == [0]


def test_two_byte_letters_are_lowercased() -> None:
    """Accented Latin, Greek and Cyrillic capitals were left as they are (ASCII only), so "École" and
    "école", "ПРИВЕТ" and "привет" were different words; a sign with no case (×) stays itself."""
    def one(word: str) -> int:
        th, _ = token_hashes(*_bytes([word]))
        assert len(th) == 1, word
        return int(th[0])

    for upper, lower in (("ÉCOLE", "école"), ("ПРИВЕТ", "привет"), ("ΣΟΦΙΑ", "σοφια"), ("ÀÖØÞĀŁ", "àöøþāł"),
                         ("ЁЖ", "ёж"), ("Straße", "STRAßE")):
        assert one(upper) == one(lower), (upper, lower)
    assert one("×") != one("÷")  # U+00D7 and U+00F7: 0x20 apart as the letters around them, neither a capital
    # a lead byte cut off by the end of the range: no continuation byte to read, no error
    data = "AÉ".encode()
    th, tr = token_hashes(np.frombuffer(data, np.uint8), np.array([0]), np.array([len(data) - 1]))
    assert tr.tolist() == [0]


def test_near_duplicate_chinese_observations_cluster(tmp_path: Path) -> None:
    """Two trajectories of four 400-character Chinese observations, two characters apart: a near
    duplicate (0 candidate pairs before)."""
    import random

    from pipelines.ingest import IngestConfig, ingest

    rng = random.Random(3)
    common = "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从"
    obs = ["".join(rng.choice(common) for _ in range(400)) + "。" for _ in range(4)]

    def chat(task: str, outs: list[str]) -> dict:
        msgs: list[dict] = [{"role": "user", "content": task}]
        for k, out in enumerate(outs):
            msgs += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"c{k}", "type": "function", "function": {
                "name": "bash", "arguments": json.dumps({"command": f"cat part{k}.txt"})}}]},
                {"role": "tool", "tool_call_id": f"c{k}", "content": out}]
        return {"messages": msgs}

    edited = [o[:100] + "天" + o[101:300] + "地" + o[301:] for o in obs]
    (tmp_path / "zh.jsonl").write_text("\n".join(json.dumps(chat(t, o), ensure_ascii=False)
                                                 for t, o in (("读文件", obs), ("读文件", edited))) + "\n", encoding="utf-8")
    root = tmp_path / "c"
    ingest([tmp_path / "zh.jsonl"], root, IngestConfig(domain_override="terminal", workers=1), progress=False)
    s = dedup(root, progress=False)
    assert rows(root, "SELECT kind, count(*) FROM duplicates WHERE NOT is_representative GROUP BY 1") == [("near", 1)], s


def test_shingles_stay_within_a_range() -> None:
    th = np.arange(1, 10, dtype=np.uint64)
    h, r = shingle_hashes(th, np.array([0, 0, 0, 0, 0, 0, 1, 1, 2]), 5)
    # range 0: 6 tokens -> 2 five-grams; range 1: 2 tokens -> 1 short shingle; range 2: 1 token -> 1
    assert r.tolist() == [0, 0, 1, 2] and len(set(h.tolist())) == 4


def test_signatures_equal_datasketch_minhash() -> None:
    """The signature of a trajectory is exactly datasketch's MinHash (affine32) of its shingle hashes."""
    turns = ["ls -la\ntotal 8 drwxr-xr-x 2 root root 4096 .", "cat README.md\n# Project\nSome words to shingle here ok",
             "python -m pytest\n== 3 passed in <DUR> =="]
    sig = signatures_of_texts([turns], num_perm=128, seed=1, shingle=5)[0]
    th, tr = token_hashes(*_bytes(turns))
    h32, _ = shingle_hashes(th, tr, 5)
    m = MinHash(num_perm=128, seed=1, hashfunc=lambda x: x)
    m.update_batch([int(x) for x in h32])
    assert m.scheme == "affine32" and np.array_equal(sig, m.hashvalues)
    other = signatures_of_texts([turns[:2]])[0]
    est = MinHash(num_perm=128, seed=1, hashvalues=other, scheme="affine32").jaccard(m)
    assert est == pytest.approx(float(np.mean(sig == other)))


def test_components() -> None:
    nodes, comp = _components(np.array([5, 7, 9, 2]), np.array([7, 9, 11, 3]))
    assert dict(zip(nodes.tolist(), comp.tolist(), strict=True)) == {2: 2, 3: 2, 5: 5, 7: 5, 9: 5, 11: 5}


def test_pairwise_scores() -> None:
    # truth: {0,1,2} {3,4}; predicted: {0,1} {2,3,4}
    p, r, tp, pp, tt = pairwise_scores(np.array([0, 0, 1, 1, 1]), np.array([0, 0, 0, 1, 1]))
    assert (tp, pp, tt) == (2, 4, 4) and (p, r) == (0.5, 0.5)


def test_sample_clusters(sample_corpus: Path) -> None:  # noqa: F811 - fixture
    clean(sample_corpus, progress=False)
    s = dedup(sample_corpus, progress=False)
    assert (s.trajectories, s.considered, s.empty) == (1113, 932, 0)
    assert (s.bands, s.rows, s.clusters, s.exact_groups, s.exact_duplicates, s.near_duplicates, s.kept) == (14, 9, 4, 2, 2, 3, 927)
    got = rows(sample_corpus, """SELECT cluster_id[:8], trajectory_id[:8], is_representative, kind, cluster_size FROM duplicates
                                 ORDER BY cluster_id, is_representative DESC, trajectory_id""")
    # InterCode runs of the same bash tasks: the successful short one represents the failed long one
    assert got == [
        ("039e36f0", "710d1910", True, "near", 2), ("039e36f0", "039e36f0", False, "near", 2),
        ("1231435e", "731935c8", True, "near", 2), ("1231435e", "1231435e", False, "near", 2),
        ("2622f98e", "2622f98e", True, "exact", 2), ("2622f98e", "f4bc0e75", False, "exact", 2),
        ("3a02a691", "98f13ff4", True, "near", 3), ("3a02a691", "3a02a691", False, "near", 3), ("3a02a691", "f309669f", False, "exact", 3),
    ]
    assert rows(sample_corpus, "SELECT DISTINCT t.source_format FROM duplicates JOIN trajectories t USING (trajectory_id)") == [("intercode",)]
    # 10 before InterCode's plain `submit` was no environment turn: the ReAct run key:40 (one command, a submit)
    # is dropped by cleaning now, and the first turn key:22 shares with it counts
    assert s.shared_prefix_turns == 9
    assert rows(sample_corpus, "SELECT count(*), count(*) FILTER (WHERE counts_for_training) FROM kept_turns") == [(3416, 3407)]
    assert all(r.passed for r in run_clean_contracts(sample_corpus))


STAMP = "\n[{ts}] worker pid={pid} finished in {dur}s"


@pytest.fixture(scope="module")
def planted(sample_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:  # noqa: F811
    corpus = copy_corpus(sample_corpus, tmp_path_factory.mktemp("dedup") / "corpus")
    pyd = load(corpus, trajectory_id(corpus, "swe-agent/pydicom"))  # 12 turns, outcome submitted
    mar = load(corpus, trajectory_id(corpus, "swe-agent/marshmallow-1867__function"))  # 11 turns
    bash = load(corpus, trajectory_id(corpus, "intercode/ic_bash_multiturn"))  # 3 turns, success
    other = load(corpus, trajectory_id(corpus, "openhands/multi", 1))
    tau = load(corpus, trajectory_id(corpus, "tau-bench"))
    v = {}
    v["pyd_copy_success"] = variant(pyd, "pyd_copy_success", outcome="success")  # exact copy, succeeded
    for name, ts, pid, dur in (("pyd_stamped_1", "2026-01-01T10:00:00Z", 311, "0.52"), ("pyd_stamped_2", "2026-03-09T23:59:01Z", 40712, "17.9")):
        v[name] = variant(pyd, name)
        for u in v[name].turns:
            u.observation = (u.observation or "") + STAMP.format(ts=ts, pid=pid, dur=dur)
    v["pyd_dropped_step"] = variant(pyd, "pyd_dropped_step")
    del v["pyd_dropped_step"].turns[3]  # a small step: `find_file`
    v["pyd_edited"] = variant(pyd, "pyd_edited")
    u = v["pyd_edited"].turns[2]
    u.observation = u.observation.replace("pixel", "voxel", 3)
    v["mar_longer"] = variant(mar, "mar_longer")
    v["mar_longer"].turns.append(Turn(kind="env", action="ls", observation="reproduce.py  src  tests", observation_kind="stdout"))
    for name, day in (("bash_later", 2), ("bash_earlier", 1)):
        v[name] = variant(bash, name, collected_at=dt.datetime(2026, 1, day, tzinfo=dt.UTC))
    # three trajectories that start like marshmallow's first two turns and then do different things
    for k, src in enumerate((pyd, other, tau)):
        name = f"prefix_{k}"
        v[name] = variant(mar, name)
        # (as raw commands: marshmallow's action space allows shell commands, not OpenHands' tools)
        v[name].turns = [dataclasses.replace(t) for t in mar.turns[:2]] + [dataclasses.replace(t, tool_name=None) for t in src.turns[3:9]]
    ids = dict(zip(v, plant(corpus, list(v.values())), strict=True))
    ids.update(pyd=pyd_id(corpus), mar=trajectory_id(corpus, "swe-agent/marshmallow-1867__function"),
               bash=trajectory_id(corpus, "intercode/ic_bash_multiturn"))
    clean(corpus, progress=False)
    return corpus, ids


def pyd_id(corpus: Path) -> str:
    return trajectory_id(corpus, "swe-agent/pydicom")


def _clusters(corpus: Path, ids: dict[str, str]) -> dict[str, list[tuple[str, bool, str]]]:
    name = {v: k for k, v in ids.items()}
    out: dict[str, list] = {}
    for cid, tid, rep, kind in rows(corpus, "SELECT cluster_id, trajectory_id, is_representative, kind FROM duplicates ORDER BY ALL"):
        if tid in name:
            out.setdefault(cid, []).append((name[tid], rep, kind))
    return {min(m[0] for m in members): sorted(members) for members in out.values()}


def test_planted_clusters_and_representatives(planted: tuple[Path, dict[str, str]]) -> None:
    corpus, ids = planted
    s = dedup(corpus, progress=False)
    assert not s.signatures_reused
    assert _clusters(corpus, ids) == {
        # success first; exact = same canonical content as the representative
        "pyd": [("pyd", False, "exact"), ("pyd_copy_success", True, "near"), ("pyd_dropped_step", False, "near"),
                ("pyd_edited", False, "near"), ("pyd_stamped_1", False, "near"), ("pyd_stamped_2", False, "near")],
        # then more turns
        "mar": [("mar", False, "near"), ("mar_longer", True, "near")],
        # then the earliest (unknown collection time last)
        "bash": [("bash", False, "exact"), ("bash_earlier", True, "exact"), ("bash_later", False, "exact")],
    }
    # runs differing only in timestamps, PIDs and durations have the same exact hash
    h = dict(rows(corpus, f"SELECT trajectory_id, exact_hash FROM dedup_signatures WHERE trajectory_id IN {(ids['pyd_stamped_1'], ids['pyd_stamped_2'])!r}"))
    assert h[ids["pyd_stamped_1"]] == h[ids["pyd_stamped_2"]]
    # the three prefix variants are not duplicates of anything, but share marshmallow's first two turns
    got = rows(corpus, f"""SELECT trajectory_id, turn_index, share_count, counts_for_training FROM shared_prefixes
                           WHERE trajectory_id IN {tuple(ids[k] for k in ('mar_longer', 'prefix_0', 'prefix_1', 'prefix_2'))!r} ORDER BY ALL""")
    name = {v: k for k, v in ids.items()}
    assert sorted((name[t], i, n, c) for t, i, n, c in got) == [
        ("mar_longer", 0, 4, True), ("mar_longer", 1, 4, True),
        ("prefix_0", 0, 4, False), ("prefix_0", 1, 4, False), ("prefix_1", 0, 4, False), ("prefix_1", 1, 4, False),
        ("prefix_2", 0, 4, False), ("prefix_2", 1, 4, False)]
    assert rows(corpus, f"""SELECT turn_index, counts_for_training FROM kept_turns WHERE trajectory_id = '{ids["prefix_1"]}'
                            ORDER BY turn_index""")[:3] == [(0, False), (1, False), (2, True)]
    assert all(r.passed for r in run_clean_contracts(corpus))


def test_threshold_changes_without_rehashing(planted: tuple[Path, dict[str, str]]) -> None:
    corpus, ids = planted
    dedup(corpus, progress=False)
    strict = dedup(corpus, DedupConfig(threshold=0.95), progress=False)
    assert strict.signatures_reused and (strict.bands, strict.rows) == (3, 42)
    # at 0.95 the copies with an extra timestamp line per turn leave the cluster (as an exact pair)
    assert _clusters(corpus, ids) == {
        "pyd": [("pyd", False, "exact"), ("pyd_copy_success", True, "near"), ("pyd_dropped_step", False, "near"),
                ("pyd_edited", False, "near")],
        "pyd_stamped_1": [("pyd_stamped_1", False, "exact"), ("pyd_stamped_2", True, "exact")],
        "mar": [("mar", False, "near"), ("mar_longer", True, "near")],
        "bash": [("bash", False, "exact"), ("bash_earlier", True, "exact"), ("bash_later", False, "exact")],
    }
    loose = dedup(corpus, DedupConfig(threshold=0.5), progress=False)
    assert loose.signatures_reused and (loose.bands, loose.rows, loose.clusters) == (25, 5, 8)
    # at 0.5 the trajectory that continues with six of pydicom's steps joins pydicom's cluster
    assert _clusters(corpus, ids)["prefix_0"] == [
        ("prefix_0", False, "near"), ("pyd", False, "exact"), ("pyd_copy_success", True, "near"), ("pyd_dropped_step", False, "near"),
        ("pyd_edited", False, "near"), ("pyd_stamped_1", False, "near"), ("pyd_stamped_2", False, "near")]
    # new cleaning settings change what is hashed: the signatures are recomputed
    clean(corpus, progress=False)
    assert dedup(corpus, progress=False).signatures_reused
    from pipelines.clean import CleanConfig

    clean(corpus, CleanConfig(retry_identical=False), progress=False)
    assert not dedup(corpus, progress=False).signatures_reused


def test_quality_on_generated_workload(sample_corpus: Path, tmp_path: Path) -> None:  # noqa: F811 - fixture
    """Known duplicates: real steps recombined, planted exact, volatile, edited, dropped-step and
    swapped-step copies. Precision and recall over all pairs, at the default threshold."""
    pool = StepPool.from_corpus(sample_corpus)
    write_corpus(generate(pool, 3000, seed=7), tmp_path / "corpus", truth_path=tmp_path / "truth.parquet")
    dedup(tmp_path / "corpus", progress=False)
    got = rows(tmp_path / "corpus", f"""SELECT t.cluster, coalesce(d.cluster_id, t.trajectory_id), t.kind
                                         FROM read_parquet('{tmp_path / 'truth.parquet'}') t LEFT JOIN duplicates d USING (trajectory_id)""")
    truth = np.array([g[0] for g in got])
    _, pred = np.unique([g[1] for g in got], return_inverse=True)
    p, r, tp, pp, tt = pairwise_scores(pred, truth)
    # the pool is the sample's steps: the workload moves with the importers (InterCode's plain submits, with no
    # observation now, made it (1159, 1159, 1200); precision stayed 1.0, recall 0.9658)
    assert (tp, pp, tt) == (1201, 1201, 1242)
    assert (round(p, 4), round(r, 4)) == (1.0, 0.967)


def test_cli_and_report(sample_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    from pipelines.cli import main
    from pipelines.dedup_report import section_cleaning, section_dedup
    from pipelines.query import connect

    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    con = connect(corpus)
    assert "run <code>worldline clean CORPUS</code>" in section_cleaning(con)
    assert "run <code>worldline dedup CORPUS</code>" in section_dedup(con)
    assert main(["clean", str(corpus), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "kept 932 trajectories, 3439 turns; dropped 181 trajectories whole" in out
    assert "too_few_turns               181 trajectories" in out and "retry_cycle                  53 turns" in out
    assert main(["dedup", str(corpus), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "  4 duplicate clusters, holding 2 groups of identical trajectories; dropped as duplicates: 2 exact, 3 near; kept 927\n" in out
    assert "largest clusters: 3a02a691d1ea… 3 (near)" in out
    assert main(["dedup", str(corpus), "--quiet", "--threshold", "0.5"]) == 0
    assert "signatures: reused" in capsys.readouterr().out
    assert main(["dedup", str(corpus), "--threshold", "1.5"]) == 1
    con = connect(corpus)
    html = section_cleaning(con) + section_dedup(con)
    assert "Trajectories dropped whole, by reason" in html and "too_few_turns" in html
    assert "Duplicates dropped, by kind" in html and "Largest clusters" in html


@pytest.mark.parametrize(("kw", "message"), [
    ({"shingle": 0}, "--shingle must be at least 1 (got 0)"),  # would hash nothing: no near-duplicates at all
    ({"shingle": -2}, "--shingle must be at least 1 (got -2)"),  # was a numpy broadcast error
    ({"bands": 3}, "--bands needs --rows: LSH takes both (bands x rows ≤ --num-perm) or neither (the optimum for --threshold)"),
    ({"rows": 3}, "--rows needs --bands: LSH takes both (bands x rows ≤ --num-perm) or neither (the optimum for --threshold)"),
    ({"bands": -2, "rows": 3}, "--bands and --rows must be at least 1 (got -2 and 3)"),
    ({"bands": 3, "rows": 0}, "--bands and --rows must be at least 1 (got 3 and 0)"),
    ({"bands": 20, "rows": 8}, "--bands x --rows = 160 exceeds --num-perm 128"),
    ({"threshold": 1.5}, "--threshold must be in (0, 1] (got 1.5)"),
    ({"threshold": float("nan")}, "--threshold must be in (0, 1] (got nan)"),
    ({"num_perm": 0}, "--num-perm must be at least 1 (got 0)"),
    ({"min_prefix_share": 1}, "--min-prefix-share must be at least 2 (got 1): a prefix is shared by two or more"),
])
def test_config_rejects_bad_options(kw: dict, message: str) -> None:
    with pytest.raises(ValueError) as e:
        DedupConfig(**kw)
    assert str(e.value) == message


@pytest.mark.parametrize(("limit", "why"), [
    ("bogus", "DuckDB does not take it (Parser Error: Memory must have a number (e.g. 1GB))"),
    ("256", "DuckDB does not take it (Parser Error: Unknown unit for memory: ''"),
    ("12 parsecs", "DuckDB does not take it (Parser Error: Unknown unit for memory: 'parsecs'"),
    ("150%", "DuckDB does not take it (Invalid Input Error: Unable to parse valid percentage (input: 150%))"),
    ("0MB", "must be positive (or -1 or none for no limit)"),
    ("-1GB", "must be positive (or -1 or none for no limit)"),
])
def test_memory_limit_rejected_before_the_run(limit: str, why: str) -> None:
    with pytest.raises(ValueError) as e:
        DedupConfig(memory_limit=limit)
    assert str(e.value).startswith(f"--memory-limit {limit!r}: {why}")


@pytest.mark.parametrize("limit", ["256MB", "1 GB", "1.5GiB", "512kib", "50%", "2TB", "4096 bytes", "1G", "4g", "512M",
                                   "1gigabyte", "-1", "none"])
def test_memory_limits_duckdb_takes_are_accepted(limit: str) -> None:
    assert DedupConfig(memory_limit=limit).memory_limit == limit


def test_cli_bad_memory_limit_is_one_line(sample_corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    from pipelines.cli import main

    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    assert main(["dedup", str(corpus), "--quiet", "--memory-limit", "bogus"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("worldline dedup: error: --memory-limit 'bogus': DuckDB does not take it") and err.count("\n") == 1
    assert main(["dedup", str(corpus), "--quiet", "--bands", "3"]) == 1
    assert "--bands needs --rows" in capsys.readouterr().err
    assert not (corpus / "side" / "duplicates").exists()


def _with_exit_codes(t: Trajectory, failed_at: int | None = None) -> Trajectory:
    for i, u in enumerate(t.turns):
        u.exit_code = 1 if i == failed_at else 0
    return t


def test_exit_codes_count_in_exact_and_prefix_hashes(sample_corpus: Path, tmp_path: Path) -> None:  # noqa: F811
    """The training text ends an observation with its exit code: two runs that differ only there are not
    exact duplicates (near ones, by their words), and a prefix is shared up to the turn whose code differs."""
    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    mar = load(corpus, trajectory_id(corpus, "swe-agent/marshmallow-1867__function"))  # 11 turns, no exit codes
    other = load(corpus, trajectory_id(corpus, "openhands/multi", 1))
    tau = load(corpus, trajectory_id(corpus, "tau-bench"))
    v = {f"same_{k}": _with_exit_codes(variant(mar, f"same_{k}")) for k in range(2)}
    v["failed_at_3"] = _with_exit_codes(variant(mar, "failed_at_3"), failed_at=3)
    # two runs that begin with marshmallow's first four turns and go on differently; one's fourth command failed
    for name, src, failed_at in (("ok_then_other", other, None), ("failed_then_tau", tau, 3)):
        t = variant(mar, name)
        t.turns = [dataclasses.replace(u) for u in mar.turns[:4]] + [dataclasses.replace(u, tool_name=None) for u in src.turns[3:9]]
        v[name] = _with_exit_codes(t, failed_at)
    ids = dict(zip(v, plant(corpus, list(v.values())), strict=True))
    name = {t: k for k, t in ids.items()}
    dedup(corpus, progress=False)
    h = dict(rows(corpus, f"SELECT trajectory_id, exact_hash FROM dedup_signatures WHERE trajectory_id IN {tuple(ids.values())!r}"))
    assert h[ids["same_0"]] == h[ids["same_1"]] != h[ids["failed_at_3"]]
    got = rows(corpus, f"SELECT trajectory_id, is_representative, kind FROM duplicates WHERE trajectory_id IN {tuple(ids.values())!r}")
    # (a representative's kind says how the cluster was found: the other two are near duplicates of it)
    assert sorted((name[t], r, k) for t, r, k in got) == [("failed_at_3", False, "near"), ("same_0", True, "near"), ("same_1", False, "exact")]
    # the kept copy (same_0) and the run that went on without a failure share four turns; the run whose
    # fourth command failed shares the three before it
    got = rows(corpus, f"""SELECT trajectory_id, turn_index, share_count FROM shared_prefixes
                           WHERE trajectory_id IN {(ids['same_0'], ids['ok_then_other'], ids['failed_then_tau'])!r}""")
    assert sorted((name[t], i, n) for t, i, n in got) == [
        ("failed_then_tau", 0, 3), ("failed_then_tau", 1, 3), ("failed_then_tau", 2, 3),
        ("ok_then_other", 0, 3), ("ok_then_other", 1, 3), ("ok_then_other", 2, 3), ("ok_then_other", 3, 2),
        ("same_0", 0, 3), ("same_0", 1, 3), ("same_0", 2, 3), ("same_0", 3, 2)]


def test_clusters_do_not_depend_on_the_order_of_the_ingests(tmp_path: Path) -> None:
    """Each LSH bucket's members were verified only against the bucket's first row, which follows the
    ingest order: with A (an outlier of the bucket) first, C was never compared with B, its
    near-duplicate ({A, B} and C kept apart); with B first, all three clustered."""
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.query import run_query

    data = Path(__file__).resolve().parents[1] / "data" / "dedup"
    got = {}
    for order in ("ABC", "BAC", "CBA"):
        root = tmp_path / order
        for k in order:  # one batch each
            ingest([data / f"lsh_{k}.jsonl"], root, IngestConfig(workers=1, domain_override="terminal"), progress=False)
        s = dedup(root, progress=False)
        got[order] = (s.verified_pairs, run_query(root, """SELECT t.task, d.cluster_id IS NOT NULL, d.is_representative
            FROM trajectories t LEFT JOIN duplicates d USING (trajectory_id) ORDER BY 1""")[1])
    assert got["ABC"] == got["BAC"] == got["CBA"] == (2, [("task A", True, False), ("task B", True, False),
                                                          ("task C", True, True)])


@pytest.mark.parametrize("order", ["clean, then dedup --ignore-cleaning", "dedup, then clean"])
def test_a_shared_prefix_counts_in_a_sharer_that_cleaning_keeps(order: str, tmp_path: Path) -> None:
    """Two sessions share three turns; cleaning drops the one that owned them (a sandbox crash). The
    kept one's copy of the prefix counted nowhere (5 kept turns, 2 counted)."""
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.query import run_query

    root = tmp_path / "c"
    ingest([Path(__file__).resolve().parents[1] / "data" / "dedup" / "prefix_owner.jsonl"], root,
           IngestConfig(workers=1, domain_override="terminal"), progress=False)
    if order.startswith("clean"):
        clean(root, progress=False)
        dedup(root, DedupConfig(use_cleaning=False), progress=False)
    else:
        dedup(root, progress=False)
        clean(root, progress=False)
    assert run_query(root, "SELECT count(*) FROM shared_prefixes WHERE NOT counts_for_training")[1] == [(3,)]
    assert run_query(root, """SELECT t.task, count(*), count(*) FILTER (WHERE counts_for_training)
                              FROM kept_turns JOIN trajectories t USING (trajectory_id) GROUP BY 1""")[1] == [
        ("run the app tests", 5, 5)]


def test_an_lsh_bucket_past_all_pairs_is_paired_in_content_hash_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket larger than ALL_PAIRS_BUCKET has each member paired with the first and the previous
    in content-hash order, not every pair: twelve near-copies under a bound of 4 still make one
    cluster, from fewer candidate pairs than every pair of them in every band."""
    import orjson

    from pipelines import dedup as dedup_module
    from pipelines.ingest import IngestConfig, ingest

    monkeypatch.setattr(dedup_module, "ALL_PAIRS_BUCKET", 4)
    words = " ".join(f"w{i}" for i in range(120))
    lines = []
    for k in range(12):  # the same long output, one word apart
        call = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "cat notes.txt"}'}}
        lines.append(orjson.dumps({"messages": [{"role": "user", "content": f"task {k}"},
                                                {"role": "assistant", "content": None, "tool_calls": [call]},
                                                {"role": "tool", "tool_call_id": "c0", "content": f"{words} extra{k}"}]}))
    (tmp_path / "near.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    root = tmp_path / "c"
    ingest([tmp_path / "near.jsonl"], root, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    s = dedup(root, progress=False)
    assert (s.clusters, s.near_duplicates, s.kept) == (1, 11, 1)
    assert 11 <= s.candidate_pairs < 12 * 11 // 2


def test_the_summary_tells_dropped_by_cleaning_from_no_turns(tmp_path: Path) -> None:
    """A trajectory with no turns has no signature, and cleaning did not drop it (`--min-turns 0`): it
    was counted as dropped by cleaning."""
    import orjson

    from pipelines.clean import CleanConfig
    from pipelines.ingest import IngestConfig, ingest

    call = {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}
    lines = [{"messages": [{"role": "user", "content": "only a task"}]},
             {"messages": [{"role": "user", "content": "one call"}, call, {"role": "tool", "tool_call_id": "c1", "content": "a"}]},
             {"messages": [{"role": "user", "content": "two calls"}, call, {"role": "tool", "tool_call_id": "c1", "content": "a"},
                           call, {"role": "tool", "tool_call_id": "c1", "content": "b"}]}]
    f = tmp_path / "chat.jsonl"
    f.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    clean(corpus, CleanConfig(min_turns=0), progress=False)
    s = dedup(corpus, progress=False)
    assert (s.trajectories, s.considered, s.dropped_by_cleaning) == (3, 2, 0)
    assert "2 of 3 trajectories considered (0 dropped by cleaning, 1 with no turns left, 0 with no text)" in s.render()
    clean(corpus, CleanConfig(min_turns=2), progress=False)  # drops the one-call trajectory, and the one with none
    s = dedup(corpus, progress=False)
    assert (s.trajectories, s.considered, s.dropped_by_cleaning) == (3, 1, 2)
    assert "1 of 3 trajectories considered (2 dropped by cleaning, 0 with no turns left, 0 with no text)" in s.render()


def test_the_report_counts_the_duplicates_the_kept_views_leave_out(sample_corpus: Path, tmp_path: Path) -> None:  # noqa: F811
    """dedup before clean: cleaning drops some of dedup's representatives, and the kept views then keep
    another member of their clusters. The report counted every non-representative as dropped (29
    where the views leave out 5) and named dropped representatives as the clusters' members."""
    import re

    from pipelines.clean import clean
    from pipelines.dedup import dedup
    from pipelines.dedup_report import section_dedup
    from pipelines.query import connect
    from pipelines.views import duplicates_left_out

    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    dedup(corpus, progress=False)
    clean(corpus, progress=False)
    con = connect(corpus)
    left_out = con.sql(f"SELECT count(*) FROM ({duplicates_left_out(['cleaning', 'duplicates'])})").fetchall()[0][0]
    naive = con.sql("SELECT count(*) FROM duplicates WHERE NOT is_representative").fetchall()[0][0]
    # independently: each cluster keeps one of the members cleaning kept, and leaves the others out
    want = con.sql("""SELECT sum(greatest(n - 1, 0)) FROM (
        SELECT cluster_id, count(*) FILTER (WHERE trajectory_id NOT IN (
            SELECT trajectory_id FROM cleaning WHERE turn_index IS NULL)) AS n FROM duplicates GROUP BY 1)""").fetchall()[0][0]
    assert (left_out, naive) == (want, 29) and want == 5
    html = section_dedup(con)
    chart = html.split("Duplicates dropped, by kind")[2].split("</figure>")[0]  # past the caption and the label
    assert sum(int(v) for v in re.findall(r'font-size="12">(\d+)</text>', chart)) == left_out
    kept = {r[0] for r in con.sql("SELECT trajectory_id FROM kept_trajectories").fetchall()}
    table = html.split("Largest clusters")[1]
    shown = re.findall(r"<tr><td>[^<]+</td><td>\d+</td><td>([0-9a-f]{32})</td>", table)
    assert shown and all(t in kept for t in shown)


def test_a_reward_of_one_ranks_as_success_before_the_earliest(tmp_path: Path) -> None:
    """The representative is the successful member (outcome success, or a reward of at least 1), then the
    longest, then the earliest: a run rewarded 1.0 with no outcome beats an earlier unrewarded copy."""

    turns = [Turn(kind="env", action="ls", observation="a.txt  b.txt", observation_kind="stdout", exit_code=0),
             Turn(kind="env", action="cat a.txt", observation="hello from a", observation_kind="stdout", exit_code=0)]

    def run(name: str, reward: float, day: int) -> Trajectory:
        return Trajectory(domain="terminal", source_format="chat", native_id=name, record_digest=f"planted:{name}",
                          turns=[dataclasses.replace(u) for u in turns], task="list and read", reward=reward,
                          collected_at=dt.datetime(2026, 1, day, tzinfo=dt.UTC))

    rewarded, earlier = plant(tmp_path / "c", [run("rewarded", 1.0, 2), run("earlier", 0.0, 1)])
    s = dedup(tmp_path / "c", progress=False)
    assert (s.clusters, s.exact_duplicates, s.kept) == (1, 1, 1)
    assert rows(tmp_path / "c", "SELECT trajectory_id, is_representative FROM duplicates ORDER BY is_representative DESC") == [
        (rewarded, True), (earlier, False)]

    # the contracts fail on what they guard against: two representatives in one cluster
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.clean_contracts import duplicates_one_representative
    from pipelines.store import Corpus

    assert duplicates_one_representative(Corpus(tmp_path / "c")).passed
    [f] = sorted((tmp_path / "c" / "side" / "duplicates").glob("*.parquet"))
    t = pq.read_table(f)
    i = t.schema.get_field_index("is_representative")
    pq.write_table(t.set_column(i, t.schema.field(i), pa.array([True] * t.num_rows)), f)
    broken = duplicates_one_representative(Corpus(tmp_path / "c"))
    assert not broken.passed and broken.metadata["bad_clusters"] == [t.column("cluster_id")[0].as_py()]


def test_a_shared_prefix_with_two_owners_fails_its_contract(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipelines.clean_contracts import shared_prefixes_counted_once
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.store import Corpus

    root = tmp_path / "c"
    ingest([Path(__file__).resolve().parents[1] / "data" / "dedup" / "prefix_owner.jsonl"], root,
           IngestConfig(workers=1, domain_override="terminal"), progress=False)
    dedup(root, progress=False)
    assert shared_prefixes_counted_once(Corpus(root)).passed
    [f] = sorted((root / "side" / "shared_prefixes").glob("*.parquet"))
    t = pq.read_table(f)
    i = t.schema.get_field_index("counts_for_training")
    flags = t.column(i).to_pylist()
    j = flags.index(False)  # a sharer's copy of the prefix: counted too now
    pq.write_table(t.set_column(i, t.schema.field(i), pa.array([True if k == j else v for k, v in enumerate(flags)])), f)
    broken = shared_prefixes_counted_once(Corpus(root))
    assert not broken.passed and broken.metadata["bad_prefixes"] == [str(t.column("prefix_hash")[j].as_py())]
