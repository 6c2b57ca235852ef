"""The command line's error handling: one line naming what is wrong and exit 1, never a traceback,
and outputs that would overwrite the corpus refused."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from pipelines.cli import main
from pipelines.ingest import ingest
from pipelines.store import Corpus


@pytest.fixture
def corpus(tmp_path: Path, sample: Path) -> Path:
    ingest([sample / "intercode"], tmp_path / "corpus", progress=False)
    return tmp_path / "corpus"


def test_a_damaged_parquet_part_is_one_line_from_duckdb(corpus: Path, capsys) -> None:
    [part] = sorted(corpus.glob("turns/*/*.parquet"))[:1]
    part.write_bytes(part.read_bytes()[:100])
    assert main(["stats", str(corpus)]) == 1
    err = capsys.readouterr().err
    assert err == (f"worldline stats: error: DuckDB: Invalid Input Error: No magic bytes found at end of file '{part}' "
                   f"(`worldline check {corpus}` tests every file)\n")
    assert main(["query", str(corpus), "SELECT count(*) FROM turns"]) == 1  # not the view's SQL: the same line
    assert capsys.readouterr().err == err.replace("worldline stats", "worldline query")


def test_out_of_memory_names_the_memory_limit_not_a_damaged_file(corpus: Path, capsys) -> None:
    """DuckDB running out of the memory `--memory-limit` gave it was told to run `worldline check` (for damaged files)."""
    assert main(["clean", str(corpus), "--memory-limit", "1KB"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("worldline clean: error: DuckDB: Out of Memory Error: ")
    assert err.endswith(" (--memory-limit 1KB is too little for this corpus: give more)\n") and "check" not in err


def test_os_errors_are_one_line(corpus: Path, tmp_path: Path, capsys) -> None:
    (tmp_path / "afile.txt").write_text("x")
    assert main(["export", str(corpus), "--out", str(tmp_path / "afile.txt" / "sub")]) == 1
    assert capsys.readouterr().err == f"worldline export: error: Not a directory: {tmp_path / 'afile.txt' / 'sub'}\n"


def test_outputs_inside_the_corpus_are_refused(corpus: Path, tmp_path: Path, capsys) -> None:
    manifest = (corpus / "manifest.json").read_bytes()
    for cmd in (["export", str(corpus), "--out", str(corpus)], ["export", str(corpus), "--out", str(corpus / "x")],
                ["report", str(corpus), "--out", str(corpus / "manifest.json")]):
        assert main(cmd) == 1
        what = f"{cmd[0]} --out"
        assert capsys.readouterr().err == (f"worldline {cmd[0]}: error: {what} {cmd[-1]} is the corpus {corpus} or inside it; "
                                           "write it elsewhere (beside the corpus, say)\n")
    assert (corpus / "manifest.json").read_bytes() == manifest
    assert Corpus(corpus).require() is not None


def test_report_goes_beside_the_corpus_even_from_inside_it(corpus: Path, tmp_path: Path, capsys) -> None:
    cwd = os.getcwd()
    os.chdir(corpus)
    try:
        assert main(["report", "."]) == 0  # `Path('.').parent` is `.`: the report went into the corpus
    finally:
        os.chdir(cwd)
    assert (tmp_path / "report.html").is_file() and not (corpus / "report.html").exists()
    (tmp_path / "reports").mkdir()
    assert main(["report", str(corpus), "--out", str(tmp_path / "reports")]) == 0  # a directory: report.html in it
    assert (tmp_path / "reports" / "report.html").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_report_out_never_overwrites_another_corpus_or_a_file_that_is_no_report(corpus: Path, tmp_path: Path, sample: Path,
                                                                               capsys) -> None:
    """`report --out OTHER/manifest.json` replaced another corpus's manifest with HTML (every command refused that
    corpus from then on), and `--out traces.jsonl` an input, both with exit 0."""
    other = tmp_path / "other"
    ingest([sample / "tau-bench"], other, progress=False)
    manifest = (other / "manifest.json").read_bytes()
    assert main(["report", str(corpus), "--out", str(other / "manifest.json")]) == 1
    assert capsys.readouterr().err == (f"worldline report: error: report --out {other / 'manifest.json'} is inside {other}, "
                                       "a corpus or a stage's output; write it elsewhere\n")
    trace = tmp_path / "traces.jsonl"
    trace.write_text('{"messages": []}\n')
    assert main(["report", str(corpus), "--out", str(trace)]) == 1
    assert capsys.readouterr().err == (f"worldline report: error: report --out {trace} exists and is no Worldline report; "
                                       "give a new file name or a folder\n")
    fifo = tmp_path / "pipe.html"  # opened to see whether it was a report, it blocked the command
    os.mkfifo(fifo)
    assert main(["report", str(corpus), "--out", str(fifo)]) == 1
    assert "exists and is no Worldline report" in capsys.readouterr().err
    assert (other / "manifest.json").read_bytes() == manifest and trace.read_text() == '{"messages": []}\n'
    assert main(["report", str(corpus), "--out", str(tmp_path / "r.html")]) == 0
    assert main(["report", str(corpus), "--out", str(tmp_path / "r.html")]) == 0  # its own report: replaced


@pytest.mark.parametrize("cmd, message", [
    (["export", "{c}", "--out", "{c}x", "--seq-len", "99999999999999999999"], "argument --seq-len: 99999999999999999999: must be below 2**63"),
    (["clean", "{c}", "--ngram", "-99999999999999999999"], "argument --ngram: -99999999999999999999: must be below 2**63"),
    (["dedup", "{c}", "--shingle", "x"], "argument --shingle: invalid int value: 'x'"),
])
def test_integers_past_64_bits_are_usage_errors(corpus: Path, capsys, cmd: list[str], message: str) -> None:
    """They were tracebacks from orjson or numpy deep inside the stage (export --seq-len, clean --min-turns and
    --ngram, dedup --shingle and --min-prefix-share)."""
    with pytest.raises(SystemExit) as e:
        main([a.format(c=corpus) for a in cmd])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_a_check_interrupted_is_130_not_a_failed_contract(corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Ctrl-C during `check`: DuckDB's "Query interrupted" was caught as a contract that could not run, printed as a
    FAIL, and the command went on to exit 1."""
    import pipelines.contracts

    def interrupted(corpus: object) -> object:
        raise RuntimeError("Query interrupted")

    monkeypatch.setitem(pipelines.contracts.CONTRACTS, "unique_trajectory_id", interrupted)
    assert main(["check", str(corpus)]) == 130
    out = capsys.readouterr()
    assert "FAIL" not in out.out and out.err == "worldline check: interrupted\n"


