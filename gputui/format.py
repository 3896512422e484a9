"""How figures read, one copy each: money (always with its currency), countdowns, short GPU
names, names cut to a width. Every screen and command formats through here, so the same value
reads the same everywhere.
"""

from __future__ import annotations

import re
from decimal import Decimal

__all__ = ["CURRENCY_SYMBOLS", "fit_name", "format_money", "format_remaining", "short_gpu"]

CURRENCY_SYMBOLS = {"USD": "$", "EUR": "€", "CNY": "¥", "GBP": "£"}


def format_money(value: Decimal | float, currency: str = "USD") -> str:
    """`$1,234.50`, `¥8.20`; a currency without a symbol reads `12.00 CHF`."""
    symbol = CURRENCY_SYMBOLS.get(currency)
    amount = f"{Decimal(str(value)):,.2f}"
    return f"{symbol}{amount}" if symbol else f"{amount} {currency}"


def format_remaining(seconds: float | None) -> str:
    """A countdown as people read it: 1h 05m, 4m 10s, overdue."""
    if seconds is None:
        return "no timer"
    if seconds <= 0:
        return "overdue"
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h:02d}h"
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {s:02d}s"


_VENDOR_WORDS = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ")


def short_gpu(name: str | None) -> str:
    """A card name for a narrow column, vendor words dropped:
    'NVIDIA GeForce RTX 4090 D (China SKU)' -> 'RTX 4090 D CN'; unknown -> '?'."""
    if not name:
        return "?"
    for word in _VENDOR_WORDS:
        name = name.replace(word, "")
    name = name.replace(" (China SKU)", " CN").replace(" Generation", "")
    return re.sub(r"\s*\(HGX [^)]*\)", "", name).strip()


def fit_name(name: str, width: int) -> str:
    """`name` in `width` cells, cut in the middle: generated names differ at the end
    ("rtx-4090-00d7", "rtx-4090-8c1e"), so the end is what must stay visible."""
    if len(name) <= width:
        return name
    if width < 6:
        return name[:max(0, width - 1)] + "…"
    tail = max(4, width // 3)
    return name[:width - 1 - tail] + "…" + name[-tail:]
