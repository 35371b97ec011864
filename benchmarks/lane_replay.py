"""Lane benchmark: the CPU seconds a search's pipeline simulations spend on their lanes, by extrapolation
threshold, and whether every extrapolated lane equals its full simulation.

    python benchmarks/lane_replay.py [--cluster FILE] [--model M] [--global-batch B] [--seq-len S]
                                     [--repeat 3] [--factors 32,16,8,4]

Runs the search (best engine, as `hetplan plan` does, in this process; default: the 128-GPU job of
benchmarks/search_benchmark.py's command table), records every lane that `planner.schedule.simulate`
simulates without a timeline (its micro-batches, pass times and transfers, already on the call's grid, and
the grid), then replays them all, `--repeat` times each, with the extrapolation threshold max(32, k p) for
each k of `--factors` (planner.schedule.extrapolation_threshold's factor is 4), and prints the best CPU
seconds of a replay, the lanes extrapolated, and how many differ from the full simulation (every worker's
end and busy time, ==; the full simulation is what a timeline runs).
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.job_args import add_replay_arguments, replay_job  # noqa: E402
from benchmarks.search_benchmark import CLUSTER_128  # noqa: E402
from catalog import load_catalog  # noqa: E402
from planner import schedule  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.types import Objective, Schedule  # noqa: E402

search_module = importlib.import_module("planner.search.search")     # the module (the package exports its function)


def _recorded_lanes(cluster, job) -> tuple[list, float]:
    """Every lane the search simulated without a timeline (the arguments of schedule._simulate_lane), and
    the answer's tokens/s."""
    lanes, simulate_lane = [], schedule._simulate_lane

    def record(micro_batches, forward_s, backward_s, delay, kind, v, timeline, limit, grid=None):
        if not timeline:
            lanes.append((micro_batches, forward_s, backward_s, delay, kind, v, limit, grid))
        return simulate_lane(micro_batches, forward_s, backward_s, delay, kind, v, timeline, limit, grid)

    schedule._simulate_lane = record
    try:
        result = search_module.search(cluster, job, Objective.THROUGHPUT, engines=REAL)
    finally:
        schedule._simulate_lane = simulate_lane
    return lanes, result.plans[0].estimate.tokens_per_s


def _full(lane) -> schedule.SimResult:
    micro_batches, forward_s, backward_s, delay, kind, v, limit, grid = lane
    if v > 1 or kind == Schedule.ONE_F_ONE_B:
        return schedule._simulate_static(micro_batches, forward_s, backward_s, delay, kind, v, False, grid=grid,
                                         limit=limit)
    return schedule._simulate_events(micro_batches, forward_s, backward_s, delay, kind, False, limit)


def _replay(lanes, factor: int, full: list) -> tuple[float, int, int]:
    """(CPU s of one replay of every lane at threshold max(32, factor p), lanes extrapolated, lanes that
    differ from their full simulation)."""
    threshold = schedule.extrapolation_threshold
    schedule.extrapolation_threshold = lambda p: max(32, factor * p)
    try:
        start = time.process_time()
        answers = [schedule._simulate_lane(m, f, b, d, k, v, False, limit, grid) for m, f, b, d, k, v, limit, grid in lanes]
        spent = time.process_time() - start
        extrapolated = sum(lane[0][0][0] > schedule.extrapolation_threshold(len(lane[0])) for lane in lanes)
    finally:
        schedule.extrapolation_threshold = threshold
    differ = sum((a.makespan_s, a.end_s, a.busy_s) != (b.makespan_s, b.end_s, b.busy_s) for a, b in zip(answers, full))
    return spent, extrapolated, differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_replay_arguments(parser, repeat=3)
    parser.add_argument("--factors", default="32,16,8,4", help="comma-separated k of the threshold max(32, k p)")
    args = parser.parse_args()
    try:
        factors = [int(x) for x in args.factors.split(",")]
    except ValueError:
        parser.error(f"--factors: whole numbers separated by commas, got {args.factors!r}")
    if not factors or min(factors) < 1:
        parser.error("--factors: each at least 1")
    cluster, job = replay_job(args, load_catalog(), CLUSTER_128)
    lanes, tokens = _recorded_lanes(cluster, job)
    full = [_full(lane) for lane in lanes]
    print(f"search answer {tokens:,.0f} tokens/s; {len(lanes)} lanes simulated without a timeline "
          f"({sum(lane[0][0][0] for lane in lanes):,} micro-batches)")
    print("| threshold | lanes past it | best CPU s of a replay | differ from the full simulation |")
    print("| --- | --- | --- | --- |")
    for factor in factors:
        runs = [_replay(lanes, factor, full) for _ in range(args.repeat)]
        print(f"| max(32, {factor} p) | {runs[0][1]} | {min(r[0] for r in runs):.3f} | {runs[0][2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
