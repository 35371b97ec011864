"""A digest of everything a best-engine search answers, to compare two checkouts' answers.

    python benchmarks/search_digest.py CLUSTER MODEL GLOBAL_BATCH SEQ_LEN [--out FILE]

`search(..., engines=planner.engines.REAL)` as `hetplan plan` runs it (baselines included, no time limit, so
that the answer does not depend on the machine's speed): every shown plan and its estimate, explanation and
gains, the Pareto front, the baselines and their status, the notes, idle reasons, completeness, gap, guarantee,
fast-score count, and each engine's own answer. Prints the tokens/s of plan #1 and a digest; `--out` writes the
text the digest is taken of, for a diff.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from catalog import load_catalog, load_cluster_file  # noqa: E402
from planner.engines import REAL  # noqa: E402
from planner.search import SearchOptions, search  # noqa: E402
from benchmarks.job_args import add_job_arguments, job_of  # noqa: E402


def _scored(sp) -> tuple | None:
    return None if sp is None else (repr(sp.plan), repr(sp.estimate), sp.explanation, sorted(sp.gain_over.items()))


def _answer(r) -> list:
    return [[_scored(p) for p in r.plans], [_scored(p) for p in r.pareto], r.notes, r.idle, r.complete, r.gap,
            r.stopped_by, r.guarantee, r.candidates_evaluated]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_job_arguments(parser)
    parser.add_argument("--out")
    args = parser.parse_args()
    catalog = load_catalog()
    cluster = load_cluster_file(args.cluster, catalog)
    job = job_of(args, catalog)
    options = SearchOptions(time_limit_s=None, baseline_time_limit_s=None)
    r = search(cluster, job, options=options, engines=REAL)
    lines = [repr(_answer(r)), repr(sorted((k, _scored(v)) for k, v in r.baselines.items())),
             repr(sorted(r.baseline_status.items()))]
    lines += [f"{name}: " + (e if isinstance(e, str) else repr(_answer(e))) for name, e in r.by_engine.items()]
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(f"{r.plans[0].estimate.tokens_per_s:,.0f} tokens/s, {'complete' if r.complete else f'gap {r.gap}'}, "
          f"digest {hashlib.sha256(text.encode()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
