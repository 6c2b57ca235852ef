"""Secret and PII redaction: the function the export stage calls on every text it writes.

Each kind is a Python regular expression whose match is replaced by a typed placeholder
(`<SECRET:aws_access_key>`, `<PII:email>`), counted per kind. Where a pattern also captures
context (the key of `password: hunter2`, the user of `postgres://user:pw@host`), only the value is
replaced. Kinds whose pattern alone over-matches (config keys, OpenAI-style keys) validate the
value before replacing it.

The corpus itself stays verbatim (the redactions are applied on the way out); `worldline clean`
records which turns and columns contain what in the side table `redactions`. It picks the texts
to run the patterns on in DuckDB with the redactor's own pre-filter (`Redactor.candidates_sql`:
the same lower-case needles `redact` checks before anything else), so the table lists every text
`redact` would change: export may then redact only those (`pipelines.export.scan_usable`).

Speed without other findings: past the needles, a kind may name a `gate`, a pattern every match
of the kind contains, searched (without flags) in the lower-cased text of an ASCII text first;
the kind's own pattern runs only where the gate matches, and for `keyed` kinds (`key = value`)
only at the starts of the keys the gate found. Each is an exact necessary condition, so the
output is the same as running every pattern over the whole text (`tests/pipelines/test_redact_speed.py`
checks it against that reference).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pyarrow as pa

# The text columns `clean` scans for secrets (its `redactions` table says where it found them): every text a
# reader of the corpus might take. Export and traces emit only the rendered ones below, redacted.
TURN_TEXT_COLUMNS = ("action", "tool_name", "tool_args", "thought", "observation", "stdout", "stderr", "state", "metadata")
TRAJECTORY_TEXT_COLUMNS = ("task", "action_space", "initial_state", "agent", "model", "env_fingerprint", "metadata", "native_id")
# the texts the world-model rendering (pipelines.render) reads: what export and traces must redact
RENDERED_TURN_TEXTS = ("action", "tool_name", "tool_args", "thought", "observation")
RENDERED_TRAJECTORY_TEXTS = ("task", "action_space", "initial_state")

_STOP_VALUES = frozenset(
    {"", "none", "null", "nil", "true", "false", "undefined", "required", "optional", "str", "string", "int",
     "bool", "dict", "list", "any", "object", "secret", "password", "token", "***", "****", "*****", "xxx",
     "redacted", "<redacted>", "[redacted]", "..."}
)
# `PASSWORD_FILE=/run/secrets/db`, `--password-file x`, `password_min_length: 8`: names of
# where a secret is or what it must look like, not the secret.
_REFERENCE_KEY = re.compile(r"(?i)[_.-](?:file|path|dir|env|stdin|cmd|command|prompt|length|len|policy|hash|hint|field|type|id)$")
_CODE_VALUE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$|[()\[\]{}]|^\$|^%\(|^@")
# `pass` alone only as the last segment after another (`DB_PASS`, `smtp.pass`): `PASS: test_x` is a test's
# result, `bypass`/`compass` no key, SWE-bench's `FAIL_TO_PASS`/`PASS_TO_PASS` test lists
_PASSWORD_KEY = (r"[A-Za-z0-9_.-]*(?:password|passwd|passphrase|pwd|(?<=[A-Za-z0-9][_.-])(?<!to[_.-])pass(?![A-Za-z0-9_.-]))"
                 r"[A-Za-z0-9_.-]*")
_SECRET_KEY = (r"[A-Za-z0-9_.-]*(?:secret|api[_-]?key|apikey|access[_-]?token|auth[_-]?token|refresh[_-]?token"
               r"|private[_-]?key|client[_-]?secret|token)[A-Za-z0-9_.-]*")


def _placeholder(kind: str) -> str:
    return f"<PII:{kind}>" if kind in ("email", "ip_address") else f"<SECRET:{kind}>"


def _plausible_value(value: str, key: str, min_len: int, bare: bool) -> bool:
    """A config value worth redacting: not empty, not a placeholder, not a reference to elsewhere
    (`os.environ[...]`, `$VAR`, `get_password()`), not a tokenizer's `eos_token = "</s>"`."""
    v = value.strip()
    if len(v) < min_len or v.lower() in _STOP_VALUES or v.startswith(("<SECRET:", "<PII:")):
        return False
    if v.lower() == key.lower() or (bare and _CODE_VALUE.search(v)) or v.startswith(("$", "${", "%(", "{{")):
        return False
    if min_len > 1:  # secrets, tokens, keys: random-looking, i.e. letters and digits, or long
        has_digit, has_alpha = any(c.isdigit() for c in v), any(c.isalpha() for c in v)
        if not ((has_digit and has_alpha) or len(v) >= 20) or " " in v:
            return False
    return True


