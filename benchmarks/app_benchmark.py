"""Speed of the Streamlit app (a benchmark, not a test): python benchmarks/app_benchmark.py

  first render   a fresh Python process imports the app and renders the Compose page (AppTest),
                 and the HTTP server answers its first page (streamlit run, time to /_stcore/health
                 and to the first full page in headless Chromium when present)
  plan 64 GPUs   the default state (examples/h100-a100-v100-64.yaml, Llama 2 13B, batch 512 x 4096):
                 press Plan after the first load: cold (search runs) and again (answered from the cache);
                 and in Chromium (a fresh server, the forkserver started by a first press of another job),
                 from the click on Plan to the plan's figures ("tokens / s") drawn, to the gains over the
                 baselines drawn, and to the final answer ("All plans found" without "checked" notices),
                 the clock started once the sidebar's Plan button shows; and on a fresh server with Plan
                 pressed as soon as it shows, to the plan's figures
  timeline       1,024 micro-batches per worker: GPT-3 175B on examples/cloud-4types-1024.yaml, 16 stages
                 x 8 replicas of 2 H100s (tp 2), global batch 8,192, micro-batch 1 (8,192 micro-batches in
                 the iteration). The simulation (planner.cost.evaluate with the timeline), the phases and
                 the figure (Python), the figure drawn by Plotly in Chromium (the phases, and every pass of
                 the same 16 workers as the chart drew before), and the Timeline page in Chromium (click to
                 chart drawn, the simulation cached)
  plan CPU       the workers' CPU seconds (ui.budget, their start included) for the default job through
                 ui.planning.run_search, until the first plan and the whole answer; a worker's start
                 (with --only plan, before the browser's figures)

  python benchmarks/app_benchmark.py [--only timeline|plan] [--app-root DIR]
  (--app-root: the app of another checkout, say the code before a change, for the browser's plan figures)
"""
from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COLD_RENDER = """
import time; t = time.perf_counter()
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("app.py", default_timeout=120).run()
assert not at.exception and at.title[0].value == "Compose"
print(time.perf_counter() - t)
"""


WORKER_START = """
import os, statistics, sys, time, types
from ui.budget import run
def main():
    run(time.time, (), 10, 2 ** 31, 100)                 # the forkserver started
    app = types.ModuleType("__main__")
    app.__file__ = os.path.abspath("app.py")             # __main__ as Streamlit's script runner leaves it
    sys.modules["__main__"], seconds = app, []
    for _ in range(5):
        t = time.time()
        seconds.append(run(time.time, (), 10, 2 ** 31, 100)[0] - t)
    print(statistics.median(seconds))
if __name__ == "__main__":
    main()
"""


WORKERS_CPU = """
import os, sys, time, types
from ui import budget, planning
from ui.state import AppState
def main():
    used, real = [], budget.run
    def counted(*args, **kw):
        value, cpu_s = real(*args, **kw)
        used.append(cpu_s)
        return value, cpu_s
    real(time.time, (), 10, 2 ** 31, 100)                # the forkserver started
    budget.run = counted
    app = types.ModuleType("__main__")
    app.__file__ = os.path.abspath("app.py")             # __main__ as Streamlit's script runner leaves it
    sys.modules["__main__"], first = app, []
    final = planning.run_search(AppState(), show=lambda outcome: first.append(sum(used)))
    assert not final.error and not final.stage, final.error
    print(first[0], sum(used), len(used))
if __name__ == "__main__":
    main()
"""


def workers_cpu_s(root: Path = ROOT) -> tuple[float, float, int]:
    """CPU seconds of the planner's worker processes (ui.budget, startup included) for the default job through
    `ui.planning.run_search` as the Plan page calls it: until its first plan, until the whole answer; and the
    number of worker calls. Less sensitive to the machine's load than the browser's wall seconds."""
    out = subprocess.run([sys.executable, "-c", WORKERS_CPU], cwd=root, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    first, whole, calls = out.stdout.strip().splitlines()[-1].split()
    return float(first), float(whole), int(calls)


def worker_start_s(root: Path = ROOT) -> float:
    """Median seconds from a worker's start (ui.budget.run, from a server whose __main__ is app.py, as under
    `streamlit run`) to its work's first line: the fork, and whatever the child runs of the app first."""
    out = subprocess.run([sys.executable, "-c", WORKER_START], cwd=root, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(root)})
    return float(out.stdout.strip().splitlines()[-1])


