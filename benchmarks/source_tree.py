"""A source tree a benchmark imports from (Megatron-LM, Megatron-DeepSpeed: not packages that install here)."""
from __future__ import annotations

import argparse
from pathlib import Path


def require_module(parser: argparse.ArgumentParser, flag: str, src: str, module: str, hint: str) -> None:
    """End with the parser's usage message, naming `flag` and what would fix it, unless `src` holds `module`
    (dotted: a .py file or a package folder under it), so that a wrong folder is not a traceback."""
    path = Path(src).joinpath(*module.split("."))
    if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
        parser.error(f"{flag} {src}: no {module} there; {hint}")