@dataclass(frozen=True)
class Kind:
    """One kind of secret. `group` is the capture group replaced (0: the whole match); `check`
    validates a match before it is replaced; `needs`: lower-case literals one of which every match
    contains (the pre-filter, in Python and, through `Redactor.candidates_sql`, in DuckDB);
    `probe`, only for a kind without `needs`: an RE2 pattern that finds every text the Python
    pattern could match (it may find more).

    `gate`: a Python pattern, no flags, over the lower-cased text of an ASCII text (where lower
    casing maps A-Z to a-z and nothing else, so any match of `pattern` there, whatever its
    flags, is a match of the lower-case sub-pattern written here) that every match of `pattern`
    contains: a text without it is skipped. `keyed`: every match of `pattern` starts at a run
    of key characters `[A-Za-z0-9_.-]`, or at most two characters (a quote, an escaped quote)
    before it, and a match of `gate` starts inside that run; `pattern` is then tried only
    there (see `_sub_keyed`)."""

    name: str
    pattern: str
    group: int | str = 0
    flags: int = 0
    check: Callable[[re.Match[str]], bool] | None = None
    label: str | None = None  # the kind counted and shown in the placeholder (default: name)
    needs: tuple[str, ...] | None = None  # lower-case literals one of which any match contains
    probe: str | None = None
    gate: str | None = None  # lower-case pattern every match contains (ASCII texts), see above
    keyed: bool = False  # the gate starts inside the key every match starts with (see above)

    def __post_init__(self) -> None:
        if (self.needs is None) == (self.probe is None):
            raise ValueError(f"kind {self.name}: give `needs` or, without them, a `probe`")
        if self.keyed and self.gate is None:
            raise ValueError(f"kind {self.name}: `keyed` needs a `gate`")

    @property
    def kind(self) -> str:
        return self.label or self.name


_VALUE_GROUPS = ("v_esc", "v_dq", "v_sq", "v_bare")


def _value_group(m: re.Match[str]) -> str | None:
    """Which alternative of a config value matched (quoted, escaped-quoted, bare)."""
    for g in _VALUE_GROUPS:
        if m.group(g) is not None:
            return g
    return None


_PASSWORD_WORD = re.compile(r"(?i)pass|pwd")
_PASSWORD_NAME = re.compile(r"(?i)password|passwd|passphrase|pwd")


_NOT_SECRET_KEY = re.compile(r"(?i)tokeni[sz]er|tokens\b|token_?(?:type|count|ids?|len(?:gth)?|limit|usage)")
_PROSE_AFTER = re.compile(r"[ \t]+[^\s#]")  # after a bare word, more words on the line: a message


def _check_config(m: re.Match[str]) -> bool:
    key = m.group("key").strip("\\\"'[]")
    g = _value_group(m)
    if g is None or _REFERENCE_KEY.search(key) or _NOT_SECRET_KEY.search(key):
        return False
    if g == "v_bare" and m.group(g).isalpha() and m.string[m.end("key"):m.start(g)].strip() == ":" \
            and _PROSE_AFTER.match(m.string, m.end()):
        return False  # a word, then more: `passwd: Authentication token manipulation error`, `passwd: user 'bob' ...`
    is_password = _PASSWORD_WORD.search(key) is not None
    if is_password and _PASSWORD_NAME.search(key) is None and m.group(g).strip().isdigit():
        return False  # `tests_pass: 12`: a `pass` key with a count
    return _plausible_value(m.group(g), key, 1 if is_password else 8, bare=g == "v_bare")


