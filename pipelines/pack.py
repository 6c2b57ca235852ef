"""Documents → packed training samples: best-fit-decreasing bins of at most `seq_len` tokens.

A *document* is one rendered world-model sequence (a whole trajectory, or one window of a long
one) with its per-token loss mask. A *sample* is what a trainer consumes: documents concatenated,
with `position_ids` restarting at 0 in every document and `cu_seqlens` marking where each starts,
so that attention can be kept inside each document (varlen flash attention, or a block-diagonal
mask). Samples are not padded; collators pad (see `pipelines.loader`).

Conventions (the ones Hugging Face models use, so `labels` can be passed to a model as is):

- `labels[i] = input_ids[i]` where `loss_mask[i] = 1`, else -100. Labels are *unshifted*: the
  model's loss predicts `labels[i]` from position `i - 1`.
- `loss_mask[i] = 1` means token `i` is a target. The first token of every document is never a
  target (`pack` clears it), so in a packed sample no token is ever predicted from the previous
  document's last position: masks cannot leak across a boundary in either direction.

Packing is deterministic: documents are sorted by (length descending, arrival order) and each goes
into the open bin with the least room that still fits it (ties: the bin opened first).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

IGNORE_INDEX = -100


@dataclass
class Document:
    """One rendered sequence and its loss mask, with what the manifest and the formats need."""

    ids: np.ndarray  # int32 token ids
    mask: np.ndarray  # uint8, 1 = loss on this token
    trajectory_id: str
    window: int = 0  # 0 for a whole trajectory; k for the k-th window of a split one
    copy: int = 0  # mixture up-sampling: the k-th copy of the same document
    domain: str = ""
    source_format: str = ""
    truncated: bool = False  # cut at seq_len (a single turn longer than the window)
    # the chat form, built only when a format asks (`messages`): (system, groups with `.user` and
    # `.observation`, whether each group's observation is trained)
    chat: tuple[str, list[Any], list[bool]] | None = None
    loss_turns: int = 0  # turns with at least one loss token here (one window trains each turn)

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def messages(self) -> list[dict[str, Any]]:
        """System, then user (action) and assistant (observation) messages, with per-message `train`."""
        if self.chat is None:
            return []
        system, groups, train = self.chat
        out: list[dict[str, Any]] = [{"role": "system", "content": system, "train": False}]
        for g, t in zip(groups, train, strict=True):
            out.append({"role": "user", "content": g.user, "train": False})
            out.append({"role": "assistant", "content": g.observation, "train": t})
        return out

    @functools.cached_property
    def loss_tokens(self) -> int:
        """Tokens with loss (counted once: the summary, the mix and the manifest all ask)."""
        return int(self.mask.sum())


@dataclass
class Sample:
    """A packed training sample: documents in bin order."""

    docs: list[Document]

    @property
    def num_tokens(self) -> int:
        return sum(len(d) for d in self.docs)


def best_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Bins (lists of item indices) of total length ≤ capacity; items longer than capacity are
    an error (split them first). Deterministic: sort by (-length, index); each item goes to the
    fullest bin it fits in, the earliest-opened on ties."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins: list[list[int]] = []
    free: list[tuple[int, int]] = []  # sorted (room left, bin number)
    for i in order:
        n = lengths[i]
        if n > capacity:
            raise ValueError(f"document {i} has {n} tokens, more than the sequence length {capacity}")
        at = bisect.bisect_left(free, (n, -1))
        if at < len(free):
            room, b = free.pop(at)
        else:
            room, b = capacity, len(bins)
            bins.append([])
        bins[b].append(i)
        room -= n
        if room > 0:
            bisect.insort(free, (room, b))
    return bins


def pack(docs: list[Document], seq_len: int) -> list[Sample]:
    """Best-fit-decreasing packing of `docs` (each ≤ seq_len) into samples, in bin order."""
    for d in docs:
        if len(d):
            d.mask[0] = 0  # nothing predicts a document's first token
        d.__dict__.pop("loss_tokens", None)  # counted again (a mixture copy shares its original's mask)
    bins = best_fit_decreasing([len(d) for d in docs], seq_len)
    return [Sample([docs[i] for i in b]) for b in bins]


def group_lengths(group_ends: list[int], system_len: int) -> list[int]:
    """Tokens per turn group, from the token offset just after each group in a whole rendering
    and the tokens before the first group."""
    return [group_ends[0] - system_len] + [group_ends[i] - group_ends[i - 1] for i in range(1, len(group_ends))]


def next_window(glen: list[int], room: int, s: int, history_fraction: float) -> tuple[int, int]:
    """The window whose first trained group is `s`: (history start j, end e). Groups [j, s) are
    carried history (context only): the most recent whole groups within `history_fraction` of
    the room; [s, e) are new, as many as fit. A group too long even alone gets a window of its
    own without history (the caller cuts it at the sequence length)."""
    j, hist = s, 0
    while j > 0 and hist + glen[j - 1] <= history_fraction * room:
        j -= 1
        hist += glen[j]
    e, tot = s, hist
    while e < len(glen) and tot + glen[e] <= room:
        tot += glen[e]
        e += 1
    if e == s:
        return s, s + 1
    return j, e


def windows(group_ends: list[int], system_len: int, seq_len: int, history_fraction: float) -> list[tuple[int, int, int]]:
    """The whole plan for one sequence: (j, s, e) per window (see `next_window`)."""
    glen = group_lengths(group_ends, system_len)
    out: list[tuple[int, int, int]] = []
    s = 0
    while s < len(glen):
        j, e = next_window(glen, seq_len - system_len, s, history_fraction)
        out.append((j, s, e))
        s = e
    return out
