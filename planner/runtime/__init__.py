"""Execute a plan's exact parallel structure on a scaled-down model with torch.distributed.

`planner.runtime.launch.run_local` spawns one process per planned GPU (gloo on 127.0.0.1) and
runs real tensor-parallel groups, real context-parallel groups (the sequence split over each
replica's cp ranks, keys and values all-gathered), a real pipeline in hetplan's micro-batch order
and real data parallelism; Adam steps, their state sharded as the plan's ZeRO stage says. Adapter
jobs (LoRA; QLoRA on an NF4 base) train only their adapters (planner.runtime.lora); plans that
offload model states are refused. PyTorch is optional: nothing in this package imports it at import
time except the modules that need it (`parallel`, `model`, `worker`, `launch`, `lora`, `optim`), which
the CLI imports lazily.
"""
