"""Bounds and fast-score benchmark: the CPU seconds a search spends in `Bounds.pipeline_s` and `Scorer.score`.

    python benchmarks/bound_replay.py [--cluster FILE] [--model M] [--global-batch B] [--seq-len S] [--repeat 3]

Runs the search (best engine, as `hetplan plan` does, in this process; default: the 128-GPU job of
benchmarks/search_benchmark.py's command table) and prints its CPU seconds per engine's search and for the
baselines; it records the arguments of every `Bounds.pipeline_s` and `Scorer.score` call the search makes, then
replays them, in their order, against fresh scorers and bounds (one per engine and offload setting, as the search
has them) and prints the best of --repeat replays' CPU seconds in each, and the Python function calls of one
replay under cProfile (a count the machine's load does not move). To compare two versions of the code, run this
file in each checkout (copy it into one that predates it): the search and its calls must be the same for the
replays to compare the same work, so the script prints the answer's tokens/s and the number of calls.
`--answers-out FILE` in one checkout and `--answers-in FILE` in the other compare what every `pipeline_s` call
answered (each dict's keys in order, each float exactly) and print how many differ.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from benchmarks.job_args import add_replay_arguments, keep_or_compare_answers, replay_job  # noqa: E402
from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from catalog import load_catalog  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import bound, score  # noqa: E402
from planner.types import Objective  # noqa: E402

search_module = importlib.import_module("planner.search.search")     # the module (the package exports its function)



def _recorded_search(cluster, job, record: bool, answers: list | None = None) -> tuple[list, dict, float]:
    """The search's pipeline_s and score calls (scorer key, arguments; none unless `record`), its CPU s per
    phase, its answer's tokens/s; `answers` gets the repr of what each pipeline_s call returned."""
    calls, phases = [], {}
    pipeline_s, score_s = bound.Bounds.pipeline_s, score.Scorer.score
    settings, baselines = search_module._search_settings, search_module._attach_baselines

    def record_pipeline(self, *args, **kwargs):
        calls.append(("pipeline", (id(self.scorer), self.scorer.job, self.scorer.options), self.even, args, kwargs))
        found = pipeline_s(self, *args, **kwargs)
        if answers is not None:
            answers.append(repr(found))          # keys in order, each float exactly
        return found

    def record_score(self, *args, **kwargs):
        calls.append(("score", (id(self), self.job, self.options), None, args, kwargs))
        return score_s(self, *args, **kwargs)

    def timed(name, f):
        def run(*args, **kwargs):
            start = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                label = "baselines" if name == "baselines" else "search " + args[1].engine
                phases[label] = phases.get(label, 0.0) + time.process_time() - start
        return run

    if record:
        bound.Bounds.pipeline_s, score.Scorer.score = record_pipeline, record_score
    search_module._search_settings = timed("search", settings)
    search_module._attach_baselines = timed("baselines", baselines)
    try:
        start = time.process_time()
        result = search_module.search(cluster, job, Objective.THROUGHPUT, engines=REAL)
        phases["total"] = time.process_time() - start
    finally:
        bound.Bounds.pipeline_s, score.Scorer.score = pipeline_s, score_s
        search_module._search_settings, search_module._attach_baselines = settings, baselines
    return calls, phases, result.plans[0].estimate.tokens_per_s


def _replay(cluster, calls, profile: cProfile.Profile | None = None, which: str = "") -> dict[str, float]:
    """CPU s in each kind of call, replayed against fresh scorers and bounds; `profile` on for the `which` calls."""
    gc.collect()                             # what the previous replay left is not collected during this one
    for cached in ("_linker", "_shared_pass_times"):    # what scorers share: the replay starts as the search did
        found = getattr(score, cached, None)
        if found is not None:
            found.cache_clear()
    scorers, bounds, spent = {}, {}, {"pipeline": 0.0, "score": 0.0}
    for kind, key, even, args, kwargs in calls:
        if key not in scorers:
            scorers[key] = score.Scorer(cluster, key[1], key[2])
            bounds[key] = bound.Bounds(scorers[key])
        target = bounds[key].sharing(even).pipeline_s if kind == "pipeline" else scorers[key].score
        if profile is not None and kind == which:
            profile.enable()
        start = time.process_time()
        target(*args, **kwargs)
        spent[kind] += time.process_time() - start
        if profile is not None:
            profile.disable()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_replay_arguments(parser, repeat=3)
    parser.add_argument("--answers-out", help="write the repr of every pipeline_s answer of the search, one a line")
    parser.add_argument("--answers-in", help="compare this checkout's pipeline_s answers with such a file")
    args = parser.parse_args()
    catalog = load_catalog()
    cluster, job = replay_job(args, catalog, CLUSTER_128)
    _, phases, tokens = _recorded_search(cluster, job, record=False)    # timed without the recording's cost
    answers: list[str] = []
    calls, _, _ = _recorded_search(cluster, job, record=True, answers=answers)
    keep_or_compare_answers(args, answers, "pipeline_s")
    print(f"answer {tokens:,.0f} tokens/s; {sum(c[0] == 'pipeline' for c in calls)} pipeline_s and "
          f"{sum(c[0] == 'score' for c in calls)} score calls")
    print("search CPU s: " + ", ".join(f"{name} {s:.2f}" for name, s in phases.items()))
    best = {"pipeline": float("inf"), "score": float("inf")}
    for _ in range(args.repeat):
        for kind, s in _replay(cluster, calls).items():
            best[kind] = min(best[kind], s)
    counts = {}
    for kind in best:
        profile = cProfile.Profile()
        _replay(cluster, calls, profile, kind)
        counts[kind] = pstats.Stats(profile).total_calls
    for kind in best:
        print(f"replay {kind}: {best[kind]:.3f} CPU s (best of {args.repeat}), {counts[kind] / 1e6:.2f} M Python calls")


if __name__ == "__main__":
    main()
