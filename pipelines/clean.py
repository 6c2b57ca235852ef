"""The clean stage: the published filters as verdicts with reasons, plus redaction and
decontamination scans. Nothing is deleted: verdicts go to side tables and `kept_turns` is a view.

Side tables written (each atomically, see `pipelines.side`):

- `cleaning` (`trajectory_id`, `turn_index`, `reason`, `detail`): one row per verdict; `turn_index`
  is null when the whole trajectory is dropped. Trajectory reasons: `too_few_turns`,
  `action_outside_space`, `env_captcha`, `env_http_error`, `env_sandbox_crash` (these three count only
  before the first turn a collector perturbed on purpose, a `perturbation` label: the fault and what it
  leaves on screen are kept), `eval_contamination`. Turn reasons (only judged in trajectories that survive whole):
  `retry_cycle` (a malformed action the harness rejected, or a failed action re-issued verbatim
  with the same failure: output and exit code — the retry that follows and the state it leads to are kept; the skipped
  turn changed nothing), `gui_no_change` (a GUI action after which the screen is canonically the
  same as before: dropping it keeps the state chain intact).
- `redactions` (`trajectory_id`, `turn_index`, `column`, `kind`, `count`): which texts contain
  secrets or PII that export will replace (`pipelines.redact`); `turn_index` null for
  trajectory-level columns (task, action space, ...).
- `contamination` (`trajectory_id`, `turn_index`, `eval_id`, `field`, `matched_ngrams`,
  `item_ngrams`, `overlap`), when an evaluation set is given.

Everything but action-space parsing, redaction counting and decontamination runs as DuckDB SQL
over the corpus views (RE2 regexes, window functions), so it scales with the corpus, not with
Python. Patterns are RE2 syntax.
"""

from __future__ import annotations

import hashlib
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.canonical import RULES as CANONICAL_RULES
from pipelines.canonical import SCREEN_RULES, canonical_sql
from pipelines.decontam import DecontamConfig, EvalIndex, load_eval_set, scan_trajectory
from pipelines.progress import StatusLine
from pipelines.query import connect, spill_workspace, sql_str
from pipelines.redact import (
    RENDERED_TRAJECTORY_TEXTS,
    RENDERED_TURN_TEXTS,
    TRAJECTORY_TEXT_COLUMNS,
    TURN_TEXT_COLUMNS,
    RedactConfig,
    Redactor,
    rules_digest,
)
from pipelines.render import conversation
from pipelines.shell import query_command
from pipelines.side import corpus_state, remove_side_table, write_side_table
from pipelines.store import Corpus
from schemas.options import at_least, check_memory_limit
from schemas.tables import _f, side_table_schema

TRAJECTORY_REASONS: dict[str, str] = {
    "too_few_turns": "fewer than `min_turns` environment turns (counted after the turns clean drops)",
    "action_outside_space": "an action whose tool is not in the trajectory's declared action space",
    "env_captcha": "the environment served a CAPTCHA / bot check instead of the page",
    "env_http_error": "the environment served an HTTP error page or a browser network-error page",
    "env_sandbox_crash": "the sandbox, container, runtime or emulator died under the agent",
    "eval_contamination": "task or actions overlap an item of the evaluation set",
}
TURN_REASONS: dict[str, str] = {
    "retry_cycle": "a malformed action rejected by the harness, or a failed action re-issued verbatim; the retry is kept",
    "gui_no_change": "a GUI action after which the observation is (canonically) unchanged",
}
REASONS = {**TRAJECTORY_REASONS, **TURN_REASONS}
# A trajectory dropped for several reasons has one verdict row, the first of these; its detail names the others
WHOLE_DROP_ORDER = ("eval_contamination", "env_sandbox_crash", "env_captcha", "env_http_error", "action_outside_space",
                    "too_few_turns")
if sorted(WHOLE_DROP_ORDER) != sorted(TRAJECTORY_REASONS):
    raise RuntimeError("WHOLE_DROP_ORDER must rank every trajectory reason")

CLEANING_SCHEMA = side_table_schema([
    _f("reason", pa.string(), "verdict reason code: " + ", ".join(REASONS), False),
    _f("detail", pa.string(), "what was found and where (turn, tool, excerpt)"),
])
REDACTIONS_SCHEMA = side_table_schema([
    _f("column", pa.string(), "the text column that contains it", False),
    _f("kind", pa.string(), "secret / PII kind (`pipelines.redact.KIND_NAMES`)", False),
    _f("count", pa.int32(), "occurrences replaced by export", False),
])
CONTAMINATION_SCHEMA = side_table_schema([
    _f("eval_id", pa.string(), "id of the matching evaluation item", False),
    _f("field", pa.string(), "`task` or `action`", False),
    _f("matched_ngrams", pa.int32(), "the item's n-grams found in the trajectory", False),
    _f("item_ngrams", pa.int32(), "the item's n-gram count", False),
    _f("overlap", pa.float64(), "matched_ngrams / item_ngrams", False),
])

