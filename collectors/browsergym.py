"""BrowserGym / AgentLab experiment directories (`experiment.log` [+ `summary_info.json`,
`experiment_analysis.md`]).

`experiment.log` is Python logging output (`<asctime> - [<pid> - ]<logger>[:<lineno>] - <LEVEL> -
<message>`, messages run over many lines until the next record header). Three kinds of record
matter:

- the agent's prompt (DemoAgent logs it whole at INFO): `# Goal`, `# Currently open tabs`,
  `# Current page Accessibility Tree` (the AXTree: a `RootWebArea ...` line followed by
  tab-indented `[bid] role 'name'` lines), `# Error message from last action`, ...;
- the chosen action: `action:\\n<model answer>` (BrowserGym loop at INFO), `Agent chose
  action:\\n <action>` (newer BrowserGym loops, DEBUG) or `Agent action:\\n <action>` (AgentLab, DEBUG);
- AgentLab's `Agent thought: ...` (INFO), kept as the next action's thought;
- the loops' chat record `<think>\n\naction:\n<action>` (`_send_chat_info`, INFO; the think text is
  `None` when the agent gave none): the action with its thought. A loop at DEBUG also logs the same
  action as `Agent chose action:`; two action records with different labels and the same action, no
  prompt between them, are one step.

AgentLab does not log prompts, so its actions have no observation here (the observations are in
`step_*.pkl.gz` pickles, which are never unpickled: untrusted pickle runs code); a log with no
action record at all is quarantined as `no_turns`. Screen recordings (`task_video/`, `chat_video/`,
`combined_video.mp4`) are claimed with the other byproducts.

Steps are delimited by these records, not by counting: the log is read as a sequence, each
action is paired with the first prompt logged after it (the next observation), the first prompt
before any action is the trajectory's `initial_state`, and an action followed directly by another
action (or by the end of the log) gets no observation. Extra prompts logged for the same step
(agent retries) are counted in metadata and not turned into observations again.

The last action's observation is never in the log (no prompt follows it). When
`experiment_analysis.md` is present and agrees with the log (its per-step AXTrees equal the
logged ones), its last step's AXTree is used for it, and its per-action "Outcome including
errors" fills in errors the log does not show. `summary_info.json` gives reward, termination and
the harness error.

Timestamps in the log are naive local time of the machine that ran the experiment, so they are not
stored as `started_at` (zone unknown); they are kept in turn metadata (`log_time`), and
`duration_s` is the time between the action record and the next observation record (both on
the same clock): the environment step plus observation processing.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from collectors.base import ImportContext, Importer
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps

_MAX_LOG_BYTES = 256 << 20
_SNIFF_BYTES = 64 << 10

_HEADER = re.compile(
    r"^(?P<time>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[,.]\d+)?) - (?:(?P<pid>\d+) - )?"
    r"(?P<logger>[\w.\-<>]+)(?::\d+)? - (?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) - (?P<msg>.*)$"
)
_ACTION = re.compile(r"^(?P<label>action|Agent chose action|Agent action):[ \t]*(?:\n|$)")
_CHAT_ACTION = re.compile(r"\n\naction:[ \t]*\n")  # after the think text in `_send_chat_info`'s message
_THOUGHT = re.compile(r"^Agent thought:[ \t]*")
_AX_ROOT = re.compile(r"^(?:\[\w*\] )?RootWebArea\b")
_HEADING = re.compile(r"^# (.+?)\s*$")
_KNOWN_SECTIONS = {
    "Instructions",
    "Goal",
    "Chat Messages",
    "Currently open tabs",
    "Current page Accessibility Tree",
    "Current page DOM",
    "Current page Screenshot",
    "Action Space",
    "History of past actions",
    "Error message from last action",
    "Next action",
}
_PROMPT_SECTION = re.compile(r"^# (?:" + "|".join(map(re.escape, sorted(_KNOWN_SECTIONS))) + r")\s*$", re.M)
_TAB = re.compile(r"^Tab (\d+)( \(active tab\))?\s*\n\s+Title: (.*)\n\s+URL: (.*)$", re.M)
_CHAT = re.compile(r"^- \[(\w+)\] ", re.M)
_CODE = re.compile(r"```(\w*\n)?(.*?)```", re.S)
_SIGNATURE = re.compile(r"^([A-Za-z_]\w*)\((.*)\)\s*$")
_EXP_NAME = re.compile(r"^(?P<agent>.+?)_on_(?P<task>.+)_(?P<seed>\d+)$")
_ROOT_URL = re.compile(r"url='([^']*)'")

# Parameter names of BrowserGym's standard high-level actions, for logs without an action space.
_STD_PARAMS: dict[str, list[str]] = {
    "noop": ["wait_ms"],
    "send_msg_to_user": ["text"],
    "report_infeasible": ["reason"],
    "tab_close": [],
    "tab_focus": ["index"],
    "new_tab": [],
    "go_back": [],
    "go_forward": [],
    "goto": ["url"],
    "scroll": ["delta_x", "delta_y"],
    "fill": ["bid", "value"],
    "select_option": ["bid", "options"],
    "click": ["bid", "button", "modifiers"],
    "dblclick": ["bid", "button", "modifiers"],
    "hover": ["bid"],
    "press": ["bid", "key_comb"],
    "focus": ["bid"],
    "clear": ["bid"],
    "drag_and_drop": ["from_bid", "to_bid"],
    "upload_file": ["bid", "file"],
    "mouse_move": ["x", "y"],
    "mouse_up": ["x", "y", "button"],
    "mouse_down": ["x", "y", "button"],
    "mouse_click": ["x", "y", "button"],
    "mouse_dblclick": ["x", "y", "button"],
    "mouse_drag_and_drop": ["from_x", "from_y", "to_x", "to_y"],
    "mouse_upload_file": ["x", "y", "file"],
    "keyboard_down": ["key"],
    "keyboard_up": ["key"],
    "keyboard_press": ["key"],
    "keyboard_type": ["text"],
    "keyboard_insert_text": ["text"],
}

# Files BrowserGym/AgentLab write into an experiment directory besides the ones read here. They
# are claimed so the driver does not quarantine each screenshot and pickle as an unknown format;
# pickles are never unpickled (untrusted pickle executes code). Their names go to metadata.
_BYPRODUCTS = re.compile(
    r"^(exp_args\.pkl|package_versions\.txt|goal_object\.pkl\.gz|step_\d+\.pkl\.gz|"
    r"screenshot(_som)?_step_\d+\.(png|jpe?g)|summary_info\.json|experiment_analysis\.md|combined_video\.mp4)$"
)
_VIDEO_DIRS = ("task_video", "chat_video")  # recordings (`record_video`): `*.webm` files, claimed like the rest


def _action_record(msg: str) -> tuple[str, str | None, str] | None:
    """(label, think text, action) of an action record, or None for any other message."""
    m = _ACTION.match(msg)
    if m:
        return m["label"], None, msg[m.end():]
    if _PROMPT_SECTION.search(msg):  # a prompt, whose text may quote `action:` examples
        return None
    marks = list(_CHAT_ACTION.finditer(msg))
    if not marks:
        return None
    last = marks[-1]
    think = msg[: last.start()].strip()
    return "action", (None if think in ("", "None") else think), msg[last.end():]


_READ = ("experiment.log", "summary_info.json", "experiment_analysis.md")


@dataclass
class _Record:
    line: int
    time: str
    logger: str
    level: str
    msg: str


@dataclass
class _Obs:
    rec: _Record
    axtree: str | None
    dom: str | None
    tabs: list[dict]
    error: str | None
    goal: str | None
    chat: list[tuple[str, str]]
    sections: dict[str, str]


@dataclass
class _Analysis:
    """What `experiment_analysis.md` adds: per-step AXTrees and tabs, per-action outcomes."""

    params: dict[str, str] = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)


def _records(text: str) -> list[_Record]:
    out: list[_Record] = []
    cur: _Record | None = None
    buf: list[str] = []
    for i, line in enumerate(text.split("\n"), 1):
        m = _HEADER.match(line)
        if m:
            if cur is not None:
                cur.msg = "\n".join(buf)
                out.append(cur)
            cur = _Record(i, m["time"], m["logger"], m["level"], "")
            buf = [m["msg"]]
        elif cur is not None:
            buf.append(line)
    if cur is not None:
        cur.msg = "\n".join(buf)
        out.append(cur)
    return out


def _sections(msg: str) -> dict[str, str]:
    """Known `# Heading` sections of a prompt. The first occurrence wins, except for the error
    and next-action sections, which come after the (free-text) action history: the last wins."""
    found: list[tuple[str, int, int]] = []
    pos = 0
    for line in msg.split("\n"):
        m = _HEADING.match(line)
        if m and m[1] in _KNOWN_SECTIONS:
            found.append((m[1], pos, pos + len(line) + 1))
        pos += len(line) + 1
    out: dict[str, str] = {}
    for j, (name, _, body_start) in enumerate(found):
        end = found[j + 1][1] if j + 1 < len(found) else len(msg)
        body = msg[body_start:end].strip("\n")
        if name not in out or name in ("Error message from last action", "Next action"):
            out[name] = body
    return out


def _axtree_block(msg: str) -> str | None:
    """The AXTree wherever it sits: a `RootWebArea` line and the tab-indented lines after it."""
    lines = msg.split("\n")
    for i, line in enumerate(lines):
        if _AX_ROOT.match(line):
            j = i + 1
            while j < len(lines) and lines[j].startswith("\t"):
                j += 1
            return "\n".join(lines[i:j])
    return None


def _chat(body: str | None) -> list[tuple[str, str]]:
    if not body:
        return []
    starts = list(_CHAT.finditer(body))
    return [
        (m[1], body[m.end() : starts[k + 1].start() if k + 1 < len(starts) else len(body)].strip("\n"))
        for k, m in enumerate(starts)
    ]


def _observation(rec: _Record) -> _Obs | None:
    sec = _sections(rec.msg)
    tree = sec.get("Current page Accessibility Tree")
    if tree is not None and not tree.strip():
        tree = None
    if tree is None:
        tree = _axtree_block(rec.msg)
    dom = sec.get("Current page DOM")
    if tree is None and dom is None and "Currently open tabs" not in sec:
        return None
    tabs = [
        {"index": int(m[1]), "active": bool(m[2]), "title": m[3].strip(), "url": m[4].strip()}
        for m in _TAB.finditer(sec.get("Currently open tabs", ""))
    ]
    err = sec.get("Error message from last action")
    return _Obs(
        rec=rec,
        axtree=tree,
        dom=dom,
        tabs=tabs,
        error=err.strip() if err and err.strip() else None,
        goal=(sec.get("Goal") or "").strip() or None,
        chat=_chat(sec.get("Chat Messages")),
        sections=sec,
    )


def _split_answer(text: str) -> tuple[str, str | None]:
    """(action code, thought): code blocks are the action (as BrowserGym's lenient parser reads
    them), the prose around them the thought. Without code blocks the whole text is the action."""
    blocks = [m[2].strip() for m in _CODE.finditer(text)]
    blocks = [b for b in blocks if b]
    if not blocks:
        return text.strip(), None
    thought = _CODE.sub("", text).strip()
    return "\n".join(blocks), thought or None


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return ast.unparse(node)


def _calls(code: str) -> list[tuple[str, list, dict]] | None:
    """Top-level function calls of an action string, or None if it is not plain calls."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    out = []
    for stmt in tree.body:
        if not (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name)
        ):
            return None
        call = stmt.value
        out.append(
            (
                call.func.id,
                [_literal(a) for a in call.args],
                {k.arg: _literal(k.value) for k in call.keywords if k.arg},
            )
        )
    return out


