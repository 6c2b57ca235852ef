"""Data contracts over a written corpus, computed with DuckDB and the manifest.

Each check returns a `ContractResult` with metadata a person can act on (what failed, where, and
the query that shows more). Dagster asset checks and `worldline check` both call `run_contracts`.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from pipelines.query import connect, is_interrupted
from pipelines.shell import query_command
from pipelines.sources import sha256_file
from pipelines.store import TABLE_SCHEMAS, Corpus
from schemas.tables import DOMAINS, OBSERVATION_KINDS, TURN_KINDS


@dataclass
class ContractResult:
    name: str
    passed: bool
    description: str
    metadata: dict[str, Any] = field(default_factory=dict)
    severity: str = "error"  # error | warn: a failed `warn` contract is reported, not a broken contract

    def line(self) -> str:
        detail = ", ".join(f"{k}={v}" for k, v in self.metadata.items() if not isinstance(v, list | dict))
        verdict = "PASS" if self.passed else "FAIL" if self.severity == "error" else "WARN"
        return f"{verdict}  {self.name}: {self.description}" + (f" ({detail})" if detail else "")


def _q(con, sql: str) -> list[tuple]:
    return con.sql(sql).fetchall()


def schema_valid(corpus: Corpus) -> ContractResult:
    """Every Parquet file has the table's schema, and enumerated columns hold known values."""
    bad_files = []
    for table, schema in TABLE_SCHEMAS.items():
        for f in sorted((corpus.root / table).rglob("*.parquet")) if (corpus.root / table).exists() else []:
            try:
                got = pq.read_schema(f)
            except Exception as e:  # noqa: BLE001 - an unreadable file is exactly what we report
                bad_files.append(f"{f.relative_to(corpus.root)}: unreadable ({type(e).__name__})")
                continue
            if not got.remove_metadata().equals(schema.remove_metadata()):
                bad_files.append(f"{f.relative_to(corpus.root)}: schema differs from `{table}`")
    side = corpus.root / "side"
    entries = corpus.manifest().get("side", {})
    stages = {name: e.get("stage") for name, e in entries.items()}
    for name, e in sorted(entries.items()):  # recorded but gone: the views would read the corpus as if it never ran
        if e.get("path") and not (corpus.root / e["path"]).exists():
            bad_files.append(f"{e['path']}: side table {name} is recorded but missing; rerun `worldline {e.get('stage') or name}`")
    for f in sorted(side.glob("*/*.parquet")) if side.is_dir() else []:
        try:  # the stages' side tables: readable (their columns are each stage's own)
            pq.read_schema(f)
        except Exception as e:  # noqa: BLE001
            stage = stages.get(f.parent.name) or "the stage that wrote it"
            bad_files.append(f"{f.relative_to(corpus.root)}: unreadable ({type(e).__name__}); rerun `worldline {stage}`")
    bad_values: dict[str, int] = {}
    if not bad_files:
        con = connect(corpus.root)
        checks = {
            "trajectories.domain": f"SELECT count(*) FROM trajectories WHERE domain NOT IN {DOMAINS!r}",
            "turns.kind": f"SELECT count(*) FROM turns WHERE kind NOT IN {tuple(TURN_KINDS)!r}",
            "turns.observation_kind": f"SELECT count(*) FROM turns WHERE observation_kind NOT IN {tuple(OBSERVATION_KINDS)!r}",
            "turns.turn_index": "SELECT count(*) FROM turns WHERE turn_index < 0",
            "turns.orphans": "SELECT count(*) FROM turns u ANTI JOIN trajectories t USING (trajectory_id)",
        }
        for name, sql in checks.items():
            n = _q(con, sql)[0][0]
            if n:
                bad_values[name] = n
    return ContractResult(
        "schema_valid",
        not bad_files and not bad_values,
        "every file matches its table schema; enumerated columns hold known values; no orphan turns",
        {"bad_files": bad_files[:20], "bad_values": bad_values},
    )


