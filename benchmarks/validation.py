"""Predicted vs measured: the cost model against published Megatron-LM runs on A100-80GB, and
against the public training runs of torchtitan, Megatron-LM and Llama 3, per engine and GPU type.

Data (copied from the project's shared reference folder, citations in each file's header or rows):
  reference/megatron_a100_weak_scaling.csv  Narayanan et al. 2021 (SC21), Table 1
  reference/korthikanti_a100_iteration.csv  Korthikanti et al. 2022, Table 5
  reference/korthikanti_a100_memory.csv     Korthikanti et al. 2022, Figure 1
  reference/public_training_runs.csv        98 runs, each citing its file, table and line (benchmarks/public_runs.py)

Run `python benchmarks/validation.py` to print the tables and rewrite docs/validation.md.
The Narayanan and Korthikanti rows use the catalog's a100-80gb-sxm with no per-row constant; these
2021-22 runs used unfused (non-flash) attention, so `CostOptions(flash_attention=False)`.
"""
from __future__ import annotations

import csv
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import public_runs  # noqa: E402
from planner.cost import CostOptions, evaluate  # noqa: E402
from planner.flops import megatron_flops_with_recompute  # noqa: E402
from planner.memory import layer_activation_bytes, model_state_bytes  # noqa: E402
from planner.types import (GIB, Cluster, MlpKind, Model, NormKind, Plan, Pool, PositionKind,  # noqa: E402
                           Precision, Recompute, Replica, Stage)

REFERENCE = Path(__file__).resolve().parent / "reference"
OPTIONS = CostOptions(flash_attention=False)
SEQ_LEN, VOCAB = 2048, 51200


@dataclass(frozen=True)
class Row:
    dataset: str
    case: str
    quantity: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return (self.predicted - self.measured) / self.measured


