"""GPU, model and network data, and the cluster and plan file formats.

`catalog` turns data files into the planner's types (`planner.types`), converting the human
units of the files (TFLOP/s, GiB, GB/s, Gb/s) to SI once, here. It never imports the app.
"""
from catalog.formats import (check_plan_against_cluster, cluster_from_dict, cluster_to_dict,
                             cluster_to_yaml, load_cluster_file, load_plan_file, plan_from_dict,
                             plan_from_file_data, plan_to_dict, plan_to_json, without_output_keys)
from catalog.loader import Catalog, builtin_catalog, load_catalog

__all__ = [
    "Catalog", "load_catalog", "builtin_catalog",
    "cluster_from_dict", "cluster_to_dict", "cluster_to_yaml", "load_cluster_file",
    "plan_from_dict", "plan_from_file_data", "plan_to_dict", "plan_to_json", "load_plan_file",
    "without_output_keys", "check_plan_against_cluster",
]