def test_export_to_a_file_or_from_a_corpus_it_cannot_write_fails_before_the_work(corpus: Path, tmp_path: Path, capsys) -> None:
    """`--out` a file said "File exists"; a read-only corpus (export records its split assignments in it) failed
    only at the end, after every shard was written, leaving an export without its manifest."""
    (tmp_path / "afile").write_text("x")
    assert main(["export", str(corpus), "--out", str(tmp_path / "afile"), "--quiet"]) == 1
    assert capsys.readouterr().err == (f"worldline export: error: export --out {tmp_path / 'afile'} is a file, not a folder; "
                                       "choose a new or empty directory\n")
    import subprocess

    ro = tmp_path / "ro"  # the corpus on a read-only bind mount (root ignores a folder's permissions)
    ro.mkdir()
    if subprocess.run(["mount", "--bind", "-o", "ro", str(corpus), str(ro)], capture_output=True).returncode != 0:
        pytest.fail("a read-only bind mount needs root (mount --bind -o ro): run the tests as root, as CI does")
    try:
        assert main(["export", str(ro), "--out", str(tmp_path / "ex"), "--quiet"]) == 1
        assert capsys.readouterr().err == (f"worldline export: error: export records its split assignments in the corpus {ro}: "
                                           f"cannot write in {ro}: Read-only file system\n")
        assert not (tmp_path / "ex").exists()
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_export_refuses_a_directory_that_is_not_an_export(corpus: Path, tmp_path: Path, capsys) -> None:
    # `export --out DIR` replaced DIR's chat/, eval/, ... and its manifest.json, whatever they were
    mine = tmp_path / "mine"
    (mine / "chat").mkdir(parents=True)
    (mine / "chat" / "notes.txt").write_text("mine")
    assert main(["export", str(corpus), "--out", str(mine), "--formats", "parquet"]) == 1
    assert capsys.readouterr().err == (f"worldline export: error: export --out {mine} already holds chat/ that no export "
                                       "wrote (an export replaces them); choose a new or empty directory\n")
    shutil.rmtree(mine / "chat")
    (mine / "manifest.json").write_text("{}")
    assert main(["export", str(corpus), "--out", str(mine), "--formats", "parquet"]) == 1
    assert "its manifest.json is not an export's" in capsys.readouterr().err
    assert (mine / "manifest.json").read_text() == "{}"
    (mine / "manifest.json").unlink()  # a folder with other things in it is used, and they are left alone
    (mine / "notes.txt").write_text("mine")
    assert main(["export", str(corpus), "--out", str(mine), "--formats", "parquet", "--quiet"]) == 0
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "manifest.json").is_file()


