"""`hetplan` as users call it: exit codes, one-line errors, the --json contract."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT

PLAN = str(EXAMPLES / "plans" / "lab-mix-llama-2-70b.json")
CLUSTER = str(EXAMPLES / "lab-mix.yaml")


def hetplan(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "planner", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_evaluate_json_contract():
    out = hetplan("evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--tokens", "1e9", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    for key in ("iteration_time_s", "tokens_per_s", "mfu", "cost_per_million_tokens_usd", "fits",
                "peak_memory_gib", "breakdown", "bottleneck", "train_time_s", "train_cost_usd"):
        assert key in data, key
    assert data["fits"] is True
    assert {(r["stage"], r["replica"]) for r in data["peak_memory_gib"]} == {(0, 0), (0, 1), (1, 0), (1, 1), (1, 2), (1, 3)}
    assert sum(t["exposed_s"] for t in data["breakdown"].values()) == pytest.approx(data["iteration_time_s"])


def test_evaluate_table():
    out = hetplan("evaluate", "--cluster", CLUSTER, "--plan", PLAN)
    assert out.returncode == 0, out.stderr
    assert "tokens/s" in out.stdout and "bottleneck" in out.stdout


def test_catalog_lists():
    out = hetplan("catalog", "models", "--json")
    models = {m["id"]: m for m in json.loads(out.stdout)}
    assert models["llama-2-7b"]["num_params"] == 6_738_415_616
    assert models["mixtral-8x7b"]["num_active_params"] < models["mixtral-8x7b"]["num_params"]
    gpus = {g["id"] for g in json.loads(hetplan("catalog", "gpus", "--json").stdout)}
    assert {"h100-sxm", "v100-32gb-sxm", "mi300x", "rtx-4090"} <= gpus
    assert "h100-sxm" in hetplan("catalog", "gpus").stdout


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def bad_plans(tmp_path):
    plan = json.loads((EXAMPLES / "plans" / "lab-mix-llama-2-70b.json").read_text())
    cases = {}
    for label, edit, expect in [
        ("unknown model", lambda p: p.update(model="llama-9"), "llama-9"),
        ("gap in layers", lambda p: p["stages"][1].update(layers=[50, 80]), "stages[1].layers"),
        ("zero batch", lambda p: p.update(global_batch=0), "global_batch"),
        ("unknown pool", lambda p: p["stages"][0]["replicas"][0].update(pool="h100"), "h100"),
        ("too many GPUs", lambda p: p["stages"][0].update(replicas=[{"pool": "a100", "tp": 8, "samples": n}
                                                                    for n in (256, 128, 128)]), "a100"),
        ("bf16 on V100", lambda p: p.update(precision="bf16"), "bf16"),
        ("samples", lambda p: p["stages"][0]["replicas"][0].update(samples=100), "add up"),
        ("unknown key", lambda p: p.update(pipeline=3), "pipeline"),
    ]:
        p = json.loads(json.dumps(plan))
        edit(p)
        cases[label] = (write(tmp_path, label.replace(" ", "_") + ".json", json.dumps(p)), expect)
    cases["not json"] = (write(tmp_path, "broken.json", "{not json"), "broken.json")
    cases["missing file"] = (str(tmp_path / "nope.json"), "nope.json")
    return cases


def test_bad_plans_exit_2_with_one_line(tmp_path):
    for label, (path, expect) in bad_plans(tmp_path).items():
        out = hetplan("evaluate", "--cluster", CLUSTER, "--plan", path)
        assert out.returncode == 2, (label, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in out.stderr, (label, out.stderr)
        assert expect in lines[0], (label, lines[0])


def test_bad_clusters_and_args_exit_2(tmp_path):
    cases = {
        "unknown gpu": ("name: x\npools:\n  - gpu: h900\n    nodes: 1\n    gpus_per_node: 8\n", "h900"),
        "negative nodes": ("name: x\npools:\n  - gpu: a100-80gb-sxm\n    nodes: -1\n    gpus_per_node: 8\n", "nodes"),
        "yaml tags": ("!!python/object/apply:os.system ['echo hi']\n", "cluster"),
    }
    for label, (text, expect) in cases.items():
        out = hetplan("evaluate", "--cluster", write(tmp_path, "c.yaml", text), "--plan", PLAN)
        assert out.returncode == 2, (label, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1 and expect in out.stderr, (label, out.stderr)
    for args in (["evaluate"], ["frobnicate"], ["evaluate", "--cluster", CLUSTER, "--plan", PLAN, "--tokens", "-5"]):
        out = hetplan(*args)
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)


def test_console_script_matches_module(tmp_path):
    import shutil
    exe = shutil.which("hetplan")
    if exe is None:
        pytest.skip("the hetplan console script is not installed (pip install -e .)")
    a = subprocess.run([exe, "catalog", "models", "--json"], capture_output=True, text=True, timeout=60)
    assert a.stdout == hetplan("catalog", "models", "--json").stdout


@pytest.mark.parametrize("command", ["plan", "evaluate", "export", "catalog", "run-local", "calibrate"])
def test_every_command_has_help(command):
    """`--help` of every command prints its options (a stray % in a help text once made argparse crash)."""
    out = hetplan(command, "--help")
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout and "--" in out.stdout


def test_a_command_imports_only_its_own_module():
    """`main` builds the parser of the command it runs only (start-up time: `plan` imports neither the
    exporters nor the fleet's solver, nor the RL planner but for an RL job kind, plan_cmd.JOB_KIND_MODULES),
    and COMMAND_MODULES names the module of every command."""
    from planner.cli import COMMAND_MODULES, build_parser, command_in

    def commands(parser):
        return set(parser._subparsers._group_actions[0].choices)
    assert commands(build_parser()) == set(COMMAND_MODULES)
    for name, module in COMMAND_MODULES.items():
        assert commands(build_parser(name)) == {n for n, m in COMMAND_MODULES.items() if m == module}
    assert command_in(["--catalog", "x.yaml", "plan", "--cluster", "c"]) == "plan"
    assert command_in(["--cat=x.yaml", "fleet"]) == "fleet" and command_in(["--cat", "plan", "evaluate"]) == "evaluate"
    assert command_in(["-h", "plan"]) is None and command_in([]) is None
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "planner", "plan", "--help"], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    imported = {line.rpartition("|")[2].strip() for line in out.stderr.splitlines()}   # (not what importlib loads)
    assert out.returncode == 0 and "planner.search" in imported, out.stderr[-500:]
    assert not imported & {"planner.fleet", "planner.export", "planner.cli.fleet_cmd", "planner.cli.export_cmd", "pulp",
                           "planner.rl.step", "planner.rl.search", "planner.rl.report"}     # RL: an RL job kind only


def test_the_script_entry_point_runs_the_program():
    """pyproject's `hetplan` script names planner.__main__:program, the function `python -m planner` runs: the
    same output, whichever way a user starts it."""
    try:
        import tomllib
    except ImportError:                      # Python 3.10
        tomllib = pytest.importorskip("tomli")
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["hetplan"]
    module, _, function = target.partition(":")
    as_script = subprocess.run([sys.executable, "-c", f"import sys; from {module} import {function}; "
                                f"sys.exit({function}())", "catalog", "models", "--json"],
                               capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert as_script.returncode == 0 and as_script.stdout == hetplan("catalog", "models", "--json").stdout


def test_the_program_loads_numpy_with_one_blas_thread_and_restores_the_environment():
    """planner.__main__ sets OPENBLAS_NUM_THREADS=1 while numpy loads (no BLAS thread per core, each spinning
    CPU time away at start-up), then gives the environment back as it was, for the processes a command starts;
    a value the user set stays."""
    probe = ("import os, planner.__main__, numpy; print(os.environ.get('OPENBLAS_NUM_THREADS'), "
             "len(os.listdir('/proc/self/task')) if os.path.isdir('/proc/self/task') else 1)")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["None", "1"], (out.stdout, out.stderr[-500:])
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**env, "OPENBLAS_NUM_THREADS": "2"})
    assert out.returncode == 0 and out.stdout.split()[0] == "2", (out.stdout, out.stderr[-500:])


def test_the_program_freezes_what_the_command_leaves(monkeypatch):
    """program() returns main's exit code, main runs under GC_THRESHOLDS already (its return to the thresholds
    it found then starts no collection), and the objects left are frozen (gc.freeze), exit code or exception:
    the collections as the interpreter ends would only traverse them."""
    import gc
    import planner.__main__ as entry
    from planner.cli import GC_THRESHOLDS
    thresholds, frozen, seen = gc.get_threshold(), [], []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    monkeypatch.setattr(entry, "main", lambda: seen.append(gc.get_threshold()) or 3)
    try:
        assert entry.program() == 3 and frozen == [True] and seen == [GC_THRESHOLDS]

        def fails():
            raise SystemExit(0)
        monkeypatch.setattr(entry, "main", fails)
        with pytest.raises(SystemExit):
            entry.program()
        assert frozen == [True, True]
    finally:
        gc.set_threshold(*thresholds)
