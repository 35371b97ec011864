"""Export: the plan, the cluster, a report, launch files for training engines, and the link."""
from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlencode

import streamlit as st

from catalog import cluster_to_yaml, plan_to_json
from planner.report import estimate_to_dict
from ui import frames, report, session
from ui import state as url_state
from ui.markup import file_stem, md
from ui.planning import catalog, exporter, simulate_plan
from ui.results import named_plans
from ui.views.common import current_plan

ENGINES = ("megatron", "torchtitan", "deepspeed", "torchrun")
WARNINGS_FILE = "WARNINGS.txt"          # an exporter's list of what its engine cannot express


def share_link() -> str | None:
    """The Plan page's address with the state in it (or as much as fits), or None where the app's
    address is unknown or nothing fits."""
    base = (getattr(st.context, "url", None) or "").split("?")[0]
    if not base.startswith("http"):
        return None
    if base.rstrip("/").endswith("/export"):          # whoever opens it wants the plan, not this page
        base = base.rstrip("/")[: -len("export")] + "plan"
    params, left_out = url_state.encode_for_link(session.get())
    return None if left_out == "everything" else f"{base}?{urlencode(params)}"


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


def _with_timeline(cur, cluster: dict, plan: dict):
    """The estimate with its simulated iteration, for the report's timeline (unchanged when there is
    none). Runs when the download is asked for, outside the page's run: the files come as arguments."""
    outcome = simulate_plan(cluster, plan)
    return cur.estimate if outcome.error else replace(cur.estimate, timeline=outcome.result.events)


def render() -> None:
    st.title("Export")
    cur = current_plan()
    if cur is None:
        return
    metrics = estimate_to_dict(cur.estimate)
    plan_json = plan_to_json(cur.plan, catalog(), metrics=metrics)
    c = st.columns(4)
    stem = file_stem(cur.cluster.name)
    buttons = dict(icon=":material/download:", width="stretch", on_click="ignore")
    c[0].download_button("Plan (JSON)", plan_json, file_name=f"{stem}-plan.json", mime="application/json",
                         key="download_plan", **buttons)
    c[1].download_button("Cluster (YAML)", cluster_to_yaml(cur.cluster), file_name=f"{stem}.yaml",
                         mime="application/x-yaml", key="download_cluster", **buttons)
    compared = _compared()
    # the reports draw every figure: built when their button is pressed, not on every visit
    files = session.get().cluster, session.get().plan
    c[2].download_button("Report (HTML)", lambda: report.to_html(cur.cluster, cur.plan, _with_timeline(cur, *files), compared),
                         file_name=f"{stem}-report.html", mime="text/html", key="download_html", **buttons)
    c[3].download_button("Report (Markdown)", lambda: report.to_markdown(cur.cluster, cur.plan, cur.estimate, compared),
                         file_name=f"{stem}-report.md", mime="text/markdown", key="download_md", **buttons)
    st.caption("The plan file carries the planner's metrics for people; `hetplan evaluate --cluster "
               "CLUSTER.yaml --plan PLAN.json` scores it again from the command line.")
    _engine_files(cur)
    st.subheader("Share")
    link = share_link()
    left_out = url_state.encode_for_link(session.get())[1]
    if left_out == "everything":
        st.write(url_state.LEFT_OUT_OF_THE_LINK[left_out])
    elif link:
        st.write("This link holds the whole input: cluster, model, job and the plan on view. Whoever opens "
                 "it sees this plan (the copy button is at the right of the box).")
        st.code(link, language=None, wrap_lines=True)
    else:
        st.write("The address bar holds the whole input: cluster, model, job and the plan on view. "
                 "Copy it to share exactly this view.")
    if left_out == "plan":
        st.caption(url_state.LEFT_OUT_OF_THE_LINK[left_out])
    with st.expander("Plan JSON"):
        st.code(plan_json, language="json")
