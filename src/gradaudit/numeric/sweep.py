"""Finite differences along one line, with an error bound that covers rounding, truncation and kinks.

Along the line p(t) = z + t v, `phi(t)` is the projected output u·f(p(t)) and `lin(t)` = <g, p(t) - z> the
change autodiff predicts (g = the gradient TensorFlow computed at z, p(t) the point actually evaluated,
so the rounding of z + t v does not count as an error). The discrepancy psi(t) = phi(t) - phi(0) - lin(t)
has psi'(0) = (true derivative) - (autodiff derivative): zero when the gradient is right.

Central differences r(h) = (psi(h) - psi(-h)) / 2h carry truncation error O(h^2) and rounding error
sigma / h (in float32 the error grows as the step shrinks). The sweep evaluates a ladder of
steps. sigma is measured from the residuals of a cubic fit of psi at the smallest steps; truncation is
estimated from how far each estimate (plain, and Richardson-extrapolated) is from the next larger step,
and whether the smaller steps agree with it. The estimate kept is the one with the smallest bound.
Kinks (ReLU, max-pool, abs) show as an even part psi(h) + psi(-h) that grows like h instead of h^2, or
as noise far above rounding; a discrepancy seen only along such a line is never called a failure.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# How many standard deviations of measured noise a discrepancy must exceed before it counts.
SIGNIFICANCE = 3.0
# Measured noise this many times the rounding floor is not rounding: the line is rough (kinks).
ROUGH = 100.0


@dataclass(frozen=True)
class Ladder:
    """Steps (relative to the magnitude of the point), largest first; all are evaluated unless the
    estimate is decided after `min_steps`."""

    steps: tuple[float, ...]
    min_steps: int


def ladder_for(eps: float, upcast: bool) -> Ladder:
    if upcast:
        # float64: rounding is negligible even at 1e-8, so start small to stay clear of ReLU/max-pool
        # kinks (a deep CNN has millions of them); larger and smaller steps only when undecided.
        return Ladder(steps=(1e-7, 2.5e-8, 4e-7, 6.25e-9, 1.6e-6), min_steps=2)
    # Native low precision: the rounding-optimal step for Richardson-extrapolated central differences
    # is about eps^(1/5); start one step above it (the truncation estimate of a step needs a larger
    # one) and halve six times, so the noise fit and the extrapolation have room.
    top = min(0.2, 2 * eps ** 0.2)
    return Ladder(steps=tuple(top / 2 ** k for k in range(7)), min_steps=7)


@dataclass(frozen=True)
class Floor:
    """The discrepancy never significant: `terms` times the magnitude of the directional derivative's terms (rounding
    accumulates over them), plus `value` times the derivative itself (the precision the model's own dtype gives the
    result: the float64 copy of a float32 model keeps its float32 constants and approximations). A plain float is
    `terms` alone."""

    terms: float
    value: float = 0.0


def allowance(floor: float | Floor, est: Estimate) -> float:
    """The absolute discrepancy `floor` allows `est`."""
    if isinstance(floor, Floor):
        return floor.terms * est.scale + floor.value * abs(est.numeric)
    return floor * est.scale


@dataclass
class Estimate:
    """What a sweep says about the discrepancy psi'(0) = numeric - autodiff directional derivative."""

    delta: float  # best estimate of psi'(0)
    bound: float  # error bound of `delta` (truncation + rounding + autodiff rounding)
    step: float  # the step the estimate comes from
    sigma: float  # measured noise of phi
    scale: float  # S: magnitude of the autodiff directional derivative's terms
    autodiff: float  # A = <g, v>
    flat: bool  # phi does not move along the line (beyond noise) while autodiff says it should
    jumpy: bool  # phi jumps: differences do not shrink with the step
    kinky: bool  # no window of steps around the estimate looks smooth (kinks at every scale)
    evaluations: int
    nonfinite: bool = False  # the outputs became NaN or Inf along the line

    @property
    def rel_error(self) -> float:
        """|numeric - autodiff| relative to the larger of the two (and of the terms of <g, v>)."""
        denominator = max(self.scale, abs(self.numeric))
        return abs(self.delta) / denominator if denominator > 0 else 0.0

    @property
    def rel_bound(self) -> float:
        return self.bound / self.scale if self.scale > 0 else math.inf

    def rel_threshold(self, floor: float | Floor) -> float:
        """The relative error (`rel_error`, on its scale) above which the discrepancy is more than rounding,
        truncation and the floor explain: finite whenever the gradient or the differences are not zero (a
        gradient that is exactly zero where the forward moves has a bound, though `rel_bound` is infinite)."""
        denominator = max(self.scale, abs(self.numeric))
        return (self.bound + allowance(floor, self)) / denominator if denominator > 0 else math.inf

    @property
    def numeric(self) -> float:
        return self.autodiff + self.delta