def _check_literal(m: re.Match[str]) -> bool:
    """A command line's password: a value, not `$PASS`, `<password>` or `***`."""
    return _plausible_value(m.group("value"), "", 1, bare=False)


def _check_token(m: re.Match[str]) -> bool:
    """A URL parameter's or a cookie's value that is a credential: random-looking and 16 characters
    or more (`?key=name`, `?sig=on`, `session=expired` are words)."""
    return _plausible_value(m.group("value"), "", 16, bare=False)


def _check_session_cookie(m: re.Match[str]) -> bool:
    """A session's cookie (`sessionid`, `PHPSESSID`, `laravel_session`, `connect.sid`, `sid`) with a credential for its value."""
    name = m.group("name").lower()
    return ("sess" in name or name == "sid" or name.endswith(("_sid", ".sid", "-sid"))) and _check_token(m)


def _check_email(m: re.Match[str]) -> bool:
    """An address's domain names something: `pkg@1.0.tgz` (a package file) has no letter before its end."""
    host = m.group(0).rpartition("@")[2]
    if _RETINA_ASSET.fullmatch(host):
        return False  # `icon@2x.png`: an image at twice the resolution, named as iOS and the web do
    return any(c.isalpha() for c in host.rpartition(".")[0])


_RETINA_ASSET = re.compile(r"(?i)\d+(?:\.\d+)?x\.(?:png|jpe?g|gif|webp|svg|avif|bmp|ico|tiff?|heic)")


def _check_openai(m: re.Match[str]) -> bool:
    v = m.group(0)
    return any(c.isdigit() for c in v) and any(c.isupper() for c in v)


# A word boundary before a token, which inside JSON text may follow an escape (`\nAKIA...`).
_B = r"(?:(?<![A-Za-z0-9_])|(?<=\\[nrt]))"
# The end of a token: no ASCII word character after it (`\b` is Unicode-aware: CJK text written without
# spaces, `密钥AKIA...已泄露`, has no boundary after the key).
_E = r"(?![A-Za-z0-9_])"
# Where an address may start: not after a backslash (its first letter may be an escape's: `\njohn@x.io`
# keeps its `\n`), and not inside a run of the characters a local part is made of (each start there would
# scan the run to its end again: quadratic on a long `-----` line).
_B_EMAIL = r"(?:(?<![A-Za-z0-9._%+\-\\])|(?<=\\[nrt]))"
_AWS_PREFIX = r"(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA)"
_Q = r"\\?[\"']"  # a quote, possibly escaped (JSON inside a JSON string)
# A config value: inside escaped quotes, inside double quotes (with escapes), single quotes, or bare (up to
# CJK text: `password=hunter2即可`, written without a space, ends at 即).
_VALUE = (r"(?:\\\"(?P<v_esc>[^\"\\\n]*)\\\"|\"(?P<v_dq>(?:[^\"\\\n]|\\.)*)\"|'(?P<v_sq>[^'\n]*)'"
          r"|(?P<v_bare>[^\s\"',;}#=\\\u3000-\u9fff\uac00-\ud7af\uff00-\uffef][^\s\"',;}#\\\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]*))")
# The end of a key in a gate: the rest of the key, a closing quote (escaped or not), `:` or `=`;
# the gate's own start is the end of the key's keyword (`token` of `access_token`), lower case.
_KEY_TAIL = r"[a-z0-9_.-]*(?:\\?[\"']\]?)?[ \t]*[:=]"
# Between a key and its value: `=`, `:`, `=>` (PHP, Ruby, Perl hashes), `:=` (Go); not `==`, nor the `=` of
# `=>` alone (its `>` was taken for the value)
_SEP = r"[ \t]*(?:=>|:=|[:=](?![=>]))[ \t]*(?![=>])"
# A key's end: a closing quote (escaped or not), and a subscript's bracket (`config['password'] = ...`)
_KEY_END = rf"(?:{_Q}\]?)?"
_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_.-")

