"""hetplan's web app: `streamlit run app.py`.

A thin frame: page setup, navigation, the shared sidebar and the URL. Each page is a
`render()` in `ui/views`; planner calls are cached in `ui.planning`.
"""
import streamlit as st

from ui import session, sidebar
from ui.views import compare, compose, cost, export, memory, stages, summary, timeline, whatif

st.set_page_config(page_title="hetplan: plan training on mixed GPUs", page_icon=":material/hub:", layout="wide",
                   initial_sidebar_state="expanded")

state = session.get()
for warning in session.url_warnings():
    st.warning(warning, icon=":material/link_off:")

plan_page = st.Page(summary.render, title="Plan", icon=":material/rocket_launch:", url_path="plan")
pages = st.navigation({
    "Set up": [st.Page(compose.render, title="Compose", icon=":material/tune:", url_path="compose", default=True)],
    "Results": [plan_page,
                st.Page(stages.render, title="Stages", icon=":material/grid_view:", url_path="stages"),
                st.Page(timeline.render, title="Timeline", icon=":material/view_timeline:", url_path="timeline"),
                st.Page(memory.render, title="Memory", icon=":material/memory:", url_path="memory"),
                st.Page(cost.render, title="Cost", icon=":material/payments:", url_path="cost"),
                st.Page(compare.render, title="Compare", icon=":material/compare_arrows:", url_path="compare")],
    "Tools": [st.Page(whatif.render, title="What-if", icon=":material/science:", url_path="what-if"),
              st.Page(export.render, title="Export", icon=":material/download:", url_path="export")],
})
sidebar.render(plan_page)
pages.run()
session.sync_url()
