"""hetplan export --plan FILE --cluster FILE --to megatron|torchtitan|deepspeed|torchrun [--out DIR]"""
from __future__ import annotations

import sys

from planner.cli.common import PLAN_FILE_HELP, catalog_from_args
from planner.cli.files import check_output_folder, write_files
from planner.export import ENGINES


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as a training engine's configuration",
                       description="Export a plan to Megatron-LM arguments, a torchtitan TOML, a DeepSpeed "
                                   "ds_config with pipeline boundaries, or a torchrun launch script and hostfile.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML")
    p.add_argument("--plan", required=True, metavar="FILE", help=PLAN_FILE_HELP)
    p.add_argument("--to", required=True, choices=ENGINES, help="engine")
    p.add_argument("--out", metavar="DIR",
                   help="folder to write the files to, all or none of them (default: print them)")
    p.set_defaults(run=run)


def run(args) -> int:
    from catalog.formats import check_plan_against_cluster, load_cluster_file, load_plan_file, plan_to_json
    from planner.export import export_result
    if args.out:
        check_output_folder(args.out, "--out")
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    plan = load_plan_file(args.plan, catalog)
    check_plan_against_cluster(plan, cluster)
    result = export_result(plan, cluster, args.to)
    files = dict(result.files)
    if result.closest_plan is not None:
        files["closest-plan.json"] = plan_to_json(result.closest_plan, catalog) + "\n"
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if result.closest_plan is not None:
        est = result.closest_estimate
        print(f"the files describe the closest plan {args.to} can run (closest-plan.json): "
              f"{est.iteration_time_s:.3f} s per iteration, {est.tokens_per_s:,.0f} tokens/s on "
              f"{result.closest_plan.num_gpus} GPUs", file=sys.stderr)
    if args.out:
        folder = check_output_folder(args.out, "--out")
        write_files({folder / name: text for name, text in files.items()}, "--out")
        for name in files:
            print(f"wrote {folder / name}")
    else:
        for name, text in files.items():
            print(f"# ---- {name}")
            print(text.rstrip("\n"))
    return 0
