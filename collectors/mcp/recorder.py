"""Record one MCP session: start the server, health-check it, let a policy act, stop it.

The result is one `mcp` trajectory (source format `mcp-live`) and the raw JSON-RPC rows for the
`mcp_raw` side table. A turn is one request the policy made (`tools/call`, `resources/read`,
`prompts/get`); its `observation` is the canonical JSON (sorted keys, compact) of the result
payload exactly as the client received it, so that a world model learns to predict the payload
itself. Protocol-level errors (a JSON-RPC `error` from the server or the fault proxy, or the
client's own timeout / connection-closed) are kept apart from in-band tool errors: they become
`{"error": {...}}` observations of kind `error`, with `metadata.protocol_error.origin` saying who
produced them, while an in-band error is a normal `tool_result` with `isError: true`.

Failures never escape: a server that cannot start, hangs in `initialize`, writes invalid JSON-RPC
or dies still yields a trajectory: what happened up to then, an error turn saying what went
wrong, and an `outcome` naming it.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    Implementation,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    PaginatedRequestParams,
)
from pydantic import ValidationError

from collectors.mcp.faults import FaultConfig, FaultProxy, Injection
from collectors.mcp.raw import RawRow
from collectors.mcp.shape import (
    Observation,
    action_space,
    action_text,
    canonical_error,
    error_observation,
    initial_state,
    request_method,
    result_observation,
    server_fingerprint,
)
from collectors.mcp.spec import ServerSpec, SessionSpec, SpecError, expand, run_setup
from collectors.mcp.wire import (
    ServerProcess,
    StartError,
    WireLog,
    free_port,
    http_streams,
    stdio_streams,
    wait_for_port,
)
from collectors.policies import Action, Policy, ReplayPolicy, ScriptedPolicy, Step
from schemas.records import Trajectory, Turn, digest, dumps, value_json

SOURCE_FORMAT = "mcp-live"
# Outcomes of a session that ended before its tool listing was recorded (no action space to expect)
STARTUP_FAILURES = ("setup_failed", "start_failed", "initialize_timeout", "initialize_failed", "listing_timeout",
                    "invalid_jsonrpc", "server_died", "connection_closed", "error")
# Outcomes that mean the session did not run as intended (an injected `server_crash` is intended)
FAILED_OUTCOMES = (*STARTUP_FAILURES, "policy_error")
COLLECTOR = "McpLiveCollector"
COLLECTOR_VERSION = "1"
CLIENT_INFO = Implementation(name="worldline-mcp-recorder", version="1")
OBSERVATION_LIMIT = 1 << 20  # an invalid line is kept as the observation up to this many characters


@dataclass
class SessionResult:
    trajectory: Trajectory
    raw: list[RawRow]
    outcome: str
    error: str | None
    pid: int | None
    seconds: float
    perturbations: list[str | None] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


class _Failure(Exception):
    """A session-ending failure with its outcome name (start_failed, initialize_timeout, ...)."""

    def __init__(self, outcome: str, message: str, action: str = "initialize"):
        super().__init__(message)
        self.outcome, self.message, self.action = outcome, message, action


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class SessionRecorder:
    """One server session; `await SessionRecorder(...).run()` never raises (except cancellation)."""

    def __init__(self, spec: ServerSpec, session: SessionSpec, policy: Policy, *, faults: FaultConfig,
                 run_id: str, repetition: int = 0, call_timeout_s: float | None = None,
                 keep_workdir: bool = False, stop_reason: Callable[[], str | None] | None = None):
        self.spec, self.session, self.policy, self.faults = spec, session, policy, faults
        self.run_id, self.repetition = run_id, repetition
        self.call_timeout_s = call_timeout_s or spec.timeouts.call_s
        self.keep_workdir = keep_workdir
        self.key = f"{spec.name}/{session.name}#{repetition}"
        self.log = WireLog()
        self.turns: list[Turn] = []
        self.turn_ranges: list[tuple[int, int]] = []
        self.proc: ServerProcess | None = None
        self.proxy: FaultProxy | None = None
        self.workdir: str | None = None
        self.init_raw: dict[str, Any] = {}
        self.tools: list[dict] | None = None  # the listing; [] for a server without the tools capability
        self.resources: list[dict] | None = None
        self.prompts: list[dict] | None = None
        self.timings: dict[str, float] = {}
        self.notes: list[str] = []
        self.replay_map: dict[str, str] = {}
        self.closed_error: str | None = None
        self.url: str | None = None  # streamable HTTP: the server's URL, placeholders expanded
        self._in_flight: str | None = None  # the action being executed, for errors that escape the SDK
        self.logdir = ""  # the server's stdout/stderr go to a file here (created by `run`)
        self.stop_reason = stop_reason  # what cancelled the session (SIGTERM, ...), asked when it is
        # a session cancelled after recording turns: those turns, as an `interrupted` trajectory
        # (`run` re-raises the cancellation; the caller writes this)
        self.partial: SessionResult | None = None

    # -- the session ----------------------------------------------------------------------------
    async def run(self) -> SessionResult:
        t0 = time.perf_counter()
        started = _now()
        self.logdir = tempfile.mkdtemp(prefix="worldline-mcp-log-")
        outcome, error = "completed", None
        cancelled = False
        try:
            outcome = await self._run()
        except anyio.get_cancelled_exc_class():
            cancelled = True  # the run is being interrupted: stop the server (below), keep what finished
            raise
        except Exception as e:  # noqa: BLE001 - a harness bug must not end the whole run
            leaf = _leaf(e)  # the SDK's task groups wrap what we raise inside the session
            if not isinstance(leaf, _Failure):
                leaf = await self._unreachable(leaf) or leaf
            if isinstance(leaf, _Failure):
                outcome, error = leaf.outcome, leaf.message
                self._error_turn(leaf.action, leaf.message, leaf.outcome)
            else:
                self.notes.append("".join(traceback.format_exception(leaf, limit=8)))
                if self.proc is not None and self.proc.returncode is None:
                    await self.proc.wait(0.5)
                during = self._in_flight or "the session"
                if self.proc is not None and self.proc.returncode is not None:  # e.g. HTTP: connection refused
                    outcome = "server_died"
                    error = (f"{self._who()}: server exited with code {self.proc.returncode} during {during} "
                             f"({type(leaf).__name__}: {leaf}){self._stderr_suffix()}")
                else:
                    outcome, error = "error", f"{self._who()}: {type(leaf).__name__} during {during}: {leaf}"
                self._error_turn(self._in_flight or "session", error, outcome)
        finally:
            exit_code = None
            if self.proc is not None:
                exit_code = await self.proc.stop(self.spec.timeouts.stop_grace_s)
            if self.workdir and not self.keep_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if cancelled:
                if self.turns:  # the calls that were answered; none for the call in flight
                    reason = (self.stop_reason() if self.stop_reason else None) or "the run"
                    self.partial = self._result("interrupted", f"interrupted by {reason}", started, exit_code, t0)
                shutil.rmtree(self.logdir, ignore_errors=True)
        if error is None and self.closed_error:
            error = self.closed_error
        try:
            return self._result(outcome, error, started, exit_code, t0)
        finally:
            shutil.rmtree(self.logdir, ignore_errors=True)

    def _result(self, outcome: str, error: str | None, started: dt.datetime, exit_code: int | None,
                t0: float) -> SessionResult:
        """The session's trajectory and raw rows, as it ended (`outcome`)."""
        t = time.perf_counter()
        traj = self._trajectory(outcome, error, started, exit_code, t - t0)
        raw = self._raw_rows(traj.trajectory_id)
        self.timings["build_s"] = round(time.perf_counter() - t, 6)
        return SessionResult(traj, raw, outcome, error, self.proc.pid if self.proc else None,
                             time.perf_counter() - t0, [u.perturbation for u in self.turns], self.timings)

    async def _run(self) -> str:
        spec = self.spec
        self.workdir = tempfile.mkdtemp(prefix=f"worldline-mcp-{spec.name}-")
        port = free_port() if "{port}" in " ".join([spec.url or "", *spec.args, *spec.env.values()]) else None
        values = spec.values(self.workdir, port)
        env = spec.server_env(values)
        if isinstance(self.policy, _LazyScripted):
            self.policy.values = values
        if self.session.replay_workdir:
            self.replay_map = {self.session.replay_workdir: self.workdir}
        try:
            await run_setup(spec, values, env)
        except SpecError as e:
            raise _Failure("setup_failed", str(e), "setup") from None
        async with AsyncExitStack() as stack:
            t = time.perf_counter()
            read, write = await self._connect(stack, values, env)
            self.proxy = FaultProxy(self.faults, self.faults.rng_for(self.key), self.log,
                                    self.proc.kill if self.proc else None)
            read, write = self.proxy.wrap(read, write)
            session = await stack.enter_async_context(
                ClientSession(read, write, client_info=CLIENT_INFO,
                              message_handler=self._on_message))
            await self._initialize(session)
            self.timings["start_and_initialize_s"] = round(time.perf_counter() - t, 4)
            await self._list(session)
            t, c = time.perf_counter(), time.process_time()
            server_cpu = self.proc.cpu_seconds() if self.proc else None
            try:
                return await self._act(session)
            finally:
                self.timings["act_s"] = round(time.perf_counter() - t, 6)
                self.timings["act_cpu_s"] = round(time.process_time() - c, 6)  # this process: client + recording
                after = self.proc.cpu_seconds() if self.proc else None
                if server_cpu is not None and after is not None:
                    self.timings["act_server_cpu_s"] = round(after - server_cpu, 4)
        raise AssertionError("unreachable")  # pragma: no cover - AsyncExitStack never swallows here

    async def _connect(self, stack: AsyncExitStack, values: dict[str, str], env: dict[str, str]) -> tuple[Any, Any]:
        spec = self.spec
        cwd = expand(spec.cwd, values) if spec.cwd else self.workdir
        log_path = Path(self.logdir) / "server.log"  # outside the workdir: the server must not see it
        if spec.command:
            argv = [expand(spec.command, values)] + [expand(a, values) for a in spec.args]
            self.proc = ServerProcess(argv, env, cwd, log_path, f"{spec.path.name} ({spec.name})",
                                      pipes=spec.transport == "stdio", install_hint=spec.install_hint)
            try:
                await self.proc.start()
            except StartError as e:
                raise _Failure("start_failed", str(e)) from None
        if spec.transport == "stdio":
            assert self.proc is not None
            return await stack.enter_async_context(stdio_streams(self.proc, self.log, spec.strict_jsonrpc))
        url = self.url = expand(spec.url, values)
        u = urlparse(url)
        if self.proc is not None:
            proc = self.proc
            try:
                await wait_for_port(u.hostname or "127.0.0.1", u.port or 80, spec.timeouts.start_s,
                                    lambda: proc.returncode is None)
            except StartError as e:
                raise _Failure("start_failed", f"{spec.path.name} ({spec.name}): {e}{self._stderr_suffix()}") from None
        return await stack.enter_async_context(http_streams(url, self.log))

    async def _unreachable(self, e: BaseException) -> _Failure | None:
        """Over HTTP, no connection to the URL before `initialize` answered, from a server that is
        not (or no longer known to be) running here: the session could not start (`start_failed`).
        A server process of ours that exited meanwhile is `server_died` instead (the caller's path)."""
        from httpx2 import ConnectError, ConnectTimeout  # the SDK's HTTP client

        if self.spec.transport != "http" or self.init_raw or self.url is None:
            return None
        if not isinstance(e, ConnectError | ConnectTimeout):
            return None
        if self.proc is not None and (self.proc.returncode is not None or await self.proc.wait(0.5)):
            return None
        return _Failure("start_failed", f"{self._who()}: cannot connect to {self.url}: {type(e).__name__}: {e}")

    def _cut_off_suffix(self) -> str:
        cut = self.proc.cut_off if self.proc else None
        return f" (its last line on stdout was cut off: {cut})" if cut is not None else ""

    def _stderr_suffix(self) -> str:
        tail = self.proc.stderr_tail(600).strip() if self.proc else ""
        return f"; server stderr: {tail}" if tail else ""

    async def _initialize(self, session: ClientSession) -> None:
        """The health check: `initialize` must answer within `timeouts.initialize_s`."""
        limit = self.spec.timeouts.initialize_s
        mark = self.log.mark()
        try:
            with anyio.fail_after(limit):
                await session.initialize()
        except TimeoutError:
            raise _Failure("initialize_timeout", f"{self._who()}: no answer to initialize within {limit:g}s "
                           f"(server pid {self.proc.pid if self.proc else '-'} still running: "
                           f"{self.proc is not None and self.proc.returncode is None}){self._stderr_suffix()}") from None
        except MCPError as e:
            raise await self._connection_failure(e, "initialize") from None
        except Exception as e:  # noqa: BLE001 - e.g. an unsupported protocol version
            raise _Failure("initialize_failed", f"{self._who()}: initialize failed: {type(e).__name__}: {e}") from None
        self.init_raw = self._response_result(mark, "initialize") or {}

    def _who(self) -> str:
        return f"{self.spec.path.name} ({self.spec.name})"

    async def _connection_failure(self, e: MCPError, action: str) -> _Failure:
        if self.proc is not None and self.proc.violation:
            return _Failure("invalid_jsonrpc", f"{self._who()}: server sent invalid JSON-RPC during {action}: "
                            f"{self.proc.violation}", action)
        if self.proc is not None and self.proc.returncode is None:
            await self.proc.wait(1.0)  # EOF on stdout can come a moment before the exit status
        if self.proc is not None and self.proc.returncode is not None:
            return _Failure("server_died", f"{self._who()}: server exited with code {self.proc.returncode} during "
                            f"{action}{self._cut_off_suffix()}{self._stderr_suffix()}", action)
        return _Failure("initialize_failed" if action == "initialize" else "connection_closed",
                        f"{self._who()}: {action} failed: JSON-RPC error {e.code}: {e.message}", action)

    async def _list(self, session: ClientSession) -> None:
        """tools/list (all pages) is the action space; resources and prompts when offered."""
        caps = self.init_raw.get("capabilities") or {}
        try:
            with anyio.fail_after(self.call_timeout_s):
                # a resource- or prompt-only server has no tools to list (asking failed it as connection_closed)
                self.tools = await self._paged(session, "tools", session.list_tools) if "tools" in caps else []
                if "resources" in caps:
                    self.resources = await self._paged(session, "resources", session.list_resources)
                if "prompts" in caps:
                    self.prompts = await self._paged(session, "prompts", session.list_prompts)
        except TimeoutError:
            raise _Failure("listing_timeout", f"{self._who()}: the tool/resource/prompt listings did not answer "
                           f"within {self.call_timeout_s:g}s", "tools/list") from None
        except MCPError as e:
            raise await self._connection_failure(e, "tools/list") from None
        if self.proxy:
            self.proxy.output_schemas = {str(t.get("name")): t.get("outputSchema") for t in self.tools or []}

    async def _paged(self, session: ClientSession, key: str, fn: Any) -> list[dict]:
        items: list[dict] = []
        cursor = None
        for _ in range(1000):
            mark = self.log.mark()
            await fn(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
            result = self._response_result(mark, f"{key}/list") or {}
            items.extend(result.get(key) or [])
            cursor = result.get("nextCursor")
            if not cursor:
                break
        return items

    def _response_result(self, mark: int, method: str) -> dict | None:
        """The raw `result` of the first `method` request sent since `mark`, as the server sent it."""
        rid = None
        for e in self.log.entries[mark:]:
            if rid is None and e.dir == "c2s" and isinstance(e.msg, JSONRPCRequest) and e.msg.method == method:
                rid = e.msg.id
            elif rid is not None and e.dir == "s2c" and isinstance(e.msg, JSONRPCResponse) and e.msg.id == rid:
                return e.msg.result
        return None

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.notes.append(f"transport: {type(message).__name__}: {message}"[:500])

    # -- acting ---------------------------------------------------------------------------------
    async def _act(self, session: ClientSession) -> str:
        policy = self.policy
        inline = isinstance(policy, ScriptedPolicy)  # no blocking I/O: skip the thread hop
        if inline:
            policy.reset(self.session.task, self.tools or [])
        else:
            await anyio.to_thread.run_sync(policy.reset, self.session.task, self.tools or [])
        history: list[Step] = []
        steps = self.session.steps or []
        while True:
            if len(history) >= self.session.max_turns and not isinstance(policy, ScriptedPolicy):
                return "max_turns"
            try:
                action = policy.next_action(history) if inline else \
                    await anyio.to_thread.run_sync(policy.next_action, history)
            except Exception as e:  # noqa: BLE001 - the endpoint failed; keep what we have
                self.notes.append(f"policy: {type(e).__name__}: {e}"[:1000])
                raise _Failure("policy_error", f"policy {policy.name}: {type(e).__name__}: {e}", "policy") from None
            if action is None:
                return "completed"
            if self.replay_map:
                action = self._repoint(action)
            i = len(history)
            forced = steps[i].fault if self.session.policy == "scripted" and i < len(steps) else None
            turn, closed = await self._execute(session, action, forced)
            self.turns.append(turn)
            history.append(Step(action=action, observation=turn.observation or "", is_error=bool(turn.is_error)))
            if closed:
                return closed

    def _repoint(self, action: Action) -> Action:
        """A replayed action's paths: the recorded session's workdir becomes this session's."""
        args = action.tool_args
        for old, new in self.replay_map.items():
            args = _replace_str(args, old, new)
        name = action.tool_name or ""
        text = f"{name}({dumps(args)})" if args is not None else action.text
        return Action(text=text, tool_name=action.tool_name, tool_args=args, thought=action.thought,
                      tool_call_id=action.tool_call_id)

    async def _execute(self, session: ClientSession, action: Action, forced: str | None) -> tuple[Turn, str | None]:
        """Send one request; returns the turn and, if the connection ended, the outcome."""
        name = action.tool_name or ""
        args = action.tool_args or {}
        method = request_method(name)
        assert self.proxy is not None
        self.proxy.force(forced if method == "tools/call" else None)
        mark = self.log.mark()
        started = _now()
        self._in_flight = f"{name}({dumps(args)})"
        t0 = time.perf_counter()
        exc: MCPError | None = None
        client_error: str | None = None
        try:
            if method == "resources/read":
                await session.send_request(
                    types.ReadResourceRequest(params=types.ReadResourceRequestParams(uri=str(args.get("uri")))),
                    types.ReadResourceResult, request_read_timeout_seconds=self.call_timeout_s)
            elif method == "prompts/get":
                await session.send_request(
                    types.GetPromptRequest(params=types.GetPromptRequestParams(
                        name=str(args.get("name")), arguments=args.get("arguments") or None)),
                    types.GetPromptResult, request_read_timeout_seconds=self.call_timeout_s)
            else:
                await session.call_tool(name, args, read_timeout_seconds=self.call_timeout_s)
        except MCPError as e:
            exc = e
        except (RuntimeError, ValidationError, ValueError) as e:
            client_error = f"{type(e).__name__}: {e}"[:2000]  # the SDK rejected a result it received
        latency = time.perf_counter() - t0
        self._in_flight = None
        self.proxy.force(None)
        end = self.log.mark()
        self.turn_ranges.append((mark, end))
        entries = self.log.entries[mark:end]

        rid, req_t, wire, delivered, resp_t = None, None, None, None, None
        for e in entries:
            if rid is None and e.dir == "c2s" and isinstance(e.msg, JSONRPCRequest) and e.msg.method == method:
                rid, req_t = e.msg.id, e.t
            elif rid is not None and isinstance(e.msg, JSONRPCResponse | JSONRPCError) and e.msg.id == rid:
                if e.dir == "s2c" and wire is None:
                    wire, resp_t = e.msg, e.t
                elif e.dir == "p2c":
                    delivered = e.msg
        inj: Injection | None = self.proxy.injections.get(rid) if rid is not None else None
        if inj is not None and inj.applied and inj.delivered is None:
            delivered = None  # withheld (timeout) or dropped (crash): the client saw only its own error
        elif delivered is None:
            delivered = wire

        meta: dict[str, Any] = {"method": method, "jsonrpc_id": rid, "latency_s": round(latency, 6),
                                "raw_table": "mcp_raw", "raw_messages": len(entries)}
        if req_t is not None and resp_t is not None:
            meta["server_latency_s"] = round(resp_t - req_t, 6)
        closed: str | None = None
        obs: Observation
        if isinstance(delivered, JSONRPCResponse):
            obs = result_observation(delivered.result)
        elif isinstance(delivered, JSONRPCError):
            err = delivered.error
            origin = "proxy" if inj is not None and inj.applied and delivered is not wire else "server"
            obs = error_observation(err.code, err.message, err.data, origin)
        elif exc is not None:
            obs = error_observation(exc.code, exc.message, exc.data, "client")
            if exc.code == CONNECTION_CLOSED:
                closed = await self._closed_outcome(inj)
                self.closed_error = self._closed_message(closed, f"{method} {name}".strip())
                if closed == "invalid_jsonrpc":
                    bad = next((e for e in reversed(entries) if e.dir == "s2c" and e.msg is None and e.raw), None)
                    if bad is not None:  # what the server actually wrote is the observation
                        obs = replace(obs, text=bad.raw[:OBSERVATION_LIMIT])
                    meta["protocol_violation"] = self.proc.violation if self.proc else None
                if closed == "server_died" and self.proc is not None:
                    meta["server_exit_code"] = self.proc.returncode
                    meta["server_stderr_tail"] = self.proc.stderr_tail(1000)
            elif exc.code == REQUEST_TIMEOUT:
                meta["timeout_s"] = self.call_timeout_s
        else:
            obs = Observation(canonical_error(0, client_error or "no response recorded"), "error", True)
        meta.update(obs.meta)
        observation, kind, is_error = obs.text, obs.kind, obs.is_error
        if client_error:
            meta["client_error"] = client_error
        perturbation = None
        if inj is not None:
            if inj.applied:
                perturbation = inj.kind
                meta["fault"] = {"kind": inj.kind, "forced": inj.forced, **inj.detail}
                meta["unperturbed_observation"], meta["unperturbed_is_error"] = _observation_of(inj.unperturbed)
            else:
                meta["fault_skipped"] = {"kind": inj.kind, **inj.detail}
        turn = Turn(  # one canonical action text whatever the policy's own formatting
            kind="env", action=action_text(name, args), tool_name=name, tool_args=value_json(args),
            tool_call_id=action.tool_call_id or (str(rid) if rid is not None else None), thought=action.thought,
            observation=observation, observation_kind=kind, is_error=is_error, started_at=started,
            duration_s=round(latency, 6), perturbation=perturbation, locator=f"jsonrpc:{rid}",
            metadata=dumps(meta),
        )
        return turn, closed

    async def _closed_outcome(self, inj: Injection | None) -> str:
        if inj is not None and inj.kind == "server_crash" and inj.applied:
            return "server_crash"
        if self.proc is not None and self.proc.violation:
            return "invalid_jsonrpc"
        if self.proc is not None:
            await self.proc.wait(1.0)  # EOF on stdout can come a moment before the exit status
            if self.proc.returncode is not None:
                return "server_died"
        return "connection_closed"

    def _closed_message(self, outcome: str, during: str) -> str:
        if outcome == "server_crash":
            return f"{self._who()}: server killed by the injected server_crash fault during {during}"
        if outcome == "invalid_jsonrpc" and self.proc is not None:
            return f"{self._who()}: server sent invalid JSON-RPC during {during}: {self.proc.violation}"
        if outcome == "server_died" and self.proc is not None:
            return (f"{self._who()}: server exited with code {self.proc.returncode} during {during}"
                    f"{self._cut_off_suffix()}{self._stderr_suffix()}")
        return f"{self._who()}: the connection closed during {during}"

    def _error_turn(self, action: str, message: str, outcome: str) -> None:
        """What went wrong, as the last turn of what was recorded (kind `error`)."""
        mark = self.turn_ranges[-1][1] if self.turn_ranges else 0
        end = self.log.mark()
        meta: dict[str, Any] = {"harness_error": outcome, "raw_table": "mcp_raw", "raw_messages": end - mark}
        if self.proc is not None:
            meta["server_pid"] = self.proc.pid
            meta["server_exit_code"] = self.proc.returncode
            meta["server_stderr_tail"] = self.proc.stderr_tail(1000)
        bad = next((e for e in reversed(self.log.entries[mark:end]) if e.dir == "s2c" and e.msg is None and e.raw), None)
        observation = bad.raw[:OBSERVATION_LIMIT] if outcome == "invalid_jsonrpc" and bad is not None else \
            dumps({"error": {"message": message, "stage": action}})
        self.turn_ranges.append((mark, end))
        kind = "message" if outcome == "policy_error" else "env"  # an endpoint failure is not environment output
        self.turns.append(Turn(kind=kind, action=action, observation=observation, observation_kind="error",
                               is_error=True, started_at=_now(), locator=f"stage:{action}", metadata=dumps(meta)))

    # -- the records ----------------------------------------------------------------------------
    def _trajectory(self, outcome: str, error: str | None, started: dt.datetime, exit_code: int | None,
                    seconds: float) -> Trajectory:
        spec, s = self.spec, self.session
        fp: dict[str, Any] = {
            **server_fingerprint(self.init_raw, self.tools), "transport": spec.transport, "spec": spec.name,
            "spec_sha256": spec.sha256, "package": spec.package_version(),
        }
        initial = initial_state(self.init_raw, self.resources, self.prompts)
        meta: dict[str, Any] = {
            "server": spec.name, "spec": str(spec.path), "session": s.name, "repetition": self.repetition,
            "transport": spec.transport, "run_id": self.run_id, "workdir": self.workdir,
            "server_pid": self.proc.pid if self.proc else None, "server_exit_code": exit_code,
            "faults": self.faults.as_dict(), "timings": {**self.timings, "session_s": round(seconds, 4)},
            "call_timeout_s": self.call_timeout_s, "error": error,
        }
        if s.replay_of:
            meta["replay_of"] = s.replay_of
        if self.notes:
            meta["notes"] = self.notes[:20]
        if outcome not in ("completed", "max_turns", "server_crash") and self.proc is not None:
            meta["server_stderr_tail"] = self.proc.stderr_tail(2000)
        return Trajectory(
            domain="mcp", source_format=SOURCE_FORMAT,
            native_id=f"{self.key}@{self.run_id}",
            record_digest=digest(self.run_id, self.key, spec.sha256),
            turns=self.turns, task=s.task or spec.description or None,
            action_space=action_space(self.tools),
            initial_state=dumps(initial) if self.init_raw else None,
            agent=self.policy.name, model=getattr(self.policy, "model", None),
            outcome=outcome, env_fingerprint=dumps(fp), collected_at=started, license=spec.license,
            metadata=dumps(meta), locator=f"session:{s.name}#{self.repetition}", source=str(spec.path),
        )

    def _raw_rows(self, tid: str) -> list[RawRow]:
        rows: list[RawRow] = []
        covered = [False] * len(self.log.entries)
        for i, (a, b) in enumerate(self.turn_ranges):
            rows.append(RawRow(tid, i, self.log.entries[a:b]))
            for j in range(a, b):
                covered[j] = True
        rest = [e for e, c in zip(self.log.entries, covered, strict=True) if not c]
        if rest:
            rows.append(RawRow(tid, None, rest))
        return rows


def leaves(e: BaseException) -> list[BaseException]:
    """The plain exceptions inside (nested) exception groups, depth first; `[e]` for a plain one."""
    if isinstance(e, BaseExceptionGroup):
        return [x for sub in e.exceptions for x in leaves(sub)]
    return [e]


def _leaf(e: BaseException) -> BaseException:
    """The first `_Failure` inside (nested) exception groups, else the first plain exception."""
    found = leaves(e)
    return next((x for x in found if isinstance(x, _Failure)), found[0])


def _observation_of(sm: Any) -> tuple[str | None, bool | None]:
    msg = getattr(sm, "message", None)
    if isinstance(msg, JSONRPCResponse):
        obs = result_observation(msg.result)
    elif isinstance(msg, JSONRPCError):
        obs = error_observation(msg.error.code, msg.error.message, msg.error.data, "server")
    else:
        return None, None
    return obs.text, obs.is_error


def _replace_str(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_str(v, old, new) for v in value]
    if isinstance(value, dict):
        return {k: _replace_str(v, old, new) for k, v in value.items()}
    return value


def record_session(spec: ServerSpec, session: SessionSpec, *, faults: FaultConfig | None = None,
                   policy: Policy | None = None, run_id: str = "adhoc", repetition: int = 0,
                   call_timeout_s: float | None = None, **openai: Any) -> SessionResult:
    """Record one session synchronously (tests, notebooks); `collect` runs many into a corpus."""
    pol = policy or make_policy(session, **openai)
    rec = SessionRecorder(spec, session, pol, faults=faults or FaultConfig(), run_id=run_id,
                          repetition=repetition, call_timeout_s=call_timeout_s)
    return anyio.run(rec.run)


def make_policy(session: SessionSpec, values: dict[str, str] | None = None, **openai: Any) -> Policy:
    """The policy a session asks for. Scripted steps get their placeholders expanded per session
    (`{workdir}` is only known once the session starts), so scripted policies are built lazily."""
    if session.policy == "replay":
        return ReplayPolicy(session.replay_actions or [], source=session.replay_of or "")
    if session.policy == "openai":
        from collectors.policies import OpenAIChatPolicy

        return OpenAIChatPolicy(max_turns=session.max_turns, **openai)
    return _LazyScripted(session)


class _LazyScripted(ScriptedPolicy):
    """A scripted policy whose steps expand `{workdir}` etc. at `reset` (when the session exists)."""

    def __init__(self, session: SessionSpec):
        super().__init__([])
        self.session = session
        self.values: dict[str, str] = {}

    def reset(self, task: str, action_space: list[dict]) -> None:
        self.actions = [st.action(self.values) for st in self.session.steps or []]
