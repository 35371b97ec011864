"""Plan: run the planner, pick a plan, and read its summary."""
from __future__ import annotations

import threading
import time

import streamlit as st
from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

from planner.flops import model_params
from planner.memory import FRAMEWORK_OVERHEAD_BYTES, state_bytes_per_param
from planner.training import model_states
from planner.report import spot_text
from planner.search.bound import FILL_SLACK
from planner.engines import AUTO, REAL
from planner.types import InputError, JobKind, Offload, Precision
from ui import charts, frames, session
from ui.engines import (engines_that_offload, engines_that_run, engines_that_train, engines_with_context_parallel,
                        engines_with_expert_parallel, pinned, title)
from ui.markup import md
from ui.numbers import count, dollars, duration, factor, gib, per_million_tokens, percent, whole
from ui.numbers import tokens as tokens_text
from ui.planning import (BASELINES, FIRST_ENGINE, baseline_time_limit_s, build_cluster, build_job, build_model,
                         run_search)
from ui.results import (BASELINE_TITLES, baseline_facts, baseline_gap_text, baseline_searches, cheaper_baseline, cheaper_front_plans,
                        find, named_plans, plan_dict)
from ui.compose import TIME_LIMIT_WIDGET
from ui.sidebar import PLAN_REQUEST, request_plan
from ui.state import ENGINE_CHOICES, MAX_TIME_LIMIT_S
from ui.views.common import Current, caption, cheaper_front, current_plan, grouped, show_error


def run_planner(resumed: bool = False) -> None:
    """The search for the state's job in an st.status, and its plan put on view; `resumed`: the page comes
    back after waiting for its last step (`_wait_for_the_rest`), whose answer is kept."""
    state = session.get()
    with st.status("Planning…", expanded=True) as status:
        st.write("Checking the cluster, model and job")
        try:
            if state.objective == "deadline" and not state.deadline_hours:
                raise InputError("deadline", "the deadline objective needs a deadline: set deadline (hours) "
                                             "in the Job section of the Compose page")
            cluster, job = build_cluster(state), build_job(state)
        except InputError as e:
            status.update(label="The inputs need fixing", state="error")
            show_error(str(e), hint=_job_hint())
            return
        st.write(search_plan_text(cluster, job, state))
        st.caption("The answer is kept: pressing Plan again with the same inputs, or coming back to them, is "
                   "instant. Opening another page meanwhile does not stop the search: its answer waits here.")
        session.sync_url(now=True)       # a reload during the search opens this job, not the defaults
        flight, kept = session.search_in_flight(), session.search_outcome()
        if resumed and flight is None and kept is not None and not kept.stage and not kept.error:
            outcome = kept
        else:
            if flight is None or flight.job_key != state.job_key():
                flight = session.start_search(state.job_key(), lambda show: run_search(state, show=show))
            outcome = _wait_with_clock(flight.thread, flight.box, status, "Searching plans…", flight.started_s,
                                       tick_s=0.1, first_step=True)
        if not outcome.stage:       # an earlier step stays in the flight (session.search_outcome) until the last
            session.save_search_outcome(outcome)
        if outcome.error:      # the page shows the message once, below the status
            status.update(label="No plan", state="error", expanded=False)
            return
        result = outcome.result
        _put_on_view(outcome)
        if outcome.stage:
            status.update(label=_step_label(outcome.stage, time.monotonic() - flight.started_s), state="running",
                          expanded=False)
            return
        st.write(f"Ranked {count(len(result.plans), 'plan')} ({count(result.candidates_evaluated, 'candidate')} "
                 "scored), then the baselines")
        if getattr(result, "complete", True):
            status.update(label=f"Search complete: {count(len(result.plans), 'plan')}, the best proven best of the "
                                "search space by the cost model", state="complete", expanded=False)
        elif getattr(result, "stopped_by", None):
            status.update(label="Search stopped early: its best plan so far and the gap are below", state="error",
                          expanded=False)
        else:
            status.update(label="Search finished without proving its best plan: the gap is below", state="error",
                          expanded=False)


