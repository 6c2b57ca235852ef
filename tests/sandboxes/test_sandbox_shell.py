"""What the agent's shell shows, exactly: each stream decoded on its own, no harness messages, an
output cap that keeps exactly MAX_OUTPUT bytes per stream, and shell state (exported variables,
aliases, functions) that carries over from one action to the next like in a persistent shell."""

from __future__ import annotations

from sandboxes.sandbox import MAX_OUTPUT, Sandbox


def _streams(r) -> tuple:
    return r.stdout, r.stderr, r.combined


def test_each_stream_is_decoded_on_its_own(sb: Sandbox) -> None:
    # a character split across two stdout writes with a stderr write between them
    r = sb.run(r"printf '\xe2\x82'; sleep .2; printf x >&2; sleep .2; printf '\xac\n'")
    assert _streams(r) == ("€\n", "x", "x€\n")  # the character shows up once its last byte has arrived
    # invalid UTF-8, NUL and CR; a split character on stderr; an incomplete one at the very end
    r = sb.run(r"printf 'a\x00b\xff\r\n'; sleep .2; printf '\xe2\x82' >&2; sleep .2; printf 'c\n'; sleep .2; "
               r"printf '\xac\xf0' >&2; sleep .2; printf '\xed\xa0\x80 d'; sleep .2; printf '\xe2\x82' >&2")
    assert _streams(r) == ("a\x00b\ufffd\r\nc\n\ufffd\ufffd\ufffd d", "€\ufffd\ufffd",
                           "a\x00b\ufffd\r\nc\n€\ufffd\ufffd\ufffd d\ufffd\ufffd")
    assert len(r.combined) == len(r.stdout) + len(r.stderr)
    r = sb.run("printf 'é' | head -c1; sleep .2; printf e >&2; sleep .2; printf 'é' | tail -c1; echo")
    assert _streams(r) == ("é\n", "e", "eé\n")


def test_harness_messages_never_show_up(sb: Sandbox) -> None:
    r = sb.run("setsid sleep 100; echo rc=$?", timeout_s=1)  # escaped the group: killed with the shell
    assert (r.exit_code, r.timed_out, r.stdout, r.stderr, r.combined) == (137, True, "", "", "")
    r = sb.run("trap '' TERM; sleep 100", timeout_s=1)
    assert (r.exit_code, r.timed_out, r.stdout, r.stderr, r.combined) == (137, True, "", "", "")
    r = sb.run("sleep 100", timeout_s=1)  # the shell's own report of its child, as `bash -c` gives it
    assert (r.exit_code, r.timed_out, r.stdout, r.stderr) == (124, True, "", "Terminated\n")
    r = sb.run("kill -9 $PPID")
    assert (r.exit_code, r.stdout, r.stderr) == (137, "", "")
    r = sb.run("foo")
    assert (r.exit_code, r.stderr) == (127, "bash: line 1: foo: command not found\n")
    r = sb.run("echo a\nfoo\n(exit 3)")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "a\n", "bash: line 2: foo: command not found\n")
    r = sb.run('echo "[$0][$1][$#]"; ps -o args= -p 1')  # pid 1 looks like a plain shell
    assert (r.stdout, r.stderr) == ("[bash][][0]\n/bin/bash\n", "")
    assert sb.run("echo still here").combined == "still here\n"


