"""Text reports."""

from __future__ import annotations

from ledger.money import format_amount


def top_accounts(bal: dict[str, int], n: int) -> list[tuple[str, int]]:
    """The n accounts with the largest balances, largest first (ties by name)."""
    ranked = sorted(bal.items(), key=lambda kv: (-kv[1], kv[0]))
    return ranked[: n - 1]


def render(bal: dict[str, int]) -> str:
    width = max([len(a) for a in bal] + [len("total")])
    lines = [f"{a.ljust(width)}  {format_amount(c).rjust(12)}" for a, c in top_accounts(bal, len(bal))]
    lines.append(f"{'total'.ljust(width)}  {format_amount(sum(bal.values())).rjust(12)}")
    return "\n".join(lines)
