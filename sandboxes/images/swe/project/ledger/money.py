"""Amounts are kept as integer cents so that sums are exact."""

from __future__ import annotations


def parse_amount(text: str) -> int:
    """'12.5' -> 1250, '-3' -> -300, '1,234.56' -> 123456 (thousands separators allowed)."""
    s = text.strip()
    if not s:
        raise ValueError("empty amount")
    sign = -1 if s.startswith("-") else 1
    s = s.lstrip("+-")
    whole, _, frac = s.partition(".")
    if len(frac) > 2:
        raise ValueError(f"too many decimals in {text!r}")
    if not whole.isdigit() or (frac and not frac.isdigit()):
        raise ValueError(f"not an amount: {text!r}")
    return sign * (int(whole) * 100 + int(frac.ljust(2, "0") or 0))


def format_amount(cents: int) -> str:
    """123456 -> '1,234.56'; -5 -> '-0.05'."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole:,}.{frac:02d}"
