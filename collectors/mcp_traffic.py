"""MCP traffic logs: Model Context Protocol JSON-RPC 2.0 between a client and a server, as existing
capture tools write them, imported as `mcp` trajectories shaped like the live recorder's.

Shapes read (each by the structure its tool documents or was seen to write):

- JSON lines of bare JSON-RPC messages, one message (or one batch array, MCP 2025-03-26) per line:
  what a tee of a stdio server's stdin/stdout gives.
- JSON lines of wrapped messages: an object holding the message under `message`/`msg`/`payload`/
  `data`/`body`/`json`, or as JSON text under `raw`/`line`, next to a timestamp (`timestamp`/`ts`/
  `time`/`t`: ISO 8601, epoch seconds or milliseconds, or a relative clock), a direction
  (`direction`/`dir`/`from`: `client_to_server`, `c2s`, `server -> client`, ...) and a connection
  name (`server`/`server_name`/`session_id`/...). Real writers: MCPSpy `-o out.jsonl` (flattened
  fields, the exact message as `raw`, `transport_type`, `stdio_transport.{from_pid,to_pid}`),
  interaction loggers of proxies (`{seq, ts, server, transport, direction, message}`), this
  project's own `mcp_raw` lines (`{dir, t, raw}`; a fault proxy's `p2c` copy of a response comes
  after the server's `s2c` original, so it is noted as an orphan response).
- MCP Inspector history entries `{id, timestamp, direction: request|response|notification,
  message, response?, duration?}` (the request's response and its latency in ms on the same
  entry), as the History screen's JSON export (one JSON array) or as JSON lines.
- Claude Desktop logs (`mcp.log`, `mcp-server-NAME.log`): `TIMESTAMP [NAME] [level] TEXT` (or
  `[level] [NAME]`), where TEXT is `Message from client: {...}` / `Message from server: {...}`
  (newer versions append ` { metadata: undefined }`), a lifecycle line (`Initializing server...`,
  `Server transport closed`), and lines without the prefix are the server's stderr (or the rest of
  a multi-line entry: a message's JSON is read on over them until it parses). `mcp.log` writes
  `[level] [NAME]` and interleaves servers: each server name is its own connection.
- VS Code's MCP output channel (trace level): `YYYY-MM-DD HH:MM:SS.mmm [level] [editor -> server] {...}`
  / `[server -> editor] {...}`. Its times carry no zone and are taken as UTC (as `parse_time` does).

Mapping (the recorder's shape, through its own functions in `collectors.mcp.shape`):

- One trajectory per session: per connection, an `initialize` request starts a new session; a
  connection without one is one session. Trajectory locator: the session's first message.
- One turn per `tools/call`, `resources/read` and `prompts/get` request, in request order, paired
  with its response by JSON-RPC id, and by direction where the log has it (a client's id 3 and a
  server's id 3 are different requests). Action, tool name/args, observation (canonical JSON of
  the result; a JSON-RPC error as `{"error": ...}` of kind `error` with `metadata.protocol_error`,
  origin `server`), `is_error` and the fingerprint are computed exactly as the recorder computes
  them. `started_at` is the request's time, `duration_s` response time minus request time.
  Locator `line:12+line:14` (request + response), `line:12` for a request left without one.
- A request left without a response is still a turn: no observation (kind `none`, `is_error`
  null) and `metadata.unanswered`: `log_ended`, `session_ended` (a new `initialize` came first),
  `cancelled` (a `notifications/cancelled` named it, even when its id came again later) or
  `duplicate_id` (the client reused its id while it was in flight).
- `tools/list` (all pages, the first complete listing) is the action space; later listings that
  differ set `metadata.tools_changed`. `resources/list` / `prompts/list` go into `initial_state`
  next to the `initialize` result; `clientInfo.name` is `agent`, the model named by a
  `sampling/createMessage` result is `model`. Other requests and all notifications are counted in
  trajectory metadata (`methods`, `notifications`), not turns.

Bad input never stops a file. Quarantined, one row per line naming file, line and reason (the
line cannot be used at all): a line that is not JSON / not UTF-8 (`invalid_json`,
`truncated_json`, `invalid_utf8`), longer than the record limit (`record_too_large`), JSON that
is not and holds no JSON-RPC 2.0 message (`not_jsonrpc`), a JSON-RPC object of no valid kind
(`invalid_jsonrpc`: no method and not exactly one of result/error, a null or non-scalar request
id), a logged message whose JSON never completes (the unprefixed lines read on with it belong to
that row). Kept in trajectory metadata (the message is valid traffic, only its partner is missing):
a response to an unknown or already answered id (`orphan_responses`), a reused id
(`duplicate_ids`: MCP ids are unique within a session, so a reuse is noted whether the earlier
request was in flight, cancelled or answered (`answered` names its response then); answered ids are
remembered up to `_ANSWERED_IDS` per session, and a ping in a log without directions is not checked
against them, since either side sends pings with ids of its own), an error response with id null
(`null_id_errors`). So records = sessions +
quarantined lines, and every line is either in a session, quarantined, or a log line that is not
a message (counted in `log_events` / `server_stderr_lines`; those of a connection that never sent
a message have no session to be counted in).

Memory: lines are read one at a time (bounded by the run's `ctx.limits.max_record_bytes`); what is held is
the open sessions' turns and pending requests, the ids they answered (bounded), and bounded lists of notes. A JSON-array export is
one document, read whole within the same limit.

Sources read (structure only; no code taken from them):
- MCP specification (modelcontextprotocol.io/specification/...): 2025-03-26/basic (message kinds;
  ids never null, not reused in a session), 2025-06-18 and 2025-11-25 basic/utilities/cancellation
  (`notifications/cancelled` names a request issued in the same direction),
  2025-06-18/server/utilities/pagination (`cursor` / `nextCursor`), 2025-06-18/server/resources,
  the 2025-03-26 and 2025-06-18 changelogs (batching added, then removed); the
  `sampling/createMessage` result's `model` as the SDK references give it (C#, Rust schema);
  `server/discover` replacing `initialize` in 2026-07-28 as SDK guides describe it.
- MCPSpy: github.com/alex-ilgayev/MCPSpy README.md (JSONL output); pkg/event/mcp.go,
  pkg/mcp/parser.go and pkg/output/jsonl.go as the loncarales/MCPSpy fork holds them (field names;
  Go's omitempty leaves `"error": {}` on every line).
- MCP Inspector: github.com/modelcontextprotocol/inspector core/mcp/types.ts (`MessageEntry`),
  core/mcp/state/messageLogState.ts (response and duration attached to the request entry),
  issue #1354 (History "Export JSON": an array of `MessageEntry`).
- Claude Desktop logs as public issues and guides quote them (found by exact-string search): a
  weather-server guide showing the same messages in `mcp.log` (`[info] [weather]`) and in
  `mcp-server-weather.log` (`[weather] [info] ... { metadata: undefined }`), an Ably CLI TODO list
  quoting `[ably] [info] Message from client/server` lines, a chat export quoting `mcp.log` with
  several servers interleaved; dev-toolbox.tech/tools/mcp-config-generator/examples/mcp-debugging-logs
  (where the files live).
- VS Code: a published VS Code + Copilot acceptance record quoting its MCP output trace.
- Seen, not read here: standardbeagle/mcp-debug `--record` files (integration/dynamic_wrapper.go:
  `#` comment header, then `{timestamp, direction, message_type, tool_name, server_name, message}`
  whose `message` is the Go SDK's request/result struct, not JSON-RPC: no id to pair by);
  clouvelai/explore-mcp interceptor logs (SDK method names and Python args, not JSON-RPC);
  mcp-recorder and agent-vcr cassettes (record/replay fixtures in formats of their own; their
  structure was not surveyed further).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import IO, Any

import orjson

from collectors.base import ImportContext, Importer, parse_time
from collectors.mcp import shape
from pipelines.sources import ReadLimits, iter_lines, json_problem, parse_json, read_bounded
from schemas.records import RecordError, Trajectory, Turn, dumps, value_json

_ANSWERED_IDS = 100_000  # answered ids kept per session to notice a reuse: bounds memory on endless sessions
_NOTES = 20  # entries kept per list of notes (orphan responses, duplicate ids, ...); the count is kept too
_EVENTS = 100  # log lifecycle lines kept per session
_STDERR_TAIL = 2000  # characters of server stderr kept per session

# Requests a server sends to the client; every other request goes client -> server
_SERVER_METHODS = frozenset({"sampling/createMessage", "roots/list", "elicitation/create"})
# Methods only MCP uses (not LSP or other JSON-RPC protocols): one of them in the head claims a file
_MCP_METHODS = frozenset({
    "tools/list", "tools/call", "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
    "logging/setLevel", "sampling/createMessage", "roots/list", "elicitation/create", "server/discover",
    "notifications/initialized", "notifications/cancelled", "notifications/progress", "notifications/message",
    "notifications/tools/list_changed", "notifications/resources/list_changed", "notifications/resources/updated",
    "notifications/prompts/list_changed", "notifications/roots/list_changed"})
_LISTINGS = {"tools/list": "tools", "resources/list": "resources", "prompts/list": "prompts"}

_MESSAGE_KEYS = ("message", "msg", "payload", "data", "body", "json", "raw", "line")
_TIME_KEYS = ("timestamp", "ts", "time", "t", "@timestamp", "datetime", "date")
_DIRECTION_KEYS = ("direction", "dir", "flow", "from")
_CONNECTION_KEYS = ("server", "server_name", "serverName", "session_id", "sessionId", "session", "connection",
                    "connection_id", "connectionId")
_TRANSPORT_KEYS = ("transport", "transport_type", "transportType")

_CLAUDE_LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) \[([^\]]*)\] \[([^\]]*)\] ?(.*)",
                          re.S)
_CLAUDE_MESSAGE = re.compile(r"Message from (client|server): ")
_VSCODE_LINE = re.compile(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?) \[(\w+)\] (.*)", re.S)
_VSCODE_MESSAGE = re.compile(r"\[(editor|server) -> (server|editor)\] ")
_LEVELS = frozenset({"info", "warn", "warning", "error", "debug", "trace", "verbose", "fatal", "notice"})
# Lifecycle lines a client writes before it connects: they belong to the session that follows
_STARTING = re.compile(r"(Initializing server|Server started|Starting server|Connection state: Start)", re.I)
# JSON that cannot be parsed line by line: the message fields, not inside a JSON string (no backslash before)
_ARRAY_RPC = re.compile(rb'(?<!\\)"jsonrpc"\s*:\s*"2\.0"')
_ARRAY_MCP = re.compile(rb'(?<!\\)"method"\s*:\s*"(?:tools/|resources/|prompts/|notifications/initialized")'
                        rb'|(?<!\\)"protocolVersion"\s*:')
_DECODER = json.JSONDecoder()
_SNIFF_BAD_LINES = 5  # lines that do not parse before the first that does, in a log the sniffer still claims


@dataclass(frozen=True, slots=True)
class _When:
    """A log time: absolute (UTC), or seconds on the logger's own clock when it has no epoch."""

    at: datetime | None = None
    rel: float | None = None

    def plus_ms(self, ms: float) -> _When | None:
        if self.at is None:
            return _When(rel=None if self.rel is None else self.rel + ms / 1000)
        try:
            return _When(at=self.at + timedelta(milliseconds=ms))
        except OverflowError:  # a nonsense duration: no time rather than no import
            return None


