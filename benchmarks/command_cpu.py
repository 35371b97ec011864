"""CPU seconds of whole `hetplan plan` commands (start-up included), two checkouts side by side.

    python benchmarks/command_cpu.py [--rounds 5] [--sizes 128,1024] [--checkouts DIR,DIR ...]
    python benchmarks/command_cpu.py --sizes help,128     # `help`: `hetplan plan --help`, start-up alone

Each round runs each command once from each checkout (`python -m planner plan ...` with that checkout's
root as the working directory, so its own code), in turn, so that both see the same minutes of a busy
machine; the CPU of a run is the child's user + system seconds (resource.RUSAGE_CHILDREN). Prints each
run, the least and the median per checkout, and the load average before and after. The children run with
compiled bytecode as an installed hetplan has it (PYTHONDONTWRITEBYTECODE, where set, is left out of their
environment, as search_benchmark does). Without --checkouts,
this checkout alone. To compare with an earlier commit: `git archive COMMIT | tar -x -C /tmp/before` and
`--checkouts /tmp/before,.`.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLUSTER_128 = "/tmp/hetplan-command-cpu-128.yaml"
COMMANDS = {  # GPUs -> `hetplan plan` arguments (search_benchmark's jobs; 128: its CLUSTER_128)
    16: "--cluster {root}/examples/a100-v100-16.yaml --model llama-2-7b --global-batch 64 --seq-len 4096",
    64: "--cluster {root}/examples/h100-a100-v100-64.yaml --model llama-2-70b --global-batch 256 --seq-len 4096",
    128: f"--cluster {CLUSTER_128} --model llama-2-70b --global-batch 512 --seq-len 4096",
    1024: "--cluster {root}/examples/cloud-4types-1024.yaml --model gpt3-175b --global-batch 1536 --seq-len 2048",
    4096: "--cluster {root}/examples/big-4types-4096.yaml --model llama-3.1-405b --global-batch 2048 --seq-len 8192",
    "help": "--help",
}


def run_cpu_s(checkout: Path, arguments: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-m", "planner", "plan", *arguments.format(root=checkout).split()],
                   cwd=checkout, stdout=subprocess.DEVNULL, check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default="128,1024",
                        help=f"which commands, by GPUs or `help` (of {', '.join(map(str, COMMANDS))})")
    parser.add_argument("--checkouts", default=str(ROOT), help="comma-separated checkout roots, run in turn")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks.search_benchmark import CLUSTER_128 as cluster_text
    Path(CLUSTER_128).write_text(cluster_text)
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for gpus in (int(n) if n.isdigit() else n for n in args.sizes.split(",")):
        runs: dict[Path, list[float]] = {c: [] for c in checkouts}
        for _ in range(args.rounds):
            for checkout in checkouts:
                runs[checkout].append(run_cpu_s(checkout, COMMANDS[gpus]))
        for checkout, cpu in runs.items():
            cpu.sort()
            label = "plan --help" if gpus == "help" else f"{gpus:,} GPUs"
            print(f"{label}, {checkout}: least {cpu[0]:.2f}, median {cpu[len(cpu) // 2]:.2f} CPU s "
                  f"({', '.join(f'{x:.2f}' for x in cpu)})", flush=True)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