def read_csv(name: str) -> list[dict]:
    lines = [ln for ln in (REFERENCE / name).read_text().splitlines() if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def gpt(name: str, layers: int, hidden: int, heads: int) -> Model:
    return Model(id=name, name=name, layers=layers, hidden=hidden, heads=heads, kv_heads=heads,
                 ffn=4 * hidden, vocab=VOCAB, tied_embeddings=True, mlp=MlpKind.GELU,
                 norm=NormKind.LAYERNORM, position=PositionKind.LEARNED, max_positions=SEQ_LEN,
                 qkv_bias=True, out_bias=True, mlp_bias=True)


def selene(a100, gpus: int) -> Cluster:
    """DGX A100 nodes: 8 GPUs on NVLink3, 8 x 200 Gb/s HDR InfiniBand per node."""
    nodes = max(1, gpus // 8)
    pool = Pool("a100", a100, nodes, min(8, gpus), 1600e9 / 8, a100.price_per_hour_usd)
    return Cluster("selene", (pool,))


def uniform_plan(model: Model, tp: int, pp: int, dp: int, global_batch: int, micro_batch: int,
                 interleave: int, recompute: Recompute, sequence_parallel: bool) -> Plan:
    per = model.layers // pp
    extra = model.layers - per * pp
    stages, start = [], 0
    for i in range(pp):
        n = per + (1 if i < extra else 0)
        replicas = tuple(Replica("a100", tp, global_batch // dp) for _ in range(dp))
        stages.append(Stage(start, start + n, replicas))
        start += n
    return Plan(model, global_batch, SEQ_LEN, micro_batch, Precision.FP16, tuple(stages), zero_stage=0,
                recompute=recompute, sequence_parallel=sequence_parallel, interleave=interleave)


def weak_scaling_rows(a100) -> list[Row]:
    rows = []
    for r in read_csv("megatron_a100_weak_scaling.csv"):
        heads, hidden, layers = int(r["heads"]), int(r["hidden"]), int(r["layers"])
        tp, pp, gpus, batch = int(r["tp"]), int(r["pp"]), int(r["gpus"]), int(r["global_batch"])
        dp = gpus // (tp * pp)
        model = gpt(f"gpt-{r['params_billion']}b", layers, hidden, heads)
        plan = uniform_plan(model, tp, pp, dp, batch, 1, 1, Recompute.FULL, False)
        est = evaluate(selene(a100, gpus), plan, options=OPTIONS)
        flops = megatron_flops_with_recompute(layers, hidden, VOCAB, SEQ_LEN, batch)
        predicted = flops / est.iteration_time_s / gpus / 1e12
        rows.append(Row("Narayanan 2021 Table 1", f"{r['params_billion']}B tp{tp} pp{pp} dp{dp}",
                        "TFLOP/s per GPU", float(r["tflops_per_gpu"]), predicted))
    return rows


def korthikanti_iteration_rows(a100) -> list[Row]:
    rows = []
    for r in read_csv("korthikanti_a100_iteration.csv"):
        model = gpt(r["model"], int(r["layers"]), int(r["hidden"]), int(r["heads"]))
        tp, pp, gpus = int(r["tp"]), int(r["pp"]), int(r["gpus"])
        for mode, recompute, sp in (("full", Recompute.FULL, False), ("seqsel", Recompute.SELECTIVE, True)):
            plan = uniform_plan(model, tp, pp, gpus // (tp * pp), int(r["global_batch"]), int(r["micro_batch"]),
                                int(r["interleave"]), recompute, sp)
            est = evaluate(selene(a100, gpus), plan, options=OPTIONS)
            rows.append(Row("Korthikanti 2022 Table 5", f"{r['model']} {mode}", "iteration s",
                            float(r[f"iteration_s_{mode}"]), est.iteration_time_s))
    return rows


def korthikanti_memory_rows(a100) -> list[Row]:
    configs = {r["model"]: r for r in read_csv("korthikanti_a100_iteration.csv")}
    rows = []
    for r in read_csv("korthikanti_a100_memory.csv"):
        c = configs[r["model"]]
        model = gpt(r["model"], int(c["layers"]), int(c["hidden"]), int(c["heads"]))
        tp, pp = int(c["tp"]), int(c["pp"])
        seqsel = r["mode"] == "seqsel"
        plan = uniform_plan(model, tp, pp, 1, int(c["global_batch"]), int(c["micro_batch"]), int(c["interleave"]),
                            Recompute.SELECTIVE if seqsel else Recompute.NONE, seqsel)
        weights, grads, optimizer = model_state_bytes(plan, 0, tp)
        from planner.memory import in_flight_micro_batches
        in_flight = in_flight_micro_batches(plan, 0, plan.num_micro_batches)
        acts = in_flight * plan.stages[0].num_layers * layer_activation_bytes(plan, tp, flash_attention=False)
        rows.append(Row("Korthikanti 2022 Figure 1", f"{r['model']} {r['mode']}", "weights+optimizer GiB",
                        float(r["params_and_optimizer_gib"]), (weights + grads + optimizer) / GIB))
        rows.append(Row("Korthikanti 2022 Figure 1", f"{r['model']} {r['mode']}", "activations GiB",
                        float(r["activations_gib"]), acts / GIB))
    return rows


def all_rows(a100) -> list[Row]:
    return weak_scaling_rows(a100) + korthikanti_iteration_rows(a100) + korthikanti_memory_rows(a100)


def summary(rows: list[Row]) -> tuple[float, float]:
    errors = [abs(r.error) for r in rows]
    return statistics.median(errors), max(errors)


def markdown(rows: list[Row], public: list[str] = ()) -> str:
    out = ["# Validation: predicted vs measured", "",
           "Written by `python benchmarks/validation.py`; do not edit by hand. The cost model runs with the",
           "catalog's `a100-80gb-sxm` entry and its global constants only (no constant is fitted to a row);",
           "the 2021-22 runs used unfused attention, so `flash_attention=False`. Error = (predicted - measured) / measured.",
           ""]
    groups = {}
    for r in rows:
        groups.setdefault((r.dataset, r.quantity), []).append(r)
    out += ["| data set | quantity | rows | mean abs. error | median abs. error | worst abs. error |",
            "|---|---|---|---|---|---|"]
    for (ds, q), rs in groups.items():
        med, worst = summary(rs)
        mean = statistics.mean(abs(r.error) for r in rs)
        out.append(f"| {ds} | {q} | {len(rs)} | {mean:.1%} | {med:.1%} | {worst:.1%} |")
    out += ["", "For comparison, calculon (Isaev et al., SC23), an open analytic model, reproduces Korthikanti",
            "Table 5's iteration times within 3.7% on average and 8.9% at worst."]
    for (ds, q), rs in groups.items():
        out += ["", f"## {ds}: {q}", "", "| case | measured | predicted | error |", "|---|---|---|---|"]
        out += [f"| {r.case} | {r.measured:.2f} | {r.predicted:.2f} | {r.error:+.1%} |" for r in rs]
    return "\n".join(out + list(public)) + "\n"


# The torchtitan Execution values at their extremes, for the table of what they can explain.
TORCHTITAN_PROBES = [{}, {"zero_overlap": 0.0}, {"layer_overhead_s": 1e-3}]


def public_section(gpus) -> list[str]:
    """The per-engine, per-GPU-type section (benchmarks/public_runs.py)."""
    rows, unstated = public_runs.public_rows(gpus)
    as_catalog, _ = public_runs.public_rows(gpus, power_limited=False)
    probes = public_runs.sensitivity(gpus, "torchtitan", TORCHTITAN_PROBES)
    fp8, fp8_unstated = public_runs.fp8_rows(gpus)
    cp, cp_unstated = public_runs.context_parallel_rows(gpus)
    llama_405b, unstated_405b = public_runs.llama_405b_rows(rows + fp8 + cp, unstated + fp8_unstated + cp_unstated)
    return (public_runs.markdown_section(rows, unstated, as_catalog, probes) + public_runs.not_explained(rows)
            + public_runs.fp8_section(fp8, fp8_unstated)
            + public_runs.context_parallel_section(cp, cp_unstated, fp8, llama_405b, unstated_405b))


def document(catalog) -> str:
    """docs/validation.md as `python benchmarks/validation.py` writes it."""
    return markdown(all_rows(catalog.gpus["a100-80gb-sxm"]), public_section(catalog.gpus))


def main() -> None:
    from catalog import load_catalog
    text = document(load_catalog())
    print(text)
    if "--no-write" not in sys.argv:
        (ROOT / "docs").mkdir(exist_ok=True)
        (ROOT / "docs" / "validation.md").write_text(text)


if __name__ == "__main__":
    main()
