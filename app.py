"""hetplan's web app: `streamlit run app.py`.

A thin frame: page setup, navigation, the shared sidebar and the URL. Each page is a
`render()` in `ui/views` (run through a two-line file in `ui/pages`); planner calls are cached
in `ui.planning`.
"""
import streamlit as st

from ui import session, sidebar
from ui.markup import md

st.set_page_config(page_title="hetplan: plan training on mixed GPUs", page_icon=":material/hub:", layout="wide",
                   initial_sidebar_state="expanded")


def page(view: str, title: str, icon: str, url_path: str, **kw) -> st.Page:
    return st.Page(f"ui/pages/{view}.py", title=title, icon=f":material/{icon}:", url_path=url_path, **kw)


state = session.get()
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
})
if st.session_state.get(sidebar.PLAN_REQUEST) and pages.url_path != plan_page.url_path:
    st.switch_page(plan_page)
summary = st.sidebar.container()
pages.run()
session.sync_url()           # after the page, so that the link and sidebar show what its widgets just changed
sidebar.render(summary)
