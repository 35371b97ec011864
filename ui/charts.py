"""Chart builders: a DataFrame in, a Plotly figure out. No Streamlit here, so the report and
tests can call them too."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from ui.numbers import layer_range

STAGE_COLOURS = qualitative.Plotly + qualitative.D3 + qualitative.Safe
IDLE_COLOUR = "#d5d8e0"
KIND_COLOURS = {"forward": "#4f46e5", "backward": "#f59e0b", "p2p": "#10b981"}
MEMORY_COLOURS = {"weights": "#4f46e5", "gradients": "#818cf8", "optimizer": "#f59e0b",
                  "activations": "#10b981", "overhead": "#94a3b8"}
ROLE_COLOURS = {"plan": "#4f46e5", "pareto": "#10b981", "baseline": "#dc2626", "current": "#f59e0b"}
ROLE_SYMBOLS = {"plan": "circle", "pareto": "diamond", "baseline": "x", "current": "star"}
FONT = dict(family="Inter, Segoe UI, Helvetica, Arial, sans-serif", size=13)


def stage_colour(stage) -> str:
    if stage is None or pd.isna(stage):
        return IDLE_COLOUR
    return STAGE_COLOURS[int(stage) % len(STAGE_COLOURS)]


MAX_TOP_LEGEND_ENTRIES = 8     # a row of them fits beside the title on a wide page; more wrap over it


def _layout(fig: go.Figure, title: str, height: int, **kw) -> go.Figure:
    """Title, size and theme; the legend in a row above the plot, or where it has more entries than fit
    beside the title (24 stages), in a column at the right, where it cannot cover the title."""
    entries = len({t.legendgroup or t.name for t in fig.data if t.showlegend is not False and t.name})
    legend = (dict(orientation="h", yanchor="bottom", y=1.0, xanchor="right", x=1)
              if entries <= MAX_TOP_LEGEND_ENTRIES else dict(orientation="v", yanchor="top", y=1.0, x=1.02))
    fig.update_layout(title=dict(text=title, x=0, font=dict(size=15)), height=height, font=FONT,
                      template="plotly_white", margin=dict(l=10, r=10, t=50, b=10), legend=legend, **kw)
    # numbers on the axes as the pages write them (ui.numbers): "120,000", not "120k"; "1,400", not "1400"
    fig.for_each_xaxis(lambda axis: axis.update(tickformat=",") if axis.tickformat is None else None)
    fig.for_each_yaxis(lambda axis: axis.update(tickformat=",") if axis.tickformat is None else None)
    return fig


def cluster_grid(gpus: pd.DataFrame) -> go.Figure:
    """Each node a row of squares, one per GPU, coloured by the stage it runs (grey: idle).
    Columns: pool, gpu_type, node, gpu, stage, replica; optional row (the row's label, see
    frames.collapse_nodes)."""
    df = gpus.copy()
    if "row" not in df:
        df["row"] = df["pool"] + " · node " + df["node"].astype(str)
    rows = list(dict.fromkeys(df["row"]))
    fig = go.Figure()
    for stage, part in df.groupby(df["stage"].fillna(-1), sort=True):
        idle = stage == -1
        label = "idle" if idle else f"stage {int(stage)}"
        hover = [f"{r.pool} ({r.gpu_type}) node {r.node} GPU {r.gpu}<br>"
                 + ("idle" if idle else f"stage {int(r.stage)}, replica {int(r.replica)}")
                 for r in part.itertuples()]
        fig.add_trace(go.Scatter(
            x=part["gpu"], y=part["row"], mode="markers", name=label, hovertext=hover, hoverinfo="text",
            marker=dict(symbol="square", size=22, color=IDLE_COLOUR if idle else stage_colour(stage),
                        # alternate replicas lighter, so each tensor-parallel group reads as one block
                        opacity=[1.0 if idle or int(r) % 2 == 0 else 0.6 for r in part["replica"].fillna(0)],
                        line=dict(width=1, color="white"))))
    fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], title=None)
    fig.update_xaxes(title="GPU in node", dtick=1, showgrid=False, zeroline=False)
    return _layout(fig, "Cluster: GPUs coloured by pipeline stage", max(220, 34 * len(rows) + 110))


def pipeline(groups: pd.DataFrame, num_layers: int) -> go.Figure:
    """Stages as bars over the model's layers, one bar per group of identical replicas, labelled
    with pool, tp (× cp), replica count and share of the batch. Columns: stage, layer_start, layer_end,
    pool, gpu_type, tp, samples, replicas, share; optional cp (context-parallel degree, 1 without)."""
    fig = go.Figure()
    labels = []
    for row in groups.itertuples():
        reps = f"{row.replicas} replica{'s' if row.replicas > 1 else ''}"
        span = layer_range(row.layer_start, row.layer_end)      # narrow bars hide their text
        cp = int(getattr(row, "cp", 1))
        width = f"tp{row.tp}" if cp == 1 else f"tp{row.tp}×cp{cp} ({row.tp * cp} GPUs)"
        y = f"stage {row.stage} · {span} · {row.replicas}× {row.pool} {width} · {row.samples} samples each"
        labels.append(y)
        fig.add_trace(go.Bar(
            y=[y], x=[row.layer_end - row.layer_start], base=[row.layer_start], orientation="h",
            marker=dict(color=stage_colour(row.stage)),
            text=layer_range(row.layer_start, row.layer_end),
            textposition="inside", insidetextanchor="middle", showlegend=False,
            hovertemplate=f"stage {row.stage}: {layer_range(row.layer_start, row.layer_end)}<br>"
                          f"{reps} on {row.pool} ({row.gpu_type}), tp {row.tp}"
                          + ("" if cp == 1 else f" × cp {cp} = {row.tp * cp} GPUs each") + "<br>"
                          f"{row.samples} samples each, {row.share:.0%} of the batch<extra></extra>"))
    order = list(dict.fromkeys(labels))
    fig.update_yaxes(categoryorder="array", categoryarray=order[::-1], title=None)
    fig.update_xaxes(title="transformer layer", range=[0, num_layers])
    return _layout(fig, "Pipeline: layer ranges, pools, tensor parallelism and batch shares",
                   max(200, 42 * len(order) + 100), barmode="overlay",
                   uniformtext=dict(minsize=10, mode="hide"))


PHASE_COLOURS = {"warm-up": KIND_COLOURS["forward"], "forwards": KIND_COLOURS["forward"],
                 "steady 1F1B": "#7c3aed", "cool-down": KIND_COLOURS["backward"], "backwards": KIND_COLOURS["backward"]}
FADED = 0.25          # opacity of the passes of micro-batches outside a detail window


def time_unit(longest_s: float) -> tuple[str, float]:
    """Seconds for an iteration of 10 s or more, else milliseconds: (unit, factor from seconds)."""
    return ("s", 1.0) if longest_s >= 10 else ("ms", 1e3)


def _workers(df: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    label = "stage " + df["stage"].astype(str) + " · r" + df["replica"].astype(str)
    order = df.assign(label=label).sort_values(["stage", "replica"], kind="stable")["label"]
    return label, list(dict.fromkeys(order))


def timeline(events: pd.DataFrame, x_range_s: tuple[float, float] | None = None,
             title: str = "One iteration: forward, backward and transfers per pipeline worker",
             unit_for_s: float | None = None) -> go.Figure:
    """Gantt chart of (part of) one iteration, one bar per pass; gaps between bars are pipeline
    bubbles. Columns: stage, replica, micro_batch, chunk, kind (forward/backward/p2p), start, end
    (s); optional in_window (bool: passes of the micro-batches a detail window follows; the
    others are drawn faded). `x_range_s` fixes the time axis (a window's span); the unit (s or
    ms) is that of `unit_for_s` seconds (the whole pipeline's, so that every view of a plan
    reads in one unit), by default of the longest time drawn."""
    df = events.copy()
    df["worker"], workers = _workers(df)
    longest_s = unit_for_s or (x_range_s[1] if x_range_s else (float(df["end"].max()) if len(df) else 0.0))
    unit, scale = time_unit(longest_s)
    focus = df["in_window"] if "in_window" in df else pd.Series(True, index=df.index)
    fig = go.Figure()
    for kind in ("forward", "backward", "p2p"):
        for mine in (True, False):
            part = df[(df["kind"] == kind) & (focus == mine)]
            if part.empty:
                continue
            name = "communication (p2p)" if kind == "p2p" else kind
            fig.add_trace(go.Bar(
                y=part["worker"], x=(part["end"] - part["start"]) * scale, base=part["start"] * scale,
                orientation="h", name=name if mine else f"{name}, other micro-batches", legendgroup=kind,
                opacity=1.0 if mine else FADED,
                marker=dict(color=KIND_COLOURS[kind], line=dict(width=0.5, color="white")),
                customdata=part[["micro_batch", "chunk"]].to_numpy(),
                width=0.45 if kind == "p2p" else 0.8,
                hovertemplate=f"{kind}<br>micro-batch %{{customdata[0]}} chunk %{{customdata[1]}}"
                              f"<br>from %{{base:,.4g}} {unit}, %{{x:,.3g}} {unit} long<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=workers[::-1], title=None)
    fig.update_xaxes(title=f"time in the iteration ({unit})",
                     range=[x_range_s[0] * scale, x_range_s[1] * scale] if x_range_s else None)
    return _layout(fig, title, max(260, 26 * len(workers) + 120), barmode="overlay", bargap=0.15)


def _phase_text(row) -> str:
    parts = [f"{row.forwards:,} F" if row.forwards else "", f"{row.backwards:,} B" if row.backwards else ""]
    return " + ".join(p for p in parts if p)


def timeline_phases(table: pd.DataFrame, pipeline_s: float, x_range_s: tuple[float, float] | None = None) -> go.Figure:
    """One iteration with what repeats drawn once: per worker a block for each phase (warm-up,
    steady 1F1B, cool-down; GPipe: forwards, backwards) from its first pass to its last, labelled
    with its passes; white before, between and after the blocks is pipeline bubble. Columns of
    ui.phases.phases: stage, replica, phase, start, end, forwards, backwards, busy_s,
    first_micro_batch, last_micro_batch, transfers, transfer_s. `x_range_s` fixes the time axis
    (to compare two plans on one scale)."""
    df = table.copy()
    df["worker"], workers = _workers(df)
    unit, scale = time_unit(x_range_s[1] if x_range_s else pipeline_s)
    df["text"] = [_phase_text(r) for r in df.itertuples()]
    ends = {(r.stage, r.replica, r.phase): r.text for r in df.itertuples() if r.phase in ("warm-up", "cool-down")}
    df["label"] = [(f"warm-up {ends[(r.stage, r.replica, 'warm-up')]} · " if (r.stage, r.replica, "warm-up") in ends else "")
                   + f"steady {r.text}"
                   + (f" · cool-down {ends[(r.stage, r.replica, 'cool-down')]}" if (r.stage, r.replica, "cool-down") in ends else "")
                   if r.phase == "steady 1F1B" else r.text for r in df.itertuples()]
    df["busy"] = df["busy_s"] / (df["end"] - df["start"]).where(lambda s: s > 0)
    fig = go.Figure()
    for phase, part in df.groupby("phase", sort=False):
        steady = phase == "steady 1F1B"
        fig.add_trace(go.Bar(
            y=part["worker"], x=(part["end"] - part["start"]) * scale, base=part["start"] * scale,
            orientation="h", name=phase, text=part["label"], textposition="inside", insidetextanchor="middle",
            marker=dict(color=PHASE_COLOURS.get(phase, "#64748b"), line=dict(width=1, color="white"),
                        pattern=dict(shape="/", fgcolor=KIND_COLOURS["backward"], size=8, solidity=0.3)
                        if steady else None),
            customdata=part[["first_micro_batch", "last_micro_batch", "busy", "transfers", "text"]].to_numpy(),
            width=0.8,
            hovertemplate=f"{phase}: %{{customdata[4]}}<br>micro-batches %{{customdata[0]}}–%{{customdata[1]}}"
                          f"<br>%{{base:,.1f}} {unit}, %{{x:,.1f}} {unit} long, busy %{{customdata[2]:.0%}}"
                          "<br>%{customdata[3]:,} transfers in<extra></extra>"))
    fig.update_yaxes(categoryorder="array", categoryarray=workers[::-1], title=None)
    fig.update_xaxes(title=f"time in the iteration ({unit})",
                     range=[x_range_s[0] * scale, x_range_s[1] * scale] if x_range_s else [0, pipeline_s * scale])
    return _layout(fig, "One iteration in phases: warm-up, steady state and cool-down per pipeline worker",
                   max(260, 30 * len(workers) + 120), barmode="overlay",
                   uniformtext=dict(minsize=9, mode="hide"))


def memory(mem: pd.DataFrame) -> go.Figure:
    """Stacked GiB per GPU of each (group of) replica(s) against the GPU's capacity (black tick).
    Columns: stage, pool, gpu_type, tp, weights, gradients, optimizer, activations, overhead,
    total, capacity; optional replicas (a count, from `frames.memory_groups`)."""
    df = mem.copy()
    count = df["replicas"].map(lambda n: f" ×{n}" if n > 1 else "") if "replicas" in df else ""
    df["label"] = ("stage " + df["stage"].astype(str) + "<br>" + df["pool"] + " tp" + df["tp"].astype(str)
                   + count)
    fig = go.Figure()
    for kind, colour in MEMORY_COLOURS.items():
        fig.add_trace(go.Bar(x=df["label"], y=df[kind], name=kind, marker_color=colour,
                             hovertemplate=f"{kind}: %{{y:.1f}} GiB<extra></extra>"))
    fig.add_trace(go.Scatter(
        x=df["label"], y=df["capacity"], mode="markers", name="GPU capacity",
        marker=dict(symbol="line-ew-open", size=max(18, min(60, 500 // max(1, len(df)))), color="#111827",
                    line=dict(width=3, color="#111827")),
        hovertemplate="capacity %{y:.0f} GiB<extra></extra>"))
    over = df[df["total"] > df["capacity"]]
    if not over.empty:
        fig.add_trace(go.Scatter(x=over["label"], y=over["total"], mode="text", text=["over"] * len(over),
                                 textposition="top center", textfont=dict(color="#dc2626"), showlegend=False))
    fig.update_yaxes(title="GiB per GPU")
    fig.update_xaxes(title=None, tickangle=-30 if len(df) > 10 else 0)
    return _layout(fig, "Memory per GPU by stage and replica", 420, barmode="stack")


def figure(x: float) -> str:
    """Three significant digits without exponents: 1,580, 222, 12.5, 0.042."""
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{float(f'{x:.3g}'):g}" if abs(x) >= 1e-4 else "0"


def breakdown(terms: pd.DataFrame) -> go.Figure:
    """Where the iteration goes: exposed seconds per term. Columns: term, total_s, exposed_s."""
    df = terms[terms["exposed_s"] > 0].sort_values("exposed_s")
    longest_s = float(df["exposed_s"].max()) if len(df) else 0.0
    unit, scale = ("s", 1.0) if longest_s >= 10 else ("ms", 1e3)
    share = df["exposed_s"] / df["exposed_s"].sum() if len(df) else df["exposed_s"]
    text = [f"{figure(v * scale)} {unit} · {f:.0%}" for v, f in zip(df["exposed_s"], share)]
    fig = go.Figure(go.Bar(y=df["term"], x=df["exposed_s"] * scale, orientation="h", marker_color="#4f46e5",
                           text=text, textposition="outside", cliponaxis=False,
                           hovertemplate=f"%{{y}}: %{{x:,.1f}} {unit} exposed<extra></extra>"))
    fig.update_xaxes(title=f"{unit} per iteration on the critical worker (not hidden by overlap)",
                     range=[0, longest_s * scale * 1.2 or 1])   # room for the labels
    return _layout(fig, "Iteration time by term", max(220, 34 * len(df) + 100))


def _ring_on_view(fig: go.Figure, plans: pd.DataFrame, x: str, y: str) -> None:
    """A ring round the plan on view, its name above the ring (not under it)."""
    if "on_view" in plans and plans["on_view"].any():
        sel = plans[plans["on_view"]]
        fig.add_trace(go.Scatter(x=sel[x], y=sel[y], mode="markers+text", name="on view", hoverinfo="skip",
                                 text=sel["plan"], textposition="top center", textfont=dict(size=12, color="#111827"),
                                 marker=dict(symbol="circle-open", size=26, color="#111827", line=dict(width=2))))


def _labels_off_the_ring(plans: pd.DataFrame, labels: pd.Series) -> pd.Series:
    """The ring trace names the plan on view; its own marker stays unlabelled."""
    if "on_view" in plans:
        labels = labels.where(~plans["on_view"].astype(bool), "")
    return labels


LABEL_PRIORITY = {"current": 0, "baseline": 1, "pareto": 2, "plan": 3}


def point_labels(plans: pd.DataFrame, x: str, y: str, gap_x: float = 0.08, gap_y: float = 0.12) -> pd.Series:
    """Each point's name, or "" where it would print over a label already placed: the plan on
    view, baselines and the Pareto front are labelled first; hovering still names every point.
    A label needs `gap_x` or `gap_y` (fractions of the axes' ranges) from every placed one."""
    def unit(col):
        span = plans[col].max() - plans[col].min()
        return (plans[col] - plans[col].min()) / (span if span > 0 else 1)

    ux, uy = unit(x), unit(y)
    first = plans.get("on_view", pd.Series(False, index=plans.index)).astype(bool)
    rank = plans["role"].map(LABEL_PRIORITY).fillna(9) - first * 10
    placed, out = [], pd.Series("", index=plans.index, dtype=object)
    for i in rank.sort_values(kind="stable").index:
        if all(abs(ux[i] - px) >= gap_x or abs(uy[i] - py) >= gap_y for px, py in placed):
            out[i] = plans.at[i, "plan"]
            placed.append((ux[i], uy[i]))
    return out


def cost_vs_throughput(plans: pd.DataFrame) -> go.Figure:
    """$ per million tokens against tokens/s; the Pareto front joined by a line.
    Columns: plan, role (plan/pareto/baseline/current), tokens_per_s, usd_per_m_tokens; optional
    on_front (bool: joined by the front's line; default role == "pareto"), on_view (bool: ringed)."""
    fig = go.Figure()
    on_front = plans["on_front"] if "on_front" in plans else plans["role"] == "pareto"
    front = plans[on_front].sort_values("tokens_per_s")
    if len(front) > 1:
        fig.add_trace(go.Scatter(x=front["tokens_per_s"], y=front["usd_per_m_tokens"], mode="lines",
                                 line=dict(color="#94a3b8", dash="dot"), name="Pareto front", hoverinfo="skip"))
    labels = _labels_off_the_ring(plans, point_labels(plans, "tokens_per_s", "usd_per_m_tokens"))
    _role_points(fig, plans, "tokens_per_s", "usd_per_m_tokens", labels,
                 "%{customdata}<br>%{x:,.0f} tokens/s<br>$%{y:.3f} per M tokens<extra></extra>")
    _ring_on_view(fig, plans, "tokens_per_s", "usd_per_m_tokens")
    fig.update_xaxes(title="throughput (tokens/s) →  better")
    fig.update_yaxes(title="$ per million tokens ↓ better")
    return _layout(fig, "Cost against throughput", 420)


def _role_points(fig: go.Figure, df: pd.DataFrame, x: str, y: str, labels: pd.Series, hover: str) -> None:
    """One labelled marker trace per role (plan, baseline, pareto, current), in the roles' symbols."""
    for role, part in df.groupby("role", sort=False):
        fig.add_trace(go.Scatter(
            x=part[x], y=part[y], mode="markers+text", name=role,
            text=labels[part.index], customdata=part["plan"], textposition="top center", textfont=dict(size=11),
            marker=dict(symbol=ROLE_SYMBOLS.get(role, "circle"), size=13 if role != "current" else 18,
                        color=ROLE_COLOURS.get(role, "#64748b")),
            hovertemplate=hover))


def time_vs_dollars(plans: pd.DataFrame) -> go.Figure:
    """Time to train against total dollars. Columns: plan, role, train_days, train_cost_usd."""
    df = plans.dropna(subset=["train_days", "train_cost_usd"])
    fig = go.Figure()
    labels = _labels_off_the_ring(df, point_labels(df, "train_cost_usd", "train_days"))
    _role_points(fig, df, "train_cost_usd", "train_days", labels,
                 "%{customdata}<br>$%{x:,.0f}<br>%{y:.1f} days<extra></extra>")
    _ring_on_view(fig, df, "train_cost_usd", "train_days")
    fig.update_xaxes(title="total dollars to train ↓", tickprefix="$")
    fig.update_yaxes(title="days to train ↓")
    return _layout(fig, "Time to train against dollars", 400)


def compare_bars(plans: pd.DataFrame) -> go.Figure:
    """Side-by-side bars of throughput and $/M tokens. Columns: plan, tokens_per_s, usd_per_m_tokens."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens/s ↑", "$ per million tokens ↓"))
    colours = [STAGE_COLOURS[i % len(STAGE_COLOURS)] for i in range(len(plans))]
    fig.add_trace(go.Bar(x=plans["plan"], y=plans["tokens_per_s"], marker_color=colours, showlegend=False,
                         hovertemplate="%{x}: %{y:,.0f} tokens/s<extra></extra>"), 1, 1)
    fig.add_trace(go.Bar(x=plans["plan"], y=plans["usd_per_m_tokens"], marker_color=colours, showlegend=False,
                         hovertemplate="%{x}: $%{y:.3f}<extra></extra>"), 1, 2)
    return _layout(fig, "Plans side by side", 360)


def compare_breakdown(terms: pd.DataFrame) -> go.Figure:
    """Stacked exposed time per term for each plan. Columns: plan, term, exposed_s."""
    fig = go.Figure()
    tallest_s = float(terms.groupby("plan")["exposed_s"].sum().max()) if len(terms) else 0.0
    unit, scale = ("s", 1.0) if tallest_s >= 10 else ("ms", 1e3)
    for term, part in terms.groupby("term", sort=False):
        fig.add_trace(go.Bar(x=part["plan"], y=part["exposed_s"] * scale, name=term,
                             hovertemplate=f"{term}: %{{y:,.1f}} {unit}<extra></extra>"))
    fig.update_yaxes(title=f"{unit} per iteration")
    return _layout(fig, "Iteration time by term", 400, barmode="stack")


def narrow(fig: go.Figure, title: str) -> go.Figure:
    """`fig` for half the page's width: a shorter title, the legend under the plot."""
    fig.update_layout(title=dict(text=title), margin=dict(b=80),
                      legend=dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0))
    return fig


def fleet_allocation(gpus: pd.DataFrame) -> go.Figure:
    """GPUs each job holds, stacked by pool, with a bar for the idle GPUs. Columns: job, pool, gpus
    (the idle bar's job is "idle"); one colour per pool."""
    fig = go.Figure()
    jobs = list(dict.fromkeys(gpus["job"]))
    for i, (pool, part) in enumerate(gpus.groupby("pool", sort=False)):
        fig.add_trace(go.Bar(x=part["job"], y=part["gpus"], name=pool,
                             marker_color=STAGE_COLOURS[i % len(STAGE_COLOURS)],
                             hovertemplate=f"%{{x}}: %{{y}} {pool} GPUs<extra></extra>"))
    fig.update_xaxes(categoryorder="array", categoryarray=jobs, title=None)
    fig.update_yaxes(title="GPUs", rangemode="tozero")
    return _layout(fig, "GPUs per job, by pool", 380, barmode="stack")