def test_export_options_are_checked_before_anything_is_written(corpus: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "ex"
    (tmp_path / "bad.jinja").write_text("{% for m in messages %}\n{{ m.content }")
    (tmp_path / "latin1.jinja").write_bytes(b"\xff{{ m.content }}")
    (tmp_path / "const.jinja").write_text("hello")
    (tmp_path / "nosys.jinja").write_text(  # as Gemma's: it was a jinja2 traceback
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m.content }}{% endfor %}")
    for args, message in [
        (["--domain-weight", "bogus=2"], "--domain-weight bogus: not a domain; the domains are mcp, search, terminal, swe, web, os, android"),
        (["--shard-tokens", "0"], "--shard-tokens 0: must be positive"),
        # (1e9 ran out of memory building a billion copies of each document)
        (["--source-weight", "intercode=1e9"], "weight of 'intercode' is 1e+09: at most 1000 (a weight of W exports W "
         "copies of each of its trajectories)"),
        (["--eval-middle-turns", "-1"], "--eval-middle-turns -1: must be ≥ 0"),
        (["--test", "nan"], "split fractions validation=0.05, test=nan: each ≥ 0, sum ≤ 1"),
        (["--chat-template", str(tmp_path / "bad.jinja")], "--chat-template: line 2: unexpected '}'"),
        (["--chat-template", str(tmp_path / "const.jinja")], "the chat template given (--chat-template) drops or rewrites "
         "message 0 (system); scoring needs contents verbatim"),  # it blamed the tokenizer's own template
        (["--chat-template", str(tmp_path / "latin1.jinja")], f"--chat-template {tmp_path / 'latin1.jinja'}: not UTF-8 text "
         "(byte 0: invalid start byte)"),
        (["--chat-template", str(tmp_path / "nosys.jinja")], "the chat template refuses messages of roles "
         "system, user, assistant: System role not supported; give one that takes them (--chat-template)"),
    ]:
        assert main(["export", str(corpus), "--out", str(out), "--quiet", *args]) == 1
        assert capsys.readouterr().err == f"worldline export: error: {message}\n"
    assert not out.exists()


