"""The dashboard's smoothing against TensorBoard's own definition, written as its loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dtgui.core.smoothing import Ema, ema


def tensorboard_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar dashboard smoothing: a debiased EMA over the finite points; a
    NaN or infinite point is shown as it is and does not touch the average."""
    last, count, out = 0.0, 0, []
    for value in values:
        if not math.isfinite(value):
            out.append(value)
            continue
        last = last * weight + (1 - weight) * value
        count += 1
        out.append(last / (1 - weight ** count))
    return out


@pytest.mark.parametrize("weight", [0.001, 0.3, 0.6, 0.9, 0.99, 0.999])
@pytest.mark.parametrize("length", [1, 7, 600, 5000])
def test_ema_is_tensorboards(weight: float, length: int) -> None:
    rng = np.random.default_rng(length)
    y = np.exp(-np.arange(length) / 500) * 2 + rng.normal(0, 0.3, length)
    np.testing.assert_allclose(ema(y, weight), tensorboard_ema(y.tolist(), weight),
                               rtol=1e-9, atol=1e-12)


def test_growing_series_smoothed_in_pieces_equals_the_whole() -> None:
    rng = np.random.default_rng(3)
    x = np.arange(1, 20_001, dtype=np.float64)
    y = rng.normal(1, 0.5, len(x)).astype(np.float32)
    smoother = Ema(0.6)
    cuts = [1, 2, 50, 51, 700, 4000, 4001, 19_999, 20_000]
    handed_out = []
    for cut in cuts:
        handed_out.append((cut, smoother.update(x[:cut], y[:cut]).copy()))
    whole = tensorboard_ema(y.astype(np.float64).tolist(), 0.6)
    for cut, values in handed_out:
        np.testing.assert_allclose(values, whole[:cut], rtol=1e-9)


def test_a_nan_point_is_shown_and_skipped_not_spread() -> None:
    y = np.array([1.0, 2.0, np.nan, 3.0, np.inf, 4.0] * 300)
    expected = tensorboard_ema(y.tolist(), 0.6)
    np.testing.assert_allclose(ema(y, 0.6), expected, rtol=1e-9)
    smoother = Ema(0.6)
    x = np.arange(len(y), dtype=np.float64)
    for cut in (3, 5, 900, len(y)):  # the last point seen is a NaN: still the same series
        got = smoother.update(x[:cut], y[:cut])
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    assert np.isfinite(got[-1])


def test_a_rewound_series_is_smoothed_again_into_a_new_array() -> None:
    smoother = Ema(0.9)
    x = np.arange(100, dtype=np.float64)
    first = smoother.update(x, np.ones(100))
    kept = first.copy()
    again = smoother.update(x[:50], np.full(50, 3.0))
    np.testing.assert_allclose(again, 3.0)
    np.testing.assert_array_equal(first, kept)  # what was handed out is never written
