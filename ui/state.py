"""The app's whole input state, and its encoding in the URL.

A link carries `v` (the encoding version) and `s`: base64url of zlib-compressed JSON of
`AppState`. Hand-written links may instead use readable parameters (`preset`, `model`,
`batch`, `seq`, `objective`, `engine`, `job_kind`, `lora_rank`, `offload`, `context_parallel`,
`expert_parallel`); `s` wins when both are present. A bad, foreign or oversized link never raises: `decode` returns the
defaults and a warning a person can read.
"""
from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
import math
import re
import zlib
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

import yaml
from pydantic import ValidationError

from catalog.errors import from_validation_error
from catalog.files import check_document_size
from catalog.schema import InlineModelEntry
from planner.engines import AUTO, best_of
from planner.engines import DEFAULT as DEFAULT_ENGINE
from planner.engines import ENGINES
from planner.types import (MAX_CONTEXT_PARALLEL, MAX_GLOBAL_BATCH, MAX_LORA_RANK, MAX_SEQ_LEN, InputError, JobKind,
                           Offload)

VERSION = "1"
MAX_PARAM_CHARS = 12_000            # browsers and proxies keep URLs of ~16 kB; leave room
MAX_JSON_BYTES = 200_000            # decompressed; guards against zip bombs
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"
DEFAULT_PRESET = "h100-a100-v100-64"
OBJECTIVES = ("throughput", "cost", "deadline", "energy")
DEFAULT_TIME_LIMIT_S = 20.0         # planner.search.SearchOptions().time_limit_s; a test holds them equal
MAX_TIME_LIMIT_S = 600.0            # one session cannot keep the server's CPU for longer than this a search
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "fp8")
PRECISION_HELP = {
    "auto": "bf16 where every GPU a plan uses supports it, else fp16",
    "fp32": "32-bit training; matmuls on TF32 tensor cores where TF32 is on (the engine's default unless you set it)",
    "bf16": "bf16 weights and matmuls, fp32 master weights and optimizer states",
    "fp16": "fp16 with loss scaling, fp32 master weights and optimizer states",
    "fp8": "FP8 linear-layer GEMMs on GPUs that have FP8 (Hopper, Blackwell, MI300-class), the rest in bf16, under an "
           "engine that runs it (Megatron-LM, torchtitan); MFU stays against the 16-bit peak",
}
TF32_CHOICES = (None, True, False)     # the engine's default, on, off
JOB_KINDS = tuple(k.value for k in JobKind)                        # pretrain, full-finetune, lora, qlora
JOB_KIND_LABELS = {"pretrain": "pretrain", "full-finetune": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}
JOB_KIND_HELP = {
    "pretrain": "every weight trained from scratch; GPUs hold 16-bit weights, fp32 gradients, master weights and "
                "Adam states (18 bytes a parameter before sharding)",
    "full-finetune": "every weight trained from a checkpoint: the same memory and time as pretraining",
    "lora": "the base weights frozen in 16 bits; only low-rank adapters (of the rank below) are trained, so "
            "gradients and optimizer states are the adapters' alone (Hu et al. 2021)",
    "qlora": "the base weights frozen and stored in 4-bit NF4 (about 0.5 bytes a parameter), adapters trained in "
             "16 bits (Dettmers et al. 2023)",
}
OFFLOADS = ("auto",) + tuple(o.value for o in Offload)               # auto, none, optimizer, optimizer+params
OFFLOAD_HELP = {
    "auto": "no offload, unless GPU memory limits the plan and the engine offloads: then each offload it runs is "
            "searched too and the best answer wins",
    "none": "every model state in GPU memory",
    "optimizer": "fp32 master weights, Adam states and fp32 gradients in the node's CPU memory, updated by the CPU "
                 "(ZeRO-Offload; needs ZeRO 1 or more)",
    "optimizer+params": "the optimizer and the 16-bit weights in CPU memory, weights streamed in per layer "
                        "(ZeRO-Infinity style; needs ZeRO 3)",
}
CONTEXT_PARALLEL_AUTO = "auto"
EXPERT_PARALLEL_AUTO = "auto"
MAX_EXPERT_PARALLEL = 100_000       # catalog.schema: a plan's expert_parallel, as many as a model's experts
_DEGREE = re.compile(r"[1-9][0-9]{0,5}")     # ASCII digits, no sign, no leading zero, no spaces

