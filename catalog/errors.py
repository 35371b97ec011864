"""Turning validation failures into one-line `InputError`s that name the file and the field."""
from __future__ import annotations

from typing import Iterable

from pydantic import ValidationError

from planner.types import InputError


def field_path(loc: Iterable) -> str:
    """('stages', 1, 'replicas', 0, 'tp') -> 'stages[1].replicas[0].tp'."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def located(source: str, path: str) -> str:
    """The `field` of an InputError: 'my_gpus.yaml: gpus.foo.memory_gib'."""
    if source and path:
        return f"{source}: {path}"
    return source or path


def _message(error: dict) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown key (check the spelling against the documented format)"
    if kind == "greater_than" and ctx.get("gt") == 0:
        return f"must be a positive number, got {value!r}"
    if kind == "greater_than_equal" and ctx.get("ge") == 0:
        return f"must be zero or more, got {value!r}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}, got {value!r}"
    if kind == "int_type":
        return f"must be a whole number, got {value!r}"
    if kind in ("float_type", "finite_number"):
        return f"must be a finite number, got {value!r}"
    if kind == "bool_type":
        return f"must be true or false, got {value!r}"
    if kind == "string_type":
        return f"must be text, got {value!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}"
    return error["msg"].replace("Input should be", "must be").replace("Value error, ", "") + f", got {value!r}"


def from_validation_error(err: ValidationError, source: str, prefix: str = "") -> InputError:
    """The first problem pydantic found, as an InputError located in `source` under `prefix`."""
    first = err.errors()[0]
    loc = [p for p in first["loc"] if p != "[key]"]
    path = field_path(([prefix] if prefix else []) + loc)
    return InputError(located(source, path), _message(first))


def relocated(err: InputError, source: str, old_prefix: str = "", new_prefix: str = "") -> InputError:
    """An InputError raised by a planner type, re-addressed as a path in the user's file."""
    path = err.field
    if old_prefix and path.startswith(old_prefix):
        path = new_prefix + path[len(old_prefix):]
    elif new_prefix:
        path = f"{new_prefix}.{path}" if path else new_prefix
    return InputError(located(source, path), err.message)
