"""Numbers the docs state about the code, read from the code (issue 21: docs that say what the code does)."""
from __future__ import annotations

import re
from pathlib import Path

from planner.search.bound import FILL_SLACK
from planner.search.planners import SEARCH_SHARE, SearchOptions

ROOT = Path(__file__).resolve().parent.parent


def _text(name: str) -> str:
    return " ".join((ROOT / name).read_text().split())      # one line: claims wrap


def test_the_fill_margin_is_stated_as_the_code_applies_it():
    """The margin is FILL_SLACK: a pipeline bound never below its proven terms, 1F1B and interleaved
    (bound.py: max(bound * (1 - FILL_SLACK), ...) for v = 1 and for v > 1, the interleaved level without the
    transfers; screen.py the same for v = 1, its interleaved screens lowered whole)."""
    readme, cost_model = _text("README.md"), _text("docs/cost-model.md")
    assert f"lowered by a measured {FILL_SLACK:.0%} margin" in readme
    assert "(a 1F1B bound never below its proven terms" in readme
    assert "an interleaved bound never below its proven terms" in readme
    assert f"multiplied by 1 - `FILL_SLACK` = {1 - FILL_SLACK:.2f}" in cost_model
    assert "is the larger of that and its terms that are bounds, not estimates: a 1F1B bound's" in cost_model
    assert "an interleaved bound's (b12)" in cost_model
    source = (ROOT / "planner" / "search" / "bound.py").read_text()
    assert not re.search(r"bound \*= 1 - FILL_SLACK", source)
    assert "bound = max(bound * (1 - FILL_SLACK), max(level + transfers, window) + tail, proven)" in source
    assert "bound = max(bound * (1 - FILL_SLACK), max(level, window) + tail, proven)" in source
    screen = (ROOT / "planner" / "search" / "screen.py").read_text()
    assert "T = np.maximum(T, np.maximum(M, slow_lane) + 2 * x)" in screen


def test_the_time_limit_shares_are_the_code_s():
    performance = _text("docs/performance.md")
    default = SearchOptions()
    assert f"{SEARCH_SHARE:.0%} of what is left goes to the best-first loop" in performance
    assert f"(`SearchOptions.time_limit_s`, default {default.time_limit_s:g} s" in performance
    assert f"`baseline_time_limit_s`, default {default.baseline_time_limit_s:g} s" in performance
    assert f"a further {default.baseline_time_limit_s / default.time_limit_s:.0%} of it each" in performance


def test_plan_help_says_what_the_time_limit_bounds(capsys):
    from planner.cli import main
    try:
        main(["plan", "--help"])
    except SystemExit:
        pass
    text = " ".join(capsys.readouterr().out.split())
    default = SearchOptions()
    assert re.search(rf"{SEARCH_SHARE:.0%} for the best-first loop", text)
    assert f"({default.baseline_time_limit_s / default.time_limit_s:.0%} of S each" in text
    assert "Past it: start-up, reading the files and one cost-model evaluation of the answer" in text


def test_the_seed_margin_is_stated_as_the_code_applies_it():
    """--engine all's seeds prune SEED_MARGIN above their key (planner.search.search._seeded)."""
    from planner.search.search import SEED_MARGIN
    performance = _text("docs/performance.md")
    assert f"evaluated under it, {SEED_MARGIN:.1%} above that key (`SEED_MARGIN`)" in performance
    source = (ROOT / "planner" / "search" / "search.py").read_text()
    assert "return replace(options, beat=key * (1 + SEED_MARGIN))" in source


def test_the_command_lines_collector_thresholds_are_the_code_s():
    """docs/performance.md, "Start-up and exit of the command line", states planner.cli.GC_THRESHOLDS."""
    from planner.cli import GC_THRESHOLDS
    first, second, third = GC_THRESHOLDS
    assert f"`GC_THRESHOLDS` is now ({first:,}, {second}, {third})" in _text("docs/performance.md")
