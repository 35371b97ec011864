"""hetplan plan --cluster FILE --model ID --global-batch N --seq-len S [--objective ...] [--json] [--out FILE]"""
from __future__ import annotations

import argparse
import importlib
import json
import math

from catalog.formats import load_cluster_file, plan_to_dict
from planner.cli.common import catalog_from_args, check_tokens, finite_number, print_json, whole_number
from planner.cli.files import check_output_file, refuse_an_input, write_file
from planner.cli.rl_flags import add_rl_arguments, check_flags as check_rl_flags
from planner.rl.workload import RL_KINDS
from planner.engines import AUTO, ENGINES, REAL, RUNTIME
from planner.report import estimate_to_dict, format_duration, spot_text
from planner.search import search
from planner.search.explain import describe_plan
from planner.search.greedy import GREEDY_SHARE
from planner.search.parallel import run_each
from planner.search.objective import estimate_key
from planner.search.planners import SEARCH_SHARE, SearchOptions
from planner.search.search import CP_MIN_SEQ_LEN, CP_MIN_TOKENS_PER_GPU, MAX_SEARCHED_EXPERT_PARALLEL
from planner.workers import ended_by_signals
from planner.types import (MAX_CONTEXT_PARALLEL, MAX_LORA_RANK, InputError, Job, JobKind, Objective, Offload, Precision, TooManyPassesError,
                           Training)

MAX_TOP = 1000
MAX_TIME_LIMIT_S = 24 * 3600              # a search that long is a typo, not a plan
MAX_DEADLINE_HOURS = 1e6                  # over a century
MAX_WORKERS = 64
# The module that plans a job kind other than hetplan's own search, with its `run_plan(args, cluster, model,
# catalog)`: `run` imports it for that kind only, as planner.cli.main imports the module of the command it runs
# (the RL planner's modules are no part of another plan's start-up)
JOB_KIND_MODULES = dict.fromkeys(RL_KINDS, "planner.cli.rl_cmd")


