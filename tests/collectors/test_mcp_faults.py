"""The fault-injection proxy: every fault kind against real servers (stdio and HTTP), forced per step
and drawn at random from a seed; the unperturbed response is kept for every injected fault."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import orjson
import pytest

from collectors.mcp.collect import collect
from collectors.mcp.faults import _TOOL_ERRORS, FAULTS, RATE_LIMIT_CODE, FaultConfig, perturb_result
from collectors.mcp.raw import read_raw
from collectors.mcp.spec import SessionSpec, StepSpec, load_spec
from pipelines.cli import main as cli_main
from pipelines.query import run_query
from tests.collectors.mcp_support import SPECS, alive, obs, require_servers, sessions

README = "# Project\n\nNotes for the team.\n"
README_PAYLOAD = orjson.dumps({"content": [{"type": "text", "text": README}], "structuredContent": {"content": README}},
                              option=orjson.OPT_SORT_KEYS).decode()
CALL_TIMEOUT = 1.5


def _with_sessions(spec_name: str, *sessions: SessionSpec):
    return dataclasses.replace(load_spec(SPECS / spec_name), sessions=list(sessions))


def _steps(tool: str, args: dict, faults: list[str | None]) -> list[StepSpec]:
    return [StepSpec("tool", tool, args, f) for f in faults]


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory):
    require_servers()
    readme = {"path": "{workdir}/files/README.md"}
    ny = {"source_timezone": "America/New_York", "time": "09:30", "target_timezone": "Asia/Tokyo"}
    specs = [
        _with_sessions("filesystem.yaml", SessionSpec("fs-faults", "read the README, again and again", _steps(
            "read_text_file", readme,
            ["truncated", "empty_result", "tool_error", "latency", None, "rate_limit", "schema_violation"]))),
        _with_sessions("time.yaml", SessionSpec("time-faults", "convert a time", _steps(
            "convert_time", ny, ["schema_violation", "timeout", None]))),
        _with_sessions("everything-http.yaml", SessionSpec("http-faults", "echo until the server crashes", [
            StepSpec("tool", "echo", {"message": "one"}, "timeout"),
            StepSpec("tool", "get-structured-content", {"location": "New York"}, "schema_violation"),
            StepSpec("tool", "echo", {"message": "bye"}, "server_crash"),
            StepSpec("tool", "get-sum", {"a": 1, "b": 2}),
        ])),
        _with_sessions("git.yaml", SessionSpec("git-faults", "look at the repository", [
            StepSpec("tool", "git_status", {"repo_path": "{workdir}/repo"}, "tool_error"),
            StepSpec("tool", "git_log", {"repo_path": "{workdir}/repo"}, "server_crash"),
            StepSpec("tool", "git_branch", {"repo_path": "{workdir}/repo", "branch_type": "local"}),
        ])),
    ]
    out = tmp_path_factory.mktemp("faults") / "corpus"
    summary = collect(specs, out, concurrency=2, call_timeout_s=CALL_TIMEOUT, faults=FaultConfig(latency_s=(0.2, 0.4)))
    return out, summary, sessions(out)


def test_each_fault_kind_is_injected_and_labelled(faulted) -> None:
    _, summary, s = faulted
    assert {k: [u["perturbation"] for u in t["turns"]] for k, t in s.items()} == {
        "filesystem/fs-faults#0": ["truncated", "empty_result", "tool_error", "latency", None, "rate_limit", "schema_violation"],
        "time/time-faults#0": ["schema_violation", "timeout", None],
        "everything/http-faults#0": ["timeout", "schema_violation", "server_crash"],
        "git/git-faults#0": ["tool_error", "server_crash"],
    }
    assert {k: t["outcome"] for k, t in s.items()} == {
        "filesystem/fs-faults#0": "completed", "time/time-faults#0": "completed",
        "everything/http-faults#0": "server_crash", "git/git-faults#0": "server_crash"}
    assert summary.failed == 0  # an injected crash is intended, not a failure
    assert set(summary.perturbations) == set(FAULTS) | {"none"}
    for t in s.values():
        for u in t["turns"]:
            if u["perturbation"]:
                assert u["metadata"]["fault"]["kind"] == u["perturbation"] and u["metadata"]["fault"]["forced"] is True
            else:
                assert "fault" not in u["metadata"] and "unperturbed_observation" not in u["metadata"]


def test_payload_faults_keep_the_unperturbed_response(faulted) -> None:
    out, _, s = faulted
    t = s["filesystem/fs-faults#0"]
    turns = t["turns"]
    for u in turns:
        if u["perturbation"]:
            assert (u["metadata"]["unperturbed_observation"], u["metadata"]["unperturbed_is_error"]) == (README_PAYLOAD, False)
    trunc = turns[0]
    kept = trunc["metadata"]["fault"]["kept_chars"]
    assert (trunc["metadata"]["fault"]["original_chars"], trunc["metadata"]["fault"]["dropped_structured_content"]) == (31, True)
    assert 3 <= kept <= 18
    assert obs(trunc) == {"content": [{"type": "text", "text": README[:kept]}]}
    assert trunc["is_error"] is False
    assert trunc["metadata"]["client_error"] == "RuntimeError: Tool read_text_file has an output schema but did not return structured content"
    assert turns[1]["observation"] == '{"content":[]}' and turns[1]["is_error"] is False
    err = obs(turns[2])
    assert turns[2]["is_error"] is True and err["isError"] is True
    assert err["content"][0]["text"] == "Error executing tool read_text_file: " + turns[2]["metadata"]["fault"]["message"].split(": ", 1)[1]
    assert turns[2]["metadata"]["fault"]["message"].split("read_text_file: ", 1)[1] in _TOOL_ERRORS
    lat = turns[3]
    assert lat["observation"] == README_PAYLOAD and lat["is_error"] is False
    assert 0.2 <= lat["metadata"]["fault"]["added_latency_s"] <= 0.4
    assert lat["duration_s"] >= lat["metadata"]["fault"]["added_latency_s"]
    assert turns[4]["observation"] == README_PAYLOAD
    rl = turns[5]
    retry = rl["metadata"]["fault"]["retry_after_s"]
    assert (rl["observation_kind"], rl["is_error"]) == ("error", True)
    assert obs(rl) == {"error": {"code": RATE_LIMIT_CODE, "message": f"Rate limit exceeded: too many requests, retry after {retry}s",
                                 "data": {"retryAfterSeconds": retry}}}
    assert rl["metadata"]["protocol_error"] == {"code": -32010, "message": obs(rl)["error"]["message"], "origin": "proxy"}
    sv = turns[6]
    assert obs(sv) == {"content": [{"type": "text", "text": README}], "structuredContent": {"content": 12345}}
    assert sv["metadata"]["fault"] == {"kind": "schema_violation", "forced": True, "property": "content",
                                       "declared_type": "string", "injected": 12345}
    assert sv["metadata"]["client_error"].startswith("RuntimeError: Invalid structured content returned by tool "
                                                     "read_text_file: 12345 is not of type 'string'")
    # the raw side table has what the server sent and what the client got instead
    raw = read_raw(out, t["trajectory_id"], 0)
    assert [m["dir"] for m in raw] == ["c2s", "s2c", "p2c"]
    assert orjson.dumps(orjson.loads(raw[1]["raw"])["result"], option=orjson.OPT_SORT_KEYS).decode() == README_PAYLOAD
    assert orjson.dumps(orjson.loads(raw[2]["raw"])["result"], option=orjson.OPT_SORT_KEYS).decode() == trunc["observation"]
    assert raw[2]["note"] == "fault truncated"


def test_timeouts_and_schema_violations_on_time_and_http(faulted) -> None:
    _, _, s = faulted
    tt = s["time/time-faults#0"]["turns"]
    sv = obs(tt[0])["structuredContent"]
    prop = tt[0]["metadata"]["fault"]["property"]
    assert prop in ("source", "target", "time_difference")
    assert sv[prop] == {"time_difference": 12345, "source": "unexpected", "target": "unexpected"}[prop]
    timeout = tt[1]
    assert timeout["observation"] == '{"error":{"code":-32001,"message":"Request \'tools/call\' timed out"}}'
    assert (timeout["observation_kind"], timeout["is_error"], timeout["metadata"]["protocol_error"]["origin"]) == ("error", True, "client")
    assert CALL_TIMEOUT <= timeout["duration_s"] < CALL_TIMEOUT + 1.0
    unperturbed = orjson.loads(timeout["metadata"]["unperturbed_observation"])
    assert unperturbed["structuredContent"]["source"]["timezone"] == "America/New_York"
    assert tt[2]["is_error"] is False and obs(tt[2])["structuredContent"]["target"]["timezone"] == "Asia/Tokyo"
    ht = s["everything/http-faults#0"]["turns"]
    assert ht[0]["observation"] == '{"error":{"code":-32001,"message":"Request \'tools/call\' timed out"}}'
    assert ht[0]["metadata"]["unperturbed_observation"] == '{"content":[{"text":"Echo: one","type":"text"}]}'
    weather = obs(ht[1])["structuredContent"]
    assert weather == {"temperature": 33, "conditions": "Cloudy", "humidity": 82} | {
        ht[1]["metadata"]["fault"]["property"]: ht[1]["metadata"]["fault"]["injected"]}
    assert ht[1]["metadata"]["fault"]["injected"] in ("not-a-number", 12345)


def test_server_crash_kills_the_real_process(faulted) -> None:
    out, _, s = faulted
    for key, last in (("everything/http-faults#0", '{"content":[{"text":"Echo: bye","type":"text"}]}'),
                      ("git/git-faults#0", None)):
        t = s[key]
        crash = t["turns"][-1]
        assert crash["observation"] == '{"error":{"code":-32000,"message":"Connection closed"}}'
        assert (crash["is_error"], crash["metadata"]["fault"]["killed"]) == (True, True)
        if last:
            assert crash["metadata"]["unperturbed_observation"] == last
        else:
            assert orjson.loads(crash["metadata"]["unperturbed_observation"])["content"][0]["text"].startswith("Commit history:\n")
        assert t["metadata"]["server_exit_code"] == -9  # SIGKILL, for real
        assert not alive(t["metadata"]["server_pid"])
        assert read_raw(out, t["trajectory_id"], len(t["turns"]) - 1)[-1]["note"].startswith("fault server_crash")
    git = s["git/git-faults#0"]["turns"]
    assert git[0]["observation"].startswith('{"content":[{"text":"Error executing tool git_status: ')
    assert git[0]["metadata"]["unperturbed_observation"].startswith('{"content":[{"text":"Repository status:\\nOn branch main')


RANDOM_KINDS = ("empty_result", "latency", "rate_limit", "schema_violation", "tool_error", "truncated")


def _random_run(out: Path, seed: int) -> dict[str, list]:
    collect([SPECS / "filesystem.yaml"], out, only=["explore", "edit"], repeat=2, concurrency=2,
            faults=FaultConfig(RANDOM_KINDS, 0.6, seed, (0.01, 0.02)))
    return {k: [(u["perturbation"], u["metadata"].get("fault", {}).get("kept_chars")) for u in t["turns"]]
            for k, t in sessions(out).items()}


def test_random_faults_are_reproducible_from_the_seed(tmp_path: Path) -> None:
    require_servers()
    a = _random_run(tmp_path / "a", 5)
    b = _random_run(tmp_path / "b", 5)
    assert a == b
    assert sorted(a) == ["filesystem/edit#0", "filesystem/edit#1", "filesystem/explore#0", "filesystem/explore#1"]
    labels = [p for turns in a.values() for p, _ in turns]
    assert len(labels) == 12 and 0 < sum(p is not None for p in labels) < 12
    assert a["filesystem/explore#0"] != a["filesystem/explore#1"]  # repetitions draw differently
    # the draws the proxy makes, replayed: per call one random(), and on a hit a kind (every
    # filesystem tool declares an outputSchema, so all kinds are eligible) and a perturbation seed
    rng = FaultConfig(RANDOM_KINDS, 0.6, 5).rng_for("filesystem/explore#0")
    expected = []
    for _ in range(4):
        kind = rng.choice(RANDOM_KINDS) if rng.random() < 0.6 else None
        if kind:
            rng.getrandbits(32)
        expected.append(kind)
    assert [p for p, _ in a["filesystem/explore#0"]] == expected


def test_cli_faults_flag(tmp_path: Path) -> None:
    require_servers()
    rc = cli_main(["collect", "mcp", str(SPECS / "filesystem.yaml"), "--session", "explore", "--out", str(tmp_path / "c"),
                   "--faults", "empty_result", "--fault-rate", "1", "--quiet"])
    assert rc == 0
    assert run_query(tmp_path / "c", "SELECT perturbation, observation, count(*) FROM turns GROUP BY ALL")[1] == [
        ("empty_result", '{"content":[]}', 4)]


# -- the payload transformations, without a server ---------------------------------------------

RESULT = {"content": [{"type": "text", "text": "0123456789" * 10}, {"type": "text", "text": "second"}],
          "structuredContent": {"n": 1, "name": "x"}, "isError": False}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "name": {"type": "string"}}, "required": ["n", "name"]}


def test_perturb_result_is_seeded_and_exact() -> None:
    out, detail = perturb_result("truncated", RESULT, "t", None, random.Random(1))
    assert detail == {"dropped_blocks": 1, "dropped_structured_content": True, "field": "text", "kept_chars": 16,
                      "original_chars": 100}
    assert out == {"content": [{"type": "text", "text": "0123456789012345"}], "isError": False}
    assert perturb_result("truncated", RESULT, "t", None, random.Random(1)) == (out, detail)
    assert perturb_result("empty_result", RESULT, "t", None, random.Random(1)) == ({"content": []}, {})
    err, d = perturb_result("tool_error", RESULT, "my_tool", None, random.Random(1))
    assert err == {"content": [{"type": "text", "text": d["message"]}], "isError": True}
    assert d["message"] == "Error executing tool my_tool: Service temporarily unavailable, please retry later"
    sv, d = perturb_result("schema_violation", RESULT, "t", SCHEMA, random.Random(1))
    assert (sv["structuredContent"], d) == ({"n": "not-a-number", "name": "x"},
                                            {"property": "n", "declared_type": "integer", "injected": "not-a-number"})
    assert sv["content"] == RESULT["content"]
    assert perturb_result("schema_violation", RESULT, "t", None, random.Random(1)) == (
        None, {"skipped": "the tool declares no outputSchema"})
    assert perturb_result("truncated", {"content": []}, "t", None, random.Random(1)) == (
        None, {"skipped": "empty content; nothing to truncate"})
    # no typed required property to break: the structured content stops being an object
    sv2, d2 = perturb_result("schema_violation", {"content": [], "structuredContent": "s"}, "t", {"type": "object"}, random.Random(1))
    assert (sv2["structuredContent"], d2) == (["unexpected"], {"replaced_with": "array"})


def test_fault_config_parsing() -> None:
    assert FaultConfig.parse("all").kinds == tuple(sorted(FAULTS)) and FaultConfig.parse("all").rate == 0.25
    assert FaultConfig.parse("timeout, latency", 1.0, 3) == FaultConfig(("timeout", "latency"), 1.0, 3)
    assert FaultConfig.parse(None) == FaultConfig() and FaultConfig.parse("none").kinds == ()
    with pytest.raises(ValueError, match=r"unknown fault kinds \['slow'\]"):
        FaultConfig.parse("slow")
    with pytest.raises(ValueError, match="not within"):
        FaultConfig(("timeout",), 1.5)
    with pytest.raises(ValueError, match=r"^--fault-rate 0.5 without --faults: a rate with no fault kinds injects nothing"):
        FaultConfig.parse(None, 0.5)  # was accepted: a run that says it injects faults and injects none
    assert FaultConfig.parse("none", 0.0) == FaultConfig()
    assert FaultConfig(seed=1).rng_for("a").random() == FaultConfig(seed=1).rng_for("a").random() != \
        FaultConfig(seed=2).rng_for("a").random()
