"""hetplan's web app: `streamlit run app.py`.

A thin frame: page setup, navigation, the shared sidebar and the URL. Each page is a
`render()` in `ui/views` (run through a two-line file in `ui/pages`); planner calls are cached
in `ui.planning`.
"""
import streamlit as st

from ui import planning, session, sidebar
from ui.markup import md

# An emoji, not ":material/hub:": Streamlit fetches a Material page icon from fonts.gstatic.com (an emoji becomes
# an inline SVG), and the app must not depend on a host beyond its own server (offline, behind a firewall).
PAGE_ICON = "🧮"


def page(view: str, title: str, icon: str, url_path: str, **kw) -> st.Page:
    return st.Page(f"ui/pages/{view}.py", title=title, icon=f":material/{icon}:", url_path=url_path, **kw)


def main() -> None:
    st.set_page_config(page_title="hetplan: plan training on mixed GPUs", page_icon=PAGE_ICON, layout="wide",
                       initial_sidebar_state="expanded")
    planning.warm_up_workers()
    session.get()
    for warning in session.url_warnings():
        st.warning(md(warning), icon=":material/link_off:")

    plan_page = page("summary", "Plan", "rocket_launch", "plan")
    pages = st.navigation({
        "Set up": [page("compose", "Compose", "tune", "compose", default=True)],
        "Results": [plan_page,
                    page("stages", "Stages", "grid_view", "stages"),
                    page("timeline", "Timeline", "view_timeline", "timeline"),
                    page("memory", "Memory", "memory", "memory"),
                    page("cost", "Cost", "payments", "cost"),
                    page("compare", "Compare", "compare_arrows", "compare"),
                    page("engines", "Engines", "developer_board", "engines")],
        "Tools": [page("whatif", "What-if", "science", "what-if"),
                  page("replan", "Re-plan", "swap_horiz", "re-plan"),
                  page("fleet", "Fleet", "groups", "fleet"),
                  page("rl", "RL", "model_training", "rl"),
                  page("export", "Export", "download", "export")],
    }, expanded=True)           # every page listed: past 10, Streamlit hides the rest behind "View more" by default
    if st.session_state.get(sidebar.PLAN_REQUEST) and pages.url_path != plan_page.url_path:
        # with the state in the address bar: switch_page clears the query parameters otherwise, and a reload
        # during the search would open the defaults
        st.switch_page(plan_page, query_params=session.link_params())
    summary = st.sidebar.container()
    pages.run()
    session.sync_url()           # when a Plan press, preset, upload or adopted plan asked for it (not per edit)
    sidebar.render(summary)


# Streamlit runs this file as "__main__"; a worker process of ui.budget (multiprocessing) runs it again as
# "__mp_main__" before its work, since Streamlit makes it the server's __main__: the guard keeps that to the
# imports (it drew the whole app in each worker, 0.4-1.2 s per planner call: benchmarks/app_benchmark.py).
if __name__ == "__main__":
    main()
