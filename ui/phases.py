"""The simulated iteration (planner.schedule's timeline) read as phases and windows, for charts
that stay readable and fast at any number of micro-batches.

A worker (one replica of one stage) under 1F1B runs a warm-up of forward passes, a steady state
that alternates one forward with one backward, and a cool-down of backward passes (Narayanan et
al. 2021, section 2.2.1; interleaved 1F1B the same with chunks, section 2.2.2). Which pass belongs
to which phase is read from the order the simulator ran them in, not from a formula: the warm-up is
every forward before the worker's first backward except the last (which starts the steady state),
the cool-down every backward after its last forward except the first. GPipe runs all forwards, then
all backwards: its phases are those two. Whatever repeats is one block with its counts.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

WORKER = ["stage", "replica"]
PASSES = ("forward", "backward")
WARM_UP, STEADY, COOL_DOWN = "warm-up", "steady 1F1B", "cool-down"
FORWARDS, BACKWARDS = "forwards", "backwards"
PHASE_ORDER = (WARM_UP, STEADY, COOL_DOWN, FORWARDS, BACKWARDS)
MAX_DETAIL_PASSES = 2_000     # bars in one detailed chart: about 0.3 s to draw in Chromium (docs/app.md)


def _phase_of_passes(passes: pd.DataFrame, gpipe: bool) -> pd.Series:
    """Each pass's phase, from its position among its worker's passes (in the order they ran)."""
    if gpipe:
        return passes["kind"].map({"forward": FORWARDS, "backward": BACKWARDS})
    order = passes.groupby(WORKER, sort=False).cumcount()
    is_bwd = passes["kind"] == "backward"
    worker = [passes["stage"], passes["replica"]]
    first_bwd = order.where(is_bwd).groupby(worker).transform("min")
    last_fwd = order.where(~is_bwd).groupby(worker).transform("max")
    phase = pd.Series(STEADY, index=passes.index)
    phase[order < first_bwd - 1] = WARM_UP
    phase[order > last_fwd + 1] = COOL_DOWN
    return phase


def passes_of(events: pd.DataFrame) -> pd.DataFrame:
    """The forward and backward passes, each worker's in the order they ran."""
    passes = events[events["kind"].isin(PASSES)]
    return passes.sort_values(WORKER + ["start"], kind="stable")


def phases(events: pd.DataFrame, gpipe: bool) -> pd.DataFrame:
    """One row per worker and phase: start, end (s), forwards, backwards, busy_s (time in passes),
    first_micro_batch, last_micro_batch, transfers (activations and gradients received during it,
    each counted in the phase running when it arrived) and transfer_s."""
    passes = passes_of(events)
    passes = passes.assign(phase=_phase_of_passes(passes, gpipe), busy_s=passes["end"] - passes["start"],
                           is_fwd=passes["kind"] == "forward")
    grouped = passes.groupby(WORKER + ["phase"], sort=False)
    out = grouped.agg(start=("start", "min"), end=("end", "max"), forwards=("is_fwd", "sum"),
                      busy_s=("busy_s", "sum"), first_micro_batch=("micro_batch", "min"),
                      last_micro_batch=("micro_batch", "max"), passes=("kind", "size")).reset_index()
    out["backwards"] = out["passes"] - out["forwards"]
    out = out.sort_values(WORKER + ["start"], kind="stable").reset_index(drop=True)
    return _with_transfers(out, events[events["kind"] == "p2p"])


def _with_transfers(table: pd.DataFrame, p2p: pd.DataFrame) -> pd.DataFrame:
    """Transfers received by each worker, counted in the phase that had started when each arrived
    (one that arrives before the worker's first pass counts in its first phase)."""
    table = table.assign(transfers=0, transfer_s=0.0)
    if p2p.empty:
        return table
    arrivals = p2p.assign(t=p2p["end"], link_s=p2p["end"] - p2p["start"]).sort_values("t", kind="stable")
    starts = table.reset_index().rename(columns={"index": "row"})[WORKER + ["start", "row"]].sort_values("start")
    hit = pd.merge_asof(arrivals, starts, left_on="t", right_on="start", by=WORKER, direction="backward")
    first = table.reset_index().groupby(WORKER)["index"].min().rename("first_row").reset_index()
    hit = hit.merge(first, on=WORKER, how="left")
    rows = hit["row"].fillna(hit["first_row"]).dropna().astype(int)
    counts = rows.value_counts()
    seconds = hit.loc[rows.index, "link_s"].groupby(rows).sum()
    table.loc[counts.index, "transfers"] = counts.to_numpy()
    table.loc[seconds.index, "transfer_s"] = seconds.to_numpy()
    return table


