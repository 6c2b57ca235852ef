"""Run browser task specs into a corpus: the core behind `worldline collect browser`.

Sessions run one after another in one chromium (a context each, so no state leaks between them);
each ends as a `web` trajectory (source format `browser-live`) committed through `CollectionSink`.
A step whose target the page does not show ends its session early (outcome `policy_error`: the
script no longer fits the site), with the turns it had; a step the page refuses (a missing ref, an
element that cannot take the action, a page load that failed) is an error turn, as an agent sees it."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from collectors.browser.session import BrowserDied, BrowserSession, FaultPlan, StepResult, Tab
from collectors.browser.spec import (
    ACTION_SPACE,
    Session,
    SiteSpec,
    Step,
    Target,
    load_spec,
    spec_files,
    step_of_call,
)
from collectors.live import SessionSummary, check_session_options, run_agent
from collectors.policies import Action, OpenAIChatPolicy, Policy
from collectors.specs import check_sessions, selected
from pipelines.sink import CollectionSink
from schemas.records import Trajectory, Turn, digest, dumps

COLLECTOR = "BrowserLiveCollector"
COLLECTOR_VERSION = "1"
SOURCE_FORMAT = "browser-live"
FAILED_OUTCOMES = ("policy_error", "agent_error", "browser_error")
MAX_RELOADS = 3  # page loads a scripted session retries after a failed one (503), per step


class BrowserSummary(SessionSummary):
    """Counts of one browser run (`SessionSummary`), with the requests to other origins it blocked."""

    def __init__(self, corpus: str, run_id: str):
        super().__init__("collect browser", SOURCE_FORMAT, FAILED_OUTCOMES, corpus, run_id)
        self.browser = ""
        self.blocked_requests = 0
        self.restarts = 0

    def note_lines(self) -> list[str]:
        notes = [f"requests to other origins blocked: {self.blocked_requests}"] if self.blocked_requests else []
        if self.restarts:
            notes.append(f"chromium died and was started again: {self.restarts} time{'s' * (self.restarts > 1)}")
        return notes


def collect(spec_paths: list[Path | str], out: Path | str, *, repeat: int = 1, only: list[str] | None = None,
            faults: FaultPlan | None = None, policy: str = "scripted", openai: dict[str, Any] | None = None,
            max_turns: int = 20, commit_every: int = 25, executable: Path | None = None,
            echo: Callable[[str], None] | None = None) -> BrowserSummary:
    """Record every session of every spec (a folder stands for its `*.yaml`) into the corpus at `out`.
    `policy` `openai`: an agent behind an OpenAI-compatible endpoint (`openai`: base_url, model,
    api_key) chooses the actions of every session, its steps unused. Specs, options and the agent's
    endpoint settings are checked before chromium starts."""
    from pipelines.store import Corpus

    agent = check_session_options(repeat, max_turns, policy, openai)
    Corpus(out).check_writable("--out")
    specs = [load_spec(f) for f in spec_files(spec_paths)]
    check_sessions(specs, only)
    jobs = [(spec, s, r) for spec in specs for s in spec.sessions for r in range(repeat)
            if selected(spec.name, s.name, only)]
    faults = faults or FaultPlan()
    run_id = uuid.uuid4().hex[:12]
    summary = BrowserSummary(str(out), run_id)
    t0 = time.monotonic()
    info = {"collector": "browser", "faults": faults.as_dict(), "specs": [str(s.path) for s in specs]}
    with CollectionSink(out, run_key=f"browser:{run_id}", source=",".join(str(s.path) for s in specs),
                        commit_every=commit_every, info=info) as sink, BrowserSession(executable) as browser:
        summary.browser = browser.version
        summary.environment = f"browser: chromium {browser.version}"
        for n, (spec, session, rep) in enumerate(jobs, 1):
            agent_policy = OpenAIChatPolicy(max_turns=max_turns, **agent) if policy == "openai" else None
            traj, meta = record(browser, spec, session, rep, faults, run_id, agent_policy)
            sink.add(traj, COLLECTOR, COLLECTOR_VERSION)
            _count(summary, spec, session, rep, traj, meta)
            if echo:
                echo(f"[{n}/{len(jobs)}] {spec.name}/{session.name}#{rep}: {len(traj.turns)} turns, {traj.outcome}")
        summary.restarts = browser.restarts
    summary.seconds = time.monotonic() - t0
    return summary


def _count(summary: BrowserSummary, spec: SiteSpec, session: Session, rep: int, traj: Trajectory,
           meta: dict[str, Any]) -> None:
    summary.count(f"{spec.name}/{session.name}#{rep}", traj, meta.get("failure"))
    summary.blocked_requests += len(meta.get("blocked_requests", []))


def record(browser: BrowserSession, spec: SiteSpec, session: Session, rep: int, faults: FaultPlan,
           run_id: str, policy: Policy | None = None) -> tuple[Trajectory, dict[str, Any]]:
    """One session as a trajectory, with its metadata (also in the trajectory, as JSON), its steps or
    `policy` choosing the actions; its context is closed whatever happens."""
    key = f"{session.name}#{rep}"
    collected = datetime.now(UTC)
    turns: list[Turn] = []
    failure = gave_up = None
    initial = None
    tab: Tab | None = None
    try:
        tab = browser.tab(spec, faults, key)
        initial = tab.start(session.start)
        if policy is not None:
            failure = _agent_turns(tab, policy, f"{session.task}\n\n{initial}", turns)
        for i, step in enumerate(session.steps if policy is None else []):
            ref = tab.resolve(step) if step.do != "goto" else None
            # the page is missing its target, or is an injected 503 (a step's own `ref` would act on the error page)
            if step.do != "goto" and (ref is None or (tab.status or 0) >= 500):
                if not _reload(tab, turns, f"step:{i}"):
                    gave_up = f"step {i}: {MAX_RELOADS} reloads of {tab.page.url} were answered 503"
                    break
                ref = tab.resolve(step)
                if ref is None:
                    failure = f"step {i}: the page ({tab.page.url}) shows no {step.target}"
                    break
            turns.append(_turn(tab.act(step, ref), f"step:{i}", step.target))
        if policy is None and not failure and not gave_up and not _reload(tab, turns, "end"):
            gave_up = f"the end: {MAX_RELOADS} reloads of {tab.page.url} were answered 503"
        # a session that injected faults defeated is judged on the page it ended on; a script that no
        # longer fits the site is the script's failure
        outcome = ("agent_error" if policy is not None else "policy_error") if failure else _judge(session, tab)
    except Exception as e:  # noqa: BLE001 - the browser itself failed: keep what was recorded, say why
        failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        outcome = "browser_error"
    finally:
        blocked, missing = (tab.blocked, tab.not_found) if tab is not None else ([], [])
        if tab is not None:
            with contextlib.suppress(Exception):  # a context of a browser that died
                tab.close()
    meta = {"spec": spec.name, "session": session.name, "repetition": rep, "run_id": run_id, "origin": spec.origin,
            "blocked_requests": blocked, "not_found": missing, "failure": failure, "gave_up": gave_up,
            "faults": faults.as_dict() or None}
    traj = Trajectory(
        domain="web", source_format=SOURCE_FORMAT, native_id=f"{spec.name}/{key}@{run_id}",
        record_digest=digest(run_id, spec.name, key, spec.sha256), turns=turns, task=session.task,
        action_space=dumps(ACTION_SPACE), initial_state=initial, agent=policy.name if policy else "scripted",
        model=getattr(policy, "model", None),
        outcome=outcome, reward=None if outcome in FAILED_OUTCOMES else float(outcome == "success"),
        env_fingerprint=dumps({"browser": f"chromium {browser.version}", "site_sha256": spec.sha256,
                               "playwright": browser.playwright_version}),
        collected_at=collected, license=spec.license,
        metadata=dumps({k: v for k, v in meta.items() if v not in (None, [])}),
        locator=f"session:{key}", source=str(spec.path),
    )
    return traj, meta


def _agent_turns(tab: Tab, policy: Policy, task: str, turns: list[Turn]) -> str | None:
    """The agent's session (`run_agent`): it sees the task with the start page's tree, then each
    observation; the turns go into `turns`."""

    def act(a: Action, locator: str) -> Turn:
        step = step_of_call(a.tool_name, a.tool_args)
        if isinstance(step, str):
            r = tab.refuse(a.text, a.tool_name or "", a.tool_args or {}, step)
        else:
            r = tab.act(step, step.ref)
        turn = _turn(r, locator, None)
        turn.thought, turn.tool_call_id = a.thought or None, a.tool_call_id
        turns.append(turn)
        return turn

    return run_agent(policy, task, ACTION_SPACE, act)


def _reload(tab: Tab, turns: list[Turn], where: str) -> bool:
    """After a page load an injected fault answered 503, load the page again, as an agent would, up to
    MAX_RELOADS times; False if the page is still the error then."""
    for k in range(MAX_RELOADS):
        if tab.status is None or tab.status < 500:
            return True
        turns.append(_turn(tab.act(Step("goto", url=tab.page.url), None), f"{where}:reload{k}", None))
    return tab.status is None or tab.status < 500


def _turn(r: StepResult, locator: str, target: Target | None) -> Turn:
    return Turn(
        kind="env", action=r.action, observation=r.observation, observation_kind="accessibility_tree",
        tool_name=r.tool_name, tool_args=dumps(r.tool_args), is_error=r.error is not None,
        started_at=r.started_at, duration_s=r.duration_s, perturbation=r.perturbation,
        state=dumps({"url": r.url, "title": r.title, "http_status": r.status}), locator=locator,
        metadata=dumps({"target": str(target)}) if target is not None else None,
    )


def _judge(session: Session, tab: Tab) -> str:
    e = session.expect
    if e is None:
        return "unjudged"
    try:
        text = tab.page.inner_text("body")
    except Exception as x:  # noqa: BLE001 - a page that does not answer: judged on the tree it last showed
        if not tab.alive(x):
            raise BrowserDied(tab.death(x)) from None
        text = tab.snapshot
    # the url is percent-encoded (`/my%20page.html`), the spec's path as written (`/my page.html`)
    ok = ((e.path is None or unquote(urlsplit(tab.page.url).path) == unquote(e.path))
          and (e.text is None or e.text in text))
    return "success" if ok else "failure"
