from __future__ import annotations

import pyarrow as pa
import pytest

from schemas import DOMAINS, TRAJECTORIES, TURNS, side_table_schema, validate
from schemas.docs import render
from tests.conftest import ROOT


def _turns(**over) -> pa.Table:
    base = {f.name: pa.array([None], f.type) for f in TURNS}
    base |= {
        "trajectory_id": pa.array(["t1"]),
        "turn_index": pa.array([0], pa.int32()),
        "domain": pa.array(["terminal"]),
        "kind": pa.array(["env"]),
    }
    base |= over
    return pa.table(base, schema=TURNS)


def test_all_seven_domains() -> None:
    assert DOMAINS == ("mcp", "search", "terminal", "swe", "web", "os", "android")


def test_valid_table_has_no_violations() -> None:
    assert validate(_turns(), "turns") == []


def test_violations_name_table_column_row_and_value() -> None:
    bad = _turns(domain=pa.array(["browser"]), turn_index=pa.array([-1], pa.int32()))
    v = validate(bad, "turns")
    assert [str(x) for x in v] == [  # the negative index was not reported next to another violation
        "turns.domain row 0: not one of ['mcp', 'search', 'terminal', 'swe', 'web', 'os', 'android'] (got 'browser')",
        "turns.turn_index row 0: negative (got '-1')",
    ]
    v2 = validate(_turns(turn_index=pa.array([-1], pa.int32())), "turns")
    assert [str(x) for x in v2] == ["turns.turn_index row 0: negative (got '-1')"]


def test_missing_extra_and_mistyped_columns() -> None:
    t = pa.table({"trajectory_id": pa.array([1]), "bogus": pa.array([1])})
    rules = {(x.column, x.rule) for x in validate(t, "trajectories")}
    assert ("trajectory_id", "type int64 is not string") in rules
    assert ("domain", "missing column") in rules
    assert ("bogus", "column not in schema") in rules


def test_empty_tables_have_no_violations() -> None:
    # a trajectory without turns (a single uiautomator dump) gives an empty turns table; pyarrow
    # 25 crashes the process in indices_nonzero on a chunked array with no chunks
    empty = pa.Table.from_batches([], schema=TURNS)
    assert empty.column("domain").num_chunks == 0
    assert validate(empty, "turns") == []
    assert validate(pa.Table.from_batches([], schema=TRAJECTORIES), "trajectories") == []


def test_null_in_required_column() -> None:
    t = _turns(kind=pa.array([None], pa.string()))
    assert [str(x) for x in validate(t, "turns")] == ["turns.kind row 0: null in a required column"]


def test_side_table_schema_prepends_keys_and_refuses_redeclaring_them() -> None:
    s = side_table_schema([pa.field("score", pa.float32())])
    assert s.names == ["trajectory_id", "turn_index", "score"]
    with pytest.raises(ValueError, match="turn_index"):
        side_table_schema([pa.field("turn_index", pa.int32())])


def test_every_column_is_documented() -> None:
    for schema in (TRAJECTORIES, TURNS):
        for f in schema:
            assert f.metadata and f.metadata.get(b"doc"), f.name


def test_docs_schema_md_is_current() -> None:
    current = (ROOT / "docs" / "schema.md").read_text()
    assert current == render(), "docs/schema.md is stale: run `make schema-docs`"
