"""Compose: the cluster (pools), the model and the job."""
from __future__ import annotations

from dataclasses import replace

import streamlit as st

from catalog import cluster_from_dict, cluster_to_yaml
from catalog.files import parse_yaml
from planner.types import InputError, JobKind, Offload, Precision
from ui import compose, frames, session
from ui.engines import (engines_that_offload, engines_that_run, engines_that_train, engines_with_context_parallel,
                        engines_with_expert_parallel)
from ui.markup import file_stem, md
from ui.numbers import count, whole
from ui.planning import build_cluster, build_model, catalog
from ui.sidebar import request_plan
from ui.state import ENGINE_CHOICES, JOB_KIND_LABELS, context_parallel_degree, expert_parallel_degree, presets
from ui.views.common import grouped, show_error


def _preset_row() -> None:
    table = presets()
    c1, c2, c3 = st.columns([3, 1, 3], vertical_alignment="bottom")
    choice = c1.selectbox("start from a preset cluster", list(table), key=session.fresh_key("preset"),
                          index=preset_index(session.get().cluster, table),
                          placeholder="the cluster below is no preset (uploaded or edited)",
                          format_func=lambda k: f"{k} ({count(_gpus(table[k]), 'GPU')})")
    if c2.button("Load preset", width="stretch", disabled=choice is None):
        session.replace_all(replace(session.get(), cluster=table[choice], plan=None))
        st.rerun()
    upload = c3.file_uploader("or upload a cluster YAML", type=["yaml", "yml"], key="cluster_upload")
    if upload is not None and st.session_state.get("cluster_upload_done") != upload.file_id:
        st.session_state["cluster_upload_done"] = upload.file_id
        st.session_state.pop(UPLOAD_ERROR, None)
        _load_upload(upload)
    if upload is None:
        st.session_state.pop(UPLOAD_ERROR, None)


UPLOAD_ERROR = "cluster_upload_error"


def preset_index(cluster: dict, table: dict) -> int | None:
    """The preset box's choice: the preset the cluster is, unchanged; None (the box says so) for an upload or
    an edited preset, not the first preset, which would name a cluster other than the one below."""
    name = cluster.get("name")
    return list(table).index(name) if name in table and table[name] == cluster else None


def _gpus(cluster: dict) -> int:
    return sum(p.get("nodes", 0) * p.get("gpus_per_node", 0) for p in cluster.get("pools", []))


def parse_cluster_upload(name: str, content: bytes) -> dict:
    """The cluster (file format) in an uploaded YAML, checked against the catalog."""
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(name, "not a UTF-8 text file (expected a cluster YAML)") from None
    data = parse_yaml(text, name)
    if not isinstance(data, dict):
        raise InputError(name, "must hold a mapping with `pools:` at the top level")
    cluster_from_dict(data, catalog(), source=name)
    return data


def _load_upload(upload) -> None:
    try:
        data = parse_cluster_upload(upload.name, upload.getvalue())
    except InputError as e:       # said where the cluster is checked, in place of the success box
        st.session_state[UPLOAD_ERROR] = str(e)
        return
    session.replace_all(replace(session.get(), cluster=data, plan=None))
    st.rerun()


def _cluster_section() -> None:
    state = session.get()
    st.subheader("Cluster")
    _preset_row()
    st.caption("Each row is a pool of identical nodes. Add a row at the bottom; select rows at their left "
               "edge and press Delete to remove them. Prices start at the catalog's and follow the GPU type; "
               "a price you type (or one from the cluster file) is your override and stays.")
    cluster = compose.pools_editor(state.cluster)
    compose.cluster_options(cluster)
    if cluster != state.cluster:
        session.update(cluster=cluster)
    try:
        built = build_cluster(session.get())
    except InputError as e:
        show_error(str(e))
        return
    counts = " + ".join(f"{whole(p.num_gpus)}× {md(p.gpu.id)}" for p in built.pools)
    upload_error = st.session_state.get(UPLOAD_ERROR)
    if upload_error:              # not beside a green box: the cluster below is the one from before the upload
        show_error(f"{upload_error}. The upload was not loaded: the cluster below is still the previous one "
                   f"({count(built.num_gpus, 'GPU')} in {count(len(built.pools), 'pool')}).")
    else:
        st.success(f"**{count(built.num_gpus, 'GPU')}** in {count(len(built.pools), 'pool')}: {counts}",
                   icon=":material/check_circle:")
    with st.expander("GPU key figures (from the catalog)", expanded=True):
        figures = compose.gpu_figures([p.gpu.id for p in built.pools])
        st.dataframe(figures, hide_index=True, width="stretch", column_config=grouped(figures, {
            "catalog $/GPU-h": st.column_config.NumberColumn(format="$%.2f")}))
    if built.network is not None and len(built.pools) > 1:
        with st.expander("Network between pools (widest paths of the cluster file's network)", expanded=True):
            st.dataframe(frames.network_paths(built), hide_index=True, width="stretch",
                         column_config={"Gb/s per node": st.column_config.NumberColumn(format="%.1f"),
                                        "latency µs": st.column_config.NumberColumn(format="%.1f")})
    st.download_button("Download cluster YAML", cluster_to_yaml(built), file_name=f"{file_stem(built.name)}.yaml",
                       mime="application/x-yaml", icon=":material/download:", on_click="ignore")


def _model_section() -> None:
    st.subheader("Model")
    model = compose.model_picker(session.get().model)
    if model != session.get().model:
        session.update(model=model, plan=None)
    try:
        compose.model_facts(build_model(model))
    except InputError as e:
        show_error(str(e))