KINDS: tuple[Kind, ...] = (
    Kind("private_key",
         # the header, then the key's own lines (base64, PEM headers) up to its END line, or at least
         # 40 characters of them when the key is cut off; a header alone (code that looks for one, a
         # grep hit) holds nothing secret, and the text after it used to go to the end
         # (line breaks may be escaped, once in JSON text, twice in JSON inside a JSON string: `\\n`),
         # armor headers (PEM's Proc-Type, DEK-Info; PGP's Version, Comment, Hash, Charset; their value
         # possessive: a long line after a BEGIN line is not tried split by split)
         r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
         r"(?:(?:[A-Za-z0-9+/=]|\s|\\+[nrt]|[A-Z][A-Za-z-]*: [^\n\\]*+)*?"
         r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|(?:\s|\\+[nrt])+[A-Za-z0-9+/=](?:(?:\s|\\+[nrt])*[A-Za-z0-9+/=]){39,})",
         needs=("private key",)),
    Kind("jwt", rf"{_B}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]{{8,}}", needs=("eyj",)),
    # the password up to the last `@` before the host (`admin:P@ss@db`: an unescaped `@` in it)
    Kind("url_password", rf"{_B}[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@'\"<>]*:(?P<value>[^\s@/'\"<>][^\s/'\"<>]*)@",
         group="value", needs=("://",), gate=r"://[^\s:/@'\"<>]*:[^\s@/'\"<>]+@"),  # `redis://:pw@host`: no user
    Kind("aws_access_key", rf"{_B}{_AWS_PREFIX}[A-Z0-9]{{16}}{_E}",
         needs=("akia", "asia", "abia", "acca", "agpa", "aida", "aipa", "anpa", "anva", "aroa", "apka")),
    Kind("aws_secret_key",
         r"(?i)(?:aws_?secret_?(?:access_?)?key|secret_?access_?key)\\?[\"']?\s*[:=]\s*\\?[\"']?(?P<value>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
         group="value", needs=("secret",), gate=r"(?:aws_?secret_?(?:access_?)?key|secret_?access_?key)\\?[\"']?\s*[:=]"),
    Kind("github_token", rf"{_B}(?:gh[pousr]_[A-Za-z0-9]{{36,255}}|github_pat_[A-Za-z0-9_]{{22,255}}){_E}",
         needs=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    Kind("slack_token", rf"{_B}xox[abposr]-[A-Za-z0-9-]{{10,}}|https://hooks\.slack\.com/services/[A-Za-z0-9/_-]+",
         needs=("xox", "hooks.slack.com")),
    Kind("openai_key", rf"{_B}sk-(?:proj-|svcacct-|admin-|ant-(?:api03-)?)?[A-Za-z0-9_-]{{20,}}",
         check=_check_openai, needs=("sk-",)),
    Kind("stripe_key", rf"{_B}(?:sk|rk)_(?:live|test)_[0-9A-Za-z]{{16,}}{_E}", needs=("_live_", "_test_"),
         gate=r"[sr]k_(?:live|test)_[0-9a-z]{16}"),
    Kind("google_api_key", rf"{_B}AIza[0-9A-Za-z_-]{{35}}{_E}", needs=("aiza",)),
    Kind("huggingface_token", rf"{_B}hf_[A-Za-z0-9]{{30,}}{_E}", needs=("hf_",)),
    Kind("gitlab_token", rf"{_B}glpat-[A-Za-z0-9_-]{{20,}}", needs=("glpat-",)),
    Kind("bearer_token",
         rf"(?i){_B}authorization\\?[\"']?\s*[:=]\s*\\?[\"']?(?:bearer|token|basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{{12,}})",
         group="value", needs=("authorization",)),
    # key = value in env files, INI, YAML, TOML, shell (`export DB_PASSWORD=...`), code and JSON
    # ("password": "..."), including JSON inside a JSON string (escaped quotes); and CLI flags.
    # (the look-behinds are ASCII: a key right after CJK text, `设置DB_PASSWORD=...`, is a key)
    Kind("config_password", rf"(?i)(?<![<A-Za-z0-9_./-])(?P<key>(?:{_Q})?{_PASSWORD_KEY}{_KEY_END}){_SEP}{_VALUE}",
         check=_check_config, needs=("pass", "pwd"), gate=rf"(?:password|passwd|passphrase|pwd|[_.-]pass){_KEY_TAIL}", keyed=True),
    Kind("config_password_flag", rf"(?i)(?<![A-Za-z0-9_-])(?P<key>--?[A-Za-z0-9_-]*(?:password|passwd|pwd)[A-Za-z0-9_-]*)(?:=|[ \t]+){_VALUE}",
         check=_check_config, label="config_password", needs=("pass", "pwd"),
         gate=r"-[a-z0-9_-]*(?:password|passwd|pwd)[a-z0-9_-]*[= \t]"),
    # passwords that command lines take without a `password` key: `mysql -pPW`, `sshpass -p PW`,
    # `curl -u user:PW`, `docker login -p PW`
    # (the rest of the line up to the next such command only: every start scanned to the line's end was
    # quadratic on a long one-line text, a JSON list of commands)
    Kind("mysql_password", r"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b(?:(?!\b(?:mysql|mysqldump|mysqladmin|mariadb)\b)[^\n])*?[ \t]-p['\"]?(?P<value>[^\s'\"-][^\s'\"]*)",
         group="value", check=_check_literal, label="config_password", needs=("mysql", "mariadb")),
    Kind("sshpass_password", r"\bsshpass[ \t]+-p[ \t]*['\"]?(?P<value>[^\s'\"]+)",
         group="value", check=_check_literal, label="config_password", needs=("sshpass",)),
    Kind("curl_password", r"\bcurl\b(?:(?!\bcurl\b)[^\n])*?[ \t](?:-u|--user)[ \t=]?['\"]?[^\s:'\"]*:(?P<value>[^\s'\"]+)",
         group="value", check=_check_literal, label="config_password", needs=("curl",)),
    Kind("docker_login_password", r"\bdocker[ \t]+login\b(?:(?!\bdocker[ \t]+login\b)[^\n])*?[ \t]-p[ \t]*['\"]?(?P<value>[^\s'\"-][^\s'\"]*)",
         group="value", check=_check_literal, label="config_password", needs=("docker",)),
    Kind("config_secret", rf"(?i)(?<![<A-Za-z0-9_./-])(?P<key>(?:{_Q})?{_SECRET_KEY}{_KEY_END}){_SEP}{_VALUE}",
         check=_check_config, needs=("secret", "api", "token", "private"),
         gate=rf"(?:secret|token|api[_-]?key|private[_-]?key){_KEY_TAIL}", keyed=True),
    Kind("config_secret_flag", rf"(?i)(?<![A-Za-z0-9_-])(?P<key>--?[A-Za-z0-9_-]*(?:secret|api[_-]?key|apikey|token)[A-Za-z0-9_-]*)"
         rf"(?:=|[ \t]+){_VALUE}", check=_check_config, label="config_secret", needs=("secret", "api", "token"),
         gate=r"-[a-z0-9_-]*(?:secret|token|api[_-]?key|apikey)[a-z0-9_-]*[= \t]"),
    # credentials in a URL's query: API keys, and the signatures of presigned URLs (S3's
    # `X-Amz-Signature` / `Signature`, GCS's `X-Goog-Signature`, Azure SAS's `sig`) that grant access
    # by themselves until they expire; `?access_token=` & co. are config_secret's keys
    Kind("url_secret", r"(?i)[?&;](?:x-(?:amz|goog)-signature|x-api-key|api[_-]?key|apikey|auth(?:[_-]?key)?|key|sig(?:nature)?)="
         r"(?P<value>[^&\s#'\"<>\\]+)", group="value", check=_check_token, needs=("key=", "auth=", "sig=", "signature=")),
    # a session cookie's value is the logged-in session: in a text about cookies (`Cookie:` and
    # `Set-Cookie:` headers, `curl --cookie`, a cookie jar), `sessionid=`, `PHPSESSID=`, `connect.sid=` ...
    # (the name taken whole, possessively, and judged by the check: a pattern that looked for `sess` inside
    # it backtracked over the run once per `sess` in it, quadratic on `session.session.session...`)
    Kind("session_cookie", r"(?i)(?<![A-Za-z0-9_.-])(?P<name>[A-Za-z0-9_.-]++)=(?P<value>[^;,\s'\"<>\\]+)",
         group="value", check=_check_session_cookie, needs=("cookie",)),
    Kind("npm_token", rf"{_B}npm_[A-Za-z0-9]{{36}}{_E}", needs=("npm_",)),
    Kind("pypi_token", rf"{_B}pypi-AgE[A-Za-z0-9_-]{{50,}}", needs=("pypi-age",)),
    # the shortest domain that ends the address: `alpine-devel@lists.alpinelinux.org-4a6a0840.rsa.pub`
    # (a key file's name) keeps the name's tail; `a@mail.example.com` still ends at `.com`
    Kind("email", rf"{_B_EMAIL}[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*?\.[A-Za-z]{{2,}}(?![A-Za-z0-9]|\.[A-Za-z0-9])",
         check=_check_email, needs=("@",), gate=r"@[a-z0-9-]+\.[a-z0-9-]"),
    Kind("ip_address",
         rf"{_B}(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{{2}}|[1-9]?[0-9])\.){{3}}(?:25[0-5]|2[0-4][0-9]|1[0-9]{{2}}|[1-9]?[0-9]){_E}",
         probe=r"[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}"),
)
KIND_NAMES = tuple(dict.fromkeys(k.kind for k in KINDS))


