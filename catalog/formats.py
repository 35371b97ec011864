"""The cluster (YAML) and plan (JSON) file formats: parsing into planner types and writing back.

Cluster file::

    name: lab-mix
    pools:
      - name: a100              # optional; defaults to the gpu id
        gpu: a100-80gb-sxm
        nodes: 2
        gpus_per_node: 8
        inter_node_gbps: 200    # per node, Gb/s; required when nodes > 1, else 100 by default
        price_per_gpu_hour: 1.8 # optional; overrides the catalog's price
        spot: true              # optional (default false): preemptible, price_per_gpu_hour the spot price
        availability: 0.9       # required with spot: the share of time the pool's GPUs are held
    between_pools_gbps: 100     # optional; per node; default: the slower side
    network:                    # optional, instead of between_pools_gbps: the network as a graph
      switches: [{name: leaf, kind: infiniband}]
      links: [{from: a100, to: leaf, nic: ib-hdr}]   # per node; between switches: a trunk's total
      storage: {switch: leaf, gbps: 200}             # optional: where checkpoints go

Plan file: see `plan_to_dict` and docs; format tag "hetplan.plan/1". A plan file may also be a plan
as `hetplan plan --json` prints it (its output-only keys are ignored) or that whole output (its best
plan, `plans[0]`, is read): see `plan_from_file_data`.
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import yaml

from catalog.errors import located, relocated, short_repr
from catalog.files import read_mapping
from catalog.loader import Catalog, builtin_catalog, model_from_entry
from catalog.plain import validated
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import ENGINES
from planner.engines import get as engine_profile
from planner.numerics import supports
from planner.placement import fits_nodes, tp_fits
from planner.types import (DEFAULT_LATENCY_S, GIB, MAX_GPUS_PER_POOL, PLAN_FORMAT, PRETRAIN, Attention, Cluster, FleetJob, InputError, JobKind, Link,
                           Model, NetworkGraph, Offload, Plan, Pool, Precision, Recompute, Replica, Schedule, Stage,
                           Storage, Switch, Training)

GBIT = 1e9 / 8                            # bytes/s in one Gb/s
SUPPORTED_PLAN_FORMATS = (PLAN_FORMAT,)
DEFAULT_INTER_NODE_GBPS = 100.0          # used when a single-node pool does not say (100 GbE / RoCE)
# Keys that `hetplan plan --json` (and `plan --out`) add to a plan for people: the plan's estimate,
# why it won and its gain over each baseline. A plan file may carry them, so that a plan printed by
# `plan` can be read back as it is; they are output only and ignored on load (evaluate recomputes them).
PLAN_OUTPUT_ONLY_KEYS = ("metrics", "explanation", "gain_over")


def _validate(schema: str, data, source: str):
    """`data` as catalog.schema's model `schema` (by name) holds it: that model, or a catalog.plain.Entry
    with the same fields where the plain check accepts it."""
    if not isinstance(data, Mapping):
        raise InputError(source, f"must be a mapping of keys to values, got {type(data).__name__}")
    return validated(schema, dict(data), source)


def _human(x: float) -> float | int:
    """A number for a file: whole numbers without '.0', others rounded off float noise."""
    r = round(x, 9)
    return int(r) if r == int(r) else r


# ----------------------------------------------------------------------------- cluster

def _pool_from_entry(i: int, e, catalog: Catalog, source: str,
                     nic: tuple[float, float] | None = None) -> Pool:
    """The pool of entry `i`; `nic`: its nodes' (bytes/s, latency) from the network section."""
    at = f"pools[{i}]"
    gpu = catalog.gpu(e.gpu, located(source, f"{at}.gpu"))
    if e.nodes * e.gpus_per_node > MAX_GPUS_PER_POOL:
        raise InputError(located(source, f"{at}.nodes"),
                         f"{e.nodes} nodes x {e.gpus_per_node} GPUs = {e.nodes * e.gpus_per_node:,} GPUs; "
                         f"the limit is {MAX_GPUS_PER_POOL:,} per pool")
    if e.inter_node_gbps is None and e.nodes > 1 and nic is None:
        raise InputError(located(source, f"{at}.inter_node_gbps"),
                         "is required when nodes > 1: the network bandwidth per node in Gb/s "
                         "(e.g. 100 for 100 GbE, 200 for InfiniBand HDR, 400 for NDR)")
    gbps = DEFAULT_INTER_NODE_GBPS if e.inter_node_gbps is None else e.inter_node_gbps
    bw, latency = (gbps * GBIT, Pool.inter_node_latency_s) if nic is None else nic
    price = gpu.price_per_hour_usd if e.price_per_gpu_hour is None else e.price_per_gpu_hour
    _check_spot(e, located(source, at))
    try:
        return Pool(name=e.name or e.gpu, gpu=gpu, nodes=e.nodes, gpus_per_node=e.gpus_per_node,
                    inter_node_bw_bytes_per_s=bw, inter_node_latency_s=latency, price_per_gpu_hour_usd=price,
                    host_mem_bytes=0.0 if e.host_memory_gib is None else e.host_memory_gib * GIB,
                    grid_gco2_per_kwh=e.grid_gco2_per_kwh, spot=e.spot,
                    availability=1.0 if e.availability is None else e.availability)
    except InputError as err:
        raise relocated(err, source, f"pools[{e.name or e.gpu}]", at) from None