def _when(value: Any) -> _When | None:
    """A timestamp field: ISO 8601 text, epoch milliseconds (>= 1e11), epoch seconds (>= 1e9), or a
    relative clock (smaller numbers, e.g. a monotonic counter): usable for durations only."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        if value < 1e9:
            return _When(rel=float(value))
        try:
            return _When(at=datetime.fromtimestamp(value / 1000 if value >= 1e11 else value, UTC))
        except (OverflowError, OSError, ValueError):  # beyond the calendar
            return None
    at = parse_time(value)
    return _When(at=at) if at is not None else None


def _seconds(start: _When | None, end: _When | None) -> float | None:
    """Seconds from `start` to `end` when both are on the same clock (and not reversed)."""
    if start is None or end is None:
        return None
    if start.at is not None and end.at is not None:
        d = (end.at - start.at).total_seconds()
    elif start.rel is not None and end.rel is not None:
        d = end.rel - start.rel
    else:
        return None
    return round(d, 6) if d >= 0 else None


@dataclass(slots=True)
class _Wire:
    """One JSON-RPC message as the log recorded it."""

    loc: str
    msg: dict
    form: str  # jsonrpc | envelope | claude-desktop | vscode: which kind of line held it
    direction: str | None = None  # c2s, s2c, or None when the log does not say
    when: _When | None = None
    conn: str = ""  # connection (server name, pid pair); "" when the log holds one
    transport: str | None = None


@dataclass(slots=True)
class _Event:
    """A log line that is not a message: client lifecycle text, or the server's stderr."""

    loc: str
    conn: str
    text: str
    level: str | None = None
    stderr: bool = False