@dataclass(frozen=True)
class RedactConfig:
    emails: bool = True
    ip_addresses: bool = False  # optional: IPs are often harmless (private ranges, docs, versions)
    private_ips: bool = False  # with ip_addresses: also redact private, loopback and link-local ones

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


class Redactor:
    """`Redactor()(text)` → redacted text; `.redact(text)` → (text, counts per kind)."""

    def __init__(self, config: RedactConfig = RedactConfig()):
        self.config = config
        kinds = [k for k in KINDS if (k.name != "email" or config.emails) and (k.name != "ip_address" or config.ip_addresses)]
        self.kinds = kinds
        self._compiled = [(k, re.compile(k.pattern, k.flags)) for k in kinds]
        self._gates = [re.compile(k.gate) if k.gate is not None else None for k in kinds]
        self._needles = tuple(dict.fromkeys(n for k in kinds for n in (k.needs or ())))
        self._unfiltered = any(k.needs is None for k in kinds)  # a kind without needles runs on every text
        if len(self._needles) > 63:
            raise ValueError(f"{len(self._needles)} needles: `needles_sql` packs them into 63 bits")
        self._needle_bits = {n: 1 << i for i, n in enumerate(self._needles)}

    def candidates_sql(self, column: str) -> str:
        """A DuckDB condition on `column` true for every text `redact` would not skip at once: one
        of the needles in `lower(text)` (DuckDB lower-cases code point by code point; Python's
        `str.lower` differs only by adding a combining dot after the `i` of U+0130, which cannot
        create an ASCII needle), or, for a kind without needles, its RE2 probe."""
        parts = []
        if self._needles:
            alternation = "|".join(re.escape(n) for n in self._needles)
            parts.append(f"regexp_matches(lower({column}), '{alternation.replace(chr(39), chr(39) * 2)}')")
        parts += [f"regexp_matches({column}, '{k.probe.replace(chr(39), chr(39) * 2)}')" for k in self.kinds if k.needs is None]
        return f"({column} IS NOT NULL AND ({' OR '.join(parts) or 'false'}))"

    def _replace(self, kind: Kind, counts: Counter[str]) -> Callable[[re.Match[str]], str]:
        ph = _placeholder(kind.kind)
        has_value = "v_bare" in re.compile(kind.pattern).groupindex

        def repl(m: re.Match[str]) -> str:
            if kind.check is not None and not kind.check(m):
                return m.group(0)
            if kind.name == "ip_address" and not self._ip_is_pii(m.group(0)):
                return m.group(0)
            if kind.name == "email" and m.group(0).lower().startswith("git@"):
                return m.group(0)  # git@github.com:owner/repo is an SSH remote, not a person
            group = _value_group(m) if has_value else kind.group
            counts[kind.kind] += 1
            if not group:
                return ph
            whole = m.group(0)
            s, e = m.start(group) - m.start(0), m.end(group) - m.start(0)
            value = ph
            if group == "v_bare" and (key := m.group("key").rstrip("]"))[-1] in "\"'":
                # a bare value of a quoted key: a JSON (or Python) number or name; as a bare placeholder the
                # text would no longer parse, so it becomes a string quoted as its key is
                q = key[-2:] if key[-2:-1] == "\\" else key[-1]
                value = q + ph + q
            return whole[:s] + value + whole[e:]

        return repl

    def _ip_is_pii(self, s: str) -> bool:
        try:
            ip = ipaddress.ip_address(s)
        except ValueError:
            return False
        if self.config.private_ips:
            return not ip.is_unspecified
        return ip.is_global

    def needles_sql(self, column: str) -> str:
        """A DuckDB BIGINT: bit i set when the i-th needle is in `lower(column)`, for `redact(text,
        needles=...)` (clean's scan finds the needles of every text in one multi-threaded pass)."""
        if not self._needles:
            return "0::BIGINT"
        return " | ".join(f"(contains(lower({column}), '{n.replace(chr(39), chr(39) * 2)}')::BIGINT << {i})"
                          for i, n in enumerate(self._needles))

    def redact(self, text: str | None, needles: int | None = None) -> tuple[str | None, Counter[str]]:
        """The text with every kind replaced, and the counts. `needles`: `needles_sql` of the text,
        when known; it stands for looking for the needles here in an ASCII text (the lower case
        is the same), and is not used for another."""
        counts: Counter[str] = Counter()
        if not text:
            return text, counts
        low = text.lower()
        is_ascii = text.isascii()
        has: Callable[[str], bool]
        if needles is not None and is_ascii:  # DuckDB's lower case is Python's on ASCII text
            bits = self._needle_bits
            def has(n: str) -> bool:
                return bool(needles & bits[n])
        else:
            has = low.__contains__
        if not any(map(has, self._needles)) and not self._unfiltered:
            return text, counts  # most texts: no kind's needle, nothing to do
        # the gates read the text as it is now (an earlier kind may have replaced part of it);
        # the needles, as ever, the text as it came
        ascii_low = low if is_ascii else None  # placeholders are ASCII: it stays so
        for (kind, rx), gate in zip(self._compiled, self._gates, strict=True):
            if kind.needs is not None and not any(map(has, kind.needs)):
                continue
            if gate is not None and ascii_low is not None:
                if kind.keyed:
                    new = _sub_keyed(rx, gate, self._replace(kind, counts), text, ascii_low)
                elif gate.search(ascii_low) is None:
                    continue
                else:
                    new = rx.sub(self._replace(kind, counts), text)
            else:
                new = rx.sub(self._replace(kind, counts), text)
            if new != text:
                text = new
                if ascii_low is not None:
                    ascii_low = new.lower()
        return text, counts

    def __call__(self, text: str | None) -> str | None:
        return self.redact(text)[0]