def test_a_weight_for_what_the_corpus_lacks_is_reported(corpus: Path, tmp_path: Path, capsys) -> None:
    assert main(["export", str(corpus), "--out", str(tmp_path / "ex"), "--quiet", "--formats", "parquet",
                 "--domain-weight", "web=2", "--source-weight", "intercode=2", "--source-weight", "nosuch=3"]) == 0
    err = capsys.readouterr().err
    assert ("export: --domain-weight web: no such domain among the exported trajectories; the weight does nothing "
            "(present: terminal)") in err
    assert "export: --source-weight nosuch: no such source_format among the exported trajectories" in err
    assert "intercode:" not in err


def test_export_after_an_append_names_the_stale_tables_and_what_unscored_turns_got(
        corpus: Path, tmp_path: Path, sample: Path, capsys) -> None:
    import json

    assert main(["score", str(corpus), "--tier", "surface", "--quiet"]) == 0
    ingest([sample / "tau-bench"], corpus, progress=False)  # after scoring: no score rows for these turns
    capsys.readouterr()
    assert main(["export", str(corpus), "--out", str(tmp_path / "ex"), "--quiet", "--formats", "parquet"]) == 0
    out, err = capsys.readouterr()
    assert ("export: side table turn_scores is stale: computed before the corpus last changed; rerun `worldline score` "
            "(exporting with it as it is)") in err
    n = json.loads((tmp_path / "ex" / "manifest.json").read_text())["counts"]["unscored_turns"]
    assert n > 0
    assert (f"  turns without a score row (ingested after `worldline score` ran): {n}, trained (unscored=train); "
            "rerun `worldline score` to score them") in out
    [without] = [line for line in out.splitlines() if "turns without loss" in line]
    assert "score row" not in without  # they have loss: the summary listed them there


def test_a_directory_with_another_manifest_is_not_a_corpus(corpus: Path, tmp_path: Path, capsys) -> None:
    # `stats EXPORT_DIR` printed empty tables and exit 0
    out = tmp_path / "ex"
    assert main(["export", str(corpus), "--out", str(out), "--quiet", "--formats", "parquet"]) == 0
    for doc in (None, "[1, 2]"):
        if doc is not None:
            (out / "manifest.json").write_text(doc)
        capsys.readouterr()
        assert main(["stats", str(out)]) == 1
        fmt = "'worldline-export/1'" if doc is None else "'list'"
        assert capsys.readouterr().err == (f"worldline stats: error: {out / 'manifest.json'}: not a Worldline corpus "
                                           f"manifest (format {fmt})\n")


def test_a_template_transformers_accepts_is_accepted(tmp_path: Path) -> None:
    """The check compiles a template as transformers does: loop controls and `{% generation %}` are fine."""
    from pipelines.export import ExportTokenizer

    template = ("{% for m in messages %}{% if loop.index > 50 %}{% break %}{% endif %}"
                "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
                "{% else %}{{ m.content }}{% endif %}{% endfor %}")
    assert ExportTokenizer.load("smollm2", template).hf.chat_template == template


def test_export_help_states_the_defaults(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 2048)", "(default: smollm2)", "(default: parquet chat megatron)",
                    "validation (default: 0.05)", "(default: 0)", "(default: 16777216)", "(default: 2)"):
        assert default in text, default
    assert "(default: None)" not in text and "(default: False)" not in text


def test_every_option_with_a_default_states_it_in_its_help() -> None:
    """Each subcommand's parser (collect mcp, sandbox build, ... included) is made by build_parser's
    parser class: an option with a default and without help, or whose help hides the default, fails."""
    import argparse

    from pipelines.cli import build_parser

    missing = []

    def walk(p: argparse.ArgumentParser, name: str) -> None:
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sub in a.choices.items():
                    walk(sub, f"{name} {n}")
            elif a.option_strings and not (a.default is None or a.default is False or a.default == [] or a.default == argparse.SUPPRESS):
                shown = p.formatter_class(prog=name)._get_help_string(a) or ""
                if not a.help or "default" not in shown:
                    missing.append(f"{name} {a.option_strings[-1]}")

    walk(build_parser(), "worldline")
    assert missing == []


