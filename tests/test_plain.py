"""catalog.plain: the catalog and cluster files checked without pydantic give what pydantic gives, and
leave to pydantic (its message) every document they do not accept."""
from __future__ import annotations

import copy
import functools
import json
import math
import subprocess
import sys

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

import catalog.schema as schema
from catalog import plain
from catalog.errors import from_validation_error
from planner.types import InputError
from tests.conftest import EXAMPLES, ROOT, examples

CATALOG_FILES = {"GpusFile": "gpus.yaml", "ModelsFile": "models.yaml", "NetworksFile": "networks.yaml"}
CLUSTER_FILES = sorted(p for p in EXAMPLES.rglob("*.yaml") if "pools" in (yaml.safe_load(p.read_text()) or {}))


def _same(a, b) -> bool:
    """Equal values of the same types, all the way down (3 and 3.0 differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))


def _plain(model: str, data):
    try:
        return plain._model(plain._spec(), model, data)
    except plain._Doubt:
        return None


def test_the_spec_file_is_what_the_schema_says():
    written = json.loads(plain.SPEC_FILE.read_text())
    assert written == plain.spec_of({name: getattr(schema, name) for name in plain.SPECIFIED}), (
        "catalog/plain_spec.json is out of date with catalog/schema.py; rewrite it with "
        "python -c \"import catalog.plain; catalog.plain.write_spec()\"")


@pytest.mark.parametrize("model,name", CATALOG_FILES.items())
def test_the_packaged_catalog_takes_the_plain_path_with_pydantic_s_values(model, name):
    data = yaml.safe_load((ROOT / "catalog" / name).read_text())
    entry = _plain(model, data)
    assert entry is not None, f"catalog/{name} left to pydantic"
    assert _same(entry.model_dump(), getattr(schema, model).model_validate(data).model_dump())


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_cluster_takes_the_plain_path_with_pydantic_s_values(path):
    data = yaml.safe_load(path.read_text())
    entry = _plain("ClusterEntry", data)
    assert entry is not None, f"{path} left to pydantic"
    assert _same(entry.model_dump(), schema.ClusterEntry.model_validate(data).model_dump())


def test_the_examples_include_a_network_section_and_spot_pools():
    texts = [p.read_text() for p in CLUSTER_FILES]
    assert any("network:" in t for t in texts) and any("spot:" in t for t in texts)


ODD_VALUES = [True, False, 0, 1, -1, 2, 8, 3.0, 0.5, 1e-300, 1e308, 2**60, 10**400, math.inf, -math.inf, math.nan,
              "1", "", "a100", "x" * 70, "bad id!", "ib\n", None, [], [{}], {}, {"a": 1}, "infiniband", "pcie",
              "swiglu", 10_000.0]


def _paths(value, at=()):
    """Every place in a document a value sits at, as a tuple of keys and indices."""
    yield at
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, at + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, at + (i,))


def _mutated(data, at, change, value):
    data = copy.deepcopy(data)
    if not at:
        return value if change == "set" else data
    *parent_at, last = at
    parent = data
    for k in parent_at:
        parent = parent[k]
    if change == "set":
        parent[last] = value
    elif change == "drop" and isinstance(parent, dict):
        del parent[last]
    elif change == "add" and isinstance(parent, dict):
        parent[value if isinstance(value, str) else "from_"] = parent[last]
    return data


@functools.lru_cache(maxsize=1)
def _documents():
    cluster = yaml.safe_load((EXAMPLES / "h100-a100-v100-64.yaml").read_text())
    network = next(yaml.safe_load(p.read_text()) for p in CLUSTER_FILES if "network:" in p.read_text())
    gpus = yaml.safe_load((ROOT / "catalog" / "gpus.yaml").read_text())
    one_gpu = {"gpus": {"a100-80gb-sxm": gpus["gpus"]["a100-80gb-sxm"]}}
    models = yaml.safe_load((ROOT / "catalog" / "models.yaml").read_text())
    inline = dict(models["models"]["llama-2-7b"], id="mine")
    return [("ClusterEntry", cluster), ("ClusterEntry", network), ("GpusFile", one_gpu), ("CatalogFile", one_gpu),
            ("InlineModelEntry", inline)]


@settings(max_examples=examples(400))
@given(st.data())
def test_what_the_plain_check_accepts_pydantic_accepts_with_the_same_values(data):
    model, document = data.draw(st.sampled_from(_documents()))
    at = data.draw(st.sampled_from(list(_paths(document))))
    change = data.draw(st.sampled_from(["set", "set", "drop", "add"]))
    doc = _mutated(document, at, change, data.draw(st.sampled_from(ODD_VALUES)))
    entry = _plain(model, doc)
    try:
        expected = getattr(schema, model).model_validate(doc)
    except Exception as e:                       # pydantic refuses: the plain check must not accept
        assert entry is None, f"accepted what pydantic refuses ({e})"
        with pytest.raises(InputError) as got:
            plain.validated(model, doc, "f.yaml")
        assert str(got.value) == str(from_validation_error(e, "f.yaml"))
        return
    if entry is not None:
        assert _same(entry.model_dump(), expected.model_dump())
    assert _same(plain.validated(model, doc, "f.yaml").model_dump(), expected.model_dump())


def test_a_link_written_by_field_name_is_left_to_pydantic():
    doc = next(yaml.safe_load(p.read_text()) for p in CLUSTER_FILES if "network:" in p.read_text())
    link = doc["network"]["links"][0]
    link["from_"] = link.pop("from")
    assert _plain("ClusterEntry", doc) is None
    assert plain.validated("ClusterEntry", doc, "f.yaml").network.links[0].from_ == link["from_"]


def test_entries_are_read_only():
    entry = plain.validated("ClusterEntry", yaml.safe_load((EXAMPLES / "lab-mix.yaml").read_text()), "f.yaml")
    with pytest.raises(TypeError):
        entry.name = "other"


def test_planning_starts_without_pydantic():
    """`hetplan plan`'s imports, the catalog and a cluster file with a network section: pydantic stays out."""
    network = next(p for p in CLUSTER_FILES if "network:" in p.read_text())
    code = ("import sys; import planner.cli.plan_cmd; from catalog import load_catalog, load_cluster_file; "
            f"load_cluster_file({str(network)!r}, load_catalog()); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout[:500]
