"""Task specs and perturbation arguments: the suite loads, and every invalid spec names its field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandboxes.perturb import (
    PERTURBATIONS,
    PerturbationError,
    PerturbationSpec,
    command_names,
    parse_list,
    plan,
)
from sandboxes.sandbox import SandboxConfig
from sandboxes.tasks import TASKS_DIR, SpecError, load_tasks


def test_suite_has_twenty_real_tasks_of_every_kind() -> None:
    tasks = load_tasks(TASKS_DIR)
    assert len(tasks) == 29
    by_tag: dict[str, int] = {}
    for t in tasks:
        for tag in t.tags:
            by_tag[tag] = by_tag.get(tag, 0) + 1
    assert {k: by_tag[k] for k in ("files", "text", "git", "python", "build", "swe", "os", "network")} == {
        "files": 5, "text": 6, "git": 4, "python": 4, "build": 2, "swe": 4, "os": 5, "network": 1}
    assert sorted({t.domain for t in tasks}) == ["os", "swe", "terminal"]
    assert [t.id for t in tasks if t.image == "swe"] == ["swe-add-test", "swe-fix-all", "swe-fix-parse-amount", "swe-run-tests"]
    assert all(t.checks for t in tasks)


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize("body, message", [
    ("task: x\nactions: [ls]\n", "id: expected a non-empty string, got null"),
    ("id: Bad_Id\ntask: x\nactions: [ls]\n", "id: expected lowercase letters, digits and '-', got 'Bad_Id'"),
    ("id: a\nactions: [ls]\n", "task: expected a non-empty string, got null"),
    ("id: a\ntask: x\nactions: []\n", "actions: expected a non-empty list of commands, got list"),
    ("id: a\ntask: x\nactions: [ls, 3]\n", "actions[1]: expected a command string or a mapping with 'command', got int"),
    ("id: a\ntask: x\nactions: [{command: ls, timeout_s: -1}]\n", "actions[0].timeout_s: expected a positive number, got int -1"),
    ("id: a\ntask: x\nactions: [{cmd: ls, timeout_s: 2}]\n", "actions[0].cmd: unknown field; known: command, timeout_s"),
    ("id: a\ntask: x\nactions:\n  - echo a: b\n", "actions[0]: YAML read this as a mapping with key 'echo a'"),
    ("id: a\ntask: x\ndomain: web\nactions: [ls]\n", "domain: expected one of terminal, os, swe, got 'web'"),
    ("id: a\ntask: x\nimage: ubuntu\nactions: [ls]\n", "image: no image recipe 'ubuntu'; known: base, swe, terminal"),
    ("id: a\ntask: x\nactions: [ls]\nsetup: {files: {/etc/x: y}}\n", "setup.files['/etc/x']: expected a relative path inside the work dir"),
    ("id: a\ntask: x\nactions: [ls]\nsetup: {files: {a.txt: 3}}\n", "setup.files['a.txt']: expected the file's text content, got int"),
    ("id: a\ntask: x\nactions: [ls]\nsetup: {commands: ls}\n", "setup.commands: expected a list of shell commands, got str"),
    ("id: a\ntask: x\nactions: [ls]\nlimits: {memory: 5}\n", "limits.memory: unknown field; known: memory_mb, cpus, pids, work_kb, tmp_kb"),
    ("id: a\ntask: x\nactions: [ls]\nchecks: [{command: ls, exit: yes}]\n", "checks[0].exit: expected an integer exit code, got bool True"),
    ("id: a\ntask: x\nactions: [ls]\nperturbations: {oom: {}}\n", "perturbations.oom: unknown field; known: disk_full"),
    ("id: a\ntask: x\nactions: [ls]\nperturbations: {oom_kill: {mem: 3}}\n", "perturbations.oom_kill.mem: unknown field; known: memory_mb"),
    # recorded as given but applied as int(): `bytes: 5.9` cut at 5; `abc` failed at collection naming no file
    ("id: a\ntask: x\nactions: [ls]\nperturbations: {truncated_output: {bytes: 5.9}}\n",
     "perturbations.truncated_output.bytes: expected an integer, got float 5.9"),
    ("id: a\ntask: x\nactions: [ls]\nperturbations: {disk_full: {size_kb: abc}}\n",
     "perturbations.disk_full.size_kb: expected an integer, got str 'abc'"),
    ("id: a\ntask: x\nactions: [ls]\nperturbations: {slow_command: {delay_s: .nan}}\n",
     "perturbations.slow_command.delay_s: expected a finite number, got nan"),
    ("id: a\ntask: x\ntimeout_s: .nan\nactions: [ls]\n", "timeout_s: expected a finite number, got nan"),
    ("id: a\ntask: x\nactions: [{command: ls, timeout_s: .inf}]\n", "actions[0].timeout_s: expected a finite number, got inf"),
    ("id: a\ntask: x\nactions: [ls]\nlimits: {memory_mb: .inf}\n", "limits.memory_mb: expected a finite number, got inf"),
    ("id: a\ntask: x\nactions: [ls]\nworkdir: /etc\n", "workdir: expected an absolute path of plain characters outside system dirs, got '/etc'"),
    # the harness's own state (it ran, the agent's saved shell state in its work dir), and a tmpfs it shadows
    ("id: a\ntask: x\nactions: [ls]\nworkdir: /run/wl\n", "workdir: expected an absolute path of plain characters outside system dirs, got '/run/wl'"),
    ("id: a\ntask: x\nactions: [ls]\nworkdir: /usr/local/src\n", "outside system dirs, got '/usr/local/src'"),
    ("id: a\ntask: x\nactions: [ls]\nworkdir: /home/agent\n", "outside system dirs, got '/home/agent'"),
    # a fraction was rounded to 0, which Docker and tmpfs read as no limit at all
    ("id: a\ntask: x\nactions: [ls]\nlimits: {memory_mb: 0.5}\n", "limits.memory_mb: expected a whole number of at least 1, got 0.5"),
    ("id: a\ntask: x\nactions: [ls]\nlimits: {pids: 64.5}\n", "limits.pids: expected a whole number of at least 1, got 64.5"),
    ("id: a\ntask: x\nactions: [ls]\ncolour: red\n", "colour: unknown field; known: id, domain"),
    ("id: a\ntask: [x\n", "not valid YAML"),
])
def test_invalid_spec_names_the_field(tmp_path: Path, body: str, message: str) -> None:
    p = _write(tmp_path, body)
    with pytest.raises(SpecError) as e:
        load_tasks(p)
    assert str(e.value).startswith(f"{p}: ")
    assert message in str(e.value)


def test_a_spec_that_is_not_utf8_names_its_file(tmp_path: Path) -> None:
    p = tmp_path / "latin1.yaml"
    p.write_bytes(b"id: a\ntask: caf\xe9\nactions: [ls]\n")  # the error named no file
    with pytest.raises(SpecError) as e:
        load_tasks(p)
    assert str(e.value) == f"{p}: not UTF-8 text: byte 0xe9 at offset 15"


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, "- {id: a, task: x, actions: [ls]}\n- {id: a, task: y, actions: [pwd]}\n")
    with pytest.raises(SpecError, match=r"id: 'a' is already used by a task in"):
        load_tasks(p)


def test_perturbation_arguments() -> None:
    assert [str(p) for p in parse_list(["all"])] == list(PERTURBATIONS)
    assert len(PERTURBATIONS) == 10
    assert str(PerturbationSpec.parse("disk_full:size_kb=128,free_kb=4")) == "disk_full:free_kb=4,size_kb=128"
    assert [str(p) for p in parse_list(["oom_kill,timeout", "oom_kill"])] == ["oom_kill", "timeout"]
    with pytest.raises(PerturbationError, match="unknown perturbation 'disk'; known: disk_full, read_only_fs"):
        PerturbationSpec.parse("disk")
    with pytest.raises(PerturbationError, match=r"perturbation oom_kill: unknown parameter 'mb'; known: \['memory_mb'\]"):
        PerturbationSpec.parse("oom_kill:mb=3")
    with pytest.raises(PerturbationError, match="expected key=value, got 'bytes'"):
        PerturbationSpec.parse("truncated_output:bytes")


def test_command_names_find_commands_in_pipelines() -> None:
    assert command_names(["grep -c ERROR app.log > count.txt", "cat a | sort -u && FOO=1 python3 x.py; (cd d && make)"]) == [
        "grep", "cat", "sort", "python3", "cd", "make"]
    # `#` inside a word is no comment (everything after it was lost); a comment ends at its line
    assert command_names(["n=${f#IMG_}; grep x y", "ls # list\ncat a", "echo '# not' | wc -l"]) == [
        "grep", "ls", "cat", "echo", "wc"]
    assert command_names(["for f in *.log; do\n  wc -l \"$f\"\ndone | sort", "if true; then :; elif id; then ps; fi"]) == [
        "wc", "sort", "true", "id", "ps"]
    # a here-document's lines are data
    assert command_names(["cat > a.py <<'PY'\nimport sys\nsort = 1\nPY\npython3 a.py"]) == ["cat", "python3"]


@pytest.mark.parametrize("name", ["missing_binary", "slow_command", "timeout"])
def test_perturbations_refuse_the_harness_binaries(name: str) -> None:
    """The sandbox server runs these by absolute path (action mark, listing, reset, truncation)."""
    import inspect

    import sandboxes.perturb as perturb_module
    import sandboxes.sandbox as sandbox_module
    from sandboxes.perturb import HARNESS_BINARIES, plan
    from sandboxes.sandbox import SandboxConfig

    # every binary the server or a perturbation runs by absolute path is one
    used = set(re.findall(r"/(?:usr/)?bin/([\w.-]+)", inspect.getsource(sandbox_module) + inspect.getsource(perturb_module)))
    assert {"touch", "rm", "dd", "find", "timeout"} <= used <= HARNESS_BINARIES
    for b in sorted(HARNESS_BINARIES):
        with pytest.raises(PerturbationError, match="harness"):
            plan(SandboxConfig(image="x"), PerturbationSpec(name, (("binary", b),)), 0, "t", [f"{b} x"])


@pytest.mark.parametrize("name", ["slow_command", "timeout"])
def test_a_wrapper_goes_on_a_command_the_task_runs(name: str) -> None:
    """A task that runs only file commands gets one of them wrapped: files-rename-batch (ls, mv) and
    os-limits (cat, tee) had python3 wrapped, which they never run: labelled, yet unperturbed.
    A task running a tool as well keeps the tool (the draw is the same as before)."""
    tasks = {t.id: t for t in load_tasks(TASKS_DIR)}

    def binary(task: str) -> str:
        t = tasks[task]
        return plan(SandboxConfig(image="x"), PerturbationSpec(name), 0, t.id, t.commands, t.perturbations).params["binary"]

    assert binary("files-rename-batch") in {"ls", "mv"} and binary("os-limits") == "cat"
    assert binary("files-organize") == "sort" and binary("os-process-report") == "ps"
    for t in tasks.values():
        assert binary(t.id) in command_names(t.commands), t.id
    assert plan(SandboxConfig(image="x"), PerturbationSpec(name), 0, "t", ["echo hi", "cd /tmp"]).params["binary"] == "python3"


@pytest.mark.parametrize("name", ["missing_binary", "slow_command", "timeout"])
@pytest.mark.parametrize("binary", ["grep -c", "../bin/grep", "grep;rm", "-x"])
def test_perturbations_refuse_a_binary_that_is_no_command_name(name: str, binary: str) -> None:
    """`timeout:binary=grep -c` was recorded as given and wrapped nothing (the task ran unperturbed); a
    missing_binary name goes into an image build step."""
    from sandboxes.perturb import plan
    from sandboxes.sandbox import SandboxConfig

    with pytest.raises(PerturbationError, match=re.escape(f"{name}: binary {binary!r} is not a command name")):
        plan(SandboxConfig(image="x"), PerturbationSpec(name, (("binary", binary),)), 0, "t", ["grep x f"])


@pytest.mark.parametrize(("text", "message"), [
    ("disk_full:size_kb=abc", "perturbation disk_full: size_kb='abc' is not an integer"),  # was a ValueError inside each sandbox
    ("oom_kill:memory_mb=2.5", "perturbation oom_kill: memory_mb='2.5' is not an integer"),
    ("slow_command:delay_s=soon", "perturbation slow_command: delay_s='soon' is not a number"),
    ("timeout:hang_s=inf", "perturbation timeout: hang_s='inf' is not a number"),
    ("missing_binary:binary=", "perturbation missing_binary: binary is empty"),
])
def test_perturbation_values_are_checked_when_parsed(text: str, message: str) -> None:
    with pytest.raises(PerturbationError) as e:
        PerturbationSpec.parse(text)
    assert str(e.value) == message


@pytest.mark.parametrize(("text", "message"), [
    ("disk_full:size_kb=32", "disk_full: size_kb must be >= 64 and 0 <= free_kb < size_kb, got {'size_kb': 32, 'free_kb': 0}"),
    ("truncated_output:bytes=0", "truncated_output: bytes must be >= 1, got 0"),
    ("slow_command:delay_s=-1", "slow_command: delay_s must be >= 0, got -1"),
    ("timeout:timeout_s=0", "timeout: timeout_s must be > 0 and hang_s >= 0, got timeout_s=0, hang_s=30"),
])
def test_perturbation_ranges_are_checked_when_planned(text: str, message: str) -> None:
    with pytest.raises(PerturbationError) as e:
        plan(SandboxConfig(image="x"), PerturbationSpec.parse(text), 0, "t", [])
    assert str(e.value) == message


def test_a_value_is_judged_with_the_tasks_own_parameters() -> None:
    # free_kb=5000 is out of range beside the default size_kb (4096), in range beside a task's 8192
    spec = PerturbationSpec.parse("disk_full:free_kb=5000")
    with pytest.raises(PerturbationError):
        plan(SandboxConfig(image="x"), spec, 0, "t", [])
    pl = plan(SandboxConfig(image="x"), spec, 0, "t", [], task_params={"disk_full": {"size_kb": 8192}})
    assert (pl.params["size_kb"], pl.params["free_kb"]) == (8192, 5000)


def test_perturbation_values_keep_their_kind() -> None:
    assert PerturbationSpec.parse("slow_command:binary=grep,delay_s=1").params == (("binary", "grep"), ("delay_s", 1))
    assert PerturbationSpec.parse("missing_binary:binary=7z").params == (("binary", "7z"),)  # a name, even if it looks numeric
    assert PerturbationSpec.parse("clock_skew:offset_s=-86400").params == (("offset_s", -86400),)


def test_a_number_is_one_value_whatever_its_spelling() -> None:
    """`hang_s=30.0` and `hang_s=30` are one job: the same label, and the same resolved parameters (its
    identity), also as the default or a task's YAML float."""
    assert str(PerturbationSpec.parse("timeout:hang_s=30.0")) == "timeout:hang_s=30"
    assert PerturbationSpec.parse("slow_command:delay_s=0.5").params == (("delay_s", 0.5),)
    base = SandboxConfig(image="x")
    default = plan(base, PerturbationSpec.parse("timeout"), 0, "t", ["grep x"]).params
    assert default == plan(base, PerturbationSpec.parse("timeout:hang_s=30.0,timeout_s=1.0"), 0, "t", ["grep x"]).params
    assert default == plan(base, PerturbationSpec.parse("timeout"), 0, "t", ["grep x"],
                           task_params={"timeout": {"hang_s": 30.0}}).params
    assert (default["hang_s"], default["timeout_s"]) == (30, 1)
    assert plan(base, PerturbationSpec.parse("slow_command"), 0, "t", ["grep x"]).params["delay_s"] == 1