@pytest.mark.parametrize("edit, problem", [
    (lambda m: m.update(batches="x"), "'batches' must be a list, got str"),
    (lambda m: m.pop("inputs"), "'inputs' must be an object, got NoneType"),
    (lambda m: m.update(side="x"), "'side' must be an object, got str"),
    (lambda m: m["batches"][0].pop("files"), "batches[0]: not an object with an 'id' and its 'files'"),
    (lambda m: next(iter(m["inputs"].values())).pop("turns"), "input {sha}: not an object with the counts records, trajectories, turns, quarantined"),
])
def test_a_damaged_manifest_is_one_line_for_every_stage(corpus: Path, sample: Path, capsys, edit, problem: str) -> None:
    path = corpus / "manifest.json"
    m = json.loads(path.read_text())
    edit(m)
    path.write_text(json.dumps(m))
    problem = problem.format(sha=next(iter(json.loads(path.read_text()).get("inputs") or {"": 0}))[:16])
    for cmd in (["ingest", str(sample / "fireact"), "--out", str(corpus)], ["clean", str(corpus)],
                ["score", str(corpus), "--tier", "surface"], ["stats", str(corpus)], ["check", str(corpus)]):
        assert main(cmd) == 1, cmd
        assert capsys.readouterr().err == (f"worldline {cmd[0]}: error: {path}: damaged corpus manifest ({problem}); "
                                           "restore it from a copy, or ingest the inputs again into a new folder\n")
    assert json.loads(path.read_text()) == m  # nothing was written over it


def test_ingest_refuses_a_folder_inside_a_corpus_or_one_with_data_but_no_manifest(corpus: Path, sample: Path, capsys) -> None:
    files = sorted(p for p in corpus.rglob("*") if p.is_file())
    for out in (corpus / "turns", corpus / "new"):
        assert main(["ingest", str(sample / "fireact"), "--out", str(out)]) == 1
        assert capsys.readouterr().err == (f"worldline ingest: error: {out} is inside the corpus {corpus}; "
                                           "write a corpus into a folder of its own\n")
    assert sorted(p for p in corpus.rglob("*") if p.is_file()) == files and not (corpus / "new").exists()
    (corpus / "manifest.json").unlink()
    assert main(["ingest", str(sample / "fireact"), "--out", str(corpus)]) == 1
    assert capsys.readouterr().err == (f"worldline ingest: error: {corpus} holds corpus data (trajectories/, turns/) but no "
                                       "manifest.json; restore the manifest, or write the corpus into a new folder\n")


def _damage(corpus: Path, table: str) -> Path:
    f = corpus / "side" / table / "data.parquet"
    f.write_bytes(b"not parquet")
    return f


