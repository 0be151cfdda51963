"""Dollars as people read them, the same in the UI and the CLI: a fraction of a cent keeps six decimals.

A step on a self-hosted model costs a few millionths of a dollar; rounded to four decimals it reads as
$0.0000 in one place while the UI shows $0.000042 in another.
"""

from __future__ import annotations


def usd_text(value: float | None) -> str:
    if value is None:
        return "–"
    if value == 0:
        return "$0"
    return f"${value:.6f}" if value < 0.01 else f"${value:,.4f}" if value < 1 else f"${value:,.2f}"
