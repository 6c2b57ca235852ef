"""Generators (an OpenAI-compatible endpoint, or a local transformers model) and the on-disk cache.

Every generation is stored under a hash of (model, messages, sampling settings, seed) the moment
it arrives, so an interrupted run asks again only for what it never got, and a rerun with the same
settings asks nothing. Failed requests are not cached.

The HTTP client (`EndpointClient`) is the shared piece: bounded retries with exponential backoff
(and `Retry-After`) on transient failures only — 408, 409, 425, 429, 5xx, refused or reset
connections, timeouts — and a token-bucket rate limit shared by all threads. Other 4xx answers
are not retried: 401/403/404 mean the run is misconfigured and stop it (`EndpointError`); 400,
413 and 422 are about one prompt (too long, say) and fail that candidate only (`RequestRejected`).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from collectors.policies import EndpointError
from pipelines.progress import StatusLine
from pipelines.traces.engine import ChatRequest, ChatResult, EngineConfig, LocalEngine
from schemas.options import at_least

TRANSIENT_STATUS = frozenset({408, 409, 425, 429})
PER_REQUEST_STATUS = frozenset({400, 413, 422})


class RequestRejected(RuntimeError):
    """The endpoint refused this one request (not retried; other requests go on)."""


class EndpointMisconfigured(EndpointError):
    """401/403/404 and the like: every request would fail the same way, so the run stops."""


class _NotJson(Exception):
    """A reply that is not JSON (a proxy's error page, a body cut short): retried like a transient failure."""


@dataclass(frozen=True)
class Sampling:
    max_tokens: int = 512
    temperature: float = 0.8
    top_p: float = 0.95
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Values an endpoint would refuse on every request, or a local engine would sample garbage with."""
        at_least("--max-tokens", self.max_tokens, 1)
        if not 0 <= self.temperature < float("inf"):
            raise ValueError(f"--temperature must be a number at least 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1] (got {self.top_p})")


def cache_key(model: str, messages: list[dict[str, str]], sampling: Sampling, seed: int, kind: str = "chat") -> str:
    doc = {"kind": kind, "model": model, "messages": messages, "sampling": asdict(sampling), "seed": seed}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class GenerationCache:
    """A SQLite table key → result JSON, committed per insert (WAL), shared by threads."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS generations (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        self._db.commit()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM generations WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO generations (key, value) VALUES (?, ?)", (key, json.dumps(value)))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT count(*) FROM generations").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()


class RateLimiter:
    """Token bucket: at most `rate` acquisitions per second on average, bursts of `burst`."""

    def __init__(self, rate: float | None, burst: int = 1):
        self.rate, self.burst = rate, max(1, burst)
        self._tokens = float(self.burst)
        self._t = time.monotonic()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if not self.rate:
            return
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.burst, self._tokens + (now - self._t) * self.rate)
                self._t = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return
                wait = (1.0 - self._tokens) / self.rate
            time.sleep(wait)