def register(sub) -> None:
    p = sub.add_parser("plan", help="search for the best plan on a cluster",
                       description="Search stage structure, layer split, sample shares and training knobs for the "
                                   "plan that is best for the objective; every plan is scored by the cost model.")
    p.add_argument("--cluster", required=True, metavar="FILE", help="cluster YAML")
    p.add_argument("--model", required=True, metavar="ID", help="catalog model id (see `hetplan catalog models`)")
    p.add_argument("--global-batch", type=int, metavar="N", help="sequences per iteration (required but for RL kinds)")
    p.add_argument("--seq-len", type=int, metavar="S", help="tokens per sequence (required but for RL kinds)")
    p.add_argument("--precision", choices=[x.value for x in Precision], default=None,
                   help="fp32, bf16, fp16 or fp8 (FP8 linear layers on GPUs that have FP8, under an engine that "
                        "runs it); default: bf16 where every GPU a plan uses supports it, else fp16")
    p.add_argument("--tf32", choices=("on", "off"), default=None,
                   help="fp32 only: TF32 tensor-core matmuls on or off (default: the engine's default, as PyTorch: off)")
    p.add_argument("--job-kind", choices=[*[k.value for k in JobKind], *RL_KINDS], default=JobKind.PRETRAIN.value,
                   help="pretrain (default), full-finetune (every weight, from a checkpoint), lora (frozen 16-bit "
                        "base, adapters trained), qlora (frozen 4-bit NF4 base), or RL post-training: grpo, ppo "
                        "(the RL options below; docs/rl.md)")
    p.add_argument("--lora-rank", type=whole_number(1, MAX_LORA_RANK), default=None, metavar="R",
                   help="adapter rank for --job-kind lora or qlora (default 16)")
    p.add_argument("--offload", choices=("auto", *[o.value for o in Offload]), default="auto",
                   help="optimizer states (and parameters) in CPU memory: auto (default) also searches each "
                        "offload the engine runs where GPU memory limits the plan without it; none, optimizer "
                        "or optimizer+params fix it")
    p.add_argument("--context-parallel", type=_context_parallel, default="auto", metavar="auto|N",
                   help=f"context parallelism: each replica spans tp x N GPUs, the sequence split over N. auto "
                        f"(default) also searches every power of two under engines that have it, for sequences "
                        f"of {CP_MIN_SEQ_LEN:,} tokens or more with at least {CP_MIN_TOKENS_PER_GPU:,} per GPU; "
                        f"N fixes it")
    p.add_argument("--expert-parallel", type=_context_parallel, default="auto", metavar="auto|N",
                   help=f"expert parallelism for a mixture-of-experts model: its routed experts sharded over N of "
                        f"a stage's replicas (no more GPUs). auto (default) also searches each power of two up to "
                        f"{MAX_SEARCHED_EXPERT_PARALLEL} that divides the experts, under engines that have it; N "
                        f"fixes it")
    p.add_argument("--objective", choices=[o.value for o in Objective], default="throughput")
    p.add_argument("--deadline-hours", type=finite_number(0, MAX_DEADLINE_HOURS, "hours"), default=None, metavar="H",
                   help="for --objective deadline")
    p.add_argument("--tokens", type=float, default=None, metavar="T", help="tokens to train (e.g. 1e12)")
    p.add_argument("--top", type=whole_number(1, MAX_TOP), default=5, metavar="K",
                   help=f"how many plans to return (default 5, at most {MAX_TOP})")
    p.add_argument("--engine", choices=(AUTO, *ENGINES, "all"), default=AUTO, metavar="NAME",
                   help=f"the engine that will run the plan: search only what it runs and predict it as it runs it "
                        f"({', '.join(ENGINES)}). {AUTO} (default): the best plan over the engines people launch "
                        f"({', '.join(REAL)}), searched in turn, each pruned by the best plan before it (each with "
                        f"the --time-limit left less 5%% of it for each engine after it), the plan tagged "
                        f"with its engine; {RUNTIME}: hetplan's own runtime (`run-local`), which runs every plan; "
                        f"`all`: the best plan of each engine side by side")
    p.add_argument("--baseline", choices=("megatron", "uniform", "exhaustive"), default=None,
                   help="run this planner instead of hetplan's search")
    p.add_argument("--time-limit", type=finite_number(0, MAX_TIME_LIMIT_S, "seconds"),
                   default=SearchOptions().time_limit_s, metavar="S",
                   help=f"CPU seconds of hetplan's search, counted on the thread that searches (other load on the "
                        f"machine does not count): first (throughput, up to {GREEDY_SHARE:.0%} of it) a greedy plan of "
                        f"the pools that the search then prunes at, and of what is left {SEARCH_SHARE:.0%} for the "
                        f"best-first loop (all of it until a plan is found), the rest for re-scoring with the cost "
                        f"model and verifying; then the best plan "
                        f"found is reported with its optimality gap (default {SearchOptions().time_limit_s:g}). "
                        f"The whole search has one budget: S plus each baseline's own limit "
                        f"({SearchOptions().baseline_time_limit_s / SearchOptions().time_limit_s:.0%} of S each, "
                        f"megatron and uniform, as in the app, searched once for the winner); the engines, the "
                        f"settings that offload, "
                        f"context or expert parallelism auto tries, baselines, re-scoring and the "
                        f"plans shown all stop within it, and the answer is the best plan so far with its gap. "
                        f"Past it: start-up, reading the files and one cost-model evaluation of the answer "
                        f"(seconds at millions of GPUs; docs/reliability.md), and with --engine all each engine "
                        f"has such a budget".replace("%", "%%"))
    p.add_argument("--workers", type=whole_number(1, MAX_WORKERS), default=SearchOptions().workers, metavar="N",
                   help="processes for the engines' searches of --engine auto and all (default 1: one engine "
                        "after another in this process): the engines are searched in up to N processes (this one "
                        "and N - 1 started for the call, forked on Linux, which end with it); with auto each prunes "
                        "at the best plan the engines before it have evaluated so far, and the baselines under the "
                        "first engine (the usual winner) are searched beside them, and from 3 workers that engine's "
                        "own search is split into N parts; the same answer as 1 for searches that end before "
                        "--time-limit (its best plan, complete and gap; with a split, the plans after the first and "
                        "the Pareto front may differ), in less wall time on N free cores. With auto each process has the "
                        "--time-limit (its own CPU seconds) for the engines it takes, so the call may spend up to N "
                        "times it in CPU seconds; with all each engine has its own, as without --workers")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object; `evaluate` and `export` read it, or any plan in it, as a plan file")
    p.add_argument("--out", metavar="FILE",
                   help="also write the best plan to FILE as a plan JSON (format hetplan.plan/1, the object "
                        "--json prints as plans[0]) for `evaluate`, `export` and `run-local`")
    add_rl_arguments(p)
    p.set_defaults(run=run)


