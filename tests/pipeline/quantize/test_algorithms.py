"""Each algorithm against its defining property, on a layer whose inputs have outlier channels."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.pipeline.quantize.algorithms import ALGORITHMS, LayerStats, QuantResult, QuantSpec, awq, base, gptq, rtn
from specdec.pipeline.quantize.algorithms.base import round_to_nearest
from specdec.pipeline.quantize.config import Method

K, N, ROWS, BLOCK = 256, 64, 2048, 64
OUTLIERS = [3, 41, 130, 200]


def _layer(seed: int = 0, rank: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Correlated activations (low rank + noise, like a real hidden state) with a few channels x20."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(ROWS, rank)) @ rng.normal(size=(rank, K)) / np.sqrt(rank) + 0.3 * rng.normal(size=(ROWS, K))
    x[:, OUTLIERS] *= 20
    weight = (rng.normal(size=(K, N)) * 0.05).astype(np.float32)
    return x.astype(np.float32), weight


def _stats(x: np.ndarray) -> LayerStats:
    wide = x.astype(np.float64)
    return LayerStats(width=x.shape[1], rows=x.shape[0], xtx=wide.T @ wide, abs_sum=np.abs(wide).sum(axis=0),
                      sample=x[:1024])


def _error(x: np.ndarray, weight: np.ndarray, result: QuantResult) -> float:
    return float(np.linalg.norm(x @ result.effective_weight(BLOCK) - x.astype(np.float64) @ weight))


SPECS = [QuantSpec(4, BLOCK, False), QuantSpec(4, BLOCK, True), QuantSpec(8, BLOCK, False)]


@pytest.mark.parametrize("spec", SPECS)
def test_numpy_rtn_is_bit_identical_to_ort_rtn(spec: QuantSpec) -> None:
    """GPTQ and AWQ share the numpy rounding rule; it must be ORT's, or comparisons mean nothing."""
    _, weight = _layer()
    ours, theirs = round_to_nearest(weight, spec), rtn.quantize(weight, spec)
    assert np.array_equal(ours.codes, theirs.codes)
    assert np.array_equal(ours.scales, theirs.scales) and np.array_equal(ours.zero_points, theirs.zero_points)


@pytest.mark.parametrize("method", [Method.gptq, Method.awq])
@pytest.mark.parametrize("spec", SPECS[:2])
def test_gptq_and_awq_beat_rtn_on_outlier_inputs(method: Method, spec: QuantSpec) -> None:
    """Held-out rows, not the calibration rows: the gain must generalise, and plain rounding fails this."""
    x, weight = _layer(seed=1)
    calib, held = x[: ROWS // 2], x[ROWS // 2:]
    baseline = _error(held, weight, ALGORITHMS[Method.rtn].run(weight, spec, None))
    tuned = _error(held, weight, ALGORITHMS[method].run(weight, spec, _stats(calib)))
    assert tuned < 0.85 * baseline, (method, tuned, baseline)


def test_gptq_error_feedback() -> None:
    """GPTQ's defining property: rounding errors are compensated through the inverse Hessian."""
    x, weight = _layer(seed=2)
    spec = QuantSpec(4, BLOCK, False)
    plain = rtn.quantize(weight, spec)
    result = gptq.quantize(weight, spec, _stats(x))
    assert _error(x, weight, result) <= _error(x, weight, plain)
    assert np.mean(result.codes != plain.codes) > 0.05  # it moved codes away from nearest...
    # ...and it did so through off-diagonal H^-1: with uncorrelated inputs (diagonal H) there is
    # nothing to compensate into, and GPTQ must reduce to round-to-nearest exactly.
    diagonal = LayerStats(width=K, rows=ROWS, xtx=np.diag(np.linspace(1.0, 5.0, K)) * ROWS)
    assert np.array_equal(gptq.quantize(weight, spec, diagonal).codes, plain.codes)


def test_gptq_handles_dead_inputs_and_needs_stats() -> None:
    x, weight = _layer(seed=3)
    x[:, 7] = 0.0  # a channel that is always zero: its Hessian row is empty
    result = gptq.quantize(weight, QuantSpec(4, BLOCK, False), _stats(x))
    assert result.info["dead_inputs"] == 1.0 and np.isfinite(result.scales).all()
    with pytest.raises(ValueError, match="calibration"):
        gptq.quantize(weight, QuantSpec(4, BLOCK, False), None)


def test_awq_searches_activation_aware_scales() -> None:
    """AWQ's defining property: per-input-channel scales from mean |x|, alpha chosen on calibration rows."""
    x, weight = _layer(seed=4)
    spec = QuantSpec(4, BLOCK, False)
    result = awq.quantize(weight, spec, _stats(x))
    assert result.info["alpha"] > 0 and result.info["loss_vs_rtn"] < 1.0
    assert result.input_scale is not None and result.input_scale.shape == (K,)
    # The outlier channels get the largest scales, i.e. the smallest input multipliers 1/s.
    smallest = set(np.argsort(result.input_scale)[: len(OUTLIERS)].tolist())
    assert smallest == set(OUTLIERS)
    expected = 1.0 / awq.channel_scales(_stats(x).mean_abs, result.info["alpha"])
    np.testing.assert_allclose(result.input_scale, expected, rtol=1e-6)


def test_awq_without_outliers_still_never_worse_than_rtn_on_its_rows() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(512, K)).astype(np.float32)
    _, weight = _layer(seed=5)
    stats = _stats(x)
    result = awq.quantize(weight, QuantSpec(4, BLOCK, True), stats)
    assert result.info["loss_vs_rtn"] <= 1.0