def counts_reconcile(corpus: Corpus) -> ContractResult:
    """records in = accepted + quarantined per input, and the tables hold what the manifest says."""
    m = corpus.manifest()
    unbalanced = [
        f"{e['source']}: {e['records']} in != {e['trajectories']} + {e['quarantined']}"
        for e in m["inputs"].values()
        if e["records"] != e["trajectories"] + e["quarantined"]
    ]
    expected = {
        "trajectories": sum(e["trajectories"] for e in m["inputs"].values()),
        "turns": sum(e["turns"] for e in m["inputs"].values()),
        "quarantine": sum(e["quarantined"] for e in m["inputs"].values() if not e.get("superseded_by")),
    }
    con = connect(corpus.root)
    actual = {t: _q(con, f"SELECT count(*) FROM {t}")[0][0] for t in expected}
    turns_sum = _q(con, "SELECT coalesce(sum(num_turns), 0) FROM trajectories")[0][0]
    mismatched = {t: f"manifest {expected[t]}, table {actual[t]}" for t in expected if expected[t] != actual[t]}
    if turns_sum != actual["turns"]:
        mismatched["num_turns"] = f"sum(num_turns) {turns_sum}, turns rows {actual['turns']}"
    return ContractResult(
        "counts_reconcile",
        not unbalanced and not mismatched,
        "in = accepted + quarantined for every input; table row counts equal the manifest",
        {
            "records_in": sum(e["records"] for e in m["inputs"].values()),
            "accepted": actual["trajectories"],
            "quarantined": actual["quarantine"],
            "mismatched": mismatched,
            "unbalanced_inputs": unbalanced[:20],
        },
    )


def _percent(rate: float) -> str:
    """A rate bound as a percentage with the digits it needs (0.25 -> 25%, 0.001 -> 0.1%)."""
    return f"{100 * rate:.6g}%"


def quarantine_rate(corpus: Corpus, max_rate: float = 0.25) -> ContractResult:
    """Quarantined records are at most `max_rate` of all records in, over the whole corpus."""
    con = connect(corpus.root)
    acc = _q(con, "SELECT count(*) FROM trajectories")[0][0]
    quar = _q(con, "SELECT count(*) FROM quarantine")[0][0]
    rate = quar / (acc + quar) if acc + quar else 0.0
    reasons = dict(_q(con, "SELECT reason, count(*) FROM quarantine GROUP BY 1 ORDER BY 2 DESC LIMIT 10"))
    return ContractResult(
        "quarantine_rate",
        rate <= max_rate,
        f"quarantined / records in ≤ {_percent(max_rate)}",
        {"rate": round(rate, 4), "max_rate": max_rate, "quarantined": quar, "reasons": reasons,
         "inspect": query_command(corpus.root, "SELECT source, locator, reason, detail FROM quarantine")},
    )


def latest_batch_quarantine_rate(corpus: Corpus, max_rate: float = 0.25, batch: str | None = None) -> ContractResult:
    """The newest ingest's quarantined records are at most `max_rate` of its records in: a drop of
    mostly broken files fails, however large the corpus it joined (a Dagster partition's run).
    `batch`: that ingest's batch instead of the newest (a partition run's own, when another
    partition's run committed after it); "": the run committed none (nothing new to judge)."""
    if batch == "":
        return ContractResult("latest_batch_quarantine_rate", True, f"the newest ingest quarantined ≤ {_percent(max_rate)}",
                              {"batch": None, "note": "this run ingested nothing new"})
    m = corpus.manifest()
    batches = [b for b in m["batches"]
               if b.get("state") == "committed" and isinstance(b.get("counts"), dict) and "records" in b["counts"]]
    if batch is not None:
        batches = [b for b in batches if b["id"] == batch]
    if not batches:
        return ContractResult("latest_batch_quarantine_rate", batch is None,
                              f"the newest ingest quarantined ≤ {_percent(max_rate)}",
                              {"batch": batch, "note": "no ingest batch yet" if batch is None else "no such committed batch"})
    b = batches[-1]
    records, quar = int(b["counts"]["records"]), int(b["counts"]["quarantined"])
    rate = quar / records if records else 0.0
    inputs = [e for e in m["inputs"].values() if e.get("batch") == b["id"]]
    reasons: Counter[str] = Counter()
    for e in inputs:
        reasons.update(e.get("reasons") or {})
    worst = sorted(((e.get("quarantined", 0), e.get("source", "?")) for e in inputs if e.get("quarantined")), reverse=True)
    return ContractResult(
        "latest_batch_quarantine_rate",
        rate <= max_rate,
        f"the newest ingest quarantined ≤ {_percent(max_rate)} of its records",
        {"batch": b["id"], "rate": round(rate, 4), "max_rate": max_rate, "records_in": records, "quarantined": quar,
         "reasons": dict(reasons.most_common(10)), "inputs": [f"{src}: {n}" for n, src in worst[:10]]},
    )