@dataclass
class Line:
    """Evaluations of one line. `evaluate(t)` returns (phi(t), lin(t)); `phi0` is phi(0)."""

    evaluate: Callable[[float], tuple[float, float]]
    autodiff: float
    scale: float
    sigma_floor: float  # least possible noise of phi: rounding of the outputs themselves
    phi_norm: float  # sqrt(sum((u*y)^2)): sigma / phi_norm is the forward's relative noise
    low_precision_autodiff: bool  # autodiff ran in float32 or lower: its own rounding counts too
    phi0: float
    points: dict[float, tuple[float, float]] = field(default_factory=dict)  # t -> (phi - phi0, lin)
    evaluations: int = 0
    rounding: float = 0.0  # phi's relative rounding (sigma_floor / phi_norm): what noise_floor scales

    def noise_floor(self) -> float:
        """The least noise of phi: the rounding of the outputs at the base point (sigma_floor), or at the smallest
        steps evaluated, where phi is larger: at a point where every output is zero (inputs × 0) phi(0) rounds to
        nothing but phi(t) does not, and a floor of zero made any line look rough there."""
        small = sorted({abs(t) for t in self.points if t > 0})[:4]
        along = max((abs(self.points[t][0] + self.phi0) for h in small for t in (h, -h) if t in self.points),
                    default=0.0)
        return max(self.sigma_floor, self.rounding * along)

    def add_step(self, h: float) -> None:
        for t in (h, -h):
            phi, lin = self.evaluate(t)
            self.points[t] = (phi - self.phi0, lin)
            self.evaluations += 1


def _chi2_99(k: int) -> float:
    """99% quantile of chi-square with k degrees of freedom (Wilson-Hilferty); 0 dof accepts nothing."""
    if k <= 0:
        return 0.0
    return k * (1 - 2 / (9 * k) + 2.326 * math.sqrt(2 / (9 * k))) ** 3


def _noise(points: dict[float, tuple[float, float]], steps: list[float]) -> float:
    """Std of phi's noise from the residuals of a cubic fit of psi at the four smallest steps (where the
    smooth part is a cubic to well below rounding): 9 points, 5 degrees of freedom."""
    small = sorted(steps)[:4]
    ts = [0.0] + [s * sign for s in small for sign in (1, -1)]
    ys = [0.0] + [points[t][0] - points[t][1] for t in ts[1:]]
    n = len(ts)
    degree = min(3, n - 3)
    if degree < 1:
        return 0.0
    t = np.asarray(ts) / max(small)
    y = np.asarray(ys)
    coeffs, *_ = np.linalg.lstsq(np.vander(t, degree + 1), y, rcond=None)
    residual = y - np.vander(t, degree + 1) @ coeffs
    return float(math.sqrt(float(residual @ residual) / (n - degree - 1)))


