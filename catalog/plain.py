"""The catalog and cluster files checked in plain Python, so that `hetplan plan` starts without pydantic.

`catalog.schema`'s pydantic models are the rules. Importing pydantic and building its validators cost
about a tenth of a CPU second at each start of the command line, more than reading every file. So the
models a command reads on its way to the search (`SPECIFIED`) are written once, by
`python -c "import catalog.plain; catalog.plain.write_spec()"`, as a plain description (`plain_spec.json`, from the models' pydantic-core
schemas; tests/test_plain.py holds the two equal), and `validated` checks a document against it: a
document that keeps every rule comes back as `Entry` objects with the fields, defaults and types the
pydantic model would give it. Any doubt (a rule broken, a form the check does not know, such as a
link's `from_` written by name) hands the document to the pydantic model, which then accepts it or
reports its first error as before, so a bad file gets the same message either way.
"""
from __future__ import annotations

import copy
import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from catalog.errors import from_validation_error

SPEC_FILE = Path(__file__).resolve().parent / "plain_spec.json"
# The models of catalog.schema checked here: the built-in catalog's files, a user's extra catalog, the
# cluster file and a model written inline (each with the models inside it).
SPECIFIED = ("GpusFile", "ModelsFile", "NetworksFile", "CatalogFile", "ClusterEntry", "InlineModelEntry")
_BOUNDS = {"gt": lambda v, b: v > b, "ge": lambda v, b: v >= b, "lt": lambda v, b: v < b, "le": lambda v, b: v <= b}
_LARGEST_EXACT_FLOAT_INT = 2**53


class _Doubt(Exception):
    """The document breaks a rule, or takes a form this check leaves to pydantic."""


class Entry:
    """A checked entry: its fields as attributes, as the pydantic model `model` would hold them."""

    def __init__(self, model: str, fields: dict[str, Any]):
        self.__dict__.update(fields)
        object.__setattr__(self, "_model", model)

    def __setattr__(self, name, value):
        raise TypeError(f"{self._model} is read-only")

    def __repr__(self) -> str:
        return f"{self._model}({', '.join(f'{k}={v!r}' for k, v in self.model_dump().items())})"

    def model_dump(self, exclude=()) -> dict[str, Any]:
        """The fields as a dict, nested entries too (pydantic's `model_dump`)."""
        return {k: _dumped(v) for k, v in self.__dict__.items() if k != "_model" and k not in exclude}


def _dumped(value):
    if isinstance(value, Entry):
        return value.model_dump()
    if isinstance(value, list):
        return [_dumped(v) for v in value]
    if isinstance(value, dict):
        return {k: _dumped(v) for k, v in value.items()}
    return value


def validated(model: str, data: Any, source: str, prefix: str = ""):
    """`data` as catalog.schema's `model` holds it, or an InputError naming `source` and the field
    (under `prefix`) of pydantic's first error."""
    spec = _spec()
    if model in spec:
        try:
            return _model(spec, model, data)
        except _Doubt:
            pass
    # Lazy: pydantic and its validators cost about 0.1 CPU s of start-up; only a document this check
    # leaves in doubt, or a format it does not describe (plans, jobs), needs them.
    import catalog.schema
    from pydantic import ValidationError
    try:
        return getattr(catalog.schema, model).model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, source, prefix) from None


@functools.lru_cache(maxsize=1)
def _spec() -> dict:
    return json.loads(SPEC_FILE.read_text())


# ----------------------------------------------------------------------------- the check

def _model(spec: dict, name: str, data) -> Entry:
    if type(data) is not dict:
        raise _Doubt
    fields = spec[name]
    keys = {f.get("alias", k): k for k, f in fields.items()}
    if any(key not in keys for key in data):            # extra="forbid"; a field written by name: pydantic
        raise _Doubt
    out = {}
    for key, field in fields.items():
        given = field.get("alias", key)
        if given in data:
            out[key] = _value(spec, field["schema"], data[given])
        elif "default" in field:                         # a fresh {} or [] for each entry
            default = field["default"]
            out[key] = copy.deepcopy(default) if isinstance(default, (dict, list)) else default
        else:
            raise _Doubt
    return Entry(name, out)


def _value(spec: dict, node: dict, value):
    kind = node["type"]
    if kind == "nullable":
        return None if value is None else _value(spec, node["schema"], value)
    if kind == "model":
        return _model(spec, node["model"], value)
    if kind == "int":
        if type(value) is not int:                       # strict: no bool, no 3.0, no "3"
            raise _Doubt
        return _bounded(node, value)
    if kind == "float":
        if type(value) not in (int, float) or (type(value) is int and abs(value) > _LARGEST_EXACT_FLOAT_INT):
            raise _Doubt
        if not math.isfinite(value):                     # allow_inf_nan=False
            raise _Doubt
        return float(_bounded(node, value))
    if kind == "bool":
        if type(value) is not bool:
            raise _Doubt
        return value
    if kind == "str":
        if type(value) is not str or ("pattern" in node and not re.fullmatch(node["pattern"], value)):
            raise _Doubt
        return value
    if kind == "literal":
        if type(value) is not str or value not in node["expected"]:
            raise _Doubt
        return value
    if kind == "list":
        if type(value) is not list or not node.get("min_length", 0) <= len(value) <= node.get("max_length", math.inf):
            raise _Doubt
        return [_value(spec, node["items_schema"], v) for v in value]
    if kind == "dict":
        if type(value) is not dict:
            raise _Doubt
        return {_value(spec, node["keys_schema"], k): _value(spec, node["values_schema"], v) for k, v in value.items()}
    raise _Doubt