def test_a_damaged_side_table_breaks_only_what_reads_it_and_its_stage_rewrites_it(corpus: Path, capsys) -> None:
    for cmd in (["clean", str(corpus)], ["dedup", str(corpus)], ["score", str(corpus), "--tier", "surface"]):
        assert main(cmd) == 0
    capsys.readouterr()
    want = main(["query", str(corpus), "SELECT count(*) FROM kept_turns", "--format", "json"]), capsys.readouterr().out
    f = _damage(corpus, "turn_scores")
    assert main(["query", str(corpus), "SELECT count(*) AS n FROM turns", "--format", "json"]) == 0  # the rest still reads
    assert json.loads(capsys.readouterr().out)[0]["n"] > 0
    assert (main(["query", str(corpus), "SELECT count(*) FROM kept_turns", "--format", "json"]), capsys.readouterr().out) == want
    assert main(["query", str(corpus), "SELECT trajectory_id FROM turn_scores"]) == 1
    assert capsys.readouterr().err == (
        f"worldline query: error: Invalid Input Error: side table turn_scores cannot be read (Invalid Input Error: "
        f"File '{f}' too small to be a Parquet file); run `worldline score` again to rewrite it\n")
    assert main(["check", str(corpus)]) == 1
    assert "bad_files: ['side/turn_scores/data.parquet: unreadable (ArrowInvalid); rerun `worldline score`']" in capsys.readouterr().out
    assert main(["score", str(corpus), "--tier", "surface"]) == 0  # its own stage writes it again
    _damage(corpus, "dedup_signatures")
    assert main(["dedup", str(corpus)]) == 0  # signatures computed again, not reused
    assert "signatures: reused" not in capsys.readouterr().out
    assert main(["check", str(corpus)]) == 0
    # verdicts that kept_turns is built from: it fails rather than leave them out
    _damage(corpus, "cleaning")
    assert main(["query", str(corpus), "SELECT count(*) FROM kept_turns"]) == 1
    assert "side table cleaning cannot be read" in capsys.readouterr().err
    m = json.loads((corpus / "manifest.json").read_text())  # a corpus from before the columns were recorded
    del m["side"]["cleaning"]["arrow_schema"]
    (corpus / "manifest.json").write_text(json.dumps(m))
    for sql in ("SELECT * FROM cleaning", "SELECT count(*) FROM kept_trajectories"):
        assert main(["query", str(corpus), sql]) == 1
        assert "side table cleaning cannot be read" in capsys.readouterr().err
    assert main(["clean", str(corpus)]) == 0
    capsys.readouterr()
    assert (main(["query", str(corpus), "SELECT count(*) FROM kept_turns", "--format", "json"]), capsys.readouterr().out) == want


