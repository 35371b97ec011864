"""The engine versions the profiles describe, and where each claim was read.

Each profile (planner/engines/*.py) names its engine's source at one pinned commit or release;
a claim is "file, function or lines: what it says". Update a pin and its claims together.
"""
MEGATRON = "NVIDIA/Megatron-LM@PENDING"
DEEPSPEED = "deepspeedai/DeepSpeed@PENDING"
TORCHTITAN = "pytorch/torchtitan@PENDING"
FLAGSCALE = "FlagOpen/FlagScale@PENDING"

MEGATRON_SOURCES: dict[str, str] = {}
DEEPSPEED_SOURCES: dict[str, str] = {}
TORCHTITAN_SOURCES: dict[str, str] = {}
FLAGSCALE_SOURCES: dict[str, str] = {}
