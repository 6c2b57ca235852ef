"""Regenerate the README screenshots: docs/img/asset-graph.png and docs/img/report.png.

    .venv/bin/python docs/img/make_screenshots.py [--workdir /tmp/demo]

Needs Debian's chromium (`apt-get install -y chromium`); Playwright drives it, nothing is
downloaded. The report is the one `make demo` writes, over the bundled sample corpus. The asset
graph comes from `dagster dev` on a throw-away DAGSTER_HOME in which one (source, day) partition
of `ingested_traces` (with its checks) and `corpus_report` have been materialized, so the nodes
show real status.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from PIL import Image
from playwright.sync_api import expect, sync_playwright

from collectors.browser.session import CHROMIUM_ARGS, chromium_path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "img"
BIN = Path(sys.executable).parent
CHROMIUM = str(chromium_path())
MAX_BYTES = 400_000
SOURCE, DAY = "sample", "2026-11-01"
EXPAND_GROUPS = (
    'localStorage.setItem("asset-graph-open-graph-nodes-global-__GLOBAL__",'
    ' JSON.stringify({expanded: "global@global:ingestion,global@global:reporting"}));'
)


def save_png(png: bytes, path: Path) -> None:
    """Write a PNG, reduced to a 256-colour palette when it would exceed MAX_BYTES."""
    if len(png) > MAX_BYTES:
        img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
        buf = io.BytesIO()
        img.save(buf, format="PNG", optimize=True)
        png = buf.getvalue()
    path.write_bytes(png)
    print(f"{path.relative_to(ROOT)}: {len(png) / 1000:.0f} kB")


def report_png(browser, workdir: Path) -> None:
    corpus, html = workdir / "corpus", workdir / "report.html"
    shutil.rmtree(corpus, ignore_errors=True)
    # exit 3 = ingested, with some records quarantined (the sample has a few on purpose)
    rc = subprocess.run([BIN / "worldline", "ingest", ROOT / "data/sample/corpus", "--out", corpus], cwd=ROOT).returncode
    if rc not in (0, 3):
        sys.exit(f"worldline ingest failed ({rc})")
    subprocess.run([BIN / "worldline", "report", corpus, "--out", html], cwd=ROOT, check=True)
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.goto(html.resolve().as_uri())
    save_png(page.screenshot(full_page=True), OUT / "report.png")
    page.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_signals() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _materialize_one_partition(home: Path, inbox: Path, corpus: Path) -> None:
    import dagster as dg

    from dagster_project.assets import corpus_report, ingested_traces
    from dagster_project.checks import corpus_contracts
    from dagster_project.partitions import SOURCES, key
    from dagster_project.resources import CorpusResource

    resources = {"corpus": CorpusResource(root=str(corpus), inbox=str(inbox), settle_seconds=0)}
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(SOURCES.name, [SOURCE])
        dg.materialize([ingested_traces, corpus_contracts], partition_key=key(SOURCE, DAY),
                       resources=resources, instance=instance)
        dg.materialize([corpus_report], resources=resources, instance=instance)


def prepare_dagster_home(tmp: Path) -> dict[str, str]:
    """Inbox, corpus and DAGSTER_HOME with one partition materialized; the env for `dagster dev`."""
    home, inbox, corpus = tmp / "dagster_home", tmp / "inbox", tmp / "corpus"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (inbox / SOURCE).mkdir(parents=True)
    mtime = dt.datetime.fromisoformat(f"{DAY}T12:00:00+00:00").timestamp()
    for f in sorted((ROOT / "data/sample/corpus/swe-agent").glob("*.traj")):
        shutil.copyfile(f, inbox / SOURCE / f.name)
        os.utime(inbox / SOURCE / f.name, (mtime, mtime))
    _materialize_one_partition(home, inbox, corpus)
    return {**os.environ, "DAGSTER_HOME": str(home), "WORLDLINE_CORPUS": str(corpus),
            "WORLDLINE_INBOX": str(inbox), "WORLDLINE_SETTLE_SECONDS": "0"}


def asset_graph_png(browser, env: dict[str, str]) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [BIN / "dagster", "dev", "-m", "dagster_project.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        start_new_session=True, preexec_fn=_default_signals,
    )
    try:
        for _ in range(180):
            try:
                urllib.request.urlopen(f"{base}/server_info", timeout=5).close()
                break
            except OSError:
                time.sleep(1)
        else:
            sys.exit(f"dagster dev did not answer on {base}")
        req = urllib.request.Request(f"{base}/graphql", data=json.dumps({"query": "mutation { setNuxSeen }"}).encode(),
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).close()  # no "Join the community" modal
        context = browser.new_context(viewport={"width": 1280, "height": 720}, device_scale_factor=1)
        context.add_init_script(EXPAND_GROUPS)
        page = context.new_page()
        page.goto(f"{base}/asset-groups")
        for asset in ("ingested_traces", "corpus_report"):
            expect(page.get_by_text(asset, exact=True).first).to_be_visible(timeout=90_000)
        expect(page.get_by_text("Loading…")).to_have_count(0, timeout=90_000)
        page.wait_for_timeout(1000)  # let the graph settle
        save_png(page.screenshot(), OUT / "asset-graph.png")
        context.close()
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=20)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path("/tmp/demo"), help="where the demo corpus and report go")
    a = p.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"{CHROMIUM} is missing: apt-get install -y chromium")
    a.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        env = prepare_dagster_home(Path(tmp))  # in-process Dagster runs, before Playwright's event loop
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, "--headless=new"])
            try:
                report_png(browser, a.workdir)
                asset_graph_png(browser, env)
            finally:
                browser.close()


if __name__ == "__main__":
    main()
