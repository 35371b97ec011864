"""What-if: upload a plan, or edit the one on view, and see its metrics move."""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pandas as pd
import streamlit as st

from catalog import check_plan_against_cluster, cluster_from_dict, plan_from_dict, without_output_keys
from catalog.files import parse_json
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import ENGINES
from planner.types import InputError
from ui import charts, frames, phases, session
from ui.engines import engine_fit, plan_engine, title, with_engine
from ui.markup import md
from ui.numbers import duration, per_million_tokens, percent, whole
from ui.planning import catalog, evaluate_plan, simulate_plan
from ui.state import EXAMPLES_DIR, presets
from ui.views.common import caption, grouped, show_error

PLAN_OPTIONS = {"micro_batch": None, "zero_stage": [0, 1, 2, 3], "recompute": ["none", "selective", "full"],
                "schedule": ["1f1b", "gpipe"], "interleave": None}


def adopt_plan(plan: dict, cluster: dict | None = None) -> None:
    """Make `plan` the one on view, with the job it was made for (and its cluster, if given)."""
    parsed = plan_from_dict(plan, catalog(), source="plan")
    changes = dict(plan={k: v for k, v in without_output_keys(plan).items() if k not in ("name", "notes")},
                   model=plan["model"], global_batch=parsed.global_batch, seq_len=parsed.seq_len,
                   precision=parsed.precision.value, engine=parsed.engine, tf32=parsed.tf32,
                   job_kind=parsed.training.kind.value, lora_rank=parsed.training.lora_rank,
                   offload=_offload_setting(parsed.offload.value, session.get().offload),
                   context_parallel=_degree_setting(parsed.context_parallel, session.get().context_parallel),
                   expert_parallel=_degree_setting(parsed.expert_parallel, session.get().expert_parallel))
    if cluster is not None:
        changes["cluster"] = cluster
    session.replace_all(replace(session.get(), **changes))


def _offload_setting(plan_offload: str, current: str) -> str:
    """The Compose offload that plans the adopted plan's job: its offload where it has one; for a plan
    without, the current setting unless that is a fixed offload (then auto, which may leave it off)."""
    if plan_offload != "none":
        return plan_offload
    return current if current in ("auto", "none") else "auto"


def _degree_setting(plan_degree: int, current: str) -> str:
    """The Compose context (or expert) parallelism that plans the adopted plan's job: its degree where it
    splits the sequence (the experts); for a plan without, the current setting unless that is a fixed
    split (then auto)."""
    if plan_degree > 1:
        return str(plan_degree)
    return current if current in ("auto", "1") else "auto"


def parse_plan_upload(name: str, content: bytes, cluster: dict) -> dict:
    """The plan (file format) in an uploaded JSON, checked against the cluster (file format)."""
    data = parse_json(content.decode("utf-8", errors="replace"), name)
    if not isinstance(data, dict):
        raise InputError(name, "must hold one JSON object (a plan)")
    plan = plan_from_dict(data, catalog(), source=name)
    check_plan_against_cluster(plan, cluster_from_dict(cluster, catalog(), source="cluster"))
    return data


def _upload() -> None:
    c1, c2 = st.columns(2, vertical_alignment="bottom")
    upload = c1.file_uploader("upload a plan JSON (format hetplan.plan/1)", type=["json"], key="plan_upload")
    if upload is not None and st.session_state.get("plan_upload_done") != upload.file_id:
        st.session_state["plan_upload_done"] = upload.file_id
        try:
            adopt_plan(parse_plan_upload(upload.name, upload.getvalue(), session.get().cluster))
        except InputError as e:
            show_error(f"{e} (the plan is checked against the cluster on the Compose page)")
            return
        st.rerun()
    examples = sorted(p.name for p in (EXAMPLES_DIR / "plans").glob("*.json"))
    choice = c2.selectbox("or an example plan, with its cluster", ["—"] + examples, key="example_plan")
    if choice != "—" and c2.button("Load example plan"):
        data = json.loads((EXAMPLES_DIR / "plans" / choice).read_text())
        table = presets()
        stem = next((k for k in sorted(table, key=len, reverse=True) if choice.startswith(k)), None)
        adopt_plan(data, table[stem] if stem else None)
        st.rerun()


