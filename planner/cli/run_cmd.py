"""hetplan run-local --plan FILE --cluster FILE [--measure FILE]
hetplan calibrate --measurements FILE... [--cluster FILE --plan FILE] [--out FILE]"""
from __future__ import annotations

import json
from dataclasses import replace

import yaml

from catalog.files import read_mapping
from catalog.formats import load_cluster_file, load_plan_file
from planner.calibrate import fit_efficiency, measurements_from_dict
from planner.cli.common import (add_cluster_and_plan, catalog_from_args, finite_number, load_cluster_and_plan,
                                 whole_number)
from planner.cli.files import check_output_file, refuse_an_input, write_file
from planner.cost import evaluate
from planner.runtime.measure import measurement_dict, stage_summary
from planner.types import GB, GIB, InputError

TFLOPS = 1e12
# run-local runs a small model of the plan's family on this machine's CPUs: bounds far above
# anything useful there, so that a typo cannot start a run that never ends
MAX_ITERATIONS = 10_000
MAX_SCALED_HIDDEN = 8192
MAX_SCALED_SEQ_LEN = 8192
MAX_SCALED_VOCAB = 1_000_000
MAX_TIMEOUT_S = 7 * 24 * 3600


def register(sub) -> None:
    p = sub.add_parser("run-local", help="run a plan's structure on a scaled-down model with torch.distributed",
                       description="Execute the plan's stages, replicas, tensor-parallel groups, sample shares, "
                                   "micro-batches and schedule on a small model of the same family: one process per "
                                   "planned GPU, gloo on this machine. Needs PyTorch (pip install torch).")
    add_cluster_and_plan(p)
    p.add_argument("--iterations", type=whole_number(1, MAX_ITERATIONS), default=3,
                   help=f"training iterations (default 3, at most {MAX_ITERATIONS:,})")
    p.add_argument("--hidden", type=whole_number(1, MAX_SCALED_HIDDEN), default=None,
                   help="hidden size of the scaled model (default: 8 per head)")
    p.add_argument("--seq-len", type=whole_number(1, MAX_SCALED_SEQ_LEN), default=16,
                   help="sequence length of the scaled model (default 16)")
    p.add_argument("--vocab", type=whole_number(1, MAX_SCALED_VOCAB), default=96,
                   help="vocabulary of the scaled model (default 96)")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--check", action="store_true", help="also run one process on the same data and compare")
    p.add_argument("--measure", metavar="FILE", help="write per-process times (hetplan.measurements/1 JSON)")
    p.add_argument("--timeout", type=finite_number(0, MAX_TIMEOUT_S, "seconds"), default=300.0,
                   help="seconds a process may wait for a peer (default 300)")
    p.set_defaults(run=run_local)
    c = sub.add_parser("calibrate", help="fit per-GPU efficiency factors to measured pass times",
                       description="Read measurement files and fit each GPU's efficiency factor; print predicted "
                                   "vs measured before and after; write a catalog overlay YAML.")
    c.add_argument("--measurements", required=True, nargs="+", metavar="FILE")
    c.add_argument("--cluster", metavar="FILE", help="with --plan: show the plan's predicted iteration time "
                                                       "before and after")
    c.add_argument("--plan", metavar="FILE")
    c.add_argument("--out", metavar="FILE", help="catalog overlay YAML to write (use with hetplan --catalog FILE)")
    c.set_defaults(run=calibrate)


def run_local(args) -> int:
    if args.measure:
        check_output_file(args.measure, "--measure")     # before the run, not after it
        refuse_an_input(args.measure, "--measure", [*args.catalog, args.cluster, args.plan])
    _, cluster, plan = load_cluster_and_plan(args)
    try:
        import torch  # noqa: F401
    except ImportError:
        raise InputError("run-local", "needs PyTorch: pip install torch (the CPU build is enough)") from None
    # lazy: planner.runtime.launch imports torch (the optional 'run' extra), which only run-local needs
    from planner.runtime.launch import compare, run_local as launch, run_reference
    result = launch(cluster, plan, iterations=args.iterations, dtype=args.dtype, hidden=args.hidden,
                    seq_len=args.seq_len, vocab=args.vocab, timeout_s=args.timeout)
    cfg = result.cfg
    print(f"ran {len(result.layout)} processes, {plan.num_stages} stages, {plan.num_micro_batches} micro-batches, "
          f"schedule {plan.schedule.value}, in {result.wall_s:.1f} s")
    print(f"scaled model: {cfg.layers} layers, hidden {cfg.hidden}, heads {cfg.heads}/{cfg.kv_heads} kv, "
          f"ffn {cfg.ffn}, vocab {cfg.vocab}, seq {cfg.seq_len}, {cfg.mlp}, {cfg.norm}, {cfg.position}")
    for note in result.notes:
        print(f"note: {note}")
    print("losses: " + ", ".join(f"{x:.6f}" for x in result.losses))
    measurements = measurement_dict(plan, result)
    print(f"{'stage':>5} {'procs':>5} {'fwd ms/mb':>10} {'bwd ms/mb':>10} {'tp ms/mb':>9} {'p2p wait ms':>12} {'dp sync ms':>11}")
    for s in stage_summary(measurements):
        print(f"{s['stage']:>5} {s['processes']:>5} {s['forward_s'] * 1e3:>10.2f} {s['backward_s'] * 1e3:>10.2f} "
              f"{s['tp_comm_s'] * 1e3:>9.2f} {s['p2p_wait_s'] * 1e3:>12.1f} {s['dp_sync_s'] * 1e3:>11.1f}")
    if args.check:
        losses, grads = run_reference(plan, cfg, args.iterations, dtype=args.dtype)
        cmp = compare(result, losses, grads)
        print(f"single-process check: max loss difference {cmp.max_loss_diff:.2e}, max gradient difference "
              f"{cmp.max_grad_abs_diff:.2e} ({cmp.max_grad_rel_diff:.2e} of the largest gradient, at {cmp.worst_tensor})")
    if args.measure:
        write_file(args.measure, json.dumps(measurements, indent=1) + "\n", "--measure")
        print(f"wrote {args.measure}")
    return 0


