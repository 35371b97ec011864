"""CPU seconds of the parts of a `hetplan plan` command outside its search: start-up, reading the files, the
output and the exit, each least and median over child processes.

    python benchmarks/startup_parts.py [--rounds 7] [--gpus 128]

Rows: the interpreter alone (`python -c pass`); `import numpy` as the user's environment loads it and with
OPENBLAS_NUM_THREADS=1 (planner/__main__.py sets it while numpy loads); and the command (benchmarks/command_cpu.py's
job of that many GPUs) split at marks (time.process_time, this process's threads together) in two ways of ending:
`program`, as `python -m planner` and the `hetplan` script run it, and `main` alone with the process left to end
as Python ends one (the same start-up, and the ending of the command before planner/__main__.py's `program`). Parts: `imports` up to
planner.cli, `parser` (the command's module and what it imports), `files` (catalog and cluster), `search`,
`output`, `main's end` (from the output to main's return), `program's end` (from main's return to its own) and
`exit` (the child's user + system seconds, resource.RUSAGE_CHILDREN, less the last mark: the interpreter's end).
Children run with compiled bytecode as an installed hetplan (without PYTHONDONTWRITEBYTECODE).
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from benchmarks.command_cpu import CLUSTER_128, COMMANDS  # noqa: E402

# the child: the program with marks at the command's steps (plan_cmd's functions wrapped after planner/__main__.py
# has loaded numpy under its own environment), printed at exit
CHILD = r'''
import atexit, os, sys, time
T = time.process_time
marks = [("interpreter", T())]
import planner.__main__ as entry
marks.append(("imports", T()))
import planner.cli as cli
from planner.cli import plan_cmd

def mark_after(owner, name, label):
    inner = getattr(owner, name)
    def wrapped(*a, **k):
        result = inner(*a, **k)
        marks.append((label, T()))
        return result
    setattr(owner, name, wrapped)

mark_after(cli, "build_parser", "parser")
mark_after(plan_cmd, "catalog_from_args", "files")
mark_after(plan_cmd, "check_rl_flags", "files")
mark_after(plan_cmd, "_search", "search")
mark_after(plan_cmd, "_text", "output")
atexit.register(lambda: os.write(2, ("MARKS " + " ".join(f"{n}={t:.5f}" for n, t in marks) + "\n").encode()))
sys.argv = ["hetplan"] + sys.argv[1:]
if os.environ.get("ENDING") == "main":
    code = cli.main()
    marks.append(("main's_end", T()))
else:
    def timed_main(inner=entry.main):
        code = inner()
        marks.append(("main's_end", T()))
        return code
    entry.main = timed_main
    code = entry.program()
    marks.append(("program's_end", T()))
sys.exit(code)
'''
PARTS = ("interpreter", "imports", "parser", "files", "search", "output", "main's end", "program's end", "exit")


def child_cpu_s(args: list[str], env: dict) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, done.stderr


def parts(stderr: str, total: float) -> dict[str, float]:
    """Each part's CPU seconds from the child's marks (a part marked twice ends at its last mark)."""
    marks = [m.split("=") for m in stderr.split("MARKS ")[1].split()]
    out, previous = {}, 0.0
    for name, at in marks:
        out[name.replace("_", " ")] = out.get(name.replace("_", " "), 0.0) + float(at) - previous
        previous = float(at)
    out["exit"] = total - previous
    return out


def summary(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gpus", type=int, default=128, choices=[k for k in COMMANDS if isinstance(k, int)])
    args = parser.parse_args()
    from benchmarks.search_benchmark import CLUSTER_128 as cluster_text
    Path(CLUSTER_128).write_text(cluster_text)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = ["-c", CHILD, "plan", *COMMANDS[args.gpus].format(root=ROOT).split()]
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows: dict[str, list[float]] = {}
    split: dict[str, dict[str, list[float]]] = {"program": {}, "main": {}}
    for _ in range(args.rounds):
        rows.setdefault("python -c pass", []).append(child_cpu_s(["-c", "pass"], env)[0])
        rows.setdefault("import numpy", []).append(child_cpu_s(["-c", "import numpy"], env)[0])
        rows.setdefault("import numpy, OPENBLAS_NUM_THREADS=1", []).append(
            child_cpu_s(["-c", "import numpy"], {**env, "OPENBLAS_NUM_THREADS": "1"})[0])
        for ending in split:
            total, stderr = child_cpu_s(command, {**env, "ENDING": ending})
            for name, cpu in (parts(stderr, total) | {"total": total}).items():
                split[ending].setdefault(name, []).append(cpu)
    print("CPU s, least / median of", args.rounds)
    for name, values in rows.items():
        print(f"{name:40s} {summary(values)}")
    print(f"{args.gpus:,} GPUs: {COMMANDS[args.gpus].format(root='.')}")
    print(f"{'part':16s} {'program':>16s} {'main alone':>16s}")
    for name in (*PARTS, "total"):
        cells = [summary(split[e][name]) if name in split[e] else "-" for e in split]
        print(f"{name:16s} {cells[0]:>16s} {cells[1]:>16s}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
