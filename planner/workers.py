"""Worker processes that end with the process that started them (issue 24), for the searches that
run in several processes: `hetplan fleet --workers` (planner.fleet) and `hetplan plan --workers`
(planner.search.parallel).

A worker ends when its parent does, however the parent ends: on Linux it asks the kernel for SIGTERM
when its parent goes (prctl PR_SET_PDEATHSIG), SIGKILL of the parent included; a command that runs
workers turns SIGTERM and SIGHUP into KeyboardInterrupt (`ended_by_signals`), so that its `finally`
blocks end the workers at once (`stop_pool`) and it exits with 128 + the signal.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
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
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def _start_worker(parent_pid: int, initializer: Callable | None, initargs: tuple) -> None:
    end_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def worker_pool(workers: int, initializer: Callable | None = None, initargs: tuple = ()) -> ProcessPoolExecutor:
    """Spawned worker processes that end with this one (end_with_parent), each then running
    `initializer(*initargs)` (how shared memory and locks reach a spawned process: by inheritance)."""
    # lazy: multiprocessing and the executor cost ~0.03 s of every command's start-up, and only workers need them
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(os.getpid(), initializer, initargs))


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
