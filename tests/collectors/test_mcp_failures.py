"""Failure handling: servers that do not start, hang in initialize, write invalid JSON-RPC, die, or
ignore SIGTERM; each gets a clear error, an error turn, and the run goes on with the other sessions."""

from __future__ import annotations

import sys
from pathlib import Path

import orjson
import pytest

from collectors.mcp.collect import collect
from collectors.mcp.raw import read_raw
from collectors.mcp.spec import SpecError, load_spec
from pipelines.cli import main as cli_main
from tests.collectors.mcp_support import DATA, SPECS, alive, obs, require_servers, sessions
from tests.support.corpus import empty_corpus

MODES = ["ok", "exit", "hang", "garbage", "garbage-after-init", "die-after-init", "stubborn"]


def _spec(d: Path, mode: str) -> Path:
    p = d / f"bad-{mode}.yaml"
    p.write_text(f"""name: bad-{mode}
command: "{sys.executable}"
args: ["{DATA / 'bad_server.py'}", "--mode", "{mode}", "--pidfile", "{d}/{mode}.pids"]
timeouts: {{initialize_s: 2, call_s: 5, stop_grace_s: 0.3}}
sessions:
  - name: s
    task: echo twice
    steps:
      - {{tool: echo, args: {{text: one}}}}
      - {{tool: echo, args: {{text: two}}}}
""")
    return p


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory):
    require_servers()
    d = tmp_path_factory.mktemp("bad")
    specs = [_spec(d, m) for m in MODES]
    (d / "missing.yaml").write_text("""name: missing
command: /nonexistent/bin/mcp-server-nothing
install_hint: "pip install mcp-server-nothing"
sessions: [{name: s, task: t, steps: [{tool: echo}]}]
""")
    (d / "http-exits.yaml").write_text(f"""name: http-exits
transport: http
command: "{sys.executable}"
args: ["-c", "import sys; print('port in use', file=sys.stderr); sys.exit(4)"]
url: "http://127.0.0.1:{{port}}/mcp"
sessions: [{{name: s, task: t, steps: [{{tool: echo}}]}}]
""")
    (d / "bad-setup.yaml").write_text("""name: bad-setup
command: /bin/true
setup: [[git, -C, does-not-exist, status]]
sessions: [{name: s, task: t, steps: [{tool: echo}]}]
""")
    specs += [d / "missing.yaml", d / "http-exits.yaml", d / "bad-setup.yaml", SPECS / "filesystem.yaml"]
    out = d / "corpus"
    lines: list[str] = []
    summary = collect(specs, out, only=["s", "explore"], concurrency=3, echo=lines.append)
    return d, out, summary, sessions(out), lines


def test_every_session_is_recorded_and_the_run_goes_on(failed) -> None:
    _, _, summary, s, lines = failed
    assert {k: t["outcome"] for k, t in s.items()} == {
        "bad-ok/s#0": "completed", "bad-exit/s#0": "server_died", "bad-hang/s#0": "initialize_timeout",
        "bad-garbage/s#0": "invalid_jsonrpc", "bad-garbage-after-init/s#0": "invalid_jsonrpc",
        "bad-die-after-init/s#0": "server_died", "bad-stubborn/s#0": "completed", "missing/s#0": "start_failed",
        "http-exits/s#0": "start_failed", "bad-setup/s#0": "setup_failed", "filesystem/explore#0": "completed"}
    assert (summary.sessions, summary.failed) == (11, 8)
    assert [u["observation"] for u in s["bad-ok/s#0"]["turns"]] == [
        '{"content":[{"text":"one","type":"text"}],"isError":false}', '{"content":[{"text":"two","type":"text"}],"isError":false}']
    assert len(s["filesystem/explore#0"]["turns"]) == 4
    assert len(lines) == 11 and all(line.startswith("[") for line in lines)


