"""Per-layer activation statistics from the float graph, for AWQ and GPTQ.

The float graph runs as a probe (pipeline/inputs/calibration.py: each wanted layer input an output, the
graph cut to what those inputs need) over the calibration windows; per input tensor we accumulate
x^T x (GPTQ) and sum |x| plus a capped random sample of rows (AWQ), never all activations.
Layers reading the same tensor (q/k/v, gate/up) share one record. x^T x is K^2 float32, so the
inputs are taken in passes that fit a memory budget, re-running the windows per pass; a pass runs
only the layers up to its last input, so early passes are cheap.

All layers are calibrated on the float model's activations in one go, not sequentially on the
partly quantized model as the GPTQ paper does: one graph run per window serves every layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from specdec.pipeline.engine.graph import Graph
from specdec.pipeline.inputs.calibration import prefill
from specdec.pipeline.quantize.algorithms import ACTIVATIONS, HESSIAN, LayerStats

ROW_SAMPLE = 1024  # AWQ rows kept per layer input
STATS_BUDGET_BYTES = 2 << 30  # x^T x and row samples held at once (8.7 GB peak at 1.24B with 1 GiB)


def plan_passes(wanted: dict[str, frozenset[str]], widths: dict[str, int],
                budget: int = STATS_BUDGET_BYTES) -> list[dict[str, frozenset[str]]]:
    """Split layer inputs into calibration passes whose statistics fit `budget` bytes."""
    passes: list[dict[str, frozenset[str]]] = [{}]
    used = 0
    for name, needs in wanted.items():
        k = widths[name]
        size = (4 * k * k if HESSIAN in needs else 0) + (4 * ROW_SAMPLE * k + 8 * k if ACTIVATIONS in needs else 0)
        if passes[-1] and used + size > budget:
            passes.append({})
            used = 0
        passes[-1][name] = needs
        used += size
    return [p for p in passes if p]


def collect(graph: Graph, wanted: dict[str, frozenset[str]], windows: np.ndarray, seed: int,
            on_window: Callable[[], None] | None = None,
            features: list[np.ndarray] | None = None) -> dict[str, LayerStats]:
    """Accumulate the statistics `wanted` asks for, one prefill per calibration window (`on_window` after each);
    `features`: a feature draft's input per window (calibration.draft_features)."""
    rng = np.random.default_rng(seed)
    names = tuple(wanted)
    stats: dict[str, LayerStats] = {}
    per_window = math.ceil(ROW_SAMPLE / max(len(windows), 1))
    samples: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for index, window in enumerate(windows):
        _, extras = prefill(graph, window, names, with_logits=False,
                            features=features[index] if features is not None else None)
        for name in names:
            rows = extras[name].reshape(-1, extras[name].shape[-1])
            record = stats.get(name) or stats.setdefault(name, LayerStats(width=rows.shape[1]))
            record.rows += rows.shape[0]
            if HESSIAN in wanted[name]:
                # float32, as the reference GPTQ accumulates H: half the bytes of float64, so half the
                # calibration passes (each a prefill of the whole graph: 16 passes of ~2.3 min at the
                # Llama-3.2-1B shape, whose 8192-wide down-projection inputs take 256 MB each)
                block = rows.astype(np.float32, copy=False)
                if record.xtx is None:
                    record.xtx = block.T @ block
                else:
                    record.xtx += block.T @ block
            if ACTIVATIONS in wanted[name]:
                absolute = np.abs(rows.astype(np.float64)).sum(axis=0)
                record.abs_sum = absolute if record.abs_sum is None else record.abs_sum + absolute
                pick = rng.choice(rows.shape[0], size=min(per_window, rows.shape[0]), replace=False)
                samples[name].append(rows[np.sort(pick)].astype(np.float32))
        if on_window is not None:
            on_window()
    for name, parts in samples.items():
        if parts:
            stats[name].sample = np.concatenate(parts)[:ROW_SAMPLE]
    return stats