def _replica_groups(plan: dict) -> pd.DataFrame:
    rows: list[dict] = []
    for i, stage in enumerate(plan["stages"]):
        for r in stage["replicas"]:
            last = rows[-1] if rows else None
            if last and (last["stage"], last["pool"], last["tp"], last["samples"]) == (i, r["pool"], r["tp"], r.get("samples")):
                last["replicas"] += 1
            else:
                rows.append({"stage": i, "pool": r["pool"], "tp": r["tp"], "replicas": 1, "samples": r.get("samples")})
    return pd.DataFrame(rows, columns=["stage", "pool", "tp", "replicas", "samples"]).astype({"samples": "Int64"})


def _editors(plan: dict) -> dict:
    digest = hashlib.sha1(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:10]
    # the last layer of each stage, included (as layer ranges read on every page); the plan file's end is one more
    stages = pd.DataFrame([{"stage": i, "last_layer": s["layers"][1] - 1} for i, s in enumerate(plan["stages"])])
    pools = [p.get("name") or p["gpu"] for p in session.get().cluster["pools"]]
    c1, c2 = st.columns([1, 3])
    with c1:
        st.markdown("**Stages**: each starts after the last one's last layer")
        st_ed = st.data_editor(stages, key=f"w.whatif.stages.{digest}", hide_index=True, num_rows="fixed",
                               disabled=["stage"], width="stretch",
                               column_config={"last_layer": st.column_config.NumberColumn(
                                   "last layer", step=1, required=True,
                                   help="the stage's last layer, included, counted from 0")})
    with c2:
        st.markdown("**Replicas** of each stage: add or delete rows; empty samples share the rest evenly")
        rep_ed = st.data_editor(
            _replica_groups(plan), key=f"w.whatif.replicas.{digest}", hide_index=True, num_rows="dynamic",
            width="stretch", column_config={
                "stage": st.column_config.NumberColumn("stage", min_value=0, step=1, required=True),
                "pool": st.column_config.SelectboxColumn("pool", options=pools, required=True),
                "tp": st.column_config.NumberColumn("tp", min_value=1, max_value=64, step=1, required=True),
                "replicas": st.column_config.NumberColumn("replicas", min_value=1, step=1, required=True),
                "samples": st.column_config.NumberColumn("samples each", min_value=1, step=1)})
    cols = st.columns(len(PLAN_OPTIONS) + 1)
    options = {}
    engine = cols[-1].selectbox("engine", list(ENGINES), key=f"w.whatif.engine.{digest}",
                                index=list(ENGINES).index(plan_engine(plan) or DEFAULT_ENGINE), format_func=title,
                                help="the engine that runs the edited plan: its space and how it runs it")
    for col, (name, choices) in zip(cols, PLAN_OPTIONS.items()):
        key = f"w.whatif.{name}.{digest}"
        if choices is None:
            options[name] = int(col.number_input(name.replace("_", " "), min_value=1, step=1,
                                                 value=int(plan.get(name, 1)), key=key))
        else:
            options[name] = col.selectbox(name.replace("_", " "), choices, key=key,
                                          index=choices.index(plan.get(name, choices[0])))
    return with_engine(_assemble(plan, st_ed, rep_ed, options), engine)


def _int(v):
    return None if v is None or pd.isna(v) else int(v)


def _assemble(plan: dict, stages: pd.DataFrame, groups: pd.DataFrame, options: dict) -> dict:
    """The plan file the editors describe (the catalog validates it when it is evaluated)."""
    out = {**plan, **options, "stages": []}
    start = 0
    for row in stages.itertuples():
        last = _int(row.last_layer)
        end = start + 1 if last is None else last + 1
        reps = []
        for g in groups[groups["stage"] == row.stage].itertuples():
            rep = {"pool": g.pool, "tp": _int(g.tp) or 1}
            if _int(g.samples):
                rep["samples"] = _int(g.samples)
            reps += [dict(rep) for _ in range(min(_int(g.replicas) or 1, 100_000))]
        out["stages"].append({"layers": [start, end], "replicas": reps})
        start = end
    return out