def _sub_keyed(rx: re.Pattern[str], gate: re.Pattern[str], repl: Callable[[re.Match[str]], str], text: str,
               low: str) -> str:
    """`rx.sub(repl, text)` for a `keyed` kind, `low` being `text.lower()` of an ASCII text.

    Every match of `rx` holds a gate match that starts inside the match's key run (a maximal run
    of `_KEY_CHARS`), and starts at that run or one or two characters before it (a quote, an
    escaped quote). Each run holds at most one reported gate match: a gate match ends past the run
    with `:` or `=`, and one overlapping it could only start inside the same run (what follows a
    run in a gate match is no letter). Trying `rx.match` (which, like a search, sees the text
    before its start through look-behinds) at those starts, in increasing order and from where the
    last match ended, finds the same leftmost non-overlapping matches `rx.sub` finds; no match is
    empty (the key holds its keyword)."""
    out: list[str] = []
    pos = 0  # the end of the last match: where `rx.sub` would search on from
    tried = -1  # starts are tried in increasing order, each once
    for g in gate.finditer(low):
        q = g.start()
        while q > 0 and low[q - 1] in _KEY_CHARS:
            q -= 1
        for s in (q - 2, q - 1, q):
            if s < pos or s <= tried:
                continue
            tried = s
            m = rx.match(text, s)
            if m is not None:
                out.append(text[pos:s])
                out.append(repl(m))
                pos = m.end()
                break
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def rules_digest() -> str:
    """The redaction rules: this module's source (patterns, needles, checks, exceptions). Any edit
    here must not leave an export 'up to date', nor let export trust a scan (`clean`'s side table
    `redactions`) made with other rules."""
    return _RULES_DIGEST


