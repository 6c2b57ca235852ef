"""The ordered list of importers the ingest driver sniffs with.

Order matters only among formats that could claim the same content: specific formats first, the
generic OpenAI/ShareGPT chat importer last.
"""

from __future__ import annotations

from collectors.agentworldbench import AgentWorldBenchImporter
from collectors.asciicast import AsciicastImporter
from collectors.atif import AtifImporter
from collectors.base import Importer
from collectors.browsergym import BrowserGymImporter
from collectors.chat import ChatImporter
from collectors.droidbot import DroidBotImporter
from collectors.fireact import FireActChatImporter, FireActTrajsImporter
from collectors.intercode import InterCodeImporter
from collectors.openhands import OpenHandsEventsImporter, OpenHandsOutputImporter
from collectors.swe_agent import SweAgentImporter
from collectors.tau_bench import TauBenchImporter
from collectors.uiautomator import UiAutomatorImporter

IMPORTERS: list[Importer] = [
    # directories
    DroidBotImporter(),
    BrowserGymImporter(),
    # raw streams
    AsciicastImporter(),
    UiAutomatorImporter(),
    # whole JSON documents
    SweAgentImporter(),
    OpenHandsEventsImporter(),
    InterCodeImporter(),
    TauBenchImporter(),
    FireActTrajsImporter(),
    AtifImporter(),
    # JSON lines
    OpenHandsOutputImporter(),
    AgentWorldBenchImporter(),
    FireActChatImporter(),
    ChatImporter(),
]


def importer_by_name(name: str) -> Importer:
    for imp in IMPORTERS:
        if imp.name == name:
            return imp
    raise KeyError(f"no importer named {name!r}; known: {[i.name for i in IMPORTERS]}")
