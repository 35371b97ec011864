"""Speed of the Streamlit app (a benchmark, not a test): python benchmarks/app_benchmark.py

  first render   a fresh Python process imports the app and renders the Compose page (AppTest),
                 and the HTTP server answers its first page (streamlit run, time to /_stcore/health
                 and to the first full page in headless Chromium when present)
  plan 64 GPUs   the default state (examples/h100-a100-v100-64.yaml, Llama 2 13B, batch 512 x 4096):
                 press Plan after the first load: cold (search runs) and again (answered from the cache)
"""
from __future__ import annotations

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


def cold_render_s() -> float:
    out = subprocess.run([sys.executable, "-c", COLD_RENDER], cwd=ROOT, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def browser_first_page_s() -> float | None:
    """Seconds from `streamlit run` to the Compose page drawn in Chromium (None without a browser)."""
    if not Path("/usr/bin/chromium").exists():
        return None
    from playwright.sync_api import sync_playwright
    from tests.test_browser import CHROMIUM_ARGS, _free_port
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.address", "127.0.0.1"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page()
            for _ in range(200):
                try:
                    page.goto(f"http://127.0.0.1:{port}/", timeout=5000)
                    break
                except Exception:
                    time.sleep(0.1)
            t_page = time.perf_counter()
            page.get_by_text("GPUs in", exact=False).first.wait_for(timeout=60_000)
            drawn = time.perf_counter()
            browser.close()
        return drawn - t0, drawn - t_page
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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


def main() -> None:
    rows = [("first render, fresh process (AppTest, Compose page)", cold_render_s())]
    browser = browser_first_page_s()
    if browser is not None:
        rows.append(("first render, `streamlit run` start to page drawn in Chromium", browser[0]))
        rows.append(("first render, browser request to page drawn (server up)", browser[1]))
    cold, search_s, warm = plan_64_s()
    rows += [("plan 64-GPU example, first press (end to end)", cold),
             ("  of which planner.search", search_s),
             ("plan 64-GPU example, identical second press (cache)", warm)]
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':{width}}  seconds")
    for name, s in rows:
        print(f"{name:{width}}  {s:7.2f}")


if __name__ == "__main__":
    main()