def test_the_docs_count_the_suite_as_it_is() -> None:
    """docs/sandboxes.md names each kind of task with its count; they add up to the suite."""
    from collections import Counter

    tasks = load_tasks(TASKS_DIR)
    kinds = Counter(t.id.split("-")[0] for t in tasks)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "sandboxes.md").read_text()
    line = re.search(r"^The suite: (\d+) tasks — (.*?)\.$", doc, re.M | re.S)
    assert line is not None
    text = " ".join(line.group(2).split())
    assert int(line.group(1)) == len(tasks) == 29
    assert text == (f"file manipulation ({kinds['files']}), text processing ({kinds['text']}), git ({kinds['git']}, plus a SWE "
                    f"task that commits), Python scripts ({kinds['python']}), a failing `make` build and a broken shell script, "
                    f"OS inspection ({kinds['os']}), a download from the mirror, and SWE tasks ({kinds['swe']}) that run the "
                    "`ledger` tests before and after a fix")
    assert (kinds["build"], kinds["net"]) == (2, 1)  # the make build and the shell script; the download
    assert sum(kinds.values()) == len(tasks)


def test_clock_skew_shifts_every_python_clock_function(tmp_path: Path) -> None:
    """The sitecustomize the sandbox installs, run by this Python: `time.asctime()` kept the real time."""
    import os
    import subprocess
    import sys

    from sandboxes.perturb import _SITECUSTOMIZE

    (tmp_path / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    code = ("import time, datetime; print(time.gmtime().tm_year, time.localtime().tm_year, time.asctime()[-4:], "
            "time.ctime()[-4:], time.strftime('%Y'), datetime.datetime.now().year, datetime.date.today().year)")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "WL_CLOCK_OFFSET_S": "-400000000", "TZ": "UTC"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    import time

    year = str(time.gmtime(time.time() - 400000000).tm_year)
    assert r.stdout.split() == [year] * 7, r.stderr


def test_one_perturbation_spelled_two_ways_is_one_job(tmp_path: Path) -> None:
    """Jobs were told apart by the command line's spelling: the same fault collected twice in a run."""
    from sandboxes.collect import plan_jobs

    plain = load_tasks(_write(tmp_path, "id: a\ntask: x\nactions: [ls]\n"))
    (tmp_path / "own").mkdir()
    own = load_tasks(_write(tmp_path / "own", "id: b\ntask: x\nactions: [ls]\nperturbations: {oom_kill: {memory_mb: 32}}\n"))
    perts = parse_list(["oom_kill", "oom_kill:memory_mb=24", "timeout:hang_s=30.0", "timeout"])
    assert [j.key for j in plan_jobs(plain + own, perturbations=perts)] == [
        "a", "a@oom_kill", "a@timeout:hang_s=30",
        "b", "b@oom_kill", "b@oom_kill:memory_mb=24", "b@timeout:hang_s=30"]  # b's own default is 32, not 24
