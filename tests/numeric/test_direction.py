"""A check's direction for a scalar source (a 0-d variable, as TFP's betainc gradient model holds): an array,
signed by the gradient, random where the gradient is zero (it was a numpy scalar, and the probes stopped with
an internal error on the third-party fixture tfp_betainc_grad)."""

from __future__ import annotations

import numpy as np

from gradaudit.numeric.checks import Checker


def _checker() -> Checker:
    checker = Checker.__new__(Checker)
    checker.rng = np.random.default_rng(0)
    return checker


def test_a_scalar_source_gets_an_array_direction():
    for gradient in (0.0, -3.0):
        v = _checker().direction(np.float64(2.0), np.float64(gradient))
        assert np.ndim(v) == 0 and v != 0 and (gradient == 0 or np.sign(v) == np.sign(gradient))


def test_directions_follow_the_gradients_sign_and_are_random_where_it_is_zero():
    v = _checker().direction(np.ones(1000), np.r_[np.zeros(500), -np.ones(500)])
    assert (v[500:] < 0).all() and (v[:500] < 0).any() and (v[:500] > 0).any()
