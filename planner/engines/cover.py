"""Where one engine's search space holds another's plans at no greater cost (`Engine.covered_by`).

An engine C (covered) names in `covered_by` the engines K (covering) whose search space holds part of
its own. For one job, `cover(C, K, job)` works out from the two profiles which part that is: the
(precision, pipelined or not, ZeRO stage) settings, and the layouts (one tp for every stage, or tp 1
only), for which the search's candidate of C for a layout and knob setting is, tagged for K, the
candidate K's search scores for the same layout and knob setting, with an evaluated iteration time
no longer (planner.cost.evaluate) on the same GPUs:

  (s) the same layouts and knob settings: equal layout families (pipelining, mixed stages, replicas
      per stage, uneven layers), K running the job, each setting of C's and its recomputation and
      interleave; layouts of several tp degrees only where K takes them, tp > 1 only where K has
      tensor and sequence parallelism and turns its tp-communication overlap on or off as C does;
      the same default precision (bf16 or fp16 per pool subset);
  (p) the same pass times, so the same layer split and sample shares (planner.search.split reads
      pass times and memory only): equal per-layer overhead, kernels, kind of selective
      recomputation, tp-communication overlap, and TF32 where the plan trains in fp32;
  (m) the same memory: equal framework bytes (model states and activations follow from the plan);
  (c) communication no costlier under K: gradient bytes on the wire no more, the gradient reduction
      overlapped with the last backward pass where C overlaps it, the ZeRO-1 weight all-gather hidden
      behind the first forward pass where C hides it (each only shortens the iteration: what is
      hidden is at most what it hides, planner.comm.overlapped_s).

Only ZeRO-0 and ZeRO-1 without offload, context or expert parallelism are compared: ZeRO-2/3's
per-micro-batch collectives (zero_overlap, prefetch, the reduce-scatters in the backward) are not.
Every field of Space and Execution is named below, in the rule it falls under, so a new field is
a decision (tests/test_cover.py); the same test evaluates both engines' candidates on random
clusters. The search (planner.search.search, `_search_engines`) skips the covered part of an
engine's space when K's search in the same run was complete: no plan of K's space beats the best
found before C, so neither does any plan of the covered part.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from planner.engines.base import Engine, Execution
from planner.types import Job, Offload, Precision

# Space fields by how cover() treats them
SPACE_EQUAL = ("uneven_layers", "replicas_per_stage", "mixed_stages", "pipeline_parallel")
SPACE_TP = ("tp_per_stage", "tied_edges_same_tp", "tensor_parallel", "sequence_parallel", "tp_comm_overlap")
SPACE_KNOBS = ("zero_stages", "zero_stages_pipelined", "interleave", "recomputes", "precisions", "switches")
SPACE_JOB = ("job_kinds", "adapters_with_recompute", "adapters_with_moe", "mixture_of_experts", "latent_attention")
SPACE_NOT_SEARCHED = ("gpipe",)          # the search plans 1F1B only
SPACE_OUTSIDE = ("offloads", "context_parallel", "context_parallel_zero_stages", "expert_parallel",
                 "expert_tensor_parallel", "expert_parallel_with_tp", "hybrid_shard")   # cover() needs none of them
# Execution fields by how cover() treats them
EXECUTION_PASSES = ("layer_overhead_s", "kernels", "selective_recompute", "tp_comm_overlap", "tf32_default")
EXECUTION_MEMORY = ("framework_bytes",)
EXECUTION_NO_WORSE = ("fp32_grad_reduce", "overlap_grad_reduce", "overlap_param_gather")
EXECUTION_OUTSIDE = ("zero_overlap", "prefetch", "offload_grad_bytes")   # ZeRO-2/3 and offload only
EXECUTION_WORDS = ("notes", "selective_note", "zero_note")
COVERED_ZERO_STAGES = (0, 1)


@dataclass(frozen=True)
class Cover:
    """The part of engine `covered`'s search space for one job that engine `covering`'s holds at no
    greater cost: the layouts with one tp for every stage (`one_tp`) or tp 1 only (`tp1`), where
    given, and the (precision, pipelined, ZeRO stage) settings in `settings`."""
    covered: str
    covering: str
    job: Job                     # the job it holds for (under `covered`): not another offload or parallel setting
    settings: frozenset          # (Precision, pipelined: bool, ZeRO stage)
    one_tp: bool = False
    tp1: bool = False

    def takes(self, tps) -> bool:
        """Whether a layout of these tp degrees is of the covered layouts (cheap: asked of every family listed)."""
        return (not self.tp1 or max(tps) == 1) and (not self.one_tp or min(tps) == max(tps))

    def holds(self, precision: Precision, num_stages: int, zero_stage: int, tps) -> bool:
        """Whether a candidate of this precision, stage count, ZeRO stage and tp degrees is covered."""
        return self.takes(tps) and (precision, num_stages > 1, zero_stage) in self.settings

    def holds_all(self, precision: Precision, num_stages: int, zero_stages, tps) -> bool:
        """Whether every candidate of a layout with these ZeRO stages open to it is covered."""
        return all(self.holds(precision, num_stages, z, tps) for z in zero_stages)

    def describe(self, covered_title: str, covering_title: str) -> str:
        layouts = " of tp 1 everywhere" if self.tp1 else " of one tp for every stage" if self.one_tp else ""
        said = " and ".join(sorted({p.value for p, _, _ in self.settings}))
        zeros = " or ".join(str(z) for z in sorted({z for _, _, z in self.settings}))
        return (f"{covered_title}'s plans{layouts} in {said} with ZeRO stage {zeros} not searched: {covering_title}'s "
                f"own candidates at no greater cost, and its search was complete (planner.engines.cover)")


def cover(covered: Engine, covering: Engine, job: Job) -> Cover | None:
    """The part of `covered`'s search space for `job` that `covering`'s holds at no greater cost (module
    docstring), or None where no part is."""
    c, k = covered.space, covering.space
    if (job.offload != Offload.NONE or job.context_parallel != 1 or job.expert_parallel != 1
            or job.training.kind not in k.job_kinds or covering.model_violations(job.model)
            or any(getattr(c, name) != getattr(k, name) for name in SPACE_EQUAL)
            or not set(c.recomputes) <= set(k.recomputes) or (c.interleave and not k.interleave)
            or (job.training.adapters and c.adapters_with_recompute and not k.adapters_with_recompute)):
        return None
    if job.precision is None and (Precision.FP16 in c.precisions) != (Precision.FP16 in k.precisions):
        return None          # the default precision of a pool subset would differ
    one_tp = ((k.tied_edges_same_tp and job.model.tied_embeddings) or not (k.tp_per_stage or k.mixed_stages)) \
        and not ((c.tied_edges_same_tp and job.model.tied_embeddings) or not (c.tp_per_stage or c.mixed_stages))
    tp1 = c.tensor_parallel and not (k.tensor_parallel and k.sequence_parallel == c.sequence_parallel
                                     and k.tp_comm_overlap == c.tp_comm_overlap)
    precisions = (job.precision,) if job.precision is not None else (Precision.BF16, Precision.FP16)
    settings = frozenset((p, pipelined, z) for p in precisions if p in c.precisions and p in k.precisions
                         for pipelined in (False, True) for z in COVERED_ZERO_STAGES
                         if c.zero_allowed(z, 1 + pipelined) and k.zero_allowed(z, 1 + pipelined)
                         and _runs_no_worse(_run(covered, pipelined, z), _run(covering, pipelined, z), p, job.tf32))
    if not settings:
        return None
    return Cover(covered=covered.name, covering=covering.name, job=replace(job, engine=covered.name),
                 settings=settings, one_tp=one_tp, tp1=tp1)


def _run(engine: Engine, pipelined: bool, zero: int) -> Execution:
    """How the engine runs the search's plans of this shape: with the switches the search turns on."""
    return engine.execution_with(engine.search_switches(1 + pipelined, zero))


def _runs_no_worse(c: Execution, k: Execution, precision: Precision, tf32: bool | None) -> bool:
    """(p), (m) and (c) of the module docstring for plans in `precision` (TF32 only matters in fp32)."""
    same = all(getattr(c, name) == getattr(k, name) for name in EXECUTION_PASSES + EXECUTION_MEMORY
               if name != "tf32_default")
    same_tf32 = precision != Precision.FP32 or c.tf32(tf32) == k.tf32(tf32)
    return (same and same_tf32 and k.grad_reduce_bytes(precision) <= c.grad_reduce_bytes(precision)
            and (k.overlap_grad_reduce or not c.overlap_grad_reduce)
            and (k.overlap_param_gather or not c.overlap_param_gather))
