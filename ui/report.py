"""A plan report as one HTML page (figures and tables) or Markdown (tables).

The HTML page is self-contained: plotly.js (about 4.8 MB) is embedded once, so its figures draw
offline and it loads nothing from the network."""
from __future__ import annotations

import html
from datetime import datetime, timezone

import pandas as pd
import plotly.graph_objects as go

from planner.engines import ENGINES
from planner.flops import model_params
from planner.report import spot_text
from planner.types import Cluster, Estimate, Plan
from ui import charts, frames, phases
from ui.engines import short_version
from ui.engines import title as engine_title
from ui.markup import md
from ui.numbers import count, dollars, duration, per_million_tokens, percent, whole

STYLE = """
body{font-family:Inter,Segoe UI,Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;color:#1f2430}
h1{color:#4f46e5}table{border-collapse:collapse;margin:1em 0;font-size:14px}
td,th{border:1px solid #d5d8e0;padding:4px 8px;text-align:right}th{background:#f4f5fb}
.caption{color:#5b6170;font-size:13px;margin:0.25em 0 1.5em;position:relative;z-index:1;max-width:100%;
overflow-wrap:anywhere}
.plotly-graph-div{max-width:100%}

"""


def precision_text(plan: Plan) -> str:
    """"bf16", "fp32 (TF32 on)": an fp32 plan's TF32 as its engine runs it."""
    if plan.precision.value != "fp32":
        return plan.precision.value
    return f"fp32 (TF32 {'on' if ENGINES[plan.engine].execution.tf32(plan.tf32) else 'off'})"


def summary_rows(cluster: Cluster, plan: Plan, est: Estimate) -> list[tuple[str, str]]:
    spot = spot_text(est)       # a plan on spot pools: its expected figures
    return [
        ("cluster", f"{cluster.name}: " + ", ".join(f"{whole(p.num_gpus)}× {p.gpu.id}" for p in cluster.pools)),
        ("model", f"{plan.model.name} ({model_params(plan.model) / 1e9:.1f} B parameters)"),
        ("job", f"{frames.plan_training_text(plan)}, global batch {whole(plan.global_batch)} × {whole(plan.seq_len)} tokens, "
                f"{precision_text(plan)}, micro-batch {plan.micro_batch}"),
        ("engine", f"{engine_title(plan.engine)} · {short_version(ENGINES[plan.engine].version)}: the plan is "
                   "predicted as this engine runs it"),
        ("plan", f"{count(plan.num_stages, 'stage')} on {count(plan.num_gpus, 'GPU')}, "
                 + (f"{frames.context_text(plan)}, " if plan.context_parallel > 1 else "")
                 + (f"{frames.expert_text(plan)}, " if plan.expert_parallel > 1 else "") + f"ZeRO {plan.zero_stage}, "
                 f"recompute {plan.recompute.value}, schedule {plan.schedule.value}"),
        ("throughput", f"{whole(est.tokens_per_s)} tokens/s"),
        ("MFU", percent(est.mfu, 1)),
        ("iteration time", duration(est.iteration_time_s)),
        ("cost", f"{dollars(est.cost_per_hour_usd)}/h, {per_million_tokens(est.cost_per_million_tokens_usd)} per "
                 "million tokens"),
        ("time to train", duration(est.train_time_s)),
        ("dollars to train", "-" if est.train_cost_usd is None else dollars(est.train_cost_usd)),
        ("energy", frames.energy_text(est)),
        *([("spot", spot)] if spot else []),
        ("fits in memory", "yes" if est.fits else f"NO: {est.oom}"),
        ("bottleneck", est.bottleneck),
    ]


def figures(cluster: Cluster, plan: Plan, est: Estimate) -> list[tuple[go.Figure, str]]:
    out = [
        (charts.cluster_grid(frames.collapse_nodes(frames.gpu_grid(cluster, plan))), "GPUs coloured by pipeline stage; grey: idle."),
        (charts.pipeline(frames.replica_groups(plan, cluster), plan.model.layers),
         "Layer ranges, pool, tensor parallelism and batch share of each stage replica."),
        (charts.memory(frames.memory_groups(frames.memory(est))), "Peak memory per GPU against capacity (black tick)."),
        (charts.breakdown(frames.breakdown(est)), "Exposed time per iteration term on the busiest worker."),
    ]
    if est.timeline is not None and len(est.timeline):
        out.insert(2, timeline_figure(est.timeline, plan.schedule.value == "gpipe", est.pipeline_time_s))
    return out


