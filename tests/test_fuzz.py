"""A bounded fuzz run of everything that reads outside input: the YAML/JSON parsers, the cluster,
plan, catalog and measurement file loaders, the app's URL-state decoder and encoder, and the
output paths of `hetplan calibrate`, `run-local` and `export`.

Inputs are random bytes, random text, random JSON-like structures, and mutations (characters
inserted, dropped or replaced; values swapped for random ones at random places) of valid
examples. The only thing allowed to escape is `InputError` (the URL decoder: nothing at all),
and every call must be fast. Counts per test are in `N`; HYPOTHESIS_PROFILE=fuzz-long multiplies
them (tests/conftest.py, docs/reliability.md).
"""
from __future__ import annotations

import base64
import copy
import json
import time
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import (builtin_catalog, check_plan_against_cluster, cluster_from_dict, load_catalog,
                     load_cluster_file, load_plan_file, plan_from_dict)
from catalog.files import parse_json, parse_yaml
from planner.cost import evaluate
from planner.types import InputError
from tests.conftest import EXAMPLES, PROFILE, examples

# fuzz-long runs for many minutes; each call keeps its own bound there
pytestmark = pytest.mark.timeout(0 if PROFILE == "fuzz-long" else 600)

CATALOG = builtin_catalog()
SECONDS_PER_CALL = 5.0                    # CPU seconds (a busy machine does not inflate them)
N = {"bytes": 1000, "text": 2000, "mutated_text": 1000, "structures": 600, "catalog": 200, "url": 400,
     "url_to_types": 150, "measurements": 400, "names": 300, "output_paths": 60, "run_local_arguments": 300}

CLUSTER_TEXT = (EXAMPLES / "lab-mix.yaml").read_text()
PLAN_TEXT = (EXAMPLES / "plans" / "single-node-8-small.json").read_text()
CLUSTER_DATA = parse_yaml(CLUSTER_TEXT, "cluster")
PLAN_DATA = parse_json(PLAN_TEXT, "plan")
SMALL_CLUSTER = cluster_from_dict(parse_yaml((EXAMPLES / "single-node-8.yaml").read_text(), "c"), CATALOG)
CATALOG_TEXT = """gpus:
  my-gpu:
    name: Mine
    bf16_fp16_tflops: 100
    fp32_tflops: 20
    bf16: true
    memory_gib: 24
    memory_bw_gb_s: 900
    link: pcie
    link_gb_s_per_direction: 32
    pcie_gen: 4
    power_w: 300
    price_per_gpu_hour: 1.0
models:
  my-model:
    name: Mine
    layers: 4
    hidden: 256
    heads: 4
    kv_heads: 4
    ffn: 1024
    vocab: 1000
"""


def bounded(fn, *args):
    """fn(*args); only InputError may escape; returns the result or the error, and checks the time."""
    start = time.process_time()
    try:
        result = fn(*args)
    except InputError as e:
        result = e
        assert "\n" not in str(e) and len(str(e)) < 2000, str(e)[:300]
    assert time.process_time() - start < SECONDS_PER_CALL, (fn.__name__, time.process_time() - start)
    return result


# ----------------------------------------------------------------------------- strategies

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.integers(-3, 100),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.sampled_from(["a100", "p0", "gpt3-1.3b", "1f1b", "bf16", "full", "1e9", "", "\n", "🙂"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=5)),
                      max_leaves=25)


@st.composite
def mutated_text(draw, text: str):
    """`text` with a few characters inserted, dropped or replaced, or a slice repeated."""
    chars = list(text)
    for _ in range(draw(st.integers(1, 8))):
        if not chars:
            break
        at = draw(st.integers(0, len(chars) - 1))
        op = draw(st.sampled_from(["insert", "drop", "replace", "repeat"]))
        if op == "insert":
            chars.insert(at, draw(st.sampled_from(list(":-[]{}&*!|>#'\"\n\t ,0123456789e.%@`\\\x00"))))
        elif op == "drop":
            del chars[at]
        elif op == "replace":
            chars[at] = draw(st.characters())
        else:
            end = min(len(chars), at + draw(st.integers(1, 40)))
            chars[at:at] = chars[at:end] * draw(st.integers(1, 50))
    return "".join(chars)