def _bounded(node: dict, value):
    if not all(check(value, node[bound]) for bound, check in _BOUNDS.items() if bound in node):
        raise _Doubt
    return value


# ----------------------------------------------------------------------------- writing the spec

_KNOWN_KEYS = {"int": {"gt", "ge", "lt", "le", "strict"}, "float": {"gt", "ge", "lt", "le", "strict", "allow_inf_nan"},
               "str": {"pattern", "strict"}, "bool": {"strict"}, "literal": {"expected"},
               "list": {"items_schema", "min_length", "max_length", "strict"},
               "dict": {"keys_schema", "values_schema", "strict"}, "nullable": {"schema"}}


def spec_of(models: dict[str, type]) -> dict:
    """The plain description of pydantic models (name -> class): for each model and each model inside
    it, its fields' aliases, defaults and value rules, read from the pydantic-core schema. A rule the
    check above does not apply is refused here, so the description never says less than the model."""
    spec: dict[str, dict] = {}
    for name, cls in models.items():
        _describe_model(cls.__pydantic_core_schema__, spec, {}, name)
    return dict(sorted(spec.items()))


def _describe_model(node: dict, spec: dict, refs: dict, name: str | None = None) -> str:
    if node["type"] == "definitions":
        refs.update({d["ref"]: d for d in node["definitions"]})
        return _describe_model(node["schema"], spec, refs, name)
    if node["type"] == "definition-ref":
        return _describe_model(refs[node["schema_ref"]], spec, refs, name)
    assert node["type"] == "model" and not (node.get("custom_init") or node.get("post_init") or node.get("root_model")), \
        f"a {node['type']} rule is not checked here"
    config = node.get("config", {})
    assert config.get("strict") and config.get("extra_fields_behavior") == "forbid" \
        and not config.get("allow_inf_nan", True), f"{node['cls'].__name__}: the check is of strict models only"
    name = name or node["cls"].__name__
    if name not in spec:
        spec[name] = {}
        inner = node["schema"]
        assert inner["type"] == "model-fields" and not inner.get("computed_fields"), inner["type"]
        for key, field in inner["fields"].items():
            spec[name][key] = _describe_field(field, spec, refs)
    return name


def _describe_field(field: dict, spec: dict, refs: dict) -> dict:
    assert field["type"] == "model-field", field["type"]
    out: dict[str, Any] = {}
    alias = field.get("validation_alias")
    if alias is not None:
        assert isinstance(alias, str), f"alias paths are not checked here: {alias}"
        out["alias"] = alias
    schema = field["schema"]
    if schema["type"] == "default":
        assert "default_factory" not in schema, "a default factory is not described here"
        out["default"] = schema["default"]
        schema = schema["schema"]
    out["schema"] = _describe(schema, spec, refs)
    return out


def _describe(node: dict, spec: dict, refs: dict) -> dict:
    kind = node["type"]
    if kind in ("model", "definitions", "definition-ref"):
        return {"type": "model", "model": _describe_model(node, spec, refs)}
    assert kind in _KNOWN_KEYS, f"a {kind} rule is not checked here"
    unknown = set(node) - _KNOWN_KEYS[kind] - {"type", "metadata", "ref"}
    assert not unknown, f"{kind}: {sorted(unknown)} not checked here"
    assert node.get("strict", True), "the check is of strict fields only"
    out = {k: v for k, v in node.items() if k in _KNOWN_KEYS[kind] and k != "strict"}
    out["type"] = kind
    if kind == "float":
        assert not out.pop("allow_inf_nan", False), "the check refuses inf and nan"
    if kind == "literal":
        assert all(type(v) is str for v in node["expected"]), "literals other than text are not checked here"
    for key in ("schema", "items_schema", "keys_schema", "values_schema"):
        if key in out:
            out[key] = _describe(out[key], spec, refs)
    return dict(sorted(out.items()))


def write_spec() -> None:
    """Rewrite plain_spec.json from catalog.schema (after a change to a model it names)."""
    import catalog.schema   # the writer alone needs the pydantic models
    spec = spec_of({name: getattr(catalog.schema, name) for name in SPECIFIED})
    SPEC_FILE.write_text(json.dumps(spec, indent=1) + "\n")