def timeline_figure(events: pd.DataFrame, gpipe: bool, pipeline_s: float) -> tuple[go.Figure, str]:
    """Every pass while there are few enough to read, else the phases; the first replicas of each stage."""
    drawn = events.merge(phases.workers_to_draw(events), on=["stage", "replica"])
    rows = drawn[["stage", "replica"]].drop_duplicates().shape[0]
    shown = "" if rows == events[["stage", "replica"]].drop_duplicates().shape[0] else \
        f" The first replicas of each stage ({rows} workers) are drawn."
    if drawn["kind"].isin(phases.PASSES).sum() <= phases.MAX_DETAIL_PASSES:
        return charts.timeline(drawn), "One iteration; white gaps are pipeline bubbles." + shown
    return (charts.timeline_phases(phases.phases(drawn, gpipe), pipeline_s),
            "One iteration in phases (warm-up, steady state, cool-down per worker, labelled with their forward "
            "and backward passes); white gaps are pipeline bubbles." + shown)


def stage_table(plan: Plan, cluster: Cluster) -> pd.DataFrame:
    """The Stages table as the Stages page shows it: layer ranges written once, inclusive (ui.numbers)."""
    return frames.replica_groups(plan, cluster).drop(columns=["layer_start", "layer_end"])


def to_html(cluster: Cluster, plan: Plan, est: Estimate, compared: pd.DataFrame | None = None) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>hetplan report: {html.escape(cluster.name)}"
             f"</title><style>{STYLE}</style></head><body>",
             f"<h1>hetplan plan report</h1><p>{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC</p>",
             "<table>" + "".join(f"<tr><th>{html.escape(k)}</th><td style='text-align:left'>{html.escape(v)}</td></tr>"
                                 for k, v in summary_rows(cluster, plan, est)) + "</table>"]
    if compared is not None and not compared.empty:
        parts += ["<h2>Plans compared</h2>", compared.to_html(index=False, border=0)]
    parts += ["<h2>Stages</h2>", stage_table(plan, cluster).to_html(index=False, border=0)]
    for k, (fig, text) in enumerate(figures(cluster, plan, est)):
        # plotly.js embedded once, before the first figure: the report works offline (no CDN)
        parts.append(fig.to_html(full_html=False, include_plotlyjs=k == 0))
        parts.append(f"<p class='caption'>{html.escape(text)}</p>")
    parts += ["<h2>Memory per GPU (GiB)</h2>", frames.memory(est).round(2).to_html(index=False, border=0),
              "</body></html>"]
    return "\n".join(parts)


def _md_table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table; text cells (names people chose among them) show as they are. A cell holds
    inline Markdown only (GFM): no escape of its first character ("69,553 tokens/s" reads so in the file)."""
    head = "| " + " | ".join(md(c, line_start=False) for c in df.columns) + " |"
    rule = "|" + "---|" * len(df.columns)
    body = ["| " + " | ".join(md(v, line_start=False) if isinstance(v, str) else str(v) for v in row) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def to_markdown(cluster: Cluster, plan: Plan, est: Estimate, compared: pd.DataFrame | None = None) -> str:
    lines = ["# hetplan plan report", "", _md_table(pd.DataFrame(summary_rows(cluster, plan, est),
                                                                 columns=["", "value"])), ""]
    if compared is not None and not compared.empty:
        lines += ["## Plans compared", "", _md_table(compared), ""]
    lines += ["## Stages", "", _md_table(stage_table(plan, cluster).round(3)), "",
              "## Memory per GPU (GiB)", "", _md_table(frames.memory(est).round(2)), "",
              "## Iteration time by term (s)", "", _md_table(frames.breakdown(est).round(4)), ""]
    return "\n".join(lines)