def _metrics(b, a) -> None:
    """Metrics of the edited plan `a`, with changes from the plan on view `b` (None: no deltas)."""
    c = st.columns(5)

    def delta(x, y, fmt):
        """The change, or None (no arrow) when there is nothing to compare or nothing changed."""
        return None if b is None or abs(y - x) <= 1e-9 * max(abs(x), abs(y), 1) else fmt(y - x)

    def plus(text: str, d: float) -> str:
        return ("+" if d > 0 else "-") + text
    c[0].metric("throughput (tokens/s)", whole(a.tokens_per_s),
                delta(b and b.tokens_per_s, a.tokens_per_s, lambda d: plus(whole(abs(d)), d)))
    c[1].metric("MFU", percent(a.mfu, 1), delta(b and b.mfu, a.mfu, lambda d: f"{d * 100:+.1f} pt"))
    c[2].metric("iteration", duration(a.iteration_time_s),
                delta(b and b.iteration_time_s, a.iteration_time_s, lambda d: plus(duration(abs(d)), d)),
                delta_color="inverse")
    c[3].metric("$ / M tokens", per_million_tokens(a.cost_per_million_tokens_usd),
                delta(b and b.cost_per_million_tokens_usd, a.cost_per_million_tokens_usd,
                      lambda d: plus(per_million_tokens(abs(d)), d)),
                delta_color="inverse")
    share = frames.peak_memory_share(a)
    c[4].metric("fullest GPU's memory", percent(share),
                delta(b and frames.peak_memory_share(b), share, lambda d: f"{d * 100:+.0f} pt"), delta_color="inverse",
                help="peak memory of the fullest GPU as a share of its capacity; above 100% it does not fit")


def _out_of_memory(est, changed: bool) -> None:
    """What overflows, GPU group by group; an edit that does is not offered to keep."""
    over = frames.memory_overflow(frames.memory_groups(frames.memory(est)))
    title = ("The edited plan runs out of memory, so it cannot be kept." if changed else
             "The plan on view runs out of memory.")
    st.error(f"**{title}** {md(est.oom)}", icon=":material/warning:")
    if len(over):
        st.dataframe(over, hide_index=True, width="stretch", column_config=grouped(over))
    st.caption("To make room: raise recompute (selective, then full), the ZeRO stage or tensor parallelism, "
               "move layers off the stages above, give their GPUs fewer samples, or use a smaller micro-batch.")


def _column(title: str, plan, est, sim, x_range_s) -> None:
    st.markdown(f"**{title}**: {md(frames.plan_shape(plan))}")
    st.markdown(f"**Bottleneck.** {md(est.bottleneck)}")
    st.plotly_chart(charts.narrow(charts.memory(frames.memory_groups(frames.memory(est))), f"{title}: memory per GPU"),
                    width="stretch", key=f"whatif.memory.{title}")
    if sim is None:
        st.info("No timeline for this plan.")
        return
    table = sim.phases.merge(phases.workers_to_draw(sim.events), on=["stage", "replica"])
    st.plotly_chart(charts.narrow(charts.timeline_phases(table, sim.pipeline_time_s, x_range_s),
                                  f"{title}: one iteration in phases"), width="stretch", key=f"whatif.timeline.{title}")