ON_VIEW_FROM = "plan_on_view_from"      # (job key, stage) of the answer whose plan `_put_on_view` last placed
PUT_ON_VIEW = "plan_put_on_view"        # the plan dict it placed (not one the user picked, linked or uploaded)


def _put_on_view(outcome) -> None:
    """The plan on view for an answer (or a step of one, Outcome.stage): a plan the user picked, or opened
    from a link or upload, stays where the answer holds it; the best plan otherwise. A plan this page put on
    view from an earlier step follows the best; one of this job not among an earlier step's plans (a
    baseline, another engine's) stays until the last step, which holds it or replaces it."""
    state = session.get()
    st.session_state[ON_VIEW_FROM] = (state.job_key(), outcome.stage)
    named = named_plans(outcome.result)
    if not named:
        return
    placed = st.session_state.get(PUT_ON_VIEW)
    mine = state.plan is not None and state.plan != placed
    if mine and (find(named, state.plan) or outcome.stage and _of_this_job(state.plan, state)):
        return
    st.session_state[PUT_ON_VIEW] = named[0].plan_dict
    if state.plan != named[0].plan_dict:
        session.update(plan=named[0].plan_dict)
    session.want_url()         # and its best plan, so that a reload shows it


def _of_this_job(plan: dict, state) -> bool:
    return (plan.get("model"), plan.get("global_batch"), plan.get("seq_len")) == (state.model, state.global_batch,
                                                                                  state.seq_len)


def _step_label(stage: str, seconds: float) -> str:
    """The status of a search whose answer comes in steps, at `stage` (what is still to come)."""
    if stage == FIRST_ENGINE:
        return (f"{title(REAL[0])}'s best plan found in {seconds:.0f} s; the other engines and the baselines "
                "follow below")
    return f"Search done in {seconds:.0f} s; comparing with the baselines below"


def search_plan_text(cluster, job, state) -> str:
    """What the search is about to do and the most it may take, in CPU seconds (not a guess of the wait)."""
    pools = ", ".join(f"{p.num_gpus:,} {md(p.gpu.id)}" for p in cluster.pools)
    base_s = baseline_time_limit_s(state.time_limit_s)
    return (f"Searching the plans {md(title(state.engine))} runs for {md(job.model.name)} on "
            f"{cluster.num_gpus:,} GPUs in "
            f"{count(len(cluster.pools), 'pool')} ({pools}), objective {state.objective}: every pipeline layout over "
            "the pools, with its layer split, tensor and data parallelism, batch shares, micro-batch, ZeRO, "
            f"recompute and schedule, best bound first. It stops when it has proved its best plan or after "
            f"{cpu_seconds(state.time_limit_s)} (the search limit on Compose), then searches the Megatron-style "
            f"and uniform baselines for up to {cpu_seconds(base_s)} each. The clock above counts wall time: on a "
            "busy machine it runs ahead of the limit.")


def _precision_hint() -> str | None:
    """Where the engine chosen does not train in the precision chosen: which engines do (Compose)."""
    state = session.get()
    if state.precision == "auto" or Precision(state.precision) in ENGINE_CHOICES[state.engine].space.precisions:
        return None
    runners = engines_that_train(Precision(state.precision))
    return (f"{md(title(state.engine))} does not train in {md(state.precision)}: on **Compose**, choose "
            + (f"an engine that does ({md(', '.join(runners))}) or " if runners else "")
            + "another precision.")


def _job_hint() -> str | None:
    """Where the engine chosen does not run the job kind, the fixed offload or the fixed context or expert
    parallelism, or the model cannot take the fixed expert parallelism: what to change on Compose."""
    state = session.get()
    space = ENGINE_CHOICES[state.engine].space
    if JobKind(state.job_kind) not in space.job_kinds:
        runners = engines_that_run(JobKind(state.job_kind))
        return (f"{md(title(state.engine))} does not run {md(state.job_kind)} jobs: on **Compose**, choose "
                + (f"an engine that does ({md(', '.join(runners))}) or " if runners else "") + "another job kind.")
    if state.offload != "auto" and not space.offload_zero_stages(Offload(state.offload)):
        runners = engines_that_offload(Offload(state.offload))
        return (f"{md(title(state.engine))} does not offload {md(state.offload)}: on **Compose**, choose "
                + (f"an engine that does ({md(', '.join(runners))}) or " if runners else "") + "offload auto or none.")
    if state.context_parallel not in ("auto", "1") and not space.context_parallel:
        runners = engines_with_context_parallel()
        return (f"{md(title(state.engine))} has no context parallelism: on **Compose**, choose an engine that has "
                f"it ({md(', '.join(runners))}) or context parallel auto or 1.")
    return _expert_hint(state)


