"""hetplan export --plan FILE --cluster FILE --to torchrun|megatron|deepspeed|torchtitan|flagscale|fsdp|megatron-deepspeed [--out DIR]"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from catalog.formats import load_cluster_file, plan_to_json
from planner.cli.common import add_cluster_and_plan, add_time_limit, catalog_from_args, load_cluster_and_plan
from planner.cli.files import check_output_file, check_output_folder, refuse_an_input, write_files
from planner.cli.rl_cmd import read_rl_plan
from planner.export import ENGINES, SEARCH_TIME_LIMIT_S, export_result, placed_files, possible_files
from planner.export.openrlhf import openrlhf_files
from planner.export.verl import verl_files
from planner.rl.plan_file import rl_plan_from_dict
from planner.rl.step import evaluate_rl
from planner.types import InputError

RL_EXPORTS = {"verl": verl_files, "openrlhf": openrlhf_files}


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as a training engine's configuration",
                       description="Export a plan with the launch files that start it: Megatron-LM arguments, a "
                                   "torchtitan config (0.3 Python, 0.2 TOML), a DeepSpeed ds_config with pipeline "
                                   "boundaries and topology, FlagScale's heterogeneous meshes, or a torchrun launch "
                                   "for hetplan's runtime; each with launch.sh and hostfile that pin every rank to "
                                   "its planned GPU. A plan the engine cannot run is replaced by the engine's best "
                                   "plan from the search (closest-plan.json, with its predicted cost), or refused.")
    add_cluster_and_plan(p)
    p.add_argument("--to", required=True, choices=(*ENGINES, *RL_EXPORTS),
                   help="engine (target) to write the files for; verl or openrlhf for an RL plan (docs/rl.md)")
    add_time_limit(p, SEARCH_TIME_LIMIT_S, "SECONDS",
                   "CPU seconds the search for the engine's own plan may take when it cannot run the plan "
                   f"(default {SEARCH_TIME_LIMIT_S:g})")
    p.add_argument("--force", action="store_true",
                   help="write a plan the engine runs even when it does not fit its GPUs by the cost model "
                        "(default: refuse it, naming the stage and the memory it needs)")
    p.add_argument("--out", metavar="DIR",
                   help="folder to write the files to, all or none of them (default: print them)")
    p.set_defaults(run=run)


CLOSEST_PLAN = "closest-plan.json"


def run(args) -> int:
    rl = read_rl_plan(args.plan)
    if rl is not None or args.to in RL_EXPORTS:     # RL plans: planner.export.verl, planner.export.openrlhf
        if rl is None:
            raise InputError("--plan", f"--to {args.to} exports an RL plan; make one with `hetplan plan --job-kind "
                                       f"grpo (or ppo) ... --out FILE`")
        return export_rl_plan(args, rl)
    inputs = [*(getattr(args, "catalog", None) or []), args.cluster, args.plan]
    if args.out:       # before the search: every file the export may write, as write_files will check it
        folder = check_output_folder(args.out, "--out")
        _check_outputs(folder, [*possible_files(args.to), CLOSEST_PLAN], inputs)
    catalog, cluster, plan = load_cluster_and_plan(args)
    result = export_result(plan, cluster, args.to, time_limit_s=args.time_limit, force=args.force)
    files = placed_files(result, Path(os.path.abspath(args.out))) if args.out else dict(result.files)
    if result.closest_plan is not None:
        files[CLOSEST_PLAN] = plan_to_json(result.closest_plan, catalog) + "\n"
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.out:
        _check_outputs(folder, list(files), inputs)
        write_files({folder / name: text for name, text in files.items()}, "--out")
        for name in files:
            print(f"wrote {folder / name}")
        if result.closest_plan is not None:        # the warnings above give its figures
            print(f"the plan the files describe is written beside them as {CLOSEST_PLAN}", file=sys.stderr)
    else:
        if result.closest_plan is not None:
            print(f"the plan the files describe is printed with them as {CLOSEST_PLAN}", file=sys.stderr)
        for name, text in files.items():
            print(f"# ---- {name}")
            print(text.rstrip("\n"))
    return 0


def _check_outputs(folder: Path, names: list[str], inputs: list) -> None:
    """Each file of the set: a regular file or nothing (check_output_file), and none of the command's inputs."""
    for name in names:
        check_output_file(folder / name, "--out")
        refuse_an_input(folder / name, "--out", inputs)


def export_rl_plan(args, data) -> int:
    """An RL plan's files for verl or OpenRLHF (planner.export.verl, planner.export.openrlhf)."""
    if args.to not in RL_EXPORTS:
        raise InputError("--to", f"an RL plan exports to {' or '.join(RL_EXPORTS)}, got {args.to}")
    if args.out:
        check_output_folder(args.out, "--out")
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = rl_plan_from_dict(data, catalog, args.plan)
    evaluate_rl(cluster, plan)                 # the plan runs on the cluster
    files = RL_EXPORTS[args.to](cluster, plan)
    if args.out:
        folder = check_output_folder(args.out, "--out")
        for name in files:                      # never over an input file
            refuse_an_input(folder / name, "--out", [*(getattr(args, "catalog", None) or []), args.cluster, args.plan])
        write_files({folder / name: text for name, text in files.items()}, "--out")
        for name in files:
            print(f"wrote {folder / name}")
    else:
        for name, text in files.items():
            print(f"# ---- {name}")
            print(text.rstrip("\n"))
    return 0
