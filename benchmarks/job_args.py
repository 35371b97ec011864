"""The job a benchmark reads from its command line: CLUSTER MODEL GLOBAL_BATCH SEQ_LEN, as `hetplan plan`
takes them (a cluster file, a catalog model, sequences per iteration, tokens per sequence)."""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from catalog import cluster_from_dict, load_cluster_file
from planner.types import Job


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The four positional arguments of a benchmark's job."""
    parser.add_argument("cluster")
    parser.add_argument("model")
    parser.add_argument("global_batch", type=int)
    parser.add_argument("seq_len", type=int)


def job_of(args: argparse.Namespace, catalog) -> Job:
    """The pretraining job those arguments name."""
    return Job(catalog.model(args.model), args.global_batch, args.seq_len)


def add_replay_arguments(parser: argparse.ArgumentParser, repeat: int) -> None:
    """The job options of a replay benchmark (bound_replay, screen_replay): a cluster file (default: the
    128-GPU cluster of search_benchmark's command table), a model, the batch and sequence length, and
    how many replays."""
    parser.add_argument("--cluster", default=None, help="cluster file; default: the 128-GPU cluster of the command table")
    parser.add_argument("--model", default="llama-2-70b")
    parser.add_argument("--global-batch", type=int, default=512)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=repeat)


def replay_job(args: argparse.Namespace, catalog, default_cluster_yaml: str):
    """(cluster, job) of add_replay_arguments' options; `default_cluster_yaml` where no --cluster is given."""
    cluster = (cluster_from_dict(yaml.safe_load(default_cluster_yaml), catalog) if args.cluster is None
               else load_cluster_file(args.cluster, catalog))
    return cluster, Job(catalog.model(args.model), args.global_batch, args.seq_len)


def keep_or_compare_answers(args: argparse.Namespace, lines: list[str], what: str) -> None:
    """A replay's answers (one line each): written to --answers-out, and compared line by line with
    --answers-in (another checkout's), where given; prints how many of the `what` calls differ."""
    if args.answers_out:
        Path(args.answers_out).write_text("\n".join(lines) + "\n")
    if args.answers_in:
        before = Path(args.answers_in).read_text().splitlines()
        differ = sum(a != b for a, b in zip(before, lines)) + abs(len(before) - len(lines))
        print(f"{what} answers against {args.answers_in}: {len(lines)} calls, {differ} differ")
