"""torchtitan job config (TOML).

Keys checked against pytorch/torchtitan `torchtitan/config/job_config.py` (stored copy, commit
6404b93), the TOML-era config where `--job.config_file` reads sections named after the JobConfig
fields: [job] description; [training] local_batch_size, global_batch_size, seq_len,
mixed_precision_param (Literal "bfloat16" | "float32": no float16, so fp16 plans are exported
as bf16 with a warning); [parallelism] data_parallel_replicate_degree, data_parallel_shard_degree,
fsdp_reshard_after_forward ("default" | "always" | "never"), tensor_parallel_degree,
disable_loss_parallel, enable_async_tensor_parallel, pipeline_parallel_degree,
module_fqns_per_model_part (one list of module FQNs per model chunk), pipeline_parallel_schedule,
pipeline_parallel_microbatch_size; [activation_checkpoint] mode ("selective" | "full" | "none"),
selective_ac_option ("op" or an int). Schedule names are those of
torch.distributed.pipelining's get_schedule_class ("1F1B", "GPipe", "Interleaved1F1B").
Newer torchtitan trees replace TOML files by Python config registries (docs/exports.md).
FQNs follow torchtitan's Llama models: tok_embeddings, layers.N, norm, output.
"""
from __future__ import annotations

from planner.export.common import Capabilities, layer_segments, resolve
from planner.types import Cluster, MlpKind, Plan, Precision, Recompute, Schedule

CAPS = Capabilities(precisions=(Precision.BF16,))   # training.mixed_precision_param has no float16


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def module_fqns(plan: Plan) -> list[list[str]]:
    segments = layer_segments(plan)
    parts = []
    for k, (_, _, a, b) in enumerate(segments):
        names = (["tok_embeddings"] if k == 0 else []) + [f"layers.{n}" for n in range(a, b)]
        if k == len(segments) - 1:
            names += ["norm", "output"]
        parts.append(names)
    return parts


def config(plan: Plan) -> dict[str, dict]:
    tp, d = plan.stages[0].replicas[0].tp, len(plan.stages[0].replicas)
    schedule = ("Interleaved1F1B" if plan.interleave > 1 else
                "GPipe" if plan.schedule == Schedule.GPIPE else "1F1B")
    shard = plan.zero_stage >= 1
    parallelism = {"tensor_parallel_degree": tp, "pipeline_parallel_degree": plan.num_stages,
                   "pipeline_parallel_schedule": schedule,
                   "pipeline_parallel_microbatch_size": plan.micro_batch,
                   "data_parallel_shard_degree": d if shard else 1,
                   "data_parallel_replicate_degree": 1 if shard else d,
                   "enable_async_tensor_parallel": False,
                   "disable_loss_parallel": False}
    if shard and plan.zero_stage < 3:
        parallelism["fsdp_reshard_after_forward"] = "never"   # keep gathered weights: ZeRO-2-like
    if plan.num_stages > 1:
        parallelism["module_fqns_per_model_part"] = module_fqns(plan)
    mode = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}[plan.recompute]
    return {
        "job": {"description": f"{plan.model.id}, written by hetplan export --to torchtitan"},
        "training": {"local_batch_size": plan.global_batch // d, "global_batch_size": plan.global_batch,
                     "seq_len": plan.seq_len,
                     "mixed_precision_param": "bfloat16"},
        "parallelism": parallelism,
        "activation_checkpoint": {"mode": mode, **({"selective_ac_option": "op"} if mode == "selective" else {})},
    }


def to_toml(cfg: dict[str, dict]) -> str:
    lines = []
    for section, values in cfg.items():
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in values.items()]
        lines.append("")
    return "\n".join(lines)


def export(plan: Plan, cluster: Cluster):
    target, warnings, closest, est = resolve(plan, cluster, CAPS, "torchtitan")
    notes = list(warnings)
    if target.model.mlp != MlpKind.SWIGLU or target.model.tied_embeddings:
        notes.append(f"torchtitan ships Llama-family model definitions; {target.model.id} "
                     f"({target.model.mlp.value}, tied embeddings {target.model.tied_embeddings}) needs its own "
                     f"model with the same module names")
    header = "".join(f"# note: {w}\n" for w in notes)
    text = "# torchtitan config written by `hetplan export --to torchtitan`\n" + header + to_toml(config(target))
    return {"torchtitan.toml": text}, notes, target, closest, est