def test_failures_have_clear_errors_and_an_error_turn(failed) -> None:
    d, out, _, s, _ = failed
    err = {k: t["metadata"]["error"] for k, t in s.items()}
    assert err["missing/s#0"] == ("missing.yaml (missing): cannot start server: '/nonexistent/bin/mcp-server-nothing' "
                                  "not found (pip install mcp-server-nothing)")
    assert err["bad-exit/s#0"] == ("bad-exit.yaml (bad-exit): server exited with code 3 during initialize; "
                                   "server stderr: bad_server: configuration file missing")
    assert s["bad-exit/s#0"]["metadata"]["server_stderr_tail"] == "bad_server: configuration file missing\n"
    assert "server_stderr_tail" not in s["bad-ok/s#0"]["metadata"]
    assert err["bad-hang/s#0"].startswith("bad-hang.yaml (bad-hang): no answer to initialize within 2s (server pid ")
    assert err["bad-hang/s#0"].endswith("still running: True)")
    assert err["bad-garbage/s#0"].startswith("bad-garbage.yaml (bad-garbage): server sent invalid JSON-RPC during "
                                             "initialize: invalid JSON-RPC (")
    assert err["bad-garbage-after-init/s#0"].startswith(
        "bad-garbage-after-init.yaml (bad-garbage-after-init): server sent invalid JSON-RPC during tools/call echo: ")
    assert err["bad-die-after-init/s#0"] == ("bad-die-after-init.yaml (bad-die-after-init): server exited with code 7 "
                                             "during tools/call echo; server stderr: bad_server: segmentation fault (simulated)")
    assert err["http-exits/s#0"].startswith("http-exits.yaml (http-exits): server exited before listening on 127.0.0.1:")
    assert err["http-exits/s#0"].endswith("; server stderr: port in use")
    assert err["bad-setup/s#0"].startswith(f"{d}/bad-setup.yaml: setup[0]: ['git', '-C', 'does-not-exist', 'status'] exited with 128")
    # a failure before any action is one error turn naming the stage
    for key, stage in (("missing/s#0", "initialize"), ("bad-hang/s#0", "initialize"), ("bad-exit/s#0", "initialize"),
                       ("bad-setup/s#0", "setup")):
        [turn] = s[key]["turns"]
        assert (turn["action"], turn["observation_kind"], turn["is_error"]) == (stage, "error", True)
        assert obs(turn) == {"error": {"message": err[key], "stage": stage}}
        assert turn["metadata"]["harness_error"] == s[key]["outcome"]
    # invalid JSON-RPC: the observation is what the server actually wrote
    assert [u["observation"] for u in s["bad-garbage/s#0"]["turns"]] == [
        "Traceback (most recent call last): oops, this is not JSON-RPC"]
    [bad_call] = s["bad-garbage-after-init/s#0"]["turns"]
    assert (bad_call["action"], bad_call["observation"], bad_call["is_error"]) == (
        'echo({"text":"one"})', "DEBUG: handling call {not json", True)
    assert bad_call["metadata"]["protocol_violation"].endswith("DEBUG: handling call {not json")
    raw = read_raw(out, s["bad-garbage-after-init/s#0"]["trajectory_id"], 0)
    assert [(m["dir"], m["raw"]) for m in raw][-1] == ("s2c", "DEBUG: handling call {not json")
    assert raw[-1]["note"].startswith("invalid JSON-RPC (")
    # a server dying mid-session: what came before is kept, then the error turn
    [died] = s["bad-die-after-init/s#0"]["turns"]
    assert died["observation"] == '{"error":{"code":-32000,"message":"Connection closed"}}'
    assert (died["metadata"]["server_exit_code"], died["metadata"]["server_stderr_tail"]) == (
        7, "bad_server: segmentation fault (simulated)\n")
    assert s["bad-die-after-init/s#0"]["action_space"] == [{"name": "echo", "description": "Echo the text back",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}]


def test_a_server_dying_with_a_child_holding_its_stdout_is_server_died(tmp_path: Path) -> None:
    """A server that started a helper (inheriting stdout) and then exited never closed stdout: each
    later call waited out its 5 s timeout, recorded as a timeout, and the session passed for completed."""
    import time

    spec = _spec(tmp_path, "die-leaving-child")
    t0 = time.monotonic()
    summary = collect([spec], tmp_path / "c")
    took = time.monotonic() - t0
    [t] = sessions(tmp_path / "c").values()
    assert (t["outcome"], summary.failed) == ("server_died", 1)
    assert t["metadata"]["error"] == ("bad-die-leaving-child.yaml (bad-die-leaving-child): server exited with code 7 during "
                                      "tools/call echo; server stderr: bad_server: segmentation fault (simulated)")
    [died] = t["turns"]
    assert died["observation"] == '{"error":{"code":-32000,"message":"Connection closed"}}'
    assert took < 5  # not one call timeout
    assert [p for p in summary.pids if alive(p)] == []


