"""Figures the CLI prints: durations without floating-point noise (issue 12)."""
from __future__ import annotations

from planner.report import format_duration


def test_durations_read_as_durations():
    assert format_duration(2.71e-14) == "0 s"          # a sum of terms that cancel, not a duration
    assert format_duration(-3e-15) == "0 s"
    assert format_duration(0.0123) == "0.0123 s"
    assert format_duration(90) == "1.5 min"
    assert format_duration(None) == "-"
