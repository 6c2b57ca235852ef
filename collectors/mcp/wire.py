"""The wire: server processes, the stdio and streamable-HTTP transports, and the log of raw JSON-RPC.

Why our own stdio transport instead of `mcp.client.stdio.stdio_client`: the collector needs the
server's PID (to prove no process outlives its session, and to crash it on purpose), must reset
signal dispositions before exec (shells here start processes with SIGTERM ignored, and ignored
signals survive exec), must keep each line exactly as the server wrote it (including lines that are
not JSON-RPC), and must treat invalid JSON-RPC as a session failure instead of a hang until the
request timeout. It parses with the SDK's own `jsonrpc_message_adapter` and feeds the SDK's
`ClientSession`, so everything above the byte stream is the official client.

Over HTTP the SDK's `streamable_http_client` is used as is; its messages are logged as the SDK
models serialize them (HTTP headers and SSE framing are not kept).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCMessage, jsonrpc_message_adapter
from pydantic import ValidationError

MAX_LINE_BYTES = 64 << 20  # one JSON-RPC message on stdio; larger is a protocol violation here
_RESET_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE,
                  signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)


@dataclass(slots=True)
class WireMessage:
    """One JSON-RPC message as it crossed a boundary.

    `dir`: `c2s` client→server, `s2c` server→client as the server sent it, `p2c` what the fault
    proxy delivered to the client instead (only where it changed something)."""

    dir: str
    t: float  # seconds since the session started
    raw: str
    msg: JSONRPCMessage | None
    note: str | None = None


class WireLog:
    """Every message of one session, in order; turns point into it by index range."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.entries: list[WireMessage] = []

    def add(self, direction: str, raw: str, msg: JSONRPCMessage | None, note: str | None = None) -> WireMessage:
        e = WireMessage(direction, time.perf_counter() - self.t0, raw, msg, note)
        self.entries.append(e)
        return e

    def mark(self) -> int:
        return len(self.entries)


class StartError(RuntimeError):
    """The server could not be started; the message says why and what to do."""


def _reset_signals() -> None:  # runs in the child between fork and exec
    for s in _RESET_SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])


