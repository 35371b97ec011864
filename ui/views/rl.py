"""The RL page: a GRPO or PPO job on the cluster composed on Compose (or an example cluster); the best placement's step timeline by role
(generation, weight sync, reference, training; async overlap visible), where each role sits, and the
comparison with the colocated all-on-the-best-GPU baseline and the other shapes (planner.rl)."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import plotly.express as px
import streamlit as st

from catalog import cluster_from_dict, load_catalog
from catalog.formats import load_cluster_file
from planner.rl.report import roles_text
from planner.rl.search import search_rl
from planner.rl.workload import Algorithm, Mode, RlJob
from planner.types import InputError
from ui import session
from ui.budget import OverBudget
from ui.planning import bounded
from ui.numbers import counts_times, dollars, duration, factor, whole
from ui.views.common import grouped

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
COMPOSED = "the cluster on Compose"        # first: the cluster the other pages plan on
CLUSTERS = (COMPOSED, "rl/h100-l40s.yaml", "lab-mix.yaml", "h100-a100-v100-64.yaml", "a100-v100-16.yaml")
MODELS = ("llama-3-8b", "qwen2.5-7b", "llama-2-7b", "llama-2-13b")


@st.cache_data(show_spinner="searching placements…", max_entries=16)
def _search(cluster_file: str, model: str, kind: str, prompts: int, samples: int, prompt_len: int, response: int,
            longest: int, mode: str, reference: bool, composed: str = ""):
    job = (cluster_file, model, kind, prompts, samples, prompt_len, response, longest, mode, reference, composed)
    return bounded(_search_work, *job)


def _search_work(cluster_file: str, model: str, kind: str, prompts: int, samples: int, prompt_len: int,
                 response: int, longest: int, mode: str, reference: bool, composed: str = ""):
    catalog = load_catalog([])
    cluster = (cluster_from_dict(json.loads(composed), catalog, source="cluster") if cluster_file == COMPOSED
               else load_cluster_file(EXAMPLES / cluster_file, catalog))
    job = RlJob(catalog.model(model), Algorithm(kind), prompts, samples, prompt_len, response, max(longest, response),
                mode=Mode(mode), reference=reference)
    return search_rl(cluster, job)


def _job_inputs() -> dict:
    c1, c2, c3, c4 = st.columns(4)
    return dict(
        cluster_file=c1.selectbox("Cluster", CLUSTERS, key="w.rl.cluster",
                                  format_func=lambda c: c if c == COMPOSED else f"example: {c}",
                                  help=f"the cluster on Compose is now {session.get().cluster.get('name', 'unnamed')}; "
                                       "the examples are files under examples/"),
        model=c1.selectbox("Model", MODELS, key="w.rl.model"),
        kind=c2.radio("Algorithm", ("grpo", "ppo"), horizontal=True, key="w.rl.kind"),
        mode=c2.radio("Mode", ("sync", "async"), horizontal=True, key="w.rl.mode"),
        reference=c2.checkbox("Reference model (KL)", True, key="w.rl.reference"),
        prompts=c3.number_input("Prompts per step", 1, 100_000, 512, key="w.rl.prompts"),
        samples=c3.number_input("Samples per prompt", 1, 1024, 8, key="w.rl.samples"),
        prompt_len=c4.number_input("Prompt tokens", 1, 131_072, 512, key="w.rl.prompt_len"),
        response=c4.number_input("Mean response tokens", 1, 131_072, 2048, key="w.rl.response"),
        longest=c4.number_input("Longest response tokens", 1, 131_072, 2048, key="w.rl.longest"),
    )


def timeline_frame(est) -> pd.DataFrame:
    return pd.DataFrame([{"lane": p.where, "phase": p.name, "role": p.role, "start_s": p.start_s,
                          "end_s": p.end_s, "seconds": p.duration_s} for p in est.phases])


def timeline_chart(frame: pd.DataFrame):
    base = pd.Timestamp(0)
    f = frame.assign(start=base + pd.to_timedelta(frame.start_s, unit="s"),
                     end=base + pd.to_timedelta(frame.end_s, unit="s"))
    fig = px.timeline(f, x_start="start", x_end="end", y="lane", color="phase", hover_data=["seconds"])
    hours = frame.end_s.max() >= 3600          # %M alone would start again at 00 after an hour
    fig.update_layout(height=260, xaxis_title=f"time into the step ({'h:' if hours else ''}min:s)",
                      margin=dict(t=10, b=10))
    fig.update_xaxes(tickformat="%H:%M:%S" if hours else "%M:%S")
    return fig


def _candidates_frame(result) -> pd.DataFrame:
    rows = []
    for c in result.candidates:
        e = c.estimate
        rows.append({"shape": c.plan.shape.value, "GPUs": ", ".join(f"{whole(n)} {p}" for p, n in e.gpus_by_pool.items()),
                     "step": duration(e.step_time_s), "samples/s": f"{e.samples_per_s:,.2f}",
                     "$ per step": dollars(e.dollars_per_step),
                     "baseline": "yes" if result.baseline is not None and c is result.baseline else ""})
    return pd.DataFrame(rows)


def render() -> None:
    st.title("RL post-training")
    st.caption("GRPO or PPO: where rollout, reference and training run, and what a step costs (docs/rl.md).")
    inputs = _job_inputs()
    if inputs["cluster_file"] == COMPOSED:
        inputs["composed"] = json.dumps(session.get().cluster, sort_keys=True)
    try:
        result = _search(**inputs)
    except (InputError, OverBudget) as e:
        st.error(str(e))
        return
    best = result.best
    e = best.estimate
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Step time", duration(e.step_time_s))
    c2.metric("Samples / s", f"{e.samples_per_s:,.2f}")
    c3.metric("Tokens / s", whole(e.tokens_per_s))
    c4.metric("Dollars / step", dollars(e.dollars_per_step))
    st.subheader(f"Best: {best.plan.shape.value}, {best.plan.job.mode.value}")
    st.plotly_chart(timeline_chart(timeline_frame(e)), use_container_width=True)
    st.subheader("Where each role sits")
    st.code("\n".join(counts_times(line.strip()) for line in roles_text(best.plan)), language=None)
    st.subheader("Against the baselines")
    if result.baseline is None:
        st.info(f"The colocated baseline on {result.baseline_pool} does not run.")
    else:
        b = result.baseline.estimate
        st.write(f"Colocated on {result.baseline_pool} (the best GPU): step {duration(b.step_time_s)}, "
                 f"{dollars(b.dollars_per_step)} per step; the best placement is "
                 f"{factor(b.step_time_s / e.step_time_s)} its samples per second.")
    candidates = _candidates_frame(result)
    st.dataframe(candidates, hide_index=True, column_config=grouped(candidates))
    for note in e.notes:
        st.caption(note)
