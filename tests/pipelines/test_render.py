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


def test_a_recorded_exit_code_ends_the_environments_message() -> None:
    from pipelines.render import RenderConfig, conversation, exit_code_line

    assert exit_code_line("a\n", 0) == "a\n[exit code 0]"
    assert exit_code_line("a", 2) == "a\n[exit code 2]"
    assert exit_code_line("", 127) == "[exit code 127]"
    assert exit_code_line("a", None) == "a"
    turns = [{"turn_index": 0, "kind": "env", "action": "ls", "observation": "x\n", "exit_code": 1},
             {"turn_index": 1, "kind": "env", "action": "echo", "observation": "y", "exit_code": None}]
    assert [g.observation for g in conversation({}, turns).groups] == ["x\n[exit code 1]", "y"]
    assert [g.observation for g in conversation({}, turns, RenderConfig(exit_codes=False)).groups] == ["x\n", "y"]
    assert RenderConfig().fingerprint() != RenderConfig(exit_codes=False).fingerprint()


def test_the_exit_code_line_is_what_the_traces_verifier_reads() -> None:
    from pipelines.render import exit_code_line
    from pipelines.traces.verify import stated_exit_code

    assert [stated_exit_code(exit_code_line(o, c)) for o, c in (("out\n", 0), ("", 2), ("x", -1))] == [0, 2, -1]
