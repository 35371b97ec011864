"""Every computation a visitor triggers runs in a worker process under a budget (issue 24).

A Streamlit server answers every session from one process: a plan search, the evaluation of a
shared link or a fleet solve run in it would hold its interpreter (and every other session's
page) for as long as they compute, and their memory would be the server's. Here each one runs in
a process of its own, forked from a forkserver that has the planner loaded (a fork costs
milliseconds; `spawn` elsewhere), under limits the kernel enforces in the child:

- CPU time: `resource.RLIMIT_CPU` (SIGXCPU, then SIGKILL a second later);
- memory: `resource.RLIMIT_AS`, `memory_bytes` above what the worker holds when it starts (an
  allocation past it fails: MemoryError);
- wall time: the waiting thread kills the worker after `wall_s` (a worker blocked, not computing);
- the server's end: a worker asks the kernel for SIGTERM when its parent (the forkserver, which
  ends with the server) ends (prctl PR_SET_PDEATHSIG).

A worker over a limit is ended and the caller gets `OverBudget`, whose message says which limit
and what to do; the server and the other sessions carry on. `Ledger` holds each session's CPU
seconds, refilled at a steady rate, so that one visitor cannot keep the server's cores busy by
asking again and again. At most `slots` workers run at once (`Budget.slots`): memory of the whole
server is bounded by slots × memory_bytes plus the server's own.

Streamlit Community Cloud runs one Linux container per app, with no other services: the
forkserver is a child of the server, started on first use, and nothing else is needed.
"""
from __future__ import annotations

import ctypes
import multiprocessing
import os
import resource
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

from planner.types import InputError

# Modules the forkserver imports once, so that each worker starts with the planner loaded.
PRELOAD = ["ui.planning", "planner.search", "planner.replan", "planner.fleet", "planner.rl.search"]
PR_SET_PDEATHSIG = 1
INLINE_ENV = "HETPLAN_APP_INLINE"      # "1": run in the calling thread, no limits (AppTest tests that patch the planner)


@dataclass(frozen=True)
class Budget:
    """The limits of the app's computations. `call_cpu_s`: CPU seconds one computation may use (the
    longest search the app offers, 600 CPU-s, with its baselines and engines: see ui.planning);
    `session_cpu_s`: the CPU seconds one session holds when full, refilled at `refill_cpu_s_per_s`
    (0.25: a quarter of one core, 900 CPU-s an hour); `memory_bytes`: memory one worker may add;
    `slots`: workers at once on the server; `wall_s_per_cpu_s`: a worker waiting this many times
    its CPU budget in wall time (a busy machine, or blocked) is ended too."""
    call_cpu_s: float = 1200.0
    session_cpu_s: float = 1800.0
    refill_cpu_s_per_s: float = 0.25
    memory_bytes: int = 3 * 2 ** 30
    slots: int = max(1, (os.cpu_count() or 2))
    wall_s_per_cpu_s: float = 8.0

    @staticmethod
    def from_env(environ=os.environ) -> "Budget":
        """The defaults, with `HETPLAN_APP_CPU_S` (per computation), `HETPLAN_APP_SESSION_CPU_S`,
        `HETPLAN_APP_MEMORY_MB` (per worker) and `HETPLAN_APP_WORKERS` (at once) where set (a host
        with less memory sets a smaller figure)."""
        default = Budget()

        def number(name: str, value: float) -> float:
            try:
                got = float(environ.get(name, value))
            except ValueError:
                return value
            return got if got > 0 else value
        return Budget(call_cpu_s=number("HETPLAN_APP_CPU_S", default.call_cpu_s),
                      session_cpu_s=number("HETPLAN_APP_SESSION_CPU_S", default.session_cpu_s),
                      memory_bytes=int(number("HETPLAN_APP_MEMORY_MB", default.memory_bytes / 2 ** 20) * 2 ** 20),
                      slots=int(number("HETPLAN_APP_WORKERS", default.slots)))


