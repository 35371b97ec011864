"""Fit the per-GPU `efficiency` factor of the cost model to measured pass times.

For a fixed GPU, the cost model's compute time of one micro-batch through a stage is
    t(e) = A / e + B
where e is the GPU's efficiency (fraction of peak its large GEMMs reach; planner.compute divides
matmul time by it) and B the element-wise, memory-bound part that e does not touch. A and B come
from two evaluations of `stage_pass_times`. With x = 1 / e, least squares over a GPU's records
    min_x sum_k (A_k x + B_k - m_k)^2   gives   x = sum_k A_k (m_k - B_k) / sum_k A_k^2
where m_k is the measured compute time (forward + backward - tensor-parallel communication).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from planner.compute import stage_pass_times
from planner.types import Gpu, InputError, Model, Recompute

MIN_EFFICIENCY = 0.01          # the catalog schema's lower bound


@dataclass(frozen=True)
class Measurement:
    gpu: str                   # catalog GPU id
    model: Model
    seq_len: int
    micro_batch: int
    tp: int
    layers: int
    has_head: bool
    recompute: Recompute
    sequence_parallel: bool
    flash_attention: bool
    measured_s: float          # compute time of one micro-batch, forward + backward


@dataclass(frozen=True)
class Row:
    measurement: Measurement
    predicted_before_s: float
    predicted_after_s: float


@dataclass(frozen=True)
class GpuFit:
    gpu: str
    efficiency_before: float
    efficiency_after: float
    rows: tuple[Row, ...]
    clamped: bool              # the fit left (0, 1] and was clipped

    @property
    def mean_abs_error_before(self) -> float:
        return _mean_rel_error([(r.predicted_before_s, r.measurement.measured_s) for r in self.rows])

    @property
    def mean_abs_error_after(self) -> float:
        return _mean_rel_error([(r.predicted_after_s, r.measurement.measured_s) for r in self.rows])


def _mean_rel_error(pairs) -> float:
    return sum(abs(p - m) / m for p, m in pairs) / len(pairs)


def predicted_compute_s(m: Measurement, gpu: Gpu) -> float:
    times = stage_pass_times(m.model, gpu, m.layers, m.has_head, m.seq_len, m.micro_batch, m.tp,
                             m.sequence_parallel, m.recompute, m.flash_attention, gpu.link_bw_bytes_per_s)
    return times.compute_s


def _split(m: Measurement, gpu: Gpu) -> tuple[float, float]:
    """(A, B) of t(e) = A / e + B for this record."""
    e1, e2 = gpu.efficiency, gpu.efficiency / 2
    t1 = predicted_compute_s(m, replace(gpu, efficiency=e1))
    t2 = predicted_compute_s(m, replace(gpu, efficiency=e2))
    a = (t2 - t1) / (1 / e2 - 1 / e1)
    return a, t1 - a / e1


def fit_efficiency(measurements: list[Measurement], gpus: dict[str, Gpu]) -> list[GpuFit]:
    by_gpu: dict[str, list[Measurement]] = {}
    for m in measurements:
        if m.measured_s <= 0:
            raise InputError("measurements", f"a record for {m.gpu} has non-positive compute time {m.measured_s}")
        by_gpu.setdefault(m.gpu, []).append(m)
    fits = []
    for gpu_id, rows in sorted(by_gpu.items()):
        if gpu_id not in gpus:
            raise InputError("measurements", f"GPU {gpu_id!r} is not in the catalog; add it with --catalog")
        gpu = gpus[gpu_id]
        parts = [_split(m, gpu) for m in rows]
        x = sum(a * (m.measured_s - b) for (a, b), m in zip(parts, rows)) / sum(a * a for a, _ in parts)
        e = 1 / x if x > 0 else 1.0
        clamped = not MIN_EFFICIENCY <= e <= 1.0
        e = min(1.0, max(MIN_EFFICIENCY, e))
        after = replace(gpu, efficiency=e)
        fits.append(GpuFit(gpu_id, gpu.efficiency, e,
                           tuple(Row(m, predicted_compute_s(m, gpu), predicted_compute_s(m, after)) for m in rows),
                           clamped))
    return fits


def measurements_from_dict(data: dict, model_by_id, source: str = "measurements") -> list[Measurement]:
    """Records of a hetplan.measurements/1 document. `model` is a catalog id (looked up with
    `model_by_id`) or an object with the model's fields; each record may override seq_len,
    micro_batch, recompute and the others per row."""
    if not isinstance(data, dict) or data.get("format") != "hetplan.measurements/1":
        raise InputError(source, "is not a measurement file (expected \"format\": \"hetplan.measurements/1\")")
    records = data.get("records")
    if not isinstance(records, list) or not records:
        raise InputError(f"{source}: records", "must be a non-empty list")
    out = []
    for k, rec in enumerate(records):
        at = f"{source}: records[{k}]"
        row = {**data, **rec}
        try:
            model = _model_of(row["model"], model_by_id)
            measured = float(row["forward_s"]) + float(row["backward_s"]) - float(row.get("tp_comm_s", 0.0))
            out.append(Measurement(gpu=str(row["gpu"]), model=model, seq_len=int(row["seq_len"]),
                                   micro_batch=int(row["micro_batch"]), tp=int(row.get("tp", 1)),
                                   layers=int(row["layers"]), has_head=bool(row.get("has_head", False)),
                                   recompute=Recompute(row.get("recompute", "none")),
                                   sequence_parallel=bool(row.get("sequence_parallel", False)),
                                   flash_attention=bool(row.get("flash_attention", True)), measured_s=measured))
        except KeyError as e:
            raise InputError(at, f"is missing {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            raise InputError(at, str(e)) from None
    return out


def _model_of(value, model_by_id) -> Model:
    if isinstance(value, str):
        return model_by_id(value)
    fields = {k: v for k, v in dict(value).items() if k in Model.__dataclass_fields__}
    fields.setdefault("name", fields.get("id", "measured"))
    from planner.types import MlpKind, NormKind, PositionKind
    for key, enum in (("mlp", MlpKind), ("norm", NormKind), ("position", PositionKind)):
        if key in fields:
            # the runner writes "none" for a model without position parameters, as ALiBi has
            fields[key] = enum(fields[key]) if fields[key] != "none" else PositionKind.ALIBI
    return Model(**fields)
