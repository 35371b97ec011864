"""How soon a lane's schedule simulation recurs, so that planner.schedule can extrapolate it (issue 24).

    python benchmarks/lane_recurrence.py [--lanes 150] [--seed 5]

Random one-replica-per-stage lanes (2-32 stages; transfers 0, 0.01 or 0.3 s; the usual in-flight limits),
for three spreads of stage times: forward times uniform in [1, 1.05], [1, 1.3] and [0.1, 3] s, each backward
about twice its forward (x 0.9-1.1). For each, the share of lanes whose simulator state recurs within
k x p micro-batches (k = 2 ... 64): 1F1B from the event simulation's state at stage 0's forwards,
interleaved (v = 2) from the ends of each worker's last pair shared with an endless stream. A lane that
does not recur within the bound that planner.schedule tries is simulated in full. Times are taken to the
grid that planner.schedule.simulate puts them on (schedule._grid), where every sum is exact and a state
recurs when its times are equal.
"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from planner.schedule import (_grid, _gridded, _interleaved_lane, _Recurrence, _simulate_events,  # noqa: E402
                              in_flight_limit, on_grid)
from planner.types import Schedule  # noqa: E402

SPREADS = (("within 5%", 1.0, 1.05), ("within 30%", 1.0, 1.3), ("0.1 to 3 s", 0.1, 3.0))
FACTORS = (2, 4, 8, 16, 32, 64)


def on_the_grid(m: int, f: list[float], b: list[float], delay, v: int):
    """The lane's times as simulate() takes them for m micro-batches."""
    grid = _grid([[m]] * len(f), [[x] for x in f], [[x] for x in b], delay, v)
    return [on_grid(x, grid) for x in f], [on_grid(x, grid) for x in b], _gridded(delay, grid), grid


def first_recurrence_1f1b(p, f, b, delay) -> int | None:
    """The micro-batch at which the 1F1B lane's state first recurs, within 64 p."""
    limits = [[in_flight_limit([1] * p, i, 10**6, 10**6)] for i in range(p)]
    watch = _Recurrence()
    f, b, delay, _ = on_the_grid(64 * p, f, b, delay, 1)
    _simulate_events([[64 * p]] * p, [[x] for x in f], [[x] for x in b], delay, Schedule.ONE_F_ONE_B, False,
                     limits, watch)
    return watch.found[1] if watch.found else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    print("| stage times | schedule | " + " | ".join(f"recur within {k} p" for k in FACTORS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in FACTORS) + " |")
    for name, low, high in SPREADS:
        rng = random.Random(args.seed)
        found_1f1b, found_interleaved = [], {k: 0 for k in FACTORS}
        for _ in range(args.lanes):
            p = rng.randint(2, 32)
            f = [rng.uniform(low, high) for _ in range(p)]
            b = [2 * x * rng.uniform(0.9, 1.1) for x in f]
            d = rng.choice([0.0, 0.01, 0.3])

            def delay(*_, d=d):
                return d
            at = first_recurrence_1f1b(p, f, b, delay)
            found_1f1b.append(at / p if at is not None else None)
            m = 10**6 // p * p
            limits = [[in_flight_limit([1] * p, i, m, m)] for i in range(p)]
            fg, bg, dg, grid = on_the_grid(m, f, b, delay, 2)
            for k in FACTORS:
                if _interleaved_lane(m, fg, bg, dg, 2, limits, k * p, grid) is not None:
                    found_interleaved[k] += 1
        shares = [sum(x is not None and x <= k for x in found_1f1b) / args.lanes for k in FACTORS]
        print(f"| {name} | 1F1B | " + " | ".join(f"{s:.0%}" for s in shares) + " |")
        print(f"| {name} | interleaved, v = 2 | "
              + " | ".join(f"{found_interleaved[k] / args.lanes:.0%}" for k in FACTORS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
