"""collectors.base: the helpers every importer reads fields with."""

from __future__ import annotations

from collectors.base import as_text, inline_data_note

PNG = "data:image/png;base64," + "iVBORw0KGgo" * 100


def test_text_parts_are_joined_as_they_are() -> None:
    assert as_text([{"type": "text", "text": "a "}, {"type": "text", "text": "b"}]) == "a b"
    assert as_text([]) == ""
    assert as_text("plain") == "plain" and as_text(None) is None


def test_media_parts_keep_a_reference_not_their_data() -> None:
    openai = [{"type": "text", "text": "What is in this image?"}, {"type": "image_url", "image_url": {"url": PNG}},
              {"type": "text", "text": "Be brief."}]
    assert as_text(openai) == (f"What is in this image?\n[image_url: data:image/png;base64,<{len(PNG)} characters not kept>]\n"
                               "Be brief.")
    anthropic = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD"}}]
    assert as_text(anthropic) == "[image: <4 characters not kept>]"
    atif = [{"type": "text", "text": "Describe the screenshot\n"},
            {"type": "image", "source": {"media_type": "image/png", "path": "images/s1.png"}}]
    assert as_text(atif) == "Describe the screenshot\n[image: images/s1.png]"
    responses = [{"type": "input_image", "image_url": "https://example.com/a.png"}, {"type": "input_file", "file_id": "file-1"}]
    assert as_text(responses) == "[input_image: https://example.com/a.png]\n[input_file: file-1]"
    assert as_text([{"type": "image"}]) == "[image]"


def test_other_structures_stay_json() -> None:
    assert as_text([{"type": "tool_result", "content": "x"}]) == '[{"content":"x","type":"tool_result"}]'
    assert as_text([{"type": "text", "text": "a"}, {"kind": "other"}]) == '[{"text":"a","type":"text"},{"kind":"other"}]'
    assert as_text({"stdout": "ok"}) == '{"stdout":"ok"}'


def test_inline_data_note() -> None:
    assert inline_data_note("data:image/jpeg;base64,/9j/4AAQ") == "data:image/jpeg;base64,<31 characters not kept>"
    assert inline_data_note("QUJD") == "<4 characters not kept>"