def analyse(line: Line) -> Estimate:
    """The estimate of psi'(0) the evaluated steps support best, with its bound, and how the line looks."""
    steps = sorted({abs(t) for t in line.points if t > 0}, reverse=True)
    if not all(math.isfinite(v) for pair in line.points.values() for v in pair):
        return Estimate(delta=math.nan, bound=math.inf, step=steps[-1], sigma=math.nan, scale=line.scale,
                        autodiff=line.autodiff, flat=False, jumpy=False, kinky=True, nonfinite=True,
                        evaluations=line.evaluations)
    measured = _noise(line.points, steps)
    floor = line.noise_floor()
    sigma = max(measured, floor)
    r, even = _differences(line.points, steps)
    candidates = _candidates(steps, r, sigma, _smooth_pairs(steps, even, sigma), _autodiff_rounding(line, sigma))
    if candidates:
        kinky, bound, delta, step = min(candidates)
    else:  # a single step: no way to estimate truncation
        step = steps[-1]
        kinky, delta, bound = True, r[step], math.inf
    # "Noise" far above what rounding the outputs explains is kinks or jumps between the smallest steps;
    # it also hides them from the even-part test.
    kinky = kinky or measured > ROUGH * floor
    return Estimate(delta=delta, bound=bound, step=step, sigma=sigma, scale=line.scale,
                    autodiff=line.autodiff, flat=_flat(line, steps, sigma), jumpy=_jumpy(line, steps, r),
                    kinky=kinky, evaluations=line.evaluations)


def _differences(points: dict[float, tuple[float, float]],
                 steps: list[float]) -> tuple[dict[float, float], dict[float, float]]:
    """For each step h, the central difference r(h) of psi (-> psi'(0) + O(h^2)) and its even part
    psi(h) + psi(-h) (psi'' h^2 when smooth; ~ h at a kink)."""

    def psi(t: float) -> float:
        return points[t][0] - points[t][1]

    r = {h: (psi(h) - psi(-h)) / (2 * h) for h in steps}
    even = {h: psi(h) + psi(-h) for h in steps}
    return r, even


def _smooth_pairs(steps: list[float], even: dict[float, float], sigma: float) -> list[bool]:
    """For each pair of neighbouring steps, whether the even part scales like h^2 between them (up to noise and
    the h^4 term); a kink between or inside them makes it scale like h, or jump."""
    # SIGNIFICANCE sigmas of even(h), which also carries phi(0)'s noise.
    rho_even = SIGNIFICANCE * math.sqrt(6) * sigma
    smooth = []
    for h1, h2 in zip(steps, steps[1:]):
        q2 = (h1 / h2) ** 2
        smooth.append(abs(even[h1] - q2 * even[h2]) <= rho_even * (1 + q2) + 0.5 * abs(even[h1]))
    return smooth


def _autodiff_rounding(line: Line, sigma: float) -> float:
    """The backward pass rounds about as much as the forward (measured by sigma), with some headroom."""
    if line.low_precision_autodiff and line.phi_norm > 0:
        return 10 * SIGNIFICANCE * (sigma / line.phi_norm) * line.scale
    return 0.0


def _candidates(steps: list[float], r: dict[float, float], sigma: float, smooth: list[bool],
                autodiff_err: float) -> list[tuple[bool, float, float, float]]:
    """Plain central differences and Richardson extrapolations as (kinky, bound, estimate, step), each bound
    made of how far it is from its larger neighbour (truncation), from the smaller steps when they disagree
    with it beyond their noise, and its own rounding; kinky when the steps around it do not look smooth."""
    # Rounding bounds: SIGNIFICANCE sigmas of r(h).
    rho = {h: SIGNIFICANCE * math.sqrt(2) * sigma / (2 * h) for h in steps}
    plain = [(r[h], rho[h], h) for h in steps]
    rich = []  # from steps i, i+1
    for h1, h2 in zip(steps, steps[1:]):
        q2 = (h1 / h2) ** 2
        rich.append(((q2 * r[h2] - r[h1]) / (q2 - 1), math.hypot(q2 * rho[h2], rho[h1]) / (q2 - 1), h2))
    candidates = []
    for values, width in ((plain, 0), (rich, 1)):
        for i, (value, rounding, h) in enumerate(values):
            if not i:
                continue  # the largest step's truncation error is unknown
            # The smaller steps must agree with it up to their rounding noise, taken together (chi-square
            # at 1%); if they do not (a trend that has not converged, a kink between the steps), the
            # whole difference counts.
            smaller = [(abs(value - v), rd / SIGNIFICANCE) for v, rd, _ in values[i + 1:]]
            chi2 = sum((d / sd) ** 2 for d, sd in smaller if sd > 0)
            trend = 0.0 if chi2 <= _chi2_99(len(smaller)) else max(d for d, _ in smaller)
            bound = max(abs(value - values[i - 1][0]), trend) + rounding + autodiff_err
            around = smooth[max(i - 1, 0):i + 1 + width]  # the pairs of steps it is made from, and their neighbours
            candidates.append((not all(around), bound, value, h))
    return candidates