def test_no_process_survives_even_a_stubborn_server(failed) -> None:
    d, _, summary, s, _ = failed
    assert [p for p in summary.pids if alive(p)] == []
    server_pid, child_pid = (int(x) for x in (d / "stubborn.pids").read_text().split())
    assert s["bad-stubborn/s#0"]["metadata"]["server_pid"] == server_pid
    assert (alive(server_pid), alive(child_pid)) == (False, False)
    assert s["bad-stubborn/s#0"]["metadata"]["server_exit_code"] == -9  # SIGTERM ignored: SIGKILLed
    assert s["bad-ok/s#0"]["metadata"]["server_exit_code"] == 0  # exited on stdin EOF, as the spec asks


def test_cli_exit_code_when_sessions_fail(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    rc = cli_main(["collect", "mcp", str(_spec(tmp_path, "exit")), str(_spec(tmp_path, "ok")), "--out", str(tmp_path / "c"), "--quiet"])
    assert rc == 3
    out = capsys.readouterr().out
    assert "2 sessions, 3 turns" in out and "(1 failed)" in out
    assert "FAILED bad-exit/s#0: server_died: bad-exit.yaml (bad-exit): server exited with code 3 during initialize" in out


def test_spec_errors_name_the_file_and_key(tmp_path: Path) -> None:
    cases = {
        "name: x\ncommand: y\nsesions: []\n": r"x.yaml: unknown keys \['sesions'\]",
        "name: x\nsessions: []\n": "a stdio server needs `command`",
        "name: x\ntransport: http\ncommand: y\n": "an http server needs `url`",
        "name: x\ncommand: y\nsessions: [{name: s, steps: [{tool: a, fault: slow}]}]\n": r"sessions\[0\].steps\[0\]: unknown fault 'slow'",
        "name: x\ncommand: y\nsessions: [{name: s, steps: [{tool: a, prompt: b}]}]\n": "exactly one of tool, resource, prompt",
        "name: x\ncommand: y\nsessions: [{name: s, steps: [{tool: a}]}, {name: s, steps: [{tool: b}]}]\n": "session names repeat",
        "name: x\ncommand: y\ntimeouts: {call: 3}\n": r"timeouts: unknown keys \['call'\]",
        # values of the wrong type or range: a traceback, a message naming no file or key, or every session failing
        "name: x\ncommand: y\nsessions: [{name: s, max_turns: lots, steps: [{tool: a}]}]\n":
            r"x.yaml: sessions\[0\].max_turns: expected an integer, got 'lots'",
        "name: x\ncommand: y\nsessions: [{name: s, repeat: [2], steps: [{tool: a}]}]\n":
            r"sessions\[0\].repeat: expected an integer, got \[2\]",
        "name: x\ncommand: y\nsessions: [{name: s, repeat: 0, steps: [{tool: a}]}]\n": r"sessions\[0\].repeat: must be at least 1, got 0",
        "name: x\ncommand: y\nsessions: [{name: s, steps: }]\n": r"sessions\[0\].steps: expected a list of steps, got None",
        "name: x\ncommand: y\ntimeouts: {call_s: soon}\n": r"x.yaml: timeouts.call_s: expected a finite number, got 'soon'",
        "name: x\ncommand: y\ntimeouts: {call_s: 0}\n": r"timeouts.call_s: must be above 0, got 0",
        "name: x\ncommand: y\ntimeouts: {initialize_s: -1}\n": r"timeouts.initialize_s: must be above 0, got -1",
        "name: x\ncommand: y\ntimeouts: {call_s: .nan}\n": r"timeouts.call_s: expected a finite number, got nan",
        "name: x\ncommand: y\npackage: mcp-server-time\n": r"x.yaml: package: expected a mapping of names to values",
        "name: x\ncommand: y\nenv: [A=1]\n": r"x.yaml: env: expected a mapping of names to values",
        "name: x\ncommand: y\nargs: --local-timezone UTC\n": r"x.yaml: args: expected a list of arguments \(one per item\)",
        "name: x\ncommand: y\nsetup: [git init -q repo]\n":
            r"x.yaml: setup\[0\]: expected a command as a list of arguments \(\['git', 'init', '-q', 'repo'\]\)",
        "name: x\ncommand: y\nsetup: [{write: {path: a}}, {write: {text: b}}]\n": r"setup\[1\].write: needs `path`",
    }
    for text, message in cases.items():
        p = tmp_path / "x.yaml"
        p.write_text(text)
        with pytest.raises(SpecError, match=message):
            load_spec(p)
    with pytest.raises(FileNotFoundError, match="no such MCP server spec"):
        load_spec(tmp_path / "none.yaml")
    assert cli_main(["collect", "mcp", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "c")]) == 1


