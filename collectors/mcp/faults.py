"""Fault injection between the MCP client and the server: an in-process transport wrapper.

Why in-process and not a separate stdio proxy process: the wrapper sits on the SDK's message
streams, so the same code perturbs stdio and streamable-HTTP servers alike; it adds no process
hop, no second JSON encode/decode and no extra pipe per message (the benchmark's <20% recording
overhead depends on that); it sees the unperturbed response object directly, which every
injected fault keeps; and its seeded RNG lives in the collector, so a run is reproducible from
`(seed, server, session)` whatever the scheduling. The server still runs as a real separate
process; `server_crash` SIGKILLs that process group for real.

Only `tools/call` responses are perturbed. Per call the proxy draws once from an RNG seeded by
the run seed and the session key: with probability `rate` it picks one of the configured kinds
(`schema_violation` only for tools that declare an `outputSchema`). A scripted step can force a
kind instead (`fault:` in the spec).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData, JSONRPCError, JSONRPCRequest, JSONRPCResponse

from collectors.mcp.fault_kinds import FAULTS
from collectors.mcp.wire import WireLog, _StreamWrapper
from collectors.specs import fault_kinds
from schemas.records import digest

RATE_LIMIT_CODE = -32010  # implementation-defined band (-32000..-32019); -32000/-32001 are SDK-internal

_TOOL_ERRORS = (
    "Internal error: connection reset by peer",
    "Service temporarily unavailable, please retry later",
    "Operation failed: resource is busy",
    "Unexpected error: I/O error while reading data",
    "Internal server error: worker process exited unexpectedly",
)


@dataclass(frozen=True)
class FaultConfig:
    """Which faults, how often, and the seed: part of a run's fingerprint."""

    kinds: tuple[str, ...] = ()
    rate: float = 0.0
    seed: int = 0
    latency_s: tuple[float, float] = (0.1, 0.5)

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in FAULTS]
        if unknown:
            raise ValueError(f"unknown fault kinds {unknown}; known: {sorted(FAULTS)}")
        if not 0.0 <= self.rate <= 1.0:  # NaN fails too
            raise ValueError(f"--fault-rate {self.rate} is not within [0, 1]")
        if self.rate > 0 and not self.kinds:
            raise ValueError(f"--fault-rate {self.rate} without --faults: a rate with no fault kinds injects nothing; "
                             f"name them with --faults KIND,... or --faults all (known: {', '.join(sorted(FAULTS))})")

    @classmethod
    def parse(cls, kinds: str | None, rate: float | None = None, seed: int = 0,
              latency_s: tuple[float, float] = (0.1, 0.5)) -> FaultConfig:
        """`kinds`: comma-separated names, `all`, or empty/`none`. A rate defaults to 0.25 when
        kinds are given."""
        names = fault_kinds(kinds, FAULTS)
        if rate is None:
            rate = 0.25 if names else 0.0
        return cls(names, rate, seed, latency_s)

    def as_dict(self) -> dict[str, Any]:
        return {"kinds": list(self.kinds), "rate": self.rate, "seed": self.seed, "latency_s": list(self.latency_s)}

    def rng_for(self, key: str) -> random.Random:
        """The session's RNG: the same seed and session key always give the same faults."""
        return random.Random(int(digest(str(self.seed), key)[:16], 16))


@dataclass
class Injection:
    """One fault on one request: what was chosen, whether it applied, and both responses."""

    kind: str
    tool: str
    forced: bool
    seed: int
    applied: bool = False
    detail: dict[str, Any] = field(default_factory=dict)
    unperturbed: SessionMessage | None = None  # what the server sent
    delivered: SessionMessage | None = None  # what the client got instead (None: nothing)


