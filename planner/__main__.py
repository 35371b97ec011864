"""The `hetplan` program: `python -m planner` and the installed script (pyproject.toml's [project.scripts])
run `program`, planner.cli.main in a process that ends when it returns (docs/performance.md, "Start-up and exit
of the command line")."""
import gc
import os
import sys

# numpy's OpenBLAS starts a thread per core as numpy loads, each spinning for a while before it sleeps: CPU
# seconds (0.02-0.04 s of every command at 2 cores, more with more cores) for matrix routines the planner never
# calls (its arrays are element-wise). One thread unless the user sets it; the processes a command starts
# (run-local's trainers) get the environment as the user gave it.
BLAS_THREADS = "OPENBLAS_NUM_THREADS"
_blas_threads_given = BLAS_THREADS in os.environ
os.environ.setdefault(BLAS_THREADS, "1")
from planner.cli import GC_THRESHOLDS, main  # noqa: E402  (numpy loads here, under the setting above)

if not _blas_threads_given:
    del os.environ[BLAS_THREADS]


def program() -> int:
    """planner.cli.main in a process that ends with it: main's collector thresholds (GC_THRESHOLDS) for the
    whole process, so that main's return to them starts no collection of what the search left (a full one:
    0.06-0.10 CPU s at 128 GPUs), and those objects frozen (gc.freeze) as it returns, so that the interpreter's
    collections as it ends do not traverse them either (another 0.04-0.17 s) to free what the exit frees anyway."""
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(program())
