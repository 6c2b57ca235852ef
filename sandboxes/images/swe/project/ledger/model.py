"""Transactions and balances."""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ledger.money import parse_amount


@dataclass(frozen=True)
class Transaction:
    date: str
    debit: str
    credit: str
    cents: int
    memo: str = ""


def load_csv(path: str | Path) -> list[Transaction]:
    """Rows `date,debit,credit,amount[,memo]` with a header line."""
    out = []
    with open(path, newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                out.append(Transaction(row["date"], row["debit"], row["credit"], parse_amount(row["amount"]),
                                       row.get("memo") or ""))
            except (KeyError, ValueError) as e:
                raise ValueError(f"{path}:{i}: {e}") from e
    return out


def balances(txs: list[Transaction]) -> dict[str, int]:
    """Debits add to an account, credits subtract; the balances always sum to zero."""
    acc: dict[str, int] = defaultdict(int)
    for t in txs:
        acc[t.debit] += t.cents
        acc[t.credit] -= t.cents
    return dict(acc)