def run(args) -> int:
    check_tokens("--tokens", args.tokens, " (e.g. 1e12)")
    if args.out:
        check_output_file(args.out, "--out")         # before the search, not after it
        refuse_an_input(args.out, "--out", [*args.catalog, args.cluster])
    catalog = catalog_from_args(args)
    cluster = load_cluster_file(args.cluster, catalog)
    model = catalog.model(args.model, "--model")
    check_rl_flags(args)
    if args.job_kind in JOB_KIND_MODULES:
        return importlib.import_module(JOB_KIND_MODULES[args.job_kind]).run_plan(args, cluster, model, catalog)
    if args.engine == "all":
        return _run_all(args, cluster, model, catalog)
    with ended_by_signals():        # --workers: SIGTERM and SIGHUP end the workers on the way out
        result = _search(args, cluster, model, args.engine, REAL if args.engine == AUTO else None)

    if args.out:                                    # before printing, which a closed pipe may cut short
        best = json.dumps(_scored(result.plans[0], catalog), indent=1, allow_nan=False)
        write_file(args.out, best + "\n", "--out")
    if args.json:
        print_json(_json(result, catalog))
    else:
        print(_text(result))
    if args.out and not args.json:                  # --json's output stays one JSON object
        print(f"wrote {args.out}")
    return 0


def _context_parallel(text: str):
    """An argparse type: `auto` or a degree from 1 (--context-parallel, --expert-parallel)."""
    if text == "auto":
        return text
    try:
        return whole_number(1, MAX_CONTEXT_PARALLEL)(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"auto or a whole number: {e}") from None


def _search(args, cluster, model, engine: str, engines: tuple[str, ...] | None = None, baselines: bool = True,
            best_only: bool = False, seeds: tuple = ()):
    """The search for `engine`, or (`engines`) for the best of those engines; `best_only`: its best plan
    alone, pruned at the best of the `seeds` it runs (SearchOptions.best_only, seeds)."""
    if args.tf32 is not None and args.precision != "fp32":
        raise InputError("--tf32", "applies to --precision fp32 only")
    if args.lora_rank is not None and args.job_kind not in ("lora", "qlora"):
        raise InputError("--lora-rank", "applies to --job-kind lora or qlora only")
    training = Training(JobKind(args.job_kind), args.lora_rank or Training().lora_rank)
    offload = Offload.NONE if args.offload == "auto" else Offload(args.offload)
    cp = 1 if args.context_parallel == "auto" else args.context_parallel
    ep = 1 if args.expert_parallel == "auto" else args.expert_parallel
    job = Job(model=model, global_batch=args.global_batch, seq_len=args.seq_len,
              precision=Precision(args.precision) if args.precision else None, tokens_to_train=args.tokens,
              engine=RUNTIME if engine == AUTO else engine, tf32=None if args.tf32 is None else args.tf32 == "on",
              training=training, offload=offload, context_parallel=cp, expert_parallel=ep)
    try:
        return search(cluster, job, Objective(args.objective), args.deadline_hours, args.top,
                      method=args.baseline or "hetplan",
                      options=_options(args.time_limit, args.workers, best_only, seeds),
                      offload="auto" if args.offload == "auto" else "fixed",
                      context_parallel="auto" if args.context_parallel == "auto" else "fixed",
                      expert_parallel="auto" if args.expert_parallel == "auto" else "fixed", engines=engines,
                      baselines=baselines)
    except TooManyPassesError as e:       # its advice names a plan file's field, which `plan` does not take
        raise InputError("--global-batch", f"{args.global_batch:,} sequences make plans with too many pipeline "
                                           f"passes to simulate ({e.message.split(';')[0]}); use a smaller "
                                           f"--global-batch") from None


def _options(time_limit_s: float, workers: int = 1, best_only: bool = False, seeds: tuple = ()) -> SearchOptions:
    """The search's CPU-second limit, and each baseline's in the planner's default proportion (as the
    app gives them), so that a gain over a baseline does not depend on which front end asked."""
    default = SearchOptions()
    return SearchOptions(time_limit_s=time_limit_s, workers=workers, best_only=best_only, seeds=seeds,
                         baseline_time_limit_s=time_limit_s * default.baseline_time_limit_s / default.time_limit_s)