def unique_trajectory_ids(corpus: Corpus) -> ContractResult:
    """No trajectory_id appears twice (ids are content addresses: a repeat is a double commit)."""
    con = connect(corpus.root)
    dups = _q(con, "SELECT trajectory_id, count(*) AS n FROM trajectories GROUP BY 1 HAVING n > 1 ORDER BY n DESC, 1 LIMIT 10")
    total = _q(con, "SELECT count(*) - count(DISTINCT trajectory_id) FROM trajectories")[0][0]
    return ContractResult(
        "unique_trajectory_id",
        total == 0,
        "no trajectory_id appears twice",
        {"duplicate_rows": total, "examples": [f"{t} ×{n}" for t, n in dups]},
    )


def manifest_checksums(corpus: Corpus) -> ContractResult:
    """Every file the manifest lists exists with its sha256, and no Parquet file is unlisted."""
    m = corpus.manifest()
    bad, missing, listed = [], [], set()
    for b in m["batches"]:
        for f in b["files"]:
            p = corpus.root / f["path"]
            listed.add(Path(f["path"]))
            if not p.exists():
                missing.append(f["path"])
            elif sha256_file(p) != f["sha256"]:
                bad.append(f["path"])
    unlisted = sorted(
        str(p.relative_to(corpus.root))
        for t in TABLE_SCHEMAS
        if (corpus.root / t).exists()
        for p in (corpus.root / t).rglob("*.parquet")
        if p.relative_to(corpus.root) not in listed
    )
    return ContractResult(
        "manifest_checksums",
        not bad and not missing and not unlisted,
        "every data file is listed in the manifest and matches its sha256",
        {"files": len(listed), "checksum_mismatch": bad[:20], "missing": missing[:20], "unlisted": unlisted[:20]},
    )


CONTRACTS = {
    "schema_valid": schema_valid,
    "counts_reconcile": counts_reconcile,
    "quarantine_rate": quarantine_rate,
    "latest_batch_quarantine_rate": latest_batch_quarantine_rate,
    "unique_trajectory_id": unique_trajectory_ids,
    "manifest_checksums": manifest_checksums,
}
RATE_CONTRACTS = ("quarantine_rate", "latest_batch_quarantine_rate")  # bounded by `--max-quarantine-rate`


def run_named(contracts: Mapping[str, Callable[[Any], ContractResult]], arg: Any) -> list[ContractResult]:
    """Every contract on `arg` (a corpus, a connection, an output directory); one that cannot
    run is a failed contract saying why (with its docstring's first line), and the others still run."""
    out = []
    for name, fn in contracts.items():
        try:
            out.append(fn(arg))
        except Exception as e:  # noqa: BLE001 - a check that cannot run is a failed check, with why
            if is_interrupted(e):
                raise  # Ctrl-C: not a failed check (the CLI exits 130)
            doc = (getattr(fn, "func", fn).__doc__ or "").strip().splitlines()  # a partial: its function's
            out.append(ContractResult(name, False, doc[0] if doc else "could not be evaluated",
                                      {"error": f"{type(e).__name__}: {e}"}))
    return out


