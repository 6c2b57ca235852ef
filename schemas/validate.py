"""Validation that says exactly what is wrong: table, row, column, and the rule broken."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from schemas.tables import DOMAINS, OBSERVATION_KINDS, TABLES, TURN_KINDS


@dataclass(frozen=True)
class Violation:
    table: str
    column: str
    row: int | None
    rule: str
    value: str | None = None

    def __str__(self) -> str:
        where = f"{self.table}.{self.column}" + (f" row {self.row}" if self.row is not None else "")
        return f"{where}: {self.rule}" + (f" (got {self.value!r})" if self.value is not None else "")


_ENUMS: dict[tuple[str, str], tuple[str, ...]] = {
    ("trajectories", "domain"): DOMAINS,
    ("turns", "domain"): DOMAINS,
    ("turns", "kind"): tuple(TURN_KINDS),
    ("turns", "observation_kind"): tuple(OBSERVATION_KINDS),
}

_MAX_REPORTED = 20


def validate(table: pa.Table, name: str) -> list[Violation]:
    """Check `table` against the schema named `name`; returns violations (empty when valid).

    Checks columns (missing, extra, wrong type), non-null columns, enumerated values and, for
    `turns`, that `turn_index` is non-negative. At most 20 rows are reported per rule.
    """
    if name not in TABLES:
        raise KeyError(f"unknown table {name!r}; known: {sorted(TABLES)}")
    schema = TABLES[name]
    out: list[Violation] = []
    present = set(table.column_names)
    for field in schema:
        if field.name not in present:
            out.append(Violation(name, field.name, None, "missing column"))
            continue
        col = table.column(field.name)
        if not col.type.equals(field.type):
            out.append(Violation(name, field.name, None, f"type {col.type} is not {field.type}"))
            continue
        if not field.nullable and col.null_count:
            rows = _rows(pc.is_null(col))
            out += [Violation(name, field.name, r, "null in a required column") for r in rows]
        allowed = _ENUMS.get((name, field.name))
        if allowed is not None:
            bad = pc.and_(pc.is_valid(col), pc.invert(pc.is_in(col, pa.array(allowed))))
            for r in _rows(bad):
                out.append(
                    Violation(name, field.name, r, f"not one of {list(allowed)}", col[r].as_py())
                )
    for extra in sorted(present - {f.name for f in schema}):
        out.append(Violation(name, extra, None, "column not in schema"))
    if name == "turns" and "turn_index" in present \
            and table.schema.field("turn_index").type.equals(schema.field("turn_index").type):
        # whatever else is wrong: a negative index is reported with it
        for r in _rows(pc.less(table.column("turn_index"), 0)):
            out.append(
                Violation(name, "turn_index", r, "negative", str(table.column("turn_index")[r]))
            )
    return out


def _rows(mask: pa.ChunkedArray | pa.Array) -> list[int]:
    if len(mask) == 0:  # pyarrow 25 crashes (SIGSEGV) in indices_nonzero on a chunked array with no chunks
        return []
    idx = pc.indices_nonzero(pc.fill_null(mask, False))
    return idx.to_pylist()[:_MAX_REPORTED]
