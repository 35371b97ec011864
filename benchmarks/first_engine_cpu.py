"""CPU time of the first engine's search of `hetplan plan` (Megatron-LM: no plan from another engine to beat).

    python benchmarks/first_engine_cpu.py [--repeat N] [--sizes 128,1024] [--time-limit S] [--no-greedy]

The default best-engine command searches Megatron-LM first, with nothing to prune at but its own greedy first
plan (planner.search.greedy), then the other engines pruned at its answer. This times that first search alone:
search(cluster, job under Megatron-LM, baselines=False), as _search_engines runs it, in a fresh process per run
(its caches cold, as in the command; start-up not counted), the least and the median CPU seconds
(time.process_time) of N runs, its fast scores and its answer. Run it on two checkouts in the same minute to
compare: a shared machine inflates every figure. `--no-greedy`: without the greedy first plan (what it is worth);
`--time-limit`: SearchOptions.time_limit_s of the search (default: the command's, 20 s). `--phases`: also where
the time goes (CPU seconds inside each function, nested ones counted in their callers too; the median run's).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = {  # GPUs: (cluster file, model, global batch, sequence length), the jobs of issue 22's 128- and 1,024-GPU rows
    128: (None, "llama-2-70b", 512, 4096),
    1024: ("cloud-4types-1024.yaml", "gpt3-175b", 1536, 2048),
}


# (module, attribute, label): the functions --phases times
PHASES = (("planner.search.search", "_greedy_first", "greedy first plan (chosen and evaluated)"),
          ("planner.search.planners", "HetplanPlanner.consider", "best-first loop"),
          ("planner.search.planners", "_keyed_bounds", "  pipeline bounds (bound.pipeline_s)"),
          ("planner.search.score", "Scorer.score", "  fast scores (split, shares, iteration_s)"),
          ("planner.search.planners", "evaluate", "  incumbents evaluated"),
          ("planner.search.search", "_rank", "re-scoring the kept candidates"),
          ("planner.search.search", "_verify", "verifying the dropped ones below the answer"),
          ("planner.search.search", "_evaluate_shown", "the shown plans evaluated in full"),
          ("planner.search.search", "_evaluate_plan", "any planner.cost.evaluate (detail=False) by search"))


def _time_phases() -> dict:
    """Wrap the PHASES functions to add up their CPU seconds and calls into the returned dict; also note
    which phase evaluated each plan (spent["origin"]), and how often Scorer.score was cut short
    (spent["enough"]: _Keeper.enough's answers, yes and no)."""
    spent: dict = {"origin": {}, "enough": [0, 0]}
    active: list = []
    keeper = sys.modules["planner.search.planners"]._Keeper
    asked = keeper.enough

    def enough(self, *args):
        answer = asked(self, *args)
        spent["enough"][0 if answer else 1] += 1
        return answer
    keeper.enough = enough
    for module, name, label in PHASES:
        owner = sys.modules[module]
        if "." in name:
            owner, name = getattr(owner, name.split(".")[0]), name.split(".")[1]
        inner = getattr(owner, name)

        def timed(*args, _inner=inner, _label=label, _name=name, **kwargs):
            start = time.process_time()
            active.append(_label)
            try:
                if _name == "_evaluate_plan":      # (cluster, job, plan, options): by the phase that called it
                    spent["origin"].setdefault(args[2], active[-2].strip())
                return _inner(*args, **kwargs)
            finally:
                active.pop()
                seconds, calls = spent.get(_label, (0.0, 0))
                spent[_label] = (seconds + time.process_time() - start, calls + 1)
        setattr(owner, name, timed)
    return spent


def _one(gpus: int, time_limit_s: float, greedy: bool, phases: bool) -> dict:
    """One run, in this process."""
    import yaml
    from catalog import cluster_from_dict, load_catalog, load_cluster_file
    from planner.search import SearchOptions, search
    from planner.types import Job
    from benchmarks.search_benchmark import CLUSTER_128
    catalog = load_catalog()
    file, model, batch, seq = SIZES[gpus]
    cluster = (cluster_from_dict(yaml.safe_load(CLUSTER_128), catalog) if file is None
               else load_cluster_file(ROOT / "examples" / file, catalog))
    job = Job(catalog.model(model), batch, seq, engine="megatron")
    if not greedy:
        sys.modules["planner.search.search"].greedy_candidate = lambda *args, **kwargs: None
    spent = _time_phases() if phases else {}
    start = time.process_time()
    result = search(cluster, job, options=SearchOptions(time_limit_s=time_limit_s), baselines=False)
    cpu_s = time.process_time() - start
    origin = spent.pop("origin", {})
    if phases:
        evaluated = [origin.get(sp.plan, "best-first loop (an incumbent)") for sp in result.plans]
        on_front = [origin.get(sp.plan, "best-first loop (an incumbent)") for sp in result.pareto]
        spent["evaluations by phase"] = {label: list(origin.values()).count(label) for label in set(origin.values())}
        spent["shown plans, best first, evaluated by"] = evaluated
        spent["Pareto front's plans evaluated by"] = on_front
    return {"cpu_s": cpu_s, "fast_scores": result.candidates_evaluated,
            "tokens_per_s": result.plans[0].estimate.tokens_per_s, "complete": result.complete, "phases": spent}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="128,1024")
    parser.add_argument("--time-limit", type=float, default=20.0)
    parser.add_argument("--no-greedy", action="store_true", help="without the greedy first plan")
    parser.add_argument("--phases", action="store_true", help="also where the time goes")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)     # a child's run
    args = parser.parse_args()
    if args.one:
        print(json.dumps(_one(args.one, args.time_limit, not args.no_greedy, args.phases)))
        return 0
    for gpus in (int(s) for s in args.sizes.split(",")):
        child = [sys.executable, __file__, "--one", str(gpus), "--time-limit", str(args.time_limit)]
        child += (["--no-greedy"] if args.no_greedy else []) + (["--phases"] if args.phases else [])
        runs = [json.loads(subprocess.run(child, check=True, text=True, capture_output=True, cwd=ROOT).stdout)
                for _ in range(args.repeat)]
        cpu = [r["cpu_s"] for r in runs]
        last = runs[-1]
        print(f"{gpus:>5,} GPUs  Megatron-LM's search: least {min(cpu):.3f} s, median {statistics.median(cpu):.3f} s "
              f"CPU of {args.repeat}; {last['fast_scores']:,} fast scores; {last['tokens_per_s']:,.0f} tokens/s, "
              f"{'complete' if last['complete'] else 'not complete'}"
              + (", no greedy first plan" if args.no_greedy else ""))
        median = sorted(runs, key=lambda r: r["cpu_s"])[len(runs) // 2]
        for label in (label for _, _, label in PHASES if label in median["phases"]):
            seconds, calls = median["phases"][label]
            print(f"       {label:55s} {seconds:6.3f} s  {calls:5,} calls")
        if args.phases:
            cut, kept = median["phases"]["enough"]
            print(f"       fast scores cut short at their busiest stage (_Keeper.enough): {cut:,} of {cut + kept:,} asked")
            for label in ("evaluations by phase", "shown plans, best first, evaluated by",
                          "Pareto front's plans evaluated by"):
                print(f"       {label}: {median['phases'][label]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
