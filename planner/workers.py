"""Worker processes that end with the process that started them (issue 24), for the searches that
run in several processes: `hetplan fleet --workers` (planner.fleet) and `hetplan plan --workers`
(planner.search.parallel).

A worker ends when its parent does, however the parent ends: on Linux it asks the kernel for SIGTERM
when its parent goes (prctl PR_SET_PDEATHSIG), SIGKILL of the parent included; a command that runs
workers turns SIGTERM and SIGHUP into KeyboardInterrupt (`ended_by_signals`), so that its `finally`
blocks end the workers at once (`stop_pool`) and it exits with 128 + the signal.

Workers start by fork where that is safe (`worker_context`: Linux, one Python thread), so that a worker
begins with this process's modules and caches in a few milliseconds instead of a spawned
interpreter's imports (0.3-0.6 CPU s and a second of wall time each with the search's modules, then
cold caches: `python benchmarks/workers_benchmark.py --start`); elsewhere they are spawned.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

PR_SET_PDEATHSIG = 1            # linux/prctl.h: the signal a process gets when its parent thread ends


def end_with_parent(parent_pid: int) -> None:
    """A worker process's initializer: it ends when its parent does, however the parent ends (a
    signal, SIGKILL included, or a crash): on Linux, prctl(PR_SET_PDEATHSIG, SIGTERM) (man 2 prctl);
    and if the parent is already gone, now. SIGINT is left to the parent (a Ctrl-C reaches the whole
    process group), which ends its workers itself. multiprocessing's resource tracker ends once every
    process holding its pipe has (Python 3.11 multiprocessing/resource_tracker.py: it reads until EOF)."""
    import ctypes               # lazy, as multiprocessing below: only --workers above 1 starts workers
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):     # a forked worker's are its parent's (ended_by_signals)
        signal.signal(sig, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _start_worker(parent_pid: int, initializer: Callable | None, initargs: tuple) -> None:
    end_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def worker_context():
    """The multiprocessing context workers start in: "fork" on Linux while this process runs one
    Python thread (no lock another thread holds is copied; numpy's OpenBLAS threads stop and
    restart around a fork by its own pthread_atfork handlers), else "spawn" (a server's threads,
    other systems). Shared memory and locks for the workers are made in the same context."""
    import multiprocessing      # lazy: ~0.03 s of every command's start-up that only workers need
    fork = sys.platform.startswith("linux") and threading.active_count() == 1
    return multiprocessing.get_context("fork" if fork else "spawn")


def worker_pool(workers: int, initializer: Callable | None = None, initargs: tuple = (),
                context=None) -> ProcessPoolExecutor:
    """Worker processes that end with this one (end_with_parent), each then running
    `initializer(*initargs)` (how shared memory and locks reach a spawned process: by inheritance),
    started in `context` (default worker_context()). Forked workers are started now, in an empty
    contextvars context, so that they hold none of the caller's context variables (a search's
    budget, say), as a spawned worker does not."""
    from concurrent.futures import ProcessPoolExecutor    # lazy, as multiprocessing in worker_context
    context = context or worker_context()
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker,
                               initargs=(os.getpid(), initializer, initargs))
    if context.get_start_method() == "fork":    # the executor forks them all at its first task
        contextvars.Context().run(pool.submit, os.getpid)
    return pool


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now, mid-task: queued tasks cancelled, running ones killed. Python 3.11's
    executor has no public call for the second (3.14 adds terminate_workers), so its process table
    is read."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)       # first: no task goes to a worker being ended
    for process in processes:
        if process.is_alive():
            process.terminate()


class Ended(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where the main thread is, so that the worker processes are ended
    on the way out (stop_pool in a `finally`) and `hetplan` exits with 128 + the signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def ended_by_signals():
    """SIGTERM and SIGHUP end the command as SIGINT (KeyboardInterrupt) does: through the `finally`
    blocks that stop the workers (they also end with their parent on their own: end_with_parent).
    The previous handlers come back afterwards."""
    def raise_ended(signum, frame):
        raise Ended(signum)
    before = {s: signal.signal(s, raise_ended) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