def _signature_params(name: str, params: str) -> list[str] | None:
    """Parameter names if `name(params)` is a signature (`click(bid: str, ...)`); None for a call
    with literal arguments such as the `fill('a12', ...)` example after the list."""
    try:
        fn = ast.parse(f"def {name}({params}): pass").body[0]
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    args = fn.args  # type: ignore[attr-defined]
    return [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]


def _action_space(body: str | None) -> list[dict]:
    """Action signatures (`click(bid: str, ...)`) and their indented docs from `# Action Space`."""
    if not body:
        return []
    out: list[dict] = []
    seen: set[str] = set()
    cur: dict | None = None
    doc: list[str] = []
    for line in body.split("\n"):
        m = _SIGNATURE.match(line)
        params = _signature_params(m[1], m[2]) if m else None
        if m and params is not None and m[1] not in seen:
            if cur is not None:
                cur["doc"] = "\n".join(doc).strip()
                out.append(cur)
            seen.add(m[1])
            cur, doc = {"name": m[1], "signature": line.strip(), "params": params}, []
        elif cur is not None:
            if line.strip() and not line[:1].isspace():  # prose after the list ends the entry
                cur["doc"] = "\n".join(doc).strip()
                out.append(cur)
                cur, doc = None, []
            else:
                doc.append(line)
    if cur is not None:
        cur["doc"] = "\n".join(doc).strip()
        out.append(cur)
    return out


