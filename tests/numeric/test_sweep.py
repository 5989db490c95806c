"""The step sweep on lines whose truth is known: no TensorFlow, so every regime can be set up exactly."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from gradaudit.numeric import sweep

EPS32, EPS64 = 1.19e-7, 2.22e-16


def noise(t: float, sigma: float) -> float:
    """Deterministic rounding-like noise: a fixed pseudo-random value per point."""
    seed = int.from_bytes(struct.pack("d", t), "little")
    return sigma * float(np.random.default_rng(seed).standard_normal())


def check(f, autodiff: float, eps: float, upcast: bool, sigma: float = 0.0) -> tuple[str, sweep.Estimate]:
    line = sweep.Line(evaluate=lambda t: (f(t) + noise(t, sigma), autodiff * t), autodiff=autodiff,
                      scale=abs(autodiff), sigma_floor=0.5 * eps * abs(f(0.0)) + 1e-300,
                      phi_norm=abs(f(0.0)) + 1e-300, low_precision_autodiff=not upcast, phi0=f(0.0))
    est = sweep.run(line, sweep.ladder_for(eps, upcast), 100 * eps, 1e-2)
    return sweep.classify(est, 100 * eps, 1e-2), est


def smooth(t: float) -> float:
    return 3.0 + math.sin(1.3 * t + 0.4) + 0.5 * math.exp(0.7 * t)


SMOOTH_SLOPE = 1.3 * math.cos(0.4) + 0.35


@pytest.mark.parametrize("eps,upcast,sigma", [(EPS64, True, 1e-16), (EPS32, False, 3e-7)])
def test_right_derivative_passes(eps, upcast, sigma):
    kind, est = check(smooth, SMOOTH_SLOPE, eps, upcast, sigma)
    assert kind == "pass"
    assert est.rel_error < (1e-8 if upcast else 3e-5)


@pytest.mark.parametrize("eps,upcast,sigma,rel", [(EPS64, True, 1e-16, 1e-6), (EPS32, False, 3e-7, 1e-4)])
def test_wrong_derivative_fails(eps, upcast, sigma, rel):
    kind, est = check(smooth, SMOOTH_SLOPE * (1 + rel), eps, upcast, sigma)
    assert kind == "fail"
    assert est.rel_error == pytest.approx(rel, rel=0.3)


def test_kink_at_the_point_is_not_a_failure():
    # ReLU at exactly 0: autodiff takes relu'(0) = 0, central differences average both sides' slopes.
    kind, est = check(lambda t: 2.0 + 0.8 * t + 0.5 * max(t, 0.0), 0.8, EPS64, True, 1e-16)
    assert est.delta == pytest.approx(0.25)  # the discrepancy is real and steady...
    assert kind == "unresolved"  # ...but the even part, growing like h, gives the kink away


def test_kink_inside_the_steps_is_not_a_failure():
    kinked = lambda t: 1.0 + 0.8 * t + 0.5 * max(0.0, t - 3e-4)  # noqa: E731
    kind, _ = check(kinked, 0.8, EPS32, False, 3e-7)
    assert kind in ("pass", "unresolved")


def test_flat_forward_with_a_gradient_is_a_surrogate():
    kind, est = check(lambda t: 1.5, 2.0, EPS64, True, 1e-16)
    assert kind == "surrogate" and est.flat


def test_zero_gradient_and_flat_forward_pass():
    kind, _ = check(lambda t: 1.5, 0.0, EPS64, True, 1e-16)
    assert kind == "pass"


def test_a_jump_inside_every_step_is_not_a_failure():
    step = lambda t: 1.0 + 0.3 * t + (0.01 if t > 1e-5 else 0.0)  # noqa: E731
    kind, est = check(step, 0.3, EPS32, False, 3e-7)
    assert kind == "unresolved" and est.jumpy


def test_noise_is_measured_not_assumed():
    # Noise 1000 times the rounding floor: the sweep measures it and widens its bound instead of failing.
    kind, est = check(smooth, SMOOTH_SLOPE, EPS32, False, 3e-4)
    assert kind != "fail"
    assert 1e-4 < est.sigma < 1e-3


def test_noise_grows_as_the_step_shrinks_seed_003():
    # Seed 003: in float32 the plain central difference gets worse as the step shrinks; the sweep picks
    # a step where rounding and truncation balance, far from the smallest one.
    kind, est = check(lambda t: 2.0 - 0.5 * (1.0 + t) ** 2, -1.0, EPS32, False, 3e-7)
    assert kind == "pass"
    assert est.step > sweep.ladder_for(EPS32, False).steps[-1]


@pytest.mark.parametrize("eps,upcast", [(EPS64, True), (EPS32, False)])
def test_a_smooth_line_through_zero_outputs_is_not_rough(eps, upcast):
    """At a point where every output is 0 (inputs × 0: a cumulative product of zeros), phi(0) is 0 and rounds to
    nothing, but phi(t) does not: the noise floor follows phi at the steps taken. With a floor of zero the line
    looked rough (kinky), and a gradient of 0 where the derivative is 2 was left unresolved instead of failing."""

    def f(t: float) -> float:  # a polynomial through 0 whose rounding is that of its values
        v = 2.0 * t - 0.7 * t * t + 0.3 * t ** 3
        return v + noise(t, 0.5 * eps * abs(v))

    line = sweep.Line(evaluate=lambda t: (f(t), 0.0), autodiff=0.0, scale=0.0, sigma_floor=0.0, phi_norm=0.0,
                      low_precision_autodiff=not upcast, phi0=0.0, rounding=0.5 * eps)
    est = sweep.run(line, sweep.ladder_for(eps, upcast), 100 * eps, 1e-2)
    assert not est.kinky
    assert est.numeric == pytest.approx(2.0, rel=1e-3)
    assert sweep.classify(est, 100 * eps, 1e-2) == "fail"
