"""Cleaning: every filter on the real sample and on planted variants of real trajectories, with
exact verdicts; decontamination; the side tables, the views and the contracts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pytest

from pipelines.clean import CleanConfig, clean, declared_actions
from pipelines.clean_contracts import cleaning_every_trajectory_judged, run_clean_contracts
from pipelines.decontam import DecontamConfig
from pipelines.side import side_info, side_path
from pipelines.store import Corpus
from schemas.records import Trajectory, Turn
from tests.pipelines.clean_support import (  # noqa: F401
    copy_corpus,
    load,
    plant,
    rows,
    sample_corpus,
    trajectory_id,
    variant,
)

# Turn verdicts on the sample (first 8 characters of the trajectory id -> turns), all retry cycles
# except DroidBot's unchanged screens.
SAMPLE_TURN_VERDICTS = {
    "1bada5ea": [7], "2bb0cf8f": [1], "379bf4b9": [6], "459d6eef": [24], "51c8e1a0": [1, 3, 4, 5, 6, 7, 8],
    "5880d58b": [3, 5, 6, 17, 18, 19, 22, 27, 32, 33, 34, 37], "78820866": [2, 3, 4, 5, 6, 7, 8], "87398343": [6],
    "87f1d310": [5], "8d053b3e": [1], "9cfc7c13": [20, 22, 23, 30, 32], "9df3d62a": [5, 6, 7], "a0ea54de": [1],
    "d87f72df": [3], "e11acf8f": [0], "e4214423": [5, 6], "ed812700": [2, 4, 5, 6, 7, 8], "f262d9f3": [5, 6, 7, 8],
    # InterCode ReAct replies without code (eval_react.py's "did not contain bash code", an error since b6085f5),
    # the same reply and answer as the next turn's
    "9c0efd78": [3], "291d5072": [2, 3, 4, 5, 6, 7, 8], "9675163b": [2],
}


def test_sample_verdicts(sample_corpus: Path) -> None:  # noqa: F811 - fixture
    s = clean(sample_corpus, progress=False)
    # InterCode's plain `submit` is no environment turn: 12 ReAct runs of one command and a submit (24 turns,
    # by jq on the raw file) have fewer than 2
    assert (s.trajectories, s.turns, s.kept_trajectories, s.kept_turns) == (1113, 3702, 932, 3439)
    assert s.dropped_trajectories == {"too_few_turns": 181}
    assert s.dropped_turns == {"retry_cycle": 53, "gui_no_change": 12}
    assert (s.action_spaces, s.action_spaces_unparsed) == (4, 0)
    got: dict[str, list[int]] = {}
    for tid, ti, reason in rows(sample_corpus, "SELECT trajectory_id, turn_index, reason FROM cleaning WHERE turn_index IS NOT NULL ORDER BY ALL"):
        assert reason == ("gui_no_change" if tid.startswith("5880d58b") else "retry_cycle")
        got.setdefault(tid[:8], []).append(ti)
    assert got == SAMPLE_TURN_VERDICTS
    # who has fewer than 2 environment turns: FireAct (one search, no answer step), InterCode, OpenHands
    assert rows(sample_corpus, """SELECT t.source_format, count(*) FROM cleaning c JOIN trajectories t USING (trajectory_id)
                                  WHERE c.turn_index IS NULL GROUP BY 1 ORDER BY 1""") == \
        [("fireact-chat", 1), ("fireact-trajs", 150), ("intercode", 28), ("openhands-events", 2)]
    details = dict(rows(sample_corpus, "SELECT trajectory_id[:8] || ':' || turn_index, detail FROM cleaning WHERE turn_index IS NOT NULL"))
    assert details["51c8e1a0:1"] == "same failed action repeated at turn 2"
    assert details["a0ea54de:1"] == "malformed action rejected: Malformed command"
    assert details["8d053b3e:1"].startswith("malformed action rejected: ('click', 'Frige - Wikipedia') generated an exception")
    assert details["87398343:6"].startswith("malformed action rejected: Your proposed edit has introduced new syntax error")
    assert details["5880d58b:3"] == "same screen as after turn 2"
    # the view: what survives, all counted for training (no dedup yet)
    assert rows(sample_corpus, "SELECT count(*), count(DISTINCT trajectory_id), bool_and(counts_for_training) FROM kept_turns") == [(3439, 932, True)]
    assert rows(sample_corpus, "SELECT count(*) FROM kept_trajectories") == [(932,)]
    # the side table is recorded with its settings and the corpus state it judged
    info = side_info(Corpus(sample_corpus), "cleaning")
    assert info["fingerprint"] == s.fingerprint and info["rows"] == 181 + 65 and info["corpus_state"]["batches"] == 1
    assert not list((sample_corpus / "side" / "cleaning").glob(".*"))  # no temporary file left behind
    assert [r.passed for r in run_clean_contracts(sample_corpus, None)][:1] == [True]


def test_declared_actions() -> None:
    assert declared_actions('[{"type": "function", "function": {"name": "execute_bash"}}, {"name": "finish"}]') == \
        (frozenset({"execute_bash", "finish"}), True)
    assert declared_actions('["ls", "cat <file>"]') == (frozenset({"ls", "cat"}), False)
    assert declared_actions('{"command_docs": "open:\\n  docstring: opens\\nedit:\\n  signature: edit", "enable_bash_tool": true, '
                            '"submit_command": "submit"}') == (frozenset({"open", "edit", "submit"}), True)
    assert declared_actions('{"read_file": {"description": "x", "inputSchema": {}}}') == (frozenset({"read_file"}), False)
    assert declared_actions("not json") is None and declared_actions("[]") is None and declared_actions(None) is None


CAPTCHA = "RootWebArea 'Just a moment...', focused\n\tStaticText 'Verify you are human by completing the action below.'"
CRASH = "OCI runtime exec failed: exec failed: unable to start container process: container not running"
REJECTED = ("Your output was not formatted correctly. You must always include one discussion and one command as part "
            "of your response.")


@pytest.fixture(scope="module")
def planted(sample_corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:  # noqa: F811
    """A copy of the sample with one planted variant per case; returns the corpus and case -> id."""
    corpus = copy_corpus(sample_corpus, tmp_path_factory.mktemp("planted") / "corpus")
    web = load(corpus, trajectory_id(corpus, "browsergym"))  # 3 turns, 20 declared actions
    swe_cmd = load(corpus, trajectory_id(corpus, "swe-agent/marshmallow-1867__default"))  # raw commands, bash enabled
    swe_fn = load(corpus, trajectory_id(corpus, "swe-agent/marshmallow-1867__function"))  # named tools
    term = load(corpus, trajectory_id(corpus, "intercode/ic_bash_multiturn"))  # 3 turns
    oh = load(corpus, trajectory_id(corpus, "openhands/multi"))  # recall (harness) + declared tools
    cases = {}

    def add(name: str, base, edit) -> None:  # noqa: ANN001
        v = variant(base, name)
        edit(v.turns)
        cases[name] = v

    add("web_clean", web, lambda t: None)
    add("web_outside_space", web, lambda t: (setattr(t[1], "tool_name", "navigate"), setattr(t[1], "action", "navigate('https://x.org')")))
    add("swe_raw_shell_ok", swe_cmd, lambda t: setattr(t[2], "action", "python -m pytest -x tests/"))
    add("swe_undeclared_tool", swe_fn, lambda t: (setattr(t[3], "tool_name", "python_exec"), setattr(t[3], "action", "python_exec print(1)")))
    add("openhands_recall_ok", oh, lambda t: None)
    add("web_captcha", web, lambda t: setattr(t[2], "observation", CAPTCHA))
    add("web_http_error", web, lambda t: setattr(t[1], "observation", "RootWebArea '502 Bad Gateway', focused\n\theading '502 Bad Gateway'"))
    # the same page, injected by a collector on purpose (a perturbation label): what the collection was for
    # (and the turn after it, acting on the error page still on screen)
    add("web_injected_http_error_ok", web, lambda t: (
        setattr(t[1], "observation", "RootWebArea '503 Service Unavailable', focused\n\theading 'Service Unavailable'"),
        setattr(t[1], "perturbation", "http_error"),
        setattr(t[2], "observation", "RootWebArea '503 Service Unavailable'\n\theading 'Service Unavailable'\n\tlink 'Retry'")))
    # an error page before the first injected fault is a failure of the environment all the same
    add("web_http_error_before_injection", web, lambda t: (
        setattr(t[0], "observation", "RootWebArea '502 Bad Gateway', focused\n\theading '502 Bad Gateway'"),
        setattr(t[1], "perturbation", "http_error")))
    # a status past a page's first 600 characters is the page's text (a docs page about error codes)
    add("web_late_http_error_ok", web, lambda t: setattr(
        t[1], "observation", "RootWebArea 'HTTP status reference'" + "".join(f"\n\tlink 'Section {i}: request headers'" for i in range(40))
        + "\n\tStaticText 'Error 404 Not Found is returned when no route matches'"))
    # the crash's text in a file the agent viewed, or in the user's reply: content, not the sandbox
    add("term_file_view_crash_ok", term, lambda t: (setattr(t[2], "observation", CRASH), setattr(t[2], "observation_kind", "file_view")))
    add("term_user_reply_crash_ok", term, lambda t: (setattr(t[2], "observation", CRASH), setattr(t[2], "observation_kind", "user_reply")))
    add("term_curl_404_ok", term, lambda t: setattr(t[1], "observation", "<html><head><title>404 Not Found</title></head></html>"))
    # through a bash tool, whose results are `tool_result`s (the chat importer's): curl's 404 and pip
    # installing a CAPTCHA library are the environment working; a web page's reCAPTCHA footer is a page
    add("term_tool_404_ok", term, lambda t: (setattr(t[1], "observation", "HTTP/1.1 404 Not Found\nServer: nginx"),
                                             setattr(t[1], "observation_kind", "tool_result")))
    add("term_tool_captcha_pkg_ok", term, lambda t: (
        setattr(t[1], "observation", "Successfully installed django-simple-captcha-0.6.0"),
        setattr(t[1], "observation_kind", "tool_result")))
    add("web_recaptcha_footer_ok", web, lambda t: setattr(
        t[2], "observation", t[2].observation + "\n\tStaticText 'This site is protected by reCAPTCHA and the Google Privacy Policy'"))
    add("term_sandbox_crash", term, lambda t: setattr(t[2], "observation", CRASH))
    rejected = Turn(kind="env", action="ls -la |", observation=REJECTED, observation_kind="stdout", is_error=True)
    add("term_retry", term, lambda t: t.insert(1, rejected))
    add("term_trailing_malformed_ok", term, lambda t: t.append(dataclasses.replace(rejected)))
    # a failed command re-issued with the same output and exit code (dropped), and with another exit code (kept)
    for name, code in (("term_same_failure", 1), ("term_other_exit_code_ok", 2)):
        add(name, term, lambda t, code=code: (setattr(t[1], "exit_code", 1), t.insert(2, dataclasses.replace(t[1], exit_code=code))))
    # another file under /tmp, failing the same way: the output is canonically the same, the action is not
    add("term_other_temp_file_ok", term, lambda t: (
        setattr(t[1], "exit_code", 1), setattr(t[1], "action", "cat /tmp/config.json"),
        setattr(t[1], "observation", "cat: /tmp/config.json: No such file or directory"),
        t.insert(2, dataclasses.replace(t[1], action="cat /tmp/settings.json",
                                        observation="cat: /tmp/settings.json: No such file or directory"))))
    # the same screen twice (only a timestamp in it differs: canonical form)
    add("web_no_change", web, lambda t: setattr(t[2], "observation", t[1].observation + "\n\tStaticText 'at 2026-01-01T10:00:00Z'"))
    cases["web_no_change"].turns[1].observation += "\n\tStaticText 'at 2026-01-02T11:11:11Z'"
    # a screen whose only change is a value the action set is a change (durations and process numbers are a
    # terminal's noise, not a screen's: both were dropped as "same screen")
    for name, before, after in (("web_value_set_ok", "combobox 'Remind me in' value='5 minutes'", "combobox 'Remind me in' value='30 minutes'"),
                                ("web_next_process_ok", "StaticText 'Process 3 of 10'", "StaticText 'Process 4 of 10'")):
        add(name, web, lambda t, before=before, after=after: (setattr(t[2], "observation", t[1].observation + f"\n\t{after}"),
                                                              setattr(t[1], "observation", t[1].observation + f"\n\t{before}")))
    add("term_one_turn", term, lambda t: t.__delitem__(slice(1, None)))
    # two environment turns, one of them a rejected malformed action: one left, under --min-turns 2
    add("term_one_left_after_retry", term, lambda t: (t.__delitem__(slice(1, None)), t.insert(0, dataclasses.replace(rejected))))
    ids = dict(zip(cases, plant(corpus, list(cases.values())), strict=True))
    return corpus, ids


def test_planted_verdicts(planted: tuple[Path, dict[str, str]]) -> None:
    corpus, ids = planted
    clean(corpus, progress=False)
    by_id = {v: k for k, v in ids.items()}
    got = {}
    for tid, ti, reason, detail in rows(corpus, f"SELECT * FROM cleaning WHERE trajectory_id IN {tuple(ids.values())!r} ORDER BY ALL"):
        got.setdefault(by_id[tid], []).append((ti, reason, detail))
    assert got == {
        "web_outside_space": [(None, "action_outside_space", "turn 1: `navigate` is not one of the 20 declared actions")],
        "swe_undeclared_tool": [(None, "action_outside_space", "turn 3: `python_exec` is not one of the 12 declared actions")],
        "web_captcha": [(None, "env_captcha", "turn 2: " + CAPTCHA.replace("\n", " ")[:100])],
        "web_http_error": [(None, "env_http_error", "turn 1: RootWebArea '502 Bad Gateway', focused \theading '502 Bad Gateway'")],
        "web_http_error_before_injection": [(None, "env_http_error", "turn 0: RootWebArea '502 Bad Gateway', focused \theading '502 Bad Gateway'")],
        "term_sandbox_crash": [(None, "env_sandbox_crash", "turn 2: " + CRASH[:100])],
        "term_retry": [(1, "retry_cycle", "malformed action rejected: " + REJECTED[:80])],
        "term_same_failure": [(1, "retry_cycle", "same failed action repeated at turn 2")],
        "web_no_change": [(2, "gui_no_change", "same screen as after turn 1")],
        "term_one_turn": [(None, "too_few_turns", "1 environment turn(s)")],
        "term_one_left_after_retry": [(None, "too_few_turns", "1 environment turn(s) left after 1 dropped (retry_cycle)")],
        # inherited from the real trajectory: SWE-agent's linter rejected an edit, which was retried
        "swe_raw_shell_ok": [(6, "retry_cycle", "malformed action rejected: Your proposed edit has introduced new syntax error(s). "
                                                "Please understand the fix")],
    }
    # not dropped: raw shell under a bash tool, the harness's recall, curl printing a 404 page, a
    # malformed action with no retry after it, a repeated command that failed another way, the unchanged original
    for ok in ("web_clean", "openhands_recall_ok", "term_curl_404_ok", "term_trailing_malformed_ok", "term_other_exit_code_ok",
               "term_other_temp_file_ok",
               "term_tool_404_ok", "term_tool_captcha_pkg_ok", "web_recaptcha_footer_ok", "web_injected_http_error_ok",
               "web_late_http_error_ok", "term_file_view_crash_ok", "term_user_reply_crash_ok"):
        assert ok not in got


def test_switches(planted: tuple[Path, dict[str, str]]) -> None:
    corpus, ids = planted
    s = clean(corpus, CleanConfig(min_turns=0, action_space=False, env_failures=False, retry_cycles=False, gui_no_change=False,
                                  scan_redactions=False), progress=False)
    assert s.dropped_trajectories == {} and s.dropped_turns == {}
    assert rows(corpus, "SELECT count(*) FROM cleaning") == [(0,)]
    s = clean(corpus, CleanConfig(retry_identical=False, scan_redactions=False), progress=False)
    assert s.dropped_turns == {"retry_cycle": 15, "gui_no_change": 13}  # the harness-rejected ones: 13 real, 2 planted


def test_decontamination(sample_corpus: Path, tmp_path: Path) -> None:  # noqa: F811 - fixture
    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    q1, q2 = [r[0] for r in rows(corpus, "SELECT DISTINCT task FROM trajectories WHERE source_format = 'fireact-trajs' ORDER BY task LIMIT 2")]
    action = rows(corpus, """SELECT u.action FROM turns u JOIN trajectories t USING (trajectory_id) WHERE t.source_format = 'intercode'
                             AND length(u.action) > 80 ORDER BY u.action LIMIT 1""")[0][0]
    eval_set = tmp_path / "eval.jsonl"
    eval_set.write_bytes(b"\n".join(orjson.dumps(x) for x in [
        {"id": "hq-1", "question": q1}, {"id": "hq-2", "question": q2},
        {"id": "bash-1", "query": action},
        {"id": "hq-1-edited", "question": " ".join(q1.split()[:-3] + ["in", "which", "year?"])},  # a near copy
        {"id": "unrelated", "question": "What is the boiling point of liquid nitrogen at sea level in kelvin?"},
    ]))
    s = clean(corpus, CleanConfig(decontam=DecontamConfig(eval_set=str(eval_set))), progress=False)
    flagged = rows(corpus, "SELECT eval_id, field, count(*) FROM contamination GROUP BY ALL ORDER BY ALL")
    # every trajectory whose task is the question, and the one with the action
    want_q = {e: rows(corpus, f"SELECT count(*) FROM trajectories WHERE task LIKE '%' || $${q}$$ || '%'")[0][0] for e, q in (("hq-1", q1), ("hq-2", q2))}
    want_a = rows(corpus, f"SELECT count(DISTINCT trajectory_id) FROM turns WHERE action = $${action}$$")[0][0]
    assert flagged == [("bash-1", "action", want_a), ("hq-1", "task", want_q["hq-1"]), ("hq-1-edited", "task", want_q["hq-1"]),
                       ("hq-2", "task", want_q["hq-2"])]
    assert (want_a, want_q["hq-1"], want_q["hq-2"]) == (1, 1, 1)
    assert s.eval_items == 5 and s.contaminated == 3
    got = rows(corpus, "SELECT eval_id, matched_ngrams, item_ngrams, overlap FROM contamination ORDER BY eval_id")
    # 8-grams: the edited question keeps 11 of its 14
    assert got == [("bash-1", 15, 15, 1.0), ("hq-1", 14, 14, 1.0), ("hq-1-edited", 11, 14, 0.785714), ("hq-2", 8, 8, 1.0)]
    # one cleaning verdict per trajectory, naming the best-matching item
    assert rows(corpus, "SELECT count(*), count(*) FILTER (WHERE detail LIKE '%''hq-1''%') FROM cleaning WHERE reason = 'eval_contamination'") == [(3, 1)]
    # cleaned again without the evaluation set: its flags go with the verdicts they explained
    said: list[str] = []
    clean(corpus, progress=False, echo=said.append)
    assert "contamination" not in Corpus(corpus).manifest()["side"] and not side_path(Corpus(corpus), "contamination").exists()
    assert rows(corpus, "SELECT count(*) FROM cleaning WHERE reason = 'eval_contamination'") == [(0,)]
    assert said == ["clean: the contamination table of an earlier run (with --eval-set) is removed: this run judged without one"]


def test_lost_verdicts_fail_the_contract(sample_corpus: Path, tmp_path: Path) -> None:  # noqa: F811 - fixture
    """Rows deleted from the cleaning table by hand leave kept + dropped = trajectories true (a
    trajectory without a drop row counts as kept); the counts recorded at writing catch it."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipelines.clean_contracts import cleaning_every_trajectory_judged

    corpus = copy_corpus(sample_corpus, tmp_path / "corpus")
    clean(corpus, progress=False)
    assert cleaning_every_trajectory_judged(Corpus(corpus)).passed
    [f] = (corpus / "side" / "cleaning").glob("*.parquet")
    t = pq.read_table(f)
    drops = pc.is_null(t["turn_index"]).to_pylist()
    lose = {i for i, d in enumerate(drops) if d}
    lose = set(sorted(lose)[:50])
    pq.write_table(t.take(pa.array([i for i in range(t.num_rows) if i not in lose])), f)
    r = cleaning_every_trajectory_judged(Corpus(corpus))
    assert not r.passed
    assert (r.metadata["kept"], r.metadata["dropped"]) == (932 + 50, 181 - 50)
    assert r.metadata["differs_from_recorded"] == {
        "kept_trajectories": {"recorded": 932, "in_table": 982},
        "dropped_trajectories": {"recorded": {"too_few_turns": 181}, "in_table": {"too_few_turns": 131}}}


