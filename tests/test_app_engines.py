"""Issues 10 and 11 in the app: the engine picker (state, link, old links), the Engines page (each
engine's best plan against hetplan's runtime), What-if leaving an engine's space, the precisions
(fp32 with TF32, fp8 under the engines that run it), and exports that offer the engine's own plan."""
from __future__ import annotations

import base64
import json
import zlib
from dataclasses import asdict, replace

import pytest

from tests.app_helpers import (SMALL, example_plan, new_app, ok, real_search_and_fresh_cache,  # noqa: F401
                               shown, texts)
from ui.state import VERSION, AppState, decode, encode, presets

pytestmark = pytest.mark.filterwarnings("ignore")
SMALL_STATE = AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64, seq_len=2048)


def _token(data: dict) -> dict:
    raw = json.dumps(data).encode()
    return {"v": VERSION, "s": base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")}


# ----------------------------------------------------------------------------- state and link

def test_engine_and_tf32_round_trip_through_the_link():
    state = replace(SMALL_STATE, engine="megatron", precision="fp32", tf32=False)
    assert decode(encode(state)) == (state, [])


def test_a_link_without_an_engine_means_the_best_engine():
    old = asdict(SMALL_STATE)
    del old["engine"], old["tf32"]                  # a link made before engines were in the state
    state, warnings = decode(_token(old))
    assert warnings == [] and state == SMALL_STATE and state.engine == "auto" and state.tf32 is None


def test_an_unknown_engine_warns_and_keeps_the_rest_of_the_link():
    data = dict(asdict(SMALL_STATE), engine="megatron-99")
    state, warnings = decode(_token(data))
    assert state == SMALL_STATE                     # cluster, model and job kept; the engine: the best
    assert len(warnings) == 1 and "megatron-99" in warnings[0] and "the best engine" in warnings[0]
    state, warnings = decode({**{k: v for k, v in SMALL.items()}, "engine": "nope"})
    assert state.engine == "auto" and state.global_batch == 64 and "nope" in warnings[0]
    assert decode({**SMALL, "engine": "torchtitan"})[0].engine == "torchtitan"


@pytest.mark.parametrize("tf32", ["yes", 1, [True]])
def test_a_tf32_that_is_not_true_false_or_empty_is_refused(tf32):
    state, warnings = decode(_token(dict(asdict(SMALL_STATE), tf32=tf32)))
    assert state == AppState() and "tf32" in warnings[0]


def test_an_unknown_engine_in_a_link_opens_the_app_with_a_warning():
    at = ok(new_app(_token(dict(asdict(SMALL_STATE), engine="[x](http://evil)"))).run())
    warning = next(w.value for w in at.warning if "does not know" in w.value)
    assert "\\[x\\]\\(http" in warning and "[x](http://evil)" in shown(warning)     # shown as text, not a link
    assert at.session_state["app_state"].cluster["name"] == "single-node-8"


# ----------------------------------------------------------------------------- the picker

def _compose(state: AppState = SMALL_STATE):
    return ok(new_app(encode(state)).run())


def test_the_picker_lists_every_engine_and_plans_for_the_one_chosen():
    from planner.engines import ENGINES
    at = _compose()
    picker = at.selectbox(key="w.engine")
    assert picker.options == ["the best engine (default)"] + [e.title + (" (runs every plan)" if n == "hetplan" else "")
                                                               for n, e in ENGINES.items()]
    assert "Megatron-LM" in picker.help and "FlagScale" in picker.help
    picker.select("megatron").run()
    ok(at)
    assert at.session_state["app_state"].engine == "megatron"
    assert "Engine** Megatron-LM · NVIDIA/Megatron-LM@" in shown("\n".join(m.value for m in at.sidebar.markdown))
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    # the address bar carries it once planned: a fresh session opened on the link plans for Megatron-LM
    params = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert decode(params)[0].engine == "megatron"
    state = at.session_state["app_state"]
    assert state.plan.get("engine") == "megatron"
    assert "For **Megatron-LM · NVIDIA/Megatron-LM@" in texts(at)
    assert "Searching the plans Megatron-LM runs" in texts(at)


# ----------------------------------------------------------------------------- precisions

def test_precisions_offer_fp32_with_tf32_and_fp8():
    at = _compose()
    precision = at.selectbox(key="w.precision")
    assert precision.options == ["auto (bf16, else fp16)", "fp32", "bf16", "fp16", "fp8 (FP8 GEMMs)"]
    assert "16-bit peak" in precision.help and "Megatron-LM" in precision.help
    assert not [s for s in at.selectbox if s.key == "w.tf32"]            # only for fp32
    precision.select("fp32").run()
    at.selectbox(key="w.tf32").select(False).run()
    ok(at)
    state = at.session_state["app_state"]
    assert (state.precision, state.tf32) == ("fp32", False)
    from ui.planning import build_job
    job = build_job(state)
    assert job.precision.value == "fp32" and job.tf32 is False
    assert "fp32 (TF32 off)" in shown("\n".join(m.value for m in at.sidebar.markdown))


def test_fp8_under_the_hetplan_runtime_says_which_engines_run_it():
    at = _compose(replace(SMALL_STATE, engine="hetplan"))
    at.selectbox(key="w.precision").select("fp8").run()
    ok(at)
    warning = shown(next(w.value for w in at.warning if "fp8" in w.value))
    assert "hetplan runtime does not train in fp8" in warning and "Megatron-LM and torchtitan" in warning
    assert "Only some pools have FP8" in texts(at)                       # the A100s have none
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    error = shown(at.error[0].value)
    assert "does not train in fp8" in error and "Megatron-LM, torchtitan" in error and "Compose" in error


def test_fp8_under_megatron_plans_on_the_gpus_that_have_it():
    at = _compose(replace(SMALL_STATE, precision="fp8", engine="megatron"))
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    plan = at.session_state["app_state"].plan
    assert plan["precision"] == "fp8" and plan["engine"] == "megatron"
    assert {r["pool"] for s in plan["stages"] for r in s["replicas"]} == {"rtx-4090"}


# ----------------------------------------------------------------------------- the Engines page

def _engines(state: AppState = SMALL_STATE):
    at = ok(new_app(encode(state)).run())
    at.switch_page("ui/pages/engines.py")
    ok(at.run())
    return at


def test_engines_side_by_side_on_a_small_cluster():
    from planner.engines import ENGINES
    at = _engines()
    assert "at most about" in texts(at) and not at.dataframe                # nothing searched before the press
    at.button(key="engines.search").click().run()
    ok(at)
    table = at.dataframe[0].value
    assert table["engine"].tolist() == [e.title for e in ENGINES.values()]
    rows = table.set_index("engine")
    assert rows.loc["hetplan runtime", "tokens/s vs runtime"] == "-"
    for name in ("Megatron-LM", "DeepSpeed", "torchtitan", "FlagScale"):
        # hetplan's runtime runs every plan and costs least, so no engine's best plan beats it
        assert rows.loc[name, "tokens/s vs runtime"] == "same" or rows.loc[name, "tokens/s vs runtime"].startswith("-")
        assert rows.loc[name, "search"] == "complete" and rows.loc[name, "GPUs used"].endswith("of 8")
    assert "Best by the objective (throughput): hetplan runtime" in texts(at)
    at.button(key="engines.adopt.deepspeed").click().run()                 # opens the Plan page on its search
    ok(at)
    state = at.session_state["app_state"]
    assert state.engine == "deepspeed" and state.plan["engine"] == "deepspeed"
    assert "For **DeepSpeed ·" in texts(at) and "All plans found" in "\n".join(s.value for s in at.subheader)


def test_engines_without_a_plan_say_why():
    at = _engines(replace(SMALL_STATE, precision="fp8"))
    at.button(key="engines.search").click().run()
    ok(at)
    rows = at.dataframe[0].value.set_index("engine")
    assert rows.loc["hetplan runtime", "search"] == "no plan"
    assert "does not train in fp8" in rows.loc["hetplan runtime", "plan"]
    assert rows.loc["Megatron-LM", "search"] == "complete"
    assert rows.loc["Megatron-LM", "tokens/s vs runtime"] == "-"           # nothing to compare with
    assert not [b for b in at.button if b.key == "engines.adopt.hetplan"]


def test_the_engines_page_remembers_its_answer_until_the_job_changes():
    at = _engines()
    at.button(key="engines.search").click().run()
    at.switch_page("ui/pages/compose.py")
    ok(at.run())
    at.switch_page("ui/pages/engines.py")
    ok(at.run())
    assert at.dataframe and not [b for b in at.button if b.key == "engines.search"]
    at.switch_page("ui/pages/compose.py")
    ok(at.run())
    at.number_input(key="w.batch").set_value(32).run()
    at.switch_page("ui/pages/engines.py")
    ok(at.run())
    assert not at.dataframe and "job changed" in texts(at)


# ----------------------------------------------------------------------------- What-if

def _what_if():
    at = ok(new_app(encode(replace(SMALL_STATE, plan=example_plan()))).run())
    at.switch_page("ui/pages/whatif.py")
    return ok(at.run())


def test_an_edit_that_leaves_the_engines_space_says_so_and_keeps_only_as_a_plan_it_runs():
    at = _what_if()
    next(s for s in at.selectbox if s.label == "engine").select("megatron").run()
    ok(at)
    error = shown(at.error[0].value)
    assert error.startswith("**The edited plan leaves Megatron-LM's space**")
    assert "same tensor-parallel degree" in error and "Engines that run it: **hetplan runtime**" in error
    labels = [b.label for b in at.button]
    assert "Keep this plan" not in labels and "Keep as a hetplan runtime plan" in labels
    assert "Keep as a Megatron-LM plan" not in labels
    next(b for b in at.button if b.label == "Keep as a hetplan runtime plan").click().run()
    ok(at)
    assert "engine" not in at.session_state["app_state"].plan      # kept as the hetplan runtime's


def test_an_edit_inside_the_engines_space_is_kept_for_that_engine():
    from ui.engines import engine_fit
    at = _compose()
    at.selectbox(key="w.engine").select("megatron").run()
    at.sidebar.button(key="sidebar_plan").click().run()
    at.switch_page("ui/pages/whatif.py")
    ok(at.run())
    next(s for s in at.selectbox if s.label == "recompute").select("selective").run()
    ok(at)
    assert not [e for e in at.error if "space" in e.value]
    next(b for b in at.button if b.label == "Keep this plan").click().run()
    plan = at.session_state["app_state"].plan
    assert plan["engine"] == "megatron" and plan["recompute"] == "selective"
    assert engine_fit(plan).violations == ()


# ----------------------------------------------------------------------------- Export and report

def test_export_offers_the_plan_the_engine_runs_best_against_the_plan_on_view():
    at = ok(new_app(encode(replace(SMALL_STATE, plan=example_plan()))).run())
    at.switch_page("ui/pages/export.py")
    ok(at.run())
    assert not [i for i in at.info if "runs best here" in i.value]           # searched only when asked
    at.button(key="export.find.megatron").click().run()
    ok(at)
    offer = shown(next(i.value for i in at.info if "runs best here" in i.value))
    assert offer.startswith("**The files describe the plan Megatron-LM runs best here**")
    assert "against the plan on view" in offer and "tokens/s" in offer and "per million tokens" in offer
    assert "megatron_args.sh" in [d.label for d in at.get("download_button")]
    at.button(key="export.adopt.megatron").click().run()
    ok(at)
    state = at.session_state["app_state"]
    assert state.engine == "megatron" and state.plan["engine"] == "megatron"
    at.switch_page("ui/pages/export.py")
    ok(at.run())          # the tab that opens is the plan's own engine's (it was torchrun's, which cannot run it)
    assert [t.label.split(" · ")[0] for t in at.tabs][:2] == ["megatron", "torchrun"], [t.label for t in at.tabs]


def test_the_report_names_the_engine_and_its_version():
    from catalog import cluster_from_dict, load_catalog, plan_from_dict
    from planner.cost import evaluate
    from ui import report
    cat = load_catalog()
    cluster = cluster_from_dict(presets()["single-node-8"], cat)
    plan = plan_from_dict(example_plan(), cat)
    rows = dict(report.summary_rows(cluster, plan, evaluate(cluster, plan)))
    assert rows["engine"].startswith("hetplan runtime · this repository")
