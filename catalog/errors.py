"""Turning validation failures into one-line `InputError`s that name the file and the field."""
from __future__ import annotations

import re
import reprlib
from typing import TYPE_CHECKING, Iterable

from planner.types import InputError

if TYPE_CHECKING:                         # pydantic is imported where a document fails the plain check
    from pydantic import ValidationError

_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")
MAX_VALUE_CHARS = 80                      # a value quoted in a message is cut to about this length
_REPR = reprlib.Repr()                    # keyword arguments only from Python 3.12
_REPR.maxlevel = 3
_REPR.maxtuple = _REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 4
_REPR.maxstring = _REPR.maxother = MAX_VALUE_CHARS
_REPR.maxlong = 40


def short_repr(value, limit: int = MAX_VALUE_CHARS) -> str:
    """repr(value), cut to about `limit` characters without expanding big or nested containers
    (a message quotes what the user wrote, not all of it)."""
    try:
        text = _REPR.repr(value)
    except Exception:                     # e.g. an int of more than 4,300 digits
        text = f"a {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def field_path(loc: Iterable) -> str:
    """('stages', 1, 'replicas', 0, 'tp') -> 'stages[1].replicas[0].tp'; an odd key (spaces,
    line breaks, very long) is quoted and cut, so that the path stays one short line."""
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif isinstance(part, str) and _PLAIN_KEY.match(part):
            path += f".{part}" if path else part
        else:
            path += f"[{short_repr(part, 40)}]"
    return path


def located(source: str, path: str) -> str:
    """The `field` of an InputError: 'my_gpus.yaml: gpus.foo.memory_gib'."""
    if source and path:
        return f"{source}: {path}"
    return source or path


def _looks_like_number(value) -> bool:
    try:
        float(value)
        return True
    except (TypeError, ValueError):
        return False


def _message(error: dict) -> str:
    kind, ctx, raw = error["type"], error.get("ctx") or {}, error.get("input")
    value = _Quoted(short_repr(raw))
    if kind in ("float_type", "int_type") and isinstance(raw, str) and _looks_like_number(raw):
        hint = ("YAML reads 1e9 as text: write 1.0e+9 or the digits" if "e" in raw.lower()
                else "remove the quotes")
        kind_of = "whole" if kind == "int_type" else "finite"
        return f"must be a {kind_of} number, got the text {value!r} ({hint})"
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "unknown key (check the spelling against the documented format)"
    if kind == "greater_than" and ctx.get("gt") == 0:
        return f"must be a positive number, got {value!r}"
    if kind == "greater_than_equal" and ctx.get("ge") == 0:
        return f"must be zero or more, got {value!r}"
    if kind == "greater_than_equal":
        return f"must be a positive number of at least {ctx.get('ge')}, got {value!r}"
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
    if kind in ("too_short", "too_long"):
        bound, actual = ctx.get("min_length" if kind == "too_short" else "max_length"), ctx.get("actual_length")
        entries = "entry" if bound == 1 else "entries"
        got = "none (an empty list)" if actual == 0 else f"{actual}"
        return f"must have at {'least' if kind == 'too_short' else 'most'} {bound} {entries}, got {got}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}"
    msg = error["msg"].replace("Input should be", "must be").replace("Value error, ", "")
    return " ".join(msg.split())[:200] + f", got {value!r}"


class _Quoted(str):
    """A value already quoted by `short_repr`: `{value!r}` shows it as it is."""

    def __repr__(self) -> str:
        return str(self)


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