def _flat(line: Line, steps: list[float], sigma: float) -> bool:
    """At the smallest steps phi does not move beyond noise, while autodiff predicts it should."""
    return all(
        max(abs(line.points[h][0]), abs(line.points[-h][0])) <= 2 * SIGNIFICANCE * sigma
        and abs(line.autodiff) * h > 4 * SIGNIFICANCE * sigma
        for h in steps[-2:])


def _jumpy(line: Line, steps: list[float], r: dict[float, float]) -> bool:
    """What autodiff does not predict of phi(h) - phi(-h) stays the same as h shrinks (a step in the forward,
    not a slope: a wrong slope would shrink with h)."""
    if len(steps) < 3:
        return False
    rest = [2 * h * r[h] for h in steps[-3:]]
    mean = sum(rest) / 3
    return abs(mean) > 30 * line.noise_floor() and all(abs(x - mean) < 0.3 * abs(mean) for x in rest)


def slope_changes(line: Line, steps: tuple[float, ...]) -> bool | None:
    """Whether the differences along the line change slope within the steps, the evidence of a kink: between
    some pair of neighbouring steps the even part psi(h) + psi(-h) does not scale like h^2 (it grows like h at a
    kink), or the noise is far above rounding. Evaluates the steps not evaluated yet; None when the outputs are
    not finite along the line."""
    for h in steps:
        if h not in line.points:
            line.add_step(h)
    evaluated = sorted({t for t in line.points if t > 0}, reverse=True)
    if len(evaluated) < 2 or not all(math.isfinite(v) for pair in line.points.values() for v in pair):
        return None
    measured = _noise(line.points, evaluated) if len(evaluated) >= 4 else 0.0
    floor = line.noise_floor()
    sigma = max(measured, floor)
    _, even = _differences(line.points, evaluated)
    return measured > ROUGH * floor or not all(_smooth_pairs(evaluated, even, sigma))


def large(est: Estimate, floor: float | Floor) -> bool:
    """The discrepancy is larger than rounding, truncation and the floor can explain."""
    return abs(est.delta) > est.bound + allowance(floor, est)


def classify(est: Estimate, floor: float | Floor, resolution: float) -> str:
    """pass | fail | surrogate | unresolved for one sweep (a fail still needs confirming elsewhere)."""
    if est.nonfinite:
        return "unresolved"
    if large(est, floor):
        if est.kinky or est.jumpy:
            return "unresolved"  # kinks at every step size can fake a steady discrepancy
        return "surrogate" if est.flat else "fail"
    if est.scale == 0.0 and est.bound < math.inf and not est.kinky and not est.jumpy:
        # autodiff says zero along the line, and the forward does not move either; differences that are rough
        # there (a square root at 0: they grow as the step shrinks) settle nothing, and a zero gradient is no pass
        return "pass"
    if est.rel_bound <= resolution and not est.jumpy:
        return "pass"
    return "unresolved"


def run(line: Line, ladder: Ladder, floor: float | Floor, resolution: float) -> Estimate:
    """Evaluate the ladder, stopping once the estimate is decided."""
    est = None
    for i, h in enumerate(ladder.steps):
        line.add_step(h)
        if i + 1 >= ladder.min_steps:
            est = analyse(line)
            if est.nonfinite or classify(est, floor, resolution) != "unresolved":
                break
    assert est is not None
    return est
