"""Shared helpers of the MCP collector tests (real servers: mcp-server-git, mcp-server-time, the npm
filesystem and everything servers)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from pipelines.query import run_query

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "sandboxes" / "mcp"
DATA = Path(__file__).resolve().parent / "data" / "mcp"
NODE_MODULES = ROOT / "sandboxes" / "mcp-node" / "node_modules" / "@modelcontextprotocol"


def require_servers() -> None:
    """Fail (not skip) with what to run when a real server is missing on this machine."""
    missing = []
    if shutil.which("node") is None:
        missing.append("node (apt-get install nodejs)")
    for pkg in ("server-filesystem", "server-everything"):
        if not (NODE_MODULES / pkg / "dist" / "index.js").exists():
            missing.append(f"@modelcontextprotocol/{pkg} (run `make setup`, i.e. npm ci in sandboxes/mcp-node)")
    for exe in ("mcp-server-git", "mcp-server-time"):
        if not (ROOT / ".venv" / "bin" / exe).exists() and shutil.which(exe) is None:
            missing.append(f"{exe} (pip install -e '.[dev]')")
    if missing:
        pytest.fail("MCP servers missing: " + "; ".join(missing))


def alive(pid: int) -> bool:
    """Running (a zombie awaiting its reaper is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def sessions(corpus: Path) -> dict[str, dict[str, Any]]:
    """`server/session#rep` → the trajectory row (dict, JSON columns parsed) with its `turns` (dicts)."""
    cols, rows = run_query(corpus, "SELECT * FROM trajectories")
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        t = dict(zip(cols, r, strict=True))
        for k in ("metadata", "env_fingerprint", "action_space", "initial_state"):
            t[k] = orjson.loads(t[k]) if t[k] else None
        t["turns"] = []
        out[t["native_id"].split("@")[0]] = t
    tcols, trows = run_query(corpus, "SELECT * FROM turns ORDER BY trajectory_id, turn_index")
    by_id = {t["trajectory_id"]: t for t in out.values()}
    for r in trows:
        u = dict(zip(tcols, r, strict=True))
        u["metadata"] = orjson.loads(u["metadata"]) if u["metadata"] else {}
        by_id[u["trajectory_id"]]["turns"].append(u)
    return out


def obs(turn: dict[str, Any]) -> Any:
    return orjson.loads(turn["observation"])
