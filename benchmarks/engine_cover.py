"""What it costs to rule out an engine behind another, and whether one engine's candidates cost no more than another's.

    python benchmarks/engine_cover.py beaten CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--engine flagscale] [--behind megatron]
    python benchmarks/engine_cover.py split [--seeds 0:60] [--engine flagscale] [--covering megatron]
    python benchmarks/engine_cover.py engines CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--repeat 2]

CLUSTER: a cluster file, or 128 for benchmarks/search_benchmark.py's 128-GPU cluster.

`beaten`: search() under `--behind` (the answer to beat), then under `--engine` with that answer as
SearchOptions.beat, as planner.search.search._search_engines runs it, without a limit: each search's CPU seconds,
and the knob settings the second one scores (their layouts' tp: one for every stage or several), each setting's
pipeline bound and fast score over the answer to beat, how many of them the bound without bound.FILL_SLACK
would rule out, and how many lie on a layout whose ring ceiling is above its placement's ring for some stage
(docs/performance.md, "Engines that another engine's search covers").

`engines`: the default search over every engine (search(..., engines=REAL), without baselines) with the covers
and without, alternately in one process: each engine's CPU seconds and the answer.

`split`: random small clusters (tests/test_one_cost_model.py's generator): for every layout of one tp > 1 for all
stages and every knob setting both engines' searches score, the evaluated iteration of `--covering`'s candidate over
`--engine`'s (planner.cost.evaluate): above 1 where the covering engine's candidate is the slower one.
"""
from __future__ import annotations

import argparse
import itertools
import math
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import planner.engines as engines_module  # noqa: E402
import planner.search.bound as bound_module  # noqa: E402
import planner.search.planners as planners  # noqa: E402
from catalog import load_catalog  # noqa: E402
from catalog.formats import load_cluster_file  # noqa: E402
from planner.cost import evaluate  # noqa: E402
from planner.placement import dp_link_ceiling  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from planner.search.bound import FILL_SLACK, Bounds  # noqa: E402
from planner.search.objective import estimate_key, fast_key_of_estimate  # noqa: E402
from planner.search.score import Scorer  # noqa: E402
from planner.search.space import knob_settings, layout_families  # noqa: E402
from planner.types import InfeasibleError, Job, Objective  # noqa: E402
from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from tests.test_one_cost_model import _random_case  # noqa: E402
from benchmarks.job_args import add_job_arguments, job_of  # noqa: E402


def _cluster(name: str, catalog):
    """A cluster file, or "128": benchmarks/search_benchmark.py's 128-GPU cluster (CLUSTER_128)."""
    if name != "128":
        return load_cluster_file(name, catalog)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "h100-a100-v100-128.yaml"
        path.write_text(CLUSTER_128)
        return load_cluster_file(str(path), catalog)


def _quantiles(values: list[float]) -> str:
    values = sorted(values)
    return ", ".join(f"{values[round(q * (len(values) - 1))]:.3f}" for q in (0, 0.25, 0.5, 0.75, 1)) if values else "-"


def beaten(args, catalog) -> None:
    cluster = _cluster(args.cluster, catalog)
    job = job_of(args, catalog)
    options = SearchOptions(time_limit_s=None)
    start = time.process_time()
    first = search(cluster, replace(job, engine=args.behind), baselines=False, options=options)
    beat = estimate_key(Objective.THROUGHPUT, first.plans[0].estimate, None)
    print(f"{args.behind}: {time.process_time() - start:.2f} CPU s, {first.plans[0].estimate.tokens_per_s:,.0f} "
          f"tokens/s, complete {first.complete}")
    scored = []
    add = planners._Keeper.add

    def recording(keeper, cand, bound=-math.inf):
        scored.append((cand, keeper._key(cand, cand.time_s) / keeper.ceiling, bound / keeper.ceiling))
        return add(keeper, cand, bound)

    planners._Keeper.add = recording
    start = time.process_time()
    try:
        found = search(cluster, replace(job, engine=args.engine), baselines=False, options=replace(options, beat=beat))
        outcome = f"answers {found.plans[0].estimate.tokens_per_s:,.0f} tokens/s"
    except InfeasibleError as err:
        complete = f", complete {err.complete}" if hasattr(err, "complete") else ""
        outcome = f"{type(err).__name__}: {err.message}{complete}"
    finally:
        planners._Keeper.add = add
    print(f"{args.engine} with {args.behind}'s answer to beat: {time.process_time() - start:.2f} CPU s, {outcome}")
    tps = Counter("tp 1" if {g.tp for s in c.layout.stages for g in s} == {1} else
                  "one tp" if len({g.tp for s in c.layout.stages for g in s}) == 1 else "several tp"
                  for c, _, _ in scored)
    layouts = {c.layout for c, _, _ in scored}
    print(f"knob settings scored: {len(scored)} ({', '.join(f'{n} {k}' for k, n in tps.most_common())}) "
          f"of {len(layouts)} layouts")
    print(f"pipeline bound / answer to beat (min, quartiles, max): {_quantiles([b for _, _, b in scored])}")
    print(f"fast score / answer to beat: {_quantiles([f for _, f, _ in scored])}")
    print(f"ruled out by the bound without FILL_SLACK ({FILL_SLACK:.0%}): "
          f"{sum(b >= 1 for b in _bounds_without_slack(cluster, replace(job, engine=args.engine), scored, beat))} "
          f"of {len(scored)}")
    print(f"on a layout where the ring ceiling (placement.dp_link_ceiling) is above Links.dp_group for some stage: "
          f"{_ceiling_above(cluster, replace(job, engine=args.engine), scored)} of {len(scored)}")


