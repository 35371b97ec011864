"""Each formula stated once (docs/cost-model.md, "One statement of each formula"): the relaxations the
search's bounds take are held below the exact formula the cost model calls, on random inputs
(Hypothesis), and the functions the docs list as each formula's one place exist."""
from __future__ import annotations

import ast
import importlib
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.comm import ring_s_per_byte
from planner.dataparallel import (grad_sync_s, hybrid_zero_floor, pass_with_zero_floor_s, zero_backward_exposed_s,
                                  zero_exposed_s, zero_per_micro_batch_floor, zero_per_micro_batch_s)
from planner.schedule import (interleaved_in_flight, window_in_flight_ceiling, window_in_flight_floor,
                              window_in_flight_limit)
from planner.types import Objective
from tests.conftest import EXAMPLES

seconds = st.floats(0.0, 10.0, allow_nan=False)


@settings(max_examples=300)
@given(zero=st.integers(0, 3), weight_bytes=st.floats(1e3, 1e11), replicas=st.integers(1, 4096),
       gbps=st.floats(1.0, 3600.0), latency_us=st.floats(0.0, 50.0), grad_bytes=st.sampled_from((2, 4)),
       element_bytes=st.sampled_from((2.0, 4.0, 0.5)), trained=st.floats(0.001, 1.0), forward=seconds,
       backward=seconds, fetch=seconds, overlap=st.floats(0.0, 1.0), prefetch=st.booleans(),
       overlap_reduce=st.booleans(), layers=st.one_of(st.none(), st.integers(1, 128)))
def test_zero_pass_floor_at_most_the_exposed_zero_pass(zero, weight_bytes, replicas, gbps, latency_us, grad_bytes,
                                                       element_bytes, trained, forward, backward, fetch, overlap,
                                                       prefetch, overlap_reduce, layers):
    """pass_with_zero_floor_s over zero_per_micro_batch_floor (the bounds' tau) <= the pass plus what
    cost.evaluate and the fast score expose of zero_per_micro_batch_s: zero_exposed_s forward,
    zero_backward_exposed_s backward (any overlap in [0, 1], over any layers, the engine's prefetch and reduce
    overlap on or off)."""
    bw = gbps * 1e9 / 8
    exact_f, exact_b = zero_per_micro_batch_s(zero, weight_bytes, replicas, bw, latency_us * 1e-6, grad_bytes,
                                              element_bytes, trained)
    floor_f, floor_b = zero_per_micro_batch_floor(zero, weight_bytes, replicas, ring_s_per_byte(replicas, bw),
                                                  element_bytes, trained, grad_bytes)
    exposed_f = zero_exposed_s(exact_f + fetch, forward, overlap, layers)
    exposed_b = zero_backward_exposed_s(exact_f, exact_b, fetch, backward, overlap, layers, prefetch=prefetch,
                                        overlap_reduce=overlap_reduce)
    assert pass_with_zero_floor_s(forward, floor_f) <= (forward + exposed_f) * (1 + 1e-12)
    assert pass_with_zero_floor_s(backward, floor_b) <= (backward + exposed_b) * (1 + 1e-12)
    if overlap == 1.0 and layers is None and fetch == 0.0 and latency_us == 0 and prefetch and overlap_reduce:
        # nothing dropped: the whole pass is the window, and the floor is the price
        assert pass_with_zero_floor_s(backward, floor_b) == pytest.approx(backward + exposed_b, rel=1e-9)
    assert zero_exposed_s(exact_f, forward, overlap) >= 0.0


@settings(max_examples=300)
@given(zero=st.integers(0, 3), weight_bytes=st.floats(1e3, 1e11), group=st.integers(2, 64), groups=st.integers(1, 64),
       node_gbps=st.floats(10.0, 7200.0), ring_gbps=st.floats(1.0, 3600.0), latency_us=st.floats(0.0, 50.0),
       grad_bytes=st.sampled_from((2, 4)), element_bytes=st.sampled_from((2.0, 4.0)), trained=st.floats(0.001, 1.0))
