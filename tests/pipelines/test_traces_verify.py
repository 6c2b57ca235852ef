"""Verifiers on real observation pairs from the sample corpus: a turn's observation against itself,
against an edited copy, and against another turn's, with the expected scores derived by hand
(the arithmetic is in the comments) or, where a hand count is impractical, by an independent
implementation in this file (a quadratic edit-distance table, a separate JSON flattener)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from pipelines.ingest import ingest
from pipelines.query import connect
from pipelines.traces.verify import levenshtein, stated_exit_code, verify


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.conftest import SAMPLE

    out = tmp_path_factory.mktemp("verify") / "corpus"
    ingest([SAMPLE], out, progress=False)
    return out


def _obs(corpus: Path, where: str) -> tuple[str, int | None, bool | None]:
    rows = connect(corpus).sql(f"""SELECT u.observation, u.exit_code, u.is_error FROM turns u JOIN trajectories t
        USING (trajectory_id) WHERE {where} ORDER BY u.trajectory_id, u.turn_index LIMIT 1""").fetchall()
    assert rows, f"no sample turn where {where}"
    return rows[0]


def _dp(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_terminal_intercode(corpus: Path) -> None:
    real, code, _ = _obs(corpus, "t.source_format = 'intercode' AND u.observation = "
                                 "'1 /testbed/dir1/info.php' || chr(10) || '1 /testbed/hello.php' || chr(10)")
    assert code is None and len(real) == 46  # 24 + 1 + 20 + 1 characters, 2 lines
    same = verify("terminal", real, real)
    assert (same.score, same.components) == (1.0, {"line_f1": 1.0, "edit_sim": 1.0})
    # one line changed (1 → 2): line F1 = 1/2; one substitution in 46 characters
    edited = verify("terminal", real.replace("1 /testbed/hello", "2 /testbed/hello"), real)
    assert edited.components == {"line_f1": 0.5, "edit_sim": 0.978261}  # 1 - 1/46
    assert edited.score == 0.73913  # 0.5·0.5 + 0.5·(45/46)
    other, _, _ = _obs(corpus, "u.action = 'xxd -p -l 16 /testbed/textfile7.txt'")
    assert other == "/bin/bash: line 1: xxd: command not found\n"
    v = verify("terminal", other, real)
    assert _dp(other, real) == levenshtein(other, real) == 40
    assert v.components == {"line_f1": 0.0, "edit_sim": 0.130435}  # 1 - 40/46
    assert v.score == 0.065217


def test_line_ends_of_a_pty_are_line_ends() -> None:
    """`\r\r\n` (a pty's line end) and a last `\r` erased the line before them: the right prediction of
    such an output scored 0.05, an empty one 0.5 (the default threshold), and a right one with a
    trailing `\r` 0."""
    real = "total 8\r\r\nfile_a.txt\r\r\nfile_b.txt\r\r\n"
    assert verify("terminal", "total 8\nfile_a.txt\nfile_b.txt\n", real).score == 1.0
    assert verify("terminal", "", real).components == {"line_f1": 0.0, "edit_sim": 0.0}
    assert verify("terminal", "Done 100%\r", "Done 100%").score == 1.0
    assert verify("search", "result text here\r", "result text here").score == 1.0
    # a carriage return inside a line still redraws it
    assert verify("terminal", "50%\r100%\ndone\n", "100%\ndone\n").score == 1.0


def test_terminal_exit_codes(corpus: Path) -> None:
    real, code, _ = _obs(corpus, "t.source_format = 'openhands-output' AND u.observation = '29:DECL(pattern);'")
    assert code == 0
    # the prediction states an exit code: lines 1 of 2 predicted match the 1 real → F1 2/3;
    # 13 characters inserted ("\nexit code: 0") into 17 → 1 - 13/30
    ok = verify("swe", real + "\nexit code: 0", real, code)
    assert ok.components == {"line_f1": 0.666667, "edit_sim": 0.566667, "exit_match": 1.0}
    assert ok.score == 0.693333  # 0.4·2/3 + 0.4·17/30 + 0.2
    assert verify("swe", real + "\nexit code: 1", real, code).score == 0.493333  # the same without the 0.2
    assert verify("swe", real, real, code).components == {"line_f1": 1.0, "edit_sim": 1.0}  # not stated: not judged
    # SWE-agent's marker states the code in the real observation itself
    curl, code, _ = _obs(corpus, "t.source_format = 'swe-agent' AND u.observation LIKE '%Hello World from Perl!%'")
    assert code is None and stated_exit_code(curl) == 0
    assert verify("terminal", curl, curl).components == {"line_f1": 1.0, "edit_sim": 1.0, "exit_match": 1.0}
    assert verify("terminal", curl.replace("PROCESS-DONE:0:", "PROCESS-DONE:2:"), curl).components["exit_match"] == 0.0


def _flatten(v: object, path: str = "") -> tuple[set, set]:
    """Independent of the verifier: (path, kind) of every node, (path, value) of every leaf."""
    if isinstance(v, dict):
        kinds, vals = {(path, "dict")}, set()
        for k, x in v.items():
            a, b = _flatten(x, path + "/" + k)
            kinds, vals = kinds | a, vals | b
        return kinds, vals
    if isinstance(v, list):
        kinds, vals = {(path, "list")}, set()
        for i, x in enumerate(v):
            a, b = _flatten(x, f"{path}/{i}")
            kinds, vals = kinds | a, vals | b
        return kinds, vals
    return {(path, type(v).__name__)}, {(path, json.dumps(v))}


def _f1(a: set, b: set) -> float:
    m = len(a & b)
    return 0.0 if m == 0 else 2 * m / (len(a) + len(b))


def test_mcp_tau_bench(corpus: Path) -> None:
    real, _, is_error = _obs(corpus, "t.source_format = 'tau-bench' AND u.observation LIKE '{\"name\": {\"first_name\": \"Omar\"%'")
    assert is_error is False
    same = verify("mcp", real, real, is_error=is_error)
    assert (same.score, same.components) == (1.0, {"structure_f1": 1.0, "value_f1": 1.0, "pred_json": 1.0})
    # 37 leaves (name 2, address 6, email, dob, 4 payment methods 3+4+4+3, 2 passengers × 3,
    # membership, 6 reservations); one value changed: value F1 = 36/37, structure unchanged
    edited = verify("mcp", real.replace('"San Diego"', '"San Jose"'), real, is_error=is_error)
    assert edited.components == {"structure_f1": 1.0, "value_f1": 0.972973, "pred_json": 1.0}
    assert edited.score == 0.972973  # value_f1·(1 + structure_f1)/2 = 36/37
    # stating isError adds a node (49 → 50 of 49: F1 98/99), not a value judged as one (the flag is judged
    # against the turn's is_error, false): 0.8·json + 0.2·agreement
    wrong = json.dumps({"isError": True, **json.loads(real)})
    v = verify("mcp", wrong, real, is_error=is_error)
    assert v.components == {"structure_f1": 0.989899, "value_f1": 1.0, "pred_json": 1.0, "is_error_match": 0.0}
    assert v.score == 0.79596  # 0.8 · (1 + 98/99)/2
    assert verify("mcp", wrong.replace('"isError": true', '"isError": false'), real, is_error=is_error).score == 0.99596
    # another turn's observation: another user's details (independent flattener), and a user reply (not JSON)
    mia, _, _ = _obs(corpus, "t.source_format = 'tau-bench' AND u.observation LIKE '{\"name\": {\"first_name\": \"Mia\"%'")
    ka, va = _flatten(json.loads(mia))
    kb, vb = _flatten(json.loads(real))
    v = verify("mcp", mia, real, is_error=is_error)
    assert v.components["structure_f1"] == round(_f1(ka, kb), 6) == 0.527473
    assert v.components["value_f1"] == round(_f1(va, vb), 6) == 0.058824
    reply, _, _ = _obs(corpus, "t.source_format = 'tau-bench' AND u.observation_kind = 'user_reply'")
    assert verify("mcp", reply, real, is_error=is_error).components == {"structure_f1": 0.0, "value_f1": 0.0, "pred_json": 0.0}


def test_search_fireact(corpus: Path) -> None:
    real, _, _ = _obs(corpus, "u.observation LIKE 'Its name comes from the Latin words Fennia%'")
    assert verify("search", real, real).score == 1.0
    # 25 words; the first sentence alone has 12 of them: P = 1, R = 12/25, F1 = 24/37
    first = real.split(". The")[0] + "."
    assert verify("search", first, real).components == {"word_f1": 0.648649}
    other, _, _ = _obs(corpus, "u.observation LIKE 'Elachista canapennella is a moth%'")
    # 19 words; shared: one "the" (of 3) and "in" → 2 matches: F1 = 4 / (19 + 25)
    v = verify("search", other, real)
    assert sum((Counter(re.findall(r"\w+", other.lower())) & Counter(re.findall(r"\w+", real.lower()))).values()) == 2
    assert v.score == 0.090909


def test_tree_android_and_web(corpus: Path) -> None:
    first, _, _ = _obs(corpus, "t.domain = 'android' AND u.turn_index = 1")
    lines = [ln for ln in first.split("\n") if ln.strip()]
    assert len(lines) == 14
    assert verify("android", first, first).score == 1.0
    # one node removed: 13 of 14 → F1 = 26/27
    assert verify("android", "\n".join(lines[:5] + lines[6:]), first).score == 0.962963
    second, _, _ = _obs(corpus, "t.domain = 'android' AND u.turn_index = 2")
    strip = re.compile(r"^\[\d+\]\s*")
    na = Counter(strip.sub("", ln.strip()) for ln in first.split("\n") if ln.strip())
    nb = Counter(strip.sub("", ln.strip()) for ln in second.split("\n") if ln.strip())
    assert (sum(na.values()), sum(nb.values()), sum((na & nb).values())) == (14, 49, 9)
    assert verify("android", second, first).score == 0.285714  # 2·9 / (14 + 49)
    # web: element ids are not content — renumbering every [bid] changes nothing
    web, _, _ = _obs(corpus, "t.domain = 'web'")
    renumbered = re.sub(r"\[(\d+)\]", lambda m: f"[{int(m.group(1)) + 1000}]", web)
    assert renumbered != web and verify("web", renumbered, web).score == 1.0


def test_mcp_right_keys_with_wrong_values_earn_nothing() -> None:
    """0.5·structure + 0.5·values gave the right keys with every value wrong 0.5, the default threshold
    (kept as an SFT target), and a wrong text in a standard content part 0.87 (its `type` leaf right)."""
    real = '{"flights":[{"id":"HAT1","price":120}]}'
    assert verify("mcp", '{"flights":[{"id":"X","price":0}]}', real).score == 0.0
    assert verify("mcp", '{"flights":[{"id":"HAT1","price":0}]}', real).score == 0.5  # half the values: 0.5·(1 + 1)/2
    text = '{{"content":[{{"type":"text","text":"{}"}}],"isError":false}}'
    wrong = verify("mcp", text.format("Error: permission denied"), text.format("Found 3 files: a.py b.py c.py"), is_error=False)
    assert (wrong.score, wrong.components["value_f1"], wrong.components["is_error_match"]) == (0.2, 0.0, 1.0)  # 0.8·0 + 0.2


def test_json_paths_of_a_deeply_nested_document() -> None:
    """An observation nested past Python's recursion limit raised RecursionError, ending the run
    after all its generation; the walk gives the same paths as before for a shallow one."""
    from pipelines.traces.verify import json_paths

    deep = "[" * 1000 + "1" + "]" * 1000
    assert verify("mcp", deep, deep).score == 1.0
    types, values = json_paths({"a": [1, {"b": "x"}], "c": None})
    assert types == {("$", "object"), ("$.a", "array"), ("$.a[0]", "number"), ("$.a[1]", "object"), ("$.a[1].b", "string"),
                     ("$.c", "null")}
    assert values == {("$.a[0]", "1"), ("$.a[1].b", "x"), ("$.c", "null")}