def run_contracts(corpus_dir: Path | str, max_quarantine_rate: float = 0.25,
                  names: Iterable[str] | None = None, batch: str | None = None) -> list[ContractResult]:
    """Every corpus contract (`batch`: the ingest `latest_batch_quarantine_rate` judges; default the
    newest). A path that is not a corpus is a CorpusError, not contracts that fail
    (or pass, over nothing), and a rate bound outside [0, 1] a ValueError: neither is a verdict."""
    if not 0 <= max_quarantine_rate <= 1:  # NaN fails too
        raise ValueError(f"--max-quarantine-rate must be in [0, 1] (got {max_quarantine_rate})")
    corpus = Corpus(corpus_dir).require()
    bounded = {name: functools.partial(CONTRACTS[name], max_rate=max_quarantine_rate) for name in RATE_CONTRACTS}
    bounded["latest_batch_quarantine_rate"] = functools.partial(bounded["latest_batch_quarantine_rate"], batch=batch)
    contracts = {**CONTRACTS, **bounded}
    if names is not None:  # only these (a Dagster run of some of the checks: the others read and hash nothing)
        wanted = set(names)
        contracts = {k: v for k, v in contracts.items() if k in wanted}
    return run_named(contracts, corpus)


def run_stage_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    """The contracts of the stages that ran on the corpus (their side tables exist): clean's, dedup's and
    score's, as their Dagster asset checks run them. Verdicts that a later ingest made stale fail (clean,
    dedup) or warn (score), naming the stage to rerun."""
    from pipelines.clean_contracts import CLEAN_CONTRACTS, DEDUP_CONTRACTS
    from pipelines.score import SCORE_CONTRACTS, score_contracts
    from pipelines.side import side_entries

    corpus = Corpus(corpus_dir).require()
    have = side_entries(corpus)
    out: list[ContractResult] = []
    if "cleaning" in have:
        out += run_named(CLEAN_CONTRACTS, corpus)
    if "duplicates" in have:
        out += run_named(DEDUP_CONTRACTS, corpus)
    if "turn_scores" in have:
        try:
            out += score_contracts(corpus.root)
        except Exception as e:  # noqa: BLE001 - a table that cannot be read fails its contracts, and the rest still run
            if is_interrupted(e):
                raise
            out += [ContractResult(n, False, "turn_scores could not be read", {"error": f"{type(e).__name__}: {e}"})
                    for n in SCORE_CONTRACTS]
    return out


# source format -> (module, function) of its collector's contracts; imported only for data the corpus holds
COLLECTION_CONTRACTS = {
    "mcp-live": ("collectors.mcp.contracts", "run_mcp_contracts"),
    "sandbox": ("sandboxes.contracts", "run_sandbox_contracts"),
    "browser-live": ("collectors.browser.contracts", "run_browser_contracts"),
    "android-live": ("collectors.android.contracts", "run_android_contracts"),
}


def run_collection_contracts(corpus_dir: Path | str) -> list[ContractResult]:
    """The live collectors' contracts (the Dagster checks of their assets) for each collector whose data
    the corpus holds: `worldline check` runs them after the corpus contracts. Imported on use: the core
    does not depend on the collectors. Trajectories that cannot be read give one failed result saying
    why (the corpus contracts say which file)."""
    import importlib

    try:
        con = connect(Corpus(corpus_dir).require().root)
        present = {f for (f,) in _q(con, "SELECT DISTINCT source_format FROM trajectories")}
        con.close()
    except Exception as e:  # noqa: BLE001 - a damaged table: a verdict, not a crash that hides the others
        if is_interrupted(e):
            raise
        return [ContractResult("collection_contracts", False, "the live collectors' contracts could not read trajectories",
                               {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"})]
    out: list[ContractResult] = []
    for fmt, (module, name) in COLLECTION_CONTRACTS.items():
        if fmt in present:
            out += getattr(importlib.import_module(module), name)(corpus_dir)
    return out
