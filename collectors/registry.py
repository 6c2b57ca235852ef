"""The ordered list of importers the ingest driver sniffs with.

Order matters only among formats that could claim the same content: specific formats first, the
generic OpenAI/ShareGPT chat importer last.
"""

from __future__ import annotations

import importlib

from collectors.base import Importer

_ORDER = [
    # directories
    "collectors.droidbot:DroidBotImporter",
    "collectors.browsergym:BrowserGymImporter",
    "collectors.harbor:HarborJobImporter",
    "collectors.tau2_bench:Tau2BenchDirImporter",
    "collectors.openhands_v1:OpenHandsConversationImporter",
    "collectors.openhands:OpenHandsSessionImporter",
    # raw streams
    "collectors.asciicast:AsciicastImporter",
    "collectors.uiautomator:UiAutomatorImporter",
    "collectors.mcp_traffic:McpTrafficImporter",  # a text stream (a session spans lines); claims only JSON-RPC with MCP methods
    "collectors.android_control:AndroidControlImporter",  # binary TFRecord, claimed only when its length CRC checks: it cannot take the text formats' input, nor they its
    # whole JSON documents
    "collectors.asciicast:AsciicastV1Importer",  # asciinema 1.x: one document, output frames only
    "collectors.intercode:InterCodeImporter",  # before SWE-agent: an InterCode episode log also has trajectory + info
    "collectors.swe_agent:SweAgentImporter",
    "collectors.mini_swe_agent:MiniSweAgentImporter",
    "collectors.openhands:OpenHandsEventsImporter",
    "collectors.tau_bench:TauBenchImporter",
    "collectors.tau2_bench:Tau2BenchImporter",
    "collectors.fireact:FireActTrajsImporter",
    "collectors.atif:AtifImporter",
    # JSON lines
    "collectors.openhands:OpenHandsOutputImporter",
    "collectors.agentworldbench:AgentWorldBenchImporter",
    "collectors.fireact:FireActChatImporter",
    "collectors.chat:ChatImporter",
]


def _load() -> list[Importer]:
    out: list[Importer] = []
    for spec in _ORDER:
        module, cls = spec.split(":")
        out.append(getattr(importlib.import_module(module), cls)())
    return out


IMPORTERS: list[Importer] = _load()


def importer_by_name(name: str) -> Importer:
    for imp in IMPORTERS:
        if imp.name == name:
            return imp
    raise KeyError(f"no importer named {name!r}; known: {[i.name for i in IMPORTERS]}")
