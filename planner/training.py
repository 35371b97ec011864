"""What a job kind and an offload setting mean to the cost model: which weights are trained, the
bytes of model state per parameter on the GPU and on the host, and the extra work per pass.

  pretrain, full-finetune  every weight trained (planner.numerics: 18 bytes per parameter in 16-bit
              mixed precision). Full fine-tuning costs as pretraining does; it starts from a checkpoint.
  lora        the base weights frozen in the training precision's weight format, low-rank adapters
              B A (rank r) beside every linear layer of attention and MLP trained in mixed precision
              (Hu et al. 2021, "LoRA", section 4; adapters on all linear layers as in Dettmers et al.
              2023, section 4). No gradients or optimizer states for the base; the base projections'
              backward computes input gradients only (one GEMM of the forward's size, not two).
  qlora       as lora, the base weights stored in 4-bit NormalFloat with double-quantised constants:
              4 + 0.127 bits per parameter (Dettmers et al. 2023, "QLoRA", section 3, "Double
              Quantization": 32/64 + 8/64 + 32/(64*256) = 0.127 bits of constants per parameter),
              dequantised to 16 bits for every forward and backward GEMM (read 4.127 bits, write 16).
              Adapters are counted as a share of every parameter, embedding and head included (an
              over-estimate of a few per cent of adapter bytes); the embedding and head are counted
              at the base's bytes.

Offload (ZeRO-Offload, Ren et al. 2021, section 4; DeepSpeed `offload_optimizer`, `offload_param`):
  optimizer   fp32 master weights, Adam moments and the fp32 gradients live in CPU memory: the GPU
              keeps the 16-bit weights and 16-bit gradients (2 + 2 bytes per parameter in 16-bit
              precision), the host 4 + 12 = 16, both sharded like the optimizer under ZeRO >= 1.
              Every iteration the GPU's gradient shard goes to the host over PCIe, the CPU runs Adam
              and the updated 16-bit weights come back (planner.offload).
  optimizer+params  also the 16-bit weights on the host (ZeRO-3 only), fetched over PCIe for each
              forward and backward pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.flops import model_flops_factor, model_params
from planner.numerics import numerics
from planner.types import JobKind, MlpKind, Model, Offload, Precision, Training, PRETRAIN

# QLoRA's NF4 with double quantisation, bytes per base parameter (Dettmers et al. 2023, section 3)
NF4_BYTES_PER_PARAM = (4 + 0.127) / 8
# Dequantising an NF4 weight to 16 bits for a GEMM: read its 4.127 bits, write 2 bytes
DEQUANT_BYTES_PER_PARAM = NF4_BYTES_PER_PARAM + 2
# Offloaded gradients leave the GPU in 16 bits and are kept in fp32 on the host (ZeRO-Offload, section 4.1)
OFFLOAD_GRAD_WIRE_BYTES = 2
HOST_GRAD_BYTES = 4


@dataclass(frozen=True)
class ModelStates:
    """Bytes of model state per parameter of a stage, before ZeRO sharding."""
    weight_bytes: float          # on the GPU
    grad_bytes: float            # on the GPU
    optimizer_bytes: float       # on the GPU
    host_bytes: float            # in CPU memory (offload); sharded like the optimizer states
    host_weight_bytes: float     # the part of host_bytes that is the weights (optimizer+params)
    trainable: float             # the share of parameters trained (1, or the adapters' share)
    weight_comm_bytes: float     # per weight element as ZeRO-3 gathers it
    grad_comm_bytes: float       # per gradient element on the wire, at least
    trained_weight_bytes: float  # per trained weight element as the step writes and ZeRO-1/2 gathers it

    @property
    def offloads(self) -> bool:
        return self.host_bytes > 0

    @property
    def offload_grad_bytes(self) -> float:
        """Per trained parameter: the gradient bytes the GPU sends to the host."""
        return self.grad_bytes / self.trainable


def adapter_params_per_layer(model: Model, rank: int, active_only: bool = False) -> float:
    """LoRA adapter parameters of one layer, rank r on every linear layer (in, out): r (in + out);
    the mean over the layers when dense and MoE layers differ (as planner.flops). Latent attention
    (DeepSeek-V3) is counted as its heads x head width projections: an approximation."""
    r, h = rank, model.hidden
    q_width, kv_width = model.heads * model.head_dim, model.kv_heads * model.head_dim
    attention = r * ((h + q_width) + 2 * (h + kv_width) + (q_width + h))
    matrices = 3 if model.mlp == MlpKind.SWIGLU else 2

    def mlp(width: int, count: float) -> float:
        return count * matrices * r * (h + width)

    moe, L = model.moe_layers, model.layers
    if not moe:
        return attention + mlp(model.ffn, 1)
    routed = model.top_k if active_only else model.experts
    moe_mlp = mlp(model.moe_ffn or model.ffn, routed + model.shared_experts)
    return attention + ((L - moe) * mlp(model.ffn, 1) + moe * moe_mlp) / L


def adapter_params(model: Model, rank: int) -> float:
    return adapter_params_per_layer(model, rank) * model.layers


def trainable_share(model: Model, training: Training) -> float:
    """The share of the model's parameters a job trains."""
    if not training.adapters:
        return 1.0
    return adapter_params(model, training.lora_rank) / model_params(model)


def model_states(precision: Precision | None, training: Training = PRETRAIN, model: Model | None = None,
                 offload: Offload = Offload.NONE, offload_grad_bytes: float = OFFLOAD_GRAD_WIRE_BYTES) -> ModelStates:
    """Per-parameter model state of a job (module docstring). `model` is needed for adapter jobs;
    `offload_grad_bytes`: the gradient bytes the engine keeps on the GPU under offload
    (planner.engines.base.Execution.offload_grad_bytes)."""
    n = numerics(precision)
    share = trainable_share(model, training) if training.adapters else 1.0
    base_weight = NF4_BYTES_PER_PARAM if training.kind == JobKind.QLORA else n.weight_bytes
    weight = base_weight + (share * n.weight_bytes if training.adapters else 0.0)
    grad, optimizer = share * n.grad_bytes, share * n.optimizer_bytes
    host = host_weight = 0.0
    if offload != Offload.NONE:
        # the GPU keeps 16-bit (fp32: 4-byte) gradients for the transfer; fp32 grads and Adam on the host
        wire = min(n.grad_bytes, max(offload_grad_bytes, n.act_bytes))
        host = share * (max(HOST_GRAD_BYTES, n.grad_bytes) + n.optimizer_bytes)
        grad, optimizer = share * wire, 0.0
    if offload == Offload.OPTIMIZER_PARAMS:
        host_weight = weight
        host += weight
        weight = 0.0
    weight_comm = NF4_BYTES_PER_PARAM if training.kind == JobKind.QLORA else n.weight_comm_bytes
    return ModelStates(weight, grad, optimizer, host, host_weight, share, weight_comm, n.grad_comm_bytes,
                       n.weight_comm_bytes)


def backward_projection_factor(training: Training) -> float:
    """Backward GEMMs of the base projections per forward GEMM: 2 (input and weight gradients), or
    1 for a frozen base (input gradients only)."""
    return 1.0 if training.adapters else 2.0


def describe(training: Training) -> str:
    if training.adapters:
        return f"{training.kind.value} (rank {training.lora_rank})"
    return training.kind.value
