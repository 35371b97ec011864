"""Reading YAML and JSON files safely; every failure is one line naming the file."""
from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import yaml

from planner.types import InputError

MAX_FILE_BYTES = 10 * 1024 * 1024
# YAML is parsed in pure Python at roughly 100 kB a second of CPU where PyYAML has no libyaml (with
# it, _UniqueKeyLoader parses in C; the objects are still built in Python): a 10 MiB document took
# minutes and gigabytes before the value limit below refused it. hetplan's YAML files (clusters,
# catalogs) are a few kB; plans, the only large documents, are JSON.
MAX_YAML_CHARS = 256 * 1024
# A parsed document may hold at most this many values (counting each use of a YAML alias anew, so
# that a "billion laughs" file is refused before anything walks it) nested at most this deep.
MAX_DOCUMENT_VALUES = 2_000_000
MAX_DOCUMENT_DEPTH = 64


def _read_text(path: Path) -> str:
    try:
        info = path.stat()
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    except ValueError as e:                       # e.g. a NUL byte in the name
        raise InputError(repr(str(path)), f"not a usable file name: {e}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(str(path), "is a directory; give the path of a file")
    if not stat.S_ISREG(info.st_mode):            # a FIFO or device would block or never end
        raise InputError(str(path), "is not a regular file (a pipe or device?); save the input to a file first")
    if info.st_size > MAX_FILE_BYTES:
        raise InputError(str(path), f"file is {info.st_size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
    try:
        with path.open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)     # the file may have grown since stat
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(str(path), f"file is over the limit of {MAX_FILE_BYTES:,} bytes")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"is not UTF-8 text (byte {e.start} is {data[e.start]:#04x}); "
                                    f"save it as UTF-8 YAML or JSON") from None


def check_document_size(data, source: str) -> None:
    """Refuse a parsed document with more than MAX_DOCUMENT_VALUES values (YAML aliases counted
    at each use) or nested deeper than MAX_DOCUMENT_DEPTH, or with text that is not Unicode (a
    lone surrogate such as "\\ud800", which JSON and YAML escapes can write but no file, page or
    terminal can show). Stops as soon as a limit is passed, so its own cost is bounded."""
    budget = MAX_DOCUMENT_VALUES
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        budget -= 1
        if budget < 0:
            raise InputError(source, f"holds more than {MAX_DOCUMENT_VALUES:,} values (counting each use of a "
                                     f"YAML alias); hetplan's files need far fewer")
        if depth > MAX_DOCUMENT_DEPTH:
            raise InputError(source, f"is nested more than {MAX_DOCUMENT_DEPTH} levels deep; hetplan's "
                                     f"formats need at most a few")
        if isinstance(value, str):
            _check_text(value, source)
        elif isinstance(value, dict):
            for key in value:
                if isinstance(key, str):
                    _check_text(key, source)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend((v, depth + 1) for v in value)


def _check_text(text: str, source: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(source, f"holds a lone surrogate ({text[e.start]!r}) in {_short(text)}: that is not "
                                 f"text; write the character itself or its full surrogate pair") from None


# libyaml's parser where PyYAML has it (the built-in catalog's 54 kB: 6 ms instead of 60 at start-up);
# the constructors, which decide what a document means, are SafeLoader's Python ones either way
_SafeLoader = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


class _UniqueKeyLoader(_SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":   # `<<: *base`; explicit keys override it
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
            except TypeError:
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be text or a number, not {type(key).__name__}",
                    key_node.start_mark) from None
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {_short(key)} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _UniqueKeyLoader.construct_mapping)


# YAML 1.1 (what PyYAML reads) and YAML 1.2 disagree on numbers a person writes by accident:
# 1.1 reads `nodes: 010` as octal 8 and `time: 1:00` as base-60 60, 1.2 reads 10 and the text "1:00".
# Neither guess is safe, so both forms are refused with the reading each would give.
_LEADING_ZERO = re.compile(r"[-+]?0[0-9_]+")


