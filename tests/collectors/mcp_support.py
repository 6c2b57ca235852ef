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


# A minimal stdio MCP server written into a test's directory (plain Python, starts in ~50 ms), for
# the interrupt and failure-label tests. `--pidfile F` appends its pid to F at start. Modes:
#   ok          echoes every call
#   hang-call   on a call whose text is "hang": starts a child (in the server's process group), writes
#               "SERVER_PID CHILD_PID" to `--marker F`, then never answers (sleeps)
#   crash-mid   on the second call: writes half a JSON-RPC line and a stderr line, exits 9
#   bigint      a tool schema's `maximum` and a call's structuredContent hold integers past 64 bits
#   prompts-only  declares only the prompts capability (tools/list: method not found), one prompt
#   empty-tools   declares tools and prompts, and lists no tool
TEST_SERVER = r'''
import json, os, subprocess, sys, time
arg = lambda k: sys.argv[sys.argv.index(k) + 1] if k in sys.argv else None
MODE = arg("--mode") or "ok"
if arg("--pidfile"):
    with open(arg("--pidfile"), "a") as f:
        f.write(f"{os.getpid()}\n")
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
calls = 0
for line in sys.stdin:
    req = json.loads(line)
    method, rid = req.get("method"), req.get("id")
    if rid is None:
        continue
    if method == "initialize":
        caps = {"prompts": {}} if MODE == "prompts-only" else {"tools": {}, "prompts": {}} if MODE == "empty-tools" else {"tools": {}}
        send({"jsonrpc": "2.0", "id": rid, "result": {"protocolVersion": req["params"]["protocolVersion"],
              "capabilities": caps, "serverInfo": {"name": "test-" + MODE, "version": "0.1"}}})
    elif method == "tools/list" and MODE == "prompts-only":
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
    elif method == "tools/list" and MODE == "empty-tools":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": []}})
    elif method == "tools/list" and MODE == "bigint":
        sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"tools": [{"name": "echo", "inputSchema": {"type": "object", '
                         '"properties": {"text": {"type": "string"}, "n": {"type": "integer", "maximum": %d}}}}]}}\n'
                         % (rid, 2**128 - 1)); sys.stdout.flush()
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{"name": "echo",
              "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}]}})
    elif method == "prompts/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"prompts": [{"name": "greet"}]}})
    elif method == "prompts/get":
        send({"jsonrpc": "2.0", "id": rid, "result": {"messages": [{"role": "user", "content": {"type": "text", "text": "hello"}}]}})
    elif method == "tools/call":
        calls += 1
        text = req["params"].get("arguments", {}).get("text", "")
        if MODE == "hang-call" and text == "hang":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(arg("--marker") + ".tmp", "w") as f:
                f.write(f"{os.getpid()} {child.pid}\n")
            os.rename(arg("--marker") + ".tmp", arg("--marker"))
            time.sleep(600)
        if MODE == "crash-mid" and calls == 2:
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "res' % rid); sys.stdout.flush()
            sys.stderr.write("test-server: out of memory (simulated)\n"); sys.stderr.flush()
            os._exit(9)
        if MODE == "bigint":  # 52!, as a big-number tool returns it
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {"content": [{"type": "text", "text": "52!"}], '
                             '"structuredContent": {"value": %d}}}\n' % (rid, 80658175170943878571660636856403766975289505440883277824000000000000))
            sys.stdout.flush()
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}})
'''


def write_test_server(d: Path) -> Path:
    p = d / "test_server.py"
    p.write_text(TEST_SERVER)
    return p
