"""How soon a lane's schedule simulation recurs, so that planner.schedule can extrapolate it (issue 24).

    python benchmarks/lane_recurrence.py [--lanes 150] [--seed 5]

Random one-replica-per-stage lanes (2-32 stages; transfers 0, 0.01 or 0.3 s; the usual in-flight limits),
for three spreads of stage times: forward times uniform in [1, 1.05], [1, 1.3] and [0.1, 3] s, each backward
about twice its forward (x 0.9-1.1). For each, the share of lanes whose simulator state recurs within
k x p micro-batches (k = 2 ... 64): both schedules run Megatron-LM's fixed order, and recur when the ends of
each worker's last pair shared with an endless stream do (1F1B after whole micro-batches, interleaved, v = 2,
after groups of p). A lane that does not recur within the bound that planner.schedule tries is simulated
in full. Times are taken to the
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

from planner.schedule import _grid, _gridded, _static_lane, in_flight_limit, on_grid  # noqa: E402

SPREADS = (("within 5%", 1.0, 1.05), ("within 30%", 1.0, 1.3), ("0.1 to 3 s", 0.1, 3.0))
FACTORS = (2, 4, 8, 16, 32, 64)


def on_the_grid(m: int, f: list[float], b: list[float], delay, v: int):
    """The lane's times as simulate() takes them for m micro-batches."""
    grid = _grid([[m]] * len(f), [[x] for x in f], [[x] for x in b], delay, v)
    return [on_grid(x, grid) for x in f], [on_grid(x, grid) for x in b], _gridded(delay, grid), grid


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=150)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args()
    print("| stage times | schedule | " + " | ".join(f"recur within {k} p" for k in FACTORS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in FACTORS) + " |")
    for name, low, high in SPREADS:
        rng = random.Random(args.seed)
        found = {v: {k: 0 for k in FACTORS} for v in (1, 2)}
        for _ in range(args.lanes):
            p = rng.randint(2, 32)
            f = [rng.uniform(low, high) for _ in range(p)]
            b = [2 * x * rng.uniform(0.9, 1.1) for x in f]
            d = rng.choice([0.0, 0.01, 0.3])

            def delay(*_, d=d):
                return d
            m = 10**6 // p * p
            limits = [[in_flight_limit([1] * p, i, m, m)] for i in range(p)]
            for v in (1, 2):
                fg, bg, dg, grid = on_the_grid(m, f, b, delay, v)
                for k in FACTORS:
                    if _static_lane(m, fg, bg, dg, v, limits, k * p, grid) is not None:
                        found[v][k] += 1
        for v, label in ((1, "1F1B"), (2, "interleaved, v = 2")):
            print(f"| {name} | {label} | " + " | ".join(f"{found[v][k] / args.lanes:.0%}" for k in FACTORS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
