"""mini-swe-agent `.traj.json` files, read through `read_path`.

Expected values were read from the raw files with `json.load`, independently of the importer
(origins in tests/data/mini-swe-agent/README.md):
- django__django-11099_v1_subset.traj.json ("mini-swe-agent-1", mini 1.15.0): 10 messages: system,
  task, then 4 assistant messages each with one ```` ```bash ```` block, each answered by a user
  message: three `<returncode>0</returncode>\n<output>\n...</output>` replies (the third output
  empty) and, for the submit command, the submission itself (equal to `info.submission`);
  `instance_id` "django__django-11099", model "google/gemini-3-pro-preview", exit "Submitted".
- django__django-11039_v2_toolcall_subset.traj.json ("mini-swe-agent-1.1", mini 2.2.7): 8 messages:
  system, task, 3 assistant messages with one `bash` tool call each; the first two answered by
  `role: "tool"` messages (`extra.returncode` 0, `extra.raw_output`), the submit call by the final
  `role: "exit"` message; model "deepseek/deepseek-chat".
- local.traj.json (mini's own test data, a bare JSON array): see `test_bare_message_list`.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pipelines.reader import read_path
from schemas.records import QuarantineRecord, Trajectory
from tests.collectors.support import assert_schema_valid, one_trajectory

DATA = Path(__file__).resolve().parent.parent / "data" / "mini-swe-agent"
V1 = DATA / "django__django-11099_v1_subset.traj.json"
V2 = DATA / "django__django-11039_v2_toolcall_subset.traj.json"


@pytest.mark.parametrize(
    "path, turns, native_id, model, version",
    [
        (V1, 4, "django__django-11099", "google/gemini-3-pro-preview", "1.15.0"),
        (V2, 3, "django__django-11039", "deepseek/deepseek-chat", "2.2.7"),
    ],
)
def test_counts_and_trajectory_fields(path: Path, turns: int, native_id: str, model: str, version: str) -> None:
    raw = json.loads(path.read_text())
    t = one_trajectory(path)
    assert t.source_format == "mini-swe-agent" and t.agent == "mini-swe-agent"
    assert t.locator == "$"
    assert t.domain == "swe"
    assert t.native_id == native_id
    assert t.model == model
    assert t.outcome == "Submitted"
    assert len(t.turns) == turns
    assert {u.kind for u in t.turns} == {"env"}
    assert {u.observation_kind for u in t.turns} == {"stdout"}
    assert t.task == raw["messages"][1]["content"]
    meta = json.loads(t.metadata)
    assert meta["mini_version"] == version
    assert meta["trajectory_format"] == raw["trajectory_format"]
    assert meta["model_stats"] == raw["info"]["model_stats"]
    assert meta["submission"] == raw["info"]["submission"]
    # the last turn is the submission, observed as the submitted patch
    assert "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in t.turns[-1].action
    assert t.turns[-1].observation == raw["info"]["submission"]
    assert json.loads(t.turns[-1].metadata)["submitted"] is True
    assert t.turns[-1].exit_code is None and t.turns[-1].is_error is None
    assert_schema_valid([t])


def test_v1_text_actions() -> None:
    t = one_trajectory(V1)
    assert t.task.startswith(
        "<pr_description>\nConsider the following PR description:\nUsernameValidator allows trailing newline in usernames\n"
    )
    assert t.task.endswith("You cannot continue working (reading, editing, testing) in any way on this task after submitting.\n</instructions>")
    assert [u.action for u in t.turns] == [
        "ls -R | grep -i validators",
        'find . -name "validators.py" | grep "contrib/auth"',
        "rm reproduce_issue.py test_valid_usernames.py",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached",
    ]
    assert [u.locator for u in t.turns] == [
        "messages[2]+messages[3]", "messages[4]+messages[5]", "messages[6]+messages[7]", "messages[8]+messages[9]",
    ]
    assert [u.exit_code for u in t.turns] == [0, 0, 0, None]
    assert [u.is_error for u in t.turns] == [False, False, False, None]
    assert t.turns[0].observation == (
        "validators.py\n0007_alter_validators_add_error_messages.py\nvalidators.py\nvalidators.py\nvalidators.txt\n"
        "validators.txt\nvalidators\ntest_validators.py\ntest_validators.py\ntest_validators.py\n./tests/validators:\n"
    )
    assert t.turns[1].observation == "./django/contrib/auth/validators.py\n"
    assert t.turns[2].observation == ""
    # the thought is the text around the code block
    assert t.turns[0].thought == (
        "THOUGHT: I need to locate the `contrib.auth.validators` module mentioned in the PR description. "
        "I'll start by listing the files in the current directory to understand the project structure."
    )
    assert t.turns[3].thought == "THOUGHT: I'm now ready to submit."
    assert {u.tool_name for u in t.turns} == {None} and {u.started_at for u in t.turns} == {None}


def test_v2_tool_calls() -> None:
    raw = json.loads(V2.read_text())
    t = one_trajectory(V2)
    assert [u.action for u in t.turns] == [
        "pwd && ls -la",
        'find . -type f -name "*.py" | xargs grep -l "sqlmigrate" | head -20',
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
    ]
    assert [u.locator for u in t.turns] == ["messages[2]+messages[3]", "messages[4]+messages[5]", "messages[6]+messages[7]"]
    assert [u.tool_name for u in t.turns] == ["bash"] * 3
    assert [u.tool_call_id for u in t.turns] == [
        "call_00_hufAxpEjOzreH1EwXImTuqj5", "call_00_imhW6auGF5alml3R52flaprm", "call_00_CiobqTgSnuPjioNNbc2G3M7c",
    ]
    assert json.loads(t.turns[0].tool_args) == {"command": "pwd && ls -la"}
    assert [u.exit_code for u in t.turns] == [0, 0, None]
    assert [u.is_error for u in t.turns] == [False, False, None]
    # observations are the untruncated `extra.raw_output`
    assert t.turns[0].observation == raw["messages"][3]["extra"]["raw_output"]
    assert t.turns[0].observation.startswith("/testbed\ntotal 172\n")
    assert t.turns[1].observation == (
        "./django/core/management/commands/sqlmigrate.py\n./django/core/management/__init__.py\n"
        "./tests/bash_completion/tests.py\n./tests/migrations/test_commands.py\n"
    )
    assert t.turns[0].thought == raw["messages"][2]["content"]
    assert t.turns[0].started_at == datetime.fromtimestamp(1775803413.1965265, UTC)
    assert json.loads(t.turns[2].metadata) == {"submitted": True, "exit_status": "Submitted"}


def _variant(tmp_path: Path, src: Path, edit) -> Path:
    doc = json.loads(src.read_text())
    edit(doc)
    out = tmp_path / src.name
    out.write_text(json.dumps(doc, indent=2))
    return out


def test_v1_format_error_and_failed_command(tmp_path: Path) -> None:
    """The real file with one reply changed to mini's format-error reply (the file's own
    `format_error_template`, rendered for two blocks) and one to a failing command."""
    def edit(doc: dict) -> None:
        msgs = doc["messages"]
        msgs[4]["content"] += "\n\nAnd then:\n\n```bash\nls\n```"
        msgs[5]["content"] = (
            "Please always provide EXACTLY ONE action in triple backticks, found 2 actions.\n\n"
            "Please format your action in triple backticks as shown in <response_example>."
        )
        msgs[7]["content"] = "<returncode>1</returncode>\n<output>\nrm: cannot remove 'x': No such file\n</output>"

    t = one_trajectory(_variant(tmp_path, V1, edit))
    assert [u.kind for u in t.turns] == ["env", "message", "env", "env"]
    bad = t.turns[1]
    assert bad.locator == "messages[4]+messages[5]"
    assert bad.action.endswith("```bash\nls\n```") and bad.observation is None and bad.exit_code is None
    meta = json.loads(bad.metadata)
    assert meta["format_error"] is True and meta["n_actions"] == 2
    assert meta["reply"].startswith("Please always provide EXACTLY ONE action")
    assert t.turns[2].exit_code == 1 and t.turns[2].is_error is True
    assert t.turns[2].observation == "rm: cannot remove 'x': No such file\n"
    assert_schema_valid([t])


def test_v1_timeout_reply(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        doc["messages"][3]["content"] = (
            "The last command <command>ls -R | grep -i validators</command> timed out and has been killed.\n"
            "The output of the command was:\n <output>\n\n</output>\nPlease try another command"
        )

    u = one_trajectory(_variant(tmp_path, V1, edit)).turns[0]
    assert u.kind == "env" and u.exit_code is None and u.is_error is True
    assert json.loads(u.metadata) == {"timeout": True}


def test_domain_terminal_without_instance(tmp_path: Path) -> None:
    t = one_trajectory(_variant(tmp_path, V1, lambda d: d.pop("instance_id")))
    assert t.domain == "terminal" and t.native_id is None


@pytest.mark.parametrize(
    "edit, detail",
    [
        (lambda d: d["messages"].__setitem__(3, "oops"), "messages[3]: expected an object"),
        (lambda d: d["messages"][4].__setitem__("role", "robot"), "messages[4]: unknown role 'robot'"),
        (lambda d: d["messages"][5].__setitem__("tool_call_id", "call_x"), "messages[5]: result for tool call 'call_x'"),
        (lambda d: d["messages"][3]["extra"].__setitem__("returncode", "0"), "messages[3]: extra.returncode"),
        (lambda d: d["messages"][2].__setitem__("tool_calls", [{"id": "c"}]), "messages[2].tool_calls[0]"),
    ],
)
def test_malformed_record_is_quarantined(tmp_path: Path, edit, detail: str) -> None:
    recs = list(read_path(_variant(tmp_path, V2, edit)))
    assert len(recs) == 1 and isinstance(recs[0], QuarantineRecord)
    assert recs[0].importer == "mini-swe-agent"
    assert detail in recs[0].detail


@pytest.mark.parametrize("path", [V1, V2])
def test_claimed_before_generic_readers(path: Path) -> None:
    from collectors.chat import ChatImporter
    from collectors.swe_agent import SweAgentImporter

    doc = json.loads(path.read_text())
    assert not SweAgentImporter().sniff(doc)
    assert ChatImporter().sniff(doc)  # the generic chat reader would take it: the order matters
    recs = list(read_path(path))
    assert isinstance(recs[0], Trajectory) and recs[0].source_format == "mini-swe-agent"


def test_domain_override() -> None:
    recs = list(read_path(V1, domain_override="terminal"))
    assert [r.domain for r in recs if isinstance(r, Trajectory)] == ["terminal"]


def test_a_file_written_on_one_line_is_still_mini_swe_agent(tmp_path: Path) -> None:
    # a one-line document goes through the JSON-lines path, where the generic chat importer would
    # take any `{"messages": [...]}`: whole-document formats are asked first
    src = next(p for p in DATA.iterdir() if p.name.endswith(".traj.json"))
    one_line = tmp_path / "compact.traj.json"
    one_line.write_text(json.dumps(json.loads(src.read_text())) + "\n")
    (t,) = list(read_path(one_line))
    assert t.source_format == "mini-swe-agent"


# Shapes mini-swe-agent writes that the two real files do not show (from its own agent and model code:
# InteractiveAgent, human mode, Responses-API models, timeouts); each built from a real file by one edit.


def test_v2_placeholder_result_of_a_call_that_never_ran(tmp_path: Path) -> None:
    # on a submit mini 2.x still writes a result for the call, `returncode: -1`, "action was not executed";
    # the run's real answer is the exit message
    def edit(doc: dict) -> None:
        msgs = doc["messages"]
        cid = msgs[6]["tool_calls"][0]["id"]
        msgs.insert(7, {"role": "tool", "tool_call_id": cid,
                        "content": "<exception>action was not executed</exception>\n<returncode>-1</returncode>\n<output>\n</output>",
                        "extra": {"raw_output": "", "returncode": -1, "exception_info": "action was not executed"}})

    t = one_trajectory(_variant(tmp_path, V2, edit))
    last = t.turns[-1]
    assert last.locator == "messages[6]+messages[8]" and last.exit_code is None
    assert last.observation.startswith("diff --git") and json.loads(last.metadata)["submitted"] is True
    assert [u.kind for u in t.turns] == ["env", "env", "env"]


def test_v2_human_mode_command(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        doc["messages"][6:6] = [
            {"role": "user", "content": "User command: \n```bash\ngit status --short\n```",
             "extra": {"actions": [{"command": "git status --short"}]}},
            {"role": "user", "content": "<returncode>128</returncode>\n<output>\nfatal: not a git repository\n</output>",
             "extra": {"raw_output": "fatal: not a git repository\n", "returncode": 128}},
        ]

    u = one_trajectory(_variant(tmp_path, V2, edit)).turns[2]
    assert (u.kind, u.locator, u.action) == ("env", "messages[6]+messages[7]", "git status --short")
    assert (u.observation, u.exit_code, u.is_error) == ("fatal: not a git repository\n", 128, True)


def test_v1_run_with_its_own_action_pattern(tmp_path: Path) -> None:
    # the pattern is not run (input-supplied regex); the replies with a return code still show the commands ran
    def edit(doc: dict) -> None:
        doc["info"]["config"]["agent"]["action_regex"] = r"<bash_code>(.*?)</bash_code>"
        for m in doc["messages"]:
            if m["role"] == "assistant":
                m["content"] = re.sub(r"```bash\s*\n(.*?)\n```", lambda x: f"<bash_code>{x.group(1)}</bash_code>",
                                      m["content"], flags=re.S)

    t = one_trajectory(_variant(tmp_path, V1, edit))
    ran = [u for u in t.turns if u.kind == "env"]
    assert len(ran) == 3 and all(u.exit_code == 0 and u.action is None for u in ran)
    assert "<bash_code>" in ran[0].thought


def test_timeout_observation_is_the_partial_output(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        doc["messages"][3]["content"] = (
            "The last command <command>ls -R | grep -i validators</command> timed out and has been killed.\n"
            "The output of the command was:\n<output>\npartial line 1\npartial line 2\n</output>\n"
            "Please try another command and make sure to avoid those requiring interactive input.\n")

    u = one_trajectory(_variant(tmp_path, V1, edit)).turns[0]
    assert u.observation == "partial line 1\npartial line 2" and json.loads(u.metadata) == {"timeout": True}


@pytest.mark.parametrize("stamp", [1e20, "nan", -1e15])
def test_unusable_timestamp_is_dropped_not_the_record(tmp_path: Path, stamp: object) -> None:
    def edit(doc: dict) -> None:
        doc["messages"][4]["extra"]["timestamp"] = stamp

    t = one_trajectory(_variant(tmp_path, V2, edit))
    assert len(t.turns) == 3 and t.turns[1].started_at is None


def test_v2_responses_api_messages(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        msgs = doc["messages"]
        new = msgs[:2]
        for a, r in ((msgs[2], msgs[3]), (msgs[4], msgs[5])):
            tc = a["tool_calls"][0]
            new.append({"id": "resp_1", "object": "response", "status": "completed", "output": [
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": a["content"]}]},
                {"type": "function_call", "call_id": tc["id"], "name": "bash", "arguments": tc["function"]["arguments"]}],
                "extra": {"actions": a["extra"]["actions"]}})
            new.append({"type": "function_call_output", "call_id": tc["id"], "output": r["content"], "extra": r["extra"]})
        doc["messages"] = new

    raw = json.loads(V2.read_text())
    t = one_trajectory(_variant(tmp_path, V2, edit))
    assert [(u.kind, u.exit_code) for u in t.turns] == [("env", 0), ("env", 0)]
    assert t.turns[0].observation == raw["messages"][3]["extra"]["raw_output"]


def test_quadratic_block_search_is_bounded(tmp_path: Path) -> None:
    # 200 kB of unclosed ```bash openers: each used to rescan to the end (18 s); bounded by the last fence
    import time

    def edit(doc: dict) -> None:
        doc["messages"][2]["content"] = "```bash\n" * 25_000

    p = _variant(tmp_path, V1, edit)
    t0 = time.perf_counter()
    one_trajectory(p)
    assert time.perf_counter() - t0 < 2.0


def test_v2_timeout_is_marked(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        doc["messages"][3]["extra"] |= {"returncode": -1, "exception_type": "TimeoutExpired"}

    u = one_trajectory(_variant(tmp_path, V2, edit)).turns[0]
    assert u.exit_code == -1 and u.is_error is True and json.loads(u.metadata)["timeout"] is True


def test_exit_code_int32_cannot_hold_quarantines_the_record(tmp_path: Path) -> None:
    # left in, it would fail the whole Arrow batch of its worker (every other record with it)
    from pipelines.ingest import IngestConfig, ingest
    from pipelines.query import connect

    def edit(doc: dict) -> None:
        doc["messages"][3]["extra"]["returncode"] = 99_999_999_999

    bad = _variant(tmp_path, V2, edit)
    s = ingest([bad, V1], tmp_path / "corpus", IngestConfig(workers=1), progress=False)
    assert (s.records, s.trajectories, s.quarantined) == (2, 1, 1)
    ((reason, detail),) = connect(tmp_path / "corpus").sql("SELECT reason, detail FROM quarantine").fetchall()
    assert reason == "bad_value"
    assert detail.endswith("$: turn 0 (messages[2]+messages[3]): exit_code must be a 32-bit integer, got int 99999999999")


def test_v2_unfinished_run_has_no_outcome(tmp_path: Path) -> None:
    # v2 `serialize()` writes `exit_status: ""` until the run ends (v1 writes null)
    t = one_trajectory(_variant(tmp_path, V2, lambda d: d["info"].update(exit_status="", submission="")))
    assert t.outcome is None
    assert one_trajectory(V2).outcome == json.loads(V2.read_text())["info"]["exit_status"] != ""


BARE = DATA / "local.traj.json"


def test_bare_message_list() -> None:
    """mini-swe-agent's own tests/test_data/local.traj.json: a bare JSON array, no `info` and no
    `trajectory_format`. Read with `json.load`: 6 messages, [0] system, [1] user (the task, starting
    "Please solve this issue: Blah blah blah"), [2] assistant "Here be some dummy command:" + a
    ```` ```bash ```` block `echo 'hello world'`, [3] user `<returncode>0</returncode>\n<output>\nhello
    world\n</output>`, [4] assistant "OK, now let me end this run." + the block `echo
    COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`, [5] user "" (the empty submission). So: 2 env turns, the
    first with output "hello world\n" and return code 0, the second the submit with an empty
    observation and no exit code; no instance id, so domain "terminal"."""
    raw = json.loads(BARE.read_text())
    assert isinstance(raw, list) and len(raw) == 6
    t = one_trajectory(BARE)
    assert (t.source_format, t.agent, t.domain, t.native_id, t.model, t.outcome) == (
        "mini-swe-agent", "mini-swe-agent", "terminal", None, None, None)
    assert t.task == raw[1]["content"] and t.task.startswith("Please solve this issue: Blah blah blah\n")
    assert [(u.kind, u.action, u.observation, u.exit_code, u.is_error, u.thought, u.locator) for u in t.turns] == [
        ("env", "echo 'hello world'", "hello world\n", 0, False, "Here be some dummy command:",
         "messages[2]+messages[3]"),
        ("env", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", "", None, None, "OK, now let me end this run.",
         "messages[4]+messages[5]"),
    ]
    assert t.turns[0].metadata is None and json.loads(t.turns[1].metadata) == {"submitted": True}
    meta = json.loads(t.metadata)
    assert meta["bare_messages"] is True and meta["trajectory_format"] is None
    assert_schema_valid([t])


def _bare_edit(tmp_path: Path, edit) -> list:
    doc = json.loads(BARE.read_text())
    edit(doc)
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(doc))
    return list(read_path(path))


def _no_marks(doc: list) -> None:  # a generic chat: a bash block answered in plain text, no submit
    doc[3]["content"] = "hello world"
    doc[4]["content"] = "Done."


@pytest.mark.parametrize(
    "edit",
    [
        _no_marks,
        lambda doc: doc.pop(1),  # the first message after the system prompt is not the user's task
        lambda doc: doc.append({"speaker": "user", "content": "hi"}),  # an element that is no message
        lambda doc: doc[2].update(content=[{"type": "text", "text": doc[2]["content"]}]),  # content parts: other chat formats
    ],
    ids=["no-mini-marks", "no-task-first", "not-a-message", "content-parts"],
)
def test_bare_list_without_mini_marks_is_not_claimed(tmp_path: Path, edit) -> None:
    recs = _bare_edit(tmp_path, edit)
    assert [(type(r).__name__, getattr(r, "source_format", None) or getattr(r, "reason", None)) for r in recs] == [
        ("QuarantineRecord", "unknown_format")
    ]


@pytest.mark.parametrize(
    "edit",
    [
        lambda doc: doc[4].update(content="OK.\n\n```bash\nls\n```"),  # only the `<returncode>` reply is left
        lambda doc: doc[3].update(content="hello world"),  # only the submit command is left
        lambda doc: (doc[3].update(content="hello world"), doc[4].update(content="```mswea_bash_command\nls\n```")),
    ],
    ids=["returncode-reply", "submit-command", "mswea-block"],
)
def test_bare_list_one_mini_mark_is_enough(tmp_path: Path, edit) -> None:
    (t,) = _bare_edit(tmp_path, edit)
    assert isinstance(t, Trajectory) and t.source_format == "mini-swe-agent" and len(t.turns) == 2


# A user who rejects the proposed commands in mini's confirm mode (InteractiveAgent): mini 2.x raises
# UserInterruption before running them; `execute_actions` still pads every tool call with a
# `returncode: -1` / "action was not executed" result, then the run loop appends the user's message.

_REJECTION = "Commands not executed. The user rejected your commands with the following message: look in tests/ first"


def _not_executed(cid: str) -> dict:
    return {"role": "tool", "tool_call_id": cid,
            "content": "<exception>action was not executed</exception>\n<returncode>-1</returncode>\n<output>\n</output>",
            "extra": {"raw_output": "", "returncode": -1, "exception_info": "action was not executed"}}


def test_v2_tool_calls_rejected_by_the_user_come_before_the_rejection(tmp_path: Path) -> None:
    def edit(doc: dict) -> None:
        msgs = doc["messages"]
        msgs[5:6] = [_not_executed(msgs[4]["tool_calls"][0]["id"]),
                     {"role": "user", "content": _REJECTION, "extra": {"interrupt_type": "UserRejection"}}]

    t = one_trajectory(_variant(tmp_path, V2, edit))
    assert [(u.kind, u.locator) for u in t.turns] == [
        ("env", "messages[2]+messages[3]"), ("message", "messages[4]"), ("user", "messages[6]"),
        ("env", "messages[7]+messages[8]")]
    call, reply = t.turns[1], t.turns[2]
    assert (call.action, call.tool_call_id, call.observation, call.exit_code) == (
        'find . -type f -name "*.py" | xargs grep -l "sqlmigrate" | head -20', "call_00_imhW6auGF5alml3R52flaprm",
        None, None)
    assert json.loads(call.metadata) == {"rejected": True, "interrupt_type": "UserRejection"}
    assert reply.action == _REJECTION and json.loads(reply.metadata) == {"interrupt_type": "UserRejection"}
    assert_schema_valid([t])


def _v2_text(doc: dict) -> None:
    """The v1 file as a mini 2.x text model writes it: each reply's command parsed into `extra.actions`."""
    doc["trajectory_format"] = "mini-swe-agent-1.1"
    for m in doc["messages"]:
        if m["role"] == "assistant":
            (block,) = re.findall(r"```bash\s*\n(.*?)\n```", m["content"], re.S)
            m["extra"] = {"actions": [{"command": block.strip()}]}


@pytest.mark.parametrize("v2", [True, False], ids=["v2-interrupt_type", "v1-text"])
def test_text_command_rejected_by_the_user_did_not_run(tmp_path: Path, v2: bool) -> None:
    # a text model's command the user rejected gets no result message at all (mini 2.x: the user's message
    # with `interrupt_type`; mini 1.x: the same text, as a plain user message): it was not executed
    text = "Command not executed. The user rejected your command with the following message: use grep -r"

    def edit(doc: dict) -> None:
        if v2:
            _v2_text(doc)
        doc["messages"][5] = {"role": "user", "content": text, **({"extra": {"interrupt_type": "UserRejection"}} if v2 else {})}

    t = one_trajectory(_variant(tmp_path, V1, edit))
    assert [(u.kind, u.locator) for u in t.turns] == [
        ("env", "messages[2]+messages[3]"), ("message", "messages[4]"), ("user", "messages[5]"),
        ("env", "messages[6]+messages[7]"), ("env", "messages[8]+messages[9]")]
    call, reply = t.turns[1], t.turns[2]
    assert (call.action, call.observation, call.observation_kind, call.exit_code, call.is_error) == (
        'find . -name "validators.py" | grep "contrib/auth"', None, "none", None, None)
    assert call.thought.startswith("THOUGHT: ") and "```" not in call.thought
    assert json.loads(call.metadata) == {"rejected": True, "interrupt_type": "UserRejection"}
    assert (reply.action, reply.observation_kind) == (text, "none")
    assert json.loads(reply.metadata) == {"interrupt_type": "UserRejection"}
    assert_schema_valid([t])


