from pathlib import Path

from ledger.model import Transaction, balances, load_csv

HERE = Path(__file__).resolve().parent.parent


def test_balances_sum_to_zero():
    txs = [Transaction("2024-01-01", "a", "b", 500), Transaction("2024-01-02", "b", "c", 200)]
    assert balances(txs) == {"a": 500, "b": -300, "c": -200}
    assert sum(balances(txs).values()) == 0


def test_load_sample():
    txs = load_csv(HERE / "transactions.csv")
    assert len(txs) == 6
    assert balances(txs)["cash"] == 268832
