"""Calibration recovers a known efficiency from times the cost model itself would predict."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from planner.calibrate import fit_efficiency, measurements_from_dict, predicted_compute_s
from planner.cli import main


def _document(catalog, efficiency: float) -> dict:
    gpu = replace(catalog.gpu("a100-80gb-sxm"), efficiency=efficiency)
    model = catalog.model("llama-2-7b")
    records = []
    for layers, tp, has_head in ((8, 1, False), (16, 2, True), (4, 4, False)):
        doc = {"format": "hetplan.measurements/1", "model": "llama-2-7b", "seq_len": 4096, "micro_batch": 1,
               "gpu": "a100-80gb-sxm", "layers": layers, "tp": tp, "has_head": has_head, "forward_s": 0.0,
               "backward_s": 0.0, "tp_comm_s": 0.0}
        m = measurements_from_dict({**doc, "records": [{}]}, lambda _: model)[0]
        t = predicted_compute_s(m, gpu)
        records.append({"layers": layers, "tp": tp, "has_head": has_head, "forward_s": t / 3, "backward_s": 2 * t / 3})
    return {"format": "hetplan.measurements/1", "device": "cuda", "model": "llama-2-7b", "seq_len": 4096,
            "micro_batch": 1, "gpu": "a100-80gb-sxm", "records": records}


def test_fit_recovers_the_efficiency_that_produced_the_times(catalog):
    doc = _document(catalog, 0.55)
    fits = fit_efficiency(measurements_from_dict(doc, catalog.model), dict(catalog.gpus))
    assert len(fits) == 1
    assert fits[0].efficiency_after == pytest.approx(0.55, rel=1e-9)
    assert fits[0].mean_abs_error_after < 1e-9 < fits[0].mean_abs_error_before


def test_calibrate_command_writes_an_overlay_the_catalog_accepts(catalog, tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_document(catalog, 0.5)))
    out = tmp_path / "overlay.yaml"
    assert main(["calibrate", "--measurements", str(path), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "a100-80gb-sxm: efficiency 0.869 -> 0.5000" in text
    from catalog import load_catalog
    assert load_catalog([out]).gpu("a100-80gb-sxm-calibrated").efficiency == pytest.approx(0.5, abs=1e-6)


def test_bad_measurement_file_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "hetplan.measurements/1", "records": [{"gpu": "a100-80gb-sxm"}]}))
    assert main(["calibrate", "--measurements", str(path)]) == 2
    assert "missing" in capsys.readouterr().err


@pytest.mark.parametrize("extra", [{"job": "lora", "lora_rank": 8}, {"job": "qlora"}, {"context_parallel": 4},
                                   {"job": "lora", "context_parallel": 2, "cp_comm_s": 0.01}])
def test_each_record_is_costed_as_the_job_it_ran(catalog, extra):
    """Times that the cost model gives a LoRA, QLoRA or context-parallel pass (with the ring's
    exchange measured apart) calibrate back to the efficiency that produced them; costed as
    pretraining on whole sequences they would not."""
    gpu = replace(catalog.gpu("a100-80gb-sxm"), efficiency=0.6)
    model = catalog.model("llama-2-7b")
    base = {"format": "hetplan.measurements/1", "model": "llama-2-7b", "seq_len": 4096, "micro_batch": 1,
            "gpu": "a100-80gb-sxm", "layers": 8, "tp": 1, "forward_s": 0.0, "backward_s": 0.0}
    m = measurements_from_dict({**base, **extra, "records": [{}]}, lambda _: model)[0]
    assert m.training.kind.value == extra.get("job", "pretrain") and m.context_parallel == extra.get("context_parallel", 1)
    t = predicted_compute_s(m, gpu)
    plain = predicted_compute_s(replace(m, training=type(m.training)(), context_parallel=1), gpu)
    assert abs(t - plain) > 0.05 * plain
    comm = extra.get("cp_comm_s", 0.0)
    doc = {**base, **extra, "records": [{"forward_s": t / 3 + comm / 2, "backward_s": 2 * t / 3 + comm / 2}]}
    fits = fit_efficiency(measurements_from_dict(doc, lambda _: model), dict(catalog.gpus))
    assert fits[0].efficiency_after == pytest.approx(0.6, rel=1e-9)


@pytest.mark.parametrize("extra, field", [({"job": "pretraining"}, "job"), ({"context_parallel": 0}, "context_parallel"),
                                          ({"job": "lora", "lora_rank": "8"}, "lora_rank")])
def test_bad_job_fields_in_measurements_name_the_field(catalog, extra, field):
    from planner.types import InputError
    base = {"format": "hetplan.measurements/1", "model": "llama-2-7b", "seq_len": 4096, "micro_batch": 1,
            "gpu": "a100-80gb-sxm", "layers": 8, "tp": 1, "forward_s": 1.0, "backward_s": 2.0}
    with pytest.raises(InputError) as e:
        measurements_from_dict({**base, **extra, "records": [{}]}, catalog.model)
    assert e.value.field.endswith(field)
