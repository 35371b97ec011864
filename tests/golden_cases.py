"""Recorded outputs of the simulations, evaluate and the search bounds (tests/test_golden.py).

The faster planner.schedule, planner.cost and planner.search.bound/score were proved bit-for-bit equal
to the plain code they replaced (commit 7876cc8, the later FILL_SLACK change included) by copies of that
code kept in the tests; what those copies answered is now recorded instead, in tests/data/golden.json,
on fixed seeded cases: `python tests/data/make_golden.py` draws the cases (Hypothesis, derandomized),
works out each with the current code and writes both. tests/test_golden.py works every recorded case
out again and asserts each figure equal (==, not approx). After an intentional change to the cost model
or the bounds, rerun the script and review the diff of tests/data/golden.json before committing it."""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import random
from dataclasses import replace
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from catalog import cluster_from_dict, load_catalog, load_cluster_file, plan_from_dict, plan_to_dict
from planner import schedule
from planner.cost import evaluate
from planner.engines import REAL
from planner.search import search
from planner.search.bound import Bounds
from planner.search.links import Lane
from planner.search.score import Scorer, _in_flight_limits, _lane_s, _prefix_s, _window_s
from planner.search.space import INTERLEAVES, layout_families
from planner.types import Attention, InfeasibleError, InputError, Job, Objective, Offload, Recompute, Schedule
from tests import test_properties

GOLDEN = Path(__file__).resolve().parent / "data" / "golden.json"
REGENERATE = ("differs from the recorded output in tests/data/golden.json; if the change is intended, rerun "
              "`python tests/data/make_golden.py` and review the diff of tests/data/golden.json before committing")
KINDS = [(Schedule.ONE_F_ONE_B, 1), (Schedule.GPIPE, 1), (Schedule.ONE_F_ONE_B, 2), (Schedule.ONE_F_ONE_B, 3)]