def cold_render_s() -> float:
    out = subprocess.run([sys.executable, "-c", COLD_RENDER], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def browser_first_page_s() -> float | None:
    """Seconds from `streamlit run` to the Compose page drawn in Chromium (None without a browser)."""
    if not Path("/usr/bin/chromium").exists():
        return None
    t0 = time.perf_counter()
    with _app_page() as (page, url):
        _open(page, url)
        t_page = time.perf_counter()
        page.get_by_text("GPUs in", exact=False).first.wait_for(timeout=60_000)
        drawn = time.perf_counter()
    return drawn - t0, drawn - t_page


@contextlib.contextmanager
def _app_page(root: Path = ROOT, **page_options):
    """A Chromium page and the URL of `streamlit run app.py` (of `root`) on a free local port; both stop on exit."""
    from playwright.sync_api import sync_playwright
    from tests.test_browser import CHROMIUM_ARGS, _free_port
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1"], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            yield browser.new_page(**page_options), f"http://127.0.0.1:{port}/"
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _open(page, url: str) -> None:
    """Load `url`, retrying while the server starts."""
    for _ in range(200):
        try:
            page.goto(url, timeout=5000)
            return
        except Exception:
            time.sleep(0.1)


def plan_64_s() -> tuple[float, float, float]:
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600).run()
    t0 = time.perf_counter()
    at.sidebar.button(key="sidebar_plan").click().run()
    cold = time.perf_counter() - t0
    assert not at.exception and at.session_state["app_state"].plan is not None, [e.value for e in at.error]
    search_s = at.session_state["search_outcome"][1].result.search_time_s
    t0 = time.perf_counter()
    at.sidebar.button(key="sidebar_plan").click().run()
    warm = time.perf_counter() - t0
    return cold, search_s, warm


def plan_64_browser_s(root: Path = ROOT, warm: bool = True) -> tuple[float, float, float]:
    """Seconds from the click on Plan (the default job, searched for the first time on this server) to the
    plan's figures drawn, to its gains over the baselines drawn, and to the final answer drawn, in Chromium.
    `warm`: a small job is planned first, so that the worker processes' forkserver has started (ui.budget);
    else Plan is pressed on a fresh server as soon as the button shows."""
    from ui.state import AppState, encode, presets
    small = AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048)
    with _app_page(root, viewport={"width": 1440, "height": 1000}) as (page, url):
        sidebar = page.get_by_test_id("stSidebar")
        for state in ((small,) if warm else ()) + (AppState(),):
            _open(page, f"{url}?v=1&s={encode(state)['s']}")
            page.get_by_role("heading", name="Compose").wait_for(timeout=120_000)
            plan = sidebar.get_by_role("button", name="Plan", exact=True)
            plan.wait_for(timeout=120_000)      # the clock starts when there is a button to click
            t0 = time.perf_counter()
            plan.click()
            page.get_by_role("heading", name="Plan on view").first.wait_for(timeout=300_000)
            page.get_by_text("tokens / s", exact=True).first.wait_for(timeout=300_000)
            figures = time.perf_counter() - t0
            page.get_by_text("vs Megatron-style", exact=False).first.wait_for(timeout=300_000)
            gains = time.perf_counter() - t0
            page.get_by_role("heading", name="All plans found").wait_for(timeout=300_000)
            page.wait_for_function("!document.body.innerText.includes('are checked: one of them may') && "
                                   "!document.body.innerText.includes('Comparing with the')", timeout=300_000)
            final = time.perf_counter() - t0
    return figures, gains, final


def timeline_state():
    """The timeline benchmark's state: 1,024 micro-batches through each of 128 workers."""
    from ui.state import AppState, presets
    layers = 96 // 16
    plan = {"format": "hetplan.plan/1", "model": "gpt3-175b", "global_batch": 8192, "seq_len": 2048, "micro_batch": 1,
            "precision": "bf16", "zero_stage": 1, "recompute": "full", "sequence_parallel": True, "schedule": "1f1b",
            "interleave": 1, "stages": [{"layers": [i * layers, (i + 1) * layers],
                                         "replicas": [{"pool": "h100", "tp": 2}] * 8} for i in range(16)]}
    return AppState(cluster=presets()["cloud-4types-1024"], model="gpt3-175b", global_batch=8192, seq_len=2048,
                    precision="bf16", plan=plan)


DRAW_JS = """async (spec) => { const f = JSON.parse(spec); const t = performance.now();
    await Plotly.newPlot('chart', f.data, f.layout);
    await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
    return (performance.now() - t) / 1000; }"""


def draw_in_chromium_s(figures: list) -> list[float] | None:
    """Seconds Plotly takes to draw each figure in headless Chromium (None without a browser)."""
    if not Path("/usr/bin/chromium").exists():
        return None
    from playwright.sync_api import sync_playwright
    from plotly.offline import get_plotlyjs
    from tests.test_browser import CHROMIUM_ARGS
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.set_content("<html><body><div id='chart' style='width:1200px'></div></body></html>")
        page.add_script_tag(content=get_plotlyjs())
        out = [page.evaluate(DRAW_JS, fig.to_json()) for fig in figures]
        browser.close()
    return out