def test_a_blank_task_or_name_is_missing_not_none(tmp_path: Path) -> None:
    """`task:` left blank was stored (and given to an agent) as the text "None"."""
    p = tmp_path / "x.yaml"
    p.write_text("name: x\ncommand: y\nsessions: [{name: , task: , steps: [{tool: a}]}]\n")
    [s] = load_spec(p).sessions
    assert (s.name, s.task) == ("session-0", "")


def test_a_spec_named_twice_runs_once(tmp_path: Path) -> None:
    """The spec and its folder (or the spec twice) on the command line: every session was recorded
    twice under one trajectory id, and `worldline check` failed unique_trajectory_id."""
    specs = tmp_path / "specs"
    specs.mkdir()
    p = _spec(specs, "ok")
    summary = collect([p, specs, specs / ".." / "specs" / p.name], tmp_path / "c")
    assert (summary.sessions, summary.turns) == (1, 2)
    assert len(sessions(tmp_path / "c")) == 1


def test_replay_refuses_session_and_policy(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--replay ran every replayable trajectory, whatever --session or --policy said."""
    p = _spec(tmp_path, "ok")
    collect([p], tmp_path / "c")
    assert cli_main(["collect", "mcp", str(p), "--replay", str(tmp_path / "c"), "--session", "nosuch",
                     "--out", str(tmp_path / "r")]) == 1
    assert capsys.readouterr().err == (f"worldline collect: error: --replay replays the trajectories of {tmp_path / 'c'}: "
                                       "--session do not apply to it\n")
    assert cli_main(["collect", "mcp", str(p), "--replay", str(tmp_path / "c"), "--policy", "openai", "--session", "s",
                     "--out", str(tmp_path / "r")]) == 1
    assert "--session and --policy do not apply to it" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("latency", ["0.1,nan", "nan", "inf", "0.1,inf"])
def test_a_latency_that_is_no_finite_number_is_a_usage_error(latency: str, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture) -> None:
    """`--fault-latency 0.1,nan` was accepted, and every session ended in an error."""
    with pytest.raises(SystemExit) as e:
        cli_main(["collect", "mcp", "--faults", "latency", "--fault-latency", latency, "--out", str(tmp_path / "c")])
    assert e.value.code == 2 and "expected 0 <= MIN <= MAX" in capsys.readouterr().err


def test_shipped_specs_load() -> None:
    specs = {p.name: load_spec(p) for p in sorted(SPECS.glob("*.yaml"))}
    assert {n: (s.name, s.transport, [x.name for x in s.sessions]) for n, s in specs.items()} == {
        "everything-http.yaml": ("everything", "http", ["tools", "resources-and-prompts"]),
        "filesystem.yaml": ("filesystem", "stdio", ["explore", "edit", "outside-and-missing"]),
        "git.yaml": ("git", "stdio", ["inspect", "commit-notes", "branch-work"]),
        "time.yaml": ("time", "stdio", ["convert", "now-and-bad-zone"]),
    }
    assert orjson.loads(orjson.dumps(specs["git.yaml"].env))["GIT_AUTHOR_DATE"] == "1768471200 +0000"


def test_http_server_dying_mid_session(tmp_path: Path) -> None:
    """Killed from outside (not by the fault proxy): the HTTP client's connection error becomes
    `server_died`, after the turn that succeeded."""
    import dataclasses
    import os
    import signal
    import time

    import anyio

    from collectors.mcp.faults import FaultConfig
    from collectors.mcp.recorder import SessionRecorder
    from collectors.mcp.spec import SessionSpec, StepSpec
    from collectors.policies import ScriptedPolicy

    require_servers()
    spec = dataclasses.replace(load_spec(SPECS / "everything-http.yaml"), sessions=[])
    session = SessionSpec("dies", "echo three times", [StepSpec("tool", "echo", {"message": "x"}) for _ in range(3)])

    class KillAfterFirst(ScriptedPolicy):
        def next_action(self, history):
            if len(history) == 1:
                os.killpg(rec.proc.pid, signal.SIGKILL)
                time.sleep(0.3)
            return super().next_action(history)

    rec = SessionRecorder(spec, session, KillAfterFirst([s.action({}) for s in session.steps]), faults=FaultConfig(),
                          run_id="t", call_timeout_s=5)
    r = anyio.run(rec.run)
    assert r.outcome == "server_died"
    assert r.error.startswith('everything-http.yaml (everything): server exited with code -9 during echo({"message":"x"}) (')
    ok, died = r.trajectory.turns
    assert (ok.observation, ok.is_error) == ('{"content":[{"text":"Echo: x","type":"text"}]}', False)
    assert (died.action, died.is_error, died.observation_kind) == ('echo({"message":"x"})', True, "error")
    assert not alive(r.pid)


@pytest.mark.parametrize(("outcome", "passed"), [("listing_timeout", True), ("initialize_timeout", True), ("done", False)])
def test_fingerprint_contract_expects_an_action_space_only_past_the_listing(tmp_path, outcome: str, passed: bool) -> None:
    """A session that timed out listing its tools has no action space; that is its outcome, not a
    recording error (the collector's failed outcomes and the contract's share one list)."""
    from collectors.mcp.contracts import fingerprinted
    from collectors.mcp.recorder import FAILED_OUTCOMES, SOURCE_FORMAT, STARTUP_FAILURES
    from pipelines.query import connect
    from pipelines.sink import CollectionSink
    from schemas.records import Trajectory, Turn

    assert set(STARTUP_FAILURES) < set(FAILED_OUTCOMES)
    t = Trajectory(domain="mcp", source_format=SOURCE_FORMAT, native_id="s", record_digest="d", outcome=outcome,
                   turns=[Turn(kind="message", thought="x", observation_kind="none")], locator="session:s", source="spec")
    with CollectionSink(tmp_path / "c", run_key="mcp:test", source="mcp") as sink:
        sink.add(t, "McpLiveCollector")
    r = fingerprinted(connect(tmp_path / "c"))
    assert (r.passed, r.metadata) == (passed, {"sessions": 0 if passed else 1, "missing": 0 if passed else 1})


AGENT_ENDPOINT = ("needs an agent endpoint: --agent-base-url and --agent-model, "
                  "or WORLDLINE_AGENT_BASE_URL and WORLDLINE_AGENT_MODEL")


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "openai"], f"the openai policy (session bad-ok/s) {AGENT_ENDPOINT}"),  # was an ExceptionGroup traceback
    (["--session", "nosuch"], "--session nosuch: no such session in {spec}; the sessions are bad-ok/s"),
    (["--session", "s", "--session", "bad-ok/t"], "--session bad-ok/t: no such session in {spec}; the sessions are bad-ok/s"),
    (["--repeat", "0"], "--repeat must be at least 1 (got 0)"),
    (["--repeat", "-1"], "--repeat must be at least 1 (got -1)"),
    (["--call-timeout", "-1"], "--call-timeout must be above 0 seconds (got -1.0)"),
    (["--call-timeout", "0"], "--call-timeout must be above 0 seconds (got 0.0)"),
    (["--concurrency", "0"], "--concurrency must be at least 1 (got 0)"),
    (["--replay", "elsewhere", "--replay-limit", "0"], "--replay-limit must be at least 1 (got 0)"),
    (["--fault-rate", "1"], "--fault-rate 1.0 without --faults: a rate with no fault kinds injects nothing; name them with "
                            "--faults KIND,... or --faults all (known: empty_result, latency, rate_limit, schema_violation, "
                            "server_crash, timeout, tool_error, truncated)"),
    # a delay past the call's timeout was recorded as `latency` while the client saw a timeout
    (["--faults", "latency", "--fault-latency", "3,3", "--call-timeout", "2"],
     "--fault-latency up to 3s is not under the call timeout of bad-ok (2s): such a delay is a timeout, not latency; "
     "lower it or raise --call-timeout"),
])
def test_cli_rejects_options_before_any_server_starts(args: list[str], message: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("WORLDLINE_AGENT_BASE_URL", "WORLDLINE_AGENT_MODEL"):
        monkeypatch.delenv(var, raising=False)
    spec, out = _spec(tmp_path, "ok"), tmp_path / "c"
    assert cli_main(["collect", "mcp", str(spec), "--out", str(out), "--quiet", *args]) == 1
    assert capsys.readouterr().err == f"worldline collect: error: {message.format(spec=spec.resolve())}\n"
    assert not out.exists() and not (tmp_path / "ok.pids").exists()  # no corpus, no server process


@pytest.mark.parametrize(("case", "message"), [
    ("file", "--out {out} is a file, not a corpus directory"),
    ("inside", "{out} is inside the corpus {corpus}; write a corpus into a folder of its own"),
    ("replay", "{replay} is not a corpus (no manifest.json); create one with `worldline ingest`"),
])
def test_cli_checks_the_corpora_before_any_server_starts(case: str, message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """These were found only after every session had run (then an ExceptionGroup traceback, the
    sessions lost)."""
    corpus = empty_corpus(tmp_path / "corpus")
    spec, replay = _spec(tmp_path, "ok"), tmp_path / "traces"
    replay.mkdir()
    out = {"file": tmp_path / "afile", "inside": corpus / "mcp", "replay": tmp_path / "c"}[case]
    if case == "file":
        out.write_text("x")
    extra = ["--replay", str(replay)] if case == "replay" else []
    assert cli_main(["collect", "mcp", str(spec), "--out", str(out), "--quiet", *extra]) == 1
    assert capsys.readouterr().err == f"worldline collect: error: {message.format(out=out, corpus=corpus, replay=replay)}\n"
    assert not (tmp_path / "ok.pids").exists() and not (tmp_path / "c").exists() and not (corpus / "mcp").exists()


def test_a_task_group_error_reaches_the_caller_as_itself() -> None:
    """A locked corpus or a full disk inside the run's task group is raised as that error (the
    command line reports it in one line); several errors stay a group."""
    from collectors.mcp.collect import _sole_error
    from pipelines.store import CorpusLocked

    locked = CorpusLocked("corpus c is being written by another process (pid 1)")
    with pytest.raises(CorpusLocked) as e, _sole_error():
        raise ExceptionGroup("outer", [ExceptionGroup("inner", [locked])])
    assert e.value is locked
    with pytest.raises(ExceptionGroup) as g, _sole_error():
        raise ExceptionGroup("two", [locked, OSError("disk full")])
    assert len(g.value.exceptions) == 2


def test_a_directory_of_specs_stands_for_its_specs(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["collect", "mcp", str(empty), "--out", str(tmp_path / "c"), "--quiet"]) == 1  # was IsADirectoryError
    assert capsys.readouterr().err == f"worldline collect: error: {empty}: a directory without MCP server specs (*.yaml) in it\n"
    with pytest.raises(SpecError, match="a directory, not an MCP server spec"):
        load_spec(empty)
    specs = tmp_path / "specs"
    specs.mkdir()
    _spec(specs, "ok")
    (specs / "notes.txt").write_text("not a spec")
    summary = collect([specs], tmp_path / "c")
    assert (summary.sessions, summary.failed, summary.turns, dict(summary.outcomes)) == (1, 0, 2, {"completed": 1})


def test_http_url_with_nothing_listening_is_start_failed(tmp_path: Path) -> None:
    """No server command, nothing on the port: the session could not connect (not a harness `error`)."""
    p = tmp_path / "http-nolisten.yaml"
    p.write_text("""name: http-nolisten
