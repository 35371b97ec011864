"""Hostile and absurd input at every entry point: each ends quickly with exit 2 and one line that
names the field, never a traceback, a hang or a partial output.

Entry points: the `hetplan` command line (arguments, --catalog, --cluster, --plan files), the
file parsers the app's uploads use (`catalog.files.parse_yaml` / `parse_json`) and the planner
types' own validation. See docs/reliability.md for the table of input classes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from catalog.files import MAX_FILE_BYTES, parse_json, parse_yaml
from planner.cli import main
from planner.types import MAX_SIMULATED_PASSES, InputError
from tests.conftest import EXAMPLES, ROOT

CLUSTER = str(EXAMPLES / "single-node-8.yaml")
PLAN = str(EXAMPLES / "plans" / "single-node-8-small.json")
SECONDS = 10                              # CPU seconds: every refusal must come well within this

pytestmark = pytest.mark.timeout(60)

POOL = "  - name: a100\n    gpu: a100-80gb-sxm\n    nodes: {nodes}\n    gpus_per_node: {gpn}\n    inter_node_gbps: {gbps}\n"


def cluster_text(nodes="1", gpn="4", gbps="100", extra=""):
    second = "  - name: rtx-4090\n    gpu: rtx-4090\n    nodes: 1\n    gpus_per_node: 4\n"
    return "name: x\npools:\n" + POOL.format(nodes=nodes, gpn=gpn, gbps=gbps) + second + extra


def billion_laughs(top: str) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for k in range(1, 9):
        lines.append(f"l{k}: &l{k} [" + ", ".join([f"*l{k - 1}"] * 9) + "]")
    return "\n".join(lines) + f"\n{top}: *l8\n"


def run(argv, capsys):
    """`hetplan argv` in this process: (exit status, stdout, stderr, CPU seconds, which a busy
    machine does not inflate as it does wall time)."""
    start = time.process_time()
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err, time.process_time() - start


def assert_refused(argv, expect, capsys):
    rc, out, err, seconds = run(argv, capsys)
    assert rc == 2, (argv, rc, err[:500])
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("hetplan: error: "), err[:500]
    assert "Traceback" not in err and len(err) < 2100, err[:500]
    assert expect in lines[0], (expect, lines[0])
    assert out == "", "nothing may be written to stdout on a refusal"
    assert seconds < SECONDS, (argv, seconds)


def write(tmp_path, name, content):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


# ----------------------------------------------------------------------------- cluster files

BAD_CLUSTERS = {
    # parsing and structure
    "billion laughs": (billion_laughs("pools"), "values"),
    "deep nesting": ("pools: " + "[" * 50_000 + "]" * 50_000 + "\n", "nested"),
    "recursive alias": ("pools: &a [*a]\n", "nested"),
    "python object tag": ("!!python/object/apply:os.system ['echo pwned']\n", "constructor"),
    "python name tag": ("name: !!python/name:os.system\npools: []\n", "constructor"),
    "duplicate key": ("name: a\nname: b\npools: []\n", "twice"),
    "unhashable key": ("? [a, b]\n: 1\n", "key must be"),
    "list at top": ("- 1\n- 2\n", "mapping"),
    "scalar at top": ("hello\n", "mapping"),
    "empty file": ("", "mapping"),
    "tab indentation": ("\tname: x\n", "invalid YAML"),
    "unknown key with line break": (cluster_text(extra='"bad\\nkey": 1\n'), "unknown key"),
    "date as name": ("name: 2024-01-01\n" + cluster_text()[8:], "name"),
    "binary value": ("name: !!binary aGk=\n" + cluster_text()[8:], "name"),
    "5000-digit integer": (cluster_text(nodes="9" * 5000), "digits"),
    # absurd or wrong values
    "a million nodes": (cluster_text(nodes="1000000"), "pools[0].nodes"),
    "zero nodes": (cluster_text(nodes="0"), "pools[0].nodes"),
    "negative nodes": (cluster_text(nodes="-3"), "pools[0].nodes"),
    "fractional nodes": (cluster_text(nodes="1.5"), "pools[0].nodes"),
    "quoted nodes": (cluster_text(nodes='"2"'), "remove the quotes"),
    "boolean nodes": (cluster_text(nodes="true"), "pools[0].nodes"),
    "1e9 GPUs per node": (cluster_text(gpn="1000000000"), "pools[0].gpus_per_node"),
    "1e308 Gb/s": (cluster_text(gbps="1.0e+308"), "pools[0].inter_node_gbps"),
    "1e-300 Gb/s": (cluster_text(gbps="1.0e-300"), "pools[0].inter_node_gbps"),
    "1e9 written the YAML 1.1 way": (cluster_text(gbps="1e9"), "1.0e+9"),
    "NaN Gb/s": (cluster_text(gbps=".nan"), "pools[0].inter_node_gbps"),
    "infinite Gb/s": (cluster_text(gbps=".inf"), "pools[0].inter_node_gbps"),
    "1e308 dollars an hour": (cluster_text(extra="") .replace("inter_node_gbps: 100\n",
                              "inter_node_gbps: 100\n    price_per_gpu_hour: 1.0e+308\n", 1),
                              "pools[0].price_per_gpu_hour"),
    "unicode pool name": (cluster_text().replace("name: a100", "name: \"ä100 ✓\""), "pools[0].name"),
    "unknown gpu, very long": (cluster_text().replace("gpu: a100-80gb-sxm", "gpu: " + "h" * 100_000),
                               "pools[0].gpu"),
    "no pools": ("name: x\npools: []\n", "pools"),
    "65 pools": ("pools:\n" + "".join(f"  - {{name: p{k}, gpu: t4, nodes: 1, gpus_per_node: 1}}\n"
                                      for k in range(65)), "pools"),
    "repeated pool names": (cluster_text().replace("name: rtx-4090", "name: a100"), "pools"),
}


@pytest.mark.parametrize("label", list(BAD_CLUSTERS))
def test_bad_cluster_file(label, tmp_path, capsys):
    text, expect = BAD_CLUSTERS[label]
    path = write(tmp_path, "cluster.yaml", text)
    assert_refused(["evaluate", "--cluster", path, "--plan", PLAN], expect, capsys)


def test_bad_cluster_bytes(tmp_path, capsys):
    path = write(tmp_path, "cluster.yaml", b"name: \xff\xfe\x00binary\x80\n")
    assert_refused(["evaluate", "--cluster", path, "--plan", PLAN], "UTF-8", capsys)


# ----------------------------------------------------------------------------- where the file is

def test_missing_directory_and_special_files(tmp_path, capsys):
    assert_refused(["evaluate", "--cluster", str(tmp_path / "nope.yaml"), "--plan", PLAN], "not found", capsys)
    assert_refused(["evaluate", "--cluster", str(tmp_path), "--plan", PLAN], "directory", capsys)
    assert_refused(["evaluate", "--cluster", "/dev/zero", "--plan", PLAN], "regular file", capsys)
    assert_refused(["evaluate", "--cluster", CLUSTER, "--plan", "/dev/urandom"], "regular file", capsys)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)                       # reading it would block forever
    assert_refused(["evaluate", "--cluster", str(fifo), "--plan", PLAN], "regular file", capsys)
    assert_refused(["evaluate", "--cluster", "a\0b.yaml", "--plan", PLAN], "file name", capsys)


def test_huge_file_is_refused_without_reading_it(tmp_path, capsys):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as f:          # sparse: costs no disk
        f.truncate(MAX_FILE_BYTES + 1)
    assert_refused(["evaluate", "--cluster", str(path), "--plan", PLAN], "limit", capsys)
    assert_refused(["--catalog", str(path), "catalog", "gpus"], "limit", capsys)


# ----------------------------------------------------------------------------- plan files

def good_plan() -> dict:
    return json.loads((EXAMPLES / "plans" / "single-node-8-small.json").read_text())


def edited(**changes):
    plan = good_plan()
    plan.update(changes)
    return json.dumps(plan)


HUGE_MODEL = {"id": "huge", "layers": 100_000, "hidden": 1_000_000, "heads": 1000, "kv_heads": 1000,
              "ffn": 4_000_000, "vocab": 100_000}

BAD_PLANS = {
    "deep nesting": ('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
    "duplicate key": ('{"global_batch": 64, "global_batch": 65}', "twice"),
    "NaN": (edited().replace('"global_batch": 64', '"global_batch": NaN'), "NaN"),
    "Infinity": (edited().replace('"global_batch": 64', '"global_batch": Infinity'), "Infinity"),
    "5000-digit integer": (edited().replace('"global_batch": 64', '"global_batch": ' + "9" * 5000), "digits"),
    "list at top": ("[1, 2, 3]", "mapping"),
    "string at top": ('"plan"', "mapping"),
    "null at top": ("null", "mapping"),
    "truncated": (edited()[:-20], "invalid JSON"),
    "future format": (edited(format="hetplan.plan/9"), "format"),
    "zero batch": (edited(global_batch=0), "global_batch"),
    "negative batch": (edited(global_batch=-64), "global_batch"),
    "fractional batch": (edited(global_batch=64.5), "global_batch"),
    "batch of 1e12": (edited(global_batch=10**12, micro_batch=10**12), "global_batch"),
    "seq_len 1e9": (edited(seq_len=10**9), "seq_len"),
    "10^7 micro-batches": (edited(global_batch=10**7, micro_batch=1,
                                  stages=[{"layers": [0, 24], "replicas": [{"pool": "a100", "tp": 4}]}]),
                           "micro_batch"),
    "zero micro-batch": (edited(micro_batch=0), "micro_batch"),
    "model as list": (edited(model=[1, 2]), "model"),
    "model id very long": (edited(model="m" * 100_000), "model"),
    "inline model of 1e18 parameters, hidden too large": (edited(model=dict(HUGE_MODEL, hidden=10**7)), "model.hidden"),
    "inline model with 10^30 ffn": (edited(model=dict(HUGE_MODEL, ffn=10**30)), "model.ffn"),
    "stages as mapping": (edited(stages={"a": 1}), "stages"),
    "no stages": (edited(stages=[]), "stages"),
    "layers not numbers": (edited(stages=[{"layers": ["a", "b"], "replicas": [{"pool": "a100", "tp": 4}]}]),
                           "stages[0].layers"),
    "layers backwards": (edited(stages=[{"layers": [24, 0], "replicas": [{"pool": "a100", "tp": 4}]}]),
                         "stages[0]"),
    "tp zero": (edited(stages=[{"layers": [0, 24], "replicas": [{"pool": "a100", "tp": 0}]}]),
                "stages[0].replicas[0].tp"),
    "tp 1e6": (edited(stages=[{"layers": [0, 24], "replicas": [{"pool": "a100", "tp": 10**6}]}]),
               "stages[0].replicas[0].tp"),
    "zero samples": (edited(stages=[{"layers": [0, 24], "replicas": [{"pool": "a100", "tp": 4, "samples": 0},
                                                                      {"pool": "a100", "tp": 4}]}]), "samples"),
    "more replicas than samples": (edited(global_batch=4, micro_batch=1, stages=[
        {"layers": [0, 24], "replicas": [{"pool": "rtx-4090", "tp": 1}] * 4 + [{"pool": "a100", "tp": 1}] * 4}]),
        "stages[0].replicas"),
    "unknown key": (edited(pipeline_parallel=4), "pipeline_parallel"),
    "unknown pool": (edited(stages=[{"layers": [0, 24], "replicas": [{"pool": "h100", "tp": 4}]}]), "pool"),
    "more GPUs than the pool": (edited(stages=[{"layers": [0, 24], "replicas": [{"pool": "a100", "tp": 4}] * 2}]),
                                "a100"),
    "interleave 1e6": (edited(interleave=10**6), "interleave"),
    "zero_stage 7": (edited(zero_stage=7), "zero_stage"),
}


@pytest.mark.parametrize("label", list(BAD_PLANS))
def test_bad_plan_file(label, tmp_path, capsys):
    text, expect = BAD_PLANS[label]
    path = write(tmp_path, "plan.json", text)
    assert_refused(["evaluate", "--cluster", CLUSTER, "--plan", path], expect, capsys)


def test_absurd_model_gets_a_bounded_answer(tmp_path, capsys):
    """A 10^18-parameter model is a valid plan that does not fit: answered at once, saying so."""
    plan = good_plan()
    plan["model"] = dict(HUGE_MODEL, layers=1000)
    plan["stages"] = [{"layers": [0, 500], "replicas": [{"pool": "a100", "tp": 4}]},
                      {"layers": [500, 1000], "replicas": [{"pool": "rtx-4090", "tp": 4}]}]
    path = write(tmp_path, "plan.json", json.dumps(plan))
    rc, out, err, seconds = run(["evaluate", "--cluster", CLUSTER, "--plan", path, "--json"], capsys)
    assert rc == 0 and seconds < SECONDS, err
    data = json.loads(out)
    assert data["fits"] is False and data["iteration_time_s"] > 0


def test_simulated_pass_limit_allows_the_largest_plans_in_use(tmp_path, capsys):
    """4096 sequences of micro-batch 1 over 16 stages, interleave 8 (Llama 3 405B's shape) fit the limit."""
    assert 16 * 4096 * 8 <= MAX_SIMULATED_PASSES


# ----------------------------------------------------------------------------- catalog files

GPU = {"name": "Mine", "bf16_fp16_tflops": 100, "fp32_tflops": 20, "bf16": True, "memory_gib": 24,
       "memory_bw_gb_s": 900, "link": "pcie", "link_gb_s_per_direction": 32, "pcie_gen": 4, "power_w": 300,
       "price_per_gpu_hour": 1.0}


def catalog_yaml(**gpu_changes) -> str:
    return json.dumps({"gpus": {"my-gpu": dict(GPU, **gpu_changes)}})   # JSON is YAML


BAD_CATALOGS = {
    "1e308 TFLOP/s": (catalog_yaml(bf16_fp16_tflops=1e308), "gpus.my-gpu.bf16_fp16_tflops"),
    "1e300 GiB": (catalog_yaml(memory_gib=1e300), "gpus.my-gpu.memory_gib"),
    "zero efficiency": (catalog_yaml(efficiency=0), "gpus.my-gpu.efficiency"),
    "1e-300 efficiency": (catalog_yaml(efficiency=1e-300), "gpus.my-gpu.efficiency"),
    "price 1e308": (catalog_yaml(price_per_gpu_hour=1e308), "gpus.my-gpu.price_per_gpu_hour"),
    "negative power": (catalog_yaml(power_w=-1), "gpus.my-gpu.power_w"),
    "redefines a100": (json.dumps({"gpus": {"a100-80gb-sxm": GPU}}), "a100-80gb-sxm"),
    "bad id": (json.dumps({"gpus": {"my gpu\n": GPU}}), "gpus"),
    "model too large": (json.dumps({"models": {"m": {"name": "m", "layers": 10**6, "hidden": 64, "heads": 1,
                                                     "kv_heads": 1, "ffn": 64, "vocab": 10}}}), "models.m.layers"),
    "billion laughs": (billion_laughs("gpus"), "values"),
    "list at top": ("[]", "mapping"),
}


@pytest.mark.parametrize("label", list(BAD_CATALOGS))
def test_bad_catalog_file(label, tmp_path, capsys):
    text, expect = BAD_CATALOGS[label]
    path = write(tmp_path, "extra.yaml", text)
    assert_refused(["--catalog", path, "catalog", "gpus"], expect, capsys)


def test_catalog_directory_and_missing(tmp_path, capsys):
    assert_refused(["--catalog", str(tmp_path), "catalog", "gpus"], "directory", capsys)
    assert_refused(["--catalog", str(tmp_path / "x.yaml"), "catalog", "gpus"], "not found", capsys)


# ----------------------------------------------------------------------------- arguments

@pytest.mark.parametrize("tokens", ["nan", "inf", "-inf", "1e400", "-5", "0", "lots"])
def test_bad_tokens_argument(tokens, capsys):
    assert_refused(["evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--tokens", tokens], "tokens", capsys)


@pytest.mark.parametrize("argv,expect", [
    ([], "COMMAND"),
    (["frobnicate"], "frobnicate"),
    (["evaluate"], "--cluster"),
    (["evaluate", "--cluster", CLUSTER], "--plan"),
    (["catalog", "gpu"], "gpu"),
    (["evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--bogus"], "--bogus"),
])
def test_bad_arguments(argv, expect, capsys):
    assert_refused(argv, expect, capsys)


PLAN_ARGS = ["plan", "--cluster", CLUSTER, "--model", "gpt3-1.3b", "--global-batch", "64", "--seq-len", "2048"]


def _with(args: list[str], flag: str, value: str) -> list[str]:
    out = list(args)
    out[out.index(flag) + 1] = value
    return out


@pytest.mark.parametrize("flag,value", [
    ("--global-batch", "0"), ("--global-batch", "-8"), ("--global-batch", "1e12"), ("--global-batch", "nan"),
    ("--global-batch", "1000000000000"), ("--global-batch", "9" * 5000),
    ("--seq-len", "1000000000"), ("--seq-len", "0"), ("--seq-len", "x"),
    ("--model", "llama-9"), ("--model", "m" * 10_000), ("--cluster", "/dev/zero"),
])
def test_bad_plan_arguments(flag, value, capsys):
    from planner.cli import build_parser
    if "plan" not in build_parser()._subparsers._group_actions[0].choices:
        pytest.skip("`hetplan plan` is not built yet (planner/cli/plan_cmd.py)")
    expect = {"--model": "llama-9" if value == "llama-9" else "model", "--cluster": value}.get(flag, flag)
    rc, out, err, seconds = run(_with(PLAN_ARGS, flag, value), capsys)
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err[:500]
    assert seconds < SECONDS and out == ""
    assert expect.lstrip("-").replace("-", "_") in err.replace("-", "_") or expect in err, err


# ----------------------------------------------------------------------------- the parsers uploads use

@pytest.mark.parametrize("text", [billion_laughs("a"), "a: " + "[" * 100_000, "!!python/object:os.system {}\n",
                                  "a: 1\na: 2\n", "? {a: 1}\n: 2\n"])
def test_upload_yaml_parser(text):
    start = time.process_time()
    with pytest.raises(InputError) as e:
        parse_yaml(text, "upload.yaml")
    assert e.value.field == "upload.yaml" and "\n" not in str(e.value)
    assert time.process_time() - start < SECONDS


def test_yaml_merge_keys_still_work():
    data = parse_yaml("base: &b {gpu: t4, nodes: 1}\npool:\n  <<: *b\n  nodes: 2\n", "f.yaml")
    assert data["pool"] == {"gpu": "t4", "nodes": 2}


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a": 1, "a": 2}', "NaN", "[Infinity]",
                                  "9" * 5000, "{"])
def test_upload_json_parser(text):
    start = time.process_time()
    with pytest.raises(InputError) as e:
        parse_json(text, "upload.json")
    assert e.value.field == "upload.json" and "\n" not in str(e.value)
    assert time.process_time() - start < SECONDS


# ----------------------------------------------------------------------------- as a user runs it

def test_bomb_through_the_real_command(tmp_path):
    """The installed entry point, in its own process, with a wall-clock bound."""
    path = write(tmp_path, "bomb.yaml", billion_laughs("pools"))
    out = subprocess.run([sys.executable, "-m", "planner", "evaluate", "--cluster", path, "--plan", PLAN],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and out.stdout == "", out.stderr[:300]


def test_an_empty_pool_list_is_said_in_words_not_the_validators(tmp_path, capsys):
    """Issue 20: an empty cluster said "List should have at least 1 item after validation, not 0" (pydantic)."""
    path = tmp_path / "empty.yaml"
    path.write_text("name: empty\npools: []\n")
    assert main(["plan", "--cluster", str(path), "--model", "gpt3-1.3b", "--global-batch", "8",
                 "--seq-len", "2048"]) == 2
    err = capsys.readouterr().err
    assert "pools: must have at least 1 entry, got none (an empty list)" in err and "List should" not in err
