"""The rollout engines the generation model describes, as data with their sources.

vLLM (Kwon et al., "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP 2023) and SGLang run the same scheme the model needs: paged KV cache in
the memory left after the weights, continuous batching of up to `max_num_seqs` sequences, chunked
prefill of at most `max_num_batched_tokens` per step, and prefix caching (the G samples of one
prompt share its KV blocks). The defaults are those verl launches them with at the pin.
"""
from __future__ import annotations

from dataclasses import dataclass

VERL = "volcengine/verl@b178a3cd56f58b2d502255daba591e92833930a7"


@dataclass(frozen=True)
class RolloutEngine:
    name: str
    version: str
    gpu_memory_utilization: float    # share of GPU memory the engine may fill (weights, KV cache, activations)
    max_num_seqs: int                # sequences decoded together at most
    max_num_batched_tokens: int      # tokens per prefill chunk
    prefix_caching: bool             # samples of one prompt share its prompt's KV blocks
    sources: tuple[tuple[str, str], ...]


VLLM = RolloutEngine(
    "vllm", "vLLM as verl's rollout (" + VERL + ")", 0.9, 256, 8192, True,
    (("gpu_memory_utilization 0.9",
      "vLLM's default, as sgl-project/sglang benchmark/benchmark_vllm_060/README.md @120affb states "
      "('The gpu_memory_utilization of vLLM is by default 0.9'); verl's rollout.yaml line 32 sets 0.5 "
      "for a colocated actor whose states stay resident, which this model counts instead as the memory "
      "the training states hold (planner.rl.generation resident_bytes)"),
     ("max_num_seqs 256, max_num_batched_tokens 8192, enable_chunked_prefill, enable_prefix_caching",
      "verl/trainer/config/rollout/rollout.yaml lines 62, 68, 71, 74 at " + VERL),
     ("n samples per prompt share the prompt's blocks",
      "Kwon et al. 2023, section 4.4 'parallel sampling': copy-on-write sharing of the prompt's KV blocks"),
     ("continuous batching: a finished sequence's slot is refilled the next step",
      "Kwon et al. 2023, section 4.5 (iteration-level scheduling as in Orca, Yu et al. OSDI 2022)")))

SGLANG = RolloutEngine(
    "sglang", "SGLang as verl's rollout (" + VERL + ")", 0.88, 256, 8192, True,
    (("mem_fraction_static 0.88 at tp 1",
      "sgl-project/sglang benchmark/benchmark_vllm_060/README.md @120affb ('SGLang's mem_frac is 0.88 at TP 1')"),
     ("max_num_seqs, max_num_batched_tokens, prefix caching as passed by verl",
      "verl/trainer/config/rollout/rollout.yaml at " + VERL)))

ROLLOUT_ENGINES = {e.name: e for e in (VLLM, SGLANG)}