def _paths(data, prefix=()):
    yield prefix
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(data, list):
        for k, v in enumerate(data):
            yield from _paths(v, prefix + (k,))


@st.composite
def mutated_structure(draw, data):
    """A deep copy of `data` with random values put at a few random places (or keys removed)."""
    out = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(out) if p]
        if not paths:
            return draw(values)
        path = draw(st.sampled_from(paths))
        parent = out
        for part in path[:-1]:
            parent = parent[part]
        if isinstance(parent, dict) and draw(st.booleans()) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(values)
    return out


# ----------------------------------------------------------------------------- the parsers and file loaders

@settings(max_examples=examples(N["bytes"]))
@given(raw=st.one_of(st.binary(max_size=2000), st.binary(max_size=50).map(lambda b: CLUSTER_TEXT.encode()[:300] + b)))
def test_fuzz_file_loaders_with_bytes(raw, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bytes", numbered=True)
    for name, load in (("c.yaml", load_cluster_file), ("p.json", load_plan_file), ("p.yaml", load_plan_file)):
        path = folder / name
        path.write_bytes(raw)
        bounded(load, path, CATALOG)


@settings(max_examples=examples(N["text"]))
@given(text=st.text(max_size=500))
def test_fuzz_parsers_with_text(text):
    bounded(parse_yaml, text, "f.yaml")
    bounded(parse_json, text, "f.json")


@settings(max_examples=examples(N["mutated_text"]))
@given(cluster=mutated_text(CLUSTER_TEXT), plan=mutated_text(PLAN_TEXT))
def test_fuzz_loaders_with_mutated_files(cluster, plan):
    data = bounded(parse_yaml, cluster, "cluster.yaml")
    if isinstance(data, dict):
        bounded(cluster_from_dict, data, CATALOG, "cluster.yaml")
    data = bounded(parse_json, plan, "plan.json")
    if isinstance(data, dict):
        _plan_end_to_end(data)


def _plan_end_to_end(data):
    """Load, check against a cluster and evaluate: what `hetplan evaluate` and the What-if page do."""
    plan = bounded(plan_from_dict, data, CATALOG, "plan.json")
    if isinstance(plan, InputError):
        return
    if not isinstance(bounded(check_plan_against_cluster, plan, SMALL_CLUSTER), InputError):
        bounded(evaluate, SMALL_CLUSTER, plan)


@settings(max_examples=examples(N["structures"]))
@given(cluster=mutated_structure(CLUSTER_DATA), plan=mutated_structure(PLAN_DATA), anything=values)
def test_fuzz_loaders_with_mutated_structures(cluster, plan, anything):
    bounded(cluster_from_dict, cluster, CATALOG, "cluster")
    bounded(cluster_from_dict, anything, CATALOG, "cluster")
    _plan_end_to_end(plan)
    bounded(plan_from_dict, anything, CATALOG, "plan")


@settings(max_examples=examples(N["catalog"]))
@given(text=st.one_of(mutated_text(CATALOG_TEXT), st.text(max_size=300)))
def test_fuzz_catalog_loader(text, tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog", numbered=True) / "extra.yaml"
    path.write_bytes(text.encode("utf-8", errors="replace"))
    bounded(load_catalog, [path])


# ----------------------------------------------------------------------------- the URL-state decoder

def _url_state():
    try:
        from ui import state
    except ImportError:
        pytest.skip("ui/state.py is not built yet")
    return state


def _token(payload: bytes) -> str:
    return base64.urlsafe_b64encode(zlib.compress(payload, 9)).decode().rstrip("=")


url_keys = st.sampled_from(["v", "s", "preset", "model", "batch", "seq", "objective", "x", ""])
url_values = st.one_of(st.text(max_size=60), st.sampled_from(["1", "0", "-1", "1e9", "nan", "999999999999"]),
                       values.map(lambda v: _token(json.dumps(v).encode())),
                       mutated_structure({"global_batch": 8, "seq_len": 512, "objective": "cost",
                                          "cluster": CLUSTER_DATA, "model": "gpt3-1.3b"})
                       .map(lambda v: _token(json.dumps(v).encode())),
                       st.binary(max_size=300).map(lambda b: _token(b)))


@settings(max_examples=examples(N["url"]))
@given(params=st.dictionaries(url_keys, url_values, max_size=5))
def test_fuzz_url_state_decoder(params):
    state_module = _url_state()
    start = time.process_time()
    state, warnings = state_module.decode(params)               # must never raise
    assert time.process_time() - start < SECONDS_PER_CALL
    assert isinstance(state, state_module.AppState) and all(isinstance(w, str) for w in warnings)


@settings(max_examples=examples(N["url_to_types"]))
@given(params=st.dictionaries(url_keys, url_values, max_size=5))
def test_fuzz_url_state_into_the_planner_types(params):
    """What the app does next with a decoded link: build the cluster, job and plan."""
    state_module = _url_state()
    state, _ = state_module.decode(params)
    cluster = bounded(cluster_from_dict, state.cluster, CATALOG, "cluster")
    if state.plan is not None and not isinstance(cluster, InputError):
        plan = bounded(plan_from_dict, state.plan, CATALOG, "plan")
        if not isinstance(plan, InputError):
            bounded(check_plan_against_cluster, plan, cluster)


def test_url_state_decoder_deep_nesting():
    state_module = _url_state()
    state, warnings = state_module.decode({"s": _token(b"[" * 150_000)})
    assert warnings


def test_url_state_decoder_refuses_bombs():
    state_module = _url_state()
    for payload in (b" " * 50_000_000, json.dumps({"cluster": {"x": "y" * 10_000_000}}).encode()):
        start = time.process_time()
        state, warnings = state_module.decode({"s": _token(payload)})
        assert warnings and time.process_time() - start < SECONDS_PER_CALL


# ----------------------------------------------------------------------------- calibrate's measurement records

def _measurement_document() -> dict:
    from tests.test_calibrate import _document
    return _document(CATALOG, 0.5)


MEASUREMENTS = _measurement_document()


@settings(max_examples=examples(N["measurements"]))
@given(doc=st.one_of(mutated_structure(MEASUREMENTS), values))
def test_fuzz_measurement_records(doc):
    from planner.calibrate import fit_efficiency, measurements_from_dict
    records = bounded(measurements_from_dict, doc, lambda mid: CATALOG.model(mid, "model"), "m.json")
    if not isinstance(records, InputError):
        bounded(fit_efficiency, records, dict(CATALOG.gpus))


# ----------------------------------------------------------------------------- names in links and uploads

# any text, lone surrogates included (which JSON escapes such as "\ud800" can carry)
names = st.one_of(st.text(max_size=40), st.text(st.characters(categories=["Cs", "Cc", "Po", "Sm", "Ll"]), max_size=40),
                  st.text(max_size=3000), st.sampled_from(["[x](http://e)", "![i](http://e/i.png)", "<img src=x>"]))


@settings(max_examples=examples(N["names"]))
@given(cluster_name=names, model_name=names)
def test_fuzz_names_through_the_link_and_the_upload_parsers(cluster_name, model_name):
    """Any name: the link is made or left out (never an exception), reads back as it was or is
    refused with a warning; the upload parsers take it or refuse it with an InputError."""
    state_module = _url_state()
    model = {"id": "c", "name": model_name, "layers": 4, "hidden": 256, "heads": 4, "kv_heads": 4, "ffn": 1024,
             "vocab": 1000}
    state = state_module.AppState(cluster=dict(CLUSTER_DATA, name=cluster_name), model=model)
    params, left_out = state_module.encode_for_link(state)
    decoded, warnings = state_module.decode(params)
    as_json = state_module.from_json(state_module.to_json(state))     # JSON joins "\ud800\udc00" into one character
    assert (decoded, warnings) == ((as_json, []) if not left_out else (state_module.AppState(), []))  \
        or (warnings and decoded == state_module.AppState())
    text = json.dumps({"name": cluster_name, "model": model_name})
    bounded(parse_json, text, "upload.json")
    bounded(parse_yaml, f"name: {json.dumps(cluster_name)}\n", "upload.yaml")


# ----------------------------------------------------------------------------- output paths

file_names = st.text(st.characters(blacklist_characters="/", blacklist_categories=["Cs"]), min_size=1, max_size=300)


@settings(max_examples=examples(N["output_paths"]))
@given(name=file_names, kind=st.sampled_from(["nothing", "file", "folder", "fifo", "link to fifo"]))
def test_fuzz_export_output_paths(name, kind, tmp_path_factory):
    """`export --out` to any name in a fresh folder, with anything there: exit 0 or 2, never 1;
    the folder then holds the whole set of files or what was there before, and no temporaries."""
    import os
    from planner.cli import main
    base = tmp_path_factory.mktemp("out", numbered=True)
    target = base / name
    try:
        if kind == "file":
            target.write_text("before")
        elif kind == "folder":
            target.mkdir()
        elif kind == "fifo":
            os.mkfifo(target)
        elif kind == "link to fifo":
            os.mkfifo(base / "fifo")
            target.symlink_to(base / "fifo")
    except (OSError, ValueError):
        kind = "nothing"
    before = sorted(os.listdir(base))
    start = time.process_time()
    rc = main(["export", "--cluster", str(EXAMPLES / "single-node-8.yaml"), "--plan",
               str(EXAMPLES / "plans" / "single-node-8-small.json"), "--to", "torchrun", "--out", str(target)])
    assert time.process_time() - start < SECONDS_PER_CALL
    assert rc in (0, 2)
    after = sorted(os.listdir(base))
    if rc == 0:
        assert sorted(os.listdir(target)) == ["hostfile", "launch.sh", "rank_map.json"]
    else:
        assert after == before, "a refusal leaves the folder as it was"
    assert not any(".tmp" in f for f in after)


# ----------------------------------------------------------------------------- run-local's arguments

RUN_LOCAL_BOUNDS = {"--iterations": (1, 10_000), "--hidden": (1, 8192), "--seq-len": (1, 8192),
                    "--vocab": (1, 1_000_000), "--timeout": (0, 7 * 24 * 3600)}
numbers_as_text = st.one_of(st.integers(-10**20, 10**20).map(str), st.floats().map(str), st.text(max_size=20),
                            st.sampled_from(["nan", "inf", "-inf", "1e400", "0", "-1", "1_000", " 8 ", "9" * 5000]))


@settings(max_examples=examples(N["run_local_arguments"]))
@given(option=st.sampled_from(sorted(RUN_LOCAL_BOUNDS)), value=numbers_as_text)
def test_fuzz_run_local_arguments(option, value):
    """Every value is refused in one line or lies within the option's bounds: no run starts unbounded."""
    from planner.cli import UsageError, build_parser
    try:
        args = build_parser().parse_args(["run-local", "--cluster", "c", "--plan", "p", option, value])
    except UsageError as e:
        assert "\n" not in str(e) and option in str(e)
        return
    low, high = RUN_LOCAL_BOUNDS[option]
    got = getattr(args, option.lstrip("-").replace("-", "_"))
    assert low <= got <= high and (option == "--timeout" or isinstance(got, int))