# What Compose offers: the best of the real engines (AUTO, the default: each plan tagged with its own) or one
ENGINE_CHOICES = {AUTO: best_of(), **ENGINES}


def _degree(setting: str, most: int) -> int | None:
    """A whole number from 1 to `most` written plainly ("8" -> 8); None for anything else."""
    if not isinstance(setting, str) or not _DEGREE.fullmatch(setting):
        return None
    degree = int(setting)
    return degree if degree <= most else None


def context_parallel_degree(setting: str) -> int | None:
    """The fixed context-parallel degree of a setting ("8" -> 8); None for "auto" or a value that is not
    a whole number from 1 to MAX_CONTEXT_PARALLEL written plainly."""
    return _degree(setting, MAX_CONTEXT_PARALLEL)


def expert_parallel_degree(setting: str) -> int | None:
    """The fixed expert-parallel degree of a setting ("4" -> 4); None for "auto" or a value that is not
    a whole number from 1 to MAX_EXPERT_PARALLEL written plainly."""
    return _degree(setting, MAX_EXPERT_PARALLEL)


@functools.lru_cache(maxsize=1)
def _read_presets() -> dict[str, dict]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted(EXAMPLES_DIR.glob("*.yaml"))}


def presets() -> dict[str, dict]:
    """The example clusters (cluster file format), by file stem; read once, copied per call."""
    return copy.deepcopy(_read_presets())


def _short(value: Any, limit: int = 60) -> str:
    """repr of a user's value, cut so that a warning stays one readable line."""
    if isinstance(value, int) and abs(value) >= 10 ** limit:
        return f"a number of more than {limit} digits"
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class AppState:
    """Everything a user chose: cluster (file format), model (catalog id or inline fields),
    job, and the plan on view (plan file format) if any."""
    cluster: dict = field(default_factory=lambda: presets()[DEFAULT_PRESET])
    model: str | dict = "llama-2-13b"
    global_batch: int = 512
    seq_len: int = 4096
    precision: str = "auto"
    tokens_to_train: float | None = 300e9
    objective: str = "throughput"
    deadline_hours: float | None = None
    time_limit_s: float = DEFAULT_TIME_LIMIT_S      # CPU seconds of the search (SearchOptions.time_limit_s)
    plan: dict | None = None
    engine: str = AUTO              # the engine the search plans for (ENGINE_CHOICES); a link without it: the best
    tf32: bool | None = None        # fp32 only: TF32 matmuls on or off; None: the engine's default
    job_kind: str = JobKind.PRETRAIN.value   # planner.types.JobKind; a link without it: pretraining
    lora_rank: int = 16             # adapter rank, for lora and qlora
    offload: str = "auto"           # "auto" (the search tries offload where memory limits) or a fixed Offload
    # "auto" (the search tries each degree that suits the sequence) or a fixed degree as text ("1", "8");
    # a link without it: auto
    context_parallel: str = CONTEXT_PARALLEL_AUTO
    # "auto" (the search tries each degree the engine runs for a mixture-of-experts model) or a fixed
    # degree as text ("1", "4"); a link without it: auto
    expert_parallel: str = EXPERT_PARALLEL_AUTO

    def job_key(self) -> str:
        """What the planner's answer depends on, as one JSON string (a cache key)."""
        d = asdict(self)
        d.pop("plan")
        return json.dumps(d, sort_keys=True)