def _job_section() -> None:
    st.subheader("Job")
    job = compose.job_inputs(session.get())
    if job.objective == "deadline" and not job.deadline_hours:
        st.warning("The **deadline** objective finds the cheapest plan that trains the tokens in time: "
                   "set **deadline (hours)**.", icon=":material/schedule:")
    if job.objective == "deadline" and not job.tokens_to_train:
        st.warning("A deadline needs **tokens to train** (billions) to know how long training takes.",
                   icon=":material/schedule:")
    _precision_notes(job)
    _training_notes(job)
    _context_parallel_notes(job)
    _expert_parallel_notes(job)


def _expert_parallel_notes(job) -> None:
    """A fixed expert-parallel degree the engine does not run, or the model cannot take (a dense model,
    or experts that do not split evenly): say so before the planner refuses it."""
    degree = _fixed_degree(job, expert_parallel_degree(job.expert_parallel), lambda space: space.expert_parallel,
                           "expert parallelism", "expert parallel", engines_with_expert_parallel)
    if degree is None:
        return
    try:
        model = build_model(session.get().model)
    except InputError:
        return
    if not model.is_moe:
        st.warning(f"**{md(model.name)} is a dense model: it has no experts to shard** over {degree} replicas. "
                   "Choose a mixture-of-experts model, or expert parallel auto or 1.", icon=":material/block:")
    elif model.experts % degree:
        st.warning(f"**{model.experts} experts do not split evenly over {degree} replicas**, as expert parallel "
                   f"{degree} needs: choose a degree that divides {model.experts}.", icon=":material/block:")


def _fixed_degree(job, degree: int | None, engine_runs_it, feature: str, setting: str, runners) -> int | None:
    """`degree` when the job fixes one above 1 (None for auto or 1), having warned when the job's engine
    has no `feature` (`engine_runs_it(space)` false) and named the engines that run it (`runners()`)."""
    if degree is None or degree == 1:
        return None
    engine = ENGINE_CHOICES[job.engine]
    if not engine_runs_it(engine.space):
        titles = runners()
        st.warning(f"**{md(engine.title)} has no {feature}.** {md(' and '.join(titles))} "
                   f"{'runs' if len(titles) == 1 else 'run'} it: choose one as the engine above, or {setting} "
                   f"auto or 1. The planner refuses {setting} {degree} under {md(engine.title)}.",
                   icon=":material/block:")
    return degree


def _context_parallel_notes(job) -> None:
    """A fixed context-parallel degree the engine does not run, or that does not split the sequence
    evenly: say so before the planner refuses it."""
    degree = _fixed_degree(job, context_parallel_degree(job.context_parallel), lambda space: space.context_parallel,
                           "context parallelism", "context parallel", engines_with_context_parallel)
    if degree is None:
        return
    if job.seq_len % (2 * degree):
        st.warning(f"**The sequence length ({job.seq_len:,} tokens) does not split into 2 × {degree} = "
                   f"{2 * degree} equal chunks**, as context parallel {degree} needs (each GPU takes two chunks, "
                   f"one early and one late, to balance causal attention): choose a sequence length divisible "
                   f"by {2 * degree}, or another degree.", icon=":material/block:")


def _training_notes(job) -> None:
    """A job kind or a fixed offload the chosen engine does not run: say so, and which engines do."""
    engine = ENGINE_CHOICES[job.engine]
    kind = JobKind(job.job_kind)
    label = JOB_KIND_LABELS[job.job_kind]
    if kind not in engine.space.job_kinds:
        runners = engines_that_run(kind)
        st.warning(f"**{md(engine.title)} does not run {md(label)} jobs.** {md(', '.join(runners))} "
                   f"{'does' if len(runners) == 1 else 'do'}: choose one as the engine above, or another job "
                   f"kind. The planner refuses {md(label)} under {md(engine.title)}.", icon=":material/block:")
    if job.offload in ("auto", Offload.NONE.value):
        return
    offload = Offload(job.offload)
    if not engine.space.offload_zero_stages(offload):
        runners = engines_that_offload(offload)
        st.warning(f"**{md(engine.title)} does not offload {md(offload.value)} to CPU memory.** "
                   f"{md(', '.join(runners)) or 'No engine'} {'does' if len(runners) == 1 else 'do'}: choose one as "
                   "the engine above, or offload auto or none.", icon=":material/block:")


def _precision_notes(job) -> None:
    """fp8 needs an engine that runs it and GPUs that have it: say so before the search does."""
    if job.precision != Precision.FP8.value:
        return
    engine = ENGINE_CHOICES[job.engine]
    if Precision.FP8 not in engine.space.precisions:
        runners = engines_that_train(Precision.FP8)
        st.warning(f"**{md(engine.title)} does not train in fp8.** {md(' and '.join(runners))} do: choose one as "
                   "the engine above, or another precision. The planner refuses fp8 under "
                   f"{md(engine.title)}.", icon=":material/block:")
    try:
        cluster = build_cluster(session.get())
    except InputError:
        return
    with_fp8 = [p for p in cluster.pools if p.gpu.peak_fp8_flops > 0]
    if not with_fp8:
        st.warning("**No GPU of this cluster has FP8**, so no plan can train in fp8 here: choose bf16 or fp16.",
                   icon=":material/block:")
    elif len(with_fp8) < len(cluster.pools):
        names = ", ".join(f"{md(p.name)} ({md(p.gpu.id)})" for p in with_fp8)
        st.info(f"Only some pools have FP8 ({names}): a plan in fp8 uses only their GPUs.",
                icon=":material/info:")


def render() -> None:
    st.title("Compose")
    st.write("Describe the GPUs you have (or could rent), the model and the training job; "
             "then press **Plan** in the sidebar.")
    _cluster_section()
    _model_section()
    _job_section()
    st.button("Plan", type="primary", icon=":material/rocket_launch:", key="compose_plan", on_click=request_plan)
