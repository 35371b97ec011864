"""Re-planning on a changed cluster (planner.replan, `hetplan replan`): the new plan uses only GPUs the
cluster still has, the switch is costed from the checkpoint and the nodes' networks, and whether it
pays off follows from the tokens still to train."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from catalog import load_catalog
from catalog.formats import check_plan_against_cluster, load_cluster_file, load_plan_file
from planner.flops import model_params
from planner.replan import RESTART_S, checkpoint_bytes, replan
from planner.search import SearchOptions
from tests.conftest import EXAMPLES, ROOT

LOST = EXAMPLES / "replan" / "lab-mix-one-a100-node-lost.yaml"
PLAN = EXAMPLES / "plans" / "lab-mix-llama-2-70b.json"
QUICK = SearchOptions(time_limit_s=10, baseline_time_limit_s=None)


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def test_a_lost_node_gives_a_plan_on_the_gpus_left_and_a_costed_switch(catalog):
    old, new = load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog), load_cluster_file(LOST, catalog)
    current = load_plan_file(PLAN, catalog)
    r = replan(new, current, 1e11, old, options=QUICK)
    check_plan_against_cluster(r.plan, new)                  # only GPUs the cluster still has
    assert r.plan.gpus_by_pool().get("a100", 0) <= 8 and r.estimate.fits
    assert r.current is None and "16 GPUs of pool 'a100' but it has 8" in r.why_not_current
    assert r.worth_switching and "cannot run" in r.reason
    # 70B parameters x (16-bit weights + 12 bytes of fp32 master and Adam moments)
    assert checkpoint_bytes(current) == pytest.approx(model_params(current.model) * 14)
    assert r.switch.seconds > RESTART_S and r.switch.dollars > 0
    assert any("pool a100: 16 -> 8 GPUs" == m for m in r.switch.moves)


def test_the_best_plan_on_an_unchanged_cluster_is_kept(catalog):
    cluster = load_cluster_file(LOST, catalog)
    first = replan(cluster, load_plan_file(PLAN, catalog), options=QUICK)
    again = replan(cluster, first.plan, 1e12, options=QUICK)
    assert again.plan == first.plan and not again.worth_switching
    assert again.switch.seconds == 0 and "still the best" in again.reason


def test_switching_pays_off_only_over_enough_tokens(catalog):
    """The example plan still runs on lab-mix; a faster plan exists there. Over 1e6 tokens the switch's
    minutes outweigh the gain, over 1e12 they do not."""
    cluster = load_cluster_file(EXAMPLES / "lab-mix.yaml", catalog)
    current = load_plan_file(PLAN, catalog)
    few, many = replan(cluster, current, 1e6, options=QUICK), replan(cluster, current, 1e12, options=QUICK)
    assert few.current is not None and few.estimate.tokens_per_s > few.current.tokens_per_s
    assert not few.worth_switching and many.worth_switching
    # durations people read: "1 M tokens take 12 s on the current plan and 2.0 min with the switch", not "0.0 h"
    assert few.reason.startswith("1 M tokens take") and " h " not in few.reason and "min" in few.reason
    assert many.reason.startswith("1 T tokens take") and " d " in many.reason


def test_replan_json_is_the_documented_object():
    out = subprocess.run([sys.executable, "-m", "planner", "replan", "--cluster", str(LOST), "--old-cluster",
                          str(EXAMPLES / "lab-mix.yaml"), "--plan", str(PLAN), "--tokens-remaining", "1e11",
                          "--time-limit", "10", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"plan", "metrics", "switch", "worth_switching"} <= set(data)
    assert {"seconds", "dollars", "moves"} <= set(data["switch"]) and data["worth_switching"] is True
    assert data["plan"]["format"] == "hetplan.plan/1" and data["metrics"]["fits"]
    bad = subprocess.run([sys.executable, "-m", "planner", "replan", "--cluster", str(LOST), "--plan", str(PLAN),
                          "--tokens-remaining", "-5"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "--tokens-remaining" in bad.stderr and "Traceback" not in bad.stderr
