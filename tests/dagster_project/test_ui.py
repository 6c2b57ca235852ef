"""The Dagster UI end to end: `dagster dev` on the code location, a real browser (Debian's
chromium driven by Playwright) launches one (source, day) partition of `ingested_traces` through
the Materialize dialog, the run succeeds, and the corpus holds the dropped files.

Screenshots (and, on failure, the page and the `dagster dev` log) go to build/test-artifacts/.
Needs /usr/bin/chromium (`apt-get install -y chromium`); nothing is downloaded at run time.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from collectors.browser.session import CHROMIUM_ARGS, chromium_path
from pipelines.query import run_query

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "build" / "test-artifacts"
CHROMIUM = chromium_path()
SOURCE = "sample"
DAY = "2026-11-01"
MTIME = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()
FILES = ["ctf_pwn_warmup.traj", "function_calling_simple.traj", "pydicom__pydicom-1458.traj"]
# The graph page opens with every group expanded (the UI keeps that state in localStorage).
EXPAND_GROUPS = (
    'localStorage.setItem("asset-graph-open-graph-nodes-global-__GLOBAL__",'
    ' JSON.stringify({expanded: "global@global:ingestion,global@global:reporting"}));'
)
STARTUP_S = 120
UI_MS = 90_000  # every wait in the browser: dagster dev is slow on a busy 2-core machine
RUN_S = 240


_T0 = time.monotonic()


def _phase(what: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f} s] {what}")  # shown with -s, and on failure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_signals() -> None:
    # Shells that start jobs in the background can leave SIGINT/SIGTERM ignored, and an ignored
    # disposition survives exec: reset them so `dagster dev` can be stopped.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_group(proc: subprocess.Popen) -> None:
    """Stop `dagster dev` and everything it started (webserver, daemon, code servers, runs)."""
    pgid = proc.pid  # start_new_session: the child leads its own process group
    for sig, wait_s in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.25)


def _graphql(base: str, query: str) -> dict:
    req = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        out = json.load(r)
    assert "errors" not in out, out
    return out["data"]


def _wait_for_webserver(base: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited with {proc.returncode}:\n{log.read_text()[-4000:]}")
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    pytest.fail(f"dagster dev did not answer on {base} within {STARTUP_S} s:\n{log.read_text()[-4000:]}")


@contextlib.contextmanager
def dagster_ui(tmp_path: Path, sample: Path) -> Iterator[dict]:
    """A temp inbox with one source, a seeded DAGSTER_HOME and `dagster dev` serving them."""
    home, inbox, corpus = tmp_path / "dagster_home", tmp_path / "inbox", tmp_path / "corpus"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (inbox / SOURCE).mkdir(parents=True)
    for name in FILES:
        dst = inbox / SOURCE / name
        shutil.copyfile(sample / "swe-agent" / name, dst)
        os.utime(dst, (MTIME, MTIME))
    env = {**os.environ, "DAGSTER_HOME": str(home), "WORLDLINE_CORPUS": str(corpus),
           "WORLDLINE_INBOX": str(inbox), "WORLDLINE_SETTLE_SECONDS": "0"}
    env.pop("WORLDLINE_CONFIG", None)
    # The same step as `make ui`: register the inbox folder as a `sources` partition.
    seeded = subprocess.run([sys.executable, "-m", "dagster_project.seed"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert seeded.returncode == 0 and f"added ['{SOURCE}']" in seeded.stdout, seeded.stdout + seeded.stderr

    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "dagster-dev.log"
    dagster = Path(sys.executable).with_name("dagster")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(dagster), "dev", "-m", "dagster_project.definitions", "-h", "127.0.0.1", "-p", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_default_signals,
        )
    try:
        _wait_for_webserver(base, proc, log)
        _phase("webserver up")
        # The one-time "Join the Dagster community" modal would cover the page: mark it seen.
        assert _graphql(base, "mutation { setNuxSeen }")["setNuxSeen"] is True
        yield {"base": base, "corpus": corpus, "log": log}
    finally:
        _stop_group(proc)


def test_materialize_one_partition_through_the_ui(tmp_path: Path, sample: Path) -> None:
    if not CHROMIUM.exists():  # a failure, not a skip: CI must run this test
        pytest.fail(f"{CHROMIUM} is missing: this test drives Debian's chromium; "
                    "install it with `apt-get install -y chromium` (as root)")
    global _T0
    _T0 = time.monotonic()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("ui-*"):
        stale.unlink()
    with dagster_ui(tmp_path, sample) as ui:
        run_id = _launch_through_the_browser(ui["base"], ui["log"])
        _check_run_and_corpus(ui["base"], ui["corpus"], run_id)


def _launch_through_the_browser(base: str, log: Path) -> str:
    """Lineage → Catalog → ingested_traces → Materialize… → one partition → the run page: Success."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[*CHROMIUM_ARGS, "--headless=new"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        context.set_default_timeout(UI_MS)
        context.add_init_script(EXPAND_GROUPS)
        page = context.new_page()
        try:
            # The lineage of the code location: both assets, each in its group.
            page.goto(f"{base}/asset-groups")
            expect(page.get_by_text("Global asset lineage")).to_be_visible(timeout=UI_MS)
            for asset in ("ingested_traces", "corpus_report"):
                expect(page.get_by_text(asset, exact=True).first).to_be_visible(timeout=UI_MS)
            # (with many assets the graph zooms out and hides node details: no waiting on them)
            page.wait_for_timeout(2000)
            page.screenshot(path=ARTIFACTS / "ui-asset-graph.png")
            _phase("asset graph shown")

            # Catalog → the asset's page.
            page.get_by_role("link", name=re.compile(r"(^|\s)Catalog$")).click()  # "catalog_book Catalog"
            page.get_by_role("link", name="ingested_traces").first.click()
            page.wait_for_url("**/assets/ingested_traces**")

            # Materialize… → the partition dialog: one day, one source → "Launch 1 run".
            # accessible names start with the icon's label: "materialization Materialize…"
            page.get_by_role("button", name=re.compile(r"(^|\s)Materialize…$")).click()
            dialog = page.get_by_role("dialog").filter(has_text="Launch runs to materialize ingested_traces")
            expect(dialog).to_be_visible(timeout=UI_MS)
            day = dialog.get_by_placeholder("ex: 2024-01-01", exact=False)
            day.fill(DAY)
            day.press("Enter")
            dialog.get_by_text("Select a partition or create one").click()
            page.get_by_role("menuitem", name=re.compile(rf"^{SOURCE} {SOURCE}$")).click()  # "sample sample"
            dialog.get_by_text("Launch runs to materialize").click()  # closes the source list
            expect(dialog.get_by_text("1 partition", exact=True)).to_be_visible(timeout=UI_MS)
            dialog.get_by_role("button", name="Launch 1 run", exact=True).click()
            _phase("run launched")

            # The toast links to the run; its page must end in Success.
            view = page.get_by_role("link", name="View", exact=True)
            expect(view).to_have_attribute("href", re.compile(r"^/runs/[0-9a-f-]{36}$"), timeout=UI_MS)
            run_id = view.get_attribute("href").rsplit("/", 1)[-1]
            view.click()
            page.wait_for_url(f"**/runs/{run_id}")
            status = page.get_by_text("Success", exact=True).or_(page.get_by_text("Failure", exact=True))
            expect(status.first).to_be_visible(timeout=RUN_S * 1000)
            expect(page.get_by_text("Success", exact=True).first,
                   f"run {run_id} did not succeed (see build/test-artifacts/)").to_be_visible(timeout=5_000)
            expect(page.get_by_text(f"partition: {DAY}|{SOURCE}")).to_be_visible(timeout=UI_MS)
            page.screenshot(path=ARTIFACTS / "ui-run-success.png")
            _phase("run succeeded")
        except Exception:
            with contextlib.suppress(Exception):
                shutil.copyfile(log, ARTIFACTS / "ui-failure-dagster-dev.log")
                page.screenshot(path=ARTIFACTS / "ui-failure.png", full_page=True)
                (ARTIFACTS / "ui-failure.html").write_text(page.content())
                (ARTIFACTS / "ui-failure-aria.yaml").write_text(page.locator("body").aria_snapshot())
            raise
        finally:
            browser.close()
    return run_id


def _check_run_and_corpus(base: str, corpus: Path, run_id: str) -> None:
    # The same run, as the GraphQL API reports it.
    run = _graphql(base, f'{{ runOrError(runId: "{run_id}") {{ ... on Run {{ status tags {{ key value }} }} }} }}')
    run = run["runOrError"]
    tags = {t["key"]: t["value"] for t in run["tags"]}
    assert run["status"] == "SUCCESS", run
    assert tags["dagster/partition/source"] == SOURCE and tags["dagster/partition/day"] == DAY, tags
    assert tags.get("dagster/from_ui") == "true", tags

    # And the corpus holds exactly the dropped files, as trajectories.
    _, rows = run_query(corpus, "SELECT count(*) FROM trajectories")
    assert rows == [(len(FILES),)]
    _, rows = run_query(corpus, "SELECT count(*) FROM quarantine")
    assert rows == [(0,)]
