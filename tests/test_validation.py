"""The cost model against published measurements (benchmarks/reference/, citations in each file).

Tolerances: every throughput/iteration row within 10% and every memory row within 10%
(activations, whose formula is Korthikanti's own, within 1%); on Korthikanti et al. 2022
Table 5 the mean error must match or beat calculon's published 3.7% (worst 8.9%).

Public training runs (benchmarks/reference/public_training_runs.csv, rows cited by their line):
the per-engine and per-GPU-type medians are held within 2 points of the figures measured when
this test was written (docs/validation.md), so a regression fails; issue 10's targets (median
<= 10% in every engine group, GPU types' signed medians within 10 points) are held where met
and marked as expected failures where not, so meeting them fails the marker and asks for it to go.
"""
from __future__ import annotations

import re
import statistics

import pytest

from benchmarks import public_runs, validation
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def rows(catalog):
    return validation.all_rows(catalog.gpus["a100-80gb-sxm"])


def by(rows, dataset, quantity=None):
    return [r for r in rows if r.dataset.startswith(dataset) and (quantity is None or r.quantity == quantity)]


def test_every_reference_row_is_compared(rows):
    assert len(by(rows, "Narayanan 2021")) == 10
    assert len(by(rows, "Korthikanti 2022 Table 5")) == 8
    assert len(by(rows, "Korthikanti 2022 Figure 1")) == 16