def _expert_hint(state) -> str | None:
    """Where the fixed expert parallelism is one the engine does not run or the model cannot take: what
    to change on Compose."""
    if state.expert_parallel in ("auto", "1"):
        return None
    if not ENGINE_CHOICES[state.engine].space.expert_parallel:
        runners = engines_with_expert_parallel()
        return (f"{md(title(state.engine))} has no expert parallelism: on **Compose**, choose an engine that has "
                f"it ({md(', '.join(runners))}) or expert parallel auto or 1.")
    try:
        model = build_model(state.model)
    except InputError:
        return None
    if not model.is_moe:
        return (f"{md(model.name)} is a dense model with no experts to shard: on **Compose**, choose a "
                "mixture-of-experts model or expert parallel auto or 1.")
    if model.experts % int(state.expert_parallel):
        return (f"{model.experts} experts do not split evenly over {state.expert_parallel} replicas: on "
                f"**Compose**, choose an expert-parallel degree that divides {model.experts}, or auto.")
    return None


def _engine_line(cur) -> None:
    """Which engine the plan on view is for, pinned, and whether the planner searches for another."""
    planned_for = session.get().engine
    text = f"For **{pinned(cur.plan.engine)}**: predicted as that engine runs the plan."
    if planned_for == AUTO:
        text += f" With {md(title(planned_for))} on Compose, the search picked this engine's plan as the best."
    elif cur.plan.engine != planned_for:
        text += (f" The planner now searches for {md(title(planned_for))} (the engine on Compose); run it for "
                 f"plans that engine runs.")
    st.caption(text)


def _too_big_for_the_cluster() -> str | None:
    """When the model's state alone outgrows all the cluster's GPU memory, that, with the numbers
    (no batch size or plan can help); else None (the general advice stands)."""
    try:
        text = model_state_shortfall(build_cluster(session.get()), build_job(session.get()))
    except InputError:
        return None
    return text or None


def model_state_shortfall(cluster, job) -> str:
    """One paragraph when weights, gradients and optimizer states (before activations, sharded as
    far as ZeRO-3 goes) need more than every GPU of the cluster holds; "" when they fit."""
    params = model_params(job.model)
    per_param = sum(state_bytes_per_param(0, 1, model_states(job.precision, job.training, job.model, job.offload)))
    state_bytes = params * per_param
    usable_bytes = sum(p.num_gpus * (p.gpu.mem_bytes - FRAMEWORK_OVERHEAD_BYTES) for p in cluster.pools)
    if state_bytes <= usable_bytes:
        return ""
    ratio = state_bytes / max(usable_bytes, 1.0)
    times = factor(ratio)
    return (f"**The model is too large for this cluster.** {md(job.model.name)}'s weights, gradients and "
            f"optimizer states alone need {gib(state_bytes)} ({per_param:g} bytes × "
            f"{params / 1e9:,.1f} B parameters), {times} the {gib(usable_bytes)} that all "
            f"{cluster.num_gpus:,} GPUs of the cluster hold together: no batch size, sequence length or plan "
            f"can fit it. Add GPUs (at least {gib(state_bytes - usable_bytes)} more, before "
            f"activations) or choose a smaller model.")


def cpu_seconds(s: float) -> str:
    """"1 CPU second", "20 CPU seconds", "0.25 CPU seconds"."""
    return f"{s:g} CPU second" + ("" if s == 1 else "s")


