"""planner.search.score's caches: what one scorer shares with another gives each exactly its own figures."""
from __future__ import annotations

from dataclasses import replace

import pytest

from catalog import load_catalog, load_cluster_file
from planner.engines import REAL
from planner.search import score
from planner.search.score import Scorer
from planner.types import Job, Precision, Recompute
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


@pytest.mark.parametrize("precision", [None, Precision.FP32])
def test_engines_share_pass_times_only_where_their_passes_are_the_same(catalog, precision):
    """The scorers of several engines share one dict of pass times (score._shared_pass_times) where the
    engines run a pass alike; each reads there exactly what it computes alone, for 16-bit jobs (where TF32
    is not read, so engines that differ only in their TF32 default share) and fp32 ones (where it is)."""
    cluster = load_cluster_file(EXAMPLES / "a100-v100-16.yaml", catalog)
    job = Job(catalog.model("llama-2-7b"), 64, 4096, precision=precision)
    asked = [(pool, tp, mb, rc, sp) for pool in cluster.pools for tp in (1, 2, 4) for mb in (1, 2)
             for rc in Recompute for sp in (False, True)]
    alone = {}
    for name in REAL:
        score._shared_pass_times.cache_clear()
        scorer = Scorer(cluster, replace(job, engine=name))
        alone[name] = [scorer.pass_times(*a) for a in asked]
    score._shared_pass_times.cache_clear()
    scorers = {name: Scorer(cluster, replace(job, engine=name)) for name in REAL}
    for name, scorer in scorers.items():      # each through what the engines before it left in the shared dict
        assert [scorer.pass_times(*a) for a in asked] == alone[name], name
    assert len({id(s._pass) for s in scorers.values()}) < len(scorers)     # some do share
    differ = {name for name in REAL if alone[name] != alone[REAL[0]]}
    assert differ, "the engines' passes all alike: the test would not see a wrong share"
    assert all(scorers[name]._pass is not scorers[REAL[0]]._pass for name in differ)
