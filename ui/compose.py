"""Widget groups: each draws its inputs and returns what they describe.

Each widget is drawn from the app state and writes a change into it in its callback
(`session.edits_state`); the groups return what the state then describes, in the cluster and plan
file formats or as a `JobInputs`.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import pandas as pd
import streamlit as st

from catalog import cluster_from_dict
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import AUTO
from planner.flops import model_params
from planner.types import GIB, MAX_LORA_RANK, InputError, Model, Precision
from ui import session
from ui.engines import engines_with_context_parallel, engines_with_expert_parallel, short_version
from ui.markup import md
from ui.numbers import gib, whole
from ui.planning import (baseline_time_limit_s, build_model, catalog, context_degrees, expert_degrees,
                         pool_error_for_people)  # noqa: F401 - its home was here; tests import it
from ui.state import (ENGINE_CHOICES, CONTEXT_PARALLEL_AUTO, DEFAULT_TIME_LIMIT_S, EXPERT_PARALLEL_AUTO,
                      FINETUNE_DATASET_TOKENS, JOB_KIND_HELP, MAX_EPOCHS, PRETRAIN_TOKENS,
                      JOB_KIND_LABELS, JOB_KINDS, MAX_TIME_LIMIT_S, OBJECTIVES, OFFLOAD_HELP, OFFLOADS, PRECISION_HELP,
                      PRECISIONS, TF32_CHOICES)

POOL_COLUMNS = ["name", "gpu", "nodes", "gpus_per_node", "inter_node_gbps", "price_per_gpu_hour", "spot",
                "availability", "host_memory_gib", "grid_gco2_per_kwh"]
CUSTOM = "custom architecture…"
BYTES_PER_PARAM_TRAINING = 18      # 16-bit weights, fp32 grads, fp32 master + Adam (planner.memory)


def gpu_figures(gpu_ids: list[str]) -> pd.DataFrame:
    gpus = catalog().gpus
    return pd.DataFrame([{
        "GPU": gpus[g].name, "id": g, "bf16/fp16 TFLOP/s": round(gpus[g].peak_flops / 1e12),
        "memory GiB": round(gpus[g].mem_bytes / GIB), "memory GB/s": round(gpus[g].mem_bw_bytes_per_s / 1e9),
        "node link": f"{gpus[g].link_kind} {gpus[g].link_bw_bytes_per_s / 1e9:.0f} GB/s",
        "bf16": "yes" if gpus[g].supports_bf16 else "no", "catalog $/GPU-h": gpus[g].price_per_hour_usd,
    } for g in dict.fromkeys(gpu_ids) if g in gpus])


def pools_frame(cluster: dict) -> pd.DataFrame:
    """The editor's table: file defaults written out (name: the GPU id; price: the catalog's)."""
    gpus = catalog().gpus
    rows = [{c: p.get(c) for c in POOL_COLUMNS} for p in cluster.get("pools", [])]
    for row in rows:
        row["name"] = row["name"] or row["gpu"]
        if row["price_per_gpu_hour"] is None and row["gpu"] in gpus:
            row["price_per_gpu_hour"] = gpus[row["gpu"]].price_per_hour_usd
        row["spot"] = bool(row["spot"])
    df = pd.DataFrame(rows, columns=POOL_COLUMNS)
    return df.astype({"name": "object", "gpu": "object", "nodes": "Int64", "gpus_per_node": "Int64",
                      "inter_node_gbps": "Float64", "price_per_gpu_hour": "Float64", "spot": "boolean",
                      "availability": "Float64", "host_memory_gib": "Float64", "grid_gco2_per_kwh": "Float64"})


def _clean(value):
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return None
    if hasattr(value, "item"):
        value = value.item()
    return value


def pools_editor(cluster: dict) -> dict:
    """The pools as an editable table; returns the cluster (file format) it describes."""
    key = session.WIDGET_PREFIX + "pools"
    if key not in st.session_state or "pools_base" not in st.session_state:
        st.session_state["pools_base"] = pools_frame(cluster)
    edited = st.data_editor(
        st.session_state["pools_base"], key=key, num_rows="dynamic", width="stretch", hide_index=True,
        column_config={
            "name": st.column_config.TextColumn("pool name", help="unique; plans refer to pools by name; "
                                                                  "empty: the GPU type"),
            "gpu": st.column_config.SelectboxColumn("GPU type", options=sorted(catalog().gpus), required=True),
            # no min_value / max_value here: the table would clamp 0 nodes to 1 without a word; the cluster's
            # checks refuse such a value below the table, naming the row and the field (pool_error_for_people)
            "nodes": st.column_config.NumberColumn("nodes", step=1, required=True, default=1),
            "gpus_per_node": st.column_config.NumberColumn("GPUs / node", step=1, required=True, default=8),
            "inter_node_gbps": st.column_config.NumberColumn(
                "network Gb/s per node", help="one direction, e.g. 100 GbE, 200 IB HDR, 400 IB NDR"),
            "price_per_gpu_hour": st.column_config.NumberColumn(
                "$ / GPU-hour", format="$%.2f",
                help="starts at the catalog's price; change it for your own (e.g. amortised or reserved) price; "
                     "for a spot pool, the spot price"),
            "spot": st.column_config.CheckboxColumn(
                "spot", default=False,
                help="preemptible GPUs the provider can reclaim: a plan on them waits while they are away"),
            "availability": st.column_config.NumberColumn(
                "availability", step=0.01, format="%.2f",
                help="spot pools only (ignored otherwise): the share of time the pool's GPUs are held, e.g. 0.9; "
                     "plans are ranked by their expected figures, waits counted"),
            "host_memory_gib": st.column_config.NumberColumn(
                "CPU GiB / node", format="%.0f",
                help="optional: each node's CPU memory, for offloaded optimizer states and weights "
                     "(empty: twice the node's GPU memory)"),
            "grid_gco2_per_kwh": st.column_config.NumberColumn(
                "grid gCO2 / kWh", format="%.0f",
                help="optional: the carbon intensity of the power the pool draws, for the CO2 to train "
                     "(e.g. about 400 for a fossil-heavy grid, under 50 for hydro or nuclear)"),
        })
    before = st.session_state["pools_base"]
    out = cluster_with_pools(cluster, edited, before)
    if retyped_rows(before, edited):       # redraw the table so that it shows the new type's price
        session.update(cluster=out)
        del st.session_state[key]
        st.session_state.pop("pools_base")
        st.rerun()
    return out


def retyped_rows(before: pd.DataFrame, after: pd.DataFrame) -> set:
    """Rows (index labels) of the editor's table whose GPU type changed while their price stayed the
    old type's catalog price: a price that follows the type. A price that differs from the old type's
    catalog price (typed in the table, or from the cluster file) is an override and stays."""
    gpus = catalog().gpus
    out = set()
    for label in after.index.intersection(before.index):
        old_gpu, new_gpu = _clean(before.at[label, "gpu"]), _clean(after.at[label, "gpu"])
        price = _clean(after.at[label, "price_per_gpu_hour"])
        if (old_gpu != new_gpu and old_gpu in gpus and price == _clean(before.at[label, "price_per_gpu_hour"])
                and price == gpus[old_gpu].price_per_hour_usd):
            out.add(label)
    return out


def cluster_with_pools(cluster: dict, pools: pd.DataFrame, before: pd.DataFrame | None = None) -> dict:
    """`cluster` (file format) with its pools replaced by the rows of the editor's table;
    rows without a GPU type are skipped, empty cells left out (the file format's defaults).
    With `before` (the table as drawn), a row whose GPU type changed takes the new type's catalog
    price unless its price was an override (`retyped_rows`)."""
    gpus = catalog().gpus
    retyped = retyped_rows(before, pools) if before is not None else set()
    rows = []
    for label, row in zip(pools.index, pools.to_dict("records")):
        pool = {c: _clean(row.get(c)) for c in POOL_COLUMNS}
        if not pool["gpu"]:
            continue
        if label in retyped or (pool["gpu"] in gpus
                                and pool["price_per_gpu_hour"] == gpus[pool["gpu"]].price_per_hour_usd):
            pool["price_per_gpu_hour"] = None     # the catalog's price: no override
        if not pool["spot"]:                      # on demand (the file's default); an availability left over is moot
            pool["spot"] = pool["availability"] = None
        rows.append({k: v for k, v in pool.items() if v is not None and v != ""})
    out = {k: v for k, v in cluster.items() if k != "pools"}
    out["pools"] = rows
    return out


def _named(name: str) -> dict:
    return {"cluster": dict(session.get().cluster, name=name or "cluster")}


def _between(gbps: float | None) -> dict:
    cluster = {k: v for k, v in session.get().cluster.items() if k != "between_pools_gbps"}
    return {"cluster": {**cluster, "between_pools_gbps": gbps} if gbps else cluster}


def _drop_network() -> None:
    state = session.get()     # replaced whole: the pool table redraws from it, with the bandwidths filled in
    session.replace_all(replace(state, cluster=without_network(state.cluster), plan=None))


def without_network(cluster: dict) -> dict:
    """`cluster` (file format) in the short form: each pool's network bandwidth from its links, and
    the slowest widest path between two pools as the bandwidth between pools (a single figure can
    only be the most cautious one); a section that does not build is dropped as it is."""
    out = {k: v for k, v in cluster.items() if k != "network"}
    try:
        built = cluster_from_dict(cluster, catalog(), source="cluster")
    except InputError:
        return out
    out["pools"] = [{**p, "inter_node_gbps": round(q.inter_node_bw_bytes_per_s * 8 / 1e9, 6)}
                    for p, q in zip(cluster["pools"], built.pools)]
    pairs = [built.bw_between_pools(a, b) for i, a in enumerate(built.pools) for b in built.pools[i + 1:]]
    if pairs:
        out["between_pools_gbps"] = round(min(pairs) * 8 / 1e9, 6)
    return out


def cluster_options(cluster: dict) -> None:
    """The cluster's name and the network between its pools: a bandwidth, or where the cluster file
    has a network section, what it holds (shown by `network_summary`)."""
    between = cluster.get("between_pools_gbps")
    c1, c2 = st.columns(2)
    c1.text_input("cluster name", value=cluster.get("name", "cluster"),
                  **session.edits_state(session.fresh_key("cluster_name"), _named))
    if isinstance(cluster.get("network"), dict):
        network = cluster["network"]
        c2.markdown(f"**Network** from the cluster file: {len(network.get('switches') or [])} switches, "
                    f"{len(network.get('links') or [])} links; traffic between pools follows its widest path.")
        c2.button("Drop the network section (use a bandwidth between pools)", on_click=_drop_network,
                  help="each pool keeps its links' bandwidth as its network Gb/s per node, and the slowest "
                       "path between two pools becomes the bandwidth between pools")
        return
    c2.number_input("between pools, Gb/s per node (empty: the slower pool's network)", min_value=1.0,
                    value=float(between) if between else None, format="%g",     # "100", as in the pool table
                    **session.edits_state(session.fresh_key("between"), _between))


def model_label(model: Model) -> str:
    return f"{model.name} · {model_params(model) / 1e9:.1f} B parameters"


CUSTOM_DEFAULTS = {"id": "custom", "name": "custom", "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8,
                   "ffn": 14336, "vocab": 128256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope"}


def _custom_fields(model: str | dict) -> dict:
    return {**CUSTOM_DEFAULTS, **(model if isinstance(model, dict) else {})}


def _chosen_model(choice: str) -> dict:
    model = session.get().model
    return {"model": choice if choice != CUSTOM else _custom_fields(model), "plan": None}


def model_picker(current: str | dict) -> str | dict:
    """A catalog model id, or the fields of a custom architecture."""
    models = catalog().models
    options = list(models) + [CUSTOM]
    choice = current if isinstance(current, str) and current in models else CUSTOM
    st.selectbox("model", options, index=options.index(choice),
                 format_func=lambda m: CUSTOM if m == CUSTOM else model_label(models[m]),
                 **session.edits_state(session.WIDGET_PREFIX + "model", _chosen_model))
    if choice != CUSTOM:
        return choice
    return custom_model(current)


def _custom_field(name: str, convert=str):
    return lambda value: {"model": {**_custom_fields(session.get().model), name: convert(value)}, "plan": None}


def custom_model(current: str | dict) -> dict:
    fields = _custom_fields(current)
    p = session.WIDGET_PREFIX + "custom."
    for col, name in zip(st.columns(6), ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")):
        col.number_input(name.replace("_", " "), min_value=1, step=1, value=int(fields[name]),
                         **session.edits_state(p + name, _custom_field(name, int)))
    c1, c2 = st.columns(2)
    for col, label, name, options in ((c1, "MLP", "mlp", ["swiglu", "gelu", "relu"]),
                                      (c2, "norm", "norm", ["rmsnorm", "layernorm"])):
        col.selectbox(label, options, index=options.index(fields[name]),
                      **session.edits_state(p + name, _custom_field(name)))
    return fields


def model_facts(model: Model) -> None:
    n = model_params(model)
    c = st.columns(4)
    c[0].metric("parameters", f"{n / 1e9:,.2f} B")
    c[1].metric("weights (16-bit)", gib(n * 2))
    c[2].metric("training state", gib(n * BYTES_PER_PARAM_TRAINING),
                help="weights, fp32 gradients and Adam states: 18 bytes per parameter before sharding")
    c[3].metric("layers × hidden", f"{whole(model.layers)} × {whole(model.hidden)}")


@dataclass(frozen=True)
class JobInputs:
    global_batch: int
    seq_len: int
    precision: str
    tokens_to_train: float | None
    objective: str
    deadline_hours: float | None
    time_limit_s: float
    engine: str = AUTO
    tf32: bool | None = None
    job_kind: str = "pretrain"
    lora_rank: int = 16
    offload: str = "auto"
    context_parallel: str = CONTEXT_PARALLEL_AUTO
    expert_parallel: str = EXPERT_PARALLEL_AUTO


def engine_label(name: str) -> str:
    """"the best engine (default)", "hetplan runtime (runs every plan)", "Megatron-LM"."""
    return (ENGINE_CHOICES[name].title + (" (runs every plan)" if name == DEFAULT_ENGINE else "")
            + (" (default)" if name == AUTO else ""))


def engine_help() -> str:
    """Every engine and what it runs, as a Markdown list (the picker's help)."""
    return "The engine that will run the plan: the search plans only what it runs, and predicts each plan as it " \
           "runs it.\n\n" + "\n".join(f"- **{md(e.title)}**: {md(e.summary)}" for e in ENGINE_CHOICES.values())


def engine_picker(current: str) -> str:
    """The engine the search plans for, with its version and what it runs under the picker."""
    name = current if current in ENGINE_CHOICES else AUTO
    st.selectbox("engine (what will run the plan)", list(ENGINE_CHOICES), index=list(ENGINE_CHOICES).index(name),
                 format_func=engine_label, help=engine_help(),
                 **session.edits_state(session.WIDGET_PREFIX + "engine", lambda v: {"engine": v}))
    engine = ENGINE_CHOICES[name]
    if name == AUTO:
        st.caption(f"**{md(engine.title)}**: {md(engine.summary)}; the plan names its engine.")
        return name
    st.caption(f"**{md(engine.title)}**, pinned at {md(short_version(engine.version))}: {md(engine.summary)}.")
    return name


def precision_label(name: str) -> str:
    return {"auto": "auto (bf16, else fp16)", "fp8": "fp8 (FP8 GEMMs)"}.get(name, name)


def precision_help() -> str:
    return "\n".join(f"- **{md(name)}**: {md(text)}" for name, text in PRECISION_HELP.items())


TF32_LABELS = {None: "engine default", True: "on", False: "off"}


def tf32_picker(current: bool | None, engine: str, slot) -> bool | None:
    """fp32 only: TF32 matmuls as the engine does by default, on, or off."""
    default = "on" if ENGINE_CHOICES[engine].execution.tf32(None) else "off"
    current = current if current in TF32_CHOICES else None
    slot.selectbox("TF32 matmuls (fp32)", TF32_CHOICES, index=TF32_CHOICES.index(current),
                   format_func=lambda v: TF32_LABELS[v],
                   help=f"fp32 matmuls on TF32 tensor cores (about 8× the fp32 rate on Ampere and later, "
                        f"10-bit mantissa) or in full fp32. Engine default: {default} under "
                        f"{md(ENGINE_CHOICES[engine].title)}.",
                   **session.edits_state(session.WIDGET_PREFIX + "tf32", lambda v: {"tf32": v}))
    return current


ADAPTER_KINDS = ("lora", "qlora")


def _help_list(labels: dict, texts: dict) -> str:
    return "\n".join(f"- **{md(labels.get(name, name))}**: {md(text)}" for name, text in texts.items())


def training_inputs(state) -> None:
    """Job kind, the adapters' rank (LoRA, QLoRA), where the model states live (offload) and the
    sequence's split over GPUs (context parallelism) and the experts' over replicas (expert parallelism)."""
    p = session.WIDGET_PREFIX
    edits = session.edits_state
    c1, c2, c3, c4, c5 = st.columns(5)
    kind = state.job_kind if state.job_kind in JOB_KINDS else JOB_KINDS[0]
    c1.selectbox("job kind", JOB_KINDS, index=JOB_KINDS.index(kind), format_func=JOB_KIND_LABELS.get,
                 help="What is trained and what the GPUs store:\n\n" + _help_list(JOB_KIND_LABELS, JOB_KIND_HELP),
                 **edits(p + "job_kind", _job_kind))
    if kind in ADAPTER_KINDS:
        c2.number_input("LoRA rank", min_value=1, max_value=MAX_LORA_RANK, step=1, value=int(state.lora_rank),
                        help="the rank r of each adapter: r × (in + out) trained parameters per adapted matrix",
                        **edits(p + "lora_rank", lambda v: {"lora_rank": int(v)}))
    offload = state.offload if state.offload in OFFLOADS else OFFLOADS[0]
    c3.selectbox("offload (model states in CPU memory)", OFFLOADS, index=OFFLOADS.index(offload),
                 help="Where the optimizer states (and weights) live; offload needs an engine that runs it and "
                      "CPU memory on the nodes (`host_memory_gib` in the cluster file):\n\n"
                      + _help_list({}, OFFLOAD_HELP),
                 **edits(p + "offload", lambda v: {"offload": v}))
    context_parallel_picker(state, c4)
    expert_parallel_picker(state, c5)


CONTEXT_PARALLEL_CHOICES = (CONTEXT_PARALLEL_AUTO,) + tuple(str(2 ** k) for k in range(7))     # auto, 1 ... 64


def context_parallel_picker(state, slot) -> None:
    """Context parallelism: auto (the degrees the search tries for this job, named) or a fixed degree."""
    options = list(CONTEXT_PARALLEL_CHOICES)
    if state.context_parallel not in options:           # a degree from a link or a plan: 3, 128
        options.append(state.context_parallel)
    degrees = context_degrees(state)
    slot.selectbox("context parallel (GPUs per sequence)", options, index=options.index(state.context_parallel),
                   help=context_parallel_help(state, degrees),
                   **session.edits_state(session.WIDGET_PREFIX + "context_parallel",
                                         _one_of(options, "context_parallel")))
    slot.caption(_degree_caption(state.context_parallel, _auto_label(degrees),
                                 _plan_degree(state.plan, "context_parallel")))


def _one_of(options: list[str], name: str):
    """An `edits_state` change for a picker of `options`: a value that is none of them is left out. The
    browser sends a select box's value as its label, and keeps the label it showed last: a label that
    changed between runs ("auto (dense model: none)" before the model became Mixtral) would come back
    as the value itself. The labels are fixed now; this keeps any such text out of the state."""
    return lambda value: {name: value} if value in options else {}


def _plan_degree(plan: dict | None, name: str) -> int | None:
    """The plan on view's degree of `name` (plan file format), None without a plan or a readable one."""
    degree = plan.get(name, 1) if isinstance(plan, dict) else None
    return degree if isinstance(degree, int) and not isinstance(degree, bool) else None


def _degree_caption(setting: str, auto_text: str, on_view: int | None) -> str:
    """Under a degree picker: what auto does for this job (`auto_text`) where auto is chosen, and the
    plan on view's degree, the figure the plan uses."""
    parts = [auto_text] if setting in (CONTEXT_PARALLEL_AUTO, EXPERT_PARALLEL_AUTO) and auto_text else []
    if on_view is not None:
        parts.append(f"plan on view: {on_view}")
    return "; ".join(parts)


def _auto_label(degrees: list[int] | None) -> str:
    """What auto does for this job, under the picker (the option itself reads "auto" whatever the job,
    `_one_of`): "auto tries 1, 2, 4, 8"; "auto: no split for this job"; "" where the job does not build."""
    if not degrees:
        return ""
    if degrees == [1]:
        return "auto: no split for this job"
    return f"auto tries {', '.join(map(str, degrees))}"


def context_parallel_help(state, degrees: list[int] | None) -> str:
    """What context parallelism does, which engines run it, and what auto tries for this job."""
    limits = _cp_limits()
    when = (f"auto tries it for sequences of {limits[0]:,} tokens or more, keeping at least {limits[1]:,} tokens "
            "on each GPU" if limits else "tens of thousands of tokens")
    text = ("Context parallelism splits each sequence over N GPUs of a replica: each GPU holds and computes "
            "seq / N tokens, and attention passes the key/value chunks around a ring of the N GPUs. A replica "
            "then spans tp × N GPUs. It pays where the activations of long sequences fill memory "
            f"({when}). The sequence length must divide into 2 × N equal chunks.\n\n"
            f"Engines that run it: {md(', '.join(engines_with_context_parallel()))}.\n\n"
            "**auto**: the search tries each degree that suits this job, each a search of its own, and keeps "
            "the best answer; **1**: no split; **N**: that degree only.")
    if not degrees:
        return text
    if degrees != [1]:
        return text + f"\n\nFor this job auto will try {', '.join(map(str, degrees))}."
    if not ENGINE_CHOICES[state.engine].space.context_parallel:
        why = f"{md(ENGINE_CHOICES[state.engine].title)} has no context parallelism"
    elif limits and state.seq_len < limits[0]:
        why = f"the sequence is shorter than {limits[0]:,} tokens"
    else:
        why = "no split of this sequence suits it and the cluster"
    return text + f"\n\nFor this job auto will try 1 only: {why}."


def _cp_limits() -> tuple[int, int] | None:
    """The shortest sequence the search splits, and the fewest tokens it leaves a GPU (planner.search)."""
    # imported here, not at the top: the app's seam to the search (ui.planning.search_api)
    try:
        from planner.search.search import CP_MIN_SEQ_LEN, CP_MIN_TOKENS_PER_GPU
    except ImportError:
        return None
    return CP_MIN_SEQ_LEN, CP_MIN_TOKENS_PER_GPU


def expert_parallel_choices(state) -> list[str]:
    """auto, then each power of two dividing the model's experts (1 only for a dense model; up to
    16 where the model does not build), then the state's own degree where it is none of these."""
    try:
        experts = build_model(state.model).experts
    except InputError:
        experts = 16
    options = [EXPERT_PARALLEL_AUTO] + [str(2 ** k) for k in range(17) if experts % 2 ** k == 0]
    if state.expert_parallel not in options:            # a degree from a link or a plan: 3, 32
        options.append(state.expert_parallel)
    return options


def expert_parallel_picker(state, slot) -> None:
    """Expert parallelism: auto (the degrees the search tries for this job, named) or a fixed degree."""
    options = expert_parallel_choices(state)
    degrees = expert_degrees(state)
    dense = _is_dense(state)
    slot.selectbox("expert parallel (replicas per expert group)", options,
                   index=options.index(state.expert_parallel),
                   help=expert_parallel_help(state, degrees, dense),
                   **session.edits_state(session.WIDGET_PREFIX + "expert_parallel",
                                         _one_of(options, "expert_parallel")))
    slot.caption(_degree_caption(state.expert_parallel, _expert_auto_label(degrees, dense),
                                 _plan_degree(state.plan, "expert_parallel")))


def _is_dense(state) -> bool:
    try:
        return not build_model(state.model).is_moe
    except InputError:
        return False


def _expert_auto_label(degrees: list[int] | None, dense: bool) -> str:
    """What auto does for this job, under the picker: "auto tries 1, 2, 4, 8"; "auto: none, a dense
    model"; "auto: none for this job"; "" where the job does not build."""
    if dense:
        return "auto: none, a dense model"
    if not degrees:
        return ""
    if degrees == [1]:
        return "auto: none for this job"
    return f"auto tries {', '.join(map(str, degrees))}"


def expert_parallel_help(state, degrees: list[int] | None, dense: bool) -> str:
    """What expert parallelism does, which engines run it, and what auto tries for this job."""
    text = ("Expert parallelism shards a mixture-of-experts model's routed experts over N of a stage's "
            "data-parallel replicas: each replica holds experts / N of them, and each MoE layer sends its "
            "tokens to the replicas holding their experts and back (dispatch and combine all-to-alls). It "
            "uses no more GPUs, but every stage needs a multiple of N replicas, and N must divide the "
            "model's experts. Dense models have no experts to shard.\n\n"
            f"Engines that run it: {md(', '.join(engines_with_expert_parallel()))}.\n\n"
            "**auto**: the search tries each degree the engine runs for this model (powers of two up to "
            f"{_max_searched_ep()} dividing the experts), each a search of its own, and keeps the best answer; "
            "**1**: experts replicated on every replica; **N**: that degree only.")
    if dense:
        return text + "\n\nThis model is dense: auto will try 1 only."
    if not degrees:
        return text
    if degrees != [1]:
        return text + f"\n\nFor this job auto will try {', '.join(map(str, degrees))}."
    if not ENGINE_CHOICES[state.engine].space.expert_parallel:
        return text + f"\n\nFor this job auto will try 1 only: {md(ENGINE_CHOICES[state.engine].title)} has no " \
                      "expert parallelism."
    return text + "\n\nFor this job auto will try 1 only."


def _max_searched_ep() -> int:
    """The largest degree auto tries (planner.search.search.MAX_SEARCHED_EXPERT_PARALLEL)."""
    try:
        from planner.search.search import MAX_SEARCHED_EXPERT_PARALLEL
    except ImportError:
        return 16
    return MAX_SEARCHED_EXPERT_PARALLEL


def _objective(objective: str) -> dict:
    """The deadline counts only under the deadline objective (it would change the job's key for nothing)."""
    deadline = st.session_state.get(session.WIDGET_PREFIX + "deadline") if objective == "deadline" else None
    return {"objective": objective, "deadline_hours": deadline or None}


def _precision(precision: str) -> dict:
    return {"precision": precision, **({} if precision == Precision.FP32.value else {"tf32": None})}


def job_inputs(state) -> JobInputs:
    p = session.WIDGET_PREFIX
    edits = session.edits_state
    c1, c2, c3, c4 = st.columns(4)
    c1.number_input("global batch (sequences)", min_value=1, max_value=10_000_000, step=1, value=state.global_batch,
                    **edits(p + "batch", lambda v: {"global_batch": int(v), "plan": None}))
    c2.number_input("sequence length (tokens)", min_value=1, max_value=10_000_000, step=256, value=state.seq_len,
                    **edits(p + "seq", lambda v: {"seq_len": int(v), "plan": None}))
    c3.selectbox("precision", PRECISIONS, index=PRECISIONS.index(state.precision), format_func=precision_label,
                 help=precision_help(), **edits(p + "precision", _precision))
    engine_picker(state.engine)
    if state.precision == Precision.FP32.value:
        tf32_picker(state.tf32, state.engine, c4)
    training_inputs(state)
    c4, c5, c6, c7 = st.columns(4)
    if state.job_kind == "pretrain":
        c4.number_input("tokens to train (billions)", min_value=0.0, step=10.0,
                        value=(state.tokens_to_train or 0) / 1e9, help="0: leave out time and dollars to train",
                        **edits(p + "tokens", lambda v: {"tokens_to_train": v * 1e9 if v else None}))
    else:
        finetune_tokens(state, c4)
    c5.selectbox("objective", OBJECTIVES, index=OBJECTIVES.index(state.objective),
                 help="throughput: fastest; cost: cheapest per token; deadline: cheapest that finishes in time; "
                      "energy: fewest kWh per token (GPU board power)",
                 **edits(p + "objective", _objective))
    c6.number_input("deadline (hours)", min_value=0.0, step=24.0, value=state.deadline_hours or 0.0,
                    disabled=state.objective != "deadline", help="used with the deadline objective",
                    **edits(p + "deadline", lambda v: {"deadline_hours": v or None}))
    c7.number_input("search limit (CPU seconds)", min_value=1.0, max_value=MAX_TIME_LIMIT_S, step=10.0,
                    value=float(state.time_limit_s),
                    help="CPU time of the search, so a busy machine does not cut it shorter; each baseline "
                         f"gets {_baseline_share():.0%} of it. A search that reaches its limit answers with "
                         "its best plan and how far from optimal that can be, by the cost model.",
                    **edits(TIME_LIMIT_WIDGET, lambda v: {"time_limit_s": float(v)}))
    return JobInputs(global_batch=state.global_batch, seq_len=state.seq_len, precision=state.precision,
                     tokens_to_train=state.tokens_to_train, objective=state.objective,
                     deadline_hours=state.deadline_hours, time_limit_s=state.time_limit_s, engine=state.engine,
                     tf32=state.tf32, job_kind=state.job_kind, lora_rank=state.lora_rank, offload=state.offload,
                     context_parallel=state.context_parallel, expert_parallel=state.expert_parallel)


TIME_LIMIT_WIDGET = session.WIDGET_PREFIX + "time_limit"


def _job_kind(kind: str) -> dict:
    """A fine-tuning job does not train pretraining's tokens: moving between them, a token count still at the
    other's default takes this one's (epochs x a dataset for fine-tuning); one the user set stays."""
    state = session.get()
    finetune = FINETUNE_DATASET_TOKENS * state.epochs
    if kind != "pretrain" and state.tokens_to_train == PRETRAIN_TOKENS:
        return {"job_kind": kind, "tokens_to_train": finetune}
    if kind == "pretrain" and state.job_kind != "pretrain" and state.tokens_to_train == finetune:
        return {"job_kind": kind, "tokens_to_train": PRETRAIN_TOKENS}
    return {"job_kind": kind}


def _dataset_tokens(state) -> float:
    return (state.tokens_to_train or 0.0) / state.epochs


def finetune_tokens(state, slot) -> None:
    """Fine-tuning's tokens to train as epochs over a dataset (millions of tokens), side by side in `slot`."""
    left, right = slot.columns(2)
    left.number_input("dataset (million tokens)", min_value=0.0, step=10.0, value=_dataset_tokens(state) / 1e6,
                      help="the fine-tuning data's tokens (0: leave out time and dollars to train)",
                      **session.edits_state(session.WIDGET_PREFIX + "dataset",
                                            lambda v: {"tokens_to_train": v * 1e6 * session.get().epochs or None}))
    right.number_input("epochs", min_value=0.1, max_value=MAX_EPOCHS, step=1.0, value=float(state.epochs),
                       help="passes over the dataset (Hugging Face transformers' default: 3)",
                       **session.edits_state(session.WIDGET_PREFIX + "epochs", _epochs))


def _epochs(epochs: float) -> dict:
    state = session.get()
    tokens = _dataset_tokens(state) * epochs
    return {"epochs": float(epochs), "tokens_to_train": tokens or None}


def _baseline_share() -> float:
    return baseline_time_limit_s(DEFAULT_TIME_LIMIT_S) / DEFAULT_TIME_LIMIT_S