def search_completeness(result) -> str:
    """One sentence when the search could not prove its answer best by the cost model: why (the
    limit that stopped it, or its verification budget), and how far from optimal it can be."""
    if getattr(result, "complete", True):
        return ""
    gap = getattr(result, "gap", None)
    bound = (f"no plan of its space can be more than {percent(gap, 1)} better by the cost model (lower bounds on "
             f"every plan it did not evaluate)" if gap is not None else
             "how close its best plan is to the optimum is unknown")
    stopped = getattr(result, "stopped_by", None)
    why = f"The search stopped at its {stopped}" if stopped else "The search could not prove its best plan optimal"
    return f"{why}: {bound}."


RAISE_BY = 4


def gap_made_of(gap: float | None) -> str:
    """What a gap is made of: the bounds' safety margin (planner.search.bound.FILL_SLACK), which no search
    time removes, and the rest, which only scoring the plans of the lowest bounds can. "" without a gap."""
    if not gap:
        return ""
    margin = 1 / (1 - FILL_SLACK) - 1
    own = (1 + gap) * (1 - FILL_SLACK) - 1       # gap = best / (bound x (1 - FILL_SLACK)) - 1
    text = (f"The gap compares #1 with lower bounds on the plans not scored, and those bounds are lowered by a "
            f"{FILL_SLACK:.0%} safety margin (their pipeline fill is an estimate, kept below the cost model: "
            f"benchmarks/fast_vs_evaluate.py), worth {percent(margin, 1)} of gap by itself, which more time does not "
            "remove.")
    if own <= 0:
        return text + " All of this gap can be that margin: #1 may well be the best plan already."
    return (text + f" Without it the unscored plans' bounds are within {percent(own, 1)} of #1: more time narrows that "
                   "part only by scoring those plans, and bounds that are loose for this job (they leave out "
                   "collective latencies, for one) keep it open however long the search runs.")


def _search_again(limit_s: float) -> None:
    """Button callback: the same inputs with a higher search limit, planned at once."""
    session.update(time_limit_s=limit_s)
    st.session_state.pop(TIME_LIMIT_WIDGET, None)        # Compose's field starts again from the state
    request_plan()


def settings_searched(result) -> list[str]:
    """The search's notes on settings it searched one by one (context and expert parallelism, offload):
    "expert parallelism (1, 2, 4, 8) searched, each setting a search of its own; the best answer is shown"."""
    return [note for note in getattr(result, "notes", ()) or () if "searched" in note and "search of its own" in note]


def search_verdict(result) -> None:
    """Above the plan: whether the search proved its best plan, or where it stopped and the gap,
    with a button that searches again with a higher limit."""
    if getattr(result, "complete", True):
        st.caption("The search is complete: no plan of its space beats the best one (#1) by the cost model.")
        return
    state = session.get()
    text = search_completeness(result)
    stopped = getattr(result, "stopped_by", None)
    higher = min(MAX_TIME_LIMIT_S, state.time_limit_s * RAISE_BY)
    if stopped == "time limit":
        text += (f" Its limit was {cpu_seconds(state.time_limit_s)}; the best plan found so far (#1) is shown, "
                 "and searching longer can only find a better one or prove this one best.")
    text += " " + gap_made_of(getattr(result, "gap", None))
    st.warning(f"**Stopped early.** {text}", icon=":material/timer_off:")
    if stopped == "time limit" and higher > state.time_limit_s:
        st.button(f"Search again with {cpu_seconds(higher)}", icon=":material/update:", key="search_longer",
                  on_click=_search_again, args=(higher,))


def _with_clock(work, status, label: str, tick_s: float = 0.5):
    """`work()` in a helper thread, while the status label counts the seconds: a long search
    shows that it is alive. The thread shares this session's context, so caches work there."""
    box: dict = {}

    def run():
        try:
            box["value"] = work()
        except BaseException as e:       # re-raised below, in the script's own thread
            box["error"] = e

    worker = threading.Thread(target=run, daemon=True, name="hetplan-search")
    add_script_run_ctx(worker, get_script_run_ctx())
    t0 = time.monotonic()
    worker.start()
    return _wait_with_clock(worker, box, status, label, t0, tick_s)


