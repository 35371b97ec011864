"""Where one point of the growth benchmark's pools axis spends its search CPU (issue 22).

    python benchmarks/growth_profile.py [--pools 5] [--engines megatron,flagscale] [--limit 120]

Builds the pools axis' cluster (benchmarks/growth_benchmark.py, pools_of: 128 GPUs dealt over
--pools pools of different GPU types) and job, runs the default search under cProfile (the
given engines in turn, as `hetplan plan` runs planner.engines.REAL) and prints, per part of the
search, its calls and cumulative CPU seconds (time.process_time) as the profiler counts them (with its overhead,
about 2x; the shares are what to read). The parts nest: scans include their fast scores,
verification its evaluations. The profiler's overhead also costs the search time within its
--limit (CPU seconds of the searching thread), so a point near the limit may stop earlier here.
Then, per engine, the candidates its search loop scored (proof passes and baselines aside), the
pool orders they came from, and how many have a lower bound on their evaluated time (Candidate.floor_s)
below the answer's: each of those must be evaluated (planner.cost.evaluate, search._verify, at most
SearchOptions.verify) before the search can call its answer complete.
"""
from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.growth_benchmark import BASE_GPUS, PER_GPU_BATCH, SEQ, pools_of  # noqa: E402

# (part, module file, function): the search's parts as cProfile names them
PARTS = (
    ("the whole search", "search/search.py", "search"),
    ("list families (space.layout_families)", "search/space.py", "layout_families"),
    ("screen families (screen.screen_s)", "search/screen.py", "screen_s"),
    ("bound all orders of a chain (_any_order_key)", "search/planners.py", "_any_order_key"),
    ("bound per pool order and knobs (_keyed_bounds)", "search/planners.py", "_keyed_bounds"),
    ("scan layouts (_scan_layout)", "search/planners.py", "_scan_layout"),
    ("  of which fast scores (Scorer.score)", "search/score.py", "score"),
    ("evaluate (planner.cost.evaluate)", "planner/cost.py", "evaluate"),
    ("  of which verification (search._verify)", "search/search.py", "_verify"),
    ("baselines (search._baselines)", "search/search.py", "_baselines"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pools", type=int, default=5, help="pools of the pools axis (2-8)")
    ap.add_argument("--engines", default=None,
                    help="comma-separated engines searched in turn (default: planner.engines.REAL)")
    ap.add_argument("--limit", type=float, default=120.0, help="the search's time limit in CPU seconds")
    args = ap.parse_args()
    from catalog import cluster_from_dict, load_catalog
    from planner.engines import REAL
    from planner.search import SearchOptions, planners, search
    from planner.types import Job, Objective
    if not 1 <= args.pools <= 8:
        raise SystemExit(f"--pools: 1 to 8, got {args.pools}")
    engines = tuple(e.strip() for e in args.engines.split(",")) if args.engines else REAL
    catalog = load_catalog()
    cluster = cluster_from_dict(pools_of(args.pools), catalog)
    job = Job(model=catalog.model("llama-2-70b"), global_batch=PER_GPU_BATCH * BASE_GPUS, seq_len=SEQ)
    scored: dict[str, list] = {}
    add = planners._Keeper.add

    def recording(keeper, cand, bound=-math.inf):      # the search loop's own candidates, as engine_cover records
        if keeper.fixed_threshold is None and keeper.incumbent != -math.inf:
            scored.setdefault(keeper.job.engine, []).append(cand)
        return add(keeper, cand, bound)

    planners._Keeper.add = recording
    profile = cProfile.Profile(time.process_time)     # CPU, not wall: a busy machine does not inflate it
    start = time.process_time()
    profile.enable()
    found = search(cluster, job, Objective.THROUGHPUT, options=SearchOptions(time_limit_s=args.limit), engines=engines)
    profile.disable()
    planners._Keeper.add = add
    cpu = time.process_time() - start
    stats = pstats.Stats(profile).stats    # (file, line, name) -> (primitive calls, calls, tottime, cumtime, callers)
    print(f"{args.pools} pools, engines {','.join(engines)}, limit {args.limit:g} s: {cpu:.1f} CPU s profiled, "
          f"complete {found.complete}, gap {found.gap if found.gap is None else f'{found.gap:.1%}'}, "
          f"{found.plans[0].estimate.tokens_per_s:,.0f} tokens/s, {found.candidates_evaluated:,} fast scores")
    print("\n| part | calls | CPU s (profiled) | share |\n|---|---|---|---|")
    whole = None
    for part, where, name in PARTS:
        got = [(v[1], v[3]) for (path, _, fn), v in stats.items() if fn == name and path.endswith(where)]
        calls, cum = sum(c for c, _ in got), max((t for _, t in got), default=0.0)
        whole = cum if whole is None else whole
        print(f"| {part} | {calls:,} | {cum:.1f} | {cum / whole:.0%} |")
    answer_s = found.plans[0].estimate.iteration_time_s
    print(f"\n| engine | scored | pool orders | floor below the answer's {answer_s:.2f} s |\n|---|---|---|---|")
    for engine, cands in scored.items():
        below = sum(c.floor_s < answer_s * (1 - 1e-9) for c in cands)
        print(f"| {engine} | {len(cands):,} | {len({c.layout for c in cands}):,} | {below:,} |")


if __name__ == "__main__":
    main()
