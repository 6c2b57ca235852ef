"""`worldline collect mcp SPEC... --out CORPUS [--faults ...]`: record live MCP sessions.

Registered through `pipelines.cli.EXTENSIONS`. Exit codes: 0 every session ran; 3 the run
finished but some sessions failed (start, initialize, protocol, server death; the summary lists
them); 1 a usage-level error (bad spec, bad --out or --replay corpus, a corpus still locked after 10 minutes); 130 stopped by SIGTERM or SIGINT (servers
stopped, finished sessions written, the summary says so), as `worldline collect sandbox`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from schemas.options import int_option, seed_option

EXIT_SOME_FAILED = 3
EXIT_INTERRUPTED = 130


def _latency(text: str) -> tuple[float, float]:
    try:
        lo, _, hi = text.partition(",")
        pair = (float(lo), float(hi or lo))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected MIN,MAX seconds, got {text!r}") from None
    if not all(map(math.isfinite, pair)) or pair[0] < 0 or pair[1] < pair[0]:
        raise argparse.ArgumentTypeError(f"expected 0 <= MIN <= MAX, got {text!r}")
    return pair


def _cmd_collect_mcp(a: argparse.Namespace) -> int:
    import logging

    from collectors.mcp.collect import CollectionInterrupted, collect, stderr_echo

    # after an (injected) crash the SDK warns that it could not DELETE the HTTP session: expected here
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    from collectors.live import agent_endpoint
    from collectors.mcp.faults import FaultConfig
    from collectors.mcp.spec import default_specs

    specs = a.specs or default_specs()
    faults = FaultConfig.parse(a.faults, a.fault_rate, a.seed, a.fault_latency)
    try:
        summary = collect(
            specs, a.out, faults=faults, repeat=a.repeat, concurrency=a.concurrency, only=a.session,
            policy=a.policy, openai=agent_endpoint(a), replay_corpus=a.replay, replay_limit=a.replay_limit,
            call_timeout_s=a.call_timeout, echo=None if a.quiet else stderr_echo,
        )
    except CollectionInterrupted as e:
        print(e.summary.render(), flush=True)
        print(f"worldline collect mcp: interrupted by {e.summary.interrupted}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    print(summary.render())
    return EXIT_SOME_FAILED if summary.failed else 0


def register(subparsers: argparse._SubParsersAction, collect_subparsers: argparse._SubParsersAction) -> None:
    """Add `worldline collect mcp`."""
    from collectors.mcp.fault_kinds import FAULTS

    s = collect_subparsers.add_parser(
        "mcp", help="record sessions with MCP servers (stdio or streamable HTTP), optionally with injected faults",
        description="Start each server of each spec, run its sessions, and write `mcp` trajectories "
                    "(source format mcp-live) and their raw JSON-RPC (side table mcp_raw).",
        epilog="fault kinds: " + "; ".join(f"{k}: {v}" for k, v in FAULTS.items()),
    )
    s.add_argument("specs", nargs="*", type=Path, help="server spec YAML files (default: sandboxes/mcp/*.yaml)")
    s.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    s.add_argument("--faults", help="comma-separated fault kinds, or `all` (default: none)")
    s.add_argument("--fault-rate", type=float, help="probability of a fault per tool call (default 0.25 with --faults)")
    s.add_argument("--fault-latency", type=_latency, default=(0.1, 0.5), metavar="MIN,MAX",
                   help="added delay range of the `latency` fault, seconds (default 0.1,0.5)")
    s.add_argument("--seed", type=seed_option, default=0, help="fault RNG seed (with server and session: reproducible faults)")
    s.add_argument("--repeat", type=int_option, default=1, help="run each session this many times")
    s.add_argument("--session", action="append", help="only this session (`name` or `server/name`); repeatable")
    s.add_argument("--concurrency", type=int_option, default=2, help="sessions (server processes) at a time")
    s.add_argument("--policy", choices=["scripted", "openai"], help="override each session's policy")
    s.add_argument("--agent-base-url", help="OpenAI-compatible endpoint (default: $WORLDLINE_AGENT_BASE_URL)")
    s.add_argument("--agent-model", help="model name at the endpoint (default: $WORLDLINE_AGENT_MODEL)")
    s.add_argument("--replay", type=Path, metavar="CORPUS",
                   help="instead of the specs' sessions, replay tool-call sequences from this corpus "
                        "whose tools all exist on the server")
    s.add_argument("--replay-limit", type=int_option, help="at most this many replayed trajectories per server")
    s.add_argument("--call-timeout", type=float, help="seconds per request (default: the spec's timeouts.call_s)")
    s.add_argument("--quiet", action="store_true", help="no per-session progress lines")
    s.set_defaults(func=_cmd_collect_mcp)


if __name__ == "__main__":  # for a checkout whose cli.py lacks the extension hook
    from pipelines.cli import main

    sys.exit(main(["collect", "mcp", *sys.argv[1:]]))