def workers_to_draw(events: pd.DataFrame, per_stage: int | None = None, max_rows: int = 24) -> pd.DataFrame:
    """(stage, replica) of the first `per_stage` replicas of each stage; by default as many as keep
    the chart within `max_rows` rows (at least one a stage)."""
    workers = events[WORKER].drop_duplicates()
    if per_stage is None:
        per_stage = max(1, max_rows // max(1, workers["stage"].nunique()))
    return workers.groupby("stage").head(per_stage)


def micro_batch_count(events: pd.DataFrame) -> int:
    """Micro-batches in the iteration (their indices run from 0)."""
    return int(events["micro_batch"].max()) + 1 if len(events) else 0


@dataclass(frozen=True)
class Window:
    """The passes drawn in detail: those that overlap [start_s, end_s]; `in_window` marks the
    passes of micro-batches first..last (the others ran meanwhile). `cut` when the span held more
    than MAX_DETAIL_PASSES passes and ends earlier than the micro-batches' last pass."""
    events: pd.DataFrame
    first: int
    last: int
    start_s: float
    end_s: float
    cut: bool
    passes_in_span: int


def window(events: pd.DataFrame, first: int, last: int, kinds: tuple[str, ...] = PASSES,
           max_passes: int = MAX_DETAIL_PASSES) -> Window:
    """The detail of micro-batches first..last: from the first of their `kinds` of passes starting
    to the last ending, everything that ran (transfers too), at most `max_passes` passes (the span
    then ends where the next pass would start)."""
    mine = events[events["micro_batch"].between(first, last) & events["kind"].isin(kinds)]
    start_s, end_s = float(mine["start"].min()), float(mine["end"].max())
    shown = events[(events["end"] > start_s) & (events["start"] < end_s)]
    passes = shown[shown["kind"].isin(PASSES)]
    cut = len(passes) > max_passes
    if cut:
        end_s = float(passes["start"].nsmallest(max_passes + 1).iloc[-1])
        shown = shown[shown["start"] < end_s]
    shown = shown.assign(in_window=shown["micro_batch"].between(first, last))
    return Window(shown, first, last, start_s, end_s, cut, len(passes))


def suggested_windows(table: pd.DataFrame, total: int, gpipe: bool) -> dict[str, tuple[int, int, tuple[str, ...]]]:
    """Windows to jump to, by phase: name -> (first, last micro-batch, kinds of pass that set the span).
    The micro-batches of the warm-ups, as many from the middle of the steady state, and those of the cool-downs."""
    if gpipe:
        few = min(total, 8)
        return {"forwards (start)": (0, few - 1, ("forward",)),
                "backwards (end)": (total - few, total - 1, ("backward",))}
    warm, cool = table[table["phase"] == WARM_UP], table[table["phase"] == COOL_DOWN]
    width = min(total, max(8, int(warm["last_micro_batch"].max()) + 1 if len(warm) else 8))
    last_warm = width - 1
    first_cool = min(total - width, int(cool["first_micro_batch"].min())) if len(cool) else total - width
    middle = max(0, total // 2 - width // 2)
    return {WARM_UP: (0, last_warm, PASSES),
            STEADY: (middle, middle + width - 1, PASSES),
            COOL_DOWN: (first_cool, total - 1, PASSES)}


def worker_summary(table: pd.DataFrame, pipeline_s: float) -> pd.DataFrame:
    """Per worker: passes, time busy, and idle (pipeline bubbles: waiting for a neighbour)."""
    w = table.groupby(WORKER, sort=False).agg(forwards=("forwards", "sum"), backwards=("backwards", "sum"),
                                              busy_s=("busy_s", "sum"), transfers=("transfers", "sum")).reset_index()
    w["idle_s"] = (pipeline_s - w["busy_s"]).clip(lower=0.0)
    w["busy"] = w["busy_s"] / pipeline_s if pipeline_s > 0 else 0.0
    return w
