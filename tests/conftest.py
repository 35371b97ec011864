"""Shared fixtures: the built-in catalog and small hand-made objects."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def catalog():
    from catalog import load_catalog
    return load_catalog()