def _wait_with_clock(worker: threading.Thread, box: dict, status, label: str, t0: float, tick_s: float = 0.5,
                     first_step: bool = False):
    """Wait for `worker` (started at time.monotonic() `t0`) while the status label counts the seconds; its
    value (`box`), or its error raised here. `first_step`: or its first answer of several (box "partial")."""
    said = ""
    while worker.is_alive() and not (first_step and "partial" in box):
        worker.join(tick_s)
        clock = f"{label} {time.monotonic() - t0:.0f} s"
        if worker.is_alive() and not (first_step and "partial" in box) and clock != said:
            status.update(label=clock, expanded=True)
            said = clock
    if "error" in box:
        raise box["error"]
    return box["value"] if "value" in box else box["partial"]


def _plan_picker(result) -> None:
    named = named_plans(result)
    labels = [n.name for n in named]
    on_view = find(named, session.get().plan)
    index = labels.index(on_view.name) if on_view else 0
    rows = [frames.metrics_row(n.name, n.role, n.scored.plan, n.scored.estimate) for n in named]
    table = frames.metrics_table(rows)
    st.dataframe(table, hide_index=True, width="stretch",
                 column_config=grouped(table, {"plan": st.column_config.TextColumn(width="medium")}))
    choice = st.radio("plan on view", labels, index=index, horizontal=True, key="plan_on_view")
    picked = named[labels.index(choice)]
    if on_view is None or picked.name != on_view.name:
        session.update(plan=picked.plan_dict)
        st.rerun()


def _metrics(est, without_grid: list[str] | None = None, cur=None) -> None:
    c = st.columns(6)
    c[0].metric("tokens / s", whole(est.tokens_per_s), help=f"{count(est.tokens_per_s, 'token')}/s on "
                                                          f"{count(est.num_gpus, 'GPU')}")
    fp8 = cur is not None and frames.mfu_caveat(cur.plan, cur.cluster, est)
    c[1].metric("MFU (vs 16-bit peak)" if fp8 else "MFU", percent(est.mfu, 1),
                help="model FLOPs / (iteration time × 16-bit peak FLOP/s of the GPUs used)")
    c[2].metric("iteration", duration(est.iteration_time_s))
    c[3].metric("$ / M tokens", per_million_tokens(est.cost_per_million_tokens_usd),
                help=f"{dollars(est.cost_per_hour_usd)}/h")
    tokens = session.get().tokens_to_train
    run = f"{tokens_text(tokens)} (set on Compose) at this throughput" if tokens else "set tokens to train on Compose"
    c[4].metric("time to train", duration(est.train_time_s), help=run)
    bill = est.train_cost_usd
    c[5].metric("$ to train", "-" if bill is None else dollars(bill),
                help=f"{run}, at {dollars(est.cost_per_hour_usd)}/h for the GPUs used")
    st.caption(frames.energy_text(est, without_grid) + " (GPU board power for the whole iteration: an upper bound without host, "
               "network and cooling; carbon from each pool's grid_gco2_per_kwh in the cluster file)")
    if spot_text(est):
        st.caption("Spot: " + spot_text(est) + " (an assumption: pools reclaimed independently, no work lost "
                   "at a reclaim; on-demand GPUs paid while waiting, spot GPUs only while held)")


def _gains(named, baselines: dict, cluster_gpus: int, said_below: set[str] = frozenset(),
           searches: dict | None = None) -> None:
    """Gain over each baseline by the objective, each baseline labelled with the GPUs it uses and its
    $ per million tokens, and a sentence where it is cheaper per token (unless the list of cheaper
    Pareto plans below names it, `said_below`); "same plan" where the baseline is this plan; under
    the gain, the gap of a baseline whose own search stopped early (`searches`, results.baseline_searches)."""
    scored = named.scored
    gains = {k: v for k, v in (getattr(scored, "gain_over", None) or {}).items() if v is not None}
    if not gains:
        return
    objective = session.get().objective
    cols = st.columns(max(2, len(gains)))      # room for each baseline's label under its gain
    cheaper = []
    for col, (name, gain) in zip(cols, gains.items()):
        base = baselines.get(name)
        same = base is not None and plan_dict(base.plan) == named.plan_dict
        facts = baseline_facts(base.estimate, cluster_gpus) if base is not None else None
        col.metric(f"vs {md(BASELINE_TITLES.get(name, name + ' baseline'))}", "same plan" if same else f"{gain:+.0%}", facts,
                   delta_color="off", delta_arrow="off",
                   help=(f"the {name}-style baseline is this very plan: on this cluster and job nothing beats it "
                         f"by the objective ({objective})") if same else
                        f"how much better this plan is than the {name}-style baseline on the same cluster, "
                        f"by the objective ({objective})")
        search = (searches or {}).get(name)
        if search is not None and not same:
            col.caption(f"Not a final figure: the {md(name)} baseline's {md(baseline_gap_text(search))}.")
        if base is not None and not same and f"{name} baseline" not in said_below:
            cheaper.append(cheaper_baseline(f"{name} baseline", scored.estimate, base.estimate, cluster_gpus))
    for sentence in filter(None, cheaper):
        st.info(md(sentence), icon=":material/savings:")


