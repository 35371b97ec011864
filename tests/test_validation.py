"""The cost model against published measurements (benchmarks/reference/, citations in each file).

Tolerances: every throughput/iteration row within 10% and every memory row within 10%
(activations, whose formula is Korthikanti's own, within 1%); on Korthikanti et al. 2022
Table 5 the mean error must match or beat calculon's published 3.7% (worst 8.9%).
"""
from __future__ import annotations

import statistics

import pytest

from benchmarks import validation
from tests.conftest import ROOT


@pytest.fixture(scope="module")
def rows(catalog):
    return validation.all_rows(catalog.gpus["a100-80gb-sxm"])


def by(rows, dataset, quantity=None):
    return [r for r in rows if r.dataset.startswith(dataset) and (quantity is None or r.quantity == quantity)]


def test_every_reference_row_is_compared(rows):
    assert len(by(rows, "Narayanan 2021")) == 10
    assert len(by(rows, "Korthikanti 2022 Table 5")) == 8
    assert len(by(rows, "Korthikanti 2022 Figure 1")) == 16


def test_megatron_weak_scaling_throughput_within_10_percent(rows):
    # Narayanan et al. 2021 (SC21) Table 1: TFLOP/s per A100, 32 to 3,072 GPUs
    errors = {r.case: r.error for r in by(rows, "Narayanan 2021")}
    assert all(abs(e) <= 0.10 for e in errors.values()), errors
    assert statistics.median(abs(e) for e in errors.values()) <= 0.10


def test_korthikanti_iteration_times_beat_calculon(rows):
    # Korthikanti et al. 2022 Table 5; calculon (Isaev et al. SC23) reports 3.7% mean, 8.9% worst
    errors = [abs(r.error) for r in by(rows, "Korthikanti 2022 Table 5")]
    assert statistics.mean(errors) <= 0.037, errors
    assert max(errors) <= 0.089, errors


def test_korthikanti_memory(rows):
    # Korthikanti et al. 2022 Figure 1. The figure counts only the 12h^2 weights per layer; the model
    # also counts the first stage's embedding (1-9% more), hence 10% on model states.
    states = by(rows, "Korthikanti 2022 Figure 1", "weights+optimizer GiB")
    acts = by(rows, "Korthikanti 2022 Figure 1", "activations GiB")
    assert all(abs(r.error) <= 0.10 for r in states), [(r.case, r.error) for r in states]
    assert all(abs(r.error) <= 0.01 for r in acts), [(r.case, r.error) for r in acts]
    assert statistics.median(abs(r.error) for r in states + acts) <= 0.10


def test_docs_validation_is_the_scripts_output(rows):
    # docs/validation.md must be exactly what `python benchmarks/validation.py` writes
    assert (ROOT / "docs" / "validation.md").read_text() == validation.markdown(rows)
