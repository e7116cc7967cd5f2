"""Calibration statistics: passes that fit the memory budget."""

from __future__ import annotations

from specdec.pipeline.quantize import layer_stats
from specdec.pipeline.quantize.algorithms import ACTIVATIONS, HESSIAN


def test_statistics_passes_fit_the_budget() -> None:
    wanted = {"a": frozenset({HESSIAN}), "b": frozenset({HESSIAN, ACTIVATIONS}), "c": frozenset({ACTIVATIONS})}
    widths = {"a": 100, "b": 100, "c": 100}
    assert layer_stats.plan_passes(wanted, widths) == [wanted]
    small = layer_stats.plan_passes(wanted, widths, budget=4 * 100 * 100 + 1)
    assert [list(p) for p in small] == [["a"], ["b"], ["c"]]