@pytest.mark.parametrize(
    "at, interrupt, text",
    [
        (5, "UserInterruption", "Interrupted by user: stop, that takes too long"),  # Ctrl-C while the command ran
        (9, "UserNewTask", "The user added a new task: also add a test"),  # after the submit command, in place of the exit
    ],
)
def test_text_command_interrupted_by_the_user_has_no_result(tmp_path: Path, at: int, interrupt: str, text: str) -> None:
    # the command was started (the submit command even ran), but mini kept no output of it
    def edit(doc: dict) -> None:
        _v2_text(doc)
        doc["messages"][at] = {"role": "user", "content": text, "extra": {"interrupt_type": interrupt}}

    t = one_trajectory(_variant(tmp_path, V1, edit))
    call, reply = t.turns[at // 2 - 1], t.turns[at // 2]
    assert (call.kind, call.locator, call.observation, call.exit_code) == ("message", f"messages[{at - 1}]", None, None)
    assert call.action == json.loads(V1.read_text())["messages"][at - 1]["content"].split("```bash\n")[1].split("\n```")[0]
    assert json.loads(call.metadata) == {"result_missing": True, "interrupt_type": interrupt}
    assert (reply.kind, reply.locator, reply.action) == ("user", f"messages[{at}]", text)
    assert json.loads(reply.metadata) == {"interrupt_type": interrupt}
    assert len(t.turns) == 5 and [u.kind for u in t.turns].count("env") == 3


@pytest.mark.parametrize("role", [[], {"r": 1}, 3])
def test_a_role_that_is_no_text_is_named(tmp_path: Path, role: object) -> None:
    doc = json.loads((DATA / "django__django-11099_v1_subset.traj.json").read_text())
    doc["messages"][2]["role"] = role
    (tmp_path / "x.traj.json").write_text(json.dumps(doc))
    (q,) = list(read_path(tmp_path / "x.traj.json"))
    assert isinstance(q, QuarantineRecord)
    assert (q.reason, q.detail) == ("malformed_record", f"{tmp_path / 'x.traj.json'} line:1: messages[2]: unknown role {role!r}")