def gpu_entry(gpu) -> dict:
    """A catalog GPU entry (human units, as in catalog/gpus.yaml) for a planner Gpu."""
    return {"name": gpu.name, "vendor": gpu.vendor, "bf16_fp16_tflops": gpu.peak_flops / TFLOPS,
            "fp32_tflops": gpu.peak_fp32_flops / TFLOPS, "bf16": gpu.supports_bf16,
            "memory_gib": gpu.mem_bytes / GIB, "memory_bw_gb_s": gpu.mem_bw_bytes_per_s / GB,
            "link": gpu.link_kind, "link_gb_s_per_direction": gpu.link_bw_bytes_per_s / GB,
            "pcie_gen": gpu.pcie_gen, "power_w": gpu.power_w, "price_per_gpu_hour": gpu.price_per_hour_usd,
            "efficiency": round(gpu.efficiency, 6), "efficiency_note": gpu.efficiency_note, "source": gpu.source}


def calibrate(args) -> int:
    catalog = catalog_from_args(args)
    if bool(args.cluster) != bool(args.plan):
        raise InputError("calibrate", "--cluster and --plan go together")
    if args.out:
        check_output_file(args.out, "--out")
        refuse_an_input(args.out, "--out", [*args.measurements, *args.catalog, args.cluster, args.plan])
    measurements, devices = [], set()
    for path in args.measurements:
        data, source = read_mapping(path)
        devices.add(str(data.get("device", "")))
        measurements += measurements_from_dict(dict(data), lambda mid: catalog.model(mid, f"{source}: model"), source)
    fits = fit_efficiency(measurements, dict(catalog.gpus))
    if "cpu" in devices:
        print("warning: some measurements ran on a CPU (hetplan run-local without GPUs); the factors fitted "
              "describe that CPU, not the GPUs named, and only show the procedure")
    print(f"{'gpu':<18} {'tp':>3} {'layers':>6} {'measured ms':>12} {'before ms':>10} {'after ms':>10}")
    for fit in fits:
        for row in fit.rows:
            m = row.measurement
            print(f"{fit.gpu:<18} {m.tp:>3} {m.layers:>6} {m.measured_s * 1e3:>12.3f} "
                  f"{row.predicted_before_s * 1e3:>10.3f} {row.predicted_after_s * 1e3:>10.3f}")
    for fit in fits:
        print(f"{fit.gpu}: efficiency {fit.efficiency_before:.3f} -> {fit.efficiency_after:.4f}"
              f"{' (clipped to [0.01, 1])' if fit.clamped else ''}; mean error {fit.mean_abs_error_before:.0%} -> "
              f"{fit.mean_abs_error_after:.0%}")
    calibrated = {f.gpu: replace(catalog.gpus[f.gpu], id=f"{f.gpu}-calibrated", efficiency=f.efficiency_after,
                                 efficiency_note=f"hetplan calibrate from {len(f.rows)} measurements "
                                                 f"(catalog value {f.efficiency_before:.3f})")
                  for f in fits}
    if args.plan:
        _show_plan_before_after(args, catalog, calibrated)
    if args.out:
        overlay = {"gpus": {g.id: gpu_entry(g) for g in calibrated.values()}}
        text = ("# Catalog overlay written by `hetplan calibrate`: use with `hetplan --catalog THIS_FILE` and name\n"
                "# the calibrated GPU ids in your cluster file (gpu: <id>-calibrated).\n"
                + yaml.safe_dump(overlay, sort_keys=False))
        write_file(args.out, text, "--out")
        print(f"wrote {args.out}")
    return 0


def _show_plan_before_after(args, catalog, calibrated) -> None:
    cluster = load_cluster_file(args.cluster, catalog)
    plan = load_plan_file(args.plan, catalog)
    pools = tuple(replace(p, gpu=calibrated.get(p.gpu.id, p.gpu)) for p in cluster.pools)
    before = evaluate(cluster, plan).iteration_time_s
    after = evaluate(replace(cluster, pools=pools), plan).iteration_time_s
    print(f"plan {args.plan}: predicted iteration time {before:.3f} s before, {after:.3f} s after calibration")