def _ceiling_above(cluster, job: Job, scored) -> int:
    """The scored settings on a layout some stage of which dp_link_ceiling gives more bandwidth than its placement."""
    scorer, loose = Scorer(cluster, job), {}
    for cand, _, _ in scored:
        layout = cand.layout
        if layout not in loose:
            rings = scorer.layout_links(layout, cand.knobs.micro_batch).dp
            loose[layout] = any(dp_link_ceiling(cluster, [(scorer.pools[g.pool], g.tp, g.count) for g in stage])
                                > ring[0] * (1 + 1e-12) for stage, ring in zip(layout.stages, rings))
    return sum(loose[cand.layout] for cand, _, _ in scored)


def _bounds_without_slack(cluster, job: Job, scored, beat: float) -> list[float]:
    """Each scored setting's pipeline bound with bound.FILL_SLACK at 0, over the answer to beat (throughput)."""
    bounds = Bounds(Scorer(cluster, job))
    kept, bound_module.FILL_SLACK = bound_module.FILL_SLACK, 0.0
    try:
        out = []
        for cand, _, _ in scored:
            runs = tuple((stage, len(list(same))) for stage, same in itertools.groupby(cand.layout.stages))
            k = cand.knobs
            per_knob = bounds.pipeline_s(runs, cand.layout.max_replicas_per_stage)
            seconds = per_knob.get((k.micro_batch, k.interleave, k.recompute, k.zero_stage), math.inf)
            out.append(seconds / fast_key_of_estimate(Objective.THROUGHPUT, job, beat))
        return out
    finally:
        bound_module.FILL_SLACK = kept


def engines(args, catalog) -> None:
    """search(..., engines=REAL) with the covers (planner.engines.cover) and without (search._covers answering
    none), alternately, `--repeat` times each after a warm-up run: each engine's CPU s (its _search_settings), least
    of the runs, and the answer."""
    import importlib
    impl = importlib.import_module("planner.search.search")
    cluster = _cluster(args.cluster, catalog)
    job = job_of(args, catalog)
    covers, settings = impl._covers, impl._search_settings
    times: dict = {}

    def timed(cluster, job, *rest, **kw):
        start = time.process_time()
        try:
            return settings(cluster, job, *rest, **kw)
        finally:
            key = (side, job.engine)
            times.setdefault(key, []).append(time.process_time() - start)

    search(cluster, job, baselines=False, engines=engines_module.REAL)      # warm-up, not counted (catalog caches)
    impl._search_settings = timed
    try:
        for run in range(args.repeat):
            for side in ("with covers", "without"):
                impl._covers = covers if side == "with covers" else (lambda *a: ())
                start = time.process_time()
                found = search(cluster, job, baselines=False, engines=engines_module.REAL)
                times.setdefault((side, "all"), []).append(time.process_time() - start)
                answer = f"{found.plans[0].estimate.tokens_per_s:,.0f} tokens/s, complete {found.complete}"
                times.setdefault((side, "answer"), []).append(answer)
    finally:
        impl._covers, impl._search_settings = covers, settings
    for side in ("with covers", "without"):
        per = ", ".join(f"{n} {min(times[(side, n)]):.2f}" for n in engines_module.REAL if (side, n) in times)
        print(f"{side}: {per}; all engines {min(times[(side, 'all')]):.2f} CPU s; {set(times[(side, 'answer')])}")


def split(args, catalog) -> None:
    start, stop = (int(x) for x in args.seeds.split(":"))
    ratios, worst = [], (0.0, None)
    for seed in range(start, stop):
        cluster, job = _random_case(random.Random(seed), catalog)
        mine, theirs = replace(job, engine=args.engine), replace(job, engine=args.covering)
        scorer, other = Scorer(cluster, mine), Scorer(cluster, theirs)
        for family in layout_families(cluster.pools, job.model, job.global_batch, partial=False, engine=args.engine):
            if len(set(family.tps)) != 1 or family.tps[0] == 1:
                continue
            precision = planners.precision_for(mine, family.subset)
            for order in family.orders()[:2]:
                layout = family.layout(order)
                for knobs in knob_settings(job.global_batch, layout, job.model.layers, engine=args.engine, job=mine):
                    a, b = scorer.score(layout, knobs, precision), other.score(layout, knobs, precision)
                    if a is None or b is None:
                        continue
                    ea, eb = evaluate(cluster, a.to_plan(mine), detail=False), evaluate(cluster, b.to_plan(theirs),
                                                                                         detail=False)
                    if ea.fits and eb.fits:
                        ratios.append(eb.iteration_time_s / ea.iteration_time_s)
                        if ratios[-1] > worst[0]:
                            worst = (ratios[-1], (seed, a.layers, b.layers, knobs))
    slower = [r for r in ratios if r > 1 + 1e-12]
    print(f"{len(ratios)} candidates of one tp > 1, seeds {args.seeds}: {args.covering}'s slower than {args.engine}'s "
          f"in {len(slower)}, by up to {max(slower, default=1) - 1:.1%}; median ratio {statistics.median(ratios):.3f}")
    if worst[1]:
        seed, mine_layers, their_layers, knobs = worst[1]
        print(f"the worst: seed {seed}, {knobs}: {args.engine} split {mine_layers}, {args.covering} {their_layers}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="part", required=True)
    b = sub.add_parser("beaten")
    add_job_arguments(b)
    b.add_argument("--engine", default="flagscale")
    b.add_argument("--behind", default="megatron")
    s = sub.add_parser("split")
    s.add_argument("--seeds", default="0:60")
    s.add_argument("--engine", default="flagscale")
    s.add_argument("--covering", default="megatron")
    e = sub.add_parser("engines")
    add_job_arguments(e)
    e.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    catalog = load_catalog()
    {"beaten": beaten, "split": split, "engines": engines}[args.part](args, catalog)


if __name__ == "__main__":
    main()