class FaultProxy:
    """Wraps a transport's (read, write) streams; perturbs `tools/call` responses."""

    def __init__(self, config: FaultConfig, rng: random.Random, log: WireLog,
                 crash: Callable[[], None] | None = None):
        self.config, self.rng, self.log, self.crash = config, rng, log, crash
        self.output_schemas: dict[str, dict | None] = {}
        self.injections: dict[Any, Injection] = {}
        self._forced: str | None = None
        self._open: dict[Any, Injection] = {}
        self.crashed = False

    def force(self, kind: str | None) -> None:
        """Inject `kind` on the next `tools/call` (a scripted step's `fault:`)."""
        if kind is not None and kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r}; known: {sorted(FAULTS)}")
        self._forced = kind

    def wrap(self, read: Any, write: Any) -> tuple[_ProxyRead, _ProxyWrite]:
        return _ProxyRead(read, self), _ProxyWrite(write, self)

    # -- choosing -----------------------------------------------------------------------------
    def _eligible(self, tool: str) -> list[str]:
        return [k for k in self.config.kinds if k != "schema_violation" or self.output_schemas.get(tool)]

    def _on_request(self, req: JSONRPCRequest) -> None:
        if req.method != "tools/call":
            return
        tool = str((req.params or {}).get("name"))
        forced, self._forced = self._forced, None
        kind = forced
        if kind is None and self.config.kinds:
            if self.rng.random() < self.config.rate:
                eligible = self._eligible(tool)
                kind = self.rng.choice(eligible) if eligible else None
        if kind is None:
            return
        inj = Injection(kind, tool, forced is not None, self.rng.getrandbits(32))
        self.injections[req.id] = inj
        self._open[req.id] = inj

    # -- applying -----------------------------------------------------------------------------
    async def _on_response(self, sm: SessionMessage) -> SessionMessage | None:
        """The message to deliver, or None to withhold it. Raises EndOfStream after a crash."""
        inj = self._open.pop(sm.message.id, None)  # type: ignore[union-attr]
        if inj is None:
            return sm
        inj.unperturbed = sm
        rng = random.Random(inj.seed)
        msg = sm.message
        kind = inj.kind
        if kind == "latency":
            lo, hi = self.config.latency_s
            delay = round(rng.uniform(lo, hi), 3)
            inj.applied, inj.detail = True, {"added_latency_s": delay}
            await anyio.sleep(delay)
            inj.delivered = sm
            return sm
        if kind == "timeout":
            inj.applied, inj.detail = True, {"withheld": True}
            self.log.add("p2c", "", None, note=f"fault timeout: response to id {msg.id} withheld")
            return None
        if kind == "server_crash":
            inj.applied = True
            inj.detail = {"killed": self.crash is not None}
            self.log.add("p2c", "", None, note=f"fault server_crash: server killed, response to id {msg.id} dropped")
            if self.crash is not None:
                self.crash()
            self.crashed = True
            raise anyio.EndOfStream
        if kind == "rate_limit":
            retry = rng.choice((1, 2, 5, 10, 30, 60))
            new: JSONRPCResponse | JSONRPCError = JSONRPCError(
                jsonrpc="2.0", id=msg.id,
                error=ErrorData(code=RATE_LIMIT_CODE, message=f"Rate limit exceeded: too many requests, retry after {retry}s",
                                data={"retryAfterSeconds": retry}))
            inj.applied, inj.detail = True, {"retry_after_s": retry}
        else:
            if not isinstance(msg, JSONRPCResponse):
                inj.detail = {"skipped": "the server answered with a JSON-RPC error; nothing to perturb"}
                return sm
            result, detail = perturb_result(kind, msg.result, inj.tool, self.output_schemas.get(inj.tool), rng)
            if result is None:
                inj.detail = detail
                return sm
            new = JSONRPCResponse(jsonrpc="2.0", id=msg.id, result=result)
            inj.applied, inj.detail = True, detail
        out = SessionMessage(new)
        inj.delivered = out
        self.log.add("p2c", new.model_dump_json(by_alias=True, exclude_unset=True), new, note=f"fault {kind}")
        return out