@dataclass
class EndpointClient:
    """POSTs JSON to an OpenAI-compatible server with retries, backoff and a rate limit."""

    base_url: str
    api_key: str | None = None
    timeout_s: float = 300.0
    retries: int = 4
    backoff_s: float = 1.0
    max_backoff_s: float = 60.0
    requests_per_s: float | None = None
    stats: dict[str, int] = field(default_factory=lambda: {"requests": 0, "retries": 0, "failed": 0})

    def __post_init__(self) -> None:
        self.base_url = self.base_url.rstrip("/")
        self._limiter = RateLimiter(self.requests_per_s)
        self._lock = threading.Lock()

    def _count(self, k: str) -> None:
        with self._lock:
            self.stats[k] += 1

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{self.base_url}/{path.lstrip('/')}"
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in range(self.retries + 1):
            self._limiter.acquire()
            self._count("requests")
            wait: float | None = None
            try:
                req = urllib.request.Request(url, data=data, headers=headers)
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    body = r.read()
                try:
                    return json.loads(body)
                except ValueError as e:  # a proxy's HTML page, a cut body: retried, as a transient failure
                    raise _NotJson(f"{url}: the reply is not JSON ({e}): {body[:200]!r}") from e
            except urllib.error.HTTPError as e:
                detail = e.read()[:300]
                if e.code in PER_REQUEST_STATUS:
                    self._count("failed")
                    raise RequestRejected(f"{url}: HTTP {e.code}: {detail!r}") from e
                if e.code not in TRANSIENT_STATUS and e.code < 500:
                    self._count("failed")
                    raise EndpointMisconfigured(f"{url}: HTTP {e.code}: {detail!r} (not retried: check the URL, model and key)") from e
                err: Exception = EndpointError(f"{url}: HTTP {e.code} after {attempt + 1} attempts: {detail!r}")
                ra = e.headers.get("Retry-After") if e.headers else None
                if ra is not None:
                    try:
                        wait = float(ra)
                    except ValueError:
                        wait = None
                    if wait is not None and not wait >= 0:  # negative or NaN: not a wait; back off as usual
                        wait = None
            except _NotJson as e:
                err = EndpointError(f"{e} (after {attempt + 1} attempts)")
            except http.client.HTTPException as e:  # IncompleteRead, a broken status line
                err = EndpointError(f"{url}: broken reply after {attempt + 1} attempts ({type(e).__name__}: {e})")
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                err = EndpointError(f"{url}: unreachable after {attempt + 1} attempts ({e}); is the endpoint running?")
            if attempt == self.retries:
                self._count("failed")
                raise err
            self._count("retries")
            delay = self.backoff_s * 2**attempt * random.uniform(0.5, 1.0)
            time.sleep(min(self.max_backoff_s, wait if wait is not None else delay))
        raise AssertionError("unreachable")

    def get(self, path: str) -> dict[str, Any]:
        req = urllib.request.Request(f"{self.base_url}/{path.lstrip('/')}",
                                     headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
            return json.loads(r.read())


MAX_TIMEOUT_S = 86_400.0  # a day: `inf` overflowed the socket's deadline, after the output folder was made


def check_base_url(option: str, url: str) -> None:
    """An http(s) URL with a host: `localhost:8000/v1` was retried as if the endpoint were down
    ("unknown url type"), and failed only after the generation."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{option} {url!r}: expected an http:// or https:// URL with a host "
                         "(e.g. http://localhost:8000/v1)")


def check_client_options(concurrency: int, requests_per_s: float | None, timeout_s: float, retries: int) -> None:
    """The request options, as the command line spells them: 0 requests in flight would hang or be
    quietly read as 1, a timeout of 0 fails every request."""
    at_least("--concurrency", concurrency, 1)
    if requests_per_s is not None and not requests_per_s > 0:
        raise ValueError(f"--rps must be above 0 (got {requests_per_s})")
    if not 0 < timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"--timeout must be above 0 and at most {MAX_TIMEOUT_S:g} seconds (got {timeout_s})")
    at_least("--retries", retries, 0)


class Generator(Protocol):
    """`model` names the model in cache keys and provenance; `complete_many` calls `done(i, result
    or exception)` for every request as soon as it is answered."""

    model: str
    kind: str

    def complete_many(self, reqs: list[ChatRequest], done: Callable[[int, ChatResult | Exception], None]) -> None: ...


def _content_text(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts (some servers send those)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(p["text"] for p in content if p.get("type") == "text" and isinstance(p.get("text"), str))
    raise TypeError(f"message content is {type(content).__name__}")


def _prefilled(req: ChatRequest) -> str:
    return req.messages[-1]["content"] if req.continue_final_message else ""


@dataclass
class EndpointGenerator:
    """Chat completions from an OpenAI-compatible endpoint (vLLM, SGLang, a hosted API).

    `base_url`, `model` and the key default to `WORLDLINE_TRACES_BASE_URL`, `WORLDLINE_TRACES_MODEL`
    and `WORLDLINE_TRACES_API_KEY` (or `OPENAI_API_KEY`). A request that ends with an assistant
    message (a prefill such as `<think>\\n`) is sent with vLLM's `continue_final_message`."""

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    concurrency: int = 8
    requests_per_s: float | None = None
    timeout_s: float = 300.0
    retries: int = 4
    backoff_s: float = 1.0
    max_consecutive_failures: int = 16  # transient failures in a row (after retries) that stop the run
    kind: str = "endpoint"

    def __post_init__(self) -> None:
        self.base_url = (self.base_url or os.environ.get("WORLDLINE_TRACES_BASE_URL") or "").rstrip("/")
        self.model = self.model or os.environ.get("WORLDLINE_TRACES_MODEL")
        self.api_key = self.api_key or os.environ.get("WORLDLINE_TRACES_API_KEY") or os.environ.get("OPENAI_API_KEY")
        if not self.base_url or not self.model:
            raise ValueError("the endpoint generator needs a base URL and a model "
                             "(--endpoint/--model, or WORLDLINE_TRACES_BASE_URL/WORLDLINE_TRACES_MODEL)")
        check_base_url("endpoint", self.base_url)
        check_client_options(self.concurrency, self.requests_per_s, self.timeout_s, self.retries)
        self.client = EndpointClient(self.base_url, self.api_key, self.timeout_s, self.retries, self.backoff_s,
                                     requests_per_s=self.requests_per_s)

    def body(self, req: ChatRequest) -> dict[str, Any]:
        b: dict[str, Any] = {"model": self.model, "messages": req.messages, "max_tokens": req.max_tokens,
                             "temperature": req.temperature, "top_p": req.top_p, "seed": req.seed, "n": 1}
        if req.stop:
            b["stop"] = list(req.stop)
        if req.continue_final_message:
            b.update(continue_final_message=True, add_generation_prompt=False)
        return b

    def complete(self, req: ChatRequest) -> ChatResult:
        r = self.client.post("chat/completions", self.body(req))
        try:
            choice = r["choices"][0]
            text = _content_text(choice["message"].get("content"))
            # a reasoning parser (vLLM --reasoning-parser, DeepSeek's API) returns the thinking apart from the
            # answer: put back as the <think> block the candidate parser reads (every candidate was missing_think)
            reasoning = choice["message"].get("reasoning_content") or choice["message"].get("reasoning")
            if isinstance(reasoning, str) and reasoning.strip() and "<think>" not in _prefilled(req) + text:
                text = f"<think>\n{reasoning.strip()}\n</think>\n{text.lstrip()}"
            usage = r.get("usage") or {}
            return ChatResult(_prefilled(req) + text, choice.get("finish_reason") or "stop",
                              int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as e:
            raise EndpointError(f"{self.base_url}: not a chat completion: {str(r)[:300]}") from e

    def complete_many(self, reqs: list[ChatRequest], done: Callable[[int, ChatResult | Exception], None]) -> None:
        if not reqs:
            return
        with ThreadPoolExecutor(max_workers=max(1, self.concurrency), thread_name_prefix="traces-gen") as pool:
            window = max(1, self.concurrency) * 4  # bounded: a million requests are not all queued at once
            it = iter(enumerate(reqs))
            pending = {}
            for i, r in it:
                pending[pool.submit(self.complete, r)] = i
                if len(pending) >= window:
                    break
            failures = 0
            while pending:
                fut = next(as_completed(pending))
                i = pending.pop(fut)
                try:
                    res: ChatResult | Exception = fut.result()
                    failures = 0
                except RequestRejected as e:
                    res = e
                except EndpointError as e:
                    failures += 1
                    if isinstance(e, EndpointMisconfigured) or failures >= self.max_consecutive_failures:
                        for f in pending:
                            f.cancel()
                        raise EndpointError(f"{e} (stopping: {failures} failure(s) in a row; what was answered is "
                                            "cached, a rerun continues from there)") from e
                    res = e
                done(i, res)
                nxt = next(it, None)
                if nxt is not None:
                    pending[pool.submit(self.complete, nxt[1])] = nxt[0]


@dataclass
class LocalGenerator:
    """The same requests answered by a transformers model in this process, in batches."""

    engine: LocalEngine = field(default_factory=lambda: LocalEngine(EngineConfig()))
    kind: str = "local"

    @property
    def model(self) -> str:
        return f"local:{self.engine.config.model}:{self.engine.config.fingerprint()}"

    def complete_many(self, reqs: list[ChatRequest], done: Callable[[int, ChatResult | Exception], None]) -> None:
        self.engine.setup()
        step = max(1, self.engine.config.max_batch)
        for s in range(0, len(reqs), step):
            batch = reqs[s : s + step]
            for j, res in enumerate(self.engine.chat(batch)):
                done(s + j, ChatResult(_prefilled(batch[j]) + res.text, res.finish_reason, res.prompt_tokens,
                                       res.completion_tokens))


class Progress:
    """Requests done / total with rate and ETA on stderr: redrawn on a terminal, every 10 s otherwise."""

    def __init__(self, label: str, total: int, enabled: bool = True):
        self.label, self.total, self.done = label, total, 0
        self.line = StatusLine(enabled and total > 0, width=80)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.line.due(force=self.done >= self.total):
            rate = self.done / self.line.elapsed
            eta = (self.total - self.done) / rate if rate > 0 else 0.0
            self.line.show(f"{self.label} {self.done}/{self.total} ({rate:.2f}/s, eta {eta:,.0f} s)")

    def finish(self) -> None:
        self.line.finish()


@dataclass
class GenerationStats:
    cached: int = 0
    generated: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def generate_cached(generator: Generator, jobs: Iterable[tuple[str, ChatRequest]], cache: GenerationCache,
                    label: str = "generate", progress: bool = True) -> tuple[dict[str, dict[str, Any]], GenerationStats]:
    """Results for every (cache key, request): from the cache, else from the generator (and then
    cached at once). A failed request maps to `{"error": ...}` and is not cached."""
    t0 = time.monotonic()
    stats = GenerationStats()
    out: dict[str, dict[str, Any]] = {}
    todo: list[tuple[str, ChatRequest]] = []
    seen: set[str] = set()
    for key, req in jobs:
        if key in seen:
            continue
        seen.add(key)
        hit = cache.get(key)
        if hit is not None:
            out[key] = hit
            stats.cached += 1
        else:
            todo.append((key, req))
    bar = Progress(label, len(todo), progress)

    def done(i: int, res: ChatResult | Exception) -> None:
        key = todo[i][0]
        if isinstance(res, Exception):
            out[key] = {"error": f"{type(res).__name__}: {res}"}
            stats.failed += 1
        else:
            value = {"text": res.text, "finish_reason": res.finish_reason, "prompt_tokens": res.prompt_tokens,
                     "completion_tokens": res.completion_tokens, "model": generator.model}
            cache.put(key, value)
            out[key] = value
            stats.generated += 1
            stats.prompt_tokens += res.prompt_tokens
            stats.completion_tokens += res.completion_tokens
        bar.advance()

    generator.complete_many([r for _, r in todo], done)
    bar.finish()
    stats.seconds = time.monotonic() - t0
    return out, stats