def _named_args(name: str, args: list, kwargs: dict, params: dict[str, list[str]]) -> dict:
    names = params.get(name) or _STD_PARAMS.get(name) or []
    out: dict[str, Any] = {}
    extra = []
    for i, a in enumerate(args):
        if i < len(names):
            out[names[i]] = a
        else:
            extra.append(a)
    if extra:
        out["args"] = extra
    out.update(kwargs)
    return out


def _seconds(t: str) -> float | None:
    try:
        return datetime.strptime(t.replace("T", " ").replace(",", "."), "%Y-%m-%d %H:%M:%S.%f").timestamp()
    except ValueError:
        try:
            return datetime.strptime(t.replace("T", " "), "%Y-%m-%d %H:%M:%S").timestamp()
        except ValueError:
            return None


def _analysis(path: Path) -> _Analysis | None:
    """Parse `experiment_analysis.md` (per-step Markdown written by some BrowserGym versions)."""
    if not path.is_file() or path.stat().st_size > _MAX_LOG_BYTES:
        return None
    lines = path.read_text("utf-8", errors="replace").split("\n")
    out = _Analysis()
    step: dict | None = None
    outcome_for: int | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        m = re.match(r"^\* \*\*(.+?)\*\*:\s*(.*)$", line)
        if m and step is None:
            value = m[2].strip()
            j = i + 1
            while not value and j < len(lines) and lines[j].startswith("  ") and lines[j].strip():
                value = lines[j].strip()  # `* **Derived Goal**:` puts the value on the next line
                j += 1
            out.params[m[1]] = value
        if re.match(r"^## InstanceStep\d+\s*$", line):
            step = {"tabs": [], "axtree": None, "outcomes": [], "line": i + 1}
            out.steps.append(step)
        elif re.match(r"^#{1,2} ", line):
            step = None if not line.startswith("## InstanceStep") else step
        elif step is not None and line.startswith("#### Current Page Accessibility Tree"):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and lines[j].strip() == "```":
                k = j + 1
                while k < len(lines) and lines[k] != "```":
                    k += 1
                step["axtree"] = "\n".join(lines[j + 1 : k])
                i = k
        elif step is not None and re.match(r"^- Tab \d+", line):
            t = re.match(r"^- Tab (\d+)( \(active\))?", line)
            tab: dict[str, Any] = {"index": int(t[1]), "active": bool(t[2])}  # type: ignore[index]
            for extra in lines[i + 1 : i + 3]:
                mm = re.match(r"^\s+- (Title|URL): (.*)$", extra)
                if mm:
                    tab[mm[1].lower()] = mm[2].strip()
            step["tabs"].append(tab)
        elif step is not None and re.match(r"^#### PastAction\d+", line):
            step["outcomes"].append(None)
            outcome_for = len(step["outcomes"]) - 1
        elif (
            step is not None and outcome_for is not None and line.startswith("##### Outcome including errors")
        ):
            j = i + 1
            body = []
            while j < len(lines) and not lines[j].startswith("#"):
                body.append(lines[j])
                j += 1
            step["outcomes"][outcome_for] = "\n".join(body).strip()
            outcome_for = None
            i = j - 1
        i += 1
    return out if out.steps or out.params else None


