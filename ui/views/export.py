"""Export: the plan, the cluster, a report, launch files for training engines, and the link."""
from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlencode

import streamlit as st

from catalog import cluster_to_yaml, plan_to_json
from planner.report import estimate_to_dict
from ui import frames, report, session
from ui import state as url_state
from ui.markup import md
from ui.planning import catalog, exporter
from ui.results import named_plans
from ui.views.common import current_plan

ENGINES = ("megatron", "torchtitan", "deepspeed", "torchrun")
WARNINGS_FILE = "WARNINGS.txt"          # an exporter's list of what its engine cannot express


def share_link() -> str | None:
    """The Plan page's address with the state in it, or None where the app's address is unknown."""
    base = (getattr(st.context, "url", None) or "").split("?")[0]
    if not base.startswith("http"):
        return None
    if base.rstrip("/").endswith("/export"):          # whoever opens it wants the plan, not this page
        base = base.rstrip("/")[: -len("export")] + "plan"
    try:
        params = url_state.encode(session.get())
    except ValueError:
        params = url_state.encode(replace(session.get(), plan=None))
    return f"{base}?{urlencode(params)}"


def _compared():
    outcome = session.search_outcome()
    if outcome is None or outcome.error:
        return None
    rows = [frames.metrics_row(n.name, n.role, n.scored.plan, n.scored.estimate) for n in named_plans(outcome.result)]
    return frames.metrics_table(rows)


def _markdown_lines(text: str) -> str:
    """A plain-text list (lines starting "- " are items) as Markdown that shows the text as it is."""
    return "\n".join(f"- {md(line[2:])}" if line.startswith("- ") else md(line) for line in text.splitlines())


def _engine_files(cur) -> None:
    export_plan = exporter()
    if export_plan is None:
        st.caption("Launch files for Megatron-LM, torchtitan, DeepSpeed and torchrun appear here once "
                   "the exporters (planner.export) are installed.")
        return
    st.subheader("Launch files")
    cols = st.columns(len(ENGINES))
    caveats = {}
    for col, engine in zip(cols, ENGINES):
        try:
            files = export_plan(cur.plan, cur.cluster, engine)
        except Exception as e:  # an exporter's refusal is shown, not raised
            col.caption(f"{engine}: {md(e)}")
            continue
        for name, text in files.items():
            col.download_button(f"{engine}: {name}", text, file_name=name, key=f"export.{engine}.{name}",
                                on_click="ignore")
        if files.get(WARNINGS_FILE, "").strip():
            caveats[engine] = files[WARNINGS_FILE].strip()
    for engine, text in caveats.items():      # what an engine cannot express, before anyone launches it
        n = sum(1 for line in text.splitlines() if line.startswith("- "))
        with st.expander(f"{engine}: the launch files approximate this plan"
                         + (f" ({n} difference{'s' if n != 1 else ''})" if n else ""), icon=":material/warning:"):
            st.markdown(_markdown_lines(text))


def render() -> None:
    st.title("Export")
    cur = current_plan()
    if cur is None:
        return
    metrics = estimate_to_dict(cur.estimate)
    plan_json = plan_to_json(cur.plan, catalog(), metrics=metrics)
    c = st.columns(4)
    c[0].download_button("Plan (JSON)", plan_json, file_name=f"{cur.cluster.name}-plan.json",
                         mime="application/json", icon=":material/download:", width="stretch", key="download_plan", on_click="ignore")
    c[1].download_button("Cluster (YAML)", cluster_to_yaml(cur.cluster), file_name=f"{cur.cluster.name}.yaml",
                         mime="application/x-yaml", icon=":material/download:", width="stretch", key="download_cluster", on_click="ignore")
    compared = _compared()
    # the reports draw every figure: built when their button is pressed, not on every visit
    c[2].download_button("Report (HTML)", lambda: report.to_html(cur.cluster, cur.plan, cur.estimate, compared),
                         file_name=f"{cur.cluster.name}-report.html", mime="text/html", icon=":material/download:",
                         width="stretch", key="download_html", on_click="ignore")
    c[3].download_button("Report (Markdown)", lambda: report.to_markdown(cur.cluster, cur.plan, cur.estimate, compared),
                         file_name=f"{cur.cluster.name}-report.md", mime="text/markdown", icon=":material/download:",
                         width="stretch", key="download_md", on_click="ignore")
    st.caption("The plan file carries the planner's metrics for people; `hetplan evaluate --cluster "
               "CLUSTER.yaml --plan PLAN.json` scores it again from the command line.")
    _engine_files(cur)
    st.subheader("Share")
    link = share_link()
    if link:
        st.write("This link holds the whole input: cluster, model, job and the plan on view. Whoever opens "
                 "it sees this plan (the copy button is at the right of the box).")
        st.code(link, language=None, wrap_lines=True)
    else:
        st.write("The address bar holds the whole input: cluster, model, job and the plan on view. "
                 "Copy it to share exactly this view.")
    if st.session_state.get("url_too_long"):
        st.caption("The plan is too large for a link; the link keeps the cluster, model and job. "
                   "Send the plan JSON with it.")
    with st.expander("Plan JSON"):
        st.code(plan_json, language="json")