def test_a_trajectory_without_turns_is_judged(tmp_path: Path) -> None:
    """A chat with a task and no reply has no turns: dropped as too_few_turns, and the contract that
    every verdict points at existing data holds (it looked for a turn of the trajectory)."""
    from pipelines.ingest import IngestConfig, ingest

    f = tmp_path / "chat.jsonl"
    f.write_text(orjson.dumps({"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "only a task"}]}).decode()
                 + "\n" + orjson.dumps({"messages": [
                     {"role": "user", "content": "list"},
                     {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                           "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "a b"}]}).decode() + "\n")
    corpus = tmp_path / "c"
    ingest([f], corpus, IngestConfig(workers=1, domain_override="terminal"), progress=False)
    s = clean(corpus, CleanConfig(min_turns=1), progress=False)
    assert (s.trajectories, s.kept_trajectories, s.dropped_trajectories) == (2, 1, {"too_few_turns": 1})
    results = run_clean_contracts(corpus, None)
    assert results[0].name == "cleaning_every_trajectory_judged"
    assert results[0].passed and results[0].metadata["orphan_rows"] == 0, results[0].metadata


def test_failure_phrases_as_content_or_a_client_command_s_output_drop_nothing(tmp_path: Path) -> None:
    """The agent's own `docker`/`adb` command printing the daemon's or the device's error, a search
    result about the Docker daemon, a song called "I'm Not a Robot" and a phone's "press and hold"
    tip are the environment answering: each dropped its trajectory whole. The harness's crash
    message after `ls`, a CAPTCHA's checkbox and the press-and-hold challenge still do."""
    def traj(name: str, domain: str, turns: list[Turn]) -> Trajectory:
        return Trajectory(domain=domain, source_format="planted", native_id=name, record_digest=f"p:{name}", turns=turns)

    def term(action: str, out: str) -> Trajectory:
        return traj(action, "terminal", [Turn(action=action, observation=out, observation_kind="stdout", exit_code=1),
                                         Turn(action="ls", observation="README.md", observation_kind="stdout", exit_code=0)])

    def search(name: str, out: str) -> Trajectory:
        return traj(name, "search", [Turn(action=f"search[{name}]", observation=out, observation_kind="search_results"),
                                     Turn(action="finish[x]", observation="done", observation_kind="search_results")])

    daemon = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"
    corpus = tmp_path / "c"
    ids = plant(corpus, [
        term("docker ps", daemon),
        term("cd app && sudo docker rm -f web-old", "Error response from daemon: No such container: web-old"),
        term("adb -s emulator-5554 shell ls", "error: device 'emulator-5554' not found"),
        search("docker daemon", "Troubleshoot: " + daemon + " Start the service with systemctl start docker."),
        search("robot song", "I'm Not a Robot is a song by Welsh singer Marina and the Diamonds."),
        search("restart iphone", "Press and hold the side button until the Apple logo appears."),
        term("ls", daemon),  # the harness's message after a command that is no client: the sandbox died
        search("captcha", "checkbox 'I'm not a robot'  StaticText 'Privacy - Terms'"),
        search("px", "Press & Hold to confirm you are a human (and not a bot)."),
    ])
    s = clean(corpus, progress=False)
    got = {ids.index(t): r for t, r in rows(corpus, "SELECT trajectory_id, reason FROM cleaning WHERE turn_index IS NULL")}
    assert got == {6: "env_sandbox_crash", 7: "env_captcha", 8: "env_captcha"}
    assert s.kept_trajectories == 6


def test_a_trajectory_dropped_for_several_reasons_has_one_verdict(tmp_path: Path) -> None:
    """Verdicts per reason add up to the trajectories dropped whole: the first reason by
    `WHOLE_DROP_ORDER` is the row's, the others follow its detail."""
    def traj(name: str, domain: str, turns: list[Turn], **kw) -> Trajectory:
        return Trajectory(domain=domain, source_format="planted", native_id=name, record_digest=f"p:{name}", turns=turns, **kw)

    cap = "Attention Required! | Cloudflare  verify you are human"
    corpus = tmp_path / "c"
    ids = plant(corpus, [
        traj("captcha-one-turn", "web", [Turn(action="click 1", observation=cap, observation_kind="accessibility_tree")]),
        traj("ok", "web", [Turn(action="click 1", observation="page A", observation_kind="accessibility_tree"),
                           Turn(action="click 2", observation="page B", observation_kind="accessibility_tree")]),
        traj("crash-outside", "terminal", [Turn(action="rm x", tool_name="evil", observation="OCI runtime exec failed"),
                                           Turn(action="ls", tool_name="bash", observation="a")], action_space='["bash"]'),
    ])
    s = clean(corpus, progress=False)
    assert (s.trajectories, s.kept_trajectories, sum(s.dropped_trajectories.values())) == (3, 1, 2)
    assert s.dropped_trajectories == {"env_captcha": 1, "env_sandbox_crash": 1}
    got = rows(corpus, "SELECT trajectory_id, reason, detail FROM cleaning ORDER BY reason")
    assert [(ids.index(t), r) for t, r, _ in got] == [(0, "env_captcha"), (2, "env_sandbox_crash")]
    assert [d for _, _, d in got] == [
        "turn 0: Attention Required! | Cloudflare  verify you are human; also: too_few_turns: 1 environment turn(s)",
        "turn 0: OCI runtime exec failed; also: action_outside_space: turn 0: `evil` is not one of the 1 declared actions"]
    assert cleaning_every_trajectory_judged(Corpus(corpus)).passed


def test_a_trajectory_every_turn_of_which_is_dropped_is_not_counted_kept(tmp_path: Path) -> None:
    """With `--min-turns 0` a GUI trajectory whose every turn is `gui_no_change` survives whole, but
    `kept_trajectories` has nothing of it: clean and its contract count it apart, so kept matches the view."""
    def traj(name: str, turns: list[Turn], **kw) -> Trajectory:
        return Trajectory(domain="web", source_format="planted", native_id=name, record_digest=f"p:{name}", turns=turns, **kw)

    same = [Turn(action="click", observation="screen A", observation_kind="accessibility_tree") for _ in range(3)]
    corpus = tmp_path / "c"
    plant(corpus, [traj("zero", []), traj("all-same", same, initial_state="screen A"),
                   traj("message-only", [Turn(kind="message", action="hi")])])
    s = clean(corpus, CleanConfig(min_turns=0), progress=False)
    assert (s.trajectories, s.kept_trajectories, s.emptied_trajectories, s.kept_turns) == (3, 2, 1, 1)
    assert s.dropped_turns == {"gui_no_change": 3} and s.dropped_trajectories == {}
    assert "  1 trajectories left with no turn by the turn verdicts (not kept)" in s.render().splitlines()
    assert sorted(rows(corpus, "SELECT native_id FROM kept_trajectories")) == [("message-only",), ("zero",)]
    result = cleaning_every_trajectory_judged(Corpus(corpus))
    assert result.passed and (result.metadata["kept"], result.metadata["emptied"], result.metadata["dropped"]) == (2, 1, 0)
