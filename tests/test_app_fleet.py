"""Issue 13: the Fleet page: a jobs table in; each job's GPUs per pool, speed, share, time and dollars to
finish and plan, the allocation chart, idle GPUs and jobs left out; bad rows as messages naming the cell."""
from __future__ import annotations

import pandas as pd
import pytest

from tests.app_helpers import new_app, ok, real_search_and_fresh_cache, texts  # noqa: F401
from ui.state import AppState, encode, presets
from ui.views.fleet import JOBS_KEY, default_jobs, jobs_file, with_edits

pytestmark = pytest.mark.filterwarnings("ignore")
PAGE = "ui/pages/fleet.py"


def _fleet_page(jobs: pd.DataFrame | None = None, state: AppState = AppState()):
    at = ok(new_app(encode(state)).run())
    if jobs is not None:
        at.session_state[JOBS_KEY] = jobs
    at.switch_page(PAGE)
    ok(at.run())
    at.number_input(key="w.fleet.search_s").set_value(0.2)
    return ok(at.run())


def _allocate(at):
    next(b for b in at.button if b.label == "Allocate").click()
    return ok(at.run())


def test_allocate_the_default_jobs_on_the_default_preset():
    at = _allocate(_fleet_page())
    assert [h.value for h in at.subheader] == ["Allocation"]
    assert len(at.dataframe) == 2                                   # the jobs table, then the allocation
    table = at.dataframe[1].value
    shown = texts(at)
    names = set(default_jobs()["name"])
    run = set(table["job"])
    assert run <= names
    for name in names - run:                                        # a job left out says why
        assert f"{name} does not run" in shown
    assert run, "no job runs"
    capacity = {p["name"]: p["nodes"] * p["gpus_per_node"] for p in AppState().cluster["pools"]}
    for pool, gpus in capacity.items():
        assert table[f"{pool} GPUs"].sum() <= gpus
    assert (table["tokens/s"] > 0).all() and table["plan"].str.contains("L0–").all()
    assert table["plan"].str.contains(r"\d× \w").all() and not table["plan"].str.contains(r"\dx ").any()  # 8× a100, as the app writes counts
    assert at.get("plotly_chart"), "no allocation chart"
    assert "Idle GPUs" in shown and "solved in" in shown


@pytest.mark.parametrize("column, value, says", [
    ("name", "", "row 2, name"),
    ("model", "no-such-model", "row 2, model"),
    ("global_batch", 0, "row 2, global_batch"),
])
def test_a_bad_row_is_a_message_naming_the_row_and_field(column, value, says):
    jobs = default_jobs()
    jobs[column] = jobs[column].astype(object)
    jobs.loc[1, column] = value
    at = _fleet_page(jobs)
    if any(b.label == "Allocate" for b in at.button):               # a row the table can check says so at once
        _allocate(at)
    assert at.error and says in texts(at)
    assert len(at.dataframe) == 1                                   # the jobs table only


def test_edits_add_and_delete_rows_and_blank_rows_are_dropped():
    table = with_edits(default_jobs(), {"edited_rows": {0: {"global_batch": 128}}, "deleted_rows": [2],
                                        "added_rows": [{"name": "x", "model": "opt-350m", "global_batch": 8,
                                                        "seq_len": 512}, {}]})
    jobs = jobs_file(table)["jobs"]
    assert [j["name"] for j in jobs] == ["llama-7b", "gpt-1.3b", "x"]
    assert jobs[0]["global_batch"] == 128 and jobs[2] == {"name": "x", "model": "opt-350m", "global_batch": 8,
                                                         "seq_len": 512, "weight": 1.0}


def test_small_jobs_share_a_node_and_the_table_says_which_gpus():
    """single-node-8 has two one-node pools: four jobs run only on parts of nodes."""
    jobs = pd.DataFrame([{"name": n, "model": m, "global_batch": 64, "seq_len": 2048, "tokens_b": 2.0,
                          "deadline_hours": None, "weight": 1.0}
                         for n, m in [("a", "llama-2-7b"), ("b", "gpt3-2.7b"), ("c", "gpt3-1.3b"), ("d", "opt-350m")]],
                        columns=default_jobs().columns).astype({"deadline_hours": float})
    at = _allocate(_fleet_page(jobs, AppState(cluster=presets()["single-node-8"])))
    table = at.dataframe[1].value
    assert sorted(table["job"]) == ["a", "b", "c", "d"]
    assert table["where"].str.contains("GPU").any()                  # part of a node: its GPUs named
    assert (table[["a100 GPUs", "rtx-4090 GPUs"]].sum() <= 4).all()


def test_switching_the_policy_solves_again_without_searching_again(monkeypatch):
    import planner.fleet
    monkeypatch.setenv("HETPLAN_APP_INLINE", "1")       # the patched search runs here, not in a worker (ui.budget)
    calls = []
    real = planner.fleet.search
    monkeypatch.setattr(planner.fleet, "search", lambda *a, **k: calls.append(1) or real(*a, **k))
    at = _allocate(_fleet_page())
    searched = len(calls)
    assert searched > 0
    at.selectbox(key="w.fleet.policy").select_index(1)
    at = _allocate(ok(at.run()))
    assert len(calls) == searched and len(at.dataframe) == 2


def test_the_repositorys_example_jobs_files_load_into_the_table():
    """Issue 20: Fleet could not load examples/fleet/*.yaml."""
    from catalog.files import parse_yaml
    from ui.views.fleet import fleet_examples, table_from_jobs_file
    examples = fleet_examples()
    assert {"small-jobs.yaml", "three-jobs.yaml", "five-jobs.yaml", "ten-jobs.yaml"} <= set(examples)
    for name, path in examples.items():          # each file, read back through the table, is the same jobs file
        raw = parse_yaml(path.read_text(), name)
        again = jobs_file(table_from_jobs_file(raw, name))["jobs"]
        assert [j["name"] for j in again] == [j["name"] for j in raw["jobs"]]
        assert [j.get("tokens") for j in again] == [j.get("tokens") for j in raw["jobs"]]
    at = _fleet_page(state=AppState(cluster=presets()["single-node-8"]))
    at.selectbox(key="w.fleet.example").select("small-jobs.yaml").run()
    next(b for b in at.button if b.label == "Load jobs").click()
    ok(at.run())
    assert list(at.session_state[JOBS_KEY]["name"]) == ["chat-7b", "base-2.7b", "small-1b", "tiny-350m"]


def test_a_jobs_file_with_an_inline_model_is_refused_by_name():
    from planner.types import InputError
    from ui.views.fleet import table_from_jobs_file
    data = {"jobs": [{"name": "x", "model": {"id": "m", "layers": 2, "hidden": 64, "heads": 2, "ffn": 128,
                                             "vocab": 100}, "global_batch": 8, "seq_len": 128}]}
    with pytest.raises(InputError, match=r"jobs\[0\]\.model"):
        table_from_jobs_file(data, "mine.yaml")
