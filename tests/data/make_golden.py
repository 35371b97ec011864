"""Record the current outputs of the simulations, evaluate and the search bounds into tests/data/golden.json
(tests/golden_cases.py draws the cases; tests/test_golden.py checks them). Run from anywhere:
    python tests/data/make_golden.py
then review `git diff tests/data/golden.json`: every changed figure should be one the change meant."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden_cases import GOLDEN, make  # noqa: E402

if __name__ == "__main__":
    data = make()
    GOLDEN.write_text(json.dumps(data, separators=(",", ":")) + "\n")
    print(f"{GOLDEN}: {GOLDEN.stat().st_size / 1e6:.2f} MB, "
          + ", ".join(f"{k} {len(v)}" for k, v in data.items()))
