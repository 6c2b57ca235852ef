"""The command lines the stages show run in a shell as shown."""

from __future__ import annotations

from pathlib import Path

from pipelines.shell import query_command, worldline_command


def test_see_more_commands_survive_a_shell(tmp_path: Path, sample: Path) -> None:
    """Every `see:` line and `see_more` put the corpus path into the command unquoted (a path with a space
    broke it), and the traces asset's was a `duckdb` command the project does not install."""
    import shlex
    import subprocess
    import sys

    from pipelines.ingest import ingest

    root = tmp_path / "my corpus"
    ingest([sample / "tau-bench"], root, progress=False)
    sql = """SELECT 'it''s' AS a, "domain" AS "b$", count(*) AS n FROM trajectories GROUP BY ALL"""
    cmd = query_command(root, sql)
    assert cmd.startswith(f"worldline query {shlex.quote(str(root))} ")
    out = subprocess.run(["bash", "-c", cmd.replace("worldline", f"{sys.executable} -m pipelines.cli", 1) + " --format csv"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2], check=True).stdout
    assert out.splitlines()[0] == "a,b$,n" and out.splitlines()[1].startswith("it's,")


def test_a_summarys_see_line_quotes_the_corpus_path(tmp_path: Path) -> None:
    """The stages' own `see:` lines are the same command (ingest's was `worldline query /a b/c ...`)."""
    from pipelines.ingest import IngestConfig, ingest

    (tmp_path / "bad.jsonl").write_text("not json\n")
    root = tmp_path / "my corpus"
    s = ingest([tmp_path / "bad.jsonl"], root, IngestConfig(workers=1), progress=False)
    assert f"  see: worldline query '{root}' \"SELECT source, locator, reason, detail FROM quarantine\"" in s.render()


def test_worldline_command_quotes_each_argument() -> None:
    assert worldline_command("clean", Path("/data/my corpus")) == "worldline clean '/data/my corpus'"
    assert worldline_command("score", "/d/it's", "--tier", "model") == "worldline score '/d/it'\"'\"'s' --tier model"
    assert worldline_command("dedup", "/plain/path") == "worldline dedup /plain/path"


def test_a_contracts_rerun_and_an_errors_hint_quote_the_corpus_path(tmp_path: Path, sample: Path, capsys) -> None:
    """The contracts' `rerun` commands and the DuckDB error's `worldline check` hint put the corpus path in
    unquoted: `worldline clean /a/my corpus` cleans a corpus named `/a/my`."""
    from pipelines.clean import clean
    from pipelines.clean_contracts import run_clean_contracts
    from pipelines.cli import main
    from pipelines.dedup import dedup
    from pipelines.ingest import ingest

    root = tmp_path / "my corpus"
    ingest([sample / "tau-bench"], root, progress=False)
    clean(root, progress=False)
    dedup(root, progress=False)
    ingest([sample / "intercode"], root, progress=False)  # the verdicts are stale now
    failed = {r.name: r.metadata.get("rerun") for r in run_clean_contracts(root) if not r.passed}
    assert failed == {"cleaning_every_trajectory_judged": f"worldline clean '{root}'",
                      "dedup_current": f"worldline dedup '{root}'"}
    [part] = sorted(root.glob("turns/*/*.parquet"))[:1]
    part.write_bytes(part.read_bytes()[:100])
    assert main(["stats", str(root)]) == 1
    assert capsys.readouterr().err.endswith(f"(`worldline check '{root}'` tests every file)\n")