def _beside(state, edited: dict, before, after) -> None:
    """The edited plan beside the plan on view: key metrics with their change, then bottleneck,
    memory per GPU and timeline (on one time scale) of each."""
    (b_plan, b_est), (a_plan, a_est) = before, after
    st.subheader("Beside the plan on view")
    table = frames.side_by_side(b_est, b_plan, a_est, a_plan)
    st.dataframe(table, hide_index=True, width="stretch", height=35 * (len(table) + 1) + 3)
    shown = with_engine(edited, a_plan.engine)      # as the engine whose figures are shown runs it
    sims = [simulate_plan(state.cluster, p) for p in (state.plan, shown)]
    sims = [None if o.error else o.result for o in sims]
    longest = max((s.pipeline_time_s for s in sims if s is not None), default=0.0)
    left, right = st.columns(2)
    with left:
        _column("Plan on view", b_plan, b_est, sims[0], (0.0, longest))
    with right:
        _column("Edited", a_plan, a_est, sims[1], (0.0, longest))
    caption("Left the plan on view, right the edited plan: what limits each (bottleneck), the peak memory of "
            "each GPU group against its capacity (black tick), and one iteration in phases on the same time "
            "scale, so the shorter timeline is the faster pipeline.")


def _outside_the_space(fit, changed: bool) -> None:
    """The edit leaves its engine's space: what that engine cannot run, and which engines run it."""
    what = "The edited plan" if changed else "The plan on view"
    lines = "\n".join(f"- {md(v)}" for v in fit.violations)
    if fit.runners:
        runs = ", ".join(f"**{md(title(n))}**" for n in fit.runners)
        then = (f"Engines that run it: {runs}. The figures below are as {md(title(fit.plan.engine))} runs it; "
                f"to keep it, keep it as a plan for one of them, or undo the edit.")
    else:
        then = "No engine runs it."
    st.error(f"**{what} leaves {md(title(fit.engine))}'s space**: {md(title(fit.engine))} cannot run it.\n\n"
             f"{lines}\n\n{then}", icon=":material/block:")


def _keep_buttons(edited: dict, fit) -> None:
    """Keep the edit: as it is where its engine runs it, else as a plan for an engine that does."""
    if not fit.violations:
        if st.button("Keep this plan", type="primary"):
            session.update(plan=edited)
            st.rerun()
        return
    cols = st.columns(max(len(fit.runners), 1))
    for col, name in zip(cols, fit.runners):
        if col.button(f"Keep as a {title(name)} plan", type="primary" if name == fit.plan.engine else "secondary",
                      key=f"whatif.keep.{name}", help=f"the plan on view becomes this edit, run by {title(name)}"):
            session.update(plan=with_engine(edited, name))
            st.rerun()


# The edited plan does not fit the cluster as composed (a pool edited after planning, or an edit above): the
# fix is on this page or a new plan, not a value on Compose.
DOES_NOT_FIT_HINT = ("Edit the stages and replicas above until the plan fits the cluster as composed, or press "
                     "**Plan** in the sidebar for a plan made for it.")


def render() -> None:
    st.title("What-if")
    st.write("Upload a plan to evaluate it on your cluster, or change the plan on view and watch the "
             "metrics move. Edits are scored by the same cost model as the planner's plans.")
    _upload()
    state = session.get()
    if state.plan is None:
        st.info("No plan on view yet: run the planner, upload a plan, or load an example.", icon=":material/explore:")
        return
    st.subheader("Edit the plan on view")
    edited = _editors(state.plan)
    changed = edited != state.plan
    fit = engine_fit(edited)
    if fit.plan is None:
        show_error(fit.error)
        return
    if fit.violations:
        _outside_the_space(fit, changed)
    before = evaluate_plan(state.cluster, state.plan, state.tokens_to_train)
    after = evaluate_plan(state.cluster, with_engine(edited, fit.plan.engine), state.tokens_to_train)
    if after.error:
        show_error(after.error, after.kind, hint=None if after.kind != "input" else DOES_NOT_FIT_HINT)
        return
    _metrics(None if before.error else before.result[1], after.result[1])
    if not changed:
        st.caption("No edit yet: change a stage boundary, a replica or an option above to see the edited plan "
                   "beside this one.")
    if not after.result[1].fits:
        _out_of_memory(after.result[1], changed)
    elif changed or fit.violations:
        _keep_buttons(edited, fit)
    if before.error:
        show_error(f"The plan on view cannot be evaluated on this cluster, so there is nothing to compare with: "
                   f"{before.error}")
        return
    _beside(state, edited, before.result, after.result)
