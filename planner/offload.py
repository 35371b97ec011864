"""Time of ZeRO-Offload's host side: PCIe transfers and the CPU's Adam step (Ren et al. 2021,
"ZeRO-Offload", section 4.1: the gradients go to the host after the backward pass, the CPU
updates the fp32 master weights and Adam moments, the new 16-bit weights come back).

Not modelled: ZeRO-Offload's one-step delayed parameter update (DPU, section 4.2), which hides the
CPU step behind the next iteration at the price of stale weights; DeepSpeed turns it off by
default. So the transfers and the CPU step follow the last backward pass, unoverlapped.
"""
from __future__ import annotations

from planner.types import Gpu, Pool

# PCIe x16, one direction, bytes/s by generation (PCI-SIG: 8, 16, 32, 64 GT/s per lane with
# 128b/130b coding from gen 3; gen 6 PAM4 with FLIT coding about 121 GB/s).
PCIE_X16_BYTES_PER_S = {1: 4.0e9, 2: 8.0e9, 3: 15.75e9, 4: 31.5e9, 5: 63.0e9, 6: 121.0e9, 7: 242.0e9}
# Pinned host-device copies reach about 80% of that (CUDA bandwidthTest: ~25 of 31.5 GB/s on
# gen 4, ~12.5 of 15.75 on gen 3). An assumption for every GPU.
PCIE_EFFICIENCY = 0.8

# Adam on the host streams 30 bytes per parameter (read fp32 gradient, master weight and two
# moments; write master, moments and the 16-bit copy), as the GPU's fused Adam does
# (planner.dataparallel.OPTIMIZER_STEP_BYTES_PER_PARAM), at the node's memory bandwidth that
# DeepSpeed's vectorised CPU Adam reaches. 100 GB/s per node is an assumption (a two-socket
# server streams 200-400 GB/s; CPU Adam is reported at well under that): no published
# measurement is in ../shared/reference to set it, so offload times are labelled estimates.
HOST_ADAM_BYTES_PER_PARAM = 30
HOST_ADAM_BYTES_PER_S_PER_NODE = 100e9


def pcie_bw_bytes_per_s(gpu: Gpu) -> float:
    return PCIE_X16_BYTES_PER_S.get(gpu.pcie_gen, PCIE_X16_BYTES_PER_S[3]) * PCIE_EFFICIENCY


def offload_step_s(trainable_params_on_host: float, grad_wire_bytes: float, weight_bytes: float,
                   gpu: Gpu, pool: Pool) -> float:
    """After the last backward pass: one GPU's gradient shard to the host, Adam on the host (the
    node's GPUs share its memory bandwidth), the updated weights back. `trainable_params_on_host`:
    the parameters this GPU's optimizer shard holds."""
    pcie = pcie_bw_bytes_per_s(gpu)
    to_host = trainable_params_on_host * grad_wire_bytes / pcie
    adam = trainable_params_on_host * HOST_ADAM_BYTES_PER_PARAM / (HOST_ADAM_BYTES_PER_S_PER_NODE / pool.gpus_per_node)
    back = trainable_params_on_host * weight_bytes / pcie
    return to_host + adam + back


def param_fetch_s(weight_bytes_on_host: float, gpu: Gpu) -> float:
    """Offloaded parameters (ZeRO-3 offload_param): a pass's weights come over PCIe from the host."""
    return weight_bytes_on_host / pcie_bw_bytes_per_s(gpu)