def _run_all(args, cluster, model, catalog) -> int:
    """--engine all: each engine's search; what each costs against hetplan's runtime (every plan). The
    baselines only where they are shown: --json, and the gains of the plan --out writes."""
    results, errors = {}, {}
    names = tuple(ENGINES)
    with ended_by_signals():        # --workers: SIGTERM and SIGHUP end the workers on the way out
        outcomes = (run_each(_engine_of_all, len(names), args.workers, None, (args, cluster, model, names))
                    if args.workers > 1 else _engines_in_turn(args, cluster, model, names))
    for name, outcome in zip(names, outcomes):
        if isinstance(outcome, str):          # infeasible under this engine: a result, not a failure
            errors[name] = outcome
        else:
            results[name] = outcome
    if not results:
        raise InputError("--engine", "no engine has a plan: " + "; ".join(f"{n}: {m}" for n, m in errors.items()))
    best = min(results, key=lambda n: _key(results[n]))
    if args.out:
        write_file(args.out, json.dumps(_scored(results[best].plans[0], catalog), indent=1, allow_nan=False) + "\n",
                   "--out")
    if args.json:
        print_json({"engine": "all", "best": best,
                    "engines": {n: (_json(results[n], catalog) if n in results else {"error": errors[n]})
                                for n in ENGINES}})
    else:
        print(_engines_text(results, errors, best))
        if args.out:
            print(f"wrote {args.out} (the {best} plan)")
    return 0


def _engines_in_turn(args, cluster, model, names) -> list:
    """_engine_of_all of each engine in one process, in the order of `names` but hetplan's runtime last: its
    space holds the plans of the others, the best of which then seeds its search (SearchOptions.seeds)."""
    outcomes = [None] * len(names)
    for k in sorted(range(len(names)), key=lambda k: names[k] == RUNTIME):
        seeds = tuple(o.plans[0].plan for o in outcomes if o is not None and not isinstance(o, str))
        outcomes[k] = _engine_of_all(k, None, None, 1, False, args, cluster, model, names, seeds=seeds)
    return outcomes


def _engine_of_all(k: int, shared, clock, still: int, searched_before: bool, args, cluster, model, names,
                   seeds: tuple = ()):
    """--engine all's search of names[k], or why it has no plan (a planner.search.parallel task with
    --workers: each engine's own search, no threshold shared, each with its own --time-limit). The text
    shows each engine's best plan alone: only --json and --out ask for the rest (plans, front, baselines);
    for it alone, the `seeds` (other engines' answers) prune the search (SearchOptions.seeds)."""
    shown = bool(args.json or args.out)
    try:
        return _search(args, cluster, model, names[k], baselines=shown, best_only=not shown, seeds=seeds)
    except InputError as e:
        return str(e)


def _key(result) -> float:
    return estimate_key(result.objective, result.plans[0].estimate, None if result.objective != Objective.DEADLINE
                        else math.inf)


def _engines_text(results, errors, best) -> str:
    ref = results.get(RUNTIME)
    against = (f"against {ENGINES[RUNTIME].title}, which runs every plan it can train" if ref is not None else
               f"{ENGINES[RUNTIME].title} has none to compare with")
    lines = [f"best plan of each engine ({next(iter(results.values())).objective.value}); {against}:"]
    for name, engine in ENGINES.items():
        if name not in results:
            lines.append(f"\n{engine.title:16s} no plan: {errors[name]}")
            continue
        r, e = results[name], results[name].plans[0].estimate
        vs = (f", {e.tokens_per_s / ref.plans[0].estimate.tokens_per_s - 1:+.1%} throughput vs {ENGINES[RUNTIME].title}"
              if ref is not None and name != RUNTIME else "")
        proof = "complete" if r.complete else (f"gap {r.gap:.1%}" if r.gap is not None else "gap unknown")
        lines.append(f"\n{engine.title:16s} {e.tokens_per_s:12,.0f} tokens/s  ${e.cost_per_million_tokens_usd:.3f}/M  "
                     f"{e.num_gpus} GPUs  ({proof}{vs}){'  <- best' if name == best else ''}")
        lines.append(f"    {describe_plan(r.plans[0].plan)}")
    return "\n".join(lines)


def _scored(sp, catalog) -> dict:
    """A plan as --json and --out write it: the plan file format with the keys it adds for people
    (catalog.formats.PLAN_OUTPUT_ONLY_KEYS), which a plan file may keep and loading ignores."""
    d = plan_to_dict(sp.plan, catalog, estimate_to_dict(sp.estimate))
    d["explanation"] = sp.explanation
    d["gain_over"] = dict(sp.gain_over)
    return d