transport: http
url: "http://127.0.0.1:1/mcp"
timeouts: {start_s: 3, initialize_s: 3, call_s: 3}
sessions: [{name: s, task: t, steps: [{tool: echo}]}]
""")
    summary = collect([p], tmp_path / "c")
    [t] = sessions(tmp_path / "c").values()
    message = ("http-nolisten.yaml (http-nolisten): cannot connect to http://127.0.0.1:1/mcp: "
               "ConnectError: All connection attempts failed")
    assert (t["outcome"], t["metadata"]["error"]) == ("start_failed", message)
    assert summary.failures == [f"http-nolisten/s#0: start_failed: {message}"]
    [turn] = t["turns"]
    assert (turn["action"], turn["observation_kind"], turn["is_error"]) == ("initialize", "error", True)
    assert obs(turn) == {"error": {"message": message, "stage": "initialize"}}
    assert turn["metadata"]["harness_error"] == "start_failed"
    assert "notes" not in t["metadata"]  # an expected failure: no traceback


def test_server_dying_with_half_a_line_written_is_server_died(tmp_path: Path) -> None:
    """A line cut off by the server's exit is a symptom of the death, not invalid JSON-RPC."""
    from tests.collectors.mcp_support import write_test_server

    server = write_test_server(tmp_path)
    p = tmp_path / "crash-mid.yaml"
    p.write_text(f"""name: crash-mid
command: "{sys.executable}"
args: ["{server}", "--mode", "crash-mid", "--pidfile", "{tmp_path}/pids"]
timeouts: {{initialize_s: 5, call_s: 5, stop_grace_s: 0.3}}
sessions:
  - name: s
    task: echo thrice
    steps: [{{tool: echo, args: {{text: one}}}}, {{tool: echo, args: {{text: two}}}}, {{tool: echo, args: {{text: three}}}}]
""")
    summary = collect([p], tmp_path / "c")
    [t] = sessions(tmp_path / "c").values()
    message = ("crash-mid.yaml (crash-mid): server exited with code 9 during tools/call echo "
               "(its last line on stdout was cut off: {\"jsonrpc\": \"2.0\", \"id\": 4, \"res); "
               "server stderr: test-server: out of memory (simulated)")
    assert (t["outcome"], t["metadata"]["error"], t["metadata"]["server_exit_code"]) == ("server_died", message, 9)
    assert summary.failures == [f"crash-mid/s#0: server_died: {message}"]
    ok, died = t["turns"]
    assert ok["observation"] == '{"content":[{"text":"one","type":"text"}],"isError":false}'
    assert (died["action"], died["observation"], died["is_error"]) == (
        'echo({"text":"two"})', '{"error":{"code":-32000,"message":"Connection closed"}}', True)
    assert (died["metadata"]["server_exit_code"], died["metadata"]["server_stderr_tail"]) == (
        9, "test-server: out of memory (simulated)\n")
    assert "protocol_violation" not in died["metadata"]
    # the cut-off line is still in the raw JSON-RPC, noted as such
    raw = read_raw(tmp_path / "c", t["trajectory_id"], 1)
    assert (raw[-1]["dir"], raw[-1]["raw"], raw[-1]["note"]) == (
        "s2c", '{"jsonrpc": "2.0", "id": 4, "res', "cut off: no newline before the end of stdout")
    [pid] = [int(x) for x in (tmp_path / "pids").read_text().split()]
    assert not alive(pid)


