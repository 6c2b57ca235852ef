"""Sources of trajectories: importers of existing trace formats and live collectors.

`IMPORTERS` is the sniffing order: more specific formats before generic ones (the generic
OpenAI/ShareGPT chat importer comes last among JSON formats).
"""

from __future__ import annotations

from collectors.base import ImportContext, Importer
from collectors.registry import IMPORTERS, importer_by_name

__all__ = ["IMPORTERS", "ImportContext", "Importer", "importer_by_name"]
