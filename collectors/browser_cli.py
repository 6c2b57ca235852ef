"""`worldline collect browser [SPEC...] --out CORPUS`: record scripted sessions in headless chromium.

Registered through `pipelines.cli.EXTENSIONS`. Exit codes: 0 every session ran its script (or its
agent finished); 3 some session could not (its page lacked an element the script names, the agent's
endpoint failed, or the browser failed; the summary lists them); 1 a bad spec, option or --out, or no chromium (the message says what to install); 130
interrupted (the sessions finished so far are written).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from collectors.live import add_session_arguments
from schemas.options import seed_option


def _cmd_collect_browser(a: argparse.Namespace) -> int:
    from collectors.browser.collect import collect
    from collectors.browser.session import BrowserUnavailable, FaultPlan
    from collectors.browser.spec import default_specs
    from collectors.live import agent_endpoint, run_session_command
    from collectors.specs import stderr_echo

    faults = FaultPlan.parse(a.faults, a.fault_rate, a.seed)
    return run_session_command("collect browser", lambda: collect(
        a.specs or default_specs(), a.out, repeat=a.repeat, only=a.session, faults=faults, policy=a.policy,
        openai=agent_endpoint(a), max_turns=a.max_turns, echo=None if a.quiet else stderr_echo), BrowserUnavailable)


def register(subparsers: argparse._SubParsersAction, collect_subparsers: argparse._SubParsersAction) -> None:
    """Add `worldline collect browser`."""
    from collectors.browser.session import FAULT_KINDS

    s = collect_subparsers.add_parser(
        "browser", help="record scripted sessions in headless chromium (accessibility trees), optionally with faults",
        description="Run each session of each site spec in a fresh browser context and write `web` trajectories "
                    "(source format browser-live): BrowserGym-style actions on refs, the accessibility tree after "
                    "each action as the observation.",
        epilog="fault kinds: " + "; ".join(f"{k}: {v}" for k, v in FAULT_KINDS.items()),
    )
    s.add_argument("specs", nargs="*", type=Path, help="site spec YAML files or folders (default: sandboxes/web/*.yaml)")
    s.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    s.add_argument("--faults", help="comma-separated fault kinds, or `all` (default: none)")
    s.add_argument("--fault-rate", type=float, help="probability of a fault per page load (default 0.25 with --faults)")
    s.add_argument("--seed", type=seed_option, default=0, help="fault seed (with site, session and repetition: reproducible)")
    add_session_arguments(s, "site")
    s.set_defaults(func=_cmd_collect_browser)
