"""The world-model prompt: one trajectory as a chat, rendered through a tokenizer's chat template.

Form (shared by scoring and export, so that what is scored is what is trained):

- system: a one-line role statement, then the task, the action space and the initial state
  (each section only when the trajectory has it);
- each environment turn: the action as a `user` message, the observation as the `assistant`
  message (the world model plays the environment), ending with a line `[exit code N]` when the
  turn recorded one (`exit_code_line`: the shell's status is part of what the environment returns);
- turns that did not touch the environment (agent messages, mid-session user messages) and env
  turns with no recorded observation are context only: their text is prepended to the next
  action's user message, so the chat alternates strictly (some templates insist) and nothing
  is lost.

The template is rendered once with placeholders in place of every message's content; the
template's own text between placeholders is then interleaved with the real contents. That gives
the exact character span of every observation without searching for it in the text (a search
would be fooled by an observation that also occurs in a header or an action). Character spans
map to token spans through the fast tokenizer's offsets.
"""

from __future__ import annotations

import functools
import hashlib
import re
import sys
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

ROLE_LINE = (
    "You are the environment of an agent session. Given the history and the agent's next action, "
    "reply with exactly what the environment returns."
)
_PH = "\ue000WL{}\ue001"  # private-use code points: cannot collide with a real message's content
CONTEXT_JOIN = "\n\n"



def cut_bound(backend: Any, window: int) -> int:
    """Characters of one text past which no token can reach a window of `window` tokens: a turn
    longer than the window is cut to it, and a window covers at most `window` × the longest
    vocabulary entry's characters. Twice that, so a cut before encoding changes no token kept.
    Only for byte-level BPE (`byte_level_bpe`); elsewhere a token ([UNK], dropped whitespace) may
    span any number of characters, and nothing is cut (`sys.maxsize`)."""
    if not byte_level_bpe(backend):
        return sys.maxsize
    return 2 * window * max((len(t) for t in backend.get_vocab(with_added_tokens=True)), default=1) + 1024


def byte_level_bpe(backend: Any) -> bool:
    """Whether a tokenizers backend is byte-level BPE with nothing that changes the text first (no
    normalizer, no byte fallback, no prefix space per piece): then every token stands for at least
    one byte and at most its vocabulary entry's characters, bounds the export and the scorer use."""
    pre = repr(backend.pre_tokenizer)
    return (type(backend.model).__name__ == "BPE" and not getattr(backend.model, "byte_fallback", True)
            and backend.normalizer is None and "ByteLevel(" in pre and "add_prefix_space=True" not in pre)

@dataclass(frozen=True)
class RenderConfig:
    role_line: str = ROLE_LINE
    include_thoughts: bool = False  # the agent's reasoning is not part of what the environment sees
    exit_codes: bool = True  # a recorded exit code ends the observation (`exit_code_line`)

    def fingerprint(self) -> str:
        return hashlib.sha256(repr(sorted(asdict(self).items())).encode()).hexdigest()[:16]


def system_prompt(traj: dict[str, Any], cfg: RenderConfig = RenderConfig()) -> str:
    """Task, action space and initial state under headings; absent sections are left out."""
    parts = [cfg.role_line]
    if traj.get("domain"):
        parts[0] += f" Domain: {traj['domain']}."
    for title, key in (("Task", "task"), ("Action space", "action_space"), ("Initial state", "initial_state")):
        v = traj.get(key)
        if v:
            parts.append(f"# {title}\n{v}")
    return "\n\n".join(parts)


def _action_text(turn: dict[str, Any], cfg: RenderConfig) -> str:
    text = turn.get("action")
    if text is None and turn.get("tool_name"):
        text = f"{turn['tool_name']}({turn.get('tool_args') or ''})"
    text = text or ""
    if cfg.include_thoughts and turn.get("thought"):
        text = f"{turn['thought']}{CONTEXT_JOIN}{text}" if text else turn["thought"]
    return text


def exit_code_line(observation: str, exit_code: int | None) -> str:
    """The environment's message for a turn: its observation, and then, when the turn recorded an
    exit code, the line `[exit code N]` (on a line of its own; an empty output is the line alone).
    `pipelines.traces.verify.stated_exit_code` reads this form back."""
    if exit_code is None:
        return observation
    sep = "\n" if observation and not observation.endswith("\n") else ""
    return f"{observation}{sep}[exit code {exit_code}]"


def is_scored_turn(turn: dict[str, Any]) -> bool:
    """A turn whose observation the world model predicts: it touched the environment and
    something (possibly the empty string) was recorded."""
    return turn.get("kind", "env") == "env" and turn.get("observation") is not None


@dataclass
class Group:
    """One user message (context + action) and its assistant message (the observation)."""

    turn_index: int
    user: str
    observation: str


@dataclass
class Conversation:
    system: str
    groups: list[Group] = field(default_factory=list)


