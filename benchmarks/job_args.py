"""The job a benchmark reads from its command line: CLUSTER MODEL GLOBAL_BATCH SEQ_LEN, as `hetplan plan`
takes them (a cluster file, a catalog model, sequences per iteration, tokens per sequence)."""
from __future__ import annotations

import argparse

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