SHELL_TOOLS = ("bash", "execute_bash", "shell", "run_shell_command", "run_command", "execute_command",
               "terminal", "cmd", "sh", "exec", "run")

# RE2 patterns, case-insensitive. CAPTCHA and HTTP-error pages are looked for only in web-like
# observations of the GUI domains (`WEB_DOMAINS`; CAPTCHAs in search results too): a terminal
# printing "404 Not Found" from curl, or pip installing django-simple-captcha, through a bash tool
# whose results are `tool_result`s, is the environment working; HTTP errors only near the top (a
# page *about* errors is fine). A CAPTCHA is a challenge, not the word: a footer "protected by
# reCAPTCHA" is an ordinary page.
CAPTCHA_RE = (r"(?i)(?:solve|complete|enter|fill in|type)(?: in)? (?:the |this |a )?(?:re|h)?captcha"
              r"|(?:re|h)?captcha (?:challenge|verification|required|check|failed)|iframe '(?:re|h)captcha"
              r"|are you a robot|verify (?:that )?you are (?:a )?human"
              r"|unusual traffic from your computer|attention required! \| cloudflare"
              r"|checking (?:your browser before accessing|if the site connection is secure)"
              r"|please complete the security check|press (?:&|and) hold to confirm you are (?:a )?human"
              # the challenge's checkbox, not a song or a search result that names it
              r"|(?:checkbox|button)[^a-z\n]{0,3}i'?m not a robot")
HTTP_ERROR_RE = (r"(?i)(?:^|[^0-9])(?:4(?:0[0-9]|1[0-8]|2[0-9]|31|51)|5(?:0[0-9]|2[0-9]))[ :-]+"
                 r"(?:bad request|unauthori[sz]ed|payment required|forbidden|not found|method not allowed"
                 r"|not acceptable|request time-?out|gone|too many requests|internal server error|not implemented"
                 r"|bad gateway|service (?:temporarily )?unavailable|gateway time-?out|web server is down"
                 r"|origin is unreachable|a timeout occurred)"
                 r"|this site can.t be reached|ERR_(?:CONNECTION_[A-Z]+|NAME_NOT_RESOLVED|TIMED_OUT"
                 r"|INTERNET_DISCONNECTED|SSL_PROTOCOL_ERROR|TOO_MANY_REDIRECTS)")
# the agent's own container or device client: what it prints ("Cannot connect to the Docker daemon",
# "error: device not found") is the environment answering that command, not the sandbox dying
CONTAINER_CLIENT_RE = r"(?:^|[\s;&|(`$])(?:sudo\s+)?(?:docker|podman|nerdctl|adb|kubectl|docker-compose)(?:\s|$)"
# observations that are someone else's text (a page, search results, a file, a user): a crash message in
# them is content (a StackOverflow answer about the Docker daemon), never the sandbox dying
CONTENT_KINDS = ("accessibility_tree", "search_results", "file_view", "user_reply")
SANDBOX_CRASH_RE = (r"(?i)OCI runtime (?:exec|create|start|state) failed|container [0-9a-f]{12,64} is not running"
                    r"|cannot connect to the docker daemon|error response from daemon: (?:container|no such container)"
                    r"|no such container: |sandbox (?:crashed|died|was terminated|is not running|is unavailable|timed out)"
                    r"|runtime (?:disconnected|is not (?:running|connected|available))"
                    r"|AgentRuntime(?:Disconnected|Unavailable|Timeout|Build)?Error"
                    r"|the kernel (?:appears to have )?died|connection to (?:the )?(?:sandbox|runtime|container|emulator)"
                    r" (?:was )?(?:lost|closed|reset)|emulator (?:crashed|is offline|not responding)"
                    r"|error: device (?:offline|not found|'[^']*' not found)|adb: device offline")
MALFORMED_RE = (r"(?i)^[ \t\n]*(?:error:?[ \t\n]*)?(?:malformed (?:command|action|tool call|function call|input)"
                r"|invalid action|invalid (?:tool|function) call|unknown (?:tool|action|command|function)(?: name)?\b"
                r"|your output was not formatted correctly"
                r"|your (?:last )?(?:response|output|message) (?:was|is) not (?:formatted correctly|in the (?:correct|expected) format)"
                r"|could not parse (?:the |your )?(?:action|command|tool call|function call|response|output)"
                r"|failed to parse (?:the )?(?:action|tool call|function call|arguments|json)"
                r"|invalid json in (?:tool|function) arguments|parameter `?[a-z_]+`? is required for command"
                r"|missing (?:[0-9]+ )?required (?:positional )?(?:argument|parameter)"
                r"|your proposed edit has introduced new syntax error)"
                r"|generated an exception: unknown tool name")
WEB_KINDS = ("accessibility_tree", "view_hierarchy", "search_results", "tool_result", "error")
WEB_DOMAINS = ("web", "android")  # where an HTTP error page or a CAPTCHA is the environment failing
CAPTCHA_DOMAINS = (*WEB_DOMAINS, "search")  # a search engine's bot check too


