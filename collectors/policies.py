"""Who chooses the actions: one interface for every live collector (Docker sandboxes, MCP servers).

A policy sees the task, the action space (tool schemas in JSON-Schema form) and the history of
steps so far, and returns the next `Action`, or None when it is done. Three kinds:

- `ScriptedPolicy`: a fixed list of actions (from a YAML task spec);
- `ReplayPolicy`: the action sequence of an imported trajectory, re-executed for fresh observations;
- `OpenAIChatPolicy`: an agent behind an OpenAI-compatible `/chat/completions` endpoint (vLLM,
  SGLang, a hosted API), offered the action space as function-calling tools.
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Action:
    text: str  # canonical text: the shell command, or `tool(args-json)`
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    thought: str | None = None
    tool_call_id: str | None = None


@dataclass
class Step:
    action: Action
    observation: str
    is_error: bool = False
    exit_code: int | None = None


class Policy(Protocol):
    name: str

    def reset(self, task: str, action_space: list[dict]) -> None: ...

    def next_action(self, history: list[Step]) -> Action | None: ...


class ScriptedPolicy:
    name = "scripted"

    def __init__(self, actions: Iterable[Action | str]):
        self.actions = [a if isinstance(a, Action) else Action(text=a) for a in actions]

    def reset(self, task: str, action_space: list[dict]) -> None:
        pass

    def next_action(self, history: list[Step]) -> Action | None:
        i = len(history)
        return self.actions[i] if i < len(self.actions) else None


class ReplayPolicy(ScriptedPolicy):
    """Replays recorded actions; `source` names the trajectory they came from."""

    name = "replay"

    def __init__(self, actions: Iterable[Action | str], source: str):
        super().__init__(actions)
        self.source = source


class EndpointError(RuntimeError):
    pass


@dataclass
class OpenAIChatPolicy:
    """An agent served behind an OpenAI-compatible chat endpoint.

    `base_url`, `model` and `api_key` default to `WORLDLINE_AGENT_BASE_URL`,
    `WORLDLINE_AGENT_MODEL` and `WORLDLINE_AGENT_API_KEY` (or `OPENAI_API_KEY`)."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    max_turns: int = 20
    temperature: float = 0.0
    seed: int = 0
    timeout_s: float = 120.0
    retries: int = 3
    name: str = "openai-chat"
    _messages: list[dict] = field(default_factory=list, repr=False)
    _tools: list[dict] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.base_url = (self.base_url or os.environ.get("WORLDLINE_AGENT_BASE_URL") or "").rstrip("/")
        self.model = self.model or os.environ.get("WORLDLINE_AGENT_MODEL")
        self.api_key = self.api_key or os.environ.get("WORLDLINE_AGENT_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if not self.base_url or not self.model:
            raise ValueError("OpenAIChatPolicy needs base_url and model (or WORLDLINE_AGENT_BASE_URL / WORLDLINE_AGENT_MODEL)")

    def reset(self, task: str, action_space: list[dict]) -> None:
        self._tools = [{"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                         "parameters": t.get("inputSchema") or t.get("parameters") or {"type": "object"}}}
                       for t in action_space]
        self._messages = [
            {"role": "system", "content": "You are an agent acting in an environment through the tools offered. "
                                          "Call one tool at a time; reply without a tool call when the task is done."},
            {"role": "user", "content": task},
        ]

    def next_action(self, history: list[Step]) -> Action | None:
        if history:
            last = history[-1]
            self._messages.append({"role": "tool", "tool_call_id": last.action.tool_call_id or f"call_{len(history)}",
                                   "content": last.observation})
        if len(history) >= self.max_turns:
            return None
        body = {"model": self.model, "messages": self._messages, "tools": self._tools,
                "temperature": self.temperature, "seed": self.seed}
        msg = self._post(body)["choices"][0]["message"]
        calls = msg.get("tool_calls") or []
        if not calls:
            self._messages.append({"role": "assistant", "content": msg.get("content") or ""})
            return None
        call = calls[0]
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {"_unparsed": fn.get("arguments")}
        if not isinstance(args, dict):  # JSON, but not an object (`"ls -la"`): kept as given, never taken apart
            args = {"_unparsed": fn.get("arguments")}
        call_id = call.get("id") or f"call_{len(history) + 1}"
        self._messages.append({"role": "assistant", "content": msg.get("content"),
                               "tool_calls": [{"id": call_id, "type": "function", "function": fn}]})
        text = args.get("command") if fn.get("name") == "bash" and isinstance(args.get("command"), str) else \
            f"{fn.get('name')}({json.dumps(args, sort_keys=True)})"
        return Action(text=text, tool_name=fn.get("name"), tool_args=args, thought=msg.get("content"), tool_call_id=call_id)

    def _post(self, body: dict) -> dict:
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        delay = 1.0
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(f"{self.base_url}/chat/completions", data=data, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                transient = e.code in (408, 409, 429) or e.code >= 500
                if not transient or attempt == self.retries:
                    raise EndpointError(f"{self.base_url}: HTTP {e.code}: {e.read()[:300]!r}") from e
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                if attempt == self.retries:
                    raise EndpointError(f"{self.base_url}: unreachable ({e}); is the endpoint running?") from e
            time.sleep(delay)
            delay *= 2
        raise AssertionError("unreachable")
