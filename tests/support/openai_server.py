"""A real OpenAI-compatible HTTP server on loopback whose replies are scripted (agent-policy tests).

    with ScriptedOpenAIServer([{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
                               {"content": "All done."}]) as srv:
        policy = OpenAIChatPolicy(base_url=srv.base_url, model=srv.model, api_key="test-key")

Routes: `POST /v1/chat/completions` (non-streaming) and `GET /v1/models`. The reply to a request
is script item k, where k is the number of assistant messages already in its conversation, so
several concurrent conversations each walk the script from the start. Items:

- `{"tool_calls": [{"name": ..., "arguments": {...}, "id": optional}], "content": optional}`;
- `{"content": "..."}` — a final answer without a tool call;
- `{"status": 503, "error": "..."}` — an HTTP error once (the same k is answered by the next item
  on the retry), for testing a client's retries;
- a callable `(request_body) -> item`, for replies that depend on what the agent was told.

Past the end of the script the server answers `{"content": "done"}`. Every request is kept
(`requests`: body, path, headers) for assertions. The script format is the same as that of
`tests/support/scripted_chat_server.py`; `ScriptedChatServer` is an alias.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Item = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ScriptedOpenAIServer:
    def __init__(self, script: list[Item], model: str = "scripted-model", api_key: str | None = None):
        self.script, self.model, self.api_key = list(script), model, api_key
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._errors_served: set[int] = set()  # script indices of error items already answered
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "start the server first (use it as a context manager)"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) for a request: the k-th non-error script item, preceded once by
        any error items placed just before it."""
        k = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
        step: dict[str, Any] = {"content": "done"}
        n = 0
        with self._lock:
            for i, item in enumerate(self.script):
                it = item(body) if callable(item) else item
                if "status" in it:
                    if n == k and i not in self._errors_served:
                        self._errors_served.add(i)
                        return int(it["status"]), {"error": {"message": it.get("error", "scripted error"), "type": "server_error"}}
                    continue
                if n == k:
                    step = it
                    break
                n += 1
        msg: dict[str, Any] = {"role": "assistant", "content": step.get("content")}
        if step.get("tool_calls"):
            msg["tool_calls"] = [
                {"id": c.get("id") or f"call_{k}_{j}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                for j, c in enumerate(step["tool_calls"])]
        return 200, {"id": f"chatcmpl-{k}", "object": "chat.completion", "created": int(time.time()), "model": self.model,
                     "choices": [{"index": 0, "message": msg,
                                  "finish_reason": "tool_calls" if step.get("tool_calls") else "stop"}],
                     "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}

    def __enter__(self) -> ScriptedOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                    return True
                self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                return False

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if not self._authorized():
                    return
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model", "owned_by": "worldline-tests"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                with server._lock:
                    server.requests.append(Request(self.path, dict(self.headers.items()), body))
                if not self._authorized():
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                self._send(*server.reply(body))

            def log_message(self, *args: Any) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="scripted-openai")
        self._thread.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        assert self._httpd is not None and self._thread is not None
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    """A script item: one tool call."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def answer(content: str) -> dict[str, Any]:
    """A script item: a final message without a tool call."""
    return {"content": content}


ScriptedChatServer = ScriptedOpenAIServer
