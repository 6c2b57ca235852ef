from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "sample" / "corpus"


@pytest.fixture
def sample() -> Path:
    return SAMPLE
