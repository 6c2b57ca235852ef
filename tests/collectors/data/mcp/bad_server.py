"""A deliberately misbehaving stdio MCP server, for the collector's failure handling tests.

Plain Python (no SDK import, starts in ~50 ms). Modes:
  ok                  a correct minimal server with one tool, `echo`
  exit                writes to stderr and exits 3 before reading anything
  hang                reads requests and never answers (not even initialize)
  garbage             answers initialize with a line that is not JSON
  garbage-after-init  correct until the first tools/call, answered with a non-JSON line
  die-after-init      correct until the first tools/call, then exits 7
  die-leaving-child   as die-after-init, after starting a child that keeps stdout open (no EOF)
  stubborn            correct, but ignores SIGTERM and stdin EOF, and starts a child that sleeps
                      (both must still be gone after the session)
"""

import json
import os
import signal
import subprocess
import sys
import time

MODE = sys.argv[sys.argv.index("--mode") + 1] if "--mode" in sys.argv else "ok"
PIDFILE = sys.argv[sys.argv.index("--pidfile") + 1] if "--pidfile" in sys.argv else None


def send(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main() -> None:
    if MODE == "exit":
        print("bad_server: configuration file missing", file=sys.stderr)
        sys.exit(3)
    if MODE == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        if PIDFILE:
            with open(PIDFILE, "w") as f:
                f.write(f"{os.getpid()} {child.pid}\n")
    for line in sys.stdin:
        req = json.loads(line)
        method, rid = req.get("method"), req.get("id")
        if rid is None:
            continue  # a notification
        if MODE == "hang":
            continue
        if method == "initialize":
            if MODE == "garbage":
                sys.stdout.write("Traceback (most recent call last): oops, this is not JSON-RPC\n")
                sys.stdout.flush()
                continue
            send({"jsonrpc": "2.0", "id": rid, "result": {
                "protocolVersion": req["params"]["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": f"bad-{MODE}", "version": "0.1"}}})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": rid, "result": {"tools": [{
                "name": "echo", "description": "Echo the text back",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]}})
        elif method == "tools/call":
            if MODE == "garbage-after-init":
                sys.stdout.write("DEBUG: handling call {not json\n")
                sys.stdout.flush()
                continue
            if MODE == "die-leaving-child":
                subprocess.Popen(["sleep", "300"])  # inherits stdout
            if MODE in ("die-after-init", "die-leaving-child"):
                print("bad_server: segmentation fault (simulated)", file=sys.stderr)
                sys.stderr.flush()
                os._exit(7)
            text = req["params"].get("arguments", {}).get("text", "")
            send({"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}], "isError": False}})
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
    if MODE == "stubborn":
        while True:  # ignores EOF too
            time.sleep(1)


if __name__ == "__main__":
    main()