def test_megatron_weak_scaling_throughput_within_11_percent(rows):
    # Narayanan et al. 2021 (SC21) Table 1: TFLOP/s per A100, 32 to 3,072 GPUs. Worst measured 10.8% (1T on
    # 3,072 GPUs) since the GEMM factor 0.948 fitted to these rows went (issue 19); 8.6% with it
    errors = {r.case: r.error for r in by(rows, "Narayanan 2021")}
    assert all(abs(e) <= 0.11 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.10


def test_korthikanti_iteration_times_do_not_regress(rows):
    # Korthikanti et al. 2022 Table 5. Measured 5.2% mean, 9.7% worst (turing-530b seqsel) with no fitted GEMM
    # factor (issue 19); 3.0% and 9.2% with the factor 0.948 that was chosen for these rows
    errors = [abs(r.error) for r in by(rows, "Korthikanti 2022 Table 5")]
    assert statistics.mean(errors) <= 0.052 + 0.005, errors
    assert max(errors) <= 0.097 + 0.005, errors


@pytest.mark.xfail(strict=True, reason="calculon (Isaev et al. SC23) reports 3.7% mean, 8.9% worst on Korthikanti "
                                       "Table 5; without a constant fitted to it the model has 5.2% and 9.7%")
def test_korthikanti_iteration_times_beat_calculon(rows):
    errors = [abs(r.error) for r in by(rows, "Korthikanti 2022 Table 5")]
    assert statistics.mean(errors) <= 0.037 and max(errors) <= 0.089


def test_korthikanti_memory(rows):
    # Korthikanti et al. 2022 Figure 1. The figure counts only the 12h^2 weights per layer; the model
    # also counts the first stage's embedding (1-9% more), hence 10% on model states.
    states = by(rows, "Korthikanti 2022 Figure 1", "weights+optimizer GiB")
    acts = by(rows, "Korthikanti 2022 Figure 1", "activations GiB")
    assert all(abs(r.error) <= 0.10 for r in states), [(r.case, r.error) for r in states]
    assert all(abs(r.error) <= 0.01 for r in acts), [(r.case, r.error) for r in acts]
    assert statistics.median(abs(r.error) for r in states + acts) <= 0.10


def test_docs_validation_is_the_scripts_output(catalog):
    # docs/validation.md must be exactly what `python benchmarks/validation.py` writes
    assert (ROOT / "docs" / "validation.md").read_text() == validation.document(catalog)


# ----------------------------------------------------------------------------- public training runs

MEASURED_TOLERANCE = 0.02        # 2 points around the figures measured at this commit


@pytest.fixture(scope="module")
def public(catalog):
    return public_runs.public_rows(catalog.gpus)


def test_every_public_run_is_stated_or_has_a_reason(public):
    stated, unstated = public
    assert len(stated) + len(unstated) == 98
    assert len({r.line for r in stated} | {u.line for u in unstated}) == 98
    reasons = [u.reason for u in unstated]
    assert sum("FP8" in r for r in reasons) == 21          # Float8 rows: stated apart (fp8_rows)
    assert sum("context parallelism" in r for r in reasons) == 9   # stated apart (context_parallel_rows)
    assert len(stated) == 58
    assert {r.engine for r in stated} == {"torchtitan", "megatron"}
    # torchtitan rows are FSDP2 (ZeRO-3) plans for the torchtitan engine, Megatron rows for megatron
    assert all(r.engine == "torchtitan" for r in stated if r.group.startswith("torchtitan"))


def test_megatron_engine_group_within_10_percent(public):
    # 41 Megatron-LM rows (2020 V100/A100 lines 85-96, 2021 Selene lines 65-84, 2024 H100 lines 47-55):
    # median abs. error measured 7.3%, signed +3.5% with GEMMs at the measured rates and no fitted factor,
    # attention at FlashAttention-2's measured rates (issue 19); 5.1%, +1.0% with the fitted 0.948; 7.4%, +3.0%
    # with compute slowed beside the collectives it hides (planner.comm.OVERLAP_COMPUTE_SLOWDOWN)
    s = public_runs.targets(public[0])[0]["Megatron-LM"]
    assert s.rows == 41
    assert s.median_abs <= 0.10
    assert s.median_abs <= 0.074 + MEASURED_TOLERANCE
    assert abs(s.signed_median - 0.030) <= MEASURED_TOLERANCE


def test_torchtitan_engine_group_does_not_regress(public):
    # 17 torchtitan rows (A100 lines 34-43, H100 HBM2e 500 W lines 2-27 and 44): median abs. error
    # measured 24.2% with the GEMMs at their measured rates without the fitted factor 0.948 and attention at
    # FlashAttention-2's measured rates (issue 19; 16.3% before), all but the two async-TP rows (lines 21,
    # 27) over-predicted; 16.8% with compute slowed beside the FSDP collectives it hides
    s = public_runs.targets(public[0])[0]["torchtitan (FSDP2)"]
    assert s.rows == 17
    assert s.median_abs <= 0.168 + MEASURED_TOLERANCE


def test_torchtitan_rows_that_ran_fit(public):
    # lines 2, 3 and 39 ran (measured throughput); op-level SAC keeps only the saved tensors
    assert all(r.fits for r in public[0] if r.engine == "torchtitan")


def test_torchtitan_op_sac_costs_what_it_measured(public):
    # Llama 2 13B on 64 A100s, lines 34 (no AC) and 36 (selective op AC): +13.6% measured
    rows = {r.line: r for r in public[0]}
    measured = rows[34].measured / rows[36].measured - 1
    predicted = rows[34].predicted / rows[36].predicted - 1
    assert abs(predicted - measured) <= 0.02, (measured, predicted)


@pytest.mark.xfail(strict=True, reason="issue 10 target not met: torchtitan median 16.8% (docs/validation.md)")
def test_torchtitan_engine_group_within_10_percent(public):
    assert public_runs.targets(public[0])[0]["torchtitan (FSDP2)"].median_abs <= 0.10


def test_gpu_types_do_not_regress(public):
    # signed medians measured: A100 +7.9% (36 rows), H100 SXM 700 W -1.8% (9), H100 HBM2e 500 W +13.3% (9),
    # V100 -13.4% (4) (issue 19: measured GEMM and attention rates, no fitted factor, compute slowed beside
    # the collectives it hides)
    measured = {"A100": 0.079, "H100 SXM 700 W": -0.018, "H100 HBM2e 500 W": 0.133, "V100": -0.134}
    gpu_types = public_runs.targets(public[0])[1]
    assert set(gpu_types) == set(measured)
    for gpu, signed in measured.items():
        assert abs(gpu_types[gpu].signed_median - signed) <= MEASURED_TOLERANCE, (gpu, gpu_types[gpu])


@pytest.mark.xfail(strict=True, reason="issue 10 target not met: GPU types' signed medians 26.7 points apart "
                                       "(V100 -13.4% to H100 HBM2e 500 W +13.3%)")
def test_gpu_types_signed_medians_within_10_points(public):
    assert public_runs.targets(public[0])[2] <= 0.10


def test_torchtitan_h100s_are_the_500w_hbm2e_part(catalog):
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md lines 11-15: 96 GB HBM2e, 2.4 TB/s, 500 W;
    # peak between H100 NVL (835) and SXM (989) TFLOP/s (arXiv 2410.06511), the catalog's h100-sxm untouched
    h100 = catalog.gpus["h100-sxm"]
    part = public_runs.h100_hbm2e_500w(h100)
    assert part.peak_flops == pytest.approx(886.33e12, rel=1e-4)
    assert 835e12 < part.peak_flops < h100.peak_flops == 989e12
    assert part.mem_bw_bytes_per_s == 2400e9 and part.power_w == 500
    assert part.efficiency == h100.efficiency


# ----------------------------------------------------------------------------- the mechanisms these rows test

def test_op_sac_recomputes_the_even_numbered_matmuls(catalog):
    # torchtitan _custom_policy: wq, wk, wv, wo, w1, w3, w2 -> recompute wk, wo, w3 (mm_count % 2 == 0)
    from planner.compute import op_sac_recomputed_matmul_fraction
    from planner.flops import layer_matmul_flops_per_token
    m = catalog.model("llama-3.1-8b") if "llama-3.1-8b" in catalog.models else catalog.model("llama-2-7b")
    h, g, f = m.hidden, m.kv_heads * m.head_dim, m.ffn
    assert op_sac_recomputed_matmul_fraction(m) == pytest.approx((2 * h * g + 2 * h * h + 2 * h * f)
                                                                 / layer_matmul_flops_per_token(m))


def test_eager_kernels_and_op_sac_cost_more_time_and_op_sac_keeps_less(catalog):
    from planner.compute import Kernels, PassExecution, SelectiveKind, StagePass, stage_pass_times
    from planner.memory import activation_bytes_per_layer
    from planner.types import Recompute
    m, gpu = catalog.model("llama-2-7b"), catalog.gpus["a100-80gb-sxm"]
    def total(kernels, selective, rc=Recompute.SELECTIVE):
        t = stage_pass_times(StagePass(model=m, gpu=gpu, num_layers=4, has_head=False, seq_len=4096, micro_batch=1,
                                       tp=1, sequence_parallel=False, recompute=rc, flash_attention=True,
                                       link_bw=gpu.link_bw_bytes_per_s),
                             PassExecution(kernels=kernels, selective=selective))
        return t.forward_s + t.backward_s
    fused, core = Kernels.FUSED, SelectiveKind.ATTENTION_CORE
    assert total(Kernels.EAGER_UNFUSED_NORM, core) > total(Kernels.EAGER, core) > total(fused, core)
    assert total(fused, SelectiveKind.OP_SAC) > total(fused, core) > total(fused, core, Recompute.NONE)
    keep = {k: activation_bytes_per_layer(m, 4096, 1, 1, False, Recompute.SELECTIVE, True, None, k) for k in SelectiveKind}
    full = activation_bytes_per_layer(m, 4096, 1, 1, False, Recompute.FULL, True)
    assert full < keep[SelectiveKind.OP_SAC] < keep[core]


def test_fp8_runs_stated_apart_with_their_error(catalog):
    """The FP8 runs without context parallelism (issue 11) as docs/validation.md 'FP8 runs' reports
    them at this commit: 15 torchtitan Float8 (tensor-wise) rows over-predicted by a median +11.7% (the
    bf16 rows: +16.3%; the rest is the assumption that FP8 GEMMs reach the bf16-measured efficiency;
    lines 5 and 16 joined with their global batch = local batch x FSDP degree), the one Megatron-Core
    FP8 row (line 59, a Llama 3 shape at tp 4, VP 5 not modelled) under-predicted by 13.3% (-8.2% before the
    GEMM roll-off took H100's n0 = 295: its h / tp = 2048 GEMMs slow by 6%). Row-wise scaling rows are listed with
    their reason; context-parallel rows have their own table."""
    stated, unstated = public_runs.fp8_rows(catalog.gpus)
    tt = [r for r in stated if r.engine == "torchtitan"]
    mg = [r for r in stated if r.engine == "megatron"]
    assert len(tt) == 15 and len(mg) == 1
    assert {5, 16} <= {r.line for r in tt}
    assert not any("context parallelism" in u.reason for u in unstated)
    s = public_runs.summarise(tt)
    # issue 19: FP8 GEMMs at the measured FP8 rates (H100 0.709 of the FP8 peak), attention at FlashAttention-2's
    # measured rates: torchtitan +10.0%, line 59 -17.3%; +5.9% since FP8 plans reduce gradients as their BF16
    # twins do (the engines branch); +3.4%, line 59 -17.4% with compute slowed beside the collectives it hides;
    # +6.0% with the pipelined rows (14, 16) as torchtitan runs them, ZeRO-2 (no all-gather per micro-batch)
    assert abs(s.signed_median - 0.060) <= MEASURED_TOLERANCE
    assert abs(mg[0].error + 0.173) <= MEASURED_TOLERANCE
    assert all(r.reason for r in unstated) and any("row-wise" in r.reason for r in unstated)
    assert all(r.fits for r in stated)


# ----------------------------------------------------------------------------- context parallelism and 405B (issue 11)

@pytest.fixture(scope="module")
def context_parallel(catalog):
    return public_runs.context_parallel_rows(catalog.gpus)


def test_context_parallel_rows_use_every_gpu_of_the_run(catalog):
    # each replica spans tp x cp GPUs: tp x cp x dp x pp = the run's GPUs, dp as the source states it
    runs = public_runs.read_runs()
    for line in (6, 7, 8, 17, 18, 19, 58, 60):
        row = runs[line - 2]
        if row["framework"] == "torchtitan":
            _, plan, _ = public_runs.torchtitan_row(row, catalog.gpus)
        else:
            _, plan, _ = public_runs.megatron_row(row, catalog.gpus, {})
        assert plan.context_parallel == int(row["cp"]) > 1
        assert plan.num_gpus == int(row["num_gpus"]), (line, plan.num_gpus)
        assert len(plan.stages[0].replicas) == int(row["dp_or_fsdp"].split()[-1])
        assert plan.seq_len % (2 * plan.context_parallel) == 0


def test_context_parallel_runs_stated_with_their_error(context_parallel):
    """docs/validation.md 'Context-parallel runs' at this commit: 6 torchtitan rows (Dec. 2024 Tables 2
    and 6, Float8 + CP, lines 6-8 and 17-19) over-predicted by a median +41.6%, the error growing with cp;
    2 Megatron-Core r0.12 FP8 rows (lines 58, 60), median abs. error 8.2%. Line 99 (Meta's engine) is
    listed with its reason."""
    stated, unstated = context_parallel
    tt = [r for r in stated if r.engine == "torchtitan"]
    mg = [r for r in stated if r.engine == "megatron"]
    assert [r.line for r in tt] == [6, 7, 8, 17, 18, 19] and [r.line for r in mg] == [58, 60]
    assert all(r.predicted > 0 and abs(r.error) < 1.0 for r in stated)
    # issue 19 (measured GEMM and attention rates): torchtitan +46.0%, Megatron-Core median 7.9%; +43.5% and
    # 9.1% with compute slowed beside the collectives it hides (FSDP's, the tp overlap's)
    assert abs(public_runs.summarise(tt).signed_median - 0.435) <= MEASURED_TOLERANCE
    assert public_runs.summarise(mg).median_abs <= 0.091 + MEASURED_TOLERANCE
    assert [u.line for u in unstated] == [99] and "Meta" in unstated[0].reason


@pytest.mark.xfail(strict=True, reason="issue 10's 10% target not met by torchtitan's context-parallel rows: "
                                       "median 44.4% (docs/validation.md)")
def test_context_parallel_torchtitan_within_10_percent(context_parallel):
    tt = [r for r in context_parallel[0] if r.engine == "torchtitan"]
    assert public_runs.summarise(tt).median_abs <= 0.10


def test_every_405b_row_is_stated_or_has_a_reason(catalog, public, context_parallel):
    # 13 rows of Llama 3 / 3.1 405B: 9 stated (torchtitan lines 14, 16-19, 44-46; Megatron-Core line 60),
    # line 15 (interleave depth not stated) and Meta's lines 97-99 not
    fp8 = public_runs.fp8_rows(catalog.gpus)
    stated, unstated = public_runs.llama_405b_rows(public[0] + fp8[0] + context_parallel[0],
                                                   public[1] + fp8[1] + context_parallel[1])
    assert [r.line for r in stated] == [14, 16, 17, 18, 19, 44, 45, 46, 60]
    assert [u.line for u in unstated] == [15, 97, 98, 99]


def test_gemm_roll_off_is_the_gpus_ops_byte_ratio(catalog):
    # NVIDIA Matrix Multiplication Background guide: memory-bound below the ops:byte ratio (V100: 139)
    from planner.compute import gemm_efficiency, gemm_half_dim
    a100, h100, v100 = (catalog.gpus[g] for g in ("a100-80gb-sxm", "h100-sxm", "v100-32gb-sxm"))
    assert gemm_half_dim(a100) == pytest.approx(153.0, abs=0.5)
    assert gemm_half_dim(h100) == pytest.approx(295.2, abs=0.5)
    assert gemm_half_dim(v100) == pytest.approx(138.9, abs=0.5)
    # the same 1k-wide GEMM reaches a smaller share of H100's best rate than of A100's
    assert gemm_efficiency(h100, 1024) / h100.efficiency < gemm_efficiency(a100, 1024) / a100.efficiency


def test_tp_comm_overlap_leaves_one_chunk_and_what_outlasts_the_gemms():
    from planner.comm import OVERLAP_COMPUTE_SLOWDOWN as slow
    from planner.compute import exposed_tp_comm_s
    assert exposed_tp_comm_s(1.0, 5.0, 1) == 1.0              # no tensor parallelism, nothing to overlap
    # one chunk exposed, and the GEMMs beside the other seven slowed by them
    assert exposed_tp_comm_s(1.0, 5.0, 8) == pytest.approx(1 / 8 + slow * 7 / 8)
    assert exposed_tp_comm_s(1.0, 0.25, 8) == pytest.approx(0.75 + slow * 0.25)
    assert all(1.0 / t <= exposed_tp_comm_s(1.0, g, t) <= 1.0 for t in (2, 4, 8) for g in (0.0, 0.5, 2.0))


def test_megatron_core_2024_rows_run_with_the_readmes_overlaps():
    # Megatron-LM README lines 99-104 (the rows' notes): --tp-comm-overlap, --overlap-param-gather
    rows = [r for r in public_runs.read_runs() if "r0.8" in r["framework"] and "weak-scaling" in r["model"]]
    assert len(rows) == 9 and all("--tp-comm-overlap" in r["notes"] for r in rows)
    assert all(public_runs.megatron_overlaps(r) == {"tp_comm_overlap": True, "overlap_param_gather": True}
               for r in rows)
    from planner.engines import ENGINES
    assert not any(e.execution.tp_comm_overlap or e.execution.overlap_param_gather for e in ENGINES.values())


# ----------------------------------------------------------------------------- the script itself (issue 19)

def test_help_prints_help_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(validation, "ROOT", tmp_path)
    with pytest.raises(SystemExit) as exit_:
        validation.main(["--help"])
    assert exit_.value.code == 0
    assert "--write-docs" in capsys.readouterr().out
    assert not (tmp_path / "docs").exists()


def test_every_set_reports_signed_medians_per_gpu_type_precision_and_layer_kind(catalog):
    sets = validation.every_set(catalog)
    assert [name for name, _, _ in sets] == ["Narayanan 2021 Table 1", "Korthikanti 2022 Table 5",
                                             "Korthikanti 2022 Figure 1", "public runs, 16-bit", "public runs, FP8",
                                             "public runs, context parallel"]
    speed = validation.speed_rows(sets)
    # each measurement once: Narayanan's ten runs are public lines 65-74
    assert len(speed) == 8 + 58 + 16 + 8
    text = "\n".join(validation.discipline_section(sets))
    assert "| GPU type | precision | layer kind |" in text and "| H100 SXM 700 W | fp8 | dense |" in text
    assert "signed median" in text and "Targets (issue 19)" in text


def test_where_the_error_sits_by_engine_gpu_and_op_class(catalog):
    # issue 19: which op class and which engine the error sits in, per micro-batch and sequence length
    sets = validation.every_set(catalog)
    text = "\n".join(validation.diagnosis_section(sets, catalog.gpus))
    assert "## Where the error sits (issue 19)" in text and "| micro-batch size |" in text
    assert "| sequence length (tokens per GPU) |" in text and "### What it shows" in text
    public = [r for name, _, rows in sets if name.startswith("public") for r in rows]
    # each row's layer forward splits into matmuls, attention and element-wise seconds, all positive
    assert all(len(r.forward_parts) == 3 and min(r.forward_parts) > 0 for r in public)
    # torchtitan at tp 1 ran on A100, the 500 W H100 and H200: measured, the three GPU types' signed
    # medians +21.7%, +23.2% and +22.2%, within 5 points of each other (the gap is the engine's, not a GPU's)
    tt1: dict[str, list[float]] = {}
    for r in public:
        if r.engine == "torchtitan" and r.plan.stages[0].replicas[0].tp == 1:
            tt1.setdefault(r.gpu, []).append(r.error)
    signed = {g: statistics.median(e) for g, e in tt1.items()}
    assert set(signed) == {"A100", "H100 HBM2e 500 W", "H200"}
    assert max(signed.values()) - min(signed.values()) <= 0.05
    assert abs(signed["A100"] - 0.217) <= MEASURED_TOLERANCE


def test_fp8_over_bf16_step_time_as_measured_on_the_pairs(catalog):
    # the runs measured in both precisions (lines 3/4, 10/11, 20/12, 21/13, 20/22, 21/23, 26/28, 27/29,
    # 44/45): median FP8/BF16 step-time ratio measured 0.74, predicted 0.74 (FP8 GEMMs at the measured rate)
    sets = validation.every_set(catalog)
    public = [r for name, _, rows in sets if name.startswith("public") for r in rows]
    text = "\n".join(validation.fp8_pairs(public))
    assert "(9 pairs)" in text
    measured, predicted = map(float, re.search(r"measured (\d\.\d\d), predicted (\d\.\d\d)", text).groups())
    assert measured == 0.74 and abs(predicted - measured) <= MEASURED_TOLERANCE


def test_torchtitan_pipelined_rows_are_zero_2_as_torchtitan_runs_them(catalog):
    # torchtitan/parallelisms/parallelize_llama.py lines 326-329 @9dec370: "For PP, do not reshard after
    # forward to avoid per-microbatch all-gathers"
    runs = public_runs.read_runs()
    for line, zero in ((14, 2), (16, 2), (17, 2), (2, 3), (44, 3)):
        _, plan, _ = public_runs.torchtitan_row(runs[line - 2], catalog.gpus)
        assert plan.zero_stage == zero and (plan.num_stages > 1) == (zero == 2), line
    assert "For PP, do not reshard after forward" in public_runs.ASSUMED["torchtitan"]


def test_written_doc_has_no_unformatted_placeholders(catalog):
    # an f-string that lost its `f` left `{signed(tt8):+.1%} ({len(tt8)} rows)` in docs/validation.md; no text
    # the script writes may hold a `{...}` placeholder (the doc has no braces of its own)
    text = validation.document(catalog)
    assert not re.findall(r"\{[^{}\n]*\}", text), re.findall(r"\{[^{}\n]*\}", text)


def test_kernel_launches_stay_behind_every_torchtitan_layer(catalog):
    # issue 19's fixed cost per layer and pass: an eager torchtitan block launches about 117 kernels a step
    # (torchtitan model.py @9dec370) at 5-20 us of CPU each (HolisticTraceAnalysis docs), at most 2.3 ms, while
    # the least GPU time of a layer's step among the tp-1 rows is 30 ms: launches stay hidden behind the GPU's work
    sets = validation.every_set(catalog)
    tt1 = [r for name, _, rows in sets if name.startswith("public") for r in rows
           if r.engine == "torchtitan" and r.plan.stages[0].replicas[0].tp == 1]
    cpu_s, gpu_s = validation.launch_bound(tt1)
    assert cpu_s < gpu_s / 10, (cpu_s, gpu_s)


def test_v100_over_a100_pairs_of_the_2020_table(catalog):
    # Megatron-LM@f5eac3d images/tables.tex lines 22-25: the same four cases on a DGX-2 (V100) and a DGX A100;
    # measured A100 over V100 per GPU 2.08x-2.13x (149.8/71.9 ... 109.3/52.2); predicted 2.30x-2.47x
    sets = validation.every_set(catalog)
    public = [r for name, _, rows in sets if name.startswith("public") for r in rows]
    pairs = validation.v100_over_a100(public)
    assert [(v, a) for v, a, _, _ in pairs] == [(85, 86), (87, 88), (89, 90), (91, 92)]
    assert [round(m, 2) for _, _, m, _ in pairs] == [2.08, 2.13, 2.13, 2.09]
    assert all(p > m for _, _, m, p in pairs)      # the model makes the V100 slower against the A100 than measured


def test_signed_median_per_source_and_tensor_parallel_degree(catalog):
    # issue 19: where the error moves with tp inside one source; measured, Megatron-Core 2024 on H100 falls
    # from +24.9% at tp 1 (line 47) to -1.9% at tp 8 (6 rows), torchtitan on the 500 W H100 from +23.2% to +3.5%
    sets = validation.every_set(catalog)
    public = [r for name, _, rows in sets if name.startswith("public") for r in rows]
    text = "\n".join(validation.by_tensor_parallel(public))
    assert "| source | GPU type | tp 1 | tp 2 | tp 4 | tp 8 |" in text
    row = next(line for line in text.splitlines() if line.startswith("| Megatron-Core 2024 | H100 SXM 700 W |"))
    tp1, tp8 = (float(row.split("|")[c].split("%")[0]) for c in (3, 6))
    assert abs(tp1 - 24.9) <= 2 and abs(tp8 + 1.9) <= 2, row