def _ambiguous_number(loader, node, construct):
    text = loader.construct_scalar(node)
    value = construct(loader, node)
    if ":" in text:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text} is a base-60 number in YAML 1.1 (read as {value}); write the number in "
                        f"decimal, or quote it if it is text", node.start_mark)
    if _LEADING_ZERO.fullmatch(text):
        raise yaml.constructor.ConstructorError(
            None, None, f"{text} has a leading zero, which YAML 1.1 reads as octal ({value}) and YAML 1.2 as "
                        f"decimal ({int(text.replace('_', ''), 10)}); write it without the leading zero",
            node.start_mark)
    return value


_UniqueKeyLoader.add_constructor(
    "tag:yaml.org,2002:int", lambda loader, node: _ambiguous_number(loader, node, yaml.SafeLoader.construct_yaml_int))
_UniqueKeyLoader.add_constructor(
    "tag:yaml.org,2002:float",
    lambda loader, node: _ambiguous_number(loader, node, yaml.SafeLoader.construct_yaml_float))


def _short(value, limit: int = 60) -> str:
    """repr(value) on one line, cut to about `limit` characters."""
    return _clip(repr(value), limit)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _value_problem(e: ValueError) -> str:
    if "integer string conversion" in str(e):
        return "a number has more than 4,300 digits; no hetplan field needs that many"
    return _clip(str(e), 160)


def parse_yaml(text: str, source: str):
    """yaml.safe_load, plus a refusal of repeated keys and of oversized or too deeply nested
    documents; errors give the line."""
    if len(text) > MAX_YAML_CHARS:
        raise InputError(source, f"is {len(text):,} characters of YAML, over the limit of {MAX_YAML_CHARS:,} "
                                 f"(cluster and catalog files take a few thousand; write a large plan as JSON)")
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        if "maximum nesting depth" in str(problem):       # libyaml's own limit (1,000 levels)
            raise InputError(source, "is nested too deeply; hetplan's formats need at most a few levels") from None
        if "invalid Unicode character escape" in str(problem):     # libyaml's word for what _check_text refuses
            raise InputError(source, f"holds an escape that is no Unicode character{where} (a lone surrogate such as "
                                     f"\\ud800, or one past \\U0010FFFF): that is not text; write the character "
                                     f"itself or its full surrogate pair") from None
        raise InputError(source, f"invalid YAML{where}: {_clip(str(problem), 200)}") from None
    except RecursionError:
        raise InputError(source, "is nested too deeply; hetplan's formats need at most a few levels") from None
    except ValueError as e:                       # e.g. an integer of more than 4,300 digits
        raise InputError(source, f"invalid YAML: {_value_problem(e)}") from None
    check_document_size(data, source)
    return data


def _refuse_repeated_keys(pairs: list) -> dict:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key {_short(key)} appears twice in one object")
        seen.add(key)
    return dict(pairs)


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number; write a finite number")


def parse_json(text: str, source: str):
    """json.loads, refusing repeated keys, NaN and Infinity, and oversized or deep documents."""
    try:
        data = json.loads(text, object_pairs_hook=_refuse_repeated_keys, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise InputError(source, f"invalid JSON at line {e.lineno}: {e.msg}") from None
    except RecursionError:
        raise InputError(source, "is nested too deeply; hetplan's formats need at most a few levels") from None
    except ValueError as e:                       # repeated key, NaN, or an integer of over 4,300 digits
        raise InputError(source, f"invalid JSON: {_value_problem(e)}") from None
    check_document_size(data, source)
    return data


def read_mapping(path: str | Path) -> tuple[dict, str]:
    """The top-level mapping of a YAML (or, by extension, JSON) file, and the name to report it by."""
    path = Path(path)
    source = str(path)
    text = _read_text(path)
    data = parse_json(text, source) if path.suffix.lower() == ".json" else parse_yaml(text, source)
    if not isinstance(data, dict):
        raise InputError(source, f"must hold a mapping of keys to values at the top level, got {type(data).__name__}")
    return data, source