@dataclass(frozen=True)
class CleanConfig:
    min_turns: int = 2
    action_space: bool = True
    harness_actions: tuple[str, ...] = ("recall",)  # issued by the harness, not the agent (OpenHands)
    shell_tools: tuple[str, ...] = SHELL_TOOLS  # declaring one allows raw shell commands
    env_failures: bool = True
    retry_cycles: bool = True
    retry_identical: bool = True
    gui_no_change: bool = True
    gui_observation_kinds: tuple[str, ...] = ("accessibility_tree", "view_hierarchy")
    scan_redactions: bool = True
    redact: RedactConfig = RedactConfig()
    decontam: DecontamConfig = DecontamConfig()
    memory_limit: str = "512MB"  # DuckDB's limit: its sorts and window partitions spill to disk beyond it
    lock_wait_s: float = 600.0

    def __post_init__(self) -> None:
        check_memory_limit(self.memory_limit)
        at_least("--min-turns", self.min_turns, 0)

    def fingerprint(self, eval_digest: str = "") -> str:
        d = asdict(self)
        d.pop("lock_wait_s")
        d.pop("memory_limit")  # where DuckDB works, not what it finds
        d["decontam"] = self.decontam.fingerprint(eval_digest)
        d["redact"] = self.redact.fingerprint()
        # retry and GUI verdicts compare by them
        d["canonical"] = hashlib.sha256(repr((CANONICAL_RULES, SCREEN_RULES)).encode()).hexdigest()[:12]
        d["patterns"] = hashlib.sha256("\n".join((CAPTCHA_RE, HTTP_ERROR_RE, SANDBOX_CRASH_RE, CONTAINER_CLIENT_RE,
                                                  *CONTENT_KINDS, MALFORMED_RE, *WEB_DOMAINS,
                                                  *CAPTCHA_DOMAINS)).encode()).hexdigest()[:12]
        d["verdicts"] = VERDICTS_VERSION
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


VERDICTS_VERSION = 5  # bump when a verdict's rule changes (2: a repeated failure counts only with the same exit code;
#   3: environment failures from the first perturbed turn on are kept; 4: a retried action is compared verbatim;
#   5: one row per trajectory dropped whole)


@dataclass
class CleanSummary:
    corpus: str
    trajectories: int = 0
    turns: int = 0
    kept_trajectories: int = 0  # as `kept_trajectories` counts them
    kept_turns: int = 0
    emptied_trajectories: int = 0  # not dropped whole, but every turn has a turn verdict (`--min-turns 0`)
    dropped_trajectories: dict[str, int] = field(default_factory=dict)  # reason -> trajectories
    dropped_turns: dict[str, int] = field(default_factory=dict)  # reason -> turns (in kept trajectories)
    action_spaces: int = 0
    action_spaces_unparsed: int = 0
    redactions: dict[str, int] = field(default_factory=dict)  # kind -> occurrences, in every column scanned
    redacted_texts: int = 0
    # of those, in the columns export does not write (`metadata`, `stdout`, ...: not `RENDERED_*_TEXTS`)
    unwritten_redactions: dict[str, int] = field(default_factory=dict)
    unwritten_redacted_texts: int = 0
    contaminated: int = 0
    eval_items: int = 0
    eval_items_too_short: int = 0  # items with too few n-grams to judge (left out of the index)
    seconds: float = 0.0
    fingerprint: str = ""

    def render(self) -> str:
        d = self.trajectories - self.kept_trajectories - self.emptied_trajectories
        lines = [
            f"clean → {self.corpus}: {self.trajectories} trajectories, {self.turns} turns in {self.seconds:.1f} s",
            f"  kept {self.kept_trajectories} trajectories, {self.kept_turns} turns; dropped {d} trajectories whole",
        ]
        if self.emptied_trajectories:
            lines.append(f"  {self.emptied_trajectories} trajectories left with no turn by the turn verdicts (not kept)")
        for r, n in sorted(self.dropped_trajectories.items(), key=lambda x: (-x[1], x[0])):
            lines.append(f"    {r:<22} {n:>8} trajectories")
        for r, n in sorted(self.dropped_turns.items(), key=lambda x: (-x[1], x[0])):
            lines.append(f"    {r:<22} {n:>8} turns")
        lines.append(f"  action spaces: {self.action_spaces} distinct, {self.action_spaces_unparsed} not understood (not checked)")
        written = {k: n - self.unwritten_redactions.get(k, 0) for k, n in self.redactions.items()}
        written = {k: n for k, n in written.items() if n}
        line = (f"  secrets/PII export will redact: {_kinds(written)} (in {self.redacted_texts - self.unwritten_redacted_texts} texts)"
                if written else "  secrets/PII export will redact: none found")
        if self.unwritten_redactions:
            line += (f"; in columns export does not write: {_kinds(self.unwritten_redactions)} "
                     f"(in {self.unwritten_redacted_texts} texts)")
        lines.append(line)
        if self.eval_items or self.eval_items_too_short:
            lines.append(f"  decontamination: {self.contaminated} trajectories overlap {self.eval_items} evaluation items"
                         + (f"; {self.eval_items_too_short} items left out, too short to judge (not one n-gram: no word)" if self.eval_items_too_short else ""))
        lines.append('  see: ' + query_command(self.corpus, "SELECT reason, count(*) FROM cleaning GROUP BY 1"))
        return "\n".join(lines)


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(counts.items(), key=lambda x: (-x[1], x[0])))


