"""AgentWorldBench JSON lines (Qwen-AgentWorld's world-model benchmark, `{domain}_test.jsonl`).

Each row is one evaluated turn of a real agent session: `{task, id, prompt, response, current_prompt,
system_str, turn_idx, total_turns}`. In the published layout `prompt` and `response` are parallel
lists, one entry per turn up to the evaluated one: `prompt[i]` is the turn's world-model input
(`### Turn N`, optionally `**Task Instruction:**` and `**Current State:**`, then `**Action:**` with a
fenced action), `response[i]` the real observation (`**Environment Observation:** ...`); the last
prompt carries the benchmark's instruction suffix ("Please analyze the input above ...") and the last
response is the ground truth of the evaluated turn. The official inference code feeds the history as
alternating user (action) / assistant (observation) messages; rows stored in that alternating form
(role/content messages, or alternating strings with a single current response) are read too.
Observations may arrive wrapped in `<predicted_observation>` tags; the tags are stripped.

Choice: one trajectory per row, with every turn of the row's history plus the evaluated turn. A
JSON-lines importer sees one line at a time, so it cannot pick the longest row of a session; the
consequence is that a session with k evaluated turns yields k trajectories that are prefixes of each
other. `metadata.session_key` (task, id and a hash of `system_str`; the Android file reuses ids across
sessions) and `metadata.turn_idx` let the dedup stage's shared-prefix detection collapse them, and
`Turn.metadata.evaluated` marks the turn the row was built to evaluate.

A turn's action is the body of its `**Action:**` block (fence removed); JSON tool calls
(`{name, arguments}`, `{action_type, ...}`) and `<invoke name=...>` blocks give `tool_name`/`tool_args`,
other JSON (Terminus keystroke batches) only `tool_args`. The first turn's `**Current State:**` is the
trajectory's `initial_state`; later turns keep theirs in `metadata.state_before`.

Domain: from `task` (its last `/`-separated part) when it names one of the seven domains or a known
alias, and then `ingest --domain` does not replace it (the format records it, as DroidBot's or
BrowserGym's environment). A row whose task names no domain takes `--domain`; without it, it is
quarantined (`unknown_domain`) rather than labelled with a guess.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from collectors.base import ImportContext, Importer, as_text, require
from pipelines.sources import parse_json
from schemas.records import RecordError, Trajectory, Turn, dumps

_ALIASES = {
    "mcp": "mcp", "tool": "mcp", "tools": "mcp", "api": "mcp", "tool_decathlon": "mcp", "mcpmark": "mcp",
    "search": "search", "websearch": "search", "web_search": "search", "widesearch": "search",
    "terminal": "terminal", "shell": "terminal", "bash": "terminal", "terminal_bench": "terminal",
    "terminal-bench": "terminal", "tb": "terminal",
    "swe": "swe", "code": "swe", "coding": "swe", "swe_bench": "swe", "swe-bench": "swe", "ide": "swe",
    "web": "web", "browser": "web", "webarena": "web", "gui_web": "web",
    "os": "os", "desktop": "os", "osworld": "os", "computer": "os",
    "android": "android", "mobile": "android", "androidworld": "android", "phone": "android",
}
_OBS_KIND = {
    "mcp": "tool_result",
    "search": "search_results",
    "terminal": "terminal_screen",
    "swe": "tool_result",
    "web": "accessibility_tree",
    "android": "view_hierarchy",
    "os": "tool_result",
}
_MARKER = "**Environment Observation:**"
_SUFFIX = "\n\nPlease analyze the input above"
_TAG = re.compile(r"<predicted_observation>(.*?)(?:</predicted_observation>|\Z)", re.S | re.I)
_SECTION = re.compile(
    r"^\*\*(Task Instruction|Current State|Action|Environment Observation)\s*:\*\*[ \t]*\n?",
    re.M | re.I,
)
_TURN = re.compile(r"^\s*###\s*Turn\s*(\d+)[ \t]*\n?", re.I)
_INVOKE = re.compile(r"<invoke\s+name=\"([^\"]+)\"\s*>(.*?)</invoke>", re.S)
_PARAM = re.compile(r"<parameter\s+name=\"([^\"]+)\"\s*>(.*?)</parameter>", re.S)


def domain_of_task(task: Any) -> str | None:
    if not isinstance(task, str):
        return None
    return _ALIASES.get(task.strip().split("/")[-1].strip().lower())


def clean_observation(text: str) -> str:
    """The observation proper: without the `**Environment Observation:**` marker or prediction tags."""
    tagged = _TAG.findall(text)
    if tagged:
        text = tagged[-1]
    s = text.strip()
    if s.startswith(_MARKER):
        s = s[len(_MARKER) :]
    return s.strip()


def split_prompt(prompt: str) -> dict[str, Any]:
    """Sections of one turn prompt: `turn`, `task_instruction`, `current_state`, `action`, `suffix`, `preamble`."""
    out: dict[str, Any] = {}
    cut = prompt.find(_SUFFIX)
    if cut >= 0:
        out["suffix"] = prompt[cut:].strip()
        prompt = prompt[:cut]
    head = _TURN.match(prompt)
    if head:
        out["turn"] = int(head.group(1))
        prompt = prompt[head.end() :]
    matches = list(_SECTION.finditer(prompt))
    pre = prompt[: matches[0].start()] if matches else prompt
    if pre.strip():
        out["preamble"] = pre.strip()
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(prompt)
        # android rows put `**Current Phone State:**` under `**Current State:**`: part of the state, as
        # the same heading is part of every observation
        key = m.group(1).lower().replace(" ", "_")
        out[key] = prompt[m.end() : end].strip()
    return out


def unfence(text: str) -> tuple[str, str | None]:
    """(body, fence language) of a fenced block; unfenced text is returned as it is."""
    s = text.strip()
    if not s.startswith("```") or not s.endswith("```") or len(s) < 6:
        return s, None  # not one fenced block: keep every character
    nl = s.find("\n")
    if nl < 0:
        return s, None
    lang = s[3:nl].strip() or None
    end = s.rfind("```")
    body = s[nl + 1 : end] if end > nl else s[nl + 1 :]
    return body.strip("\n"), lang


def structured_call(body: str) -> tuple[str | None, Any]:
    """(tool name, arguments) of an action body, when it is a JSON call or an `<invoke>` block."""
    try:
        value = parse_json(body)
    except orjson.JSONDecodeError:
        value = None
    if value is not None:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) and "name" in value[0]:
            value = value[0]
        if isinstance(value, dict):
            if isinstance(value.get("name"), str):
                args = value.get("arguments", value.get("parameters", value.get("input")))
                if isinstance(args, str):
                    try:
                        args = parse_json(args)
                    except orjson.JSONDecodeError:
                        pass
                return value["name"], args
            for key in ("action_type", "action"):
                if isinstance(value.get(key), str):
                    return value[key], {k: v for k, v in value.items() if k != key}
        return None, value
    m = _INVOKE.search(body)
    if m:
        return m.group(1), {k: v.strip() for k, v in _PARAM.findall(m.group(2))}
    return None, None


def _as_list(value: Any) -> list:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


class AgentWorldBenchImporter(Importer):
    """AgentWorldBench rows: one trajectory per row (history + evaluated turn)."""

    name = "agentworldbench"
    container = "jsonl"

    def sniff(self, sample: Any) -> bool:
        return (
            isinstance(sample, dict)
            and "prompt" in sample
            and "response" in sample
            and "current_prompt" in sample
            and "turn_idx" in sample
            and isinstance(sample["prompt"], list | str)
        )

    def convert(self, record: Any, locator: str, ctx: ImportContext) -> Trajectory:
        task_name = require(record, "task", locator)
        prompts = _as_list(require(record, "prompt", locator))
        responses = _as_list(require(record, "response", locator))
        known = domain_of_task(task_name)
        if known is None and ctx.domain_override is None:
            raise RecordError(
                "unknown_domain",
                f"{locator}: task {task_name!r} names no known domain; pass --domain to import it",
            )
        domain = known or ctx.domain("mcp")  # a task that names its domain keeps it; else the override is set
        current = as_text(record.get("current_prompt"))
        pairs = self._pairs(prompts, responses, current, locator)
        turn_idx = record.get("turn_idx")
        if not isinstance(turn_idx, int) or isinstance(turn_idx, bool) or turn_idx < 1:
            raise RecordError("malformed_record", f"{locator}: turn_idx must be a positive integer, got {turn_idx!r}")
        if turn_idx > len(pairs):
            raise RecordError(
                "malformed_record", f"{locator}: turn_idx {turn_idx} but the row holds only {len(pairs)} turn(s)"
            )
        obs_kind = _OBS_KIND[domain]
        turns: list[Turn] = []
        task_text = initial_state = suffix = None
        for i, (prompt, response, loc) in enumerate(pairs):
            if not isinstance(prompt, str):
                raise RecordError("malformed_record", f"{locator} {loc}: turn prompt must be a string")
            sec = split_prompt(prompt)
            suffix = sec.get("suffix") or suffix
            meta: dict[str, Any] = {}
            if "turn" in sec:
                meta["turn"] = sec["turn"]
            if "preamble" in sec:
                meta["preamble"] = sec["preamble"]
            if "task_instruction" in sec:
                if task_text is None:
                    task_text = sec["task_instruction"]
                elif sec["task_instruction"] != task_text:
                    meta["task_instruction"] = sec["task_instruction"]
            if "current_state" in sec:
                if i == 0:
                    initial_state = sec["current_state"]
                else:
                    meta["state_before"] = sec["current_state"]
            for key, value in sec.items():  # any other section (an observation quoted in a prompt)
                if key not in ("turn", "preamble", "task_instruction", "current_state", "action", "suffix"):
                    meta[key] = value
            if i == turn_idx - 1:
                meta["evaluated"] = True
            raw_action = sec.get("action")
            if raw_action is None:
                # No `**Action:**` header: the whole prompt (less heading and suffix) is the action.
                raw_action = sec.get("preamble", "")
                meta.pop("preamble", None)
                meta["action_unsectioned"] = True
            body, lang = unfence(raw_action)
            if lang:
                meta["action_format"] = lang
            tool, args = structured_call(body)
            if response is None:
                # A prediction-only row: the action, without a real observation.
                observation, kind = None, "none"
                meta["observation_missing"] = True
            else:
                if not isinstance(response, str):
                    raise RecordError("malformed_record", f"{locator} {loc}: observation must be a string")
                observation, kind = clean_observation(response), obs_kind
            turns.append(
                Turn(
                    kind="env" if observation is not None else "message",
                    action=body,
                    observation=observation,
                    observation_kind=kind,
                    tool_name=tool,
                    tool_args=dumps(args) if args is not None else None,
                    locator=loc,
                    metadata=dumps(meta) if meta else None,
                )
            )
        system = as_text(record.get("system_str"))
        sys_hash = hashlib.sha256((system or "").encode()).hexdigest()[:16]
        meta = {
            "session_key": f"{task_name}:{record.get('id')}:{sys_hash}",
            "turn_idx": turn_idx,
            "total_turns": record.get("total_turns"),
            "system_prompt": system,
            "instruction_suffix": suffix,
        }
        if current is not None and pairs:
            last = pairs[turn_idx - 1][0]
            if isinstance(last, str) and current.strip() != last.split(_SUFFIX)[0].strip():
                meta["current_prompt"] = current
        skip = {"task", "id", "prompt", "response", "current_prompt", "system_str", "turn_idx", "total_turns"}
        meta.update({k: v for k, v in record.items() if k not in skip})
        meta["task_name"] = task_name
        return Trajectory(
            domain=domain,
            source_format=self.name,
            native_id=str(record["id"]) if record.get("id") is not None else None,
            record_digest=ctx.record_digest(locator),
            turns=turns,
            task=task_text,
            initial_state=initial_state,
            metadata=dumps({k: v for k, v in meta.items() if v is not None}),
            locator=locator,
        )

    @staticmethod
    def _pairs(prompts: list, responses: list, current: str | None, where: str) -> list[tuple[Any, Any, str]]:
        """(action prompt, observation, locator) per turn, whatever layout the row uses."""
        if prompts and all(isinstance(p, dict) for p in prompts):
            # Chat-message history: user = action, assistant = observation.
            out: list[tuple[Any, Any, str]] = []
            pending: tuple[str, str] | None = None
            for j, m in enumerate(prompts):
                role, text = m.get("role"), as_text(m.get("content"))
                if role == "system":
                    continue
                if role == "user":
                    if pending is not None:
                        out.append((pending[0], None, pending[1]))
                    pending = (text or "", f"prompt[{j}]")
                elif role == "assistant" and pending is not None:
                    out.append((pending[0], text, f"{pending[1]}+prompt[{j}]"))
                    pending = None
                else:
                    raise RecordError("malformed_record", f"{where} prompt[{j}]: unexpected role {role!r}")
            last_obs = responses[-1] if responses else None
            rloc = f"+response[{len(responses) - 1}]" if responses else ""
            if pending is not None:
                out.append((pending[0], last_obs, pending[1] + rloc))
            elif current is not None:
                out.append((current, last_obs, "current_prompt" + rloc))
            return out
        n, r = len(prompts), len(responses)
        alternating = n >= 2 and all(
            isinstance(prompts[i], str) and prompts[i].lstrip().lower().startswith((_MARKER.lower(), "<predicted_observation>"))
            for i in range(1, n, 2)
        )
        if not alternating and (n == r or n == r + 1):
            # Published layout: parallel lists (the last response may be absent in prediction-only rows).
            return [
                (prompts[i], responses[i] if i < r else None, f"prompt[{i}]+response[{i}]" if i < r else f"prompt[{i}]")
                for i in range(n)
            ]
        if r <= 1 and n >= 2:
            # Alternating strings: [action, observation, ..., action?] plus the current observation.
            out = [(prompts[i], prompts[i + 1], f"prompt[{i}]+prompt[{i + 1}]") for i in range(0, n - 1, 2)]
            if n % 2 == 1:
                out.append((prompts[-1], responses[0] if r else None, f"prompt[{n - 1}]+response[0]" if r else f"prompt[{n - 1}]"))
            elif current is not None:
                out.append((current, responses[0] if r else None, "current_prompt+response[0]" if r else "current_prompt"))
            return out
        raise RecordError(
            "malformed_record", f"{where}: {n} prompt(s) and {r} response(s) do not form a turn sequence"
        )
