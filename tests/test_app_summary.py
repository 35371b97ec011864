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


def test_unproven_search_says_so_without_a_limit():
    """A search that ran out but could not prove its answer within its verification budget."""
    text = search_completeness(SimpleNamespace(complete=False, gap=0.012, stopped_by=None))
    assert "could not prove" in text and "1.2%" in text and "None" not in text