def conversation(traj: dict[str, Any], turns: list[dict[str, Any]], cfg: RenderConfig = RenderConfig()) -> Conversation:
    """The trajectory as system + (user, assistant) groups. `turns` must be in turn order."""
    conv = Conversation(system_prompt(traj, cfg))
    pending: list[str] = []
    for t in turns:
        text = _action_text(t, cfg) if t.get("kind", "env") == "env" else (t.get("action") or t.get("thought") or "")
        if is_scored_turn(t):
            user = CONTEXT_JOIN.join([*pending, text]) if pending else text
            obs = exit_code_line(t["observation"], t.get("exit_code")) if cfg.exit_codes else t["observation"]
            conv.groups.append(Group(int(t["turn_index"]), user, obs))
            pending = []
        elif text:
            pending.append(text)
    return conv


def messages(conv: Conversation, groups: list[Group] | None = None, system: str | None = None) -> list[dict[str, str]]:
    """Chat messages for `groups` (default: all) under the system prompt."""
    out = [{"role": "system", "content": conv.system if system is None else system}]
    for g in conv.groups if groups is None else groups:
        out += [{"role": "user", "content": g.user}, {"role": "assistant", "content": g.observation}]
    return out


def template_pieces(tokenizer: Any, n_messages: int, roles: list[str]) -> list[str]:
    """The chat template's own text around `n_messages` placeholder contents: n+1 pieces. Kept per
    tokenizer, template and roles: scoring renders every observation alone as well (two template
    renderings a call, half of that call's time)."""
    key = (str(getattr(tokenizer, "chat_template", None)), n_messages, tuple(roles))
    try:
        cache = _PIECES.setdefault(tokenizer, {})
    except TypeError:  # an object that takes no weak reference
        cache = {}
    if key not in cache:
        cache[key] = tuple(_template_pieces(tokenizer, n_messages, roles))
    return list(cache[key])


_PIECES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


TEMPLATE_SOURCE = "worldline_template_source"  # set on a tokenizer whose chat template the user gave


def _template_name(tokenizer: Any) -> str:
    """Whose chat template a message blames: the `--chat-template` file's, else the tokenizer's."""
    given = getattr(tokenizer, TEMPLATE_SOURCE, None)
    return f"the chat template given ({given})" if given else \
        f"the chat template of {getattr(tokenizer, 'name_or_path', 'the tokenizer')!r}"


def _template_pieces(tokenizer: Any, n_messages: int, roles: list[str]) -> list[str]:
    from jinja2 import TemplateError

    msgs = [{"role": r, "content": _PH.format(i)} for i, r in enumerate(roles)]
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False)
    except TemplateError as e:  # e.g. `raise_exception('System role not supported')` (Gemma): a traceback
        raise ValueError(f"the chat template refuses "
                         f"messages of roles {', '.join(dict.fromkeys(roles))}: {e}; give one that takes them "
                         "(--chat-template)") from None
    pieces, pos = [], 0
    for i in range(n_messages):
        ph = _PH.format(i)
        at = text.find(ph, pos)
        if at < 0:
            raise ValueError(f"{_template_name(tokenizer)} "
                             f"drops or rewrites message {i} ({roles[i]}); scoring needs contents verbatim")
        pieces.append(text[pos:at])
        pos = at + len(ph)
    pieces.append(text[pos:])
    # a template that trims or strips contents (`| trim`: Llama 3, Gemma; Qwen3's `lstrip`) keeps the
    # bare placeholders, but would render other text than the contents the spans are built from
    padded = [{"role": r, "content": f"\n \n{_PH.format(i)}\n \n"} for i, r in enumerate(roles)]
    if tokenizer.apply_chat_template(padded, tokenize=False) != interleave(pieces, padded)[0]:
        raise ValueError(f"{_template_name(tokenizer)} "
                         "strips the white space around message contents (e.g. `| trim`); scoring and the export "
                         "need contents verbatim: give a template without it (--chat-template)")
    return pieces


@dataclass
class Rendered:
    """A rendered chat: its token ids and, per assistant message, the token span to score.

    `spans[k] = (turn_index, start, end)`: tokens `ids[start:end]` are the observation's content
    tokens followed by the first token after the content (the template's end-of-message token),
    so that an empty observation still has one token to predict (the end of the output).
    """

    ids: np.ndarray
    spans: list[tuple[int, int, int]]
    text: str


