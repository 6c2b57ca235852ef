"""`worldline sandbox build|list|reap` and `worldline collect sandbox`: thin calls into the core."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sandboxes.engine import EngineUnavailable
from schemas.options import at_least, int_option, seed_option

if TYPE_CHECKING:
    from sandboxes.tasks import TaskSpec

EXIT_ENGINE = 4  # no Docker engine answers, or it stopped answering mid-run (the message says how to start one)


def _echo(m: str) -> None:
    print(m, file=sys.stderr)


def _cmd_build(a: argparse.Namespace) -> int:
    from sandboxes.images import build_images, recipe_names

    known = recipe_names()
    unknown = [n for n in a.images if n not in known]
    if unknown:  # before the engine is asked anything
        raise ValueError(f"no image recipe {', '.join(map(repr, unknown))}; the images are {', '.join(known)}")
    for r in build_images(a.images, force=a.force, echo=_echo):
        state = "cached" if r.cached else f"built in {r.seconds:.1f}s"
        print(f"{r.name:10s} {r.tag:36s} {r.image_id[:19]}  {state}")
    return 0


def _cmd_list(a: argparse.Namespace) -> int:
    from sandboxes.engine import client
    from sandboxes.images import list_images
    from sandboxes.reaper import LABEL

    images = list_images()  # both asked before anything is printed: with no engine, only the error
    running = client().api.containers(all=True, filters={"label": LABEL})
    print(f"{'image':10s} {'tag':36s} {'built':5s} {'id':19s} {'MB':>7s}  created")
    for r in images:
        print(f"{r.name:10s} {r.tag:36s} {'yes' if r.built else 'no':5s} {(r.image_id or '-')[:19]:19s} "
              f"{r.size_mb if r.size_mb is not None else '-':>7}  {r.created or '-'}")
    print(f"sandbox containers now: {len(running)}")
    for c in running:
        lab = c.get("Labels") or {}
        print(f"  {(c.get('Names') or ['?'])[0].lstrip('/')}  {c.get('State')}  pid={lab.get('worldline.pid')} "
              f"session={lab.get('worldline.session')}")
    return 0


def _cmd_reap(a: argparse.Namespace) -> int:
    from sandboxes.reaper import reap_orphans

    rep = reap_orphans()
    print(f"removed {len(rep.containers)} orphaned containers, {len(rep.networks)} networks and {len(rep.volumes)} volumes")
    for n in rep.containers:
        print(f"  {n}")
    return 0


def _cmd_tasks(a: argparse.Namespace) -> int:
    from sandboxes.tasks import TASKS_DIR, load_many

    tasks = load_many(a.specs or [TASKS_DIR])
    for t in tasks:
        print(f"{t.id:26s} {t.domain:8s} {t.image:9s} {len(t.actions):2d} actions {len(t.checks):2d} checks  {t.path.name}")
    print(f"({len(tasks)} tasks)")
    return 0


def _run_collect(jobs: list, a: argparse.Namespace, **kw: object) -> int:
    """`collect` with the summary printed, also when the engine went away mid-run (then the
    EngineLost message follows, exit 4); 130 when interrupted, 3 with quarantined jobs or
    trajectories that their agent endpoint's failure ended."""
    from sandboxes.collect import EngineLost, collect

    try:
        summary = collect(jobs, a.out, workers=a.workers, fresh=a.fresh, again=a.again,
                          echo=(lambda m: None) if a.quiet else _echo, **kw)
    except EngineLost as e:
        print(e.summary.render(), flush=True)
        raise
    print(summary.render())
    if summary.interrupted:
        return 130
    return 3 if summary.quarantined or summary.policy_failed else 0


def _cmd_collect(a: argparse.Namespace) -> int:
    from sandboxes.collect import check_collect_options, plan_jobs
    from sandboxes.perturb import parse_list
    from sandboxes.tasks import load_many

    at_least("--max-turns", a.max_turns, 1)
    check_collect_options(a.out, a.workers)
    tasks = load_many(a.specs)
    factory = None
    if a.policy == "openai":
        from collectors.policies import OpenAIChatPolicy

        def factory(task: TaskSpec) -> OpenAIChatPolicy:
            return OpenAIChatPolicy(base_url=a.base_url, model=a.model, max_turns=a.max_turns)
        factory(tasks[0])  # fail now (not in a worker) when the endpoint settings are missing
    jobs = plan_jobs(tasks, a.only.split(",") if a.only else None, parse_list(a.perturb or []),
                     baseline=not a.no_baseline, policy_factory=factory)
    return _run_collect(jobs, a, seed=a.seed, warm=a.start_ahead)


def _cmd_replay(a: argparse.Namespace) -> int:
    from sandboxes.collect import check_collect_options
    from sandboxes.replay import plan_replay

    check_collect_options(a.out, a.workers)  # before reading the traces, let alone asking the engine
    plan = plan_replay(a.paths, limit=a.limit, allow_missing_env=a.allow_missing_env)
    if not plan.jobs:
        raise ValueError(f"nothing to replay in {', '.join(map(str, a.paths))}: {plan.render()}")
    print(plan.render(), file=sys.stderr)
    return _run_collect(plan.jobs, a)


