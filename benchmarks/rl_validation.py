"""The generation model (planner.rl.generation) against published offline inference throughputs.

    python benchmarks/rl_validation.py

Rows: benchmarks/reference/inference_runs.csv, each with its source. The mean output length is the
table's output tokens/s over its requests/s; the mean input (231 tokens) is ShareGPT's under the
Llama 3 tokenizer as vLLM's benchmark_serving samples it (230,969 input and 194,523 output tokens for
1,000 requests in a published run; the ratio of outputs matches these tables' 194); the benchmark
drops prompts over 1,024 tokens and prompt + output over 2,048 (vLLM benchmarks/benchmark_serving.py
sample_sharegpt_requests), so the longest response is taken as 2,048 - 231. Llama 3.1 has Llama 3's
shapes (the catalog's llama-3-8b, llama-3-70b). One replica of `tp` GPUs serves all requests,
which arrive at once (rate inf).
"""
from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from catalog import load_catalog  # noqa: E402
from planner.rl.engines import ROLLOUT_ENGINES  # noqa: E402
from planner.rl.generation import generation  # noqa: E402
from planner.types import Pool  # noqa: E402

ROWS = Path(__file__).resolve().parent / "reference" / "inference_runs.csv"


def rows():
    with open(ROWS, newline="") as f:
        yield from csv.DictReader(f)


def predict(row: dict, catalog) -> float:
    """Predicted output tokens/s of one row."""
    gpu = catalog.gpus[row["gpu"]]
    pool = Pool("bench", gpu, 1, 8, 25e9, 0.0)
    n, tp = int(row["num_prompts"]), int(row["tp"])
    prompt, out = int(row["mean_input_tokens"]), float(row["mean_output_tokens"])
    longest = int(row["max_total_tokens"]) - prompt
    g = generation(catalog.model(row["model"], "model"), pool, tp, n, prompt, out, longest, 1,
                   ROLLOUT_ENGINES[row["engine"]])
    return n * out / g.time_s


def table() -> list[tuple[dict, float, float]]:
    catalog = load_catalog([])
    out = []
    for row in rows():
        pred = predict(row, catalog)
        out.append((row, pred, pred / float(row["output_tokens_per_s"]) - 1))
    return out


def main() -> int:
    results = table()
    print(f"{'engine':8s} {'model':12s} {'gpus':14s} {'published':>10s} {'predicted':>10s} {'error':>7s}")
    for row, pred, err in results:
        print(f"{row['engine']:8s} {row['model']:12s} {row['gpus']}x {row['gpu']:11s} "
              f"{float(row['output_tokens_per_s']):10,.0f} {pred:10,.0f} {err:+7.1%}")
    mean = sum(abs(e) for _, _, e in results) / len(results)
    print(f"mean |error| {mean:.1%}, max |error| {max(abs(e) for _, _, e in results):.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
