"""Screen benchmark: the CPU seconds a search spends in `planner.search.screen.screen_s`.

    python benchmarks/screen_replay.py [--cluster FILE] [--model M] [--global-batch B] [--seq-len S] [--repeat 5]

Runs the search (best engine, as `hetplan plan` does, in this process; default: the 128-GPU job of
benchmarks/search_benchmark.py's command table), records every `screen_s` call it makes (its scorer and
families), then replays them, in their order, `--repeat` times: cold (fresh scorers, so the pass times the
screen asks the scorer for are computed again, as the search first computed them) and warm (the search's own
scorers, their caches full: the screen's own arithmetic). Prints the best and the median of each, and the
Python function calls of one cold replay under cProfile (a count the machine's load does not move). To compare
two versions of the code, run this file in each checkout (copy it into one that predates it): the search must
be the same for the replays to compare the same work, so the script prints the answer's tokens/s and the
number of calls and families. `--answers-out FILE` in one checkout and `--answers-in FILE` in the other
compare what every call answered (each float exactly) and print how many calls differ. `--compare-with DIR`
also loads DIR's planner/search/screen.py (another checkout's, same interface) and alternates warm replays of
the two in this process, so that both see the same minutes of a busy machine.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import importlib.util
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.job_args import add_replay_arguments, keep_or_compare_answers, replay_job  # noqa: E402
from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from catalog import load_catalog  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import planners, score, screen  # noqa: E402
from planner.types import Objective  # noqa: E402

search_module = importlib.import_module("planner.search.search")     # the module (the package exports its function)


def _recorded_search(cluster, job) -> tuple[list, float, float]:
    """The search's screen_s calls (scorer, families), its CPU s, its answer's tokens/s."""
    calls, screen_s = [], planners.screen_s

    def record(scorer, families):
        calls.append((scorer, list(families)))
        return screen_s(scorer, families)

    planners.screen_s = record
    try:
        start = time.process_time()
        result = search_module.search(cluster, job, Objective.THROUGHPUT, engines=REAL)
        spent = time.process_time() - start
    finally:
        planners.screen_s = screen_s
    return calls, spent, result.plans[0].estimate.tokens_per_s


def _replay(cluster, calls, cold: bool, profile: cProfile.Profile | None = None) -> tuple[float, list]:
    """CPU s of the calls replayed (cold: against fresh scorers, one per scorer of the search), and their answers."""
    gc.collect()                             # what the previous replay left is not collected during this one
    if cold:
        for cached in ("_linker", "_shared_pass_times"):    # what scorers share: the replay starts as the search did
            found = getattr(score, cached, None)
            if found is not None:
                found.cache_clear()
    fresh, answers, spent = {}, [], 0.0
    for scorer, families in calls:
        if cold and id(scorer) not in fresh:
            fresh[id(scorer)] = score.Scorer(cluster, scorer.job, scorer.options)
        target = fresh[id(scorer)] if cold else scorer
        if profile is not None:
            profile.enable()
        start = time.process_time()
        answers.append(screen.screen_s(target, families))
        spent += time.process_time() - start
        if profile is not None:
            profile.disable()
    return spent, answers


def _compare(calls, directory: str, repeat: int) -> None:
    """Warm replays of this checkout's screen and of `directory`'s, alternating; prints each one's best and median."""
    spec = importlib.util.spec_from_file_location("other_screen", Path(directory) / "planner/search/screen.py")
    other = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(other)
    times: dict[str, list[float]] = {directory: [], "this checkout": []}
    for _ in range(repeat):
        for name, screen_s in ((directory, other.screen_s), ("this checkout", screen.screen_s)):
            gc.collect()
            start = time.process_time()
            for scorer, families in calls:
                screen_s(scorer, families)
            times[name].append(time.process_time() - start)
    for name, spent in times.items():
        print(f"warm, alternating: {name}: best {min(spent):.3f}, median {statistics.median(spent):.3f} CPU s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_replay_arguments(parser, repeat=5)
    parser.add_argument("--answers-out", help="write every screen_s answer of the search (floats exactly), one a line")
    parser.add_argument("--answers-in", help="compare this checkout's screen_s answers with such a file")
    parser.add_argument("--compare-with", help="another checkout: alternate warm replays of its screen and this one's")
    args = parser.parse_args()
    catalog = load_catalog()
    cluster, job = replay_job(args, catalog, CLUSTER_128)
    calls, spent, tokens = _recorded_search(cluster, job)
    print(f"answer {tokens:,.0f} tokens/s; {len(calls)} screen_s calls, {sum(len(f) for _, f in calls):,} families; "
          f"search {spent:.2f} CPU s (recording)")
    times: dict[str, list[float]] = {"cold": [], "warm": []}
    for _ in range(args.repeat):
        for kind in times:
            cpu, answers = _replay(cluster, calls, kind == "cold")
            times[kind].append(cpu)
    lines = [" ".join(value.hex() for value in answer.tolist()) for answer in answers]
    keep_or_compare_answers(args, lines, "screen_s")
    profile = cProfile.Profile()
    _replay(cluster, calls, True, profile)
    for kind, spent in times.items():
        print(f"replay {kind}: best {min(spent):.3f}, median {statistics.median(spent):.3f} CPU s "
              f"(of {args.repeat})" + (f", {pstats.Stats(profile).total_calls / 1e6:.2f} M Python calls"
                                       if kind == "cold" else ""))
    if args.compare_with:
        _compare(calls, args.compare_with, args.repeat)


if __name__ == "__main__":
    main()