def _check_spot(e, at: str) -> None:
    if e.spot and e.availability is None:
        raise InputError(f"{at}.availability", "is required when spot is true: the share of time the pool's GPUs "
                                               "are held, above 0 and at most 1 (e.g. 0.9)")
    if not e.spot and e.availability is not None:
        raise InputError(f"{at}.availability", f"applies to spot pools only: add `spot: true` to the pool, or remove "
                                               f"availability (an on-demand pool is always held), got {e.availability!r}")


def cluster_from_dict(data: Mapping[str, Any], catalog: Catalog, source: str = "cluster") -> Cluster:
    """A Cluster from the parsed cluster file format; errors name `source` and the field."""
    entry = _validate("ClusterEntry", data, source)
    network, nics = None, {}
    if entry.network is not None:
        try:
            network = _network_from_entry(entry, catalog)
            nics = {p.name or p.gpu: network.nic(p.name or p.gpu) for p in entry.pools}
        except InputError as err:
            raise relocated(err, source) from None
    pools = tuple(_pool_from_entry(i, p, catalog, source, nics.get(p.name or p.gpu))
                  for i, p in enumerate(entry.pools))
    between = None if entry.between_pools_gbps is None else entry.between_pools_gbps * GBIT
    try:
        return Cluster(name=entry.name, pools=pools, between_pools_bw_bytes_per_s=between, network=network)
    except InputError as err:
        raise relocated(err, source) from None


def _network_from_entry(entry, catalog: Catalog) -> NetworkGraph:
    """The network section as a graph. A pool's link without `gbps` or `nic` runs at the pool's
    `inter_node_gbps`; a pool that gives both must give the same total."""
    section = entry.network
    pools = {p.name or p.gpu: p for p in entry.pools}
    switch_kind = {s.name: s.kind for s in section.switches}
    clash = sorted(set(pools) & set(switch_kind))
    if clash:
        raise InputError("network.switches", f"{clash} name both a pool and a switch; rename the switch")
    links = tuple(_link_from_entry(i, e, pools, switch_kind, catalog) for i, e in enumerate(section.links))
    storage = None if section.storage is None else Storage(section.storage.switch, section.storage.gbps * GBIT)
    network = NetworkGraph(tuple(Switch(s.name, s.kind) for s in section.switches), links, storage)
    for i, (name, p) in enumerate(pools.items()):
        total = network.nic(name)[0] / GBIT
        if p.inter_node_gbps is not None and not math.isclose(total, p.inter_node_gbps, rel_tol=1e-9):
            raise InputError(f"pools[{i}].inter_node_gbps",
                             f"is {p.inter_node_gbps:g} Gb/s but pool {name!r}'s network links add up to "
                             f"{total:g}; give the bandwidth in one place (drop inter_node_gbps or make them agree)")
    return network


