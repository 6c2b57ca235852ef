"""Fixtures shared by the stage tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.tiny_model import save_tiny_gpt2


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny GPT-2 saved as a local model directory (`tests.support.tiny_model`), once per module."""
    pytest.importorskip("torch")
    return save_tiny_gpt2(tmp_path_factory.mktemp("tiny") / "gpt2-tiny")
