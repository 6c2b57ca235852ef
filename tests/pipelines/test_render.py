"""`render.cut_bound`: texts are cut before encoding only for byte-level BPE, where it is safe."""

from __future__ import annotations

import sys

from tokenizers import Tokenizer, models, pre_tokenizers

from pipelines.render import byte_level_bpe, cut_bound
from tests.pipelines.export_support import tokenizer


def test_byte_level_bpe_is_cut_past_twice_what_a_window_can_hold() -> None:
    backend = tokenizer().backend  # SmolLM2's: byte-level BPE
    longest = max(len(t) for t in backend.get_vocab(with_added_tokens=True))
    assert byte_level_bpe(backend) and cut_bound(backend, 256) == 2 * 256 * longest + 1024


def test_another_tokenizer_is_never_cut() -> None:
    # a WordPiece [UNK] stands for a whole word of any length: no character bound holds
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.Whitespace()
    assert not byte_level_bpe(wp) and cut_bound(wp, 256) == sys.maxsize
