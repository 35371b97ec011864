"""Loading the packaged catalog (and a user's extra files) into the planner's SI types."""
from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from catalog.errors import located, relocated, short_repr
from catalog.files import read_mapping
from catalog.plain import validated
from planner.types import (GB, GIB, Gpu, InputError, MlpKind, Model, Network, NormKind,
                           PositionKind)

DATA_DIR = Path(__file__).resolve().parent
TFLOPS = 1e12


class FrozenDict(dict):
    """A dict that refuses changes (the built-in catalog is shared) yet pickles, for app caches."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("the catalog is read-only; add entries with load_catalog(extra_files=...)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


@dataclass(frozen=True)
class Catalog:
    gpus: Mapping[str, Gpu]
    models: Mapping[str, Model]
    networks: Mapping[str, Network]

    def gpu(self, gpu_id: str, field: str = "gpu") -> Gpu:
        return _lookup(self.gpus, gpu_id, field, "GPU")

    def model(self, model_id: str, field: str = "model") -> Model:
        return _lookup(self.models, model_id, field, "model")

    def network(self, network_id: str, field: str = "network") -> Network:
        return _lookup(self.networks, network_id, field, "network")


def _lookup(entries: Mapping, key, field: str, what: str):
    if isinstance(key, str) and key in entries:
        return entries[key]
    close = difflib.get_close_matches(str(key)[:100], list(entries), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else f"; known: {', '.join(sorted(entries))}"
    raise InputError(field, f"unknown {what} {short_repr(key)}{hint}")


# ----------------------------------------------------------------------------- entry -> planner type

def gpu_from_entry(gpu_id: str, e) -> Gpu:
    return Gpu(id=gpu_id, name=e.name, vendor=e.vendor,
               peak_flops=e.bf16_fp16_tflops * TFLOPS, peak_fp32_flops=e.fp32_tflops * TFLOPS,
               peak_tf32_flops=(e.tf32_tflops or 0) * TFLOPS, peak_fp8_flops=(e.fp8_tflops or 0) * TFLOPS,
               supports_bf16=e.bf16, mem_bytes=e.memory_gib * GIB, mem_bw_bytes_per_s=e.memory_bw_gb_s * GB,
               link_kind=e.link, link_bw_bytes_per_s=e.link_gb_s_per_direction * GB, pcie_gen=e.pcie_gen,
               power_w=e.power_w, price_per_hour_usd=e.price_per_gpu_hour, price_date=e.price_date,
               price_source=e.price_source, efficiency=e.efficiency, efficiency_note=e.efficiency_note,
               fp8_efficiency=e.fp8_efficiency or 0.0, attention_kernels_of=e.attention_kernels_of or "",
               source=e.source, nvlink_domain_gpus=e.nvlink_domain_gpus or 0)


def model_from_entry(model_id: str, e) -> Model:
    fields = e.model_dump(exclude={"id"})
    fields.update(id=model_id, name=fields["name"] or model_id, mlp=MlpKind(e.mlp),
                  norm=NormKind(e.norm), position=PositionKind(e.position))
    return Model(**fields)


def network_from_entry(network_id: str, e) -> Network:
    return Network(id=network_id, name=e.name, kind=e.kind, bw_bytes_per_s=e.bw_gb_s * GB,
                   latency_s=e.latency_us * 1e-6, source=e.source, transport=e.transport or "")


def _build(section: str, entries: Mapping[str, Any], make, source: str) -> dict:
    built = {}
    for key, entry in entries.items():
        try:
            built[key] = make(key, entry)
        except InputError as e:
            raise relocated(e, source, f"{section}[{key}]", f"{section}.{key}") from None
    return built


def _validated(schema: str, path: Path | str) -> tuple[Any, str]:
    """The file at `path` as catalog.schema's model `schema` (by name) holds it (catalog.plain)."""
    data, source = read_mapping(path)
    return validated(schema, data, source), source


# ----------------------------------------------------------------------------- public

@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The packaged GPUs, models and networks (loaded once per process)."""
    gpus, gsrc = _validated("GpusFile", DATA_DIR / "gpus.yaml")
    models, msrc = _validated("ModelsFile", DATA_DIR / "models.yaml")
    networks, nsrc = _validated("NetworksFile", DATA_DIR / "networks.yaml")
    return Catalog(gpus=FrozenDict(_build("gpus", gpus.gpus, gpu_from_entry, gsrc)),
                   models=FrozenDict(_build("models", models.models, model_from_entry, msrc)),
                   networks=FrozenDict(_build("networks", networks.networks, network_from_entry, nsrc)))


def load_catalog(extra_files: Iterable[str | Path] = ()) -> Catalog:
    """The built-in catalog plus the GPUs and models of each extra YAML file (top-level keys
    `gpus:` and/or `models:`, mapping id -> fields). An extra file may not redefine an id."""
    if isinstance(extra_files, (str, Path)):
        extra_files = [extra_files]
    base = builtin_catalog()
    gpus, models = dict(base.gpus), dict(base.models)
    for path in extra_files:
        extra, source = _validated("CatalogFile", path)
        _refuse_redefinitions("gpus", extra.gpus, gpus, source)
        _refuse_redefinitions("models", extra.models, models, source)
        gpus.update(_build("gpus", extra.gpus, gpu_from_entry, source))
        models.update(_build("models", extra.models, model_from_entry, source))
    if len(gpus) == len(base.gpus) and len(models) == len(base.models):
        return base
    return Catalog(gpus=FrozenDict(gpus), models=FrozenDict(models), networks=base.networks)


def _refuse_redefinitions(section: str, new: Mapping, existing: Mapping, source: str) -> None:
    for key in new:
        if key in existing:
            raise InputError(located(source, f"{section}.{key}"),
                             f"{key!r} is already in the catalog; give your entry another id, e.g. '{key}-custom'")
