"""The sidebar every page shares: what is being planned, and the Plan button."""
from __future__ import annotations

import re
import time

import streamlit as st

from planner.flops import model_params
from planner.types import InputError
from ui import session
from ui.engines import pinned, plan_engine, title
from ui.frames import training_text
from ui.markup import md
from ui.numbers import count, whole
from ui.numbers import tokens as tokens_text
from ui.planning import build_cluster, build_model, context_degrees, expert_degrees
from ui.state import LEFT_OUT_OF_THE_LINK

PLAN_REQUEST = "plan_requested"


def request_plan() -> None:
    """Button callback: app.py opens the Plan page, which runs the planner."""
    st.session_state[PLAN_REQUEST] = True


def precision_text(state) -> str:
    """"bf16", "fp32 (TF32 off)", "fp32 (TF32: engine default)"; "precision auto" (a bare "auto" in the job line
    named nothing)."""
    if state.precision == "auto":
        return "precision auto"
    if state.precision != "fp32":
        return state.precision
    return "fp32 (TF32 " + {None: ": engine default", True: "on", False: "off"}[state.tf32] + ")"


def engine_text(state) -> str:
    """The engine planned for and its pinned version; and the plan on view's, where it is another."""
    text = f"**Engine** {pinned(state.engine)}"
    on_view = plan_engine(state.plan)
    if on_view is not None and on_view != state.engine:
        text += f"; the plan on view is for {md(title(on_view))}"
    return text


def plan_training(plan: dict | None) -> str:
    """The job kind, offload, context and expert parallelism of the plan on view (plan file format), "" for
    no plan."""
    if not isinstance(plan, dict):
        return ""
    job = plan.get("job") if isinstance(plan.get("job"), dict) else {}
    kind, rank, offload = job.get("kind", "pretrain"), job.get("lora_rank", 16), plan.get("offload", "none")
    cp = plan.get("context_parallel", 1)
    split = f", context parallel {cp}" if _above_one(cp) else ""
    ep = plan.get("expert_parallel", 1)
    split += f", expert parallel {ep}" if _above_one(ep) else ""
    return training_text(str(kind), rank, str(offload)) + split


def _above_one(degree) -> bool:
    return isinstance(degree, int) and not isinstance(degree, bool) and degree > 1


def context_parallel_text(state) -> str:
    """", context parallel 8" for a fixed degree, ", context parallel auto (1, 2, 4)" where auto tries
    more than 1, else "" (nothing to split)."""
    if state.context_parallel != "auto":
        return "" if state.context_parallel == "1" else f", context parallel {state.context_parallel}"
    degrees = context_degrees(state) or [1]
    return "" if degrees == [1] else f", context parallel auto ({', '.join(map(str, degrees))})"


def expert_parallel_text(state) -> str:
    """", expert parallel 4" for a fixed degree, ", expert parallel auto (1, 2, 4, 8)" where auto tries
    more than 1, else "" (a dense model, or an engine without it)."""
    if state.expert_parallel != "auto":
        return "" if state.expert_parallel == "1" else f", expert parallel {state.expert_parallel}"
    degrees = expert_degrees(state) or [1]
    return "" if degrees == [1] else f", expert parallel auto ({', '.join(map(str, degrees))})"


def _search_in_background() -> None:
    """While a search runs that no page waits on (the user opened another page): say so, and where its
    answer will be."""
    flight = session.search_in_flight()
    if flight is None:
        return
    same = flight.job_key == session.get().job_key()
    st.info(f"**A search is running** ({time.monotonic() - flight.started_s:.0f} s so far) for "
            + ("these inputs" if same else "the inputs as they were when Plan was pressed")
            + ". Leaving its page does not stop it: its answer is kept and shown on the **Plan** page"
            + ("." if same else " once the inputs are those again."), icon=":material/hourglass_top:")


def render(slot) -> None:
    """The summary and the Plan button, drawn into `slot` (a sidebar container)."""
    state = session.get()
    with slot:
        st.markdown("### hetplan")
        st.caption("Hybrid-parallel training plans for mixed GPU clusters")
        try:
            cluster = build_cluster(state)
            pools = ", ".join(f"{whole(p.num_gpus)}× {md(p.gpu.id)}" for p in cluster.pools)
            st.markdown(f"**Cluster** {md(cluster.name)}: {count(cluster.num_gpus, 'GPU')} ({pools})")
        except InputError:
            st.markdown("**Cluster** needs fixing (see Compose)")
        try:
            model = build_model(state.model)
            size = "" if re.search(r"\d(\.\d+)?\s*B\b", model.name) else f" ({model_params(model) / 1e9:.1f} B)"
            st.markdown(f"**Model** {md(model.name)}{size}")
        except InputError:
            st.markdown("**Model** needs fixing (see Compose)")
        tokens = f", {tokens_text(state.tokens_to_train)}" if state.tokens_to_train else ""
        if tokens and state.job_kind != "pretrain":
            tokens += f" ({state.epochs:g} epochs)"
        st.markdown(f"**Job** {md(training_text(state.job_kind, state.lora_rank, state.offload))}"
                    f"{context_parallel_text(state)}{expert_parallel_text(state)}, batch "
                    f"{whole(state.global_batch)} × {whole(state.seq_len)} tokens, {precision_text(state)}"
                    f"{tokens}; objective {state.objective}; search limit {state.time_limit_s:g} CPU s")
        st.markdown(engine_text(state))
        on_view = plan_training(state.plan)
        if on_view:
            st.markdown(f"**Plan on view** {md(on_view)}")
        st.button("Plan", type="primary", width="stretch", icon=":material/rocket_launch:", key="sidebar_plan",
                  on_click=request_plan)
        left_out = st.session_state.get("url_too_long")
        if left_out:
            st.caption(LEFT_OUT_OF_THE_LINK[left_out])
        elif not session.url_holds_state():
            st.caption("The address bar holds the job as last planned or loaded; Plan puts these inputs in it "
                       "(the link on the Export page always has them).")
        _search_in_background()