def plain(x):
    """JSON-ready: dataclasses field by field, enums by value, tuples and arrays as lists, a DataFrame as
    its columns, row count and a checksum of its rows (floats by repr, which round-trips)."""
    if hasattr(x, "to_dict") and hasattr(x, "columns"):
        rows = [[repr(v.item() if hasattr(v, "item") else v) for v in row] for row in x.itertuples(index=False)]
        return {"columns": [str(c) for c in x.columns], "rows": len(rows),
                "sha256": hashlib.sha256(json.dumps(rows).encode()).hexdigest()}
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, dict):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [plain(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


def _outcome(run):
    """What a run answers, JSON-ready, or the error it raised."""
    try:
        return plain(run())
    except (InputError, InfeasibleError, AssertionError) as e:
        return {"error": type(e).__name__, "message": str(e)}


# ----------------------------------------------------------------------------- drawing the cases

def _collect(strategy, n: int) -> list:
    """n values of a strategy, the same on every run (derandomized, no database)."""
    out = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def take(x):
        out.append(x)
    take()
    return out


class _Draw:
    def __init__(self, draw):
        self.draw = lambda s, label=None: draw(s)


@st.composite
def _pipelines(draw, long: bool = False):
    """Random stages (tests/test_schedule-style lanes or unequal stages): replica counts, micro-batch shares
    that sum to one total, pass times (multiples of 1/16, ties included, or any floats) and a transfer delay
    per pair of workers (one of a few values, zero among them), as a table."""
    data = _Draw(draw)
    schedule_, v = draw(st.sampled_from(KINDS))
    lanes = True if long else draw(st.booleans())
    p = data.draw(st.integers(1, 4))
    if v > 1:
        p = max(p, 2)
    width = data.draw(st.integers(1, 3))
    replicas = [width] * p if lanes else [data.draw(st.integers(1, 3)) for _ in range(p)]
    unit = p if v > 1 else 1
    most = 2 * schedule.extrapolation_threshold(p) + 40 if long else 12
    per = data.draw(st.integers(1, max(1, most // unit)))
    total = per * unit * max(replicas)
    counts = []
    for d in replicas:
        cuts = sorted(data.draw(st.lists(st.integers(1, total // unit - 1), min_size=d - 1, max_size=d - 1,
                                         unique=True))) if d > 1 and total // unit > d else []
        if len(cuts) != d - 1:
            cuts = [total // unit * k // d for k in range(1, d)]
        bounds = [0] + cuts + [total // unit]
        counts.append([(b - a) * unit for a, b in zip(bounds, bounds[1:])])
    if long or lanes and data.draw(st.booleans()):
        counts = [list(counts[0]) for _ in range(p)]
    dyadic = data.draw(st.booleans())
    time_s = st.integers(1, 48).map(lambda x: x / 16) if dyadic else st.floats(0.05, 3.0)
    fwd = [[data.draw(time_s) for _ in c] for c in counts]
    bwd = [[data.draw(time_s) for _ in c] for c in counts]
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    choices = [0.0, 0.0625, 0.25] if dyadic else [0.0, rng.uniform(0.01, 0.3), rng.uniform(0.01, 0.3)]
    workers = [(i, r) for i in range(p) for r in range(len(counts[i]))]
    table = [[rng.choice(choices) for _ in workers] for _ in workers]
    return {"schedule": schedule_.value, "interleave": v, "counts": counts, "forward_s": fwd, "backward_s": bwd,
            "delay": table, "timeline": False if long else draw(st.booleans())}


@st.composite
def _varied_plans(draw):
    """A hand-built plan (tests.test_properties.plans_on) with knobs the search sets: an engine, a mixture
    of experts with expert parallelism, interleaving, context parallelism, offload, hybrid sharding,
    overlaps; each knob kept only where the plan stays valid."""
    cluster_dict = draw(test_properties.cluster_dicts())
    cluster = cluster_from_dict(cluster_dict, test_properties.CATALOG)
    plan = draw(test_properties.plans_on(cluster))
    changes = [dict(engine=draw(st.sampled_from(REAL + ("hetplan",))))]
    moe = test_properties.CATALOG.models["mixtral-8x7b"]
    if plan.model.layers == moe.layers and draw(st.booleans()):
        changes.append(dict(model=moe, expert_parallel=draw(st.sampled_from([1, 2, 4, 8]))))
    v, p, layers = draw(st.sampled_from([1, 2, 3])), plan.num_stages, plan.model.layers
    if v > 1 and p > 1 and layers % (p * v) == 0:
        replicas = tuple(replace(r, samples=r.samples * p) for r in plan.stages[0].replicas)
        changes.append(dict(global_batch=sum(r.samples for r in replicas), schedule=Schedule.ONE_F_ONE_B,
                            stages=tuple(replace(s, layer_start=k * layers // p, layer_end=(k + 1) * layers // p,
                                                 replicas=replicas) for k, s in enumerate(plan.stages))))
    changes.append(dict(interleave=v))
    changes.append(dict(context_parallel=draw(st.sampled_from([1, 2]))))
    changes.append(dict(offload=draw(st.sampled_from(list(Offload)))))
    changes.append(dict(hybrid_shard=draw(st.sampled_from([0, 1, 2]))))
    changes.append({name: draw(st.sampled_from([None, True, False]))
                    for name in ("overlap_grad_reduce", "overlap_param_gather", "prefetch")})
    changes.append(dict(tp_comm_overlap=draw(st.booleans())))
    for change in changes:
        try:
            plan = replace(plan, **change)
        except (InputError, ValueError):
            pass
    return {"cluster": cluster_dict, **_plan_fields(plan),
            "tokens": draw(st.sampled_from([None, 3e10])), "detail": draw(st.booleans()),
            "timeline": draw(st.booleans())}


_windows = st.tuples(st.integers(1, 12).flatmap(lambda p: st.tuples(
    st.lists(st.integers(1, 64), min_size=p, max_size=p),                      # own micro-batches
    st.lists(st.floats(1e-4, 10.0), min_size=p, max_size=p),                   # t
    st.lists(st.floats(0.0, 1.0), min_size=p, max_size=p),                     # forward share of t
    st.lists(st.floats(0.0, 0.5), min_size=p - 1, max_size=p - 1),             # round trips
    st.lists(st.integers(1, 16), min_size=p, max_size=p))),                    # replicas per stage
    st.sampled_from(INTERLEAVES), st.floats(0.0, 0.5), st.integers(1, 64))


KNOBS = {"engine": str, "tp_comm_overlap": bool, "overlap_grad_reduce": None, "overlap_param_gather": None,
         "prefetch": None, "hybrid_shard": int, "offload": Offload, "sequence_parallel": bool, "zero_stage": int,
         "context_parallel": int, "expert_parallel": int, "interleave": int, "schedule": Schedule,
         "recompute": Recompute, "expert_tensor_parallel": None, "attention": Attention, "tf32": None}


def _plan_fields(plan) -> dict:
    """The plan in the file format, with the knobs an engine may refuse apart (loading a plan file checks
    that its engine can run it, and evaluate answers for plans no engine runs too)."""
    knobs = {k: plain(getattr(plan, k)) for k in KNOBS}
    defaults = {f.name: f.default for f in dataclasses.fields(plan) if f.name in KNOBS}
    data = plan_to_dict(replace(plan, **defaults), test_properties.CATALOG)
    out = {"plan": data, "knobs": knobs}
    assert _plan(out) == plan, "the plan does not round-trip"
    return out


def _plan(case):
    plan = plan_from_dict(case["plan"], test_properties.CATALOG)
    return replace(plan, **{k: v if KNOBS[k] is None or v is None else KNOBS[k](v) for k, v in case["knobs"].items()})


def _search_plans() -> list[dict]:
    """The plans two searches answer with, their baselines' and each engine's best."""
    cases = []
    catalog = load_catalog()
    for name, model, batch, seq in [("a100-v100-16.yaml", "llama-2-7b", 64, 4096),
                                    ("h100-a100-v100-64.yaml", "mixtral-8x7b", 256, 4096)]:
        cluster = load_cluster_file(Path(__file__).resolve().parent.parent / "examples" / name, catalog)
        job = Job(catalog.model(model), batch, seq)
        result = search(cluster, job, Objective.THROUGHPUT, engines=REAL)
        plans = [sp.plan for sp in result.plans] + [sp.plan for sp in result.baselines.values() if sp is not None]
        plans += [r.plans[0].plan for r in result.by_engine.values() if not isinstance(r, str)]
        for k, plan in enumerate(plans):
            for detail in (True, False):
                cases.append({"example": name, **_plan_fields(plan), "tokens": job.tokens_to_train,
                              "detail": detail, "timeline": k == 0 and detail})
    return cases


def draw_cases() -> dict:
    return {
        "simulate": _collect(_pipelines(), 160),
        "full": _collect(_pipelines(), 60),
        "long": _collect(_pipelines(long=True), 25),
        "worker_order": [{"schedule": s.value, "p": p, "v": v, "n": n}
                         for p, v, n in [(1, 1, 5), (3, 1, 2), (4, 1, 9), (2, 2, 4), (3, 2, 7), (4, 3, 8), (4, 2, 3)]
                         for s in (Schedule.ONE_F_ONE_B, Schedule.GPIPE)],
        "evaluate": _collect(_varied_plans(), 100) + _search_plans(),
        "pipeline_bounds": [{"seed": s} for s in random.Random(7876).sample(range(10**6), 8)],
        "window_terms": [{"lane": list(map(list, c[0])), "v": c[1], "wrap": c[2], "extra": c[3]}
                         for c in _collect(_windows, 150)],
    }


# ----------------------------------------------------------------------------- working them out

def _pipeline_args(case):
    counts = case["counts"]
    index = {}
    for i, c in enumerate(counts):
        for r in range(len(c)):
            index[(i, r)] = len(index)
    table = case["delay"]

    def delay(i, r, i2, r2):
        return table[index[(i, r)]][index[(i2, r2)]]
    return counts, case["forward_s"], case["backward_s"], delay, Schedule(case["schedule"]), case["interleave"]


def run_simulate(case):
    counts, fwd, bwd, delay, s, v = _pipeline_args(case)
    return _outcome(lambda: schedule.simulate(counts, fwd, bwd, delay, s, v, case["timeline"]))


def run_full(case):
    """The event simulation (1F1B and GPipe) and the fixed-order one, with each pass's end."""
    counts, fwd, bwd, delay, s, v = _pipeline_args(case)
    out = {}
    if v == 1:
        out["events"] = _outcome(lambda: schedule._simulate_events(counts, fwd, bwd, delay, s, case["timeline"]))
    end = []
    out["static"] = _outcome(lambda: schedule._simulate_static(counts, fwd, bwd, delay, s, v, case["timeline"], end))
    out["pass_ends"] = plain(end)
    return out


def run_long(case):
    return run_simulate(case)


def run_worker_order(case):
    out = []
    for i in range(case["p"]):
        kind, chunk, index = schedule._worker_order(Schedule(case["schedule"]), case["v"], case["p"], i, case["n"])
        out.append([kind.tolist(), chunk.tolist(), index.tolist()])
    return out


_CLUSTERS: dict = {}


def run_evaluate(case):
    catalog = test_properties.CATALOG
    if "example" in case:
        if case["example"] not in _CLUSTERS:
            _CLUSTERS[case["example"]] = load_cluster_file(
                Path(__file__).resolve().parent.parent / "examples" / case["example"], load_catalog())
        cluster = _CLUSTERS[case["example"]]
    else:
        cluster = cluster_from_dict(case["cluster"], catalog)
    plan = _plan(case)
    return _outcome(lambda: evaluate(cluster, plan, case["tokens"], timeline=case["timeline"], detail=case["detail"]))


GPUS = ["h100-sxm", "a100-80gb-sxm", "a100-40gb-sxm", "v100-32gb-sxm", "l40s", "rtx-4090", "t4", "a10g"]
MODELS = ["opt-350m", "gpt3-1.3b", "llama-2-7b", "gpt3-6.7b", "llama-2-13b"]
ENGINES = ["hetplan", "megatron", "deepspeed", "fsdp", "torchtitan"]


def _bound_case(seed: int):
    rng = random.Random(seed)
    catalog = test_properties.CATALOG
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice((1, 2)), "gpus_per_node": rng.choice((2, 4, 8)),
              "inter_node_gbps": rng.choice((25, 100, 400))}
             for j, gpu in enumerate(rng.sample(GPUS, rng.choice((1, 2, 3))))]
    cluster = cluster_from_dict({"name": "random", "pools": pools, "between_pools_gbps": rng.choice((25, 100))},
                                catalog)
    engine = rng.choice(ENGINES)
    offload = rng.choice((Offload.NONE, Offload.NONE, Offload.OPTIMIZER)) if engine == "deepspeed" else Offload.NONE
    job = Job(catalog.model(rng.choice(MODELS)), rng.choice((8, 16, 32, 64)), rng.choice((1024, 2048, 4096)),
              engine=engine, offload=offload)
    return rng, cluster, job


def _bounds(every: dict) -> list:
    return [[mb, v, rc.value, zero, s] for (mb, v, rc, zero), s in sorted(every.items(), key=lambda kv: repr(kv[0]))]


def run_pipeline_bounds(case):
    """Every pipeline bound of up to 12 families, 3 orders each, even splits or not, each first-run setting,
    then with limits and a subset of the settings asked for (those as a checksum of the repr of the figures)."""
    rng, cluster, job = _bound_case(case["seed"])
    bounds = Bounds(Scorer(cluster, job))
    families = list(layout_families(cluster.pools, job.model, job.global_batch, partial=True, engine=job.engine))
    out = []
    for family in rng.sample(families, min(12, len(families))):
        for order in family.orders()[:3]:
            runs, most = family.runs(order), family.max_replicas_per_stage
            for even in (False, True):
                a = bounds.sharing(even)
                for fixed in sorted({None, 0, 1, len(runs)}, key=lambda f: -1 if f is None else f):
                    every = a.pipeline_s(runs, most, fixed=fixed)
                    out.append(_bounds(every))
                    for limit in sorted(set(every.values()))[::5]:
                        only = frozenset(k for k in every if rng.random() < 0.7) or None
                        got = _bounds(a.pipeline_s(runs, most, limit=limit, only=only, fixed=fixed))
                        out.append(hashlib.sha256(repr(got).encode()).hexdigest()[:16])
    return out


def run_window_terms(case):
    (own, t, share, x, replicas), v, wrap, extra = case["lane"], case["v"], case["wrap"], case["extra"]
    windows = [sum(replicas[i:]) for i in range(len(own))]
    m = max(own) + extra
    f = [ti * s for ti, s in zip(t, share)]
    lane = Lane(0, tuple(xi / 2 for xi in x), tuple(xi - xi / 2 for xi in x), wrap)
    limits = _in_flight_limits(v, m, own, windows)
    return [_lane_s(v, own, t, lane, limits), _window_s(v, own, t, x, wrap, limits), _prefix_s(own, t, x, v, f, limits)]


RUN = {"simulate": run_simulate, "full": run_full, "long": run_long, "worker_order": run_worker_order,
       "evaluate": run_evaluate, "pipeline_bounds": run_pipeline_bounds, "window_terms": run_window_terms}


def recorded() -> dict:
    return json.loads(GOLDEN.read_text())


def make() -> dict:
    cases = draw_cases()
    return {group: [{"case": case, "output": RUN[group](case)} for case in group_cases]
            for group, group_cases in cases.items()}