_Item = _Wire | _Event | RecordError


# -- recognising messages -----------------------------------------------------------------------


def _is_rpc(value: Any) -> bool:
    return isinstance(value, dict) and value.get("jsonrpc") == "2.0"


def _valid_id(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _rpc_problem(msg: dict) -> str | None:
    """Why `msg` is not a usable JSON-RPC 2.0 request, notification or response; None if it is."""
    if "method" in msg:
        if not isinstance(msg["method"], str):
            return "method is not a string"
        if "id" in msg and not _valid_id(msg["id"]):
            return "request id is null or not a string or number"
        return None
    if "id" not in msg:
        return "neither a request, a notification nor a response (no method, no id)"
    if ("result" in msg) == ("error" in msg):
        return "a response needs exactly one of result and error"
    if msg["id"] is not None and not _valid_id(msg["id"]):
        return "response id is not a string or number"
    if "error" in msg and not isinstance(msg["error"], dict):
        return "error is not an object"
    return None


def _is_mcp(msg: dict) -> bool:
    """A message only MCP sends: what lets the sniffer tell MCP traffic from other JSON-RPC."""
    method = msg.get("method")
    if isinstance(method, str):
        params = msg.get("params")
        return method in _MCP_METHODS or (method == "initialize" and isinstance(params, dict)
                                          and "protocolVersion" in params)
    result = msg.get("result")
    return isinstance(result, dict) and "protocolVersion" in result and "serverInfo" in result


def _direction(value: Any) -> str | None:
    """c2s / s2c from a direction field; None for values that name a message kind
    (`request`, `response`) or a point of view (`in`, `out`) instead of the two parties."""
    if not isinstance(value, str):
        return None
    v = re.sub(r"[\s_\-]", "", value.lower())
    if v == "c2s":
        return "c2s"
    if v in ("s2c", "p2c"):  # p2c: what a proxy delivered to the client
        return "s2c"
    client = max(v.find("client"), v.find("editor"))
    server = v.find("server")
    if client >= 0 and server >= 0:
        return "c2s" if client < server else "s2c"
    if v in ("client", "fromclient"):
        return "c2s"
    if v in ("server", "fromserver"):
        return "s2c"
    return None


def _connection(obj: dict) -> str:
    """The connection a wrapped message belongs to: a named server or session, or MCPSpy's process pair."""
    for key in _CONNECTION_KEYS:
        v = obj.get(key)
        if isinstance(v, str | int) and not isinstance(v, bool) and v != "":
            return str(v)
    stdio = obj.get("stdio_transport")
    if isinstance(stdio, dict) and stdio.get("from_pid") is not None:
        a, b = sorted([str(stdio.get("from_pid")), str(stdio.get("to_pid"))])
        return f"pid:{a}-{b}"
    http = obj.get("http_transport")
    if isinstance(http, dict):
        return f"http:{http.get('host') or http.get('pid') or ''}"
    return ""


def _first(obj: dict, keys: tuple[str, ...], read: Any) -> Any:
    for key in keys:
        if key in obj and (v := read(obj[key])) is not None:
            return v
    return None


def _text_field(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _inner(obj: dict) -> dict | list | None:
    """The JSON-RPC message (or batch) a wrapper object holds, parsed from JSON text if need be."""
    for key in _MESSAGE_KEYS:
        v = obj.get(key)
        if isinstance(v, str) and v.lstrip()[:1] in ("{", "["):
            try:
                v = parse_json(v)
            except orjson.JSONDecodeError:
                continue
        if _is_rpc(v) or (isinstance(v, list) and v and all(_is_rpc(x) for x in v)):
            return v
    return None


def _items(obj: Any, loc: str, form: str = "jsonrpc", batch: bool = True) -> list[_Wire | RecordError]:
    """The messages one parsed line (or array element) holds: a bare message, a batch, or a wrapper
    with its timestamp, direction and connection; a RecordError for what holds none."""
    if isinstance(obj, list) and batch:
        if not obj:
            return [RecordError("invalid_jsonrpc", f"{loc}: an empty JSON-RPC batch", loc)]
        out: list[_Wire | RecordError] = []
        for i, el in enumerate(obj):
            out += _items(el, f"{loc}/[{i}]", form, batch=False)
        return out
    if not isinstance(obj, dict):
        return [RecordError("not_jsonrpc", f"{loc}: {type(obj).__name__}, not a JSON-RPC 2.0 message", loc)]
    base = _Wire(loc, obj, form, _first(obj, _DIRECTION_KEYS, _direction), _first(obj, _TIME_KEYS, _when),
                 _connection(obj), _first(obj, _TRANSPORT_KEYS, _text_field))
    if _is_rpc(obj):
        return [_checked(base)]
    inner = _inner(obj)
    if inner is None:
        keys = ", ".join(list(obj)[:8])
        return [RecordError("not_jsonrpc", f"{loc}: not a JSON-RPC 2.0 message and holds none (keys: {keys})", loc)]
    base.form = _wrapper_form(obj) if form == "jsonrpc" else form
    msgs = inner if isinstance(inner, list) else [inner]
    out = [_checked(replace(base, msg=m, loc=f"{loc}/[{i}]" if isinstance(inner, list) else loc))
           for i, m in enumerate(msgs)]
    response = obj.get("response")  # MCP Inspector: the answer to the entry's request, `duration` ms later
    if _is_rpc(response):
        ms = obj.get("duration")
        timed = base.when is not None and isinstance(ms, int | float) and not isinstance(ms, bool)
        when = base.when.plus_ms(ms) if timed else None  # type: ignore[union-attr]
        out.append(_checked(replace(base, msg=response, when=when, direction=None)))
    return out


def _wrapper_form(obj: dict) -> str:
    """Which writer a wrapper object looks like, for `metadata.log_format`."""
    if "transport_type" in obj and "raw" in obj:
        return "mcpspy"
    if obj.get("direction") in ("request", "response", "notification") and isinstance(obj.get("message"), dict):
        return "inspector"
    return "envelope"


def _checked(w: _Wire) -> _Wire | RecordError:
    problem = _rpc_problem(w.msg)
    return w if problem is None else RecordError("invalid_jsonrpc", f"{w.loc}: {problem}", w.loc)


def _bad_json(loc: str, data: bytes | str, err: ValueError) -> RecordError:
    """The quarantine row of a line that did not parse, with the reader's reasons and its first characters."""
    reason, problem = json_problem(data, err)
    if reason == "invalid_utf8":
        return RecordError(reason, f"{loc}: {problem}", loc)
    excerpt = (data[:120].decode("utf-8", "replace") if isinstance(data, bytes) else data[:120]).rstrip()
    return RecordError(reason, f"{loc}: {problem}; the line starts {excerpt!r}", loc)


# -- the shapes -----------------------------------------------------------------------------------


def _detect(head: bytes) -> str | None:
    """Which container a stream is: `log` (Claude Desktop / VS Code text log), `lines` (JSON lines) or
    `array` (one JSON array); None when its head holds no MCP traffic. JSON lines are claimed when
    one of the first lines that parse holds a JSON-RPC message (lines before it are bad lines of the
    log, quarantined later) and some message in the head is one only MCP sends."""
    if b"jsonrpc" not in head:  # every shape read here holds a JSON-RPC message (escaped, if wrapped as text)
        return None  # in its head: one substring scan spares the other formats' inputs the line parsing below
    if b'"jsonrpc"' in head and (b"] Message from " in head or b" -> " in head):  # spares the scan for all else
        for text_line in head.decode("utf-8", "replace").splitlines():
            line = _log_line(text_line)
            message = line.message() if line is not None else None
            if message is not None and '"jsonrpc"' in message[1]:
                return "log"
    lines = head.split(b"\n")
    first = next((ln.strip() for ln in lines if ln.strip()), b"")
    if first[:1] == b"[" and not _parses(first):  # a pretty-printed array, or one line longer than the head
        return "array" if _mentions_mcp(head) else None
    decided, unreadable, foreign = False, 0, 0
    for ln in lines:
        if not ln.strip():
            continue
        try:
            obj = parse_json(ln)
        except orjson.JSONDecodeError:
            unreadable += 1
            if not decided and unreadable > _SNIFF_BAD_LINES:
                break  # not JSON lines (a pretty-printed document, a text file)
            continue  # a bad line, or the line the head cut
        if not isinstance(obj, dict | list):
            continue
        wires = [w for w in _items(obj, "") if isinstance(w, _Wire)]
        if not decided and not wires:
            foreign += 1
            if foreign > _SNIFF_BAD_LINES:
                return None  # the first readable lines are no MCP messages: another format's file
            continue  # a broken message (quarantined later), or a line before the traffic
        decided = True
        if any(_is_mcp(w.msg) for w in wires):
            return "lines"
    if not decided and first[:1] == b"{" and len(lines) == 1 and _mentions_mcp(head):
        return "lines"  # one message longer than the head
    return None


def _mentions_mcp(text: bytes) -> bool:
    """JSON text that is not parsed whole holds JSON-RPC fields and an MCP method (outside JSON strings)."""
    return b'"jsonrpc"' in text and bool(_ARRAY_RPC.search(text)) and bool(_ARRAY_MCP.search(text))


def _parses(data: bytes) -> bool:
    try:
        parse_json(data)
    except orjson.JSONDecodeError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class _LogLine:
    """A Claude Desktop or VS Code log line's prefix and text."""

    form: str  # claude-desktop | vscode
    stamp: str
    level: str
    server: str | None  # VS Code's channel is one server's and names none
    text: str

    def message(self) -> tuple[str, str] | None:
        """(direction, JSON text) when the line logs a message."""
        if self.form == "claude-desktop" and (m := _CLAUDE_MESSAGE.match(self.text)):
            return "c2s" if m[1] == "client" else "s2c", self.text[m.end():]
        if self.form == "vscode" and (m := _VSCODE_MESSAGE.match(self.text)):
            return "c2s" if m[1] == "editor" else "s2c", self.text[m.end():]
        return None


def _log_line(line: str) -> _LogLine | None:
    """The line's prefix (Claude Desktop `TIME [server] [level]`, either order, or VS Code `TIME [level]`);
    None for a line without one: what the server wrote to stderr."""
    if m := _CLAUDE_LINE.fullmatch(line):
        a, b = m[2], m[3]
        level, server = (a, b) if a.lower() in _LEVELS else (b, a)
        return _LogLine("claude-desktop", m[1], level, server, m[4])
    if m := _VSCODE_LINE.fullmatch(line):
        return _LogLine("vscode", m[1], m[2], None, m[3])
    return None


def _too_large(lineno: int, size: int, limit: int) -> RecordError:
    loc = f"line:{lineno}"
    return RecordError("record_too_large", f"{loc}: {size} bytes, above the {limit}-byte record limit", loc)


def _line_items(stream: IO[bytes], limits: ReadLimits) -> Iterator[_Item]:
    """JSON lines: each line a message, a batch, or a wrapper of either."""
    for lineno, line, size in iter_lines(stream, limits.max_record_bytes):
        loc = f"line:{lineno}"
        if line is None:
            yield _too_large(lineno, size, limits.max_record_bytes)
            continue
        if not line.strip():
            continue
        try:
            obj = parse_json(line)
        except orjson.JSONDecodeError as e:
            yield _bad_json(loc, line, e)
            continue
        yield from _items(obj, loc)


def _array_items(stream: IO[bytes], source: str, limits: ReadLimits) -> Iterator[_Item]:
    """One JSON array (the Inspector's history export): each element a message or a wrapper."""
    data = read_bounded(stream, limits.max_record_bytes, source)
    try:
        doc = parse_json(data)
    except orjson.JSONDecodeError as e:
        yield _bad_json("$", data, e)
        return
    if not isinstance(doc, list):
        yield RecordError("not_jsonrpc", f"$: a JSON {type(doc).__name__}, not an array of messages", "$")
        return
    for i, el in enumerate(doc):
        yield from _items(el, f"[{i}]", batch=False)


@dataclass(slots=True)
class _OpenMessage:
    """A message line whose JSON did not parse: it may go on over the unprefixed lines that follow
    (a logger that pretty-prints), until it parses or the next prefixed line comes."""

    loc: str
    line: _LogLine
    direction: str
    text: str
    error: ValueError

    def extend(self, more: str) -> Any:
        """The parsed JSON once `more` completes it; raises ValueError while it does not."""
        self.text += "\n" + more
        return _DECODER.raw_decode(self.text.lstrip())[0]


def _log_items(stream: IO[bytes], limits: ReadLimits) -> Iterator[_Item]:
    """A Claude Desktop or VS Code log: message lines, lifecycle lines, and unprefixed lines: what the
    server wrote to stderr (or the rest of a multi-line entry), kept with the connection of the line
    before."""
    conn = ""
    open_msg: _OpenMessage | None = None
    for lineno, raw, size in iter_lines(stream, limits.max_record_bytes):
        loc = f"line:{lineno}"
        if raw is None:
            yield _too_large(lineno, size, limits.max_record_bytes)
            continue
        try:
            text, bad_utf8 = raw.decode("utf-8"), False
        except UnicodeDecodeError:
            text, bad_utf8 = raw.decode("utf-8", "replace"), True
        text = text.rstrip("\r\n").removeprefix("\ufeff")
        if not text.strip():
            continue
        line = _log_line(text)
        if open_msg is not None:
            if line is None and len(open_msg.text) + len(text) <= limits.max_record_bytes:
                try:
                    obj = open_msg.extend(text)
                except ValueError:
                    continue
                yield from _log_message(open_msg.loc, open_msg.line, open_msg.direction, obj, conn)
                open_msg = None
                continue
            yield _bad_json(open_msg.loc, open_msg.text, open_msg.error)
            open_msg = None
        if line is None:
            yield _Event(loc, conn, text, stderr=True)
            continue
        conn = line.server if line.server is not None else conn
        message = line.message()
        if message is None:
            yield _Event(loc, conn, line.text.removesuffix(" { metadata: undefined }"), line.level)
            continue
        if bad_utf8:
            yield _bad_json(loc, raw, ValueError("invalid UTF-8"))
            continue
        direction, payload = message
        try:
            obj, _end = _DECODER.raw_decode(payload.lstrip())  # the JSON, then whatever the logger appended
        except ValueError as e:
            open_msg = _OpenMessage(loc, line, direction, payload, e)
            continue
        yield from _log_message(loc, line, direction, obj, conn)
    if open_msg is not None:
        yield _bad_json(open_msg.loc, open_msg.text, open_msg.error)


def _log_message(loc: str, line: _LogLine, direction: str, obj: Any, conn: str) -> list[_Wire | RecordError]:
    """The messages of one logged message entry, with the log line's direction, time and connection."""
    items = _items(obj, loc, line.form)
    when = _when(line.stamp)
    for it in items:
        if isinstance(it, _Wire):
            it.direction, it.when, it.conn = direction, when, conn
    return items


# -- sessions -------------------------------------------------------------------------------------


def _id_key(value: Any) -> str:
    """An id as a key: 1 and "1" are different ids."""
    return f"s:{value}" if isinstance(value, str) else f"n:{value!r}"


@dataclass(slots=True)
class _Request:
    wire: _Wire
    method: str
    direction: str
    turn: bool
    response: _Wire | None = None
    cancelled: dict | None = None
    unanswered: str | None = None  # why no response came: log_ended, session_ended, cancelled, duplicate_id
    seq: int = 0  # order among the session's requests


def _note(notes: dict[str, list], counts: Counter, key: str, value: dict) -> None:
    counts[key] += 1
    if len(notes.setdefault(key, [])) < _NOTES:
        notes[key].append(value)


@dataclass
class _Session:
    """The messages of one session on one connection, paired as they arrive."""

    conn: str
    loc: str
    container: str = ""
    requests: list[_Request] = field(default_factory=list)  # turns, in request order
    pending: dict[tuple[str, str], _Request] = field(default_factory=dict)
    answered: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)  # id -> request, response locators
    seq: int = 0  # requests seen (`_Request.seq`)
    messages: int = 0
    forms: Counter = field(default_factory=Counter)
    first_at: datetime | None = None
    last_loc: str = ""
    transport: str | None = None
    client_info: dict | None = None
    init_result: dict | None = None
    init_error: dict | None = None
    discover_result: dict | None = None
    tools: list | None = None
    resources: list | None = None
    prompts: list | None = None
    tools_changed: bool = False
    partial: dict[str, list] = field(default_factory=dict)  # listings whose next page is still to come
    listings: Counter = field(default_factory=Counter)
    methods: Counter = field(default_factory=Counter)
    notifications: Counter = field(default_factory=Counter)
    unanswered_other: Counter = field(default_factory=Counter)
    models: list[str] = field(default_factory=list)
    notes: dict[str, list] = field(default_factory=dict)
    note_counts: Counter = field(default_factory=Counter)
    events: list[dict] = field(default_factory=list)
    event_count: int = 0
    stderr_lines: int = 0
    stderr_tail: str = ""

    def add(self, w: _Wire) -> None:
        self.messages += 1
        self.forms[w.form] += 1
        self.last_loc = w.loc
        if self.first_at is None and w.when is not None:
            self.first_at = w.when.at
        self.transport = self.transport or w.transport
        msg = w.msg
        if "method" in msg:
            (self._request if "id" in msg else self._notification)(w)
        else:
            self._response(w)

    def event(self, e: _Event) -> None:
        if e.stderr:
            self.stderr_lines += 1
            self.stderr_tail = (self.stderr_tail + e.text + "\n")[-_STDERR_TAIL:]
            return
        self.event_count += 1
        if len(self.events) < _EVENTS:
            self.events.append({"locator": e.loc, "level": e.level, "text": e.text[:500]})

    def absorb(self, other: _Session) -> None:
        """Take the log lines another holder kept for this connection (lines before its first message)."""
        self.events += other.events[: max(0, _EVENTS - len(self.events))]
        self.event_count += other.event_count
        self.stderr_lines += other.stderr_lines
        self.stderr_tail = (self.stderr_tail + other.stderr_tail)[-_STDERR_TAIL:]

    def _request(self, w: _Wire) -> None:
        method = w.msg["method"]
        direction = w.direction or ("s2c" if method in _SERVER_METHODS else "c2s")
        if (not w.direction and method == "ping" and ("c2s", _id_key(w.msg["id"])) in self.pending
                and ("s2c", _id_key(w.msg["id"])) not in self.pending):
            direction = "s2c"  # either side may ping: one that reuses a client request's id in flight is the server's
        key = (direction, _id_key(w.msg["id"]))
        old = self.pending.pop(key, None)
        if old is not None:  # the id is still in flight: the earlier request will get no answer of its own
            old.unanswered = "cancelled" if old.cancelled else "duplicate_id"  # a cancelled one was not waiting for it
            self._unanswered(old)
            _note(self.notes, self.note_counts, "duplicate_ids",
                  {"id": w.msg["id"], "first": old.wire.loc, "again": w.loc})
        elif (done := self.answered.pop(key, None)) is not None and (w.direction or method != "ping"):
            # answered already, so the pairing is not in doubt, but MCP ids are unique within a session; a ping
            # in a log without directions may be the other side's own id
            _note(self.notes, self.note_counts, "duplicate_ids",
                  {"id": w.msg["id"], "first": done[0], "again": w.loc, "answered": done[1]})
        self.seq += 1
        req = _Request(w, method, direction, direction == "c2s" and method in shape.TURN_METHODS, seq=self.seq)
        self.pending[key] = req
        if req.turn:
            self.requests.append(req)
        else:
            self.methods[method] += 1
        params = w.msg.get("params")
        if method == "initialize" and isinstance(params, dict) and isinstance(params.get("clientInfo"), dict):
            self.client_info = params["clientInfo"]

    def _notification(self, w: _Wire) -> None:
        method = w.msg["method"]
        self.notifications[method] += 1
        params = w.msg.get("params")
        if method != "notifications/cancelled" or not isinstance(params, dict) or not _valid_id(params.get("requestId")):
            return
        # a cancellation names a request issued in its own direction
        for direction in [w.direction] if w.direction else ["c2s", "s2c"]:
            req = self.pending.get((direction, _id_key(params["requestId"])))
            if req is not None:
                req.cancelled = {"locator": w.loc, "reason": params.get("reason")}
                return

    def _response(self, w: _Wire) -> None:
        rid = w.msg.get("id")
        if rid is None:  # an error about a request the server could not read
            err = w.msg.get("error") or {}
            _note(self.notes, self.note_counts, "null_id_errors",
                  {"locator": w.loc, "code": err.get("code"), "message": err.get("message")})
            return
        # the answer travels the other way: a server's response answers a client's request
        directions = [{"c2s": "s2c", "s2c": "c2s"}[w.direction]] if w.direction else ["c2s", "s2c"]
        # without directions, the id may be in flight both ways (a server's sampling request inside a tool call
        # of the same id): the newer request is answered first, as calls nest
        candidates = [(d, r) for d in directions if (r := self.pending.get((d, _id_key(rid)))) is not None]
        req = max(candidates, key=lambda c: c[1].seq)[1] if candidates else None
        if req is not None:
            del self.pending[(req.direction, _id_key(rid))]
            if len(self.answered) < _ANSWERED_IDS:
                self.answered[(req.direction, _id_key(rid))] = (req.wire.loc, w.loc)
        if req is None:
            _note(self.notes, self.note_counts, "orphan_responses", {"locator": w.loc, "id": rid})
            return
        req.response = w
        result = w.msg.get("result")
        if req.method == "initialize":
            if isinstance(result, dict):
                self.init_result = result
            else:
                self.init_error = w.msg.get("error") if isinstance(w.msg.get("error"), dict) else {"result": result}
        elif req.method == "server/discover" and isinstance(result, dict):
            self.discover_result = result
        elif req.method in _LISTINGS and isinstance(result, dict):
            self._listing(req, result)
        elif req.method == "sampling/createMessage" and isinstance(result, dict):
            model = result.get("model")
            if isinstance(model, str) and model not in self.models:
                self.models.append(model)

    def _listing(self, req: _Request, result: dict) -> None:
        """Pages of tools/resources/prompts: a request with a cursor continues the listing before it."""
        key = _LISTINGS[req.method]
        items = result.get(key)
        if not isinstance(items, list):
            return
        params = req.wire.msg.get("params")
        cursor = params.get("cursor") if isinstance(params, dict) else None
        acc = (self.partial.pop(key, []) if cursor else []) + items
        if result.get("nextCursor"):
            self.partial[key] = acc
            return
        self.listings[key] += 1
        if getattr(self, key) is None:
            setattr(self, key, acc)
        elif key == "tools" and acc != self.tools:
            self.tools_changed = True

    def _unanswered(self, req: _Request) -> None:
        if not req.turn:
            self.unanswered_other[req.method] += 1

    def close(self, why: str) -> None:
        """The session ended (`log_ended`, `session_ended`): requests still in flight get no answer."""
        for req in self.pending.values():
            req.unanswered = "cancelled" if req.cancelled else why
            self._unanswered(req)
        self.pending.clear()


class _Sessions:
    """Open sessions by connection. A new `initialize` ends the connection's session (returned to be
    yielded at once); the rest end with the log."""

    def __init__(self, container: str):
        self.container = container
        self.open: dict[str, _Session] = {}
        self.early: dict[str, _Session] = {}  # log lines waiting for their connection's next session

    def add(self, w: _Wire) -> _Session | None:
        s = self.open.get(w.conn)
        ended = None
        if s is not None and w.msg.get("method") == "initialize" and "id" in w.msg and s.messages:
            s.close("session_ended")
            ended, s = s, None
        if s is None:
            s = self.open[w.conn] = _Session(w.conn, w.loc, self.container)
            if (early := self.early.pop(w.conn, None)) is not None:
                s.absorb(early)
        s.add(w)
        return ended

    def event(self, e: _Event) -> None:
        s = self.open.get(e.conn)
        if s is None or (not e.stderr and _STARTING.match(e.text) and s.messages):
            s = self.early.setdefault(e.conn, _Session(e.conn, ""))
        s.event(e)

    def finish(self) -> list[_Session]:
        """The open sessions, each with the log lines that came after its last message. Lines of a
        connection that never sent a message have no session to go to, and are not imported."""
        for conn, early in self.early.items():
            if conn in self.open:
                self.open[conn].absorb(early)
        for s in self.open.values():
            s.close("log_ended")
        return list(self.open.values())


# -- the importer ---------------------------------------------------------------------------------


class McpTrafficImporter(Importer):
    name = "mcp-traffic"
    version = "2"  # 2: a cancelled request whose id came again is `cancelled`; ids reused after a response are noted
    container = "text"

    def sniff(self, head: bytes) -> bool:
        return _detect(head) is not None

    def split(self, stream: IO[bytes], ctx: ImportContext) -> Iterator[tuple[str, Any]]:
        n = ctx.limits.head_bytes
        head = stream.peek(n)[:n] if hasattr(stream, "peek") else b""
        container = _detect(head)
        if container == "array":
            items = _array_items(stream, ctx.source, ctx.limits)
        elif container == "log":
            items = _log_items(stream, ctx.limits)
        else:
            items = _line_items(stream, ctx.limits)
        sessions = _Sessions(container or "lines")
        for it in items:
            if isinstance(it, RecordError):
                yield it.locator or "$", it
            elif isinstance(it, _Event):
                sessions.event(it)
            elif (ended := sessions.add(it)) is not None:
                yield ended.loc, ended
        for s in sessions.finish():
            yield s.loc, s

    def convert(self, session: _Session, locator: str, ctx: ImportContext) -> Trajectory:
        init = session.init_result or session.discover_result or {}
        fingerprint = {**shape.server_fingerprint(init, session.tools), "transport": session.transport}
        initial = shape.initial_state(init, session.resources, session.prompts) if init else None
        client = session.client_info or {}
        return Trajectory(
            domain="mcp",  # the environment the format records: `--domain` does not change it
            source_format=self.name,
            native_id=None,
            record_digest=ctx.record_digest(locator),
            turns=[_turn(r) for r in session.requests],
            action_space=shape.action_space(session.tools),
            initial_state=dumps(initial),
            agent=client.get("name") if isinstance(client.get("name"), str) else None,
            model=session.models[0] if session.models else None,
            env_fingerprint=dumps(fingerprint),
            collected_at=session.first_at,
            metadata=dumps(_trajectory_meta(session)),
            locator=locator,
        )


def _turn(req: _Request) -> Turn:
    """One request and its response, as the recorder renders them."""
    msg = req.wire.msg
    name, args = shape.request_action(req.method, msg.get("params"))
    meta: dict[str, Any] = {"method": req.method, "jsonrpc_id": msg["id"], "request": req.wire.loc}
    if req.method == "tools/call" and name == req.method:
        meta["malformed_request"] = "params.name is not a string"
    resp = req.response
    duration = None
    if resp is None:
        observation, kind, is_error, locator = None, "none", None, req.wire.loc
        meta["unanswered"] = req.unanswered
    else:
        err = resp.msg.get("error")
        obs = (shape.error_observation(err.get("code"), err.get("message"), err.get("data"), "server")
               if isinstance(err, dict) else shape.result_observation(resp.msg.get("result")))
        observation, kind, is_error = obs.text, obs.kind, obs.is_error
        meta.update(obs.meta)
        meta["response"] = resp.loc
        duration = _seconds(req.wire.when, resp.when)
        if duration is not None:
            meta["latency_s"] = duration
        locator = req.wire.loc if resp.loc == req.wire.loc else f"{req.wire.loc}+{resp.loc}"
    if req.cancelled:
        meta["cancelled"] = req.cancelled
    return Turn(
        kind="env", action=shape.action_text(name, args), tool_name=name, tool_args=value_json(args),
        tool_call_id=str(msg["id"]), observation=observation, observation_kind=kind, is_error=is_error,
        started_at=req.wire.when.at if req.wire.when is not None else None, duration_s=duration,
        locator=locator, metadata=dumps(meta),
    )


def _trajectory_meta(s: _Session) -> dict[str, Any]:
    """What the log says about the session beyond its turns; counts of everything that is not a turn."""
    meta: dict[str, Any] = {
        "log_format": s.forms.most_common(1)[0][0],
        "container": s.container,
        "connection": s.conn or None,
        "first_message": s.loc,
        "last_message": s.last_loc,
        "messages": s.messages,
        "client_info": s.client_info,
        "initialize_error": s.init_error,
        "methods": dict(sorted(s.methods.items())) or None,
        "notifications": dict(sorted(s.notifications.items())) or None,
        "unanswered_turns": sum(r.response is None for r in s.requests) or None,
        "unanswered_requests": dict(sorted(s.unanswered_other.items())) or None,
        "cancelled": sum(r.cancelled is not None for r in s.requests) or None,
        "listings": dict(sorted(s.listings.items())) or None,
        "incomplete_listings": sorted(s.partial) or None,
        "tools_changed": s.tools_changed or None,
        "models": s.models if len(s.models) > 1 else None,
        "log_events": s.events or None,
        "log_event_count": s.event_count or None,
        "server_stderr_lines": s.stderr_lines or None,
        "server_stderr_tail": s.stderr_tail or None,
    }
    for key, values in s.notes.items():
        meta[key] = values
        meta[f"{key}_count"] = s.note_counts[key]
    return {k: v for k, v in meta.items() if v is not None}
