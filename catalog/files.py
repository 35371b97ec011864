"""Reading YAML and JSON files safely; every failure is one line naming the file."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from planner.types import InputError

MAX_FILE_BYTES = 10 * 1024 * 1024


def _read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise InputError(str(path), "file not found") from None
    except OSError as e:
        raise InputError(str(path), f"cannot read: {e.strerror}") from None
    if size > MAX_FILE_BYTES:
        raise InputError(str(path), f"file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(str(path), f"cannot read: {e}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key repeated in one mapping (PyYAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
                                 _UniqueKeyLoader.construct_mapping)


def parse_yaml(text: str, source: str):
    """yaml.safe_load, plus a refusal of repeated keys; errors give the line."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(source, f"invalid YAML{where}: {' '.join(str(problem).split())}") from None


def parse_json(text: str, source: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(source, f"invalid JSON at line {e.lineno}: {e.msg}") from None


def read_mapping(path: str | Path) -> tuple[dict, str]:
    """The top-level mapping of a YAML (or, by extension, JSON) file, and the name to report it by."""
    path = Path(path)
    source = str(path)
    text = _read_text(path)
    data = parse_json(text, source) if path.suffix.lower() == ".json" else parse_yaml(text, source)
    if not isinstance(data, dict):
        raise InputError(source, f"must hold a mapping of keys to values at the top level, got {type(data).__name__}")
    return data, source
