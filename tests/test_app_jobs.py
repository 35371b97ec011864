"""The app composes each job kind (pretraining, full fine-tuning, LoRA, QLoRA) and offload setting:
the state and its link, the Compose pickers and their warnings, the plan the search returns, the
summary, Memory page and report that show it, and What-if edits that keep it."""
from __future__ import annotations

import base64
import json
import zlib
from dataclasses import asdict, fields, replace

import pytest

from tests.app_helpers import new_app, ok, real_search_and_fresh_cache, shown, texts  # noqa: F401
from ui.state import JOB_DEFAULTS, VERSION, AppState, decode, encode

pytestmark = pytest.mark.filterwarnings("ignore")
LAB = {"name": "lab", "pools": [{"name": "rtx4090", "gpu": "rtx-4090", "nodes": 1, "gpus_per_node": 4}]}
LAB_STATE = AppState(cluster=LAB, model="llama-3-8b", global_batch=32, seq_len=2048, tokens_to_train=None)


def _token(data: dict) -> dict:
    raw = json.dumps(data).encode()
    return {"v": VERSION, "s": base64.urlsafe_b64encode(zlib.compress(raw)).decode().rstrip("=")}


def _plan(state: AppState):
    at = ok(new_app(encode(state)).run())
    at.sidebar.button(key="sidebar_plan").click().run()
    return ok(at)


def _sidebar(at) -> str:
    return shown("\n".join(m.value for m in at.sidebar.markdown))


# ----------------------------------------------------------------------------- state and link

def test_job_kind_rank_and_offload_round_trip_through_the_link():
    state = replace(LAB_STATE, job_kind="qlora", lora_rank=64, offload="optimizer+params")
    assert decode(encode(state)) == (state, [])
    assert state.job_key() != replace(state, lora_rank=8).job_key() != replace(state, offload="auto").job_key()


def test_a_link_without_them_means_pretraining_with_offload_auto():
    old = asdict(LAB_STATE)
    for name in ("job_kind", "lora_rank", "offload"):
        del old[name]
    state, warnings = decode(_token(old))
    assert warnings == [] and state == LAB_STATE
    assert (state.job_kind, state.lora_rank, state.offload) == ("pretrain", 16, "auto")
    assert JOB_DEFAULTS == {f.name: f.default for f in fields(AppState) if f.name in JOB_DEFAULTS}


@pytest.mark.parametrize("changes, named", [
    ({"job_kind": "evil", "lora_rank": -3}, ("job_kind", "'evil'", "lora_rank", "-3")),
    ({"lora_rank": True, "offload": "gpu"}, ("lora_rank", "offload", "'gpu'")),
    ({"job_kind": ["lora"], "lora_rank": 10 ** 9, "offload": None}, ("job_kind", "lora_rank", "offload")),
])
def test_hostile_job_values_in_a_link_warn_and_fall_back_to_the_defaults(changes, named):
    state, warnings = decode(_token(dict(asdict(LAB_STATE), **changes)))
    assert state == LAB_STATE                      # cluster, model and batch kept; the bad values are the defaults
    assert len(warnings) == len(changes)
    said = " ".join(warnings)
    assert all(n in said for n in named) and "instead" in said


def test_readable_link_parameters_take_the_job_and_warn_on_bad_ones():
    state, warnings = decode({"preset": "single-node-8", "job_kind": "lora", "lora_rank": "32", "offload": "none"})
    assert (state.job_kind, state.lora_rank, state.offload, warnings) == ("lora", 32, "none", [])
    state, warnings = decode({"preset": "single-node-8", "job_kind": "evil", "lora_rank": "-3"})
    assert (state.job_kind, state.lora_rank) == ("pretrain", 16) and state.cluster["name"] == "single-node-8"
    assert len(warnings) == 2 and "'evil'" in warnings[0] and "-3" in warnings[1]


def test_a_hostile_link_opens_the_app_with_warnings_shown_as_text():
    at = ok(new_app(_token(dict(asdict(LAB_STATE), job_kind="[x](http://evil)", lora_rank=-3))).run())
    said = [w.value for w in at.warning]
    assert any("job_kind" in shown(w) and "[x](http://evil)" in shown(w) and "\\[x\\]" in w for w in said)
    assert any("lora_rank" in shown(w) for w in said)
    state = at.session_state["app_state"]
    assert (state.job_kind, state.lora_rank, state.cluster["name"]) == ("pretrain", 16, "lab")


# ----------------------------------------------------------------------------- Compose and Plan

def test_the_sidebar_job_line_names_the_precision():
    """Browser walk: the job line read "batch 512 × 4,096 tokens, auto, 300 B tokens" (what was auto?)."""
    at = ok(new_app(encode(LAB_STATE)).run())
    assert "2,048 tokens, precision auto" in _sidebar(at)
    at.selectbox(key="w.precision").select("bf16").run()
    assert "2,048 tokens, bf16" in _sidebar(ok(at))