def test_hybrid_zero_floor_at_most_what_evaluate_prices(zero, weight_bytes, group, groups, node_gbps, ring_gbps,
                                                        latency_us, grad_bytes, element_bytes, trained):
    """hybrid_zero_floor (the bounds' ZeRO collectives under the hybrid-shard knob) <= what planner.cost.evaluate
    and the fast score price: zero_per_micro_batch_s over the shard group on its link, then each rank's gradient
    shard all-reduced across the groups (grad_sync_s, ZeRO-0) on the ring."""
    node, ring, lat = node_gbps * 1e9 / 8, ring_gbps * 1e9 / 8, latency_us * 1e-6
    f, b = zero_per_micro_batch_s(zero, weight_bytes, group, node, lat, grad_bytes, element_bytes, trained)
    if zero >= 2 and groups > 1:
        b += grad_sync_s(0, weight_bytes / element_bytes / group * trained, groups, ring, lat, grad_bytes)
    floor_f, floor_b = hybrid_zero_floor(zero, weight_bytes, group * groups, group, node, ring, element_bytes, trained,
                                         grad_bytes)
    assert floor_f <= f * (1 + 1e-12) and floor_b <= b * (1 + 1e-12)
    if latency_us == 0:       # nothing dropped: the floor is the price
        assert (floor_f, floor_b) == pytest.approx((f, b), rel=1e-9)


def test_zero_exposure_one_body_for_numbers_and_arrays():
    compute, collective = np.array([0.1, 0.5, 2.0]), np.array([0.3, 0.3, 0.3])
    arrays = zero_exposed_s(collective, compute, 0.5)
    assert list(arrays) == [zero_exposed_s(float(c), float(t), 0.5) for c, t in zip(collective, compute)]
    assert type(zero_exposed_s(0.3, 0.1, 1.0)) is float
    assert list(pass_with_zero_floor_s(compute, collective)) == [pass_with_zero_floor_s(float(t), float(c))
                                                                 for t, c in zip(compute, collective)]


@settings(max_examples=500)
@given(replicas=st.integers(1, 64), position=st.integers(1, 64), own=st.integers(1, 512), data=st.data())
def test_in_flight_floor_and_ceiling_around_the_exact_limit(replicas, position, own, data):
    """window_in_flight_floor (the screen: the window's share as a float, position x from the end of a
    run of d replicas a stage) <= window_in_flight_limit (the cost model's memory, the fast score, the
    bounds' caps) <= window_in_flight_ceiling ((b7), (b9))."""
    total = data.draw(st.integers(own * replicas, own * replicas * 8))   # the m micro-batches, own of them each replica's
    window = position * replicas
    exact = window_in_flight_limit(window, own, total)
    share = replicas * own / total                                        # the screen's c
    assert window_in_flight_floor(position * share, own) <= exact <= window_in_flight_ceiling(window, own, total)
    arrays = window_in_flight_floor(np.array([position * share]), np.array([float(own)]))
    assert arrays[0] == window_in_flight_floor(position * share, own)


@given(p=st.integers(1, 64), v=st.integers(2, 8), own=st.integers(1, 512), data=st.data())
def test_interleaved_in_flight_one_body_for_numbers_and_arrays(p, v, own, data):
    i = data.draw(st.integers(0, p - 1))
    exact = interleaved_in_flight(p, i, v, own)
    assert interleaved_in_flight(np.array([p]), np.array([p]) - (p - i), v, np.array([float(own)]))[0] == exact
    assert interleaved_in_flight(p, p - 1, v, own) <= exact     # the last stage holds the fewest