def _idle(result, cur) -> None:
    used = cur.plan.gpus_by_pool()
    idle = [(p.name, p.num_gpus - used.get(p.name, 0)) for p in cur.cluster.pools if used.get(p.name, 0) < p.num_gpus]
    if not idle:
        st.markdown("**All GPUs are used.**")
        return
    why = getattr(result, "idle", {}) if result is not None else {}
    because = "the planner found the plan faster without them"
    lines = [f"- **{count(n, 'idle GPU')} of pool {md(name)}**: {md(why.get(name, because))}" for name, n in idle]
    st.markdown("**Idle GPUs**\n" + "\n".join(lines))


def _why_no_alternatives() -> None:
    """Above a plan the planner has not ranked for these inputs: say why, and what to press."""
    if session.search_is_stale():
        kept = (" The plan on view stays (scored on the current cluster and job where it still fits them), but the "
                "alternatives and baselines are gone." if session.get().plan is not None else "")
        st.warning(f"**The inputs changed since the last planning run.**{kept} Run the planner for plans "
                   "made for these inputs.", icon=":material/update:")
    elif session.get().plan is None:
        st.write("The planner searches the cluster, model and job set on **Compose** for the best plan by "
                 f"the objective ({session.get().objective}), and scores the baselines beside it.")
    else:
        st.info("This plan came from a link or an upload: its figures below are scored on this cluster. "
                "Run the planner to rank it against the alternatives and the baselines.",
                icon=":material/info:")


def render() -> None:
    st.title("Plan")
    resumed = st.session_state.pop(STEPS_DONE, False)
    requested = (st.session_state.pop(PLAN_REQUEST, False) or st.session_state.pop(session.SEARCH_ON_OPEN, False)
                 or resumed)
    flight = session.search_in_flight()
    if flight is not None and flight.job_key == session.get().job_key():
        requested = True             # back on this page while its search runs: wait for it here again
    if not requested and session.search_outcome() is None:
        _why_no_alternatives()
        requested = st.button("Run the planner", type="primary", icon=":material/rocket_launch:")
    if requested:
        run_planner(resumed)
    outcome = session.search_outcome()
    result = None
    if outcome is not None and outcome.error:
        hint = _too_big_for_the_cluster() if outcome.kind == "infeasible" else (_job_hint() or _precision_hint())
        show_error(outcome.error, outcome.kind, hint=hint)
    elif outcome is not None:
        result = outcome.result
        if st.session_state.get(ON_VIEW_FROM) != (session.get().job_key(), outcome.stage):
            _put_on_view(outcome)        # a step or answer that came while the page waited, or on another page
        if outcome.note:
            st.warning(md(outcome.note[0].upper() + outcome.note[1:]), icon=":material/warning:")
    # with no plan and no answer, the button above says it all, and after a refusal the error does:
    # current_plan()'s "No plan yet. Press Plan" would contradict it
    cur = on_view(result) if session.get().plan is not None or result is not None else None
    stage = outcome.stage if outcome is not None else ""
    if cur is not None:
        _plan_on_view(cur, result, stage)
    if result is not None and stage != FIRST_ENGINE:      # the first engine's step: its figures, not yet its charts
        st.subheader("All plans found")
        _plan_picker(result)
    if stage:
        _wait_for_the_rest(stage)


