"""What a training engine is to the planner: the plans it can run, and how it runs them.

An `Engine` is a profile of one engine at one pinned version:

  space      (a) what a plan may contain under it: an uneven layer split, one or several
             tensor-parallel degrees, stages that mix GPU pools with uneven sample shares, the
             ZeRO/FSDP modes alone and with pipelining, interleaving, recompute kinds, sequence
             parallelism, precisions. The search reads it (planner.search.planners) and so do the
             exporters (`violations`).
  execution  (b) how it executes a plan: whether data-parallel gradients are reduced in buckets
             during the last backward pass or after the pipeline flush and in what dtype, how much
             of FSDP/ZeRO-3's per-micro-batch all-gathers hides behind compute, fixed costs per
             layer and pass, and the memory the framework itself takes. The cost model reads it
             (planner.cost.evaluate) and so do the search's fast scores (planner.search.score),
             through the same fields.

hetplan's own runtime (`hetplan run-local`) is the most capable and the least costly profile:
every other engine's execution costs at least as much time and memory (`Execution.dominates`,
held by tests/test_engines.py), but for switches a plan turns on that the runtime lacks
(`Plan.tp_comm_overlap`, read into pass times from the plan's own engine; `Plan.overlap_param_gather`,
which hides only the post-step all-gather the bounds leave out).

Overlap switches (`PlanSwitch`, `Space.switches`): the plan keys overlap_grad_reduce, overlap_param_gather
and prefetch turn an engine's overlap on or off where it has the switch (Megatron-LM's
--overlap-grad-reduce and --overlap-param-gather, DeepSpeed's overlap_comm, FSDP's prefetch); absent,
the engine's default runs. The search turns each on where it applies (none is slower in the cost
model), the cost model reads them through `execution_for`, the exports write them. The search's bounds are built for that floor, so they stay lower
bounds under every engine.

Every claim of a profile cites the engine's source at the pinned version (`sources`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from planner.numerics import numerics
from planner.types import GIB, JobKind, Kernels, Model, Offload, Plan, Precision, Recompute, Schedule, SelectiveKind

# CUDA context, NCCL buffers and allocator fragmentation: about 1-2 GiB in practice (PyTorch
# CUDA context alone is ~0.5 GiB; NCCL reserves buffers per communicator). Assumed, not measured.
# The smallest of any engine's (planner.engines: each profile's framework_bytes is at least this),
# which the search's memory bounds use.
FRAMEWORK_OVERHEAD_BYTES = 1.5 * GIB

ALL_RECOMPUTES = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
WHOLE_MODEL_JOBS = (JobKind.PRETRAIN, JobKind.FULL_FINETUNE)


@dataclass(frozen=True)
class PlanSwitch:
    """An overlap the engine lets a plan turn on or off (the Plan field `name`), where it applies."""
    name: str                                # "overlap_grad_reduce", "overlap_param_gather" or "prefetch"
    zero_stages: tuple[int, ...]             # the ZeRO stages it applies under
    pipelined: bool = True                   # also with two or more pipeline stages
    needs: tuple[str, ...] = ()              # switches that must be on with it (Megatron: param gather needs
    #                                          the overlapped grad reduce)
    written_as: str = ""                     # what the export writes for it
    on_by_default: tuple[int, ...] = ()      # ZeRO stages under which the engine turns it on unless told
    #                                          (DeepSpeed's overlap_comm: ZeRO-3)

    def applies(self, num_stages: int, zero_stage: int) -> bool:
        return zero_stage in self.zero_stages and (self.pipelined or num_stages == 1)


SWITCHES = ("overlap_grad_reduce", "overlap_param_gather", "prefetch")   # Plan fields an engine may offer


@dataclass(frozen=True)
class Space:
    """(a) What a plan may contain under the engine."""
    uneven_layers: bool = True             # stages may hold different numbers of layers
    tp_per_stage: bool = False             # stages may use different tensor-parallel degrees
    replicas_per_stage: bool = False       # stages may have different numbers of data-parallel replicas
    mixed_stages: bool = False             # a stage's replicas may be of several pools, with uneven sample shares
    zero_stages: tuple[int, ...] = (0, 1)  # ZeRO/FSDP modes without pipelining (one stage)
    zero_stages_pipelined: tuple[int, ...] = (0, 1)   # ... and with pipelining (two or more stages)
    interleave: bool = False               # interleaved 1F1B (virtual pipeline stages)
    gpipe: bool = False                    # an all-forward-then-all-backward schedule
    recomputes: tuple[Recompute, ...] = ALL_RECOMPUTES
    sequence_parallel: bool = True         # Megatron-style sequence parallelism inside a tp group
    tensor_parallel: bool = True           # tp > 1 at all
    precisions: tuple[Precision, ...] = (Precision.BF16, Precision.FP16)
    tied_edges_same_tp: bool = False       # tied embeddings: first and last stage need one tp degree
    context_parallel: bool = False         # the sequence split over GPUs (ring attention)
    context_parallel_zero_stages: tuple[int, ...] = (0, 1, 2, 3)   # the ZeRO stages it runs with cp > 1
    expert_parallel: bool = False          # routed experts sharded over data-parallel replicas
    expert_tensor_parallel: bool = False   # an expert tp degree below tp (Plan.expert_tensor_parallel)
    expert_parallel_with_tp: bool = True   # ... together with tp or cp > 1, each expert split over the tp group
    #                                        as planned (torchtitan 0.3.0 builds another expert mesh: False)
    job_kinds: tuple[JobKind, ...] = WHOLE_MODEL_JOBS   # pretraining, fine-tuning, LoRA, QLoRA
    adapters_with_recompute: bool = True   # LoRA together with activation recomputation
    adapters_with_moe: bool = True         # LoRA on mixture-of-experts models
    offloads: tuple[tuple[Offload, tuple[int, ...]], ...] = ()   # each offload it runs, with the ZeRO stages
    pipeline_parallel: bool = True         # two or more pipeline stages at all
    tp_comm_overlap: bool = False          # a plan may pipeline tp collectives with its GEMMs (Plan.tp_comm_overlap)
    mixture_of_experts: bool = True        # models with routed experts at all
    hybrid_shard: bool = False             # states sharded within a node, replicated across (Plan.hybrid_shard)
    switches: tuple[PlanSwitch, ...] = ()      # overlaps a plan may turn on or off (Plan.overlap_grad_reduce, ...)
    latent_attention: bool = True          # multi-head latent attention (DeepSeek-V2/V3) at all

    def zero_allowed(self, zero_stage: int, num_stages: int) -> bool:
        return zero_stage in (self.zero_stages_pipelined if num_stages > 1 else self.zero_stages)

    def offload_zero_stages(self, offload: Offload) -> tuple[int, ...]:
        """ZeRO stages the engine runs with this offload (every stage for none; () when it cannot)."""
        if offload == Offload.NONE:
            return (0, 1, 2, 3)
        return dict(self.offloads).get(offload, ())


@dataclass(frozen=True)
class Execution:
    """(b) How the engine executes a plan, as the cost model's inputs."""
    overlap_grad_reduce: bool = True        # gradients reduced in buckets during the last backward pass
    fp32_grad_reduce: tuple[Precision, ...] = ()   # precisions whose gradients cross the wire in fp32
    #                                                (4 bytes); 16 bits otherwise
    zero_overlap: float = 1.0               # fraction of a pass's compute that ZeRO-2/3's per-micro-batch
    #                                         collectives can hide behind (1: all of it, 0: none)
    layer_overhead_s: float = 0.0           # fixed cost per layer and pass (kernel launches, hooks)
    framework_bytes: float = FRAMEWORK_OVERHEAD_BYTES   # CUDA context, NCCL buffers, allocator slack per GPU
    kernels: Kernels = Kernels.FUSED        # how element-wise ops run: fused, or eager one kernel per op
    selective_recompute: SelectiveKind = SelectiveKind.ATTENTION_CORE   # what Recompute.SELECTIVE reruns
    #                                         and keeps (planner.compute, planner.memory)
    offload_grad_bytes: float = 2.0         # per trained parameter: the gradient the GPU keeps under optimizer
    #                                         offload (16-bit for the trip to the host; Megatron-LM keeps its
    #                                         fp32 main-grad buffer: 4)
    tp_comm_overlap: bool = False           # tensor-parallel collectives pipelined with the GEMMs beside them
    #                                         (Megatron-Core --tp-comm-overlap, Transformer Engine userbuffers;
    #                                         planner.compute.exposed_tp_comm_s)
    overlap_param_gather: bool = False      # ZeRO-1/2's post-step weight all-gather hidden behind the next
    #                                         iteration's first forward (Megatron-Core --overlap-param-gather)
    prefetch: bool = True                   # ZeRO-3's backward all-gathers issued a layer ahead (FSDP
    #                                         backward_prefetch); off: each exposed (planner.cost)
    tf32_default: bool = False              # fp32 matmuls on TF32 tensor cores unless the plan says otherwise
    #                                         (PyTorch's default: off, torch.backends.cuda.matmul.allow_tf32)
    notes: tuple[str, ...] = ()             # how it runs every plan, in words
    selective_note: str = ""                # ... said only of plans with selective recomputation
    zero_note: str = ""                     # ... said only of plans with ZeRO-2/3 (sharded gradients or weights)

    def notes_for(self, recompute: Recompute, zero_stage: int) -> tuple[str, ...]:
        """The notes that concern a plan with this recomputation and ZeRO stage."""
        return (self.notes + ((self.selective_note,) if self.selective_note and recompute == Recompute.SELECTIVE else ())
                + ((self.zero_note,) if self.zero_note and zero_stage >= 2 else ()))

    def grad_reduce_bytes(self, precision: Precision | None) -> int:
        """Bytes per gradient element on the wire in data-parallel reductions. FP8 trains over bf16
        weights and gradients (Megatron-LM's FP8 runs are --bf16 runs, arguments.py lines 1204-1216;
        torchao float8 under bf16 FSDP2), so its gradients cross the wire as bf16's do."""
        base = Precision.BF16 if precision == Precision.FP8 else precision
        return max(4 if base in self.fp32_grad_reduce else 2, numerics(precision).grad_comm_bytes)

    def tf32(self, asked: bool | None) -> bool:
        return self.tf32_default if asked is None else asked

    def dominates(self, other: "Execution") -> bool:
        """Whether this execution costs at least as much as `other` in every term the search's bounds
        take from the floor (hetplan's runtime): gradient overlap and bytes on the wire, ZeRO
        overlap, per-layer cost, framework memory, and kernels no faster. Pass times and activation
        bytes the bounds read from the plan's own engine (Scorer.pass_times, activation_bytes), so
        those may differ either way: op-level SAC keeps fewer activations than the attention-core
        kind, and at long sequences (s > 2h) also reruns less, since it saves attention's output."""
        return ((other.overlap_grad_reduce or not self.overlap_grad_reduce)
                and self.kernels.cost_rank >= other.kernels.cost_rank
                and (self.selective_recompute == other.selective_recompute
                     or other.selective_recompute == SelectiveKind.ATTENTION_CORE)
                and set(other.fp32_grad_reduce) <= set(self.fp32_grad_reduce)
                and self.zero_overlap <= other.zero_overlap
                and (other.tp_comm_overlap or not self.tp_comm_overlap)
                and (other.overlap_param_gather or not self.overlap_param_gather)
                and (other.prefetch or not self.prefetch)
                and self.layer_overhead_s >= other.layer_overhead_s
                and self.framework_bytes >= other.framework_bytes
                and self.offload_grad_bytes >= other.offload_grad_bytes)