@pytest.mark.parametrize("cmd, message", [
    (["clean", "{c}", "--min-turns", "-5"], "--min-turns must be at least 0 (got -5)"),
    (["score", "{c}", "--tier", "model", "--max-context", "-1"], "--max-context must be at least 16 (got -1)"),
    (["score", "{c}", "--tier", "model", "--batch-tokens", "-1"], "--batch-tokens must be at least 0 (got -1)"),
    (["ingest", "{c}", "--out", "{c}2", "--workers", "100000"], "--workers 100000: more processes than this machine can use"),
    (["ingest", "{c}", "--out", "{c}2", "--max-record-mb", "1e30"], "--max-record-mb 1e+30: must be below 8.796e+12 MB (2**63 bytes)"),
    (["dedup", "{c}", "--num-perm", "1000000"], "--num-perm 1000000: at most 4096 (each is 4 bytes of every trajectory's signature"),
])
def test_option_values_are_checked_before_the_run(corpus: Path, capsys, cmd: list[str], message: str) -> None:
    assert main([a.format(c=corpus) for a in cmd]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_beam_with_the_surface_tier_is_refused_before_beam_loads(corpus: Path) -> None:
    """Beam's import logs an 'apitools not found' warning (root logger, so a subprocess to see it): it came
    ahead of the usage error."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pipelines.cli", "score", str(corpus), "--tier", "surface", "--beam"],
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (1, "worldline score: error: --beam runs the model tier on Beam's workers; "
                                           "--tier surface has none (drop --beam)\n")


def test_a_reader_that_goes_away_ends_the_command_quietly(corpus: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", "query", str(corpus),
                             "SELECT * FROM turns, range(20)", "--format", "csv"],  # far more than a pipe holds
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()  # `| head -c 100`
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""
    proc.stderr.close()


def test_the_parser_imports_no_stage(tmp_path: Path) -> None:
    """Every command builds the whole parser first: with the MCP SDK and the traces stage imported for
    it, `worldline --help` took 1.5-2 s; those come with the command that needs them."""
    import subprocess
    import sys

    heavy = ("mcp", "pipelines.traces.stage", "torch", "transformers", "duckdb", "polars", "apache_beam", "dagster", "docker")
    code = (f"import sys; from pipelines.cli import build_parser; build_parser(); "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout == "[]\n", r.stderr


def test_an_interrupt_while_the_parser_loads_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import pipelines.cli as cli

    def interrupted():  # noqa: ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["stats", "x"]) == 130
    assert capsys.readouterr().err == "worldline: interrupted\n"


def test_ctrl_c_during_a_query_is_one_line_and_130(corpus: Path, capsys) -> None:
    """DuckDB answers SIGINT during a query with RuntimeError('Query interrupted') (it was a traceback
    and 1), and now and then not at all: the query went on through every Ctrl-C (1 run in 6 here)."""
    import signal
    import threading
    import time

    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    assert main(["query", str(corpus), "SELECT sum(hash(range)) FROM range(100000000000)"]) == 130
    assert capsys.readouterr().err == "worldline query: interrupted\n"
    assert time.monotonic() - start < 10


def test_every_traces_option_is_in_its_doc() -> None:
    import argparse

    from pipelines.traces.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "traces.md").read_text()
    flags = [s for a in p._actions for s in a.option_strings if s not in ("-h", "--help")]
    assert [f for f in flags if f"`{f}" not in doc] == []


def test_duckdb_interrupted_in_any_stage_is_130(corpus: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Outside `query` (no helper thread there) DuckDB's answer to Ctrl-C, RuntimeError('Query interrupted'),
    reaches `_run`: one line and 130; any other RuntimeError stays a traceback."""
    import pipelines.stats

    def interrupted(corpus_dir: object) -> str:
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(pipelines.stats, "render_stats", interrupted)
    assert main(["stats", str(corpus)]) == 130
    assert capsys.readouterr().err == "worldline stats: interrupted\n"

    def broken(corpus_dir: object) -> str:
        raise RuntimeError("something else")

    monkeypatch.setattr(pipelines.stats, "render_stats", broken)
    with pytest.raises(RuntimeError, match="something else"):
        main(["stats", str(corpus)])


def test_clean_and_dedup_options_reach_their_configs(corpus: Path, tmp_path: Path, capsys) -> None:
    """Every option of `clean` and `dedup` arrives in the stage's config (recorded with its side tables):
    five of them were checked for their help text and their bounds only."""
    import dataclasses

    from pipelines.clean import CleanConfig
    from pipelines.decontam import DecontamConfig
    from pipelines.dedup import DedupConfig
    from pipelines.redact import RedactConfig

    evals = tmp_path / "eval.jsonl"
    evals.write_text(json.dumps({"id": "e1", "task": "count the lines of every log file in the folder"}) + "\n")
    assert main(["clean", str(corpus), "--quiet", "--min-turns", "3", "--no-retry-identical", "--ip-addresses",
                 "--eval-set", str(evals), "--ngram", "5", "--min-overlap", "0.9", "--memory-limit", "300MB"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"retry_cycle +1 turns", out)  # 41 turns without the option
    want = CleanConfig(min_turns=3, retry_identical=False, redact=RedactConfig(ip_addresses=True),
                       decontam=DecontamConfig(eval_set=str(evals), n=5, min_overlap=0.9), memory_limit="300MB")
    side = json.loads((corpus / "manifest.json").read_text())["side"]
    assert side["cleaning"]["config"] == json.loads(json.dumps(dataclasses.asdict(want), default=str))
    assert main(["dedup", str(corpus), "--quiet", "--threshold", "0.8", "--num-perm", "64", "--shingle", "4", "--bands", "8",
                 "--rows", "8", "--min-prefix-share", "3", "--ignore-cleaning", "--recompute", "--memory-limit", "300MB"]) == 0
    want_dedup = DedupConfig(threshold=0.8, num_perm=64, shingle=4, bands=8, rows=8, min_prefix_share=3, use_cleaning=False,
                             reuse_signatures=False, memory_limit="300MB")
    side = json.loads((corpus / "manifest.json").read_text())["side"]
    assert side["duplicates"]["config"] == json.loads(json.dumps(dataclasses.asdict(want_dedup), default=str))
    assert side["dedup_signatures"]["config"]["use_cleaning"] is False
