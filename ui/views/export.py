"""Export: the plan, the cluster, a report, launch files for training engines, and the link."""
from __future__ import annotations

import json
from dataclasses import replace
from urllib.parse import urlencode

import streamlit as st

from catalog import cluster_to_yaml, plan_to_json
from planner.export.common import SEARCH_TIME_LIMIT_S, engine_for
from planner.report import estimate_to_dict
from ui import frames, report, session
from ui import state as url_state
from ui.markup import file_stem, md
from ui.numbers import count, per_million_tokens, signed, whole
from ui.engines import pinned, title
from ui.planning import catalog, export_for, export_targets, exporter, simulate_plan
from ui.results import named_plans, plan_dict
from ui.views.common import current_plan

WARNINGS_FILE = "WARNINGS.txt"          # an exporter's list of why the plan changed, and what the files leave out
ASKED_PREFIX = "export_search."         # target -> the plan on view its search was asked for
SEARCH_CPU_S = SEARCH_TIME_LIMIT_S


def share_link() -> str | None:
    """The Plan page's address with the state in it (or as much as fits), or None where the app's
    address is unknown or nothing fits."""
    base = (getattr(st.context, "url", None) or "").split("?")[0]
    if not base.startswith("http"):
        return None
    if base.rstrip("/").endswith("/export"):          # whoever opens it wants the plan, not this page
        base = base.rstrip("/")[: -len("export")] + "plan"
    params = session.link_params()
    return f"{base}?{urlencode(params)}" if params else None


def _compared():
    outcome = session.search_outcome()
    if outcome is None or outcome.error:
        return None
    rows = [frames.metrics_row(n.name, n.role, n.scored.plan, n.scored.estimate) for n in named_plans(outcome.result)]
    return frames.metrics_table(rows)


def _engine_files(cur) -> None:
    targets = export_targets()
    if exporter() is None or not targets:
        st.caption("Launch files for Megatron-LM, torchtitan, DeepSpeed, FlagScale and torchrun appear here once "
                   "the exporters (planner.export) are installed.")
        return
    st.subheader("Launch files")
    st.caption("Each target writes one engine's files. Where that engine runs the plan on view, its files describe "
               "exactly this plan. Where it cannot, the page says why and can search for the plan that engine runs "
               f"best on this cluster (up to {SEARCH_CPU_S:g} CPU seconds): the files then describe that plan, with "
               "its figures against the plan on view.")
    # the plan's own engine first: the tab that opens is the one whose files describe exactly this plan
    targets = sorted(targets, key=lambda t: engine_for(t).name != cur.plan.engine)
    tabs = st.tabs([f"{t} · {title(engine_for(t).name)}" for t in targets])
    for tab, target in zip(tabs, targets):
        with tab:
            _target(cur, target)


def _target(cur, target: str) -> None:
    engine = engine_for(target)
    st.markdown(f"**{md(target)}** writes files for **{pinned(engine.name)}**.")
    reasons = engine.violations(cur.plan)
    asked = ASKED_PREFIX + target
    if reasons:
        lines = "\n".join(f"- {md(r)}" for r in reasons)
        st.warning(f"**{md(engine.title)} cannot run the plan on view:**\n\n{lines}", icon=":material/block:")
        if st.session_state.get(asked) != _plan_key():
            if st.button(f"Find the plan {engine.title} runs best here", key=f"export.find.{target}",
                         icon=":material/search:", help=f"a search of the plans {engine.title} runs on this "
                                                        f"cluster, up to {SEARCH_CPU_S:g} CPU seconds"):
                st.session_state[asked] = _plan_key()
            else:
                return
    with st.spinner(f"Searching the plans {engine.title} runs (up to {SEARCH_CPU_S:g} CPU seconds)…"):
        outcome = export_for(session.get().cluster, session.get().plan, target, SEARCH_CPU_S)
    if outcome.error:
        st.error(f"**No {md(target)} files.** {md(outcome.error)}", icon=":material/block:")
        return
    result = outcome.result
    if result.closest_plan is not None:
        _offered(cur, engine, result)
    else:
        st.success("The files describe exactly the plan on view.", icon=":material/check_circle:")
    _downloads(target, result)


def _offered(cur, engine, result) -> None:
    """The plan the engine runs best here, honestly against the plan on view."""
    alt, est, view = result.closest_plan, result.closest_estimate, cur.estimate
    speed = est.tokens_per_s / view.tokens_per_s - 1
    price = est.cost_per_million_tokens_usd / view.cost_per_million_tokens_usd - 1
    st.info(f"**The files describe the plan {md(engine.title)} runs best here**, found by its search and scored by "
            f"the cost model as {md(engine.title)} runs it, not the plan on view: {whole(est.tokens_per_s)} tokens/s "
            f"({signed(speed)} against the plan on view), {per_million_tokens(est.cost_per_million_tokens_usd)} per "
            f"million tokens ({signed(price)}), on {count(alt.num_gpus, 'GPU')} (the plan on view: "
            f"{whole(view.num_gpus)}); "
            f"{'it fits in memory' if est.fits else 'it does not fit in memory'}.\n\n"
            f"{md(frames.plan_shape(alt))}", icon=":material/swap_horiz:")
    st.button(f"Put this {engine.title} plan on view", key=f"export.adopt.{result.engine}", on_click=_adopt,
              args=(plan_dict(alt), engine.name))


def _adopt(plan: dict, engine: str) -> None:
    session.update(plan=plan, engine=engine)
    st.session_state.pop(session.WIDGET_PREFIX + "engine", None)     # Compose's picker follows the state


def _plan_key() -> str:
    return json.dumps(session.get().plan, sort_keys=True)


def _downloads(target: str, result) -> None:
    files = dict(result.files)
    notes = list(result.notes)
    if result.warnings:
        files[WARNINGS_FILE] = "\n".join(f"- {w}" for w in result.warnings) + "\n"
    cols = st.columns(min(4, max(1, len(files))))
    for i, (name, text) in enumerate(files.items()):
        cols[i % len(cols)].download_button(name, text, file_name=name, key=f"export.{target}.{name}",
                                            on_click="ignore", icon=":material/download:", width="stretch")
    if notes:
        with st.expander(f"{target}: what the files leave to you ({len(notes)})", icon=":material/info:"):
            st.markdown("\n".join(f"- {md(n)}" for n in notes))


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