class OverBudget(RuntimeError):
    """A computation refused or ended for its budget; the message is for the visitor."""

    def __init__(self, message: str, limit: str):
        super().__init__(message)
        self.limit = limit          # "cpu", "session", "memory", "wall" or "crash"


class WorkerFailed(RuntimeError):
    """A bug inside the worker (not bad input): its type, message and traceback as text."""


@dataclass
class Ledger:
    """CPU seconds each session has left, a bucket that refills (Budget.session_cpu_s, refill rate)."""
    budget: Budget
    spent: dict[str, tuple[float, float]] = field(default_factory=dict)   # session -> (level, time.monotonic())
    lock: threading.Lock = field(default_factory=threading.Lock)
    slots: threading.BoundedSemaphore | None = None
    running: dict[str, set] = field(default_factory=dict)      # session -> its workers now (Process objects)
    stopped: set = field(default_factory=set)                   # pids of workers ended by `stop`

    def __post_init__(self):
        self.slots = threading.BoundedSemaphore(self.budget.slots)

    def left_s(self, session: str) -> float:
        with self.lock:
            level, at = self.spent.get(session, (self.budget.session_cpu_s, time.monotonic()))
            return min(self.budget.session_cpu_s, level + (time.monotonic() - at) * self.budget.refill_cpu_s_per_s)

    def charge(self, session: str, cpu_s: float) -> None:
        left = self.left_s(session)
        with self.lock:
            self.spent[session] = (left - cpu_s, time.monotonic())

    def run(self, session: str, fn: Callable, *args, cpu_s: float | None = None) -> Any:
        """`fn(*args)` in a worker under this session's budget; charges what it used."""
        left = self.left_s(session)
        if left < 1.0:
            wait_s = (1.0 - left) / self.budget.refill_cpu_s_per_s
            raise OverBudget(f"this session has used its {self.budget.session_cpu_s:,.0f} CPU seconds of the "
                             f"hosted planner; it refills at {self.budget.refill_cpu_s_per_s * 60:g} CPU seconds a "
                             f"minute (try again in about {wait_s / 60:.0f} min), or run hetplan on your own "
                             f"machine (pip install, then `streamlit run app.py` or `hetplan plan`)", "session")
        limit = min(left, self.budget.call_cpu_s, cpu_s or self.budget.call_cpu_s)
        mine: list = []

        def started(worker) -> None:
            mine.append(worker)
            with self.lock:
                self.running.setdefault(session, set()).add(worker)
        with self.slots:
            try:
                value, used = run(fn, args, limit, self.budget.memory_bytes,
                                  limit * self.budget.wall_s_per_cpu_s + 30, session_left_s=left, started=started)
            except OverBudget as e:
                if mine and mine[0].pid in self.stopped:
                    self.stopped.discard(mine[0].pid)
                    raise OverBudget("the computation was stopped: a newer one of this session replaced it",
                                     "stopped") from None
                self.charge(session, limit if e.limit in ("cpu", "wall") else 0.0)
                raise
            finally:
                with self.lock:
                    self.running.get(session, set()).difference_update(mine)
        self.charge(session, used)
        return value

    def stop(self, session: str) -> int:
        """End this session's workers now (a search whose answer nobody waits for); returns how many.
        Their callers get OverBudget with limit "stopped"."""
        with self.lock:
            workers = list(self.running.get(session, ()))
            for worker in workers:
                self.stopped.add(worker.pid)
        for worker in workers:
            worker.kill()
        return len(workers)


def inline() -> bool:
    return os.environ.get(INLINE_ENV) == "1"