_RULES_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def redact_fields(row: dict, columns: tuple[str, ...], redactor: Redactor | None = None,
                  counts: Counter[str] | None = None, only: frozenset[str] | set[str] | None = None) -> dict:
    """A copy of `row` with the string values of `columns` redacted (counts added to `counts`).
    `only`: the columns a scan found secrets in (the others are known to be clean); `row` itself
    is returned when that leaves nothing to redact."""
    red = redactor or _default()
    if only is not None:
        columns = tuple(c for c in columns if c in only)
        if not columns:
            return row
    out = dict(row)
    for k in columns:
        v = out.get(k)
        if isinstance(v, str):
            out[k], c = red.redact(v)
            if counts is not None and c:
                counts.update(c)
    return out


_DEFAULT: Redactor | None = None


def _default() -> Redactor:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = Redactor()
    return _DEFAULT


def recorded_config(corpus: Any) -> RedactConfig:
    """The redaction settings `clean` was given (`--ip-addresses`), as recorded with its side table
    `redactions`: what export and traces redact with unless told otherwise, so that clean's summary
    ("export will redact ...") holds. The defaults when clean has not scanned this corpus."""
    from pipelines.side import side_info

    rec = (((side_info(corpus, "redactions") or {}).get("config") or {}).get("redact"))
    if not isinstance(rec, dict):
        return RedactConfig()
    known = {f.name for f in fields(RedactConfig)}
    return RedactConfig(**{k: v for k, v in rec.items() if k in known})


def redact_text(text: str | None) -> str | None:
    """Redact one text with the default settings: the call export makes on every text it emits."""
    return _default()(text)


def redact_table(table: pa.Table, columns: Iterable[str] | None = None,
                 redactor: Redactor | None = None) -> tuple[pa.Table, Counter[str]]:
    """Redact the string columns of an Arrow table (all of them unless `columns` is given)."""
    r = redactor or Redactor()
    total: Counter[str] = Counter()
    names = list(columns) if columns is not None else [f.name for f in table.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)]
    for name in names:
        col = table.column(name)
        values = col.to_pylist()
        out = []
        for v in values:
            red, c = r.redact(v)
            total.update(c)
            out.append(red)
        table = table.set_column(table.schema.get_field_index(name), table.schema.field(name), pa.array(out, type=col.type))
    return table, total
