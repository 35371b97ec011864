"""What a training precision means to the cost model: bytes per tensor element and matmul rates.

  bf16, fp16  mixed precision as Megatron-LM keeps it (Micikevicius et al. 2018; Megatron-LM docs,
              distributed optimizer): 16-bit weights and activations, fp32 main gradients, fp32
              master weights and Adam moments: 2 + 4 + 12 = 18 bytes per parameter.
  fp32        plain fp32 training: fp32 weights, gradients, activations; Adam moments 8 bytes, no
              master copy: 4 + 4 + 8 = 16 bytes per parameter. Matmuls run on TF32 tensor cores
              when `tf32` is on and the GPU has them (Ampere and later), else at the plain fp32
              rate. PyTorch's default is TF32 off for matmuls (torch.backends.cuda.matmul.allow_tf32
              = False since 1.12, "TensorFloat-32 (TF32) on Ampere devices" in the CUDA semantics
              notes); the plan's `tf32` overrides the engine's default.
  fp8         FP8 GEMMs for the transformer layers' linear layers as Transformer Engine and torchao
              float8 run them (delayed or tensor-wise scaling): QKV, attention output and the MLP
              matrices in FP8 at the GPU's FP8 peak; the attention core (FlashAttention), the
              embedding, the output head and the loss stay 16-bit. Each FP8 GEMM input is cast
              (read 16-bit, write 8-bit) in the forward and each gradient output in the backward:
              FP8_CAST_BYTES per element, at memory bandwidth. Model states as bf16: 2 bytes of
              weights per parameter, not 2 more on top. Megatron-LM's export writes
              --fp8-param-gather ("Keep the compute param in fp8 (do not use any other intermediate
              dtype)", megatron/training/arguments.py lines 2016-2018 at the pinned commit; NeMo's
              FP8 recipes set it), so the GPU keeps the FP8 weight and its transpose (1 + 1 bytes)
              in place of the bf16 one, the fp32 master in the optimizer states; torchao float8
              (torchtitan) keeps bf16 weights and casts them layer by layer, a transient. Gradients
              are reduced as the bf16 twin's (planner.engines.base.Execution.grad_reduce_bytes):
              Megatron-LM's FP8 runs are --bf16 runs. Activations kept as in
              bf16 (torchao saves 16-bit inputs; Transformer Engine saves FP8 ones: we take the
              larger). MFU stays against the 16-bit peak, as the field reports it.
"""
from __future__ import annotations

from dataclasses import dataclass

from planner.types import Gpu, InputError, Precision

FP8_CAST_BYTES = 3          # read 2 bytes, write 1


@dataclass(frozen=True)
class Numerics:
    act_bytes: int            # activations and the tensors tp and pipeline transfers move
    weight_bytes: int         # weights in GPU memory (fp8: the FP8 weight and its transpose)
    weight_comm_bytes: int    # weights as ZeRO/FSDP gathers them
    grad_bytes: int           # main gradients in memory
    optimizer_bytes: int      # master weights and Adam moments
    grad_comm_bytes: int      # gradients on the wire, at least (an engine may reduce in fp32)


NUMERICS = {
    Precision.BF16: Numerics(2, 2, 2, 4, 12, 2),
    Precision.FP16: Numerics(2, 2, 2, 4, 12, 2),
    Precision.FP32: Numerics(4, 4, 4, 4, 8, 4),
    Precision.FP8: Numerics(2, 2, 2, 4, 12, 2),
}


def numerics(precision: Precision | None) -> Numerics:
    """None: 16-bit (the search's jobs whose precision each layout picks, bf16 or fp16)."""
    return NUMERICS[Precision.BF16 if precision is None else precision]


def linear_peak_flops(gpu: Gpu, precision: Precision | None, tf32: bool) -> float:
    """The peak the transformer layers' linear-layer GEMMs run at."""
    if precision == Precision.FP8:
        if gpu.peak_fp8_flops <= 0:
            raise InputError("precision", f"{gpu.id} has no FP8 tensor cores; use bf16 or fp16 there")
        return gpu.peak_fp8_flops
    return other_peak_flops(gpu, precision, tf32)


def other_peak_flops(gpu: Gpu, precision: Precision | None, tf32: bool) -> float:
    """The peak every other GEMM runs at (attention core, head): 16-bit unless the job is fp32."""
    if precision == Precision.FP32:
        return gpu.peak_tf32_flops if tf32 and gpu.peak_tf32_flops > 0 else gpu.peak_fp32_flops
    return gpu.peak_flops


def supports(gpu: Gpu, precision: Precision) -> str:
    """Why `gpu` cannot train in `precision` ("" when it can)."""
    if precision == Precision.BF16 and not gpu.supports_bf16:
        return f"{gpu.id} has no bf16"
    if precision == Precision.FP8 and gpu.peak_fp8_flops <= 0:
        return f"{gpu.id} has no FP8 tensor cores"
    return ""
