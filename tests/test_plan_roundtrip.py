"""`hetplan plan`'s output fed back: `evaluate`, `export` and `run-local` read a plan as `plan --json`
prints it, the whole `plan --json` object (its plans[0]) and `plan --out`'s file (issue 12)."""
from __future__ import annotations

import json
import os

import pytest

from catalog.formats import plan_from_dict, plan_from_file_data
from catalog.formats import PLAN_OUTPUT_ONLY_KEYS
from catalog.schema import PlanEntry
from planner.types import InputError
from tests.conftest import EXAMPLES
from tests.test_cli import hetplan

CLUSTER = str(EXAMPLES / "a100-v100-16.yaml")
JOB = ("--cluster", CLUSTER, "--model", "llama-2-7b", "--global-batch", "64", "--seq-len", "2048")


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """(plan --json's object, the path of plan --out's file), from one run of both."""
    best = tmp_path_factory.mktemp("plan") / "best.json"
    out = hetplan("plan", *JOB, "--json", "--out", str(best))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), best


def write_json(tmp_path, name, data) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def evaluated(plan_file: str) -> dict:
    out = hetplan("evaluate", "--cluster", CLUSTER, "--plan", plan_file, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_every_key_of_a_printed_plan_is_a_plan_field_or_output_only(searched):
    data, _ = searched
    fields = set(PlanEntry.model_fields) | set(PLAN_OUTPUT_ONLY_KEYS)
    printed = [*data["plans"], *data["pareto"], *(b for b in data["baselines"].values() if b)]
    for plan in printed:
        assert set(plan) <= fields, set(plan) - fields


@pytest.mark.parametrize("which", ["plans[0]", "pareto[0]", "pareto[-1]", "baselines.megatron"])
def test_evaluate_of_a_printed_plan_gives_its_metrics(searched, tmp_path, which):
    data, _ = searched
    name, _, index = which.partition("[")
    plan = data[name][int(index[:-1])] if index else data["baselines"][which.split(".")[1]]
    assert evaluated(write_json(tmp_path, "plan.json", plan)) == plan["metrics"]


def test_evaluate_of_the_whole_output_reads_its_best_plan(searched, tmp_path):
    data, _ = searched
    assert evaluated(write_json(tmp_path, "all.json", data)) == data["plans"][0]["metrics"]


def test_plan_out_writes_the_best_plan_and_it_evaluates_to_its_metrics(searched):
    data, best = searched
    written = json.loads(best.read_text())
    assert written == data["plans"][0]
    assert written["format"] == "hetplan.plan/1"
    assert evaluated(str(best)) == written["metrics"]


def test_export_reads_a_printed_plan_the_whole_output_and_the_out_file_alike(searched, tmp_path):
    data, best = searched
    sources = [write_json(tmp_path, "plan.json", data["plans"][0]), write_json(tmp_path, "all.json", data),
               str(best)]
    outputs = []
    for source in sources:
        out = hetplan("export", "--cluster", CLUSTER, "--plan", source, "--to", "torchrun")
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert outputs[0] == outputs[1] == outputs[2]
    folder = tmp_path / "launch"
    out = hetplan("export", "--cluster", CLUSTER, "--plan", sources[1], "--to", "torchrun", "--out", str(folder))
    assert out.returncode == 0, out.stderr
    assert any(folder.iterdir())


def test_the_whole_output_and_its_best_plan_parse_to_the_same_plan(searched, catalog):
    data, _ = searched
    assert plan_from_file_data(data, catalog, "all.json") == plan_from_dict(data["plans"][0], catalog)
    assert plan_from_file_data(data["pareto"][0], catalog) == plan_from_dict(data["pareto"][0], catalog)


@pytest.mark.parametrize("edit, where", [
    (lambda d: d["plans"][0].update(bogus=1), "all.json: plans[0].bogus: unknown key"),
    (lambda d: d["plans"][0]["stages"][0]["replicas"][0].update(tp=0), "all.json: plans[0].stages[0].replicas[0].tp"),
    (lambda d: d["plans"][0].update(notes=[]), "all.json: plans[0].notes: must be text"),
    (lambda d: d.update(plans=[]), "all.json: plans: must be a non-empty list"),
    (lambda d: d.update(plans=[7]), "all.json: plans[0]: must be a mapping"),
])
def test_the_whole_output_still_refuses_what_a_plan_refuses(searched, catalog, edit, where):
    data = json.loads(json.dumps(searched[0]))
    edit(data)
    with pytest.raises(InputError) as refused:
        plan_from_file_data(data, catalog, "all.json")
    assert str(refused.value).startswith(where), refused.value


@pytest.mark.parametrize("key", ["bogus", "metric", "explanations", "gains"])
def test_a_printed_plan_still_refuses_unknown_keys(searched, catalog, key):
    with pytest.raises(InputError, match=f"plan.json: {key}: unknown key"):
        plan_from_file_data({**searched[0]["plans"][0], key: "x"}, catalog, "plan.json")


def test_evaluate_and_export_refuse_unknown_keys_in_one_line(searched, tmp_path):
    plan = write_json(tmp_path, "plan.json", {**searched[0]["plans"][0], "bogus": 1})
    whole = json.loads(json.dumps(searched[0]))
    whole["plans"][0]["bogus"] = 1
    for command, source, where in [(("evaluate",), plan, "bogus: unknown key"),
                                   (("export", "--to", "megatron"), plan, "bogus: unknown key"),
                                   (("evaluate",), write_json(tmp_path, "all.json", whole), "plans[0].bogus")]:
        out = hetplan(*command, "--cluster", CLUSTER, "--plan", source)
        assert out.returncode == 2 and where in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""


def test_plan_out_in_text_mode_says_where_it_wrote(tmp_path):
    best = tmp_path / "deeper" / "best.json"
    out = hetplan("plan", *JOB, "--top", "1", "--out", str(best))
    assert out.returncode == 0, out.stderr
    assert out.stdout.rstrip().endswith(f"wrote {best}")
    assert evaluated(str(best)) == json.loads(best.read_text())["metrics"]


def test_plan_out_refuses_what_is_not_a_regular_file_or_an_input(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    for path, why in [(fifo, "FIFO"), (folder, "folder"), ("/dev/null", "character device"),
                      (CLUSTER, "is also an input")]:
        out = hetplan("plan", *JOB, "--out", str(path))
        assert out.returncode == 2, (path, out.stderr)
        assert out.stderr.count("\n") == 1 and "--out" in out.stderr and why in out.stderr, out.stderr
        assert out.stdout == ""
    assert fifo.is_fifo() and folder.is_dir() and not any(folder.iterdir())
