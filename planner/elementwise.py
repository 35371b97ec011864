"""Elementwise maximum and minimum for the formulas that the cost model calls with numbers and the
search with numpy arrays (docs/cost-model.md, "One statement of each formula"): on numbers they
are Python's max, min and math.floor (a float stays a float, as fast as before), on arrays numpy's. The
choice is by type, never by value, so one body serves both."""
from __future__ import annotations

import math

import numpy as np


def maximum(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)


def floor(a):
    return np.floor(a) if isinstance(a, np.ndarray) else math.floor(a)


def minimum(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)
