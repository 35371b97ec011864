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
