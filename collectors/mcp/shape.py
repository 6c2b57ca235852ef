"""The shape of MCP rows: how a request becomes an action, a response an observation, a tool
listing an action space and a fingerprint.

One definition for the live recorder (`collectors.mcp.recorder`) and the importer of captured
traffic (`collectors.mcp_traffic`), so that a session recorded here and the same traffic captured
by another tool give the same turns. Pure functions over plain JSON values: no SDK types, so the
importer can use them on whatever a log holds (they tolerate malformed values instead of raising).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from schemas.records import dumps, value_json

# The requests that are turns: the agent acting on the server's world. Reading a resource or getting a
# prompt is a turn whose tool name is its method.
_METHOD_NAMED = ("resources/read", "prompts/get")
TURN_METHODS = ("tools/call", *_METHOD_NAMED)


@dataclass(frozen=True)
class Observation:
    """What the client got for one request: the turn's observation columns and metadata."""

    text: str | None
    kind: str
    is_error: bool
    meta: dict[str, Any] = field(default_factory=dict)


def canonical_error(code: int, message: str, data: Any = None) -> str:
    """The observation text of a JSON-RPC error, as the client saw it."""
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return dumps({"error": err})  # type: ignore[return-value]


def result_observation(result: Any) -> Observation:
    """A JSON-RPC result: its canonical JSON, so a world model learns to predict the payload itself;
    `isError: true` is an in-band tool error (kind stays `tool_result`)."""
    is_error = isinstance(result, dict) and result.get("isError") is True
    structured = isinstance(result, dict) and "structuredContent" in result
    return Observation(dumps(result), "tool_result", is_error,
                       {"in_band_error": is_error, "has_structured_content": structured})


def error_observation(code: Any, message: Any, data: Any, origin: str) -> Observation:
    """A protocol-level error, kept apart from in-band tool errors: kind `error`, and who produced it
    (`server` on the wire, `proxy` injected, `client` the SDK's own timeout or closed connection)."""
    return Observation(canonical_error(code, message, data), "error", True,
                       {"protocol_error": {"code": code, "message": message, "origin": origin}})


def request_method(tool_name: str) -> str:
    """The JSON-RPC method of an action's tool name (resources and prompts use their method as name)."""
    return tool_name if tool_name in _METHOD_NAMED else "tools/call"


def request_action(method: str, params: Any) -> tuple[str, Any]:
    """(tool_name, tool_args) of a turn request, the inverse of `request_method`: a tool call is its tool
    and arguments; `resources/read` and `prompts/get` keep their method as name and the params that
    select what they return. Params that do not fit (no tool name) give the method and the params."""
    p = params if isinstance(params, dict) else {}
    if method == "resources/read":
        return method, {"uri": p.get("uri")}
    if method == "prompts/get":
        return method, {"name": p.get("name"), "arguments": p.get("arguments") or {}}
    name = p.get("name")
    if not isinstance(name, str):
        return method, params
    return name, p.get("arguments") or {}


def action_text(tool_name: str, args: Any) -> str:
    """The canonical action text: `name(canonical-JSON-args)` (`args` the decoded value the protocol carries)."""
    return f"{tool_name}({value_json(args)})"


def tool_schema_sha256(tools: list[dict]) -> str:
    """sha256 of the canonical JSON of the tool list, sorted by name: the action-space identity."""
    return hashlib.sha256(dumps(sorted(tools, key=_tool_name)).encode()).hexdigest()


def _tool_name(tool: Any) -> str:
    return str(tool.get("name")) if isinstance(tool, dict) else ""


def action_space(tools: list[dict] | None) -> str | None:
    """The `tools/list` result (all pages) exactly as the server sent it."""
    return dumps(tools) if tools is not None else None  # none listed: null; an empty listing: `[]`


def _server_info(init_result: dict) -> dict:
    info = init_result.get("serverInfo")
    return info if isinstance(info, dict) else {}


def server_fingerprint(init_result: dict, tools: list[dict] | None) -> dict[str, Any]:
    """The fingerprint fields the `initialize` result and the tool listing give; callers add how the
    server was reached (transport, spec, package)."""
    info = _server_info(init_result)
    return {"server_name": info.get("name"), "server_version": info.get("version"),
            "protocol_version": init_result.get("protocolVersion"),
            "tool_schema_sha256": tool_schema_sha256(tools) if tools is not None else None, "tools": len(tools or [])}


def initial_state(init_result: dict, resources: list[dict] | None, prompts: list[dict] | None) -> dict[str, Any]:
    """The server as the session found it: info, capabilities, instructions, and the resource and
    prompt listings when the session asked for them."""
    info = _server_info(init_result)
    state: dict[str, Any] = {"server_info": info or None, "protocol_version": init_result.get("protocolVersion"),
                             "capabilities": init_result.get("capabilities"),
                             "instructions": init_result.get("instructions")}
    if resources is not None:
        state["resources"] = resources
    if prompts is not None:
        state["prompts"] = prompts
    return state