def declared_actions(action_space: str | None, shell_tools: tuple[str, ...] = SHELL_TOOLS) -> tuple[frozenset[str], bool] | None:
    """The tool / command names a declared action space allows, and whether raw shell commands
    are allowed (a shell tool is declared). None when the declaration is not understood."""
    if not action_space:
        return None
    try:
        doc: Any = orjson.loads(action_space)
    except orjson.JSONDecodeError:
        return None
    names: set[str] = set()
    shell = False

    def from_list(items: list) -> None:
        for it in items:
            if isinstance(it, str) and it.strip():
                names.add(it.split()[0])
            elif isinstance(it, dict):
                fn = it.get("function") if isinstance(it.get("function"), dict) else it
                n = fn.get("name") or it.get("tool_name") or it.get("title")
                if isinstance(n, str) and n:
                    names.add(n)

    if isinstance(doc, list):
        from_list(doc)
    elif isinstance(doc, dict):
        if isinstance(doc.get("command_docs"), str):  # SWE-agent tool bundles
            names.update(re.findall(r"(?m)^([A-Za-z_][\w-]*):\n[ \t]+(?:docstring|signature)", doc["command_docs"]))
            if isinstance(doc.get("submit_command"), str):
                names.add(doc["submit_command"])
            shell = bool(doc.get("enable_bash_tool"))
        for key in ("tools", "functions", "actions", "commands"):
            if isinstance(doc.get(key), list):
                from_list(doc[key])
        if not names and all(isinstance(v, dict) for v in doc.values()) and doc:
            names.update(k for k, v in doc.items() if {"description", "parameters", "inputSchema", "input_schema"} & set(v))
    if not names:
        return None
    shell = shell or bool(names & set(shell_tools))
    return frozenset(names), shell


