"""hetplan catalog gpus|models|networks|engines [--json]"""
from __future__ import annotations

from planner.cli.common import catalog_from_args, print_json
from planner.engines import ENGINES
from planner.flops import model_params
from planner.types import GIB


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list the GPUs, models, networks or engines hetplan knows",
                       description="List the catalog: GPUs, models or networks (built in plus --catalog files), "
                                   "or the training engines plans are made for (`plan --engine`).")
    p.add_argument("kind", choices=("gpus", "models", "networks", "engines"))
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(run=run)


def gpu_row(g) -> dict:
    """tf32_tflops and fp8_tflops are null where the GPU has no such tensor cores (absent in gpus.yaml)."""
    return {"id": g.id, "name": g.name, "vendor": g.vendor, "bf16_fp16_tflops": g.peak_flops / 1e12,
            "fp32_tflops": g.peak_fp32_flops / 1e12, "tf32_tflops": g.peak_tf32_flops / 1e12 or None,
            "fp8_tflops": g.peak_fp8_flops / 1e12 or None, "bf16": g.supports_bf16, "memory_gib": g.mem_bytes / GIB,
            "memory_bw_gb_s": g.mem_bw_bytes_per_s / 1e9, "link": g.link_kind,
            "link_gb_s_per_direction": g.link_bw_bytes_per_s / 1e9, "pcie_gen": g.pcie_gen, "power_w": g.power_w,
            "price_per_gpu_hour": g.price_per_hour_usd, "price_date": g.price_date, "price_source": g.price_source,
            "efficiency": g.efficiency, "efficiency_note": g.efficiency_note, "source": g.source}


def model_row(m) -> dict:
    row = {"id": m.id, "name": m.name, "num_params": model_params(m), "layers": m.layers, "hidden": m.hidden,
           "heads": m.heads, "kv_heads": m.kv_heads, "ffn": m.ffn, "vocab": m.vocab, "mlp": m.mlp.value,
           "tied_embeddings": m.tied_embeddings, "experts": m.experts, "top_k": m.top_k, "source": m.source}
    if m.is_moe:
        row["num_active_params"] = model_params(m, active_only=True)
    return row


def network_row(n) -> dict:
    return {"id": n.id, "name": n.name, "kind": n.kind, "transport": n.transport, "bw_gb_s": n.bw_bytes_per_s / 1e9,
            "gbps": n.bw_bytes_per_s * 8 / 1e9, "latency_us": n.latency_s * 1e6, "source": n.source}


def engine_row(e) -> dict:
    s, x = e.space, e.execution
    return {"id": e.name, "name": e.title, "version": e.version, "summary": e.summary, "exports": list(e.exports),
            "uneven_layers": s.uneven_layers, "tp_per_stage": s.tp_per_stage, "mixed_stages": s.mixed_stages,
            "zero_stages": list(s.zero_stages), "zero_stages_pipelined": list(s.zero_stages_pipelined),
            "interleave": s.interleave, "recompute": [r.value for r in s.recomputes],
            "precisions": [p.value for p in s.precisions], "overlap_grad_reduce": x.overlap_grad_reduce,
            "fp32_grad_reduce": [p.value for p in x.fp32_grad_reduce], "zero_overlap": x.zero_overlap,
            "layer_overhead_s": x.layer_overhead_s, "framework_gib": x.framework_bytes / GIB,
            "switches": [{"key": w.name, "written_as": w.written_as, "zero_stages": list(w.zero_stages),
                          "pipelined": w.pipelined} for w in s.switches],
            "tp_comm_overlap": s.tp_comm_overlap, "hybrid_shard": s.hybrid_shard,
            "mixture_of_experts": s.mixture_of_experts, "expert_parallel_with_tp": s.expert_parallel_with_tp}


def run(args) -> int:
    catalog = catalog_from_args(args)
    items = {"gpus": catalog.gpus, "models": catalog.models, "networks": catalog.networks,
             "engines": ENGINES}[args.kind]
    to_row = {"gpus": gpu_row, "models": model_row, "networks": network_row, "engines": engine_row}[args.kind]
    rows = [to_row(v) for v in items.values()]
    if args.json:
        print_json(rows)
        return 0
    columns = {"gpus": ["id", "bf16_fp16_tflops", "memory_gib", "memory_bw_gb_s", "link", "bf16", "price_per_gpu_hour"],
               "models": ["id", "num_params", "layers", "hidden", "heads", "kv_heads", "ffn", "vocab"],
               "networks": ["id", "kind", "transport", "bw_gb_s", "gbps", "latency_us"],
               "engines": ["id", "name", "version", "summary"]}[args.kind]
    print(_table(rows, columns))
    return 0


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [[_fmt(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[k]) for row in cells)) for k, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