def test_a_recorder_bug_in_one_session_is_quarantined_and_the_others_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Building one session's trajectory raises (a harness bug): that session becomes a
    `collector_error` quarantine row naming it, the run goes on, and the counts reconcile."""
    import tempfile

    import duckdb

    from collectors.mcp.recorder import SessionRecorder

    spec = _spec(tmp_path, "ok")
    spec.write_text(spec.read_text() + """  - name: t
    task: echo once
    steps:
      - {tool: echo, args: {text: three}}
""")
    real = SessionRecorder._trajectory

    def broken(self, *a, **k):
        if self.session.name == "t":
            raise RuntimeError("boom in the recorder")
        return real(self, *a, **k)

    monkeypatch.setattr(SessionRecorder, "_trajectory", broken)
    tmpd = tmp_path / "tmp"
    tmpd.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmpd))
    out = tmp_path / "corpus"
    lines: list[str] = []
    summary = collect([spec], out, concurrency=2, echo=lines.append)
    assert (summary.sessions, summary.failed, summary.quarantined, summary.not_started) == (1, 1, ["bad-ok/t#0"], 0)
    assert summary.failures == ["bad-ok/t#0: collector_error: RuntimeError: boom in the recorder"]
    assert list(sessions(out)) == ["bad-ok/s#0"]
    q = duckdb.sql(f"SELECT source, locator, reason, detail FROM '{out}/quarantine/*.parquet'").fetchall()
    assert q == [(str(spec), "session:bad-ok/t#0", "collector_error", "bad-ok/t#0: RuntimeError: boom in the recorder")]
    assert "1 sessions, 2 turns in" in summary.render() and "; 1 quarantined as collector_error" in summary.render()
    assert "collector error in bad-ok/t#0 (quarantined as collector_error): RuntimeError: boom in the recorder" in lines
    assert not list(tmpd.glob("worldline-mcp-log-*"))  # the server's log folder is removed all the same