def _link_from_entry(i: int, e, pools: Mapping, switch_kind: Mapping[str, str],
                     catalog: Catalog) -> Link:
    at = f"network.links[{i}]"
    for end, key in ((e.from_, "from"), (e.to, "to")):
        if end not in pools and end not in switch_kind:
            raise InputError(f"{at}.{key}", f"{end!r} is neither a pool {sorted(pools)} nor a switch "
                                            f"{sorted(switch_kind)}")
    switches = [end for end in (e.from_, e.to) if end in switch_kind]
    if not switches:
        raise InputError(at, f"joins two pools ({e.from_!r}, {e.to!r}); join each pool to a switch")
    pool = next((end for end in (e.from_, e.to) if end in pools), None)
    nic = None if e.nic is None else catalog.network(e.nic, f"{at}.nic")
    if nic is not None and (nic.kind != "inter-node" or not nic.transport):
        raise InputError(f"{at}.nic", f"{e.nic!r} is not a node network; use an inter-node id of "
                                      f"`hetplan catalog networks` (e.g. ib-ndr, roce-400g, eth-25g)")
    if pool is None:        # a trunk between two switches
        kinds = {switch_kind[s] for s in switches}
        kind = e.kind or (nic.transport if nic else kinds.pop() if len(kinds) == 1 else "ethernet")
    else:
        kind = e.kind or (nic.transport if nic else switch_kind[switches[0]])
        if kind != switch_kind[switches[0]]:
            raise InputError(f"{at}.kind", f"an {kind} link cannot join the {switch_kind[switches[0]]} switch "
                                           f"{switches[0]!r}; give the link the switch's kind or join another switch")
    if e.gbps is not None and nic is not None:
        raise InputError(f"{at}.gbps", "give gbps or nic, not both")
    if e.gbps is not None:
        gbps = e.gbps
    elif nic is not None:
        gbps = nic.bw_bytes_per_s / GBIT
    elif pool is not None and pools[pool].inter_node_gbps is not None:
        gbps = pools[pool].inter_node_gbps
    else:
        raise InputError(f"{at}.gbps", "is required: the link's bandwidth in Gb/s (per node for a pool's link, "
                                       "in total for a link between switches), or a catalog `nic`")
    latency = (e.latency_us / 1e6 if e.latency_us is not None
               else nic.latency_s if nic is not None else DEFAULT_LATENCY_S[kind])
    return Link(e.from_, e.to, gbps * e.count * GBIT, latency, kind)


def cluster_to_dict(cluster: Cluster) -> dict:
    """The cluster file format; `cluster_from_dict` of it gives an equal Cluster."""
    pools = []
    for p in cluster.pools:
        d = {"name": p.name, "gpu": p.gpu.id, "nodes": p.nodes, "gpus_per_node": p.gpus_per_node,
             "inter_node_gbps": _human(p.inter_node_bw_bytes_per_s / GBIT)}
        if p.price_per_gpu_hour_usd != p.gpu.price_per_hour_usd:
            d["price_per_gpu_hour"] = p.price_per_gpu_hour_usd
        if p.host_mem_bytes:
            d["host_memory_gib"] = _human(p.host_mem_bytes / GIB)
        if p.grid_gco2_per_kwh is not None:
            d["grid_gco2_per_kwh"] = p.grid_gco2_per_kwh
        if p.spot:
            d["spot"], d["availability"] = True, p.availability
        pools.append(d)
    out: dict[str, Any] = {"name": cluster.name, "pools": pools}
    if cluster.between_pools_bw_bytes_per_s is not None:
        out["between_pools_gbps"] = _human(cluster.between_pools_bw_bytes_per_s / GBIT)
    if cluster.network is not None:
        out["network"] = _network_to_dict(cluster.network)
    return out


def _network_to_dict(network: NetworkGraph) -> dict:
    out: dict[str, Any] = {
        "switches": [{"name": s.name, "kind": s.kind} for s in network.switches],
        "links": [{"from": l.a, "to": l.b, "gbps": _human(l.bw_bytes_per_s / GBIT),
                   "latency_us": _human(l.latency_s * 1e6), "kind": l.kind} for l in network.links]}
    if network.storage is not None:
        out["storage"] = {"switch": network.storage.switch, "gbps": _human(network.storage.bw_bytes_per_s / GBIT)}
    return out


def cluster_to_yaml(cluster: Cluster) -> str:
    return yaml.safe_dump(cluster_to_dict(cluster), sort_keys=False)


def load_cluster_file(path: str | Path, catalog: Catalog) -> Cluster:
    data, source = read_mapping(path)
    return cluster_from_dict(data, catalog, source)


# ----------------------------------------------------------------------------- plan

def _plan_model(value: Any, catalog: Catalog, source: str) -> Model:
    if isinstance(value, str):
        return catalog.model(value, located(source, "model"))
    if not isinstance(value, Mapping):
        raise InputError(located(source, "model"),
                         f"must be a catalog model id or an object with the model's fields, got {value!r}")
    entry = validated("InlineModelEntry", dict(value), source, prefix="model")
    try:
        return model_from_entry(entry.id, entry)
    except InputError as err:
        raise relocated(err, source, f"models[{entry.id}]", "model") from None


