"""Fit the per-GPU `efficiency` factor of the cost model to measured pass times.

For a fixed GPU, the cost model's compute time of one micro-batch through a stage is
    t(e) = A / e + B
where e is the GPU's efficiency (fraction of peak its large GEMMs reach; planner.compute divides
matmul time by it) and B the element-wise, memory-bound part that e does not touch. A and B come
from two evaluations of `stage_pass_times`. With x = 1 / e, least squares over a GPU's records
    min_x sum_k (A_k x + B_k - m_k)^2   gives   x = sum_k A_k (m_k - B_k) / sum_k A_k^2
where m_k is the measured compute time (forward + backward - tensor- and context-parallel
communication). Each record is costed as the job it ran: its kind (a LoRA or QLoRA pass has no
weight gradients but adapter and dequantisation work, planner.training) and its context-parallel
degree (each process holds 1/cp of every sequence; the ring's exchange is measured apart, cp_comm_s,
and left out of both sides).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from planner.compute import StagePass, stage_pass_times
from planner.types import (MAX_CONTEXT_PARALLEL, MAX_GLOBAL_BATCH, MAX_LORA_RANK, MAX_SEQ_LEN, PRETRAIN, Gpu,
                           InputError, JobKind, MlpKind, Model, NormKind, PositionKind, Recompute, Training)

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
    where: str = "measurements"  # the record, for messages
    training: Training = PRETRAIN
    context_parallel: int = 1


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
    times = stage_pass_times(StagePass(
        model=m.model, gpu=gpu, num_layers=m.layers, has_head=m.has_head, seq_len=m.seq_len,
        micro_batch=m.micro_batch, tp=m.tp, sequence_parallel=m.sequence_parallel, recompute=m.recompute,
        flash_attention=m.flash_attention, link_bw=gpu.link_bw_bytes_per_s, training=m.training,
        cp=m.context_parallel))
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
        if not m.measured_s > 0:
            raise InputError(f"{m.where}.forward_s", f"forward_s + backward_s - tp_comm_s must be positive, "
                                                    f"got {m.measured_s:g} s")
        by_gpu.setdefault(m.gpu, []).append(m)
    fits = []
    for gpu_id, rows in sorted(by_gpu.items()):
        if gpu_id not in gpus:
            raise InputError(f"{rows[0].where}.gpu", f"{gpu_id!r} is not in the catalog; add it with --catalog")
        gpu = gpus[gpu_id]
        parts = [_split(m, gpu) for m in rows]
        scale = sum(a * a for a, _ in parts)
        if not scale > 0:
            raise InputError(f"{rows[0].where}.gpu", f"the cost model's times for {gpu_id} do not depend on its "
                                                     f"efficiency; nothing to fit")
        x = sum(a * (m.measured_s - b) for (a, b), m in zip(parts, rows)) / scale
        e = 1 / x if x > 0 else 1.0
        clamped = not MIN_EFFICIENCY <= e <= 1.0
        e = min(1.0, max(MIN_EFFICIENCY, e))
        after = replace(gpu, efficiency=e)
        fits.append(GpuFit(gpu_id, gpu.efficiency, e,
                           tuple(Row(m, predicted_compute_s(m, gpu), predicted_compute_s(m, after)) for m in rows),
                           clamped))
    return fits


MAX_TP = 64                    # the catalog's GPUs per node
MAX_MEASURED_S = 1e6           # seconds for one pass: far beyond any real measurement, far from overflow


def measurements_from_dict(data: dict, model_by_id, source: str = "measurements") -> list[Measurement]:
    """Records of a hetplan.measurements/1 document. `model` is a catalog id (looked up with
    `model_by_id`) or an object with the model's fields; each record may override seq_len,
    micro_batch, recompute and the others per row. Every value is checked for its type and range;
    an error names the record and the field."""
    if not isinstance(data, dict) or data.get("format") != "hetplan.measurements/1":
        raise InputError(source, "is not a measurement file (expected \"format\": \"hetplan.measurements/1\")")
    records = data.get("records")
    if not isinstance(records, list) or not records:
        raise InputError(f"{source}: records", "must be a non-empty list")
    out = []
    for k, rec in enumerate(records):
        at = f"{source}: records[{k}]"
        if not isinstance(rec, dict):
            raise InputError(at, f"must be an object of fields, got {type(rec).__name__}")
        out.append(_measurement({**data, **rec}, model_by_id, at))
    return out


def _measurement(row: dict, model_by_id, at: str) -> Measurement:
    fields = _Fields(row, at)
    value = fields.get("model")
    try:
        model = model_by_id(value) if isinstance(value, str) else _model_of(value)
    except InputError as e:
        if isinstance(value, str):
            raise                     # model_by_id names the field itself
        raise InputError(f"{at}.model" + (f".{e.field}" if e.field else ""), e.message) from None
    except (TypeError, ValueError) as e:
        raise InputError(f"{at}.model", str(e)) from None
    forward, backward = fields.seconds("forward_s"), fields.seconds("backward_s")
    comm = fields.seconds("tp_comm_s", 0.0) + fields.seconds("cp_comm_s", 0.0)
    measured = forward + backward - comm            # fit_efficiency refuses one that is not positive
    recompute = fields.get("recompute", "none")
    if recompute not in [r.value for r in Recompute]:
        raise InputError(f"{at}.recompute", f"must be one of {[r.value for r in Recompute]}, got {_short(recompute)}")
    gpu = fields.get("gpu")
    if not isinstance(gpu, str):
        raise InputError(f"{at}.gpu", f"must be a catalog GPU id, got {_short(gpu)}")
    kind = fields.get("job", JobKind.PRETRAIN.value)
    if kind not in [k.value for k in JobKind]:
        raise InputError(f"{at}.job", f"must be one of {[k.value for k in JobKind]}, got {_short(kind)}")
    rank = fields.get("lora_rank", None)
    training = Training(JobKind(kind), 16 if rank is None else fields.whole("lora_rank", high=MAX_LORA_RANK))
    cp = fields.whole("cp", fields.whole("context_parallel", 1, high=MAX_CONTEXT_PARALLEL), high=MAX_CONTEXT_PARALLEL)
    return Measurement(gpu=gpu, model=model, seq_len=fields.whole("seq_len", high=MAX_SEQ_LEN),
                       micro_batch=fields.whole("micro_batch", high=MAX_GLOBAL_BATCH),
                       tp=fields.whole("tp", 1, high=MAX_TP), layers=fields.whole("layers", high=model.layers),
                       has_head=fields.flag("has_head", False), recompute=Recompute(recompute),
                       sequence_parallel=fields.flag("sequence_parallel", False),
                       flash_attention=fields.flag("flash_attention", True), measured_s=measured, where=at,
                       training=training, context_parallel=cp)


_MISSING = object()


class _Fields:
    """A record's values, each read as the type it must have (no text for numbers, no 1 for true)."""

    def __init__(self, row: dict, at: str):
        self.row, self.at = row, at

    def get(self, key: str, default=_MISSING):
        value = self.row.get(key, default)
        if value is _MISSING:
            raise InputError(self.at, f"is missing {key!r}")
        return value

    def whole(self, key: str, default=_MISSING, high: int = 10**9) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{self.at}.{key}", f"must be a whole number, got {_short(value)}")
        if not 1 <= value <= high:
            raise InputError(f"{self.at}.{key}", f"must be from 1 to {high:,}, got {_short(value)}")
        return value

    def seconds(self, key: str, default=_MISSING) -> float:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{self.at}.{key}", f"must be a number of seconds, got {_short(value)}")
        if not 0 <= value <= MAX_MEASURED_S:
            raise InputError(f"{self.at}.{key}", f"must be from 0 to {MAX_MEASURED_S:g} seconds, got {_short(value)}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise InputError(f"{self.at}.{key}", f"must be true or false, got {_short(value)}")
        return value


def _short(value, limit: int = 60) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else f"a number of over {limit} digits"
    return text if len(text) <= limit else text[:limit] + "..."


def _model_of(value) -> Model:
    """A model written into the measurement file (as `hetplan run-local` does for its small model)."""
    fields = {k: v for k, v in dict(value).items() if k in Model.__dataclass_fields__}
    fields.setdefault("name", fields.get("id", "measured"))
    for key, enum in (("mlp", MlpKind), ("norm", NormKind), ("position", PositionKind)):
        if key in fields:
            # the runner writes "none" for a model without position parameters, as ALiBi has
            fields[key] = enum(fields[key]) if fields[key] != "none" else PositionKind.ALIBI
    return Model(**fields)