class _ProxyRead(_StreamWrapper):
    def __init__(self, inner: Any, proxy: FaultProxy):
        super().__init__(inner)
        self.proxy = proxy

    async def receive(self) -> Any:
        p = self.proxy
        while True:
            if p.crashed:
                raise anyio.EndOfStream
            item = await self.inner.receive()
            if not p._open or not isinstance(item, SessionMessage) or \
                    not isinstance(item.message, JSONRPCResponse | JSONRPCError):
                return item
            out = await p._on_response(item)
            if out is not None:
                return out


class _ProxyWrite:
    def __init__(self, inner: Any, proxy: FaultProxy):
        self.inner, self.proxy = inner, proxy

    async def send(self, item: SessionMessage) -> None:
        if isinstance(item.message, JSONRPCRequest):
            self.proxy._on_request(item.message)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _ProxyWrite:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


# -- the payload transformations (pure; seeded) ---------------------------------------------------

def perturb_result(kind: str, result: dict, tool: str, output_schema: dict | None,
                   rng: random.Random) -> tuple[dict | None, dict]:
    """The perturbed `tools/call` result and a description, or (None, why-not) if it does not apply."""
    if kind == "tool_error":
        text = f"Error executing tool {tool}: {rng.choice(_TOOL_ERRORS)}"
        return {"content": [{"type": "text", "text": text}], "isError": True}, {"message": text}
    if kind == "empty_result":
        return {"content": []}, {}
    if kind == "truncated":
        return _truncate(result, rng)
    if kind == "schema_violation":
        return _violate(result, output_schema, rng)
    raise ValueError(f"{kind!r} is not a payload transformation")


def _truncate(result: dict, rng: random.Random) -> tuple[dict | None, dict]:
    blocks = result.get("content") or []
    if not blocks:
        return None, {"skipped": "empty content; nothing to truncate"}
    first = dict(blocks[0])
    frac = rng.uniform(0.1, 0.6)
    field_name = "text" if isinstance(first.get("text"), str) else "data" if isinstance(first.get("data"), str) else None
    detail: dict[str, Any] = {"dropped_blocks": len(blocks) - 1,
                              "dropped_structured_content": "structuredContent" in result}
    if field_name:
        full = first[field_name]
        keep = max(1, math.floor(len(full) * frac)) if full else 0
        first[field_name] = full[:keep]
        detail.update({"field": field_name, "kept_chars": keep, "original_chars": len(full)})
    elif len(blocks) == 1 and "structuredContent" not in result:
        return None, {"skipped": "a single non-text block; nothing to truncate"}
    out = {k: v for k, v in result.items() if k not in ("content", "structuredContent")}
    out["content"] = [first]
    return out, detail


def _wrong_value(declared: Any) -> Any:
    types = declared if isinstance(declared, list) else [declared]
    if "string" in types:
        return 12345
    if "number" in types or "integer" in types:
        return "not-a-number"
    if "boolean" in types:
        return "yes"
    if "array" in types:
        return {"unexpected": True}
    return "unexpected"


def _violate(result: dict, schema: dict | None, rng: random.Random) -> tuple[dict | None, dict]:
    if not schema:
        return None, {"skipped": "the tool declares no outputSchema"}
    from jsonschema.validators import validator_for

    validator = validator_for(schema)(schema)
    sc = result.get("structuredContent")
    props = schema.get("properties") or {}
    required = sorted(p for p in schema.get("required", []) if p in props) or sorted(props)
    out = dict(result)
    if isinstance(sc, dict) and required:
        key = rng.choice(required)
        declared = props[key].get("type")
        new_sc = dict(sc)
        new_sc[key] = _wrong_value(declared)
        detail: dict[str, Any] = {"property": key, "declared_type": declared, "injected": new_sc[key]}
        if validator.is_valid(new_sc):  # e.g. an untyped property: remove a required one instead
            new_sc.pop(key)
            detail = {"property": key, "removed": True}
        if not validator.is_valid(new_sc):
            out["structuredContent"] = new_sc
            return out, detail
    out["structuredContent"] = ["unexpected"]
    return out, {"replaced_with": "array"}
