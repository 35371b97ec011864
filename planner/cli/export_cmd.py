"""hetplan export --plan FILE --cluster FILE --to torchrun|megatron|deepspeed|torchtitan|flagscale [--out DIR]"""
from __future__ import annotations

import sys

from planner.cli.common import PLAN_FILE_HELP, catalog_from_args
from planner.cli.files import check_output_folder, write_files
from planner.cli.common import finite_number
from planner.export import ENGINES, SEARCH_TIME_LIMIT_S

MAX_TIME_LIMIT_S = 3600.0


def register(sub) -> None:
    p = sub.add_parser("export", help="write a plan as a training engine's configuration",
                       description="Export a plan with the launch files that start it: Megatron-LM arguments, a "
                                   "torchtitan config (0.3 Python, 0.2 TOML), a DeepSpeed ds_config with pipeline "
                                   "boundaries and topology, FlagScale's heterogeneous meshes, or a torchrun launch "
                                   "for hetplan's runtime; each with launch.sh and hostfile that pin every rank to "
                                   "its planned GPU. A plan the engine cannot run is replaced by the engine's best "
                                   "plan from the search (closest-plan.json, with its predicted cost), or refused.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML")
    p.add_argument("--plan", required=True, metavar="FILE", help=PLAN_FILE_HELP)
    p.add_argument("--to", required=True, choices=ENGINES, help="engine (target) to write the files for")
    p.add_argument("--time-limit", type=finite_number(0, MAX_TIME_LIMIT_S, "seconds"), default=SEARCH_TIME_LIMIT_S, metavar="SECONDS",
                   help="CPU seconds the search for the engine's own plan may take when it cannot run the plan "
                        f"(default {SEARCH_TIME_LIMIT_S:g})")
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
    result = export_result(plan, cluster, args.to, time_limit_s=args.time_limit)
    files = dict(result.files)
    if result.closest_plan is not None:
        files["closest-plan.json"] = plan_to_json(result.closest_plan, catalog) + "\n"
    for w in result.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if result.closest_plan is not None:        # the warnings above give its figures
        print("the plan the files describe is written beside them as closest-plan.json", file=sys.stderr)
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
