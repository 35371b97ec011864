"""Issue 20: figures that say what they mean: MFU of an fp8 plan against which peak, a batch far too small
for the GPUs, what a search's gap is made of."""
from __future__ import annotations

import pytest

from catalog import cluster_from_dict, load_catalog, plan_from_dict
from planner.cost import evaluate
from planner.search.bound import FILL_SLACK
from tests.app_helpers import H100_2X8

pytestmark = pytest.mark.filterwarnings("ignore")


def _scored(precision: str = "bf16", global_batch: int = 64, nodes: int = 2, seq_len: int = 2048):
    catalog = load_catalog()
    cluster = cluster_from_dict({**H100_2X8, "pools": [{**H100_2X8["pools"][0], "nodes": nodes}]}, catalog)
    replicas = nodes * 8
    plan = plan_from_dict({"model": "gpt3-1.3b", "global_batch": global_batch, "seq_len": seq_len, "micro_batch": 1,
                           "precision": precision, "engine": "megatron", "zero_stage": 1, "recompute": "none",
                           "stages": [{"layers": [0, 24], "replicas": [{"pool": "h100", "tp": 1}] * replicas}]},
                          catalog)
    return plan, cluster, evaluate(cluster, plan)


def test_an_fp8_plan_says_its_mfu_is_against_the_16_bit_peak_and_gives_the_fp8_figure():
    from ui.frames import mfu_caveat, mfu_peaks
    plan, cluster, est = _scored("fp8")
    peak16, peak8 = mfu_peaks(plan, cluster)
    gpu = cluster.pools[0].gpu
    assert (peak16, peak8) == (16 * gpu.peak_flops, 16 * gpu.peak_fp8_flops) and peak8 > peak16
    text = mfu_caveat(plan, cluster, est)
    assert "16-bit peak" in text and f"{est.mfu * peak16 / peak8:.1%}" in text
    assert mfu_caveat(*_scored("bf16")) == ""


def test_a_batch_far_too_small_for_the_gpus_is_said_with_the_reason():
    from planner.compute import gemm_half_dim
    from ui.frames import batch_too_small
    plan, cluster, est = _scored(global_batch=128, nodes=16, seq_len=256)   # 128 x 256 tokens over 128 GPUs
    assert 128 * 256 / 128 < gemm_half_dim(cluster.pools[0].gpu)           # H100 SXM: 295
    text = batch_too_small(plan, cluster, est)
    assert "far too small for 128 GPUs" in text and "256.0 tokens" in text and f"{est.mfu:.1%}" in text
    assert batch_too_small(*_scored(global_batch=64, nodes=2)) == ""  # 8,192 tokens a GPU


def test_a_gap_says_which_part_is_the_bounds_margin_that_time_does_not_remove():
    from ui.views.summary import gap_made_of
    margin = 1 / (1 - FILL_SLACK) - 1
    text = gap_made_of(0.269)
    assert f"{margin:.1%}" in text and "more time does not remove" in text
    assert f"within {(1.269 * (1 - FILL_SLACK) - 1):.1%} of #1" in text
    assert "may well be the best plan already" in gap_made_of(margin / 2)
    assert gap_made_of(0.0) == gap_made_of(None) == ""


def test_a_fine_tuning_job_trains_epochs_over_a_dataset_not_pretrainings_tokens():
    """Issue 20: QLoRA kept pretraining's 300 B tokens ("317 days")."""
    from tests.app_helpers import new_app, ok, sidebar_text
    from ui.state import FINETUNE_DATASET_TOKENS, PRETRAIN_TOKENS, AppState, encode
    at = ok(new_app(encode(AppState(cluster=H100_2X8, model="llama-2-7b"))).run())
    assert at.session_state["app_state"].tokens_to_train == PRETRAIN_TOKENS
    at.selectbox(key="w.job_kind").select("qlora").run()
    state = ok(at).session_state["app_state"]
    assert state.tokens_to_train == 3 * FINETUNE_DATASET_TOKENS and state.epochs == 3
    assert "300 M tokens (3 epochs)" in sidebar_text(at)
    at.number_input(key="w.epochs").set_value(1.0).run()
    assert ok(at).session_state["app_state"].tokens_to_train == FINETUNE_DATASET_TOKENS
    at.number_input(key="w.dataset").set_value(250.0).run()
    assert ok(at).session_state["app_state"].tokens_to_train == 250e6
    at.selectbox(key="w.job_kind").select("lora").run()          # a count the user set stays
    assert ok(at).session_state["app_state"].tokens_to_train == 250e6
    at.selectbox(key="w.job_kind").select("pretrain").run()
    assert ok(at).session_state["app_state"].tokens_to_train == 250e6


# ----------------------------------------------------------------------------- one way of writing things

