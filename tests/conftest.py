"""Shared fixtures: the built-in catalog and small hand-made objects; Hypothesis profiles."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def catalog():
    from catalog import load_catalog
    return load_catalog()


# Hypothesis profiles (docs/reliability.md). "ci", the default, is deterministic: the same
# examples on every run and machine, no example database. "fuzz-long" draws fresh random
# examples, FUZZ_LONG_SCALE times as many: HYPOTHESIS_PROFILE=fuzz-long python -m pytest tests/test_fuzz.py
FUZZ_LONG_SCALE = 20
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("fuzz-long", derandomize=False, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
settings.load_profile(PROFILE)


def examples(n: int) -> int:
    """`n` examples under the ci profile; more under fuzz-long."""
    return n * FUZZ_LONG_SCALE if PROFILE == "fuzz-long" else n