def _checked(state: AppState) -> AppState:
    """Shape checks only (the catalog validates contents when the state is used)."""
    problems = []
    if not isinstance(state.cluster, dict) or not isinstance(state.cluster.get("pools"), list):
        problems.append("cluster must be a mapping with a list of pools")
    if not isinstance(state.model, (str, dict)):
        problems.append("model must be a catalog id or a mapping")
    elif isinstance(state.model, dict):          # the Compose page's number fields would clamp it silently
        try:
            InlineModelEntry.model_validate(state.model)
        except ValidationError as e:
            problems.append(str(from_validation_error(e, "custom model")))
    for name, most in (("global_batch", MAX_GLOBAL_BATCH), ("seq_len", MAX_SEQ_LEN)):
        v = getattr(state, name)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= most:
            problems.append(f"{name} must be a whole number from 1 to {most:,}, got {_short(v)}")
    if state.precision not in PRECISIONS:
        problems.append(f"precision must be one of {PRECISIONS}, got {_short(state.precision)}")
    if not isinstance(state.engine, str) or state.engine not in ENGINE_CHOICES:
        problems.append(f"engine must be one of {tuple(ENGINE_CHOICES)}, got {_short(state.engine)}")
    if state.tf32 not in TF32_CHOICES or not isinstance(state.tf32, (bool, type(None))):
        problems.append(f"tf32 must be true, false or empty (the engine's default), got {_short(state.tf32)}")
    problems += _job_problems(state)
    if state.objective not in OBJECTIVES:
        problems.append(f"objective must be one of {OBJECTIVES}, got {_short(state.objective)}")
    for name in ("tokens_to_train", "deadline_hours"):
        v = getattr(state, name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0
                              or not math.isfinite(v)):
            problems.append(f"{name} must be a positive finite number or empty, got {_short(v)}")
    v = state.time_limit_s
    if (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)
            or not 1 <= v <= MAX_TIME_LIMIT_S):
        problems.append(f"time_limit_s must be a number of CPU seconds from 1 to {MAX_TIME_LIMIT_S:g}, got {_short(v)}")
    if state.plan is not None and not isinstance(state.plan, dict):
        problems.append("plan must be a mapping")
    if problems:
        raise ValueError("; ".join(problems))
    return state


def _job_problems(state: AppState) -> list[str]:
    """What is wrong with the job kind, LoRA rank, offload, context and expert parallelism (each a message
    naming the value)."""
    problems = []
    if not isinstance(state.job_kind, str) or state.job_kind not in JOB_KINDS:
        problems.append(f"job_kind must be one of {JOB_KINDS}, got {_short(state.job_kind)}")
    v = state.lora_rank
    if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= MAX_LORA_RANK:
        problems.append(f"lora_rank must be a whole number from 1 to {MAX_LORA_RANK:,}, got {_short(v)}")
    if not isinstance(state.offload, str) or state.offload not in OFFLOADS:
        problems.append(f"offload must be one of {OFFLOADS}, got {_short(state.offload)}")
    if state.context_parallel != CONTEXT_PARALLEL_AUTO and context_parallel_degree(state.context_parallel) is None:
        problems.append(f"context_parallel must be \"auto\" or a whole number from 1 to {MAX_CONTEXT_PARALLEL:,} "
                        f"written as text, got {_short(state.context_parallel)}")
    if state.expert_parallel != EXPERT_PARALLEL_AUTO and expert_parallel_degree(state.expert_parallel) is None:
        problems.append(f"expert_parallel must be \"auto\" or a whole number from 1 to {MAX_EXPERT_PARALLEL:,} "
                        f"written as text, got {_short(state.expert_parallel)}")
    return problems


JOB_DEFAULTS = {f.name: f.default for f in fields(AppState)
                if f.name in ("job_kind", "lora_rank", "offload", "context_parallel", "expert_parallel")}


def _readable_job(data: dict) -> tuple[dict, list[str]]:
    """`data` with each unreadable job kind, LoRA rank, offload, context or expert parallelism replaced by its
    default (a link from another version, or edited by hand), and a warning for each; the rest of the
    link stays."""
    data, warnings = dict(data), []
    for name, default in JOB_DEFAULTS.items():
        if name not in data:
            continue
        problems = _job_problems(AppState(**{name: data[name]}))
        if problems:
            warnings.append(f"{problems[0]}; using {default!r} instead")
            data[name] = default
    return data, warnings


def encode(state: AppState) -> dict[str, str]:
    """Query parameters for `state`; raises ValueError when they would not fit in a URL."""
    raw = json.dumps(asdict(state), separators=(",", ":"), sort_keys=True).encode()
    token = base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")
    if len(token) > MAX_PARAM_CHARS:
        raise ValueError(f"the state needs {len(token):,} URL characters, more than the "
                         f"{MAX_PARAM_CHARS:,} a link can safely carry; download the files instead")
    return {"v": VERSION, "s": token}


def encode_for_link(state: AppState) -> tuple[dict[str, str], str]:
    """The parameters of the largest link that fits, and what it leaves out: "" (nothing), "plan"
    (the plan on view is too large) or "everything" (even the cluster, model and job are: a huge
    upload or long names; the parameters are then empty and the link opens the defaults)."""
    try:
        return encode(state), ""
    except ValueError:
        pass
    try:
        return encode(replace(state, plan=None)), "plan"
    except ValueError:
        return {}, "everything"