@dataclass(frozen=True)
class Engine:
    name: str                               # the id plans, the CLI and the app use: "megatron"
    title: str                              # "Megatron-LM"
    version: str                            # what the profile describes: repository@commit or release
    space: Space
    execution: Execution
    exports: tuple[str, ...] = ()           # export targets (planner.export) that write this engine's files
    sources: dict[str, str] = field(default_factory=dict)   # claim -> file and lines at `version`
    summary: str = ""
    covered_by: tuple[str, ...] = ()        # engines whose search space holds part of this one's at no greater
    #                                         cost (planner.engines.cover), searched before it by default

    def execution_for(self, plan: Plan) -> Execution:
        """How the engine executes `plan`: its execution with the switches the plan turns on or off."""
        chosen = {sw.name: True for sw in self.space.switches
                  if plan.zero_stage in sw.on_by_default and sw.applies(plan.num_stages, plan.zero_stage)}
        chosen.update({name: getattr(plan, name) for name in SWITCHES if getattr(plan, name) is not None})
        return self.execution_with(chosen, plan.tp_comm_overlap)

    def execution_with(self, switches: dict[str, bool], tp_comm_overlap: bool = False) -> Execution:
        run = replace(self.execution, **switches) if switches else self.execution
        return replace(run, tp_comm_overlap=True) if tp_comm_overlap else run

    def search_switches(self, num_stages: int, zero_stage: int) -> dict[str, bool]:
        """The switches the search sets for a plan of this shape: every one the engine offers there, on (none is
        slower in the cost model); the others absent (the engine's default)."""
        return {sw.name: True for sw in self.space.switches if sw.applies(num_stages, zero_stage)}

    def switch_violations(self, plan: Plan) -> list[str]:
        """A plan switch the engine has no switch for where the plan sets it otherwise than the engine runs."""
        out, offered = [], {sw.name: sw for sw in self.space.switches}
        for name in SWITCHES:
            value, sw = getattr(plan, name), offered.get(name)
            if value is None:
                continue
            if sw is None or not sw.applies(plan.num_stages, plan.zero_stage):
                if value != getattr(self.execution, name):
                    where = (f" (it switches it with ZeRO stage {_join(sw.zero_stages)}"
                             f"{'' if sw.pipelined else ', without pipelining'})" if sw else "")
                    out.append(f"{self.title} cannot turn {name} {'on' if value else 'off'} here{where}")
            elif value:
                out += [f"{self.title} runs {name} only with {need} on" for need in sw.needs
                        if not getattr(self.execution_for(plan), need)]
        return out

    def violations(self, plan: Plan) -> list[str]:
        """What in `plan` this engine cannot run, one plain sentence each (empty: it runs it)."""
        s, out, name = self.space, [], self.title
        tps = sorted({r.tp for st in plan.stages for r in st.replicas})
        if max(tps) > 1 and not s.tensor_parallel:
            out.append(f"{name} has no tensor parallelism here; the plan uses tp {_join(tps)}")
        per_stage = [sorted({r.tp for r in st.replicas}) for st in plan.stages]
        if any(len(t) > 1 for t in per_stage) and not s.mixed_stages:
            out.append(f"{name} gives every replica of a stage the same tensor-parallel degree; the plan mixes {_join(tps)}")
        elif len(tps) > 1 and not s.tp_per_stage and not s.mixed_stages:
            out.append(f"{name} uses one tensor-parallel degree for every stage; the plan uses {_join(tps)}")
        edges = ({r.tp for r in plan.stages[0].replicas} | {r.tp for r in plan.stages[-1].replicas})
        if s.tied_edges_same_tp and plan.model.tied_embeddings and len(edges) > 1:
            out.append(f"{name} needs one tensor-parallel degree on the first and last stage for tied embeddings; "
                       f"the plan uses {_join(sorted(edges))}")
        counts = [len(st.replicas) for st in plan.stages]
        if len(set(counts)) > 1 and not (s.replicas_per_stage or s.mixed_stages):
            out.append(f"{name} gives every stage the same number of data-parallel replicas; the plan has {_join(counts)}")
        if not s.mixed_stages:
            mixed = [i for i, st in enumerate(plan.stages) if len({r.pool for r in st.replicas}) > 1]
            if mixed:
                out.append(f"{name} runs each stage on one kind of GPU; stages {_join(mixed)} mix GPU pools")
            uneven = [i for i, st in enumerate(plan.stages) if len({r.samples for r in st.replicas}) > 1]
            if uneven:
                out.append(f"{name} gives every replica the same share of the batch; stages {_join(uneven)} split it unevenly")
        layers = {st.num_layers for st in plan.stages}
        if len(layers) > 1 and not s.uneven_layers:
            out.append(f"{name} splits layers evenly over the stages; the plan holds {_join(sorted(layers))} layers per stage")
        if plan.tp_comm_overlap and not s.tp_comm_overlap:
            out.append(f"{name} has no tensor-parallel communication overlap")
        elif plan.tp_comm_overlap and not plan.sequence_parallel:
            out.append(f"{name} overlaps tensor-parallel communication only with sequence parallelism")
        if plan.num_stages > 1 and not s.pipeline_parallel:
            out.append(f"{name} has no pipeline parallelism; the plan has {plan.num_stages} stages")
        if plan.interleave > 1 and not s.interleave:
            out.append(f"{name} has no interleaved pipeline schedule; the plan uses interleave {plan.interleave}")
        if plan.schedule == Schedule.GPIPE and not s.gpipe:
            out.append(f"{name} runs 1F1B, not GPipe")
        if not s.zero_allowed(plan.zero_stage, plan.num_stages):
            allowed = s.zero_stages_pipelined if plan.num_stages > 1 else s.zero_stages
            with_pp = " with pipelining" if plan.num_stages > 1 else ""
            out.append(f"{name} does not run ZeRO stage {plan.zero_stage}{with_pp} (it has {_join(allowed)})")
        if plan.recompute not in s.recomputes:
            out.append(f"{name} has no {plan.recompute.value} recomputation (it has "
                       f"{_join(r.value for r in s.recomputes)})")
        if plan.sequence_parallel and max(tps) > 1 and not s.sequence_parallel:
            out.append(f"{name} has no sequence parallelism")
        if plan.precision not in s.precisions:
            out.append(f"{name} does not train in {plan.precision.value}; it offers {_join(p.value for p in s.precisions)}")
        if plan.context_parallel > 1 and not s.context_parallel:
            out.append(f"{name} has no context parallelism; the plan splits the sequence over "
                       f"{plan.context_parallel} GPUs")
        elif plan.context_parallel > 1 and plan.zero_stage not in s.context_parallel_zero_stages:
            out.append(f"{name} runs context parallelism with ZeRO stage {_join(s.context_parallel_zero_stages)} "
                       f"only; the plan uses ZeRO stage {plan.zero_stage}")
        if plan.expert_tensor_parallel not in (0, *tps) and not s.expert_tensor_parallel:
            out.append(f"{name} splits each expert over the tp group; the plan splits them over "
                       f"expert_tensor_parallel {plan.expert_tensor_parallel}")
        if plan.hybrid_shard and not s.hybrid_shard:
            out.append(f"{name} has no hybrid sharding (states sharded within a node, replicated across nodes)")
        out += self.model_violations(plan.model) + self.switch_violations(plan)
        if plan.expert_parallel > 1 and not s.expert_parallel:
            out.append(f"{name} has no expert parallelism; the plan shards the experts over "
                       f"{plan.expert_parallel} replicas")
        elif plan.expert_parallel > 1 and max(tps) * plan.context_parallel > 1 and not s.expert_parallel_with_tp:
            out.append(f"{name} forms its expert-parallel groups from the tp and cp ranks first, with no expert "
                       f"tensor parallelism, not over {plan.expert_parallel} replicas with each expert split over "
                       f"tp {max(tps)} as the plan does; plan expert parallelism with tp 1 and context_parallel 1")
        return out + self._job_violations(plan)

    def model_violations(self, model: Model) -> list[str]:
        """What in the model itself this engine cannot run (experts, latent attention), whatever the plan."""
        out = []
        if model.is_moe and not self.space.mixture_of_experts:
            out.append(f"{self.title} is profiled for dense models only; {model.id} has {model.experts} experts")
        if model.is_mla and not self.space.latent_attention:
            out.append(f"{self.title} has no multi-head latent attention; {model.id} uses it")
        return out

    def _job_violations(self, plan: Plan) -> list[str]:
        s, out, name, kind = self.space, [], self.title, plan.training.kind
        if kind not in s.job_kinds:
            out.append(f"{name} does not run {kind.value} jobs (it runs {_join(k.value for k in s.job_kinds)})")
        elif plan.training.adapters and plan.recompute != Recompute.NONE and not s.adapters_with_recompute:
            out.append(f"{name} runs LoRA without activation recomputation only; the plan recomputes "
                       f"({plan.recompute.value})")
        if plan.training.adapters and plan.model.is_moe and not s.adapters_with_moe:
            out.append(f"{name} runs LoRA on dense models only; {plan.model.id} has experts")
        if plan.offload != Offload.NONE:
            zeros = s.offload_zero_stages(plan.offload)
            if not zeros:
                offered = _join(o.value for o, _ in s.offloads) if s.offloads else "none"
                out.append(f"{name} does not offload {plan.offload.value} to the CPU (it offloads: {offered})")
            elif plan.zero_stage not in zeros:
                out.append(f"{name} offloads {plan.offload.value} with ZeRO stage {_join(zeros)} only; the plan "
                           f"uses ZeRO stage {plan.zero_stage}")
        return out


def _join(values) -> str:
    """1, 2 and 4: a list as people write it."""
    items = [str(v) for v in values]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1] if items else "none"
