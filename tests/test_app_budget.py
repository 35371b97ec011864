"""The app's computations run in worker processes under a budget (ui.budget, issue 24): a worker
over its CPU time or memory is ended with a message, a session over its CPU seconds is refused
while other sessions still run, and bad input or a bug inside a worker comes back as it was."""
from __future__ import annotations

import os
import time

import pytest

from planner.types import InfeasibleError, InputError
from tests.app_helpers import new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from ui import budget
from ui.budget import Budget, Ledger, OverBudget, WorkerFailed

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore")]


def spin(seconds: float) -> float:
    """Burns CPU for `seconds` of its own CPU time."""
    start = time.process_time()
    x = 0
    while time.process_time() - start < seconds:
        x += 1
    return time.process_time() - start


def hoard(gib: float) -> int:
    block = bytearray(int(gib * 2 ** 30))
    block[::4096] = b"x" * len(block[::4096])
    return len(block)


def refuse(field: str) -> None:
    if field:
        raise InputError(field, "must be positive")
    raise InfeasibleError("nothing fits")


def crash() -> None:
    raise ZeroDivisionError("inside the planner")


def pid() -> int:
    return os.getpid()


def test_a_worker_answers_and_its_cpu_time_is_counted():
    value, used = budget.run(spin, (0.3,), cpu_s=10, memory_bytes=2 ** 30, wall_s=60)
    assert value >= 0.3 and 0.3 <= used < 3
    assert budget.run(pid, (), 10, 2 ** 30, 60)[0] != os.getpid()     # another process


def test_a_worker_over_its_cpu_time_is_ended_with_a_message():
    start = time.monotonic()
    with pytest.raises(OverBudget, match="budget of 1 CPU seconds") as caught:
        budget.run(spin, (60,), cpu_s=1, memory_bytes=2 ** 30, wall_s=120)
    assert caught.value.limit == "cpu"
    assert time.monotonic() - start < 30          # ~1-2 s here; the kernel ends it, not the 60 s of work


def test_a_worker_over_its_memory_is_ended_with_a_message():
    with pytest.raises(OverBudget, match="memory budget of 0.2 GiB") as caught:
        budget.run(hoard, (2,), cpu_s=20, memory_bytes=200 * 2 ** 20, wall_s=120)
    assert caught.value.limit == "memory"
    assert budget.run(hoard, (0.05,), 20, 200 * 2 ** 20, 120)[0] == int(0.05 * 2 ** 30)


def test_bad_input_and_bugs_come_back_as_they_were():
    with pytest.raises(InputError) as caught:
        budget.run(refuse, ("pools",), 10, 2 ** 30, 60)
    assert caught.value.field == "pools" and str(caught.value) == "pools: must be positive"
    with pytest.raises(InfeasibleError, match="^nothing fits$"):
        budget.run(refuse, ("",), 10, 2 ** 30, 60)
    with pytest.raises(WorkerFailed, match="ZeroDivisionError: inside the planner"):
        budget.run(crash, (), 10, 2 ** 30, 60)


def test_a_session_over_its_cpu_seconds_is_refused_and_another_still_runs():
    ledger = Ledger(Budget(call_cpu_s=5, session_cpu_s=2, refill_cpu_s_per_s=0.01, slots=2))
    with pytest.raises(OverBudget) as caught:
        ledger.run("greedy", spin, 30)                   # ended at what the session holds: 2 CPU-s
    assert caught.value.limit == "cpu" and "this session had left" in str(caught.value)
    with pytest.raises(OverBudget, match="this session has used its 2 CPU seconds") as caught:
        ledger.run("greedy", spin, 0.1)
    assert caught.value.limit == "session"
    assert ledger.run("another", spin, 0.2) >= 0.2


