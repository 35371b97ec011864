"""RL post-training (GRPO, PPO) on mixed GPU clusters: the workload, a generation cost model,
roles and their placement, and the search over colocated and disaggregated shapes.

A feature on top of the training cost model and search: planner/rl imports them; nothing below
imports planner/rl (docs/rl.md).
"""