def context():
    """forkserver where there is one (Linux, macOS), with the planner preloaded; spawn elsewhere."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return multiprocessing.get_context("spawn")


def warm_up() -> None:
    """Start the forkserver now, not at the first computation: its preload (the planner's imports) takes a few
    seconds in a process of its own, which a visitor reading the first page does not wait for, and the first
    computation then forks at once."""
    if inline() or "forkserver" not in multiprocessing.get_all_start_methods():
        return
    from multiprocessing import forkserver      # Unix only (the check above)
    context()
    forkserver.ensure_running()


def run(fn: Callable, args: tuple, cpu_s: float, memory_bytes: int, wall_s: float,
        session_left_s: float | None = None, started: Callable | None = None) -> tuple[Any, float]:
    """(fn(*args), CPU seconds the worker used) from a worker process under the limits (module
    docstring); raises OverBudget when a limit ends it, the worker's own InputError as it was, and
    WorkerFailed for any other exception in it. `started(process)` is called once the worker runs."""
    if inline():
        start = time.thread_time()
        return fn(*args), time.thread_time() - start
    ctx = context()
    receive, send = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_work, args=(send, fn, args, cpu_s, memory_bytes), daemon=True,
                         name="hetplan-budget")
    worker.start()
    send.close()
    if started is not None:
        started(worker)
    try:
        message = _wait(worker, receive, wall_s)
    finally:
        receive.close()
        if worker.is_alive():
            worker.kill()
        worker.join(5)
    return _answer(message, worker.exitcode, cpu_s, memory_bytes, wall_s, session_left_s)


def _wait(worker, receive, wall_s: float):
    deadline = time.monotonic() + wall_s
    while time.monotonic() < deadline:
        if receive.poll(0.2):
            try:
                return receive.recv()
            except (EOFError, OSError):       # ended without answering: killed by a limit, or crashed
                return None
        if not worker.is_alive() and not receive.poll(0):
            return None
    return "wall"


def _answer(message, exitcode, cpu_s, memory_bytes, wall_s, session_left_s) -> tuple[Any, float]:
    if message == "wall":
        raise OverBudget(f"the computation was stopped after {wall_s:,.0f} s of waiting (the server is busy); "
                         f"try again in a while, or run hetplan on your own machine", "wall")
    if message is None:
        if exitcode in (-signal.SIGXCPU, -signal.SIGKILL):
            cut = session_left_s is not None and session_left_s <= cpu_s
            raise OverBudget(f"the computation was stopped at its budget of {cpu_s:,.0f} CPU seconds"
                             + (" (what this session had left of the hosted planner's CPU time)" if cut else "")
                             + "; lower the search's time limit or the problem's size, or run hetplan on "
                               "your own machine", "cpu")
        raise OverBudget(f"the computation ended without an answer (worker exit status {exitcode}); "
                         f"try a smaller problem, or run hetplan on your own machine", "crash")
    kind, value, used = message
    if kind == "ok":
        return value, used
    if kind == "memory":
        raise OverBudget(f"the computation was stopped at its memory budget of {memory_bytes / 2 ** 30:.1f} GiB; "
                         f"try a smaller problem (fewer pools, GPUs, micro-batches), or run hetplan on your own "
                         f"machine", "memory")
    if kind == "raise":
        raise value
    raise WorkerFailed(value)


def _work(send, fn: Callable, args: tuple, cpu_s: float, memory_bytes: int) -> None:
    """The worker: limits first, then `fn`; sends ("ok", value, cpu_s), ("raise", InputError, cpu_s),
    ("memory", None, cpu_s) or ("failed", traceback text, cpu_s)."""
    _limit(cpu_s, memory_bytes)
    try:
        kind, value = "ok", fn(*args)
    except MemoryError:
        kind, value = "memory", None
    except Exception as e:  # noqa: BLE001 - sent to the server, which says it
        kind, value = (("raise", e) if isinstance(e, InputError) else
                       ("failed", "".join(traceback.format_exception(e))[-4000:]))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    try:
        send.send((kind, value, usage.ru_utime + usage.ru_stime))
    except MemoryError:
        send.send(("memory", None, cpu_s))


def _limit(cpu_s: float, memory_bytes: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)        # a Ctrl-C to the server's group: the server ends us
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    seconds = max(1, int(cpu_s + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    if sys.platform.startswith("linux"):
        with open("/proc/self/statm") as f:
            held = int(f.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (held + memory_bytes, held + memory_bytes))