def test_the_app_says_when_a_search_is_over_the_budget(monkeypatch):
    """A visitor whose search outlives the session's CPU seconds reads why; the page still works."""
    monkeypatch.delenv(budget.INLINE_ENV, raising=False)
    monkeypatch.setenv("HETPLAN_APP_CPU_S", "1")
    from tests.test_limits import largest_cluster
    from ui.state import AppState, encode
    state = AppState(cluster=largest_cluster(8), model="llama-3.1-405b", global_batch=4096, seq_len=8192,
                     time_limit_s=30)
    at = ok(new_app(encode(state)).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    said = texts(at)
    assert "budget of 1 CPU seconds" in said, said[-2000:]
    assert at.session_state["app_state"].plan is None


def test_a_session_stops_its_own_workers_and_not_the_others():
    """A search replaced by a newer one is stopped (ui.session.start_search): its caller is told so,
    the session is not charged for a limit it did not reach, and another session's worker runs on."""
    import threading
    ledger = Ledger(Budget(call_cpu_s=60, session_cpu_s=120, slots=4))
    outcomes = {}

    def call(session: str) -> None:
        try:
            outcomes[session] = ledger.run(session, spin, 3)
        except OverBudget as e:
            outcomes[session] = e
    threads = [threading.Thread(target=call, args=(s,)) for s in ("replaced", "other")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while len(ledger.running.get("replaced", ())) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ledger.stop("replaced") == 1
    for t in threads:
        t.join(120)
    assert isinstance(outcomes["replaced"], OverBudget) and outcomes["replaced"].limit == "stopped"
    assert outcomes["other"] >= 3
    assert ledger.left_s("replaced") > 110


RELOAD_SCRIPT = """
import sys
from ui import planning, state
assert planning.ledger().run("s", state.presets)
# what Streamlit does when a source file of the app changes (LocalSourcesWatcher): every watched module leaves
# sys.modules and the next run imports it again, while st.cache_resource keeps what it holds
for name in [m for m in sys.modules if m == "ui" or m.startswith("ui.")]:
    del sys.modules[name]
from ui import planning, state
assert planning.ledger().run("s", state.presets)
print("answered after the reload")
"""


def test_a_worker_still_starts_after_the_server_reloads_the_apps_code():
    """Browser walk: after an edit of any app file (or a deploy that updates the files) the server's next
    planner call failed with "PicklingError: Can't pickle <function _work>: it's not the same object as
    ui.budget._work" on every page: the cached Ledger was the old module's."""
    import subprocess
    import sys
    from tests.app_helpers import ROOT
    env = {k: v for k, v in os.environ.items() if k != budget.INLINE_ENV}
    done = subprocess.run([sys.executable, "-c", RELOAD_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0 and "answered after the reload" in done.stdout, done.stderr[-3000:]


def test_a_plan_on_view_refused_by_the_budget_says_the_budget_not_a_misfit(monkeypatch):
    """Browser walk: the plan on view's evaluation, refused by the session's budget, read "Cannot use this
    input. The plan on view does not fit this cluster: this session has used its ... CPU seconds"."""
    from tests.app_helpers import example_plan
    from ui.state import AppState, encode, presets
    monkeypatch.delenv(budget.INLINE_ENV, raising=False)
    monkeypatch.setenv("HETPLAN_APP_SESSION_CPU_S", "0.5")           # every computation of the session refused
    state = AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048,
                     plan=example_plan())
    at = ok(new_app(encode(state)).run())
    at.switch_page("ui/pages/summary.py")
    said = texts(ok(at.run()))
    assert "Over this session's budget" in said and "CPU seconds" in said, said[-1500:]
    assert "does not fit" not in said and "Cannot use this input" not in said, said[-1500:]


def test_a_worker_runs_the_apps_imports_not_the_app(monkeypatch):
    """Under `streamlit run` the server's __main__ is app.py, and multiprocessing runs it again in each worker
    as "__mp_main__" before the work: that drew the whole app in every planner call (0.4-1.2 s each,
    benchmarks/app_benchmark.py). As "__mp_main__" it only imports; as "__main__" (Streamlit) it draws."""
    import runpy
    import streamlit as st
    from tests.app_helpers import ROOT
    drawn = []

    class Drawn(Exception):
        pass

    def page_config(**kw):          # the app's first call: stop there
        drawn.append(kw)
        raise Drawn
    monkeypatch.setattr(st, "set_page_config", page_config)
    runpy.run_path(str(ROOT / "app.py"), run_name="__mp_main__")
    assert not drawn
    with pytest.raises(Drawn):
        runpy.run_path(str(ROOT / "app.py"), run_name="__main__")
    assert drawn


def test_the_forkserver_starts_before_the_first_computation(monkeypatch):
    """ui.budget.warm_up (the app's first page): the forkserver with the planner preloaded is started then,
    so that the first Plan press forks at once; none where the app computes inline (tests)."""
    from multiprocessing import forkserver
    started = []
    monkeypatch.setattr(forkserver, "ensure_running", lambda: started.append(1))
    monkeypatch.setenv(budget.INLINE_ENV, "1")
    budget.warm_up()
    assert not started
    monkeypatch.delenv(budget.INLINE_ENV)
    budget.warm_up()
    assert started == [1]