def timeline_rows() -> list[tuple[str, float]]:
    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from ui import charts, phases
    state, cat = timeline_state(), load_catalog()
    cluster, plan = cluster_from_dict(state.cluster, cat), plan_from_dict(state.plan, cat)
    t0 = time.perf_counter()
    est = evaluate(cluster, plan, timeline=True)
    simulated = time.perf_counter() - t0
    t0 = time.perf_counter()
    table = phases.phases(est.timeline, gpipe=False)
    drawn = phases.workers_to_draw(est.timeline)
    figure = charts.timeline_phases(table.merge(drawn, on=["stage", "replica"]), est.pipeline_time_s)
    figure.to_json()
    built = time.perf_counter() - t0
    rows = [("timeline, 1,024 micro-batches x 128 workers: simulation (planner, once per plan)", simulated),
            ("  phases and figure (Python, 16 workers drawn)", built)]
    every_pass = charts.timeline(est.timeline.merge(drawn, on=["stage", "replica"]))
    draws = draw_in_chromium_s([figure, every_pass])
    if draws is not None:
        rows += [("  phases drawn by Plotly in Chromium", draws[0]),
                 (f"  every pass drawn, as before ({sum(len(t.x) for t in every_pass.data):,} bars)", draws[1])]
        page = timeline_page_s(state)
        rows.append(("  Timeline page in Chromium, click to chart drawn (simulation cached)", page))
    return rows


def timeline_page_s(state) -> float:
    """Seconds from clicking Timeline in the sidebar to its chart drawn, the second visit (cached)."""
    from tests.test_browser import DRAWN_CHARTS_JS
    from ui.state import encode
    with _app_page(viewport={"width": 1440, "height": 1000}) as (page, url):
        _open(page, f"{url}?v=1&s={encode(state)['s']}")
        nav = page.get_by_test_id("stSidebarNav")
        seconds = []
        for _ in range(2):
            page.get_by_role("heading", name="Compose").wait_for(timeout=120_000)
            t0 = time.perf_counter()
            nav.get_by_text("Timeline", exact=True).click()
            page.wait_for_function(f"{DRAWN_CHARTS_JS} >= 1", timeout=300_000)
            seconds.append(time.perf_counter() - t0)
            nav.get_by_text("Compose", exact=True).click()
    return seconds[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("timeline", "plan"), help="only these measures")
    parser.add_argument("--app-root", type=Path, default=ROOT, help="the checkout whose app the browser plans on")
    args = parser.parse_args()
    if args.only == "timeline":
        return _print(timeline_rows())
    if args.only == "plan":
        return _print(plan_browser_rows(args.app_root))
    rows = [("first render, fresh process (AppTest, Compose page)", cold_render_s())]
    browser = browser_first_page_s()
    if browser is not None:
        rows.append(("first render, `streamlit run` start to page drawn in Chromium", browser[0]))
        rows.append(("first render, browser request to page drawn (server up)", browser[1]))
    cold, search_s, warm = plan_64_s()
    rows += [("plan 64-GPU example, first press (end to end)", cold),
             ("  of which planner.search", search_s),
             ("plan 64-GPU example, identical second press (cache)", warm)]
    _print(rows + plan_browser_rows(args.app_root) + timeline_rows())


def plan_browser_rows(root: Path) -> list[tuple[str, float]]:
    if not Path("/usr/bin/chromium").exists():
        return []
    figures, gains, final = plan_64_browser_s(root)
    fresh = plan_64_browser_s(root, warm=False)[0]
    first_cpu, whole_cpu, calls = workers_cpu_s(root)
    return [("a planner call's worker, start to its work's first line (median of 5)", worker_start_s(root)),
            ("workers' CPU seconds until the first plan (default job, ui.planning.run_search)", first_cpu),
            (f"  until the whole answer ({calls} worker calls)", whole_cpu),
            ("plan 64-GPU example in Chromium: click to the plan's figures drawn", figures),
            ("  click to the gains over the baselines drawn", gains),
            ("  click to the final answer drawn (every engine checked)", final),
            ("  fresh server, Plan pressed as soon as it shows: click to the plan's figures drawn", fresh)]


def _print(rows: list[tuple[str, float]]) -> None:
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':{width}}  seconds")
    for name, s in rows:
        print(f"{name:{width}}  {s:7.2f}")


if __name__ == "__main__":
    main()