@pytest.mark.parametrize("objective", list(Objective))
def test_fast_key_and_estimate_key_are_one_objective(catalog, objective):
    """objective.fast_key (time and price: the fast scores and bounds) and estimate_key (an estimate)
    state the objective twice, in two units; estimate_key_of_fast converts one into the other, and on an
    evaluated plan (no spot pools) they agree. Under the energy objective the search prices GPUs at
    their board power in kW (search.search), so the fast key's price is the plan's power / 1000."""
    from catalog import load_cluster_file, load_plan_file
    from planner.cost import evaluate
    from planner.search.objective import estimate_key, estimate_key_of_fast, fast_key
    from planner.types import Job
    cluster = load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog)
    plan = load_plan_file(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json", catalog)
    job = Job(plan.model, plan.global_batch, plan.seq_len, tokens_to_train=1e11)
    est = evaluate(cluster, plan, job.tokens_to_train)
    price = est.power_w / 1000 if objective == Objective.ENERGY else est.cost_per_hour_usd
    for deadline in (1e9, est.train_time_s / 3600 * 0.99):        # met, then missed by 1%
        fast = fast_key(objective, job, est.iteration_time_s, price, deadline)
        exact = estimate_key(objective, est, deadline)
        if exact == math.inf:
            assert fast == math.inf and objective == Objective.DEADLINE
        else:
            assert estimate_key_of_fast(objective, job, fast) == pytest.approx(exact, rel=1e-12)


# ----------------------------------------------------------------------------- the table of docs/cost-model.md

ROOT = EXAMPLES.parent
CODE = re.compile(r"`([^`]+)`")


def _formula_rows() -> list[list[str]]:
    text = (ROOT / "docs" / "cost-model.md").read_text()
    table = text.split("<!-- formulas:begin -->")[1].split("<!-- formulas:end -->")[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.strip().splitlines()[2:]]


def _functions(cells: list[str]) -> dict[str, object]:
    """The functions a row names: `planner.module.name`, and bare names in the same cell, of that module."""
    found = {}
    for cell in cells:
        module = None
        for name in CODE.findall(cell):
            if name.startswith("planner.") and "/" not in name:
                module_name, _, attr = name.rpartition(".")
                module = importlib.import_module(module_name)
            elif module is None or not name.isidentifier():
                continue
            else:
                attr = name
            assert hasattr(module, attr), f"docs/cost-model.md names {module.__name__}.{attr}, which does not exist"
            found[attr] = getattr(module, attr)
    return found


def _called(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))}


def test_each_formula_listed_exists_and_is_called_where_the_docs_say():
    rows = _formula_rows()
    assert len(rows) >= 9
    for formula, place, by_evaluate, by_search, relaxation in rows:
        functions = _functions([place, relaxation])
        assert functions, f"{formula}: no function named"
        for path in CODE.findall(by_evaluate + by_search):
            if path.endswith(".py"):
                assert _called(path) & set(functions), f"{formula}: {path} calls none of {sorted(functions)}"


# Restatements the table replaced, as they were written; each would state a formula a second time.
RESTATED = {
    "planner/cost.py": [r"max\(0\.0, z[fb] \+ fetch", r"max\(0\.0, dp_sync", r"act_bytes \* plan\.seq_len",
                        r"run\.layer_overhead_s", r"cluster\.pool\(name\)\.price_per_gpu_hour_usd"],
    "planner/search/score.py": [r"max\(0\.0, z[fb] \+ fetch", r"max\(0\.0, sync", r"act_bytes \* self\.job\.seq_len",
                                r"layer_overhead_s", r"price_per_gpu_hour_usd for"],
    "planner/search/bound.py": [r"max\(f, zf\)", r"ACT_BYTES \* ", r"def _in_flight", r"\* n / m \+ 1",
                                r"math\.floor\(free / "],
    "planner/search/screen.py": [r"np\.maximum\(per\.(fw|bw)", r"ACT_BYTES \* ", r"np\.ceil\([^)]*\(1 - 1e-12\)",
                                 r"\(v - 1\) \* p_stages", r"network_share_bw\(",
                                 r"np\.floor\(free / \(W \+"],
    "planner/compute.py": [r"act_bytes \* seq_len \* micro_batch"],
    "planner/placement.py": [r"min\(network_share_bw\(pool\.inter_node_bw_bytes_per_s"],
}


@pytest.mark.parametrize("path", sorted(RESTATED))
def test_no_restatement_comes_back(path):
    source = (ROOT / path).read_text()
    for pattern in RESTATED[path]:
        assert not re.search(pattern, source), f"{path} restates a formula of docs/cost-model.md's table: /{pattern}/"
