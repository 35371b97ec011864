"""`hetplan plan --workers N`: wall and CPU seconds of the whole command for N = 1, 2, 4, and whether
the answers agree (the best plan, its tokens/s, `complete` and `gap` of `--json`).

    python benchmarks/workers_benchmark.py [--repeat 2] [--workers 1,2,4] [--cases 64,1024,4096]
    python benchmarks/workers_benchmark.py --start      # what starting one worker costs, forked or spawned

Each command runs as a subprocess; its CPU seconds are user + system of it and of the worker processes
it waited for (os.wait4's rusage), and of its first process alone (start-up, the engines it takes and
the final evaluations: the least wall time N free cores could take); its wall seconds from start to
exit; the load average (1 min) before each run is printed beside it, since other load on the machine
stretches wall time (not the answer: the searches' limits are CPU time of their own threads).

On a shared, loaded machine wall seconds say little, so each row also has the critical path in CPU
seconds, what the wall time would be on N free cores if nothing waited: the longer of the first
process and (its CPU seconds when it started its first worker, or the resource tracker that spawned
workers need, + the workers' CPU seconds / (N - 1), as if they shared them evenly: their start-up
included), and its ratio to the mean of the 1-process rows of the case (whose critical path is its
CPU seconds). The first process's CPU seconds are counted until its exit call, so its interpreter's
teardown is counted with the workers'. Prints a markdown table for docs/performance.md.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    "64": ["--cluster", "examples/h100-a100-v100-64.yaml", "--model", "llama-2-70b", "--global-batch", "256",
           "--seq-len", "4096"],
    "1024": ["--cluster", "examples/cloud-4types-1024.yaml", "--model", "gpt3-175b", "--global-batch", "1536",
             "--seq-len", "2048"],
    "4096": ["--cluster", "examples/big-4types-4096.yaml", "--model", "llama-3.1-405b", "--global-batch", "2048",
             "--seq-len", "8192"],
}


# `python -m planner` that also prints its own process's CPU seconds (without its workers'): on N free
# cores the command cannot take less wall time than that
# and its CPU seconds when it first forked or spawned a process (a worker, planner.workers.worker_context, or
# multiprocessing's resource tracker; -1: it did not)
OWN_CPU = ("import multiprocessing.util, os, resource, sys\n"
           "from planner.cli import main\n"
           "def cpu_s():\n"
           "    r = resource.getrusage(resource.RUSAGE_SELF)\n"
           "    return r.ru_utime + r.ru_stime\n"
           "forked_at, fork, spawn = [], os.fork, multiprocessing.util.spawnv_passfds\n"
           "def first_fork():\n"
           "    forked_at.append(cpu_s())\n"
           "    return fork()\n"
           "def first_spawn(*args):\n"
           "    forked_at.append(cpu_s())\n"
           "    return spawn(*args)\n"
           "os.fork, multiprocessing.util.spawnv_passfds = first_fork, first_spawn\n"
           "if __name__ == '__main__':\n"
           "    rc = main(sys.argv[1:])\n"
           "    print(f'forked_at_s={(forked_at or [-1])[0]} own_cpu_s={cpu_s()}', file=sys.stderr)\n"
           "    sys.exit(rc)\n")


def run(case: str, workers: int) -> dict:
    """One `hetplan plan ... --workers N --json`: wall and CPU seconds, load before, the answer."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-c", OWN_CPU, "plan", *CASES[case], "--workers", str(workers),
                                  "--json"], cwd=ROOT, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            raise SystemExit(f"{case} --workers {workers}: exit {child.returncode}: {child.stderr.read().decode()}")
        out.seek(0)
        answer = json.loads(out.read())
        said = child.stderr.read().decode().split("forked_at_s=")[-1].replace("own_cpu_s=", "").split()
        forked_at_s, own_cpu_s = map(float, said)
    best = answer["plans"][0]
    cpu_s = usage.ru_utime + usage.ru_stime
    critical_s = own_cpu_s if forked_at_s < 0 else max(own_cpu_s, forked_at_s + (cpu_s - own_cpu_s) / (workers - 1))
    return {"case": case, "workers": workers, "wall_s": wall, "cpu_s": cpu_s, "own_cpu_s": own_cpu_s,
            "critical_s": critical_s, "forked_at_s": forked_at_s,
            "load": load, "tokens_per_s": best["metrics"]["tokens_per_s"], "complete": answer["complete"],
            "gap": answer["gap"], "plan": json.dumps({k: v for k, v in best.items() if k != "explanation"},
                                                     sort_keys=True)}


# a worker's start by each method (planner.workers.worker_pool), the search's modules loaded as in `hetplan plan`
START = ("import multiprocessing, os, resource, sys, time\n"
         "import planner.search.search\n"
         "from planner.workers import worker_pool\n"
         "if __name__ == '__main__':\n"
         "    start = time.perf_counter()\n"
         "    pool = worker_pool(1, context=multiprocessing.get_context(sys.argv[1]))\n"
         "    pool.submit(exec, 'import planner.search.search').result()    # as a search's first task needs\n"
         "    wall = time.perf_counter() - start\n"
         "    pool.shutdown()\n"
         "    r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
         "    print(f'{sys.argv[1]}: a first task back after {wall:.3f} s wall; the worker (and any resource "
         "tracker) {r.ru_utime + r.ru_stime:.3f} CPU s')\n")


def start_costs(repeat: int) -> None:
    for _ in range(repeat):
        for method in ("fork", "spawn"):
            load = os.getloadavg()[0]
            said = subprocess.run([sys.executable, "-c", START, method], cwd=ROOT, capture_output=True, text=True,
                                  check=True).stdout.strip()
            print(f"{said} (load {load:.1f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--cases", default="64,1024,4096")
    parser.add_argument("--start", action="store_true", help="only what starting one worker costs, by each method")
    args = parser.parse_args()
    if args.start:
        return start_costs(args.repeat)
    rows = []
    for case in args.cases.split(","):
        for _ in range(args.repeat):             # interleaved, so that each N sees the same minutes' load
            for workers in map(int, args.workers.split(",")):
                rows.append(run(case, workers))
                r = rows[-1]
                print(f"{case} GPUs, --workers {workers}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU "
                      f"({r['own_cpu_s']:.2f} s in the first process"
                      + (f", {r['forked_at_s']:.2f} s of it before the first worker" if r["forked_at_s"] >= 0 else "")
                      + f", critical path {r['critical_s']:.2f} s), "
                      f"load {r['load']:.1f}", file=sys.stderr, flush=True)
    print(f"{os.cpu_count()} CPUs\n")
    print("| GPUs | --workers | wall s | CPU s, all processes | CPU s, the first process | critical path, CPU s | "
          "of 1 process's | load (1 min) | best tokens/s | complete | gap | same best plan as 1 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        one = next(o for o in rows if o["case"] == r["case"] and o["workers"] == 1)
        ones = [o["critical_s"] for o in rows if o["case"] == r["case"] and o["workers"] == 1]
        same = "yes" if (r["plan"], r["tokens_per_s"], r["complete"], r["gap"]) == (
            one["plan"], one["tokens_per_s"], one["complete"], one["gap"]) else "NO"
        print(f"| {int(r['case']):,} | {r['workers']} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['own_cpu_s']:.2f} | "
              f"{r['critical_s']:.2f} | {r['critical_s'] / (sum(ones) / len(ones)):.2f} | {r['load']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {'yes' if r['complete'] else 'no'} | "
              f"{'' if r['gap'] is None else format(r['gap'], '.1%')} | {same} |")


if __name__ == "__main__":
    main()