def on_view(result) -> Current | None:
    """The plan on view and its estimate: where it is one of the answer's plans, the answer's own (the search
    scores the plans it returns with planner.cost.evaluate, as `current_plan` does: the figures come without a
    worker call of their own; tests/test_app_summary.py holds the two equal); else `current_plan()`."""
    named = find(named_plans(result), session.get().plan) if result is not None else None
    if named is None:
        return current_plan()
    try:
        cluster = build_cluster(session.get())
    except InputError:
        return current_plan()
    return Current(cluster, named.scored.plan, named.scored.estimate)


def _wait_for_the_rest(stage: str) -> None:
    """Below an answer's earlier step: the seconds its search has run, until the next step comes; then the
    page again, with it."""
    flight = session.search_in_flight()
    if flight is not None and flight.job_key == session.get().job_key():
        clock, step = st.empty(), flight.box.get("partial")
        what = ("Checking the other engines, then comparing with the baselines…" if stage == FIRST_ENGINE else
                "Comparing with the baselines…")
        said = ""
        while flight.thread.is_alive() and flight.box.get("partial") is step:
            text = f"{what} {time.monotonic() - flight.started_s:.0f} s since Plan was pressed"
            if text != said:
                clock.caption(text)
                said = text
            flight.thread.join(0.1)
    st.session_state[STEPS_DONE] = True      # the next run draws the search's status again, with the answer
    st.rerun()


STEPS_DONE = "search_steps_done"
# The first engine's step draws the plan's figures only: the breakdown chart and the table of plans (Plotly's and
# the data grid's scripts, the heaviest part of the page for the browser) come with the whole answer, a few
# seconds later, so that the figures are on screen sooner.
FIGURES_FIRST = ("The iteration time by term and every plan found come with the whole answer, once the other "
                 "engines are checked.")


def _plan_on_view(cur, result, stage: str = "") -> None:
    est = cur.estimate
    named = find(named_plans(result), session.get().plan) if result is not None else None
    st.subheader(f"Plan on view: {md(named.name)}" if named else "Plan on view")
    if stage == FIRST_ENGINE:
        others = ", ".join(title(name) for name in REAL[1:])
        st.info(f"**{md(title(REAL[0]))}'s best plan**, shown while the other engines ({md(others)}) are checked: "
                "one of them may still beat it.", icon=":material/hourglass_top:")
    elif result is not None:
        search_verdict(result)
        for note in settings_searched(result):
            st.caption(f"Searched: {md(note)}.")
    st.markdown(f"**{est.num_gpus} GPUs:** {md(frames.plan_shape(cur.plan))}")
    _engine_line(cur)
    if not est.fits:
        st.error(f"**Does not fit in memory:** {md(est.oom)}", icon=":material/warning:")
    _metrics(est, frames.pools_without_grid_intensity(cur.cluster, cur.plan), cur)
    for caveat in (frames.mfu_caveat(cur.plan, cur.cluster, est), frames.batch_too_small(cur.plan, cur.cluster, est)):
        if caveat:
            st.warning(md(caveat), icon=":material/info:")
    if named is not None:
        baselines = {k: v for k, v in (getattr(result, "baselines", None) or {}).items() if v is not None}
        on_front = {name for name, _ in cheaper_front_plans(result, session.get().plan, est, cur.cluster)}
        _gains(named, baselines, cur.cluster.num_gpus, said_below=on_front, searches=baseline_searches(result))
        if stage:
            st.caption("Comparing with the Megatron-style and uniform baselines… (their gains come here)")
    if result is not None:
        cheaper_front(result, cur)
    st.markdown(f"**Bottleneck.** {md(est.bottleneck)}")
    _idle(result, cur)
    for note in est.notes:
        st.caption(f"Note: {md(note)}")
    if stage == FIRST_ENGINE:
        st.caption(FIGURES_FIRST)
        return
    st.plotly_chart(charts.breakdown(frames.breakdown(est)), width="stretch")
    caption("Each bar is time per iteration that the busiest pipeline worker spends on that term and "
            "cannot hide behind computation; shorter overhead bars mean a better plan.")
    if named is not None and getattr(named.scored, "explanation", ""):
        with st.expander("Why this plan"):
            st.markdown(md(named.scored.explanation))
