"""The sizes of everything a link, an upload or a file can carry, in one table: each is refused
past its limit, with the limit named, before any work (docs/reliability.md lists them, and
tests/test_limits.py holds the two in step). The search and the cost model are bounded by these
sizes: the largest inputs they admit answer within a command's time limit.

The bottom layer: imports nothing. `catalog.schema` (files, uploads, links) and `planner.types`
(every object, however built) read these names."""
from __future__ import annotations

# ----------------------------------------------------------------------------- a cluster
MAX_POOLS = 64                            # pools per cluster
MAX_GPUS_PER_NODE = 64
MAX_GPUS_PER_POOL = 100_000               # nodes x GPUs per node; also nodes per pool
MAX_SWITCHES = 1024                       # network.switches
MAX_LINKS = 16_384                        # network.links (pool links and trunks)
MAX_SWITCHES_PER_POOL = 16                # distinct switches one pool links to (a node's NIC rails)
MAX_PORTS_PER_LINK = 64                   # a link's `count` of catalog NICs

# ----------------------------------------------------------------------------- a model
MAX_LAYERS = 100_000
MAX_HIDDEN = 1_000_000
MAX_FFN = 100_000_000
MAX_VOCAB = 100_000_000
MAX_EXPERTS = 100_000

# ----------------------------------------------------------------------------- a job and a plan
MAX_GLOBAL_BATCH = 10_000_000             # sequences per iteration; also a plan's micro-batch and a replica's samples
MAX_SEQ_LEN = 10_000_000                  # tokens
MAX_LORA_RANK = 4096                      # and at most the model's hidden size (a rank above it is no low-rank adapter)
MAX_CONTEXT_PARALLEL = 1024
MAX_EXPERT_PARALLEL = 100_000             # a plan's expert_parallel: at most a model's experts
MAX_STAGES = 100_000                      # a plan file's stages
# The schedule simulation handles every pass of every micro-batch on every stage (and virtual
# stage); at about 10 us each, this many bounds one `evaluate` to seconds.
MAX_SIMULATED_PASSES = 1_000_000          # stages x micro-batches x interleave

# ----------------------------------------------------------------------------- a fleet
MAX_FLEET_JOBS = 100                      # jobs in a `hetplan fleet` jobs file