def test_awq_on_a_wide_layer_searches_a_column_sample_and_quantizes_every_column(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer too wide for the search budget (a large-vocabulary head) searches alpha on evenly spaced
    columns; the chosen scales then quantize the whole weight, as the full search would with that alpha."""
    x, weight = _layer(seed=4)
    wide = np.concatenate([weight] * 4, axis=1)  # N = 256: the sampled columns see every original one
    spec = QuantSpec(4, BLOCK, False)
    full = awq.quantize(wide, spec, _stats(x))
    monkeypatch.setattr(awq, "_SEARCH_MACS", 128 * K * 32)
    monkeypatch.setattr(awq, "_MIN_COLUMNS", 32)
    sampled = awq.quantize(wide, spec, _stats(x))
    assert sampled.info["search_rows"] == 128 and sampled.info["search_columns"] == 32
    assert full.info["search_columns"] == wide.shape[1]
    assert sampled.codes.shape == full.codes.shape
    assert abs(sampled.info["alpha"] - full.info["alpha"]) <= 0.1
    expected = awq.round_to_nearest(
        (wide * awq.channel_scales(_stats(x).mean_abs, sampled.info["alpha"])[:, None]).astype(np.float32), spec)
    assert np.array_equal(sampled.codes, expected.codes) and np.array_equal(sampled.scales, expected.scales)


@pytest.mark.parametrize("spec", SPECS)
def test_rtn_a_chunk_of_columns_at_a_time_is_bit_identical_to_ort(spec: QuantSpec,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Large heads are rounded in column chunks to bound memory; the chunk edges must not show."""
    _, weight = _layer()
    monkeypatch.setattr(base, "RTN_COLUMNS", 24)  # N = 64: chunks of 24, 24 and 16 columns
    ours, theirs = round_to_nearest(weight, spec), rtn.quantize(weight, spec)
    assert np.array_equal(ours.codes, theirs.codes)
    assert np.array_equal(ours.scales, theirs.scales) and np.array_equal(ours.zero_points, theirs.zero_points)


def test_float32_rounding_is_half_away_from_zero_like_roundf() -> None:
    values = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, 2.4999998, 14.5, 15.499999, -3.5000002, 0.0],
                      np.float32)
    rng = np.random.default_rng(3)
    values = np.concatenate([values, (rng.random(100_000) * 40 - 20).astype(np.float32),
                             np.arange(-40, 40, dtype=np.float32) + np.float32(0.5)])
    reference = np.sign(values.astype(np.float64)) * np.floor(np.abs(values.astype(np.float64)) + 0.5)
    assert np.array_equal(base._roundf(values), reference)
