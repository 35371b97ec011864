"""Re-plan: the cluster changed after planning; the plan on view beside the best plan on the cluster as
composed now, what moves, what the switch costs and whether it pays off (planner.replan)."""
from __future__ import annotations

import json

import streamlit as st

from catalog import plan_from_dict, without_output_keys
from planner.types import Cluster, Estimate, InputError, Plan
from ui import frames, session
from ui.markup import md
from ui.numbers import counts_times, dollars, duration, gib, per_million_tokens, whole
from ui.planning import build_cluster, catalog, replan_on
from ui.results import named_plans, plan_dict
from ui.views.common import caption, outcome_on_button, show_error

OUTCOME_KEY = "replan_outcome"           # (inputs key, Outcome)
ADOPTED_KEY = "replan_adopted"


def planned_on(state) -> dict | None:
    """The cluster (file format) the plan on view was planned on, where the planner made it in this
    session on a cluster other than the one composed now; else None."""
    saved = st.session_state.get(session.RESULT_KEY)
    if not saved or saved[1].error or saved[1].result is None:
        return None
    cluster = json.loads(saved[0]).get("cluster")
    if cluster == state.cluster:
        return None
    on_view = {k: v for k, v in without_output_keys(state.plan).items() if k not in ("name", "notes")}
    return cluster if any(n.plan_dict == on_view for n in named_plans(saved[1].result)) else None


def _inputs(state, old: dict | None) -> tuple[float | None, dict | None]:
    """Tokens still to train (None: not judged) and the cluster to write the checkpoint from (None: the new one)."""
    left, right = st.columns(2)
    billions = left.number_input("tokens still to train (billions; 0: judge the switch on speed alone)",
                                 min_value=0.0, value=(state.tokens_to_train or 0.0) / 1e9, step=10.0,
                                 key="w.replan.tokens_b",
                                 help="the switch pays off when the time it costs is won back over these tokens")
    if old is None:
        right.caption("The plan on view was not planned on another cluster in this session, so its checkpoint is "
                      "costed as written from the cluster as composed now.")
        return (billions * 1e9 or None), None
    use_old = right.checkbox("write the checkpoint from the cluster the plan was planned on", value=True,
                             key="w.replan.old", help=f"{md(old.get('name', 'cluster'))}, as it was when the "
                                                      "planner made the plan on view")
    return (billions * 1e9 or None), (old if use_old else None)


def _figures(plan: Plan, est: Estimate, cluster: Cluster) -> None:
    c = st.columns(3)
    c[0].metric("throughput (tokens/s)", whole(est.tokens_per_s))
    c[1].metric("$ / M tokens", per_million_tokens(est.cost_per_million_tokens_usd))
    c[2].metric("GPUs used", f"{whole(est.num_gpus)} of {whole(cluster.num_gpus)}")
    pools = ", ".join(f"{md(name)}: {whole(n)} of {_pool_gpus(cluster, name)}" for name, n in plan.gpus_by_pool().items())
    st.markdown(f"**GPUs by pool**: {pools}")
    st.markdown(f"**Shape**: {md(frames.plan_shape(plan))}")


def _pool_gpus(cluster: Cluster, name: str) -> str:
    try:
        return whole(cluster.pool(name).num_gpus)
    except InputError:
        return "0 (the pool is gone)"


def _adopt(plan: dict) -> None:
    session.update(plan=plan)
    st.session_state[ADOPTED_KEY] = True


def _switch(r) -> None:
    st.subheader("The switch")
    c = st.columns(3)
    c[0].metric("time", duration(r.switch.seconds))
    c[1].metric("cost", dollars(r.switch.dollars))
    c[2].metric("checkpoint", gib(r.switch.checkpoint_bytes))
    st.markdown("**What moves**\n" + "\n".join(f"- {md(counts_times(m))}" for m in r.switch.moves))
    verdict = f"**Worth switching: {'yes' if r.worth_switching else 'no'}.** {md(r.reason[:1].upper() + r.reason[1:])}"
    (st.success if r.worth_switching else st.info)(verdict, icon=":material/swap_horiz:")
    caption("The switch writes the current plan's model state (weights, master copies, optimizer moments) over its "
            "nodes' networks, reads it back resharded on the new plan's nodes, and restarts the job "
            "(launch, communicators, data loader: an assumed 2 minutes); its dollars are that time at the new "
            "plan's price per hour. It is worth it when the tokens still to train finish sooner with it.")


def _result(r, current: Plan, cluster: Cluster) -> None:
    left, right = st.columns(2)
    with left:
        st.subheader("Current plan")
        if r.current is None:
            st.error(f"**It cannot run on the cluster as composed now.** {md(r.why_not_current)}",
                     icon=":material/block:")
            st.markdown(f"**Shape**: {md(frames.plan_shape(current))}")
        else:
            _figures(current, r.current, cluster)
    with right:
        st.subheader("New plan")
        _figures(r.plan, r.estimate, cluster)
    _switch(r)
    same = r.plan == current
    st.button("Put the new plan on view", type="primary", disabled=same, on_click=_adopt, args=(plan_dict(r.plan),),
              help="the current plan is still the best" if same else "the other pages then show the new plan")


def _key(state, tokens: float | None, old: dict | None) -> str:
    return json.dumps([state.cluster, state.plan, tokens, old, state.objective, state.time_limit_s], sort_keys=True)


def render() -> None:
    st.title("Re-plan")
    st.write("The cluster changed after planning (a node lost, a pool added)? Re-plan the plan on view on the "
             "cluster as composed now: the best plan there beside the current one, what moves, what the switch "
             "costs and whether it pays off over the tokens still to train.")
    if st.session_state.pop(ADOPTED_KEY, False):
        st.success("The new plan is on view.", icon=":material/check:")
    state = session.get()
    if state.plan is None:
        st.info("No plan on view to re-plan. Make one with **Plan** in the sidebar (or upload one on the "
                "**What-if** page), change the cluster on **Compose**, then come back here.",
                icon=":material/explore:")
        st.page_link("ui/pages/summary.py", label="Open the Plan page", icon=":material/rocket_launch:")
        return
    try:
        cluster = build_cluster(state)
        current = plan_from_dict(state.plan, catalog(), source="plan")
    except InputError as e:
        show_error(str(e))
        return
    tokens, old = _inputs(state, planned_on(state))
    key = _key(state, tokens, old)
    result = outcome_on_button(
        OUTCOME_KEY, key, lambda: replan_on(state.cluster, state.plan, tokens, old, state.objective,
                                            state.time_limit_s),
        label="Re-plan on the cluster as composed now", button_key="replan.run",
        spinner="Searching the best plan on the cluster as composed now…",
        waiting=f"Searches for up to {state.time_limit_s:g} CPU seconds (the limit set on Compose).")
    if result is not None:
        _result(result, current, cluster)