def _guard(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """EngineUnavailable (also EngineLost, the engine gone mid-run) becomes exit 4 with its
    how-to-start message, an image that cannot be read
    or built exit 1 with the recipe named (one line each, not a traceback)."""
    from sandboxes.images import ImageError

    def run(a: argparse.Namespace) -> int:
        try:
            return fn(a)
        except EngineUnavailable as e:
            print(f"worldline {a.command}: error: {e}", file=sys.stderr)
            return EXIT_ENGINE
        except ImageError as e:
            print(f"worldline {a.command}: error: {e}", file=sys.stderr)
            return 1
    return run


def register(subparsers: argparse._SubParsersAction, collect_subparsers: argparse._SubParsersAction) -> None:
    from sandboxes.perturb import PERTURBATIONS
    from sandboxes.tasks import TASKS_DIR

    sb = subparsers.add_parser("sandbox", help="Docker sandbox images and containers")
    sub = sb.add_subparsers(dest="sandbox_command", required=True)
    s = sub.add_parser("build", help="build sandbox images (cached by a hash of their recipe)")
    s.add_argument("images", nargs="*", help="recipe names (default: all)")
    s.add_argument("--force", action="store_true", help="rebuild the named images even if their tag exists")
    s.set_defaults(func=_guard(_cmd_build))
    s = sub.add_parser("list", help="recipes, their tags, whether built; live sandbox containers")
    s.set_defaults(func=_guard(_cmd_list))
    s = sub.add_parser("reap", help="remove containers and volumes of collectors that are gone")
    s.set_defaults(func=_guard(_cmd_reap))
    s = sub.add_parser("tasks", help="validate and list task specs")
    s.add_argument("specs", nargs="*", type=Path, help=f"YAML files or directories (default: {TASKS_DIR})")
    s.set_defaults(func=_cmd_tasks)

    c = collect_subparsers.add_parser("sandbox", help="run task specs in Docker sandboxes and record trajectories",
                                      description="Perturbations: " + ", ".join(PERTURBATIONS) +
                                      ". Each task runs once unperturbed and once per --perturb.")
    c.add_argument("specs", nargs="+", type=Path, help="task spec YAML files or directories")
    c.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    c.add_argument("--workers", type=int_option, default=2, help="sandboxes running at once")
    c.add_argument("--perturb", action="append", metavar="NAME[:k=v,...]",
                   help="add a perturbed run of every task (repeatable; 'all' for every perturbation)")
    c.add_argument("--no-baseline", action="store_true", help="only the perturbed runs")
    c.add_argument("--only", help="comma-separated task ids")
    c.add_argument("--seed", type=seed_option, default=0, help="seed for perturbation parameters")
    c.add_argument("--fresh", action="store_true", help="a new container for every trajectory (no reset-and-reuse)")
    c.add_argument("--start-ahead", action="store_true",
                   help="start upcoming trajectories' sandboxes while the current ones run (experimental: no "
                        "measured gain so far, see docs/benchmarks.md)")
    c.add_argument("--policy", choices=["scripted", "openai"], default="scripted",
                   help="scripted: the spec's actions; openai: an agent behind an OpenAI-compatible endpoint")
    # the names `collect mcp|browser|android` use; --base-url / --model, the first ones, still work
    c.add_argument("--agent-base-url", "--base-url", dest="base_url",
                   help="OpenAI-compatible endpoint (default $WORLDLINE_AGENT_BASE_URL)")
    c.add_argument("--agent-model", "--model", dest="model", help="model name at the endpoint (default $WORLDLINE_AGENT_MODEL)")
    c.add_argument("--max-turns", type=int_option, default=20, help="with --policy openai: actions per trajectory at most")
    c.add_argument("--quiet", action="store_true", help="no per-trajectory progress lines")
    c.add_argument("--again", action="store_true",
                   help="also run the jobs that already have a trajectory in --out (by default a rerun skips them)")
    c.set_defaults(func=_guard(_cmd_collect))

    r = collect_subparsers.add_parser("replay", help="re-execute the shell actions of imported trajectories in sandboxes",
                                      description="InterCode bash (in a /testbed stand-in), OpenHands execute_bash and "
                                                  "SWE-agent shell commands; recorded actions are kept verbatim.")
    r.add_argument("paths", nargs="+", type=Path, help="trace files or directories (any format `worldline ingest` reads)")
    r.add_argument("--out", required=True, type=Path, help="corpus directory (created if missing)")
    r.add_argument("--workers", type=int_option, default=2, help="sandboxes running at once")
    r.add_argument("--limit", type=int_option, help="replay at most this many trajectories")
    r.add_argument("--fresh", action="store_true", help="a new container for every trajectory")
    r.add_argument("--quiet", action="store_true", help="no per-trajectory progress lines")
    r.add_argument("--again", action="store_true", help="also replay what already has a trajectory in --out")
    r.add_argument("--allow-missing-env", action="store_true",
                   help="also replay trajectories that acted on files the sandbox lacks (SWE repositories, recorded "
                        "working dirs); they start in the original's working dir, created empty")
    r.set_defaults(func=_guard(_cmd_replay))
