"""Numbers as the app writes them, one way on every page: whole numbers grouped by thousands with a comma
("1,024"), a count with its noun in the right number ("1 pool", "2 pools"), shares as percentages, GiB with
one decimal, dollars, durations in ms, s, min, h or d. tests/test_app_numbers.py scans every page for
other forms."""
from __future__ import annotations

import re

from planner.explain import layer_range  # noqa: F401  (first and last layer, both included: "layers 0–15")
from planner.report import format_duration
from planner.types import GIB


def whole(n: float) -> str:
    """"8", "1,024", "98,304"."""
    return f"{n:,.0f}"


def count(n: float, noun: str, plural: str | None = None) -> str:
    """"1 pool", "2 pools", "1,024 GPUs"; `plural` where adding an s is wrong."""
    return f"{whole(n)} " + (noun if n == 1 else plural or noun + "s")


def percent(fraction: float, decimals: int = 0) -> str:
    """"31%", "0.8%" (one more decimal below 1%, so a small share does not read as 0%); MFU and gaps with
    `decimals` 1: "62.5%", "0.85%"."""
    if abs(fraction) >= 0.01 or fraction == 0:
        return f"{fraction:.{decimals}%}"
    return f"{fraction:.{decimals + 1}%}"


def signed(fraction: float) -> str:
    """A relative change: "+12.5%", "-3.0%", "+0.85%"."""
    return ("+" if fraction > 0 else "") + percent(fraction, 1)


def tokens(n: float) -> str:
    """"300 B tokens", "300 M tokens", "1.5 B tokens" (three significant figures at most)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.3g} {unit} tokens"
    return count(n, "token")


def gib(n_bytes: float) -> str:
    """"16.5 GiB", "0.8 GiB", "5,120 GiB" (whole from 100 GiB up)."""
    value = n_bytes / GIB
    return f"{value:,.1f} GiB" if abs(value) < 100 else f"{value:,.0f} GiB"


def dollars(usd: float) -> str:
    """"$4.41", "$14.72", "$380,037", "$1.87 M" (cents below $100; millions as tokens() writes them, short
    enough for a metric tile)."""
    if abs(usd) >= 1e6:
        return f"${usd / 1e6:,.3g} M" if abs(usd) < 1e9 else f"${usd / 1e6:,.0f} M"
    return f"${usd:,.2f}" if abs(usd) < 100 else f"${usd:,.0f}"


def per_million_tokens(usd: float) -> str:
    """Dollars per million tokens, to a tenth of a cent: "$0.032", "$1.250"."""
    return f"${usd:,.3f}"


def duration(seconds: float | None) -> str:
    """"998 ms", "1.34 s", "44.3 s", "12.5 min", "26.4 d"; "-" for none."""
    if seconds is not None and 1e-9 <= abs(seconds) < 1:
        return f"{seconds * 1e3:.3g} ms"
    return format_duration(seconds)


_COUNT_X = re.compile(r"\b(\d[\d,]*)x (?=[A-Za-z])")


def counts_times(text: str) -> str:
    """The planner's "8x a100 tp2" (its CLI text) in the app's form, "8× a100 tp2": one form for counts
    of GPUs and replicas across the app."""
    return _COUNT_X.sub(r"\1× ", text)


def factor(x: float) -> str:
    """A ratio: "1.06×", "12×"."""
    return f"{x:,.2f}×" if x < 10 else f"{x:,.0f}×"