def _json(result, catalog) -> dict:
    return {
        "objective": result.objective.value, "method": result.method, "engine": result.plans[0].plan.engine,
        **({"engines": {n: _engine_json(r) for n, r in result.by_engine.items()}} if result.by_engine else {}),
        "plans": [_scored(sp, catalog) for sp in result.plans],
        "pareto": [_scored(sp, catalog) for sp in result.pareto],
        "baselines": {k: (_scored(v, catalog) if v else None) for k, v in result.baselines.items()},
        "idle": result.idle, "search_time_s": result.search_time_s,
        "candidates_evaluated": result.candidates_evaluated, "notes": list(result.notes),
        "complete": result.complete, "gap": result.gap, "stopped_by": result.stopped_by,
        "guarantee": result.guarantee,
        "baseline_status": {k: {"complete": v.complete, "stopped_by": v.stopped_by, "gap": v.gap}
                            for k, v in result.baseline_status.items()},
    }


def _engine_json(r) -> dict:
    """What one engine's search reached, when the best of several engines was planned."""
    if isinstance(r, str):
        return {"error": r}
    e = r.plans[0].estimate
    return {"tokens_per_s": e.tokens_per_s, "cost_per_million_tokens_usd": e.cost_per_million_tokens_usd,
            "num_gpus": e.num_gpus, "complete": r.complete, "gap": r.gap}


def _text(result) -> str:
    lines = [f"{result.method} search for {result.objective.value}: {result.candidates_evaluated:,} candidates "
             f"in {result.search_time_s:.2f} s, "
             + ("complete" if result.complete else
                (f"stopped by its {result.stopped_by}, " if result.stopped_by else "not proven best, ")
                + (f"optimality gap {result.gap:.1%}" if result.gap is not None else "gap unknown")),
             f"guarantee: {result.guarantee}"]
    if result.by_engine:
        lines.append(f"engine: {ENGINES[result.plans[0].plan.engine].title}, the best of "
                     + ", ".join(f"{ENGINES[n].title} ({r.plans[0].estimate.tokens_per_s:,.0f} tokens/s)"
                                 if not isinstance(r, str) else f"{ENGINES[n].title} ({r if r.startswith('beaten') else 'no plan: ' + r})"
                                 for n, r in result.by_engine.items()))
    for k, sp in enumerate(result.plans, 1):
        e = sp.estimate
        of_peak = " of the 16-bit peak" if sp.plan.precision == Precision.FP8 else ""
        lines.append(f"\n#{k}  {e.tokens_per_s:,.0f} tokens/s on {e.num_gpus} GPUs, MFU {e.mfu:.1%}{of_peak}, "
                     f"${e.cost_per_million_tokens_usd:.3f} per million tokens (${e.cost_per_hour_usd:,.2f}/h), "
                     f"{e.energy_per_million_tokens_kwh:.3f} kWh per million tokens"
                     + (f", trains in {format_duration(e.train_time_s)} for ${e.train_cost_usd:,.0f}"
                        if e.train_time_s is not None else ""))
        if spot_text(e):
            lines.append(f"    spot: {spot_text(e)}")
        lines.append(f"    for {ENGINES[sp.plan.engine].title} (--engine {sp.plan.engine}): "
                     f"{describe_plan(sp.plan)}")
        if sp.gain_over:
            lines.append("    gain over " + ", ".join(f"{name} {g:+.1%}" if g is not None else f"{name} n/a (free GPUs)"
                                                  for name, g in sp.gain_over.items()))
        lines.append(f"    {sp.explanation}")
        if k == 1:                          # what the best plan's figures rest on (planner.cost notes)
            lines += [f"    note: {n}" for n in e.notes]
    for name, b in result.baselines.items():
        lines.append(f"\nbaseline {name} under {ENGINES[result.plans[0].plan.engine].title}: " + (f"{b.estimate.tokens_per_s:,.0f} tokens/s, "
                                               f"${b.estimate.cost_per_million_tokens_usd:.3f}/M tokens: "
                                               f"{describe_plan(b.plan)}" if b else "no plan fits" if
                                               getattr(result.baseline_status.get(name), "complete", True)
                                               else "none found within its time limit"))
    for pool, why in result.idle.items():
        lines.append(f"idle {pool}: {why}")
    lines.append(f"\nPareto front (throughput vs cost): {len(result.pareto)} plan(s)")
    for sp in result.pareto:
        lines.append(f"  {sp.estimate.tokens_per_s:12,.0f} tokens/s  ${sp.estimate.cost_per_million_tokens_usd:.3f}/M  "
                     f"{sp.estimate.num_gpus} GPUs")
    lines += [f"note: {n}" for n in result.notes]
    return "\n".join(lines)