def interleave(pieces: list[str], msgs: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The template pieces (`template_pieces`: one before each message and one after the last)
    interleaved with the message contents, and the character span of each assistant content."""
    chunks: list[str] = []
    char_spans: list[tuple[int, int]] = []
    pos = 0
    for piece, m in zip(pieces, msgs, strict=False):
        chunks.append(piece)
        pos += len(piece)
        if m["role"] == "assistant":
            char_spans.append((pos, pos + len(m["content"])))
        chunks.append(m["content"])
        pos += len(m["content"])
    chunks.append(pieces[-1])
    return "".join(chunks), char_spans


class AddedTokens:
    """A tokenizer's added tokens (`<|im_end|>`, SmolLM2's `<filename>`, ...), to tell the chat
    template's markers from the same strings inside a message: only the template's may become
    control tokens. A shell's `usage: cat <filename>` or a tokenizer's source code shown to an
    agent is text, and encoded whole-text it would come out as the control token (and be trained
    as one). A rendered chat whose contents hold no added token is encoded as before; one whose
    contents do is encoded by `encode_contents_as_text`, here and in the export alike."""

    def __init__(self, backend: Any):
        self.backend = backend
        self.ids = {t.content: i for i, t in backend.get_added_tokens_decoder().items()}
        self.pattern = re.compile("(" + "|".join(re.escape(c) for c in sorted(self.ids, key=lambda c: (-len(c), c))) + ")") \
            if self.ids else None

    @functools.cached_property
    def text_backend(self) -> Any:
        """A copy of the tokenizer that encodes added special tokens' strings as text (made on
        first use: few chats need it)."""
        from tokenizers import Tokenizer

        b = Tokenizer.from_str(self.backend.to_str())
        b.encode_special_tokens = True
        b.no_truncation()
        b.no_padding()
        return b

    @classmethod
    def of(cls, tokenizer: Any) -> AddedTokens:
        """The (cached) added tokens of a Hugging Face fast tokenizer."""
        found = getattr(tokenizer, "_worldline_added_tokens", None)
        if found is None:
            found = cls(tokenizer.backend_tokenizer)
            tokenizer._worldline_added_tokens = found
        return found

    def in_contents(self, msgs: list[dict[str, str]]) -> bool:
        """Whether any message content holds an added token's string."""
        return self.pattern is not None and any(self.pattern.search(m["content"]) for m in msgs)

    def encode_contents_as_text(self, pieces: list[str], msgs: list[dict[str, str]]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, character offsets (n, 2)) of the chat `interleave(pieces, msgs)` renders, with the
        template pieces' added tokens as control tokens and every content encoded as text: the text
        between two of the template's added tokens is one segment, as the tokenizer cuts a whole
        text at added tokens (so a chat without added tokens in its contents gets the same ids)."""
        segments: list[tuple[int, str]] = []  # (character start, text) between the template's added tokens
        marks: list[tuple[int, int, int]] = []  # (character start, end, id) of each of them
        pos, start, buf = 0, 0, []
        for k, piece in enumerate(pieces):
            for j, part in enumerate(self.pattern.split(piece) if self.pattern is not None else [piece]):
                if j % 2:
                    segments.append((start, "".join(buf)))
                    marks.append((pos, pos + len(part), self.ids[part]))
                    pos += len(part)
                    start, buf = pos, []
                else:
                    buf.append(part)
                    pos += len(part)
            if k < len(msgs):
                buf.append(msgs[k]["content"])
                pos += len(msgs[k]["content"])
        segments.append((start, "".join(buf)))
        encs = self.text_backend.encode_batch([t for _, t in segments], add_special_tokens=False)
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for k, ((at, _), e) in enumerate(zip(segments, encs, strict=True)):
            ids += e.ids
            offsets += [(a + at, b + at) for a, b in e.offsets]
            if k < len(marks):
                a, b, i = marks[k]
                ids.append(i)
                offsets.append((a, b))
        return np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)


def render(tokenizer: Any, msgs: list[dict[str, str]], turn_indices: list[int]) -> Rendered:
    """Render `msgs` and find the token span of every assistant message (one per turn index).
    Added tokens' strings inside the contents are text (`AddedTokens`)."""
    roles = [m["role"] for m in msgs]
    pieces = template_pieces(tokenizer, len(msgs), roles)
    text, char_spans = interleave(pieces, msgs)
    added = AddedTokens.of(tokenizer)
    if added.in_contents(msgs):
        ids, offsets = added.encode_contents_as_text(pieces, msgs)
    else:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids = np.asarray(enc["input_ids"], dtype=np.int64)
        offsets = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    spans = []
    for ti, (cs, ce) in zip(turn_indices, char_spans, strict=True):
        s = int(np.searchsorted(ends, cs, side="right"))  # first token ending inside or after the content
        e = int(np.searchsorted(starts, ce, side="left"))  # first token starting at or after its end
        spans.append((ti, min(s, e), min(e + 1, len(ids))))  # + the token that closes the message
    return Rendered(ids, spans, text)


MIN_WINDOW_TEXT = 16  # tokens of action and observation a window must have room for, past the template


def min_window(tokenizer: Any) -> tuple[int, int]:
    """(tokens of one empty turn of the chat template, with an empty system message where the template
    takes one; the least window that holds any text). A long task prompt keeps half a window (scoring's
    `_fit_system`, the export's `_cut_systems`), so the turn must fit in the other half with room for text."""
    empty = [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]
    try:
        shell = len(render(tokenizer, [{"role": "system", "content": ""}, *empty], [1]).ids)
    except Exception:  # noqa: BLE001 - templates without a system role
        shell = len(render(tokenizer, empty, [1]).ids)
    return shell, 2 * (shell + MIN_WINDOW_TEXT)


def render_groups(tokenizer: Any, conv: Conversation, groups: list[Group], system: str | None = None) -> Rendered:
    return render(tokenizer, messages(conv, groups, system), [g.turn_index for g in groups])
