"""The redactor's short cuts (gates, keyed kinds, needles found by DuckDB) change nothing: the
same texts and counts as running every kind's pattern over the whole text, the way `redact` did
before them; and the expensive patterns run only where they can match."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from pipelines.query import connect
from pipelines.redact import KINDS, TRAJECTORY_TEXT_COLUMNS, TURN_TEXT_COLUMNS, RedactConfig, Redactor
from tests.pipelines.clean_support import sample_corpus  # noqa: F401 - fixture
from tests.pipelines.test_redact import PLANTED, TRICKY

CONFIGS = [RedactConfig(), RedactConfig(ip_addresses=True), RedactConfig(emails=False)]


def reference(red: Redactor, text: str | None) -> tuple[str | None, Counter[str]]:
    """Every kind whose needles the text holds, its pattern over the whole text."""
    counts: Counter[str] = Counter()
    if not text:
        return text, counts
    low = text.lower()
    for kind, rx in red._compiled:
        if kind.needs is None or any(n in low for n in kind.needs):
            text = rx.sub(red._replace(kind, counts), text)
    return text, counts


KEYS = ["token", "access_token", "API_KEY", "apikey", "Private-Key", "client.secret", "x.token", "my-secret", "secret_token",
        "max_tokens", "token_file", "DB_PASSWORD", "passwd", "pwd", "Passphrase", "password_hash", "AWS_SECRET_ACCESS_KEY"]
QUOTES = ["", '"', "'", '\\"', "\\'"]
SEPS = [":", "=", " : ", "\t= ", " ==", ": ", "  "]
VALUES = ["zq8Xw3Lm9Pt2Rv7Yq1", '"zq8Xw3Lm9Pt2Rv7Yq1"', "'hunter22x'", '\\"pa55word99x\\"', "12", "None", "${X}",
          "os.environ[X]", "Zx9+Qw8/Er7Ty6Ui5Op4As3Df2Gh1Jk0LzXcVbNm", "<SECRET:x>"]
BEFORE = ["", "x", " ", "<", ".", "-", "--", "\\n", "export ", "{", "a.", "é", "İ"]


def texts() -> list[str]:
    """Keys in every quoting, separator and value, after every kind of neighbour; several to a
    text (matches next to, inside and after one another); flags; non-ASCII; the planted kinds."""
    rng = random.Random(7)
    one = [f"{b}{q}{k}{q}{s}{v}" for b, q, k, s, v in itertools.product(BEFORE, QUOTES, KEYS, SEPS, VALUES)]
    out = rng.sample(one, 2500)
    out += [" ".join(rng.sample(one, 6)) for _ in range(400)] + ["".join(rng.sample(one, 4)) for _ in range(300)]
    out += [x.upper() for x in rng.sample(one, 300)] + [x.replace("s", "ſ").replace("k", "\u212a") for x in rng.sample(one, 200)]
    out += [f"{f}{s}{v}" for f in ("--password", "-pwd", "--db-password", "x--password", "-PASSWD") for s in ("=", " ", "\t")
            for v in ("S3cretPw", "'r00t!'", "$PW", "12")]
    out += [t for t, _ in PLANTED.values()] + [t for t in TRICKY if t]
    out += ['{"usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}, "api_key": "zq8Xw3Lm9Pt2Rv7Yq1"}',
            "a secret, a token and the api docs; password reset at https://u:p4ss@h.io/x, mail ops@corp.io",
            '{"cmd": "DATABASES = {\\"password\\": \\"pa55word\\"}"}', "PASSWORD=Pw9f3kQz77 token=" + "ab12" * 5000]
    return out


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "ips", "no-emails"])
def test_same_as_every_pattern_over_the_whole_text(config: RedactConfig) -> None:
    red = Redactor(config)
    cases = texts()
    got = [red.redact(t) for t in cases]
    want = [reference(red, t) for t in cases]
    assert [t for t, g, w in zip(cases, got, want, strict=True) if g != w] == []
    changed = sum(w[0] != t for t, w in zip(cases, want, strict=True))
    assert changed > 1500  # the cases exercise the patterns
    # with the needles found by DuckDB (what clean's scan passes): the same again
    con = duckdb.connect()
    con.register("t", pa.table({"i": list(range(len(cases))), "text": cases}))
    masks = [r[0] for r in con.execute(f"SELECT {red.needles_sql('text')} FROM t ORDER BY i").fetchall()]
    assert [t for t, m, w in zip(cases, masks, want, strict=True) if red.redact(t, m) != w] == []


def test_same_on_every_text_of_the_sample(sample_corpus: Path) -> None:  # noqa: F811 - fixture
    red = Redactor(RedactConfig(ip_addresses=True))
    con = connect(sample_corpus)
    n = differ = 0
    for table, names in (("turns", TURN_TEXT_COLUMNS), ("trajectories", TRAJECTORY_TEXT_COLUMNS)):
        for c in names:
            for text, mask in con.sql(f'SELECT "{c}", {red.needles_sql(chr(34) + c + chr(34))} FROM {table} '
                                      f'WHERE "{c}" IS NOT NULL').fetchall():
                n += 1
                want = reference(red, text)
                differ += red.redact(text) != want or red.redact(text, mask) != want
    assert (n, differ) == (20908 - 59, 0)  # InterCode's 59 plain `submit` turns have no observation


class Counting:
    """A compiled pattern that records how it is used."""

    def __init__(self, rx: re.Pattern[str], calls: list[tuple[str, int]]):
        self.rx, self.calls = rx, calls

    def sub(self, repl, text):  # noqa: ANN001, ANN201
        self.calls.append(("sub", 0))
        return self.rx.sub(repl, text)

    def match(self, text, pos=0):  # noqa: ANN001, ANN201
        self.calls.append(("match", pos))
        return self.rx.match(text, pos)


def _counting(red: Redactor, name: str) -> list[tuple[str, int]]:
    calls: list[tuple[str, int]] = []
    red._compiled = [(k, Counting(rx, calls) if k.name == name else rx) for k, rx in red._compiled]
    return calls


def test_config_secret_runs_only_at_keys() -> None:
    """Its needles (`secret`, `api`, `token`, `private`) are in most texts that mention an API; its
    pattern is tried only at the start of a key followed by `:` or `=`, and one or two
    characters before it (an opening quote)."""
    red = Redactor()
    calls = _counting(red, "config_secret")
    assert red.redact("the api docs: tokens, secrets and private keys") == ("the api docs: tokens, secrets and private keys", Counter())
    assert calls == []
    text = '{"prompt_tokens": 12, "total_tokens": 19, "api_key": "zq8Xw3Lm9Pt2Rv7Yq1"}'
    assert red.redact(text) == ('{"prompt_tokens": 12, "total_tokens": 19, "api_key": "<SECRET:config_secret>"}',
                                Counter({"config_secret": 1}))
    # at 0 ('{') no key starts; at 1 ('"') one does, up to `12`; then the quote before each key
    assert calls == [("match", 0), ("match", 1), ("match", 21), ("match", 22), ("match", 41), ("match", 42)]
    # a non-ASCII text (lower case may differ from the pattern's case folding) takes the whole pattern
    calls.clear()
    assert red.redact("clé token=zq8Xw3Lm9Pt2Rv7Yq1") == ("clé token=<SECRET:config_secret>", Counter({"config_secret": 1}))
    assert calls == [("sub", 0)]


def test_gates_are_declared_where_they_pay() -> None:
    gated = {k.name: k.keyed for k in KINDS if k.gate is not None}
    assert gated == {"url_password": False, "aws_secret_key": False, "stripe_key": False, "config_password": True,
                     "config_password_flag": False, "config_secret": True, "config_secret_flag": False, "email": False}
    from pipelines.redact import Kind

    with pytest.raises(ValueError, match="`keyed` needs a `gate`"):
        Kind("k", r"x", needs=("x",), keyed=True)