def test_the_output_cap_keeps_exactly_max_output_bytes_per_stream(sb: Sandbox) -> None:
    r = sb.run(f"head -c {MAX_OUTPUT} /dev/zero | tr '\\0' y", timeout_s=60)
    assert (len(r.stdout), r.stdout.count("y"), r.output_capped, r.exit_code) == (MAX_OUTPUT, MAX_OUTPUT, False, 0)
    r = sb.run(f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' y", timeout_s=60)
    assert (len(r.stdout), r.stdout.count("y"), r.stderr, r.output_capped) == (MAX_OUTPUT, MAX_OUTPUT, "", True)
    r = sb.run(f"head -c {MAX_OUTPUT + 1} /dev/zero | tr '\\0' e >&2; echo out", timeout_s=60)
    assert (r.stdout, len(r.stderr), r.stderr.count("e"), r.output_capped) == ("out\n", MAX_OUTPUT, MAX_OUTPUT, True)
    assert (len(r.combined), r.combined.replace("e", "")) == (MAX_OUTPUT + 4, "out\n")
    r = sb.run("head -c 100000000 /dev/zero | tr '\\0' y; echo done", timeout_s=60)  # killed: nothing of the harness
    assert (len(r.stdout), r.stdout.count("y"), r.stderr, r.output_capped, r.exit_code) == (MAX_OUTPUT, MAX_OUTPUT, "", True, 137)
    assert len(r.combined) == MAX_OUTPUT
    assert sb.run("echo ok").combined == "ok\n"


def test_exported_variables_aliases_and_functions_carry_over(sb: Sandbox) -> None:
    sb.write_files({"env.sh": "export VENV=/work/venv\nPATH=$VENV/bin:$PATH\ndeactivate() { echo bye; }\n"})
    r = sb.run("export FOO=bar; alias ll='echo LL'; greet() { echo hi $1; }; source env.sh; cd /tmp; LOCAL=1")
    assert (r.exit_code, r.combined) == (0, "")
    r = sb.run('echo "$FOO|$LOCAL|$VENV|${PATH%%:*}"; ll; greet you; deactivate; echo $USER $LOGNAME $HOME; pwd')
    assert (r.stdout, r.stderr) == ("bar||/work/venv|/work/venv/bin\nLL\nhi you\nbye\nagent agent /home/agent\n/tmp\n", "")
    assert sb.run("unset FOO; unalias ll; export BAR=1").exit_code == 0
    r = sb.run('echo "[$FOO][$BAR]"; ll')
    assert (r.stdout, r.stderr) == ("[][1]\n", "bash: line 1: ll: command not found\n")
    assert sb.run("export A=1; exit 4").exit_code == 4  # `exit` keeps what was set
    assert sb.run("export B=2; sleep 100", timeout_s=1).exit_code == 124  # as after Ctrl-C in a terminal
    assert sb.run("trap '' TERM; export C=3; sleep 100", timeout_s=1).exit_code == 137  # killed: the state before
    assert sb.run("export D=4; exec true").exit_code == 0  # no shell left to save: the state before
    assert sb.run('echo "$A$B$C$D"; pwd').stdout == "12\n/tmp\n"
    # harness steps neither see nor change the agent's shell state
    assert sb.run_batch(['echo "[$A][$BAR]"', "export E=5"]) == [(0, "[][]\n"), (0, "")]
    assert sb.run('echo "[$A][$E]"').stdout == "[1][]\n"
    sb.reset()
    r = sb.run('echo "[$A][$BAR]"; ll; pwd')
    assert (r.stdout, r.stderr) == ("[][]\n/work\n", "bash: line 1: ll: command not found\n")


def test_a_working_directory_whose_name_holds_a_newline(sb: Sandbox) -> None:
    r = sb.run("mkdir $'x\\ny' && cd $'x\\ny' && touch f")
    assert (r.exit_code, r.cwd) == (0, "/work/x\ny")
    assert sorted(c["path"] for c in r.created) == ["x\ny", "x\ny/f"]
    assert sb.run("pwd").stdout == "/work/x\ny\n"  # the next action starts there


def test_a_background_job_writing_to_stderr_during_the_report(sb: Sandbox) -> None:
    """The end-of-action report shares stderr with the action: a background job's lines landed inside it,
    losing the job's output and file hashes, or ending the trajectory (`invalid literal for int()`)."""
    r1 = sb.run("touch f1 f2 f3; (for i in $(seq 3000); do echo log line $i >&2; done) &")
    r2 = sb.run("sleep 1; echo next")
    r3 = sb.run("echo after")
    assert r1.exit_code == r2.exit_code == r3.exit_code == 0 and r2.stdout == "next\n" and r3.stdout == "after\n"
    assert {c["path"]: c["md5"] for c in r1.created} == {f: "d41d8cd98f00b204e9800998ecf8427e" for f in ("f1", "f2", "f3")}
    lines = (r1.stderr + r2.stderr + r3.stderr).splitlines()  # every line, once, in order, wherever it arrived
    assert lines == [f"log line {i}" for i in range(1, 3001)]


def test_checks_are_read_whatever_a_background_job_prints(sb: Sandbox) -> None:
    """A check's result line was found only at the start of a line: a background job's dots before it
    made the check read as failed (-1)."""
    sb.run("echo ok > result.txt; (for i in $(seq 300); do printf .; sleep 0.005; done) &")
    assert sb.run_batch(["cat result.txt", "test -f nothing-here"]) == [(0, "ok\n"), (1, "")]


def test_a_large_check_output_is_read_whatever_a_background_job_prints(sb: Sandbox) -> None:
    """One long result line went out in several writes, and a background job's lines landed inside it: the
    check read as failed (-1, 3 of 5 at 300 KB). And five large outputs filled the harness's small tmpfs."""
    sb.run("(while :; do echo bg-line; sleep 0.002; done) &")
    out = "".join(f"{i:07d}\n" for i in range(40000))  # 320 KB
    for _ in range(3):
        assert sb.run_batch(["seq -f %07g 0 39999"] * 2) == [(0, out)] * 2
    big = "x" * 1_000_000 + "\n"
    assert sb.run_batch(["head -c 1000000 /dev/zero | tr '\\000' x; echo"] * 5) == [(0, big)] * 5
    sb.run("kill %1 2>/dev/null; true")