class BrowserGymImporter(Importer):
    name = "browsergym"
    container = "dir"

    def sniff(self, directory: Path) -> bool:
        log = directory / "experiment.log"
        if not log.is_file():
            return False
        with open(log, "rb") as f:
            head = f.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
        first = next((ln for ln in head.split("\n") if ln.strip()), "")
        m = _HEADER.match(first)
        if not m:
            return False
        loggers = {mm["logger"] for mm in map(_HEADER.match, head.split("\n")) if mm}
        return (
            any(lg.startswith(("browsergym", "agentlab")) for lg in loggers)
            or "\nRootWebArea" in head
            or "# Current page Accessibility Tree" in head
        )

    def consumes(self, directory: Path) -> list[Path]:
        files = [directory / "experiment.log"]
        files += [p for p in directory.iterdir() if p.is_file() and _BYPRODUCTS.match(p.name)]
        files += [p for d in _VIDEO_DIRS if (directory / d).is_dir() for p in (directory / d).glob("*.webm") if p.is_file()]
        return sorted(files)

    def split(self, directory: Path, ctx: ImportContext):
        yield "$", directory

    def convert(self, directory: Path, locator: str, ctx: ImportContext) -> Trajectory:
        log = directory / "experiment.log"
        if log.stat().st_size > _MAX_LOG_BYTES:
            raise RecordError("record_too_large", f"experiment.log: {log.stat().st_size} bytes")
        records = _records(log.read_text("utf-8", errors="replace"))
        summary = self._summary(directory / "summary_info.json")
        analysis = _analysis(directory / "experiment_analysis.md")

        exp_name = exp_dir = None
        first_obs: _Obs | None = None
        initial_obs: _Obs | None = None
        params: dict[str, list[str]] = {}
        action_space: list[dict] = []
        log_problems: list[str] = []
        # (action record, observation or None, extra prompts, user messages that followed)
        steps: list[dict] = []
        pending: dict | None = None
        n_chat = 0
        extra_prompts = 0
        thought: str | None = None  # AgentLab logs `Agent thought: ...` before the action
        for rec in records:
            if rec.msg.startswith("Running experiment "):
                m = re.match(r"^Running experiment (\S+) in:\s*(\S+)?", rec.msg)
                if m:
                    exp_name, exp_dir = m[1], m[2]
                continue
            if _THOUGHT.match(rec.msg):
                thought = _THOUGHT.sub("", rec.msg, count=1).strip() or None
                continue
            if (act := _action_record(rec.msg)) is not None:
                label, think, answer = act
                if (pending is not None and pending["label"] != label
                        and pending["answer"].strip() == answer.strip()):  # the same step logged twice
                    pending["thought"] = pending["thought"] or think
                    continue
                if pending is not None:
                    steps.append(pending)
                pending = {"rec": rec, "obs": None, "users": [], "thought": think or thought, "label": label,
                           "answer": answer}
                thought = None
                continue
            obs = _observation(rec)
            if obs is None:
                if rec.level in ("WARNING", "ERROR", "CRITICAL"):
                    log_problems.append(
                        f"line {rec.line}: {rec.level}: {rec.msg.splitlines()[0][:500] if rec.msg else ''}"
                    )
                continue
            new_users = [text for role, text in obs.chat[n_chat:] if role == "user"]
            n_chat = max(n_chat, len(obs.chat))
            if first_obs is None:  # the goal and action space come from the first prompt
                first_obs = obs
                action_space = _action_space(obs.sections.get("Action Space"))
                params = {a["name"]: a["params"] for a in action_space}
                if pending is None and not steps:
                    initial_obs = obs
                    continue
            if pending is not None:
                pending["obs"] = obs
                pending["users"] = new_users
                steps.append(pending)
                pending = None
            else:
                extra_prompts += 1
                if new_users and steps:
                    steps[-1]["users"].extend(new_users)
        if pending is not None:
            steps.append(pending)
        if not steps:
            raise RecordError(
                "no_turns",
                "experiment.log: no agent action is logged (the loops log each action at INFO, "
                "`action:` after the agent's think text, and again at DEBUG)",
            )

        md_ok = self._analysis_agrees(analysis, initial_obs, steps)
        turns: list[Turn] = []
        for k, st in enumerate(steps):
            turns.append(self._turn(k, st, params, analysis if md_ok else None))
            for u in st["users"]:
                turns.append(
                    Turn(
                        kind="user",
                        action=None,
                        observation=u,
                        observation_kind="user_reply",
                        locator=f"experiment.log:{st['obs'].rec.line}",
                    )
                )

        task = first_obs.goal if first_obs else None
        if task is None and first_obs is not None:
            task = "\n".join(t for r, t in first_obs.chat if r == "user") or None
        if task is None and analysis is not None:
            task = analysis.params.get("Derived Goal") or None
        initial = initial_obs.axtree if initial_obs is not None else None
        if initial is None and md_ok and analysis is not None and analysis.steps:
            initial = analysis.steps[0]["axtree"]
        m = _EXP_NAME.match(exp_name or "")
        summary = summary or {}
        outcome = None
        if summary.get("err_msg"):
            outcome = "error"
        elif summary.get("terminated"):
            outcome = "terminated"
        elif summary.get("truncated"):
            outcome = "truncated"
        reward = summary.get("cum_reward")
        meta = {
            "exp_name": exp_name,
            "exp_dir": exp_dir,
            "task_name": m["task"] if m else None,
            "task_seed": int(m["seed"]) if m else None,
            "summary_info": summary or None,
            "analysis_params": analysis.params if analysis else None,
            "analysis_used": md_ok,
            "extra_prompts": extra_prompts,
            "log_problems": log_problems or None,
            "initial_tabs": initial_obs.tabs if initial_obs else None,
            "unread_files": sorted(p.name for p in self.consumes(directory) if p.name not in _READ) or None,
        }
        return Trajectory(
            domain="web",  # the environment the format records: `--domain` does not change it
            source_format=self.name,
            native_id=exp_name or directory.name,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task,
            action_space=dumps(action_space) if action_space else None,
            initial_state=initial,
            agent=m["agent"] if m else None,
            model=(analysis.params.get("model_name") or None) if analysis else None,
            outcome=outcome,
            reward=float(reward)
            if isinstance(reward, int | float) and not isinstance(reward, bool)
            else None,
            metadata=dumps(meta),
            locator=locator,
        )

    @staticmethod
    def _summary(path: Path) -> dict | None:
        if not path.is_file():
            return None
        try:
            obj = parse_json(path.read_bytes())
        except orjson.JSONDecodeError as e:
            raise RecordError("invalid_json", f"summary_info.json: {e}") from None
        if not isinstance(obj, dict):
            raise RecordError("malformed_record", "summary_info.json: expected an object")
        return obj

    @staticmethod
    def _analysis_agrees(analysis: _Analysis | None, first: _Obs | None, steps: list[dict]) -> bool:
        """Use the Markdown only if it describes this run: every AXTree both files have is equal,
        and it has no more steps than one per action plus the initial page."""
        if analysis is None or not analysis.steps or len(analysis.steps) > len(steps) + 1:
            return False
        logged = [first.axtree if first else None] + [s["obs"].axtree if s["obs"] else None for s in steps]
        return all(
            a is None or s["axtree"] is None or a == s["axtree"]
            for a, s in zip(logged, analysis.steps, strict=False)
        )

    def _turn(self, k: int, st: dict, params: dict[str, list[str]], md: _Analysis | None) -> Turn:
        rec: _Record = st["rec"]
        obs: _Obs | None = st["obs"]
        where = f"experiment.log line {rec.line} turn {k}"
        answer = st["answer"].strip()
        if not answer:
            raise RecordError("missing_field", f"{where}: the action record is empty")
        action, thought = _split_answer(answer)
        thought = thought or st.get("thought")
        calls = _calls(action)
        tool_name = tool_args = None
        if calls and len(calls) == 1:
            tool_name = calls[0][0]
            tool_args = dumps(_named_args(*calls[0], params))
        elif calls is None:
            m = re.match(r"^\s*([A-Za-z_]\w*)\(", action)
            tool_name = m[1] if m else None

        observation = kind = None
        tabs: list[dict] = []
        error: str | None = None
        is_error: bool | None = None
        source = None
        md_step = md.steps[k + 1] if md is not None and k + 1 < len(md.steps) else None
        if obs is not None:
            source = "log"
            tabs, error, is_error = obs.tabs, obs.error, obs.error is not None
            if obs.axtree is not None:
                observation, kind = obs.axtree, "accessibility_tree"
            elif obs.dom is not None:  # HTML-only agents: the pruned DOM is the observation
                observation, kind = obs.dom, "tool_result"
        elif md_step is not None and md_step["axtree"] is not None:
            source = "experiment_analysis.md"
            observation, kind, tabs = md_step["axtree"], "accessibility_tree", md_step["tabs"]
        if md_step is not None and error is None and k < len(md_step["outcomes"]):
            outcome = md_step["outcomes"][k]
            if outcome is not None:
                is_error = outcome != "No errors reported"
                error = outcome if is_error else None
        active = next((t for t in tabs if t.get("active")), None)
        url = active.get("url") if active else None
        if url is None and observation and kind == "accessibility_tree":
            mu = _ROOT_URL.search(observation.split("\n", 1)[0])
            url = mu[1] if mu else None
        t0, t1 = _seconds(rec.time), _seconds(obs.rec.time) if obs else None
        meta = {
            "log_time": rec.time,
            "observation_source": source,
            "last_action_error": error,
            "calls": [{"name": n, "args": a, "kwargs": kw} for n, a, kw in calls]
            if calls and len(calls) > 1
            else None,
            "observation_format": "pruned_html" if kind == "tool_result" else None,
        }
        return Turn(
            kind="env",
            action=action,
            tool_name=tool_name,
            tool_args=tool_args,
            thought=thought,
            observation=observation,
            observation_kind=kind or "none",
            is_error=is_error,
            duration_s=round(t1 - t0, 3) if t0 is not None and t1 is not None else None,
            state=dumps({"url": url, "open_tabs": tabs}) if (url or tabs) else None,
            locator=f"experiment.log:{rec.line}"
            + (f"+experiment.log:{obs.rec.line}" if obs else "")
            + (
                f"+experiment_analysis.md:{md_step['line']}"
                if source == "experiment_analysis.md" and md_step
                else ""
            ),
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
        )
