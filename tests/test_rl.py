"""RL post-training: workload, generation model, step consistency, search, CLI, plan JSON, verl export."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from benchmarks.rl_validation import table
from catalog.formats import load_cluster_file
from planner.flops import model_params
from planner.rl.generation import decode_step_s, generation, kv_capacity_tokens
from planner.rl.plan_file import rl_plan_from_dict, rl_plan_to_dict
from planner.rl.roles import Shape
from planner.rl.search import search_rl
from planner.rl.step import evaluate_rl
from planner.rl.workload import Algorithm, Mode, RlJob
from planner.types import InputError
from tests.conftest import EXAMPLES, ROOT

CLUSTER = str(EXAMPLES / "rl" / "h100-l40s.yaml")
DONE = ["plan", "--cluster", CLUSTER, "--model", "llama-3-8b", "--job-kind", "grpo", "--prompts-per-step", "512",
        "--samples-per-prompt", "8", "--prompt-len", "512", "--response-len", "2048"]
# generation model vs benchmarks/reference/inference_runs.csv (docs/rl.md): a roofline, so never below the
# published throughput, and at most this much above it
VALIDATION_OVER = 0.70


def hetplan(*args):
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


@pytest.fixture(scope="module")
def cluster(catalog):
    return load_cluster_file(CLUSTER, catalog)


def job(catalog, **kw):
    base = dict(model=catalog.model("llama-3-8b"), algorithm=Algorithm.GRPO, prompts_per_step=64,
                samples_per_prompt=8, prompt_len=512, response_len=1024, response_len_max=2048)
    base.update(kw)
    return RlJob(**base)


# ----------------------------------------------------------------------------- workload

@pytest.mark.parametrize("kw, field", [(dict(prompts_per_step=0), "prompts_per_step"),
                                       (dict(response_len_max=10), "response_len_max"),
                                       (dict(mini_batches=3), "mini_batches"),
                                       (dict(samples_per_prompt=2000), "samples_per_prompt")])
def test_workload_refuses_bad_fields(catalog, kw, field):
    with pytest.raises(InputError) as e:
        job(catalog, **kw)
    assert e.value.field == field


def test_workload_figures(catalog):
    j = job(catalog, algorithm=Algorithm.PPO, mini_batches=4)
    assert j.samples_per_step == 512 and j.mini_batch_samples == 128 and j.critic
    assert j.train_seq_len == 512 + 1024


# ----------------------------------------------------------------------------- generation model

def test_generation_validation_within_tolerance():
    for row, predicted, err in table():
        assert 0.0 <= err <= VALIDATION_OVER, (row["engine"], row["model"], predicted, err)


def test_decode_step_at_least_the_weight_read(catalog, cluster):
    m, pool = catalog.model("llama-3-8b"), cluster.pool("h100")
    one, _ = decode_step_s(m, pool, 1, 1, 1)
    assert one >= 2 * model_params(m) * 0.9 / pool.gpu.mem_bw_bytes_per_s
    many, _ = decode_step_s(m, pool, 1, 256, 2048)
    assert many > one                       # each sequence's KV cache is read too
    assert decode_step_s(m, pool, 2, 64, 1024)[1] > 0 == decode_step_s(m, pool, 1, 64, 1024)[1]


def test_generation_waits_for_the_longest(catalog, cluster):
    m, pool = catalog.model("llama-3-8b"), cluster.pool("l40s")
    short = generation(m, pool, 1, 64, 512, 1024, 1024, 8)
    long = generation(m, pool, 1, 64, 512, 1024, 4096, 8)
    assert short.steps == 1024 and long.steps == 4096 and long.time_s > short.time_s
    many = generation(m, pool, 1, 5000, 512, 1024, 4096, 8)
    assert many.batch < 5000 and many.steps >= 5000 * 1024 / many.batch


def test_kv_capacity_bounds_the_batch(catalog, cluster):
    m, pool = catalog.model("llama-3-8b"), cluster.pool("l40s")
    assert kv_capacity_tokens(m, pool, 1, resident_bytes=20 * 2**30) < kv_capacity_tokens(m, pool, 1)
    with pytest.raises(InputError, match="KV-cache tokens"):
        generation(catalog.model("llama-3-70b"), pool, 2, 8, 512, 1024, 2048)


# ----------------------------------------------------------------------------- step and search

@pytest.fixture(scope="module")
def result(catalog, cluster):
    return search_rl(cluster, job(catalog), training_time_limit_s=1.0)


def test_step_time_consistent_with_phases(result):
    for c in result.candidates:
        e = c.estimate
        assert e.longest_phase_s <= e.step_time_s + 1e-9 <= e.phase_sum_s + 2e-9
        if c.plan.shape != Shape.COLOCATED and c.plan.job.mode == Mode.SYNC:
            assert e.step_time_s == pytest.approx(e.phase_sum_s)


def test_async_overlaps_generation_with_training(catalog, cluster, result):
    apart = next(c for c in result.candidates if c.plan.shape == Shape.DISAGGREGATED)
    plan = replace(apart.plan, job=replace(apart.plan.job, mode=Mode.ASYNC))
    e = evaluate_rl(cluster, plan)
    gen = sum(p.duration_s for p in e.phases if p.where == "rollout GPUs")
    train = sum(p.duration_s for p in e.phases if p.where == "training GPUs")
    sync = sum(p.duration_s for p in e.phases if p.role == "sync")
    assert e.step_time_s == pytest.approx(max(gen, train) + sync)
    assert e.step_time_s < apart.estimate.step_time_s


def test_roles_use_only_the_clusters_gpus(cluster, result):
    for c in result.candidates:
        for pool, n in c.estimate.gpus_by_pool.items():
            assert n <= cluster.pool(pool).num_gpus


def test_ppo_adds_critic_phases(catalog, cluster, result):
    best = result.best.plan
    ppo = replace(best, job=replace(best.job, algorithm=Algorithm.PPO))
    names = [p.name for p in evaluate_rl(cluster, ppo).phases]
    assert "critic training" in names and "critic values" in names
    none = replace(best, job=replace(best.job, reference=False))
    assert "reference forward" not in [p.name for p in evaluate_rl(cluster, none).phases]


def test_plan_dict_round_trip(catalog, cluster, result):
    plan = result.best.plan
    back = rl_plan_from_dict(json.loads(json.dumps(rl_plan_to_dict(plan, catalog))), catalog)
    assert back == plan and evaluate_rl(cluster, back).step_time_s == result.best.estimate.step_time_s


def test_plan_dict_refuses_unknown_keys(catalog, result):
    d = rl_plan_to_dict(result.best.plan, catalog)
    d["rl"]["prompts"] = 3
    with pytest.raises(InputError, match="unknown key"):
        rl_plan_from_dict(d, catalog)


# ----------------------------------------------------------------------------- CLI: the "done when"

@pytest.fixture(scope="module")
def done(tmp_path_factory):
    out = tmp_path_factory.mktemp("rl") / "plan.json"
    r = hetplan(*DONE, "--json", "--out", str(out))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), out


def test_done_plan_uses_cluster_gpus_and_compares(done):
    data, _ = done
    m = data["plan"]["metrics"]
    assert set(m["gpus_by_pool"]) <= {"h100", "l40s"}
    assert m["longest_phase_s"] <= m["step_time_s"] <= m["phase_sum_s"] + 1e-9
    assert data["comparison"]["baseline"].startswith("colocated on h100")
    assert data["baseline"]["metrics"]["gpus_by_pool"] == {"h100": 16}
    assert data["comparison"]["speedup"] == pytest.approx(data["baseline"]["metrics"]["step_time_s"]
                                                          / m["step_time_s"])


def test_evaluate_reproduces_the_plan(done):
    data, path = done
    r = hetplan("evaluate", "--cluster", CLUSTER, "--plan", str(path), "--json")
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    for k in ("step_time_s", "samples_per_s", "tokens_per_s", "dollars_per_step"):
        assert again[k] == pytest.approx(data["plan"]["metrics"][k], rel=1e-12)


def test_export_verl_keys_exist_in_verls_config(done, tmp_path):
    import yaml
    _, path = done
    r = hetplan("export", "--cluster", CLUSTER, "--plan", str(path), "--to", "verl", "--out", str(tmp_path / "v"))
    assert r.returncode == 0, r.stderr
    config = yaml.safe_load((tmp_path / "v" / "verl_config.yaml").read_text())
    assert (tmp_path / "v" / "launch.sh").exists()
    keys = json.loads((ROOT / "tests" / "data" / "verl_config_keys.json").read_text())
    known = {k for ks in keys["files"].values() for k in ks}

    def paths(d, pre=""):
        for k, v in d.items():
            p = f"{pre}.{k}" if pre else k
            if isinstance(v, dict):
                yield from paths(v, p)
            else:
                yield p
    written = [p for p in paths(config) if not p.startswith("hydra") and p != "defaults"]
    assert written and [p for p in written if p not in known] == []


@pytest.mark.parametrize("args, field", [
    (["--job-kind", "grpo", "--samples-per-prompt", "8", "--prompt-len", "5", "--response-len", "5"],
     "--prompts-per-step"),
    (["--global-batch", "8", "--seq-len", "512", "--async"], "--async"),
    (["--job-kind", "grpo", "--global-batch", "8", "--prompts-per-step", "1", "--samples-per-prompt", "8",
      "--prompt-len", "5", "--response-len", "5"], "--global-batch"),
    (["--job-kind", "grpo", "--prompts-per-step", "3", "--samples-per-prompt", "1", "--prompt-len", "5",
      "--response-len", "5", "--mini-batches", "2"], "--mini-batches"),
])
def test_cli_bad_input_names_the_flag(args, field):
    r = hetplan("plan", "--cluster", CLUSTER, "--model", "llama-3-8b", *args)
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr


def test_old_plan_files_read_unchanged():
    r = hetplan("evaluate", "--cluster", str(EXAMPLES / "lab-mix.yaml"), "--plan",
                str(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json"), "--json")
    assert r.returncode == 0 and "iteration_time_s" in r.stdout


def test_cost_objective_under_a_deadline(catalog, cluster, result):
    steps = sorted(c.estimate.step_time_s for c in result.candidates)
    deadline = steps[len(steps) // 2]
    cheap = search_rl(cluster, job(catalog), "cost", deadline, training_time_limit_s=1.0)
    assert all(c.estimate.step_time_s <= deadline for c in cheap.candidates)
    assert len(cheap.candidates) < len(result.candidates)           # the deadline left some out
    assert cheap.best.estimate.dollars_per_step == min(c.estimate.dollars_per_step for c in cheap.candidates)
    with pytest.raises(InputError, match="step deadline"):
        search_rl(cluster, job(catalog), "cost", steps[0] / 2, training_time_limit_s=1.0)


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["roles"]["rollout"][0].update(tp="4"), "roles.rollout[0].tp"),
    (lambda d: d["roles"]["rollout"][0].update(tp=3), "roles.rollout[0].tp"),
    (lambda d: d["roles"]["rollout"][0].update(pool="nope"), "roles.rollout[0].pool"),
    (lambda d: d["roles"]["rollout"][0].update(replicas=10**6), "uses 1000000 GPUs"),
    (lambda d: d["rl"].update(prompts_per_step=-1), "rl.prompts_per_step"),
    (lambda d: d["rl"].update(algorithm="dpo"), "rl.algorithm"),
    (lambda d: d.update(shape="weird"), "shape"),
    (lambda d: d["roles"].pop("actor"), "roles.actor"),
])
def test_bad_rl_plan_files_are_one_line_errors(done, tmp_path, edit, says):
    data = json.loads(done[1].read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    r = hetplan("evaluate", "--cluster", CLUSTER, "--plan", str(bad))
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_colocated_rollout_shares_memory_with_the_actors_states(catalog, cluster, result):
    colocated = next(c for c in result.candidates if c.plan.shape == Shape.COLOCATED)
    group, gen = colocated.estimate.generation[0]
    alone = kv_capacity_tokens(catalog.model("llama-3-8b"), cluster.pool(group.pool), group.tp)
    assert gen.kv_capacity_tokens < alone


def test_export_openrlhf_flags_exist_in_its_cli(done, tmp_path):
    data, _ = done
    one_stage = [c for c in data["candidates"] if len(c["roles"]["actor"]["stages"]) == 1]
    assert one_stage, "no placement with a one-stage actor to export"
    plan = tmp_path / "one.json"
    plan.write_text(json.dumps(one_stage[0]))
    r = hetplan("export", "--cluster", CLUSTER, "--plan", str(plan), "--to", "openrlhf", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "o" / "launch.sh").read_text()
    known = set(json.loads((ROOT / "tests" / "data" / "openrlhf_flags.json").read_text())["flags"])
    written = {w for w in text.split() if w.startswith("--")}
    assert "--vllm.num_engines" in written and written - known == set()
    many = [c for c in data["candidates"] if len(c["roles"]["actor"]["stages"]) > 1]
    if many:
        plan.write_text(json.dumps(many[0]))
        r = hetplan("export", "--cluster", CLUSTER, "--plan", str(plan), "--to", "openrlhf")
        assert r.returncode == 2 and "one stage" in r.stderr


def test_text_report_names_roles_phases_and_baseline():
    r = hetplan("plan", "--cluster", CLUSTER, "--model", "llama-3-8b", "--job-kind", "ppo", "--prompts-per-step", "32",
                "--samples-per-prompt", "4", "--prompt-len", "256", "--response-len", "512", "--async",
                "--reward-model", "llama-2-7b")
    assert r.returncode == 0, r.stderr
    for says in ("best:", "rollout:", "actor:", "critic:", "reward:", "phases:", "critic training",
                 "baseline, colocated on h100 (the best GPU)"):
        assert says in r.stdout, says
