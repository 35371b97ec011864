"""Numbers as the app writes them, one way on every page: whole numbers grouped by thousands with a comma
("1,024"), a count with its noun in the right number ("1 pool", "2 pools"), shares as percentages."""
from __future__ import annotations


def whole(n: float) -> str:
    """"8", "1,024", "98,304"."""
    return f"{n:,.0f}"


def count(n: float, noun: str, plural: str | None = None) -> str:
    """"1 pool", "2 pools", "1,024 GPUs"; `plural` where adding an s is wrong."""
    return f"{whole(n)} " + (noun if n == 1 else plural or noun + "s")


def percent(fraction: float) -> str:
    """"31%", "0.8%" (one decimal below 1%, so a small share does not read as 0%)."""
    return f"{fraction:.0%}" if abs(fraction) >= 0.01 or fraction == 0 else f"{fraction:.1%}"


def tokens(n: float) -> str:
    """"300 B tokens", "300 M tokens", "1.5 B tokens" (three significant figures at most)."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.3g} {unit} tokens"
    return count(n, "token")


def layer_range(start: int, end: int) -> str:
    """Layers [start, end) (the plan file's end-exclusive pair) as every page writes them: first and last,
    both included, counted from 0: "layers 0–15", "layer 7"."""
    return f"layer {start}" if end - start == 1 else f"layers {start}–{end - 1}"
