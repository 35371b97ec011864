"""Energy and carbon (planner.energy): board power of the GPUs a plan uses over its iterations, and
the grid's carbon intensity per pool, in evaluate, its --json and the cluster format."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from catalog import cluster_from_dict, load_catalog
from catalog.formats import cluster_to_dict, load_cluster_file, load_plan_file
from planner.cost import evaluate
from planner.energy import J_PER_KWH
from planner.types import InputError
from tests.conftest import EXAMPLES, ROOT


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _lab(catalog, intensity=None):
    data = cluster_to_dict(load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog))
    if intensity is not None:
        for pool in data["pools"]:
            pool["grid_gco2_per_kwh"] = intensity
    return cluster_from_dict(data, catalog)


def test_energy_is_the_used_gpus_board_power_over_the_run(catalog):
    cluster = _lab(catalog)
    plan = load_plan_file(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json", catalog)
    est = evaluate(cluster, plan, tokens_to_train=1e9)
    power = sum(n * cluster.pool(name).gpu.power_w for name, n in plan.gpus_by_pool().items())
    assert est.power_w == power == 16 * 400 + 32 * 300          # A100 SXM 400 W, V100 SXM2 300 W
    tokens = plan.global_batch * plan.seq_len
    assert est.energy_per_million_tokens_kwh == pytest.approx(power * est.iteration_time_s / tokens * 1e6 / J_PER_KWH)
    assert est.train_energy_kwh == pytest.approx(power * est.train_time_s / J_PER_KWH)
    assert est.train_co2_kg is None                              # no grid intensity given
    green = evaluate(_lab(catalog, 50), plan, tokens_to_train=1e9)
    assert green.train_co2_kg == pytest.approx(green.train_energy_kwh * 50 / 1000)


def test_grid_intensity_is_a_cluster_field_checked_like_the_others(catalog):
    data = cluster_to_dict(_lab(catalog, 400))
    assert all(p["grid_gco2_per_kwh"] == 400 for p in data["pools"])
    assert cluster_from_dict(data, catalog) == _lab(catalog, 400)
    data["pools"][0]["grid_gco2_per_kwh"] = -1
    with pytest.raises(InputError, match="grid_gco2_per_kwh"):
        cluster_from_dict(data, catalog)


def test_evaluate_json_reports_energy(catalog):
    out = subprocess.run([sys.executable, "-m", "planner", "evaluate", "--cluster", str(EXAMPLES / "lab-mix.yaml"),
                          "--plan", str(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json"), "--tokens", "1e9", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    metrics = json.loads(out.stdout)
    assert metrics["power_w"] == 16000 and metrics["energy_per_million_tokens_kwh"] > 0
    assert metrics["train_energy_kwh"] > 0 and metrics["train_co2_kg"] is None


def test_the_energy_objective_ranks_by_kwh_per_token_and_reports_real_prices(catalog):
    """Searched as the cost objective with each GPU priced at its board power; the answer's dollars are
    the cluster's own. On lab-mix (A100s at $1.8/h and 400 W beside V100s at 300 W) no plan of the
    cost objective beats the energy answer on kWh per token, and vice versa on dollars."""
    from planner.search import SearchOptions, search
    from planner.types import Job, Objective
    cluster = _lab(catalog)
    job = Job(catalog.model("llama-2-7b"), 256, 4096)
    options = SearchOptions(time_limit_s=20)
    energy = search(cluster, job, Objective.ENERGY, options=options)
    cost = search(cluster, job, Objective.COST, options=options)
    best = energy.plans[0].estimate
    assert energy.objective == Objective.ENERGY
    assert best.cost_per_million_tokens_usd == pytest.approx(evaluate(cluster, energy.plans[0].plan)
                                                              .cost_per_million_tokens_usd)
    assert best.energy_per_million_tokens_kwh <= cost.plans[0].estimate.energy_per_million_tokens_kwh * (1 + 1e-9)
    assert cost.plans[0].estimate.cost_per_million_tokens_usd <= best.cost_per_million_tokens_usd * (1 + 1e-9)
    for name, gain in energy.plans[0].gain_over.items():
        base = energy.baselines[name].estimate
        assert gain == pytest.approx(base.energy_per_million_tokens_kwh / best.energy_per_million_tokens_kwh - 1)


def test_the_app_plans_for_the_energy_objective_and_shows_energy():
    from dataclasses import replace as with_
    from tests.app_helpers import new_app, ok, press_plan, shown, texts
    from ui.state import AppState, encode
    state = AppState(model="llama-2-7b", global_batch=64, seq_len=2048, objective="energy", time_limit_s=10)
    at = press_plan(ok(new_app(encode(state)).run()))
    said = shown(texts(at))
    assert "kWh per million tokens" in said and "Traceback" not in said
    assert at.session_state["app_state"].plan is not None
    assert with_(state, objective="cost").job_key() != state.job_key()
