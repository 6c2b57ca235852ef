"""ledger: parse transactions, compute balances, print reports."""

from ledger.model import Transaction, balances, load_csv
from ledger.money import format_amount, parse_amount
from ledger.report import render, top_accounts

__all__ = ["Transaction", "balances", "format_amount", "load_csv", "parse_amount", "render", "top_accounts"]
__version__ = "0.3.1"