class ServerProcess:
    """A server process in its own process group, with signals reset and stderr in a file.

    `stop()` closes stdin (the MCP shutdown sequence), waits `grace_s`, then SIGTERMs and finally
    SIGKILLs the whole group, and returns only once the process is reaped."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None, log_path: Path,
                 label: str, pipes: bool = True, install_hint: str | None = None):
        self.argv, self.env, self.cwd, self.log_path = argv, env, cwd, log_path
        self.label, self.pipes, self.install_hint = label, pipes, install_hint
        self.proc: asyncio.subprocess.Process | None = None
        self.killed_on_purpose = False
        self.violation: str | None = None  # set by the stdio reader on invalid JSON-RPC
        self.cut_off: str | None = None  # the last stdout line, when the server's exit cut it off

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode if self.proc else None

    async def start(self) -> None:
        hint = f" ({self.install_hint})" if self.install_hint else ""
        log = open(self.log_path, "wb")  # noqa: SIM115 - handed to the child, closed below
        try:
            # shielded: a run interrupted here still learns the pid of the process it started, to stop it
            with anyio.CancelScope(shield=True):
                self.proc = await asyncio.create_subprocess_exec(
                    *self.argv,
                    stdin=asyncio.subprocess.PIPE if self.pipes else asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE if self.pipes else log,
                    stderr=log, cwd=self.cwd, env=self.env, start_new_session=True,
                    preexec_fn=_reset_signals, limit=MAX_LINE_BYTES,
                )
        except FileNotFoundError as e:
            missing = self.cwd if self.cwd and not os.path.isdir(self.cwd) else self.argv[0]
            raise StartError(f"{self.label}: cannot start server: {missing!r} not found{hint}") from e
        except PermissionError as e:
            raise StartError(f"{self.label}: cannot start server: {self.argv[0]!r} is not executable{hint}") from e
        finally:
            log.close()

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the server process has used so far (Linux /proc), for telemetry."""
        if self.proc is None:
            return None
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log_path) - limit))
                return f.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the whole group now (the `server_crash` fault)."""
        if self.proc and self.proc.returncode is None:
            self.killed_on_purpose = True
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    async def wait(self, timeout: float) -> bool:
        """Whether the process exited within `timeout` seconds (polls; never waits on pipes)."""
        assert self.proc
        deadline = time.monotonic() + timeout
        while self.proc.returncode is None:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.01)
        return True

    async def stop(self, grace_s: float = 1.0) -> int | None:
        """Stop the server and everything in its process group; returns the exit code."""
        if self.proc is None:
            return None
        with anyio.CancelScope(shield=True):
            if self.proc.stdin and not self.proc.stdin.is_closing():
                with suppress(OSError):
                    self.proc.stdin.close()
            if not await self.wait(grace_s):
                for sig, wait_s in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
                    with suppress(ProcessLookupError, PermissionError):
                        os.killpg(self.proc.pid, sig)
                    if await self.wait(wait_s):
                        break
            # children the server left behind in its group go too
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with suppress(Exception):
                await asyncio.wait_for(self.proc.wait(), 5.0)
        return self.proc.returncode


class _StreamWrapper:
    """Base for read-stream wrappers: the async-iterator and context-manager plumbing."""

    def __init__(self, inner: Any):
        self.inner = inner

    @property
    def last_context(self) -> Any:  # the SDK reads this duck-typed attribute off HTTP streams
        return getattr(self.inner, "last_context", None)

    def __aiter__(self) -> _StreamWrapper:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def receive(self) -> Any:
        return await self.inner.receive()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _StreamWrapper:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class _TapRead(_StreamWrapper):
    def __init__(self, inner: Any, log: WireLog):
        super().__init__(inner)
        self.log = log

    async def receive(self) -> SessionMessage | Exception:
        item = await self.inner.receive()
        if isinstance(item, SessionMessage):
            self.log.add("s2c", item.message.model_dump_json(by_alias=True, exclude_unset=True), item.message)
        else:
            self.log.add("s2c", "", None, note=f"transport error: {type(item).__name__}: {item}"[:500])
        return item


class _TapWrite:
    def __init__(self, inner: Any, log: WireLog):
        self.inner, self.log = inner, log

    async def send(self, item: SessionMessage) -> None:
        self.log.add("c2s", item.message.model_dump_json(by_alias=True, exclude_unset=True), item.message)
        await self.inner.send(item)

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> _TapWrite:
        return self

    async def __aexit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


def _excerpt(text: str, n: int = 200) -> str:
    return text if len(text) <= n else text[:n] + f"… ({len(text)} chars)"


EXIT_DRAIN_S = 0.3  # after the server exits, the time its last output has to arrive before the stream closes


@asynccontextmanager
async def stdio_streams(proc: ServerProcess, log: WireLog, strict: bool = True) -> AsyncIterator[tuple[Any, Any]]:
    """Newline-delimited JSON-RPC over the server's stdin/stdout, every line logged verbatim.

    With `strict`, a line that is not JSON-RPC ends the session: the read stream closes, pending
    requests fail with CONNECTION_CLOSED at once, and `proc.violation` says what was received.
    A last line without its newline that is not JSON-RPC, written by a server that then exits, is a
    symptom of that death, not a protocol violation: it is logged, and `proc.cut_off` keeps it."""
    assert proc.proc and proc.proc.stdout and proc.proc.stdin
    stdout, stdin = proc.proc.stdout, proc.proc.stdin
    read_w, read_r = anyio.create_memory_object_stream[SessionMessage | Exception](32)
    write_w, write_r = anyio.create_memory_object_stream[SessionMessage](32)

    async def reader() -> None:
        async with read_w:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:  # longer than MAX_LINE_BYTES
                    proc.violation = f"a message longer than {MAX_LINE_BYTES} bytes on stdout"
                    log.add("s2c", "", None, note=proc.violation)
                    return
                except (ConnectionError, OSError):
                    return
                if not line:
                    return  # EOF: the server exited or closed stdout
                cut = not line.endswith(b"\n")  # EOF in the middle of a line
                try:
                    text = line.decode("utf-8").rstrip("\r\n")
                except UnicodeDecodeError:
                    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
                    msg, err = None, "not UTF-8"
                else:
                    if not text.strip():
                        continue
                    try:
                        msg, err = jsonrpc_message_adapter.validate_json(text, by_name=False), None
                    except ValidationError as e:
                        msg, err = None, str(e).splitlines()[0]
                if msg is None and cut and await proc.wait(1.0):  # EOF can come a moment before the exit status
                    proc.cut_off = _excerpt(text)
                    log.add("s2c", text, None, note="cut off: no newline before the end of stdout")
                    return
                if msg is None:
                    note = f"invalid JSON-RPC ({err}): {_excerpt(text)}"
                    log.add("s2c", text, None, note=note)
                    if strict:
                        proc.violation = note
                        return
                    continue
                log.add("s2c", text, msg)
                try:
                    await read_w.send(SessionMessage(msg))
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def writer() -> None:
        try:
            async with write_r:
                async for sm in write_r:
                    text = sm.message.model_dump_json(by_alias=True, exclude_unset=True)
                    log.add("c2s", text, sm.message)
                    stdin.write(text.encode() + b"\n")
                    await stdin.drain()
        except (OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            read_w.close()  # the server is gone: pending requests fail now, not at their timeout

    async def exit_watch() -> None:
        # a server that exits while a child of its keeps stdout open never sends EOF: its pending
        # requests would wait out their timeouts, and the session pass for completed
        assert proc.proc
        while proc.proc.returncode is None:
            await anyio.sleep(0.05)
        await anyio.sleep(EXIT_DRAIN_S)  # what it wrote before exiting is read first
        read_w.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(reader)
        tg.start_soon(writer)
        tg.start_soon(exit_watch)
        try:
            yield read_r, write_w
        finally:
            write_w.close()
            read_r.close()
            tg.cancel_scope.cancel()


@asynccontextmanager
async def http_streams(url: str, log: WireLog) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's streamable-HTTP client, with every message logged."""
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (r, w):
        yield _TapRead(r, log), _TapWrite(w, log)


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (for `{port}` in specs)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_for_port(host: str, port: int, timeout_s: float, alive: Callable[[], bool]) -> None:
    """Wait until the server accepts TCP connections; fail early if its process exits."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(host, port), 1.0)
            w.close()
            with suppress(Exception):
                await w.wait_closed()
            return
        except (OSError, TimeoutError):
            pass
        if not alive():
            raise StartError(f"server exited before listening on {host}:{port}")
        if time.monotonic() >= deadline:
            raise StartError(f"server did not listen on {host}:{port} within {timeout_s:g}s")
        await asyncio.sleep(0.05)