def _default_samples(i: int, stage, global_batch: int, micro_batch: int, source: str) -> list[int]:
    """Replicas without `samples` share what the others leave evenly, in whole micro-batches;
    the first ones take one micro-batch more while a remainder lasts."""
    given = sum(r.samples for r in stage.replicas if r.samples is not None)
    open_slots = [j for j, r in enumerate(stage.replicas) if r.samples is None]
    samples = [r.samples or 0 for r in stage.replicas]
    if not open_slots:
        return samples
    left = global_batch - given
    at = located(source, f"stages[{i}].replicas")
    if left % micro_batch:
        raise InputError(at, f"{left} samples are left for the replicas without `samples`, "
                             f"not a whole number of micro-batches of {micro_batch}")
    share, extra = divmod(left // micro_batch, len(open_slots))
    if share == 0:
        raise InputError(at, f"{left} samples are left for {len(open_slots)} replicas without `samples` "
                             f"(global batch {global_batch}); some would get none: set `samples` on each replica")
    for k, j in enumerate(open_slots):
        samples[j] = (share + (1 if k < extra else 0)) * micro_batch
    return samples


def _stage_from_entry(i: int, stage, global_batch: int, micro_batch: int, source: str) -> Stage:
    samples = _default_samples(i, stage, global_batch, micro_batch, source)
    replicas = []
    for j, (r, n) in enumerate(zip(stage.replicas, samples)):
        try:
            replicas.append(Replica(pool=r.pool, tp=r.tp, samples=n))
        except InputError as err:
            raise relocated(err, source, new_prefix=f"stages[{i}].replicas[{j}]") from None
    try:
        return Stage(layer_start=stage.layers[0], layer_end=stage.layers[1], replicas=tuple(replicas))
    except InputError as err:
        raise relocated(err, source, new_prefix=f"stages[{i}]") from None


def _check_format(data: Mapping, source: str) -> None:
    tag = data.get("format", PLAN_FORMAT)
    if tag not in SUPPORTED_PLAN_FORMATS:
        raise InputError(located(source, "format"),
                         f"unsupported plan format {tag!r}; supported: {list(SUPPORTED_PLAN_FORMATS)}")


def without_output_keys(data: Mapping[str, Any]) -> dict:
    """A plan object without the keys `hetplan plan` adds for people (`PLAN_OUTPUT_ONLY_KEYS`)."""
    return {k: v for k, v in data.items() if k not in PLAN_OUTPUT_ONLY_KEYS}


def plan_from_dict(data: Mapping[str, Any], catalog: Catalog, source: str = "plan") -> Plan:
    """A Plan from the parsed plan file format; errors name `source` and the field path.
    The output-only keys of `hetplan plan --json`'s plans are ignored; any other unknown key is refused."""
    if isinstance(data, Mapping):
        _check_format(data, source)
        data = {"format": PLAN_FORMAT, **without_output_keys(data)}
    entry = _validate("PlanEntry", data, source)
    model = _plan_model(entry.model, catalog, source)
    stages = tuple(_stage_from_entry(i, s, entry.global_batch, entry.micro_batch, source)
                   for i, s in enumerate(entry.stages))
    engine = engine_profile(DEFAULT_ENGINE if entry.engine is None else entry.engine, located(source, "engine"))
    try:
        plan = Plan(model=model, global_batch=entry.global_batch, seq_len=entry.seq_len,
                    micro_batch=entry.micro_batch, precision=Precision(entry.precision), stages=stages,
                    zero_stage=entry.zero_stage, recompute=Recompute(entry.recompute),
                    sequence_parallel=entry.sequence_parallel, schedule=Schedule(entry.schedule),
                    interleave=entry.interleave, engine=engine.name, tf32=entry.tf32,
                    training=_training(entry.job), offload=Offload(entry.offload),
                    context_parallel=entry.context_parallel, expert_parallel=entry.expert_parallel,
                    attention=Attention(entry.attention),
                    tp_comm_overlap=entry.tp_comm_overlap, overlap_grad_reduce=entry.overlap_grad_reduce,
                    overlap_param_gather=entry.overlap_param_gather, prefetch=entry.prefetch,
                    hybrid_shard=entry.hybrid_shard, expert_tensor_parallel=entry.expert_tensor_parallel)
    except InputError as err:
        raise relocated(err, source) from None
    problems = engine.violations(plan)
    if problems:
        can = [e.name for e in ENGINES.values() if not e.violations(replace(plan, engine=e.name))]
        fix = (f"set `engine` to one that runs it ({', '.join(can)})" if can else
               "no engine runs it as it stands")
        raise InputError(located(source, "engine"),
                         f"{engine.title} cannot run this plan: {'; '.join(problems)}. Plan for "
                         f"{engine.title} with `hetplan plan --engine {engine.name}`, or {fix}")
    return plan


def _training(entry) -> Training:
    return PRETRAIN if entry is None else Training(JobKind(entry.kind), entry.lora_rank)


def _training_to_dict(training: Training) -> dict:
    out = {"kind": training.kind.value}
    if training.adapters:
        out["lora_rank"] = training.lora_rank
    return out


def _model_to_dict(model: Model) -> dict:
    d = {"id": model.id}
    for name in Model.__dataclass_fields__:
        value = getattr(model, name)
        d[name] = value.value if hasattr(value, "value") else value
    return d


def plan_to_dict(plan: Plan, catalog: Catalog | None = None, metrics: Mapping | None = None) -> dict:
    """The plan file format. The model is written as its id when `catalog` (default: the built-in
    one) holds an equal model under that id, so the file names it; otherwise inline."""
    catalog = catalog or builtin_catalog()
    same = catalog.models.get(plan.model.id) == plan.model
    out: dict[str, Any] = {
        "format": PLAN_FORMAT,
        "model": plan.model.id if same else _model_to_dict(plan.model),
        "global_batch": plan.global_batch, "seq_len": plan.seq_len, "micro_batch": plan.micro_batch,
        "precision": plan.precision.value, "zero_stage": plan.zero_stage,
        "recompute": plan.recompute.value, "sequence_parallel": plan.sequence_parallel,
        "schedule": plan.schedule.value, "interleave": plan.interleave,
        **({} if plan.engine == DEFAULT_ENGINE else {"engine": plan.engine}),
        **({} if plan.tf32 is None else {"tf32": plan.tf32}),
        **({} if plan.training == PRETRAIN else {"job": _training_to_dict(plan.training)}),
        **({} if plan.offload == Offload.NONE else {"offload": plan.offload.value}),
        **({} if plan.context_parallel == 1 else {"context_parallel": plan.context_parallel}),
        **({} if plan.expert_parallel == 1 else {"expert_parallel": plan.expert_parallel}),
        **({} if plan.attention == Attention.FLASH else {"attention": plan.attention.value}),
        **({"tp_comm_overlap": True} if plan.tp_comm_overlap else {}),
        **{k: getattr(plan, k) for k in ("overlap_grad_reduce", "overlap_param_gather", "prefetch")
           if getattr(plan, k) is not None},
        **({"hybrid_shard": plan.hybrid_shard} if plan.hybrid_shard else {}),
        **({"expert_tensor_parallel": plan.expert_tensor_parallel} if plan.expert_tensor_parallel else {}),
        "stages": [{"layers": [s.layer_start, s.layer_end],
                    "replicas": [{"pool": r.pool, "tp": r.tp, "samples": r.samples} for r in s.replicas]}
                   for s in plan.stages],
    }
    if metrics is not None:
        out["metrics"] = dict(metrics)
    return out


def plan_to_json(plan: Plan, catalog: Catalog | None = None, metrics: Mapping | None = None) -> str:
    return json.dumps(plan_to_dict(plan, catalog, metrics), indent=1)


def is_search_output(data: Any) -> bool:
    """Whether `data` is the whole object `hetplan plan --json` prints (it has `plans`, and a plan
    has `stages`) rather than one plan."""
    return isinstance(data, Mapping) and "plans" in data and "stages" not in data


def plan_from_file_data(data: Any, catalog: Catalog, source: str = "plan") -> Plan:
    """A Plan from a plan file's data: a plan object (see `plan_from_dict`), or the whole output of
    `hetplan plan --json`, of which the best plan, `plans[0]`, is read and the rest ignored."""
    if not is_search_output(data):
        return plan_from_dict(data, catalog, source)
    plans = data["plans"]
    if not isinstance(plans, list) or not plans:
        raise InputError(located(source, "plans"), f"must be a non-empty list of plans (as `hetplan plan --json` "
                                                   f"prints it), got {short_repr(plans)}")
    try:
        return plan_from_dict(plans[0], catalog, source)
    except InputError as err:
        raise _within(err, source, "plans[0]") from None


def _within(err: InputError, source: str, prefix: str) -> InputError:
    """`err`, raised for `source`, re-addressed as an error in the part `prefix` of `source`."""
    path = err.field
    if path == source:
        path = ""
    elif path.startswith(f"{source}: "):
        path = path[len(source) + 2:]
    return InputError(located(source, f"{prefix}.{path}" if path else prefix), err.message)


def load_plan_file(path: str | Path, catalog: Catalog) -> Plan:
    """A Plan from a plan file; see `plan_from_file_data` for what the file may hold."""
    data, source = read_mapping(path)
    return plan_from_file_data(data, catalog, source)


# ----------------------------------------------------------------------------- jobs file (hetplan fleet)

def fleet_jobs_from_dict(data: Mapping[str, Any], catalog: Catalog, source: str = "jobs") -> tuple:
    """The jobs of a jobs file as planner.types.FleetJob (which planner.fleet sizes); errors name
    `source` and the field (e.g. ``jobs[1].global_batch``)."""
    entry = _validate("JobsFile", data, source)
    names = [j.name for j in entry.jobs]
    out = []
    for i, j in enumerate(entry.jobs):
        at = f"jobs[{i}]"
        if names.index(j.name) != i:
            raise InputError(located(source, f"{at}.name"), f"job name {j.name!r} is used twice; names must differ")
        model = _fleet_model(j.model, catalog, source, f"{at}.model")
        try:
            out.append(FleetJob(j.name, model, j.global_batch, j.seq_len, j.tokens, j.deadline_hours, j.weight))
        except InputError as err:
            raise relocated(err, source, "", at) from None
    return tuple(out)


def _fleet_model(value: Any, catalog: Catalog, source: str, at: str) -> Model:
    if isinstance(value, str):
        return catalog.model(value, located(source, at))
    if not isinstance(value, Mapping):
        raise InputError(located(source, at),
                         f"must be a catalog model id or an object with the model's fields, got {short_repr(value)}")
    entry = validated("InlineModelEntry", dict(value), source, prefix=at)
    try:
        return model_from_entry(entry.id, entry)
    except InputError as err:
        raise relocated(err, source, f"models[{entry.id}]", at) from None


def load_jobs_file(path: str | Path, catalog: Catalog) -> tuple:
    data, source = read_mapping(path)
    return fleet_jobs_from_dict(data, catalog, source)


# ----------------------------------------------------------------------------- plan against cluster

def check_plan_against_cluster(plan: Plan, cluster: Cluster) -> None:
    """Raise InputError when the plan names a pool the cluster lacks, uses a tensor-parallel
    group that does not fit a node, uses more GPUs of a pool than it has, or bf16 where unsupported."""
    pools = {p.name: p for p in cluster.pools}
    for i, stage in enumerate(plan.stages):
        for j, r in enumerate(stage.replicas):
            at = f"stages[{i}].replicas[{j}]"
            pool = pools.get(r.pool)
            if pool is None:
                raise InputError(f"{at}.pool", f"unknown pool {r.pool!r}; the cluster has {list(pools)}")
            if not tp_fits(r.tp, pool):
                domain = pool.gpu.nvlink_domain_gpus
                raise InputError(f"{at}.tp", f"tp {r.tp} must divide the {pool.gpus_per_node} GPUs per node "
                                             f"of pool {pool.name!r} (tensor parallelism stays inside a node"
                                             + (f" or fills whole nodes of its {domain}-GPU NVLink domain)"
                                                if domain > pool.gpus_per_node else ")"))
            if not fits_nodes(plan.replica_gpus(r), pool.gpus_per_node):
                raise InputError("context_parallel", f"a replica of tp {r.tp} x context_parallel "
                                                     f"{plan.context_parallel} = {plan.replica_gpus(r)} GPUs neither "
                                                     f"divides a node of pool {pool.name!r} ({pool.gpus_per_node} "
                                                     f"GPUs) nor fills whole nodes; choose another degree")
            lack = supports(pool.gpu, plan.precision)
            if lack:
                raise InputError(at, f"{lack}; use precision "
                                     f"{'fp16' if plan.precision == Precision.BF16 else 'bf16 or fp16'} on pool {pool.name!r}")
    for name, used in plan.gpus_by_pool().items():
        if used > pools[name].num_gpus:
            raise InputError("stages", f"plan uses {used} GPUs of pool {name!r} but it has {pools[name].num_gpus}")