def test_compose_a_lora_job_and_plan_it():
    at = ok(new_app(encode(LAB_STATE)).run())
    kind = at.selectbox(key="w.job_kind")
    assert kind.options == ["pretrain", "full fine-tune", "LoRA", "QLoRA"]
    assert "NF4" in kind.help and "adapters" in kind.help
    assert not [n for n in at.number_input if n.key == "w.lora_rank"]          # only for LoRA and QLoRA
    assert at.selectbox(key="w.offload").options == ["auto", "none", "optimizer", "optimizer+params"]
    kind.select("lora").run()
    at.number_input(key="w.lora_rank").set_value(8).run()
    ok(at)
    state = at.session_state["app_state"]
    assert (state.job_kind, state.lora_rank) == ("lora", 8)
    assert "LoRA rank 8, offload auto" in _sidebar(at)
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    plan = at.session_state["app_state"].plan
    assert plan["job"] == {"kind": "lora", "lora_rank": 8}
    assert "Plan on view** LoRA rank 8" in _sidebar(at)
    assert "LoRA rank 8" in texts(at)                                           # the plan's shape line


def test_a_qlora_job_plans_with_a_4_bit_base():
    at = _plan(replace(LAB_STATE, job_kind="qlora"))
    plan = at.session_state["app_state"].plan
    assert plan["job"]["kind"] == "qlora" and plan.get("offload", "none") == "none"
    assert "Plan on view** QLoRA rank 16" in _sidebar(at)


def test_full_fine_tuning_under_deepspeed_offloads_the_optimizer_and_shows_its_cpu_memory():
    state = replace(LAB_STATE, model="llama-2-7b", job_kind="full-finetune", engine="deepspeed")
    at = _plan(state)
    plan = at.session_state["app_state"].plan
    assert plan["offload"] == "optimizer" and plan["job"] == {"kind": "full-finetune"}
    assert "offload optimizer" in _sidebar(at)
    at.switch_page("ui/pages/memory.py")
    ok(at.run())
    assert "Offload optimizer:" in texts(at)
    table = at.dataframe[0].value
    assert (table["cpu_offloaded"] > 10).all()         # fp32 master, Adam and gradients of 7 B / 4 GPUs
    from ui import report
    from ui.planning import build_cluster, estimate_of
    plan_obj, est = estimate_of(at.session_state["app_state"]).result
    markdown = shown(report.to_markdown(build_cluster(at.session_state["app_state"]), plan_obj, est))
    assert "cpu_offloaded" in markdown and "full fine-tune, offload optimizer" in markdown


def test_lora_under_megatron_says_which_engines_run_it_and_the_plan_page_explains():
    at = ok(new_app(encode(replace(LAB_STATE, job_kind="lora", engine="megatron"))).run())
    warning = shown(next(w.value for w in at.warning if "does not run" in w.value))
    assert "Megatron-LM does not run LoRA jobs" in warning
    from ui.engines import engines_that_run
    from planner.types import JobKind
    runners = engines_that_run(JobKind.LORA)
    assert runners and all(r in warning for r in runners) and "Megatron-LM" not in runners
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    error = shown(at.error[0].value)
    assert "does not run lora jobs" in error and "Compose" in error and "Traceback" not in error
    assert at.session_state["app_state"].plan is None


def test_a_fixed_offload_the_engine_lacks_is_named_with_the_engines_that_have_it():
    at = ok(new_app(encode(replace(LAB_STATE, offload="optimizer", engine="hetplan"))).run())   # runtime: no offload
    warning = shown(next(w.value for w in at.warning if "does not offload" in w.value))
    assert "hetplan runtime does not offload optimizer" in warning and "DeepSpeed" in warning
    at.sidebar.button(key="sidebar_plan").click().run()
    ok(at)
    assert "does not offload optimizer" in shown(at.error[0].value)


def test_the_planner_gets_the_job_kind_and_the_offload_setting():
    from planner.types import JobKind, Offload
    from ui.planning import build_job, offload_search
    job = build_job(replace(LAB_STATE, job_kind="qlora", lora_rank=4, offload="optimizer"))
    assert (job.training.kind, job.training.lora_rank, job.offload) == (JobKind.QLORA, 4, Offload.OPTIMIZER)
    assert offload_search(replace(LAB_STATE, offload="optimizer")) == "fixed"
    auto = replace(LAB_STATE, offload="auto")
    assert build_job(auto).offload == Offload.NONE and offload_search(auto) == "auto"


# ----------------------------------------------------------------------------- What-if

def test_what_if_edits_keep_the_plans_job_and_offload():
    state = replace(LAB_STATE, model="llama-2-7b", job_kind="full-finetune", engine="deepspeed")
    at = _plan(state)
    at.switch_page("ui/pages/whatif.py")
    ok(at.run())
    recompute = next(s for s in at.selectbox if s.label == "recompute")
    recompute.select("full" if recompute.value != "full" else "selective").run()
    ok(at)
    keep = next(b for b in at.button if b.label == "Keep this plan")
    keep.click().run()
    ok(at)
    plan = at.session_state["app_state"].plan
    assert plan["offload"] == "optimizer" and plan["job"] == {"kind": "full-finetune"}


def test_an_adopted_plan_brings_its_job_kind_and_offload_to_compose():
    from ui.views.whatif import _offload_setting
    assert _offload_setting("optimizer", "auto") == "optimizer"
    assert _offload_setting("none", "none") == "none"
    assert _offload_setting("none", "optimizer+params") == "auto"