LEFT_OUT_OF_THE_LINK = {
    "plan": "The plan is too large for a link; the link keeps the cluster, model and job. Send the plan JSON with it.",
    "everything": "The cluster and model are too large for a link; the link opens the defaults. "
                  "Send the cluster YAML and plan JSON instead.",
}


def _known_engine(data: dict) -> tuple[dict, list[str]]:
    """`data` without an engine this app does not know (a link from a newer or older hetplan), and
    the warning that says so; the rest of the link stays readable."""
    engine = data.get("engine", AUTO)
    if isinstance(engine, str) and engine in ENGINE_CHOICES:
        return data, []
    data = {k: v for k, v in data.items() if k != "engine"}
    return data, [f"the link names the engine {_short(engine)}, which this app does not know (known: "
                  f"{', '.join(ENGINE_CHOICES)}); planning for {ENGINE_CHOICES[AUTO].title} instead"]


def _from_token(token: str) -> tuple[AppState, list[str]]:
    if len(token) > MAX_PARAM_CHARS:
        raise ValueError(f"the link's state is {len(token):,} characters, over the {MAX_PARAM_CHARS:,} limit")
    try:
        packed = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        d = zlib.decompressobj()
        raw = d.decompress(packed, MAX_JSON_BYTES)
        if d.unconsumed_tail:
            raise ValueError(f"the link's state unpacks to more than {MAX_JSON_BYTES:,} bytes")
        data = json.loads(raw)
    except (binascii.Error, zlib.error, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"the link's state is damaged (was it cut off when copied?): {e}") from None
    if not isinstance(data, dict):
        raise ValueError("the link's state is not a mapping")
    try:
        check_document_size(data, "the link's state")
    except InputError as e:
        raise ValueError(e.message) from None
    known = {f.name for f in fields(AppState)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"the link's state has unknown keys {unknown}")
    data, warnings = _known_engine(data)
    data, job_warnings = _readable_job(data)
    return _checked(AppState(**data)), warnings + job_warnings


def _from_readable(params: Mapping[str, str]) -> tuple[AppState, list[str]]:
    state, warnings = AppState(), []
    if "preset" in params:
        table = presets()
        if params["preset"] in table:
            state = replace(state, cluster=table[params["preset"]])
        else:
            warnings.append(f"unknown preset {_short(params['preset'])}; known: {', '.join(table)}")
    if "model" in params:
        state = replace(state, model=params["model"])
    for key, name in (("batch", "global_batch"), ("seq", "seq_len")):
        if key in params:
            try:
                state = replace(state, **{name: int(params[key])})
            except ValueError:
                warnings.append(f"{key} must be a whole number, got {_short(params[key])}")
    if "objective" in params:
        state = replace(state, objective=params["objective"])
    if "engine" in params:
        known, engine_warnings = _known_engine({"engine": params["engine"]})
        state = replace(state, **known)
        warnings += engine_warnings
    job = {name: params[name] for name in JOB_DEFAULTS if name in params}
    if "lora_rank" in job:
        try:
            job["lora_rank"] = int(job["lora_rank"])
        except ValueError:
            pass              # _readable_job says so
    job, job_warnings = _readable_job(job)
    state, warnings = replace(state, **job), warnings + job_warnings
    try:
        return _checked(state), warnings
    except ValueError as e:
        return AppState(), warnings + [str(e)]


def decode(params: Mapping[str, str]) -> tuple[AppState, list[str]]:
    """The state a link describes, and warnings (the defaults stand in for what was unreadable)."""
    params = {k: (v if isinstance(v, str) else str(v)) for k, v in params.items()}
    if "s" not in params:
        return _from_readable(params)
    if params.get("v", VERSION) != VERSION:
        return AppState(), [f"this link was made by another version of hetplan (state format "
                            f"{params.get('v')!r}, this app reads {VERSION!r}); showing the defaults"]
    try:
        return _from_token(params["s"])
    except (ValueError, TypeError) as e:
        return AppState(), [f"could not read the link ({e}); showing the defaults"]


def to_json(state: AppState) -> str:
    return json.dumps(asdict(state), sort_keys=True)


def from_json(text: str) -> AppState:
    return AppState(**json.loads(text))


def as_dict(state: AppState) -> dict[str, Any]:
    return asdict(state)
