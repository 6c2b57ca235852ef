"""An empty corpus for tests that need one to exist (a folder with a valid manifest and no rows)."""

from __future__ import annotations

from pathlib import Path

import orjson

from pipelines.store import Corpus


def empty_corpus(path: Path) -> Path:
    """`path` made a corpus: the manifest a new corpus starts from, written as the store writes it."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_bytes(orjson.dumps(Corpus(path).manifest()))
    return path