def test_layer_ranges_read_the_same_on_every_page():
    """Issue 20: end-exclusive on two pages ("ends before layer 16"), inclusive on a third ("layers 0–15")."""
    import pandas as pd
    from tests.app_helpers import example_plan
    from ui import charts, frames
    from ui.numbers import layer_range
    from ui.views.whatif import _assemble
    assert (layer_range(0, 16), layer_range(7, 8)) == ("layers 0–15", "layer 7")
    plan, cluster, _ = _scored()
    table = frames.replica_groups(plan, cluster)
    assert list(table["layer_range"]) == ["layers 0–23"]
    figure = charts.pipeline(table, plan.model.layers)
    assert "layers 0–23" in figure.data[0].text and "layers 0–23" in figure.data[0].hovertemplate
    # What-if edits each stage's last layer, included, and writes the plan file's end-exclusive pairs
    data = example_plan()
    stages = pd.DataFrame([{"stage": 0, "last_layer": 8}, {"stage": 1, "last_layer": 23}])
    groups = pd.DataFrame([{"stage": s, "pool": "a100", "tp": 1, "replicas": 1, "samples": None} for s in (0, 1)])
    assert [s["layers"] for s in _assemble(data, stages, groups, {})["stages"]] == [[0, 9], [9, 24]]


def test_counts_are_pluralised_and_grouped_one_way():
    from ui.numbers import count, tokens, whole
    assert (count(1, "pool"), count(2, "pool"), count(98_304, "GPU")) == ("1 pool", "2 pools", "98,304 GPUs")
    assert whole(1024) == "1,024"
    assert (tokens(300e9), tokens(3e8), tokens(1.5e9)) == ("300 B tokens", "300 M tokens", "1.5 B tokens")


def test_a_share_link_opens_the_plan_page_the_sender_sees():
    """Issue 20: the link opened the plan alone ("came from a link"), without the alternatives, the baselines
    and the cheaper plans the sender saw."""
    from tests.app_helpers import SMALL, new_app, ok, press_plan, shown, texts
    at = ok(new_app(SMALL).run())
    press_plan(at)
    at.radio(key="plan_on_view").set_value("#2").run()          # the sender looks at another plan than #1
    sender = ok(at).session_state["app_state"]
    params = {k: v[-1] if isinstance(v, list) else v for k, v in at.query_params.items()}
    assert params.get("searched") == "1"
    from ui.state import encode
    link = {**encode(sender), "searched": "1"}
    opened = ok(new_app(link).run())                                   # opened on Compose: nothing runs yet
    opened.switch_page("ui/pages/summary.py").run()
    said = texts(ok(opened))
    assert opened.session_state["app_state"].plan == sender.plan       # the same plan on view, #2
    assert any(shown(h.value) == "Plan on view: #2" for h in opened.subheader) and "came from a link" not in said
    assert any(m.label.startswith("vs ") for m in opened.metric)      # the gains over the baselines
    assert [(m.label, m.value) for m in opened.metric] == [(m.label, m.value) for m in at.metric]

    def cheaper(app):
        return [m.value for m in app.markdown if "Cheaper plans on the Pareto front" in m.value]
    assert cheaper(opened) == cheaper(at)


def test_a_legend_of_24_stages_does_not_cover_the_title():
    import pandas as pd
    from ui import charts
    def grid(stages):
        return pd.DataFrame([{"pool": "h100", "gpu_type": "h100-sxm", "node": n, "gpu": g, "stage": n, "replica": 0}
                             for n in range(stages) for g in range(8)])
    assert charts.cluster_grid(grid(4)).layout.legend.orientation == "h"        # a row above the plot
    legend = charts.cluster_grid(grid(24)).layout.legend
    assert legend.orientation == "v" and legend.x > 1                           # a column right of the plot


def test_compose_refuses_bad_pool_values_in_words_and_names_no_unrelated_preset():
    """Issue 20: 0 nodes, 65 GPUs per node and a price of -3 were clamped silently; an empty table spoke the
    validator's words; the preset box showed the first preset after an upload."""
    from tests.app_helpers import new_app, ok, texts
    from ui.state import AppState, encode
    pool = H100_2X8["pools"][0]
    for bad, says in (({"nodes": 0}, "pool table row 1 (h100-sxm), nodes: must be a positive number, got 0"),
                      ({"gpus_per_node": 65}, "GPUs / node: must be at most 64, got 65"),
                      ({"price_per_gpu_hour": -3}, "$ / GPU-hour: must be zero or more, got -3")):
        at = ok(new_app(encode(AppState(cluster={**H100_2X8, "pools": [{**pool, **bad}]}))).run())
        assert says in texts(at) and not at.success
    at = ok(new_app(encode(AppState(cluster={"name": "empty", "pools": []}))).run())
    said = texts(at)
    assert "no pools; add a row to the pool table" in said and "List should have" not in said
    at = ok(new_app(encode(AppState(cluster=H100_2X8))).run())       # a cluster that is no preset
    assert at.selectbox(key="w.preset").value is None


def test_an_fp8_refusal_is_not_followed_by_no_plan_yet():
    from tests.app_helpers import new_app, ok, press_plan, texts
    from ui.state import AppState, encode, presets
    at = ok(new_app(encode(AppState(cluster=presets()["single-node-8"], model="gpt3-1.3b", global_batch=64,
                                    seq_len=2048, precision="fp8", engine="deepspeed"))).run())
    press_plan(at)
    assert at.error and "No plan yet" not in texts(at)
