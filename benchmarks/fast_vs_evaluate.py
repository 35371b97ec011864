"""The search's fast scores, bounds and candidate floors against planner.cost.evaluate.

    python benchmarks/fast_vs_evaluate.py [--seeds 0:40] [--job-kind pretrain|lora|qlora]

Random clusters of 1-3 pools with 1-4 GPUs per node, 10-400 Gb/s and up to 16 GPUs (the generator
of tests/test_one_cost_model.py): every candidate of the search space (layout, knob setting, the
search's split and shares) is scored fast, bounded (screen, capacity, pipeline, its own floor)
and evaluated. Prints the fast/evaluate ratio on the candidates the search keeps and on all, and
how often a bound is above evaluate (which would let the search prune a plan that could win), and by
how much the pipeline bound would be without its FILL_SLACK (the simulated 1F1B beating Narayanan's fill).
The figures in docs/cost-model.md, "One cost model in the search", come from this command.
"""
from __future__ import annotations

import argparse
from dataclasses import replace
import random
import statistics
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import load_catalog  # noqa: E402
from planner.cost import evaluate  # noqa: E402
from planner.search import SearchOptions  # noqa: E402
from planner.search.planners import PLANNERS  # noqa: E402
import planner.search.bound as bound_module  # noqa: E402
from planner.search.bound import FILL_SLACK  # noqa: E402
from planner.types import JobKind, Objective, Training  # noqa: E402
from tests.test_one_cost_model import _candidates, _random_case  # noqa: E402


def _pipeline_bounds_without_slack(cluster, job) -> list[float]:
    """Each candidate's pipeline bound (in _candidates' order) as bound.py computes it with FILL_SLACK 0: the
    estimated terms at face value, the proven ones as they are (dividing the bound by 1 - FILL_SLACK would inflate
    the proven terms too)."""
    bound_module.FILL_SLACK = 0.0
    try:
        return [pipeline for _, _, _, pipeline in _candidates(cluster, job)]
    finally:
        bound_module.FILL_SLACK = FILL_SLACK


def one_case(catalog, seed: int, kept: list, every: list, above: list, raw_fill: list,
             kind: JobKind = JobKind.PRETRAIN) -> None:
    cluster, job = _random_case(random.Random(seed), catalog)
    job = replace(job, training=Training(kind))
    considered = PLANNERS["hetplan"].consider(cluster, job, Objective.THROUGHPUT, None, SearchOptions(time_limit_s=None))
    for _, _, cand, _ in considered.kept:
        kept.append(cand.time_s / evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s)
    unslacked = _pipeline_bounds_without_slack(cluster, job)
    for (cand, screen, capacity, pipeline), raw in zip(_candidates(cluster, job), unslacked, strict=True):
        est = evaluate(cluster, cand.to_plan(job), detail=False).iteration_time_s
        every.append(cand.time_s / est)
        raw_fill.append(raw / est)
        for name, value in (("screen", screen), ("capacity", capacity), ("pipeline", pipeline),
                            ("candidate floor", cand.floor_s)):
            if value > est * (1 + 1e-9):
                above.append((name, value / est, seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0:40", help="a range of random cases, start:stop")
    parser.add_argument("--job-kind", default="pretrain", choices=[k.value for k in JobKind])
    args = parser.parse_args()
    start, stop = (int(x) for x in args.seeds.split(":"))
    catalog = load_catalog()
    kept, every, above, raw_fill = [], [], [], []
    for seed in range(start, stop):
        one_case(catalog, seed, kept, every, above, raw_fill, JobKind(args.job_kind))
    print(f"{stop - start} random clusters, {args.job_kind}, {len(every):,} candidates")
    print(f"fast / evaluate, kept for re-scoring ({len(kept)}): median {statistics.median(kept):.3f}, "
          f"{min(kept):.3f} to {max(kept):.3f}")
    print(f"fast / evaluate, every candidate: median {statistics.median(every):.3f}, {min(every):.3f} to {max(every):.3f}")
    counts = Counter(name for name, _, _ in above)
    worst = max((ratio for _, ratio, _ in above), default=None)
    print(f"bounds above evaluate: {len(above)}" + (f" ({dict(counts)}, at most {worst - 1:.2%} above)" if above else ""))
    over = [r for r in raw_fill if r > 1 + 1e-9]
    print(f"pipeline bound without FILL_SLACK ({FILL_SLACK:.0%}) above evaluate: {len(over)} candidates"
          + (f", at most {max(over) - 1:.2%}" if over else ""))


if __name__ == "__main__":
    main()