def _in_list(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(sql_str(v) for v in values) + ")" if values else "(NULL)"


class _Steps:
    """Numbered steps, each shown when it ends with the time it took: `step(name)` starts a step
    (ending the one before), `step.end()` ends the last."""

    def __init__(self, total: int, enabled: bool, echo: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.n, self.enabled, self.echo, self.clock = total, 0, enabled, echo, clock
        self.name: str | None = None
        self.t = clock()

    def __call__(self, name: str) -> None:
        self.end()
        self.n += 1
        self.name, self.t = name, self.clock()

    def end(self) -> None:
        if self.name is not None and self.enabled:
            self.echo(f"clean [{self.n}/{self.total}] {self.name} ({self.clock() - self.t:.1f} s)")
        self.name = None


def verdicts_digest(cleaning: pa.Table) -> str:
    """What the verdicts leave out (trajectories, turns), independent of the settings that found them:
    a rerun that drops the same things (another redaction option) leaves dedup current."""
    cols = cleaning.select(["trajectory_id", "turn_index"]).to_pydict()
    return hashlib.sha256(orjson.dumps(sorted(zip(cols["trajectory_id"], cols["turn_index"], strict=True),
                                              key=lambda r: (r[0], -1 if r[1] is None else r[1])))).hexdigest()[:16]


def _trajectory_verdicts(con: duckdb.DuckDBPyConnection, cfg: CleanConfig, summary: CleanSummary,
                         step: _Steps) -> None:
    """Fills temp table `_tdrop(trajectory_id, reason, detail)`."""
    con.execute("CREATE OR REPLACE TEMP TABLE _tdrop (trajectory_id VARCHAR, reason VARCHAR, detail VARCHAR)")
    step("fewer than min_turns")
    con.execute(f"""
        INSERT INTO _tdrop
        SELECT t.trajectory_id, 'too_few_turns', coalesce(c.n, 0) || ' environment turn(s)'
        FROM trajectories t LEFT JOIN (SELECT trajectory_id, count(*) AS n FROM turns WHERE kind = 'env' GROUP BY 1) c
          USING (trajectory_id)
        WHERE coalesce(c.n, 0) < {int(cfg.min_turns)}""")

    step("actions outside the declared action space")
    spaces = con.sql("SELECT md5(action_space) AS h, any_value(action_space) AS s FROM trajectories "
                     "WHERE action_space IS NOT NULL GROUP BY 1").fetchall()
    summary.action_spaces = len(spaces)
    rows_h, rows_n, flags_h, flags_shell, flags_size = [], [], [], [], []
    for h, s in spaces:
        parsed = declared_actions(s, cfg.shell_tools)
        if parsed is None:
            summary.action_spaces_unparsed += 1
            continue
        names, shell = parsed
        flags_h.append(h)
        flags_shell.append(shell)
        flags_size.append(len(names))
        for n in sorted(names | set(cfg.harness_actions)):
            rows_h.append(h)
            rows_n.append(n)
    if cfg.action_space and flags_h:
        con.register("_space_names", pa.table({"h": rows_h, "name": rows_n}))
        con.register("_space_flags", pa.table({"h": flags_h, "shell": flags_shell, "size": flags_size}))
        con.execute("""
            INSERT INTO _tdrop
            WITH u AS (
                SELECT u.trajectory_id, u.turn_index, u.tool_name,
                       coalesce(nullif(u.tool_name, ''), regexp_extract(u.action, '^[ \\t\\n]*([A-Za-z_][A-Za-z0-9_.-]*)', 1)) AS name,
                       t.h
                FROM turns u
                -- the hash, not the declaration, in the join's table (memory)
                JOIN (SELECT trajectory_id, md5(action_space) AS h FROM trajectories WHERE action_space IS NOT NULL) t
                  USING (trajectory_id)
                WHERE u.kind = 'env' AND (u.action IS NOT NULL OR u.tool_name IS NOT NULL))
            SELECT u.trajectory_id, 'action_outside_space',
                   'turn ' || arg_min(u.turn_index, u.turn_index) || ': `' || arg_min(u.name, u.turn_index)
                   || '` is not one of the ' || any_value(f.size) || ' declared actions'
                   || CASE WHEN count(*) > 1 THEN ' (' || count(*) || ' such turns)' ELSE '' END
            FROM u JOIN _space_flags f USING (h)
            WHERE NOT (u.tool_name IS NULL AND f.shell)
              AND NOT EXISTS (SELECT 1 FROM _space_names n WHERE n.h = u.h AND n.name = u.name)
            GROUP BY u.trajectory_id""")

    step("environment failures (CAPTCHA, HTTP error pages, sandbox crashes)")
    if cfg.env_failures:
        con.execute(f"""
            INSERT INTO _tdrop
            WITH f AS (
                SELECT trajectory_id, turn_index, observation,
                       CASE WHEN observation_kind IN {_in_list(WEB_KINDS)} AND domain IN {_in_list(CAPTCHA_DOMAINS)}
                                 AND regexp_matches(observation, {sql_str(CAPTCHA_RE)}) THEN 'env_captcha'
                            WHEN observation_kind IN {_in_list(WEB_KINDS)} AND domain IN {_in_list(WEB_DOMAINS)}
                                 AND regexp_matches(left(observation, 600), {sql_str(HTTP_ERROR_RE)}) THEN 'env_http_error'
                            WHEN coalesce(observation_kind, '') NOT IN {_in_list(CONTENT_KINDS)}
                                 AND NOT regexp_matches(coalesce(action, ''), {sql_str(CONTAINER_CLIENT_RE)})
                                 AND regexp_matches(observation, {sql_str(SANDBOX_CRASH_RE)}) THEN 'env_sandbox_crash' END AS reason
                -- a fault a collector injected on purpose (a perturbation label) is what the collection was
                -- for, and so is what it leaves on screen for the turns after it (an error page acted on)
                FROM (SELECT *, count(perturbation) OVER (PARTITION BY trajectory_id ORDER BY turn_index) AS faults_so_far
                      FROM turns)
                WHERE observation IS NOT NULL AND faults_so_far = 0)
            SELECT trajectory_id, reason,
                   'turn ' || min(turn_index) || ': ' || replace(left(arg_min(observation, turn_index), 100), chr(10), ' ')
            FROM f WHERE reason IS NOT NULL GROUP BY trajectory_id, reason""")


def _decontaminate(con: duckdb.DuckDBPyConnection, items: list, cfg: CleanConfig, summary: CleanSummary) -> list:
    index = EvalIndex.build(items, cfg.decontam)
    summary.eval_items, summary.eval_items_too_short = len(index.ids), index.too_short
    flags = []
    # each action as export renders it for the eval set (`render.conversation`'s user message): the agent's
    # messages before it are folded in, and an eval row's action holds them (only `action` missed such rows)
    rel = con.sql("""
        SELECT t.trajectory_id, any_value(t.task) AS task,
               list(struct_pack(turn_index := u.turn_index, kind := u.kind, action := u.action, tool_name := u.tool_name,
                                tool_args := u.tool_args, thought := u.thought, observation := '')
                    ORDER BY u.turn_index) FILTER (WHERE u.turn_index IS NOT NULL) AS turns
        FROM trajectories t LEFT JOIN turns u USING (trajectory_id)
        GROUP BY t.trajectory_id ORDER BY t.trajectory_id""")
    reader = rel.to_arrow_reader(4096)
    for batch in reader:
        for tid, task, turns in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            actions = [(g.turn_index, g.user) for g in conversation({}, turns or []).groups if g.user]
            flags.extend(scan_trajectory(index, tid, task, actions, cfg.decontam))
    if flags:
        best: dict[str, Any] = {}
        for f in flags:
            b = best.get(f.trajectory_id)
            if b is None or f.overlap > b.overlap:
                best[f.trajectory_id] = f
        con.register("_contam", pa.table({
            "trajectory_id": list(best),
            "detail": [f"{f.field} overlaps eval item {f.eval_id!r}: {f.matched}/{f.total} {cfg.decontam.n}-grams"
                       + (f" (turn {f.turn_index})" if f.turn_index is not None else "") for f in best.values()],
        }))
        con.execute("INSERT INTO _tdrop SELECT trajectory_id, 'eval_contamination', detail FROM _contam")
        summary.contaminated = len(best)
    return flags


def _turn_verdicts(con: duckdb.DuckDBPyConnection, cfg: CleanConfig, step: _Steps) -> None:
    """Fills temp table `_udrop(trajectory_id, turn_index, reason, detail)` for surviving trajectories."""
    con.execute("CREATE OR REPLACE TEMP TABLE _udrop (trajectory_id VARCHAR, turn_index INTEGER, reason VARCHAR, detail VARCHAR)")
    step("retry cycles")
    if cfg.retry_cycles:
        err = "(coalesce(is_error, false) OR coalesce(exit_code, 0) <> 0)"
        identical = "false"
        if cfg.retry_identical:
            identical = "(err AND next_err AND ah = next_ah AND oh = next_oh AND exit_code IS NOT DISTINCT FROM next_exit)"
        con.execute(f"""
            INSERT INTO _udrop
            WITH u AS (
                SELECT trajectory_id, turn_index, exit_code, {err} AS err,
                       regexp_matches(left(coalesce(observation, ''), 400), {sql_str(MALFORMED_RE)}) AS malformed,
                       -- the action verbatim (`cat /tmp/a.json` then `cat /tmp/b.json` is no retry), its output
                       -- canonically (a retry's output differs in times, pids, temp names)
                       CASE WHEN {err} THEN md5_number_lower(coalesce(action, '')) END AS ah,
                       CASE WHEN {err} THEN md5_number_lower({canonical_sql('observation')}) END AS oh,
                       left(observation, 80) AS excerpt
                FROM turns u WHERE kind = 'env' AND NOT EXISTS (SELECT 1 FROM _tdrop d WHERE d.trajectory_id = u.trajectory_id)),
            w AS (
                SELECT *, lead(turn_index) OVER w AS next_turn, lead(err) OVER w AS next_err,
                       lead(ah) OVER w AS next_ah, lead(oh) OVER w AS next_oh, lead(exit_code) OVER w AS next_exit
                FROM u WINDOW w AS (PARTITION BY trajectory_id ORDER BY turn_index))
            SELECT trajectory_id, turn_index, 'retry_cycle',
                   CASE WHEN malformed THEN 'malformed action rejected: ' || replace(excerpt, chr(10), ' ')
                        ELSE 'same failed action repeated at turn ' || next_turn END
            FROM w WHERE next_turn IS NOT NULL AND (malformed OR {identical})""")
    step("GUI turns without change")
    if cfg.gui_no_change and cfg.gui_observation_kinds:
        con.execute(f"""
            INSERT INTO _udrop
            WITH g AS (
                SELECT u.trajectory_id, u.turn_index, md5_number_lower({canonical_sql('u.observation', SCREEN_RULES)}) AS oh
                FROM turns u WHERE u.kind = 'env' AND u.observation IS NOT NULL
                  AND u.observation_kind IN {_in_list(cfg.gui_observation_kinds)}
                  AND NOT EXISTS (SELECT 1 FROM _tdrop d WHERE d.trajectory_id = u.trajectory_id)),
            w AS (SELECT *, lag(oh) OVER (PARTITION BY trajectory_id ORDER BY turn_index) AS prev,
                            lag(turn_index) OVER (PARTITION BY trajectory_id ORDER BY turn_index) AS prev_turn FROM g),
            i AS (SELECT trajectory_id, md5_number_lower({canonical_sql('initial_state', SCREEN_RULES)}) AS ih
                  FROM trajectories WHERE initial_state IS NOT NULL)
            SELECT w.trajectory_id, w.turn_index, 'gui_no_change',
                   CASE WHEN w.prev_turn IS NULL THEN 'same screen as the initial state'
                        ELSE 'same screen as after turn ' || w.prev_turn END
            FROM w LEFT JOIN i USING (trajectory_id)
            WHERE w.oh = coalesce(w.prev, i.ih)
              AND NOT EXISTS (SELECT 1 FROM _udrop r WHERE r.trajectory_id = w.trajectory_id AND r.turn_index = w.turn_index)""")
    # `min_turns` counts what the turn verdicts leave: a trajectory below it goes, its turn rows with it
    con.execute(f"""
        INSERT INTO _tdrop
        SELECT c.trajectory_id, 'too_few_turns',
               (c.n - d.m) || ' environment turn(s) left after ' || d.m || ' dropped (' || d.reasons || ')'
        FROM (SELECT trajectory_id, count(*) AS n FROM turns WHERE kind = 'env' GROUP BY 1) c
        JOIN (SELECT trajectory_id, count(*) AS m, string_agg(DISTINCT reason, ', ' ORDER BY reason) AS reasons
              FROM _udrop GROUP BY 1) d USING (trajectory_id)
        WHERE c.n - d.m < {int(cfg.min_turns)}""")
    con.execute("DELETE FROM _udrop WHERE trajectory_id IN (SELECT trajectory_id FROM _tdrop)")


def _one_verdict_each(con: duckdb.DuckDBPyConnection) -> None:
    """One `_tdrop` row per trajectory, so that the verdicts per reason add up to the trajectories dropped:
    the first reason by `WHOLE_DROP_ORDER`, the others after its detail (`also: reason: detail; ...`)."""
    rank = "CASE reason " + " ".join(f"WHEN '{r}' THEN {i}" for i, r in enumerate(WHOLE_DROP_ORDER)) + " END"
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _tdrop AS
        WITH r AS (SELECT *, row_number() OVER (PARTITION BY trajectory_id ORDER BY {rank}, detail) AS k FROM _tdrop)
        SELECT f.trajectory_id, f.reason,
               CASE WHEN o.also IS NULL THEN f.detail ELSE coalesce(f.detail || '; ', '') || 'also: ' || o.also END AS detail
        FROM (SELECT * FROM r WHERE k = 1) f
        LEFT JOIN (SELECT trajectory_id, string_agg(reason || coalesce(': ' || detail, ''), '; ' ORDER BY k) AS also
                   FROM r WHERE k > 1 GROUP BY 1) o USING (trajectory_id)""")


def _scan_redactions(con: duckdb.DuckDBPyConnection, cfg: CleanConfig, summary: CleanSummary,
                     progress: bool = False) -> pa.Table:
    """The `redactions` table: `Redactor.redact` on every text DuckDB's pre-filter picks, one text
    column at a time, with the needles each text holds found by DuckDB too (`needles_sql`)."""
    red = Redactor(cfg.redact)
    columns = [("turns", c) for c in TURN_TEXT_COLUMNS] + [("trajectories", c) for c in TRAJECTORY_TEXT_COLUMNS]
    cols: dict[str, list] = {"trajectory_id": [], "turn_index": [], "column": [], "kind": [], "count": []}
    totals: Counter[str] = Counter()
    unwritten: Counter[str] = Counter()
    line = StatusLine(progress)
    texts = size = 0

    def show(at: str, force: bool = False) -> None:
        if line.due(force):
            line.show(f"clean: scanning for secrets and PII: {at} · {texts:,} texts ({size / 1e6:,.1f} MB) checked, "
                      f"{summary.redacted_texts:,} with some · {line.elapsed:,.0f} s")

    for i, (table, c) in enumerate(columns, 1):
        qc = f'"{c}"'
        turn = "turn_index" if table == "turns" else "NULL::INTEGER"
        at = f"column {i}/{len(columns)} ({table}.{c})"
        written = c in (RENDERED_TURN_TEXTS if table == "turns" else RENDERED_TRAJECTORY_TEXTS)
        show(at)
        reader = con.sql(f"SELECT trajectory_id, {turn}, {qc}, {red.needles_sql(qc)} FROM {table} "
                         f"WHERE {red.candidates_sql(qc)}").to_arrow_reader(2048)
        for batch in reader:
            for tid, ti, text, needles in zip(*(batch.column(j).to_pylist() for j in range(4)), strict=True):
                _, counts = red.redact(text, needles)
                if counts:
                    summary.redacted_texts += 1
                    if not written:
                        summary.unwritten_redacted_texts += 1
                        unwritten.update(counts)
                for kind, n in sorted(counts.items()):
                    cols["trajectory_id"].append(tid)
                    cols["turn_index"].append(ti)
                    cols["column"].append(c)
                    cols["kind"].append(kind)
                    cols["count"].append(n)
                    totals[kind] += n
            texts += batch.num_rows
            size += pc.sum(pc.binary_length(batch.column(2))).as_py() or 0
            show(at)
    show("done", force=True)
    line.finish()
    summary.redactions = dict(totals)
    summary.unwritten_redactions = dict(unwritten)
    t = pa.table(cols, schema=REDACTIONS_SCHEMA)
    return t.sort_by([("trajectory_id", "ascending"), ("turn_index", "ascending"), ("column", "ascending"), ("kind", "ascending")])


def clean(corpus_dir: Path | str, config: CleanConfig = CleanConfig(), progress: bool = True,
          echo: Callable[[str], None] | None = None) -> CleanSummary:
    """Judge every trajectory and turn of the corpus; write `cleaning`, `redactions` (and
    `contamination`) side tables; return the counts."""
    t0 = time.monotonic()
    echo = echo or (lambda m: print(m, file=sys.stderr))
    corpus = Corpus(corpus_dir)
    manifest = corpus.require_manifest()  # one state: the views and the state recorded
    state = corpus_state(corpus, manifest)
    con = connect(corpus.root, committed=corpus.committed_files(manifest))
    try:  # bounded: window partitions and sorts beyond the limit spill (removed afterwards)
        with spill_workspace(con, corpus.root, "clean", config.memory_limit):
            return _clean(con, corpus, state, config, progress, echo, t0)
    finally:
        con.close()


def _clean(con: duckdb.DuckDBPyConnection, corpus: Corpus, state: dict | None, config: CleanConfig,
           progress: bool, echo: Callable[[str], None], t0: float) -> CleanSummary:
    eval_items, eval_digest = [], ""
    if config.decontam.eval_set:  # read once: its digest goes into the fingerprint, its items into the scan
        eval_items, eval_digest = load_eval_set(config.decontam.eval_set, config.decontam)
    fp = config.fingerprint(eval_digest)
    summary = CleanSummary(corpus=str(corpus.root), fingerprint=fp)
    summary.trajectories = con.sql("SELECT count(*) FROM trajectories").fetchall()[0][0]
    summary.turns = con.sql("SELECT count(*) FROM turns").fetchall()[0][0]
    step = _Steps(7 + bool(config.decontam.eval_set), progress, echo)

    _trajectory_verdicts(con, config, summary, step)
    flags = []
    if config.decontam.eval_set:
        step("decontamination against " + str(config.decontam.eval_set))
        flags = _decontaminate(con, eval_items, config, summary)
    _turn_verdicts(con, config, step)
    _one_verdict_each(con)

    step("scanning for secrets and PII")
    redactions = _scan_redactions(con, config, summary, progress) if config.scan_redactions else None

    step("writing side tables")
    cleaning = con.sql("""
        SELECT trajectory_id, NULL::INTEGER AS turn_index, reason, detail FROM _tdrop
        UNION ALL SELECT trajectory_id, turn_index, reason, detail FROM _udrop
        ORDER BY trajectory_id, turn_index NULLS FIRST, reason""").arrow()
    if isinstance(cleaning, pa.RecordBatchReader):
        cleaning = cleaning.read_all()
    cfg_dict = orjson.loads(orjson.dumps(asdict(config), default=str))
    for r, n in con.sql("SELECT reason, count(DISTINCT trajectory_id) FROM _tdrop GROUP BY 1").fetchall():
        summary.dropped_trajectories[r] = n
    for r, n in con.sql("SELECT reason, count(*) FROM _udrop GROUP BY 1").fetchall():
        summary.dropped_turns[r] = n
    # as the view counts them: one whose every turn has a turn verdict is not kept (`--min-turns 0` lets it through)
    kept = con.sql("""
        WITH left_over AS (
            SELECT t.num_turns, t.num_turns - (SELECT count(*) FROM _udrop u WHERE u.trajectory_id = t.trajectory_id) AS n
            FROM trajectories t WHERE NOT EXISTS (SELECT 1 FROM _tdrop d WHERE d.trajectory_id = t.trajectory_id))
        SELECT count(*) FILTER (WHERE num_turns = 0 OR n > 0), coalesce(sum(n), 0), count(*) FILTER (WHERE num_turns > 0 AND n = 0)
        FROM left_over""").fetchall()[0]
    summary.kept_trajectories, summary.kept_turns, summary.emptied_trajectories = kept

    common = {"stage": "clean", "fingerprint": fp, "config": cfg_dict, "state": state, "lock_wait_s": config.lock_wait_s}
    write_side_table(corpus, "cleaning", cleaning, CLEANING_SCHEMA, summary={
        "trajectories": summary.trajectories, "kept_trajectories": summary.kept_trajectories,
        "kept_turns": summary.kept_turns, "emptied_trajectories": summary.emptied_trajectories,
        "dropped_trajectories": summary.dropped_trajectories,
        "dropped_turns": summary.dropped_turns, "verdicts_digest": verdicts_digest(cleaning)}, **common)
    if redactions is not None:
        # the rules go with the table: export trusts the scan only when its own rules are the same
        write_side_table(corpus, "redactions", redactions, REDACTIONS_SCHEMA, summary={"kinds": summary.redactions},
                         **{**common, "config": {**cfg_dict, "redaction_rules": rules_digest()}})
    if config.decontam.eval_set:
        ct = pa.table({
            "trajectory_id": [f.trajectory_id for f in flags], "turn_index": [f.turn_index for f in flags],
            "eval_id": [f.eval_id for f in flags], "field": [f.field for f in flags],
            "matched_ngrams": [f.matched for f in flags], "item_ngrams": [f.total for f in flags],
            "overlap": [round(f.overlap, 6) for f in flags],
        }, schema=CONTAMINATION_SCHEMA)
        write_side_table(corpus, "contamination", ct, CONTAMINATION_SCHEMA,
                         summary={"eval_items": summary.eval_items, "flagged": summary.contaminated}, **common)
    elif remove_side_table(corpus, "contamination", config.lock_wait_s):
        echo("clean: the contamination table of an earlier run (with --eval-set) is removed: this run judged without one")
    step.end()
    summary.seconds = time.monotonic() - t0
    return summary
