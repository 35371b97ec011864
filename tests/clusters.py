"""Small clusters the tests share, built from the catalog."""
from __future__ import annotations

import random

from catalog import cluster_from_dict
from planner.types import Cluster


def h100_nodes(catalog, nodes: int = 2, gbps: float = 400) -> Cluster:
    """`nodes` nodes of 8 H100 SXM GPUs, joined at `gbps` Gb/s per node."""
    return cluster_from_dict({"name": "h", "pools": [{"name": "h100", "gpu": "h100-sxm", "nodes": nodes,
                                                      "gpus_per_node": 8, "inter_node_gbps": gbps}]}, catalog)


def random_cluster(rng: random.Random, catalog, gpus: list[str], nodes: tuple[int, ...],
                   gpus_per_node: tuple[int, ...], between_pools_gbps: float) -> Cluster:
    """One or two pools of `gpus` drawn by `rng`, of random node counts, widths and network speeds."""
    pools = [{"name": f"p{j}", "gpu": gpu, "nodes": rng.choice(nodes), "gpus_per_node": rng.choice(gpus_per_node),
              "inter_node_gbps": rng.choice((25, 100, 400))}
             for j, gpu in enumerate(rng.sample(gpus, rng.choice((1, 2))))]
    return cluster_from_dict({"name": "random", "pools": pools, "between_pools_gbps": between_pools_gbps}, catalog)
