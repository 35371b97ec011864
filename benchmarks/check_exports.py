"""Run Megatron-LM's own argument parsing and validation on hetplan's Megatron exports, on a CPU.

    python benchmarks/check_exports.py [--megatron-src DIR] [--time-limit S]

Megatron-LM does not install here (its training arguments need CUDA queries and Python 3.12), so the
script imports `megatron.training.arguments` from a source tree (`--megatron-src`: a checkout, or the
`megatron/` folder extracted from the fetched snapshot, e.g. `git --git-dir=<snapshot> archive HEAD
megatron | tar -x -C DIR`) and, for the best Megatron plan on each example cluster (hetplan's search
with `--engine megatron`, exported with `--to megatron`), calls Megatron's `parse_args` on the exported
MEGATRON_ARGS (plus `--tokenizer-type NullTokenizer --vocab-size V --mock-data`, which the user adds)
and `validate_args`, with WORLD_SIZE the number of ranks launch.sh starts and the environment launch.sh
sets (CUDA_DEVICE_MAX_CONNECTIONS), then compares the parsed model (RoPE base and scaling, norm epsilon,
dropout, init std, tied embeddings, the vocabulary as Megatron pads it) with the catalog's.

Stubbed, exactly: `typing.override` (Python 3.12's decorator, as the identity) when running on an older
Python; `megatron.training.arguments.get_device_arch_version` (a CUDA query) returning 9 (Hopper);
torch.cuda.is_available / device_count answered as a GPU machine would (True, 8). Nothing else: the
parser, its types and choices, and every assertion of validate_args are Megatron's own.
Prints one line per cluster and exits 1 if any export is refused by Megatron.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.source_tree import require_module  # noqa: E402


def exported_args(text: str) -> list[str]:
    lines = text.split("MEGATRON_ARGS=(\n", 1)[1].split("\n)\n", 1)[0].splitlines()
    return [w for line in lines for w in shlex.split(line)]


def _stub_cuda(arguments_module) -> None:
    import torch
    arguments_module.get_device_arch_version = lambda: 9
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 8


def check(megatron_src: str, time_limit_s: float) -> int:
    from catalog import load_catalog
    from catalog.formats import load_cluster_file
    from planner.export import export_result
    from planner.export.megatron import launch_env
    from planner.search import SearchOptions, search
    from planner.types import Job, Plan
    if not hasattr(typing, "override"):
        typing.override = lambda f: f
    sys.path.insert(0, megatron_src)
    import megatron.training.arguments as margs
    _stub_cuda(margs)
    catalog, failures = load_catalog(), 0
    for label, cluster, job, fixed in _cases(catalog, load_cluster_file):
        plan = job if isinstance(job, Plan) else search(
            cluster, job, baselines=False, options=SearchOptions(time_limit_s=time_limit_s),
            **{name: "fixed" for name in fixed}).plans[0].plan
        model = plan.model
        result = export_result(plan, cluster, "megatron", force=isinstance(job, Plan))
        words = exported_args(result.files["megatron_args.sh"])
        env, unset = launch_env(plan)
        os.environ.update(env, WORLD_SIZE=str(plan.num_gpus), RANK="0", LOCAL_RANK="0")
        for k in unset:
            os.environ.pop(k, None)
        if not env:
            os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        sys.argv = ["pretrain_gpt.py", *words, "--tokenizer-type", "NullTokenizer",
                    "--vocab-size", str(model.vocab), "--mock-data"]
        shape = (f"tp {plan.stages[0].replicas[0].tp} pp {plan.num_stages} dp {len(plan.stages[0].replicas)} "
                 f"cp {plan.context_parallel} ep {plan.expert_parallel} ZeRO {plan.zero_stage} {plan.recompute.value} "
                 f"interleave {plan.interleave} {plan.training.kind.value} offload {plan.offload.value}")
        try:
            args = margs.parse_args()
            margs.validate_args(args)
            wrong = architecture_mismatches(args, model)
            if wrong:
                raise ValueError(f"the parsed model differs from the catalog's {model.id}: {'; '.join(wrong)}")
            print(f"{label}: {plan.num_gpus} ranks, {shape}: accepted by parse_args and validate_args "
                  f"(dp {args.data_parallel_size}); RoPE base {args.rotary_base}, norm eps {args.layernorm_epsilon}, "
                  f"dropout {args.hidden_dropout}/{args.attention_dropout}, init std {args.init_method_std}, "
                  f"vocabulary {model.vocab} padded to {padded_vocab(model.vocab, args)}: the catalog's")
        except (AssertionError, ValueError, SystemExit, RuntimeError) as e:
            failures += 1
            print(f"{label}: {plan.num_gpus} ranks, {shape}: REFUSED: {type(e).__name__}: {e}")
    return 1 if failures else 0


def padded_vocab(vocab: int, args) -> int:
    """Megatron's own padding of a tokenizer's vocabulary (megatron/core/tokenizers/utils/build_tokenizer.py)."""
    from megatron.core.tokenizers.utils.build_tokenizer import vocab_size_with_padding
    return vocab_size_with_padding(vocab, args, logging_enabled=False)


def architecture_mismatches(args, model) -> list[str]:
    """Each field of the catalog model that the parsed arguments state otherwise."""
    expected = {"layernorm_epsilon": model.norm_eps, "hidden_dropout": model.hidden_dropout,
                "attention_dropout": model.attention_dropout, "init_method_std": model.init_std,
                "untie_embeddings_and_output_weights": not model.tied_embeddings,
                "use_rope_scaling": model.rope_scaling == "llama3"}
    if model.position.value == "rope":
        expected["rotary_base"] = model.rope_theta
    if model.rope_scaling == "llama3":
        expected["rope_scaling_factor"] = model.rope_scaling_factor
    out = [f"{k} {getattr(args, k)!r}, the catalog {v!r}" for k, v in expected.items() if getattr(args, k) != v]
    if model.vocab % args.tensor_model_parallel_size == 0 and padded_vocab(model.vocab, args) != model.vocab:
        out.append(f"vocabulary {model.vocab} padded to {padded_vocab(model.vocab, args)}")
    return out


def _cases(catalog, load_cluster_file):
    """(label, cluster, job, settings the search holds fixed): the best Megatron plan of each example
    cluster, then one plan of each newer feature (context and expert parallelism, fine-tuning with
    the optimizer offloaded)."""
    from dataclasses import replace
    from catalog import cluster_from_dict
    from planner.types import Job, JobKind, Offload, Training
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        cluster = load_cluster_file(path, catalog)
        model = catalog.models["llama-3-70b" if cluster.num_gpus > 256 else "llama-3-8b"]
        yield path.stem, cluster, Job(model, 256, 4096, engine="megatron"), ()
    h100 = cluster_from_dict({"name": "h100-16", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 2,
                                                            "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    llama = catalog.models["llama-3-8b"]
    yield "context parallel 8", h100, Job(llama, 8, 131072, engine="megatron", context_parallel=8), \
        ("context_parallel",)
    mixtral = Job(catalog.models["mixtral-8x7b"], 32, 4096, engine="megatron", expert_parallel=2)
    yield "expert parallel 2 (Mixtral)", h100, mixtral, ("expert_parallel",)
    tuning = Job(llama, 64, 4096, engine="megatron", training=Training(JobKind.FULL_FINETUNE),
                 offload=Offload.OPTIMIZER)
    yield "full fine-tune, optimizer offload", h100, replace(tuning), ("offload",)
    yield "DeepSeek-V3, ep 64 on 8 replicas of tp 8 (expert tp 1)", *deepseek_v3_etp1(catalog), ()


def deepseek_v3_etp1(catalog):
    """(cluster, plan): DeepSeek-V3 on 64 x 8 H100, 8 stages of 8 replicas of tp 8, ZeRO-1, ep 64 with expert tp 1
    (the expert group takes tp ranks first, so ep does not divide the replicas); exported with --force (its memory
    is the user's to check here: the point is Megatron's acceptance of the parallel sizes)."""
    from catalog import cluster_from_dict
    from planner.types import Plan, Precision, Recompute, Replica, Stage
    m = catalog.models["deepseek-v3"]
    cluster = cluster_from_dict({"name": "h100-512", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": 64,
                                                                "gpus_per_node": 8, "inter_node_gbps": 400}]}, catalog)
    reps, b = tuple(Replica("h100", 8, 8) for _ in range(8)), [0, 8, 16, 24, 32, 40, 48, 55, 61]
    return cluster, Plan(m, 64, 4096, 1, Precision.BF16, tuple(Stage(x, y, reps) for x, y in zip(b, b[1:])),
                         zero_stage=1, recompute=Recompute.FULL, sequence_parallel=True, expert_parallel=64,
                         expert_tensor_parallel=1, engine="megatron")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megatron-src", required=True, metavar="DIR",
                        help="folder holding megatron/ (a Megatron-LM checkout or the snapshot's megatron/)")
    parser.add_argument("--time-limit", type=float, default=3.0, help="search time per cluster (s)")
    args = parser.parse_args()
    require_module(parser, "--megatron-src", args.megatron_src, "megatron.training.arguments",
                   "give a Megatron-LM checkout, or the megatron/ folder of its fetched snapshot (the module docstring)")
    return check(args.megatron_src, args.time_limit)


if __name__ == "__main__":
    sys.exit(main())
