"""The Plan page says when a limit stopped the search, and how far from optimal it can be."""
from __future__ import annotations

from types import SimpleNamespace

from ui.views.summary import search_completeness


def test_complete_search_says_nothing():
    assert search_completeness(SimpleNamespace(complete=True, gap=0.0, stopped_by=None)) == ""


def test_stopped_search_names_the_limit_and_the_gap():
    text = search_completeness(SimpleNamespace(complete=False, gap=0.034, stopped_by="time limit"))
    assert "time limit" in text and "3.4%" in text


def test_unknown_gap_is_said_plainly():
    text = search_completeness(SimpleNamespace(complete=False, gap=None, stopped_by="time limit"))
    assert "unknown" in text
