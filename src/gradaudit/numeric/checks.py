"""Directional gradient checks: which lines to sweep, how to read them, and what to report.

One check compares <grad(u·f), v> with finite differences of u·f along v, for a random signed output
cotangent u and a random direction v. A discrepancy is believed only once it is seen twice, the second
time at a nearby point along a fresh direction (a ReLU or max-pool kink met along one line can look
exactly like a wrong gradient); a failing group of variables is bisected until the variables at fault
are named.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..flow import STOP_OPS
from ..model import (
    ALL_VARIABLES,
    CheckedOutputs,
    CheckStatus,
    Finding,
    NumericResult,
    OpRef,
    Severity,
    UndecidedCause,
)
from ..rules import numeric as rules
from . import sweep
from .domains import Domains
from .runner import VARIABLE_WRITES, Runner
from .sweep import Estimate, Ladder

# Relative size of the move to "a nearby point": far beyond the largest float64 step, small enough to stay
# in the same regime of the model.
NEARBY = 1e-2
# A difference seen at one point only must exceed its bound this many times to stand as a mismatch: within it,
# the bound itself (an estimate of truncation and rounding) may be what is off, and a nearby point decides.
FAR = 10.0
# Balancing weights of the variables of a joint check stay within [1/limit, limit].
BALANCE_LIMIT = {"float64": 10.0, "native": 10.0}
# What to do about an op whose registered gradient TensorFlow makes a surrogate (graph.dataflow.SURROGATE_GRADIENTS,
# read from its attrs: Domains.surrogates), by op type.
TENSORFLOW_SURROGATE_FIXES = {
    "CropAndResize": "If the boxes are meant to be learned, crop with method='bilinear', whose gradient to the boxes "
                     "is the derivative; if they are not, put tf.stop_gradient on them. Nothing to do if the "
                     "bilinear surrogate is intended.",
}
# Op types whose gradient is a deliberate surrogate for a piecewise-constant forward: quantisers, and the
# stop_gradient of a hand-written straight-through estimator.
QUANTISERS = frozenset({
    "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
    "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4",
})


@dataclass
class Settings:
    dtype: str  # the dtype the checks ran in, as reported ("float64", "float32", ...)
    upcast: bool
    eps: float
    ladder: Ladder
    floor: float | sweep.Floor  # discrepancies below floor * scale (sweep.allowance) are never significant
    resolution: float  # a check passes only if its error bound is below resolution * scale
    op_types: frozenset[str]
    custom_gradients: list[OpRef] = field(default_factory=list)  # the usual suspects of a mismatch
    domains: Domains = field(default_factory=Domains)  # what the inputs are made for
    # a failure must also be resolved to `resolution` (its error bound that small): at the stability
    # probes' extreme points (saturated softmax, thousands of ReLU kinks per step) a merely significant
    # discrepancy with a loose bound is truncation error the sweep could not see converge. Only a
    # failure is looked at again at a nearby point there (the cost of a probe point stays one sweep).
    strict: bool = False
    given: frozenset[str] = frozenset()  # inputs read from --inputs
    # (source, output) -> the stop_gradients that cross the pair while other paths connect it (Plan.stopped),
    # and <grad, v> of the model with them made identities (runner.UncutDerivative; None: not available)
    stopped: dict[tuple[str, str], str] = field(default_factory=dict)
    uncut: Callable[..., float] | None = None


@dataclass
class Group:
    """One check: a float input on its own, or a set of trainable variables together."""

    source: str  # result name: the input, a variable, or ALL_VARIABLES for variables together
    outputs: tuple[str, ...]
    inputs: list[str] = field(default_factory=list)
    variables: list[int] = field(default_factory=list)  # indices into Runner.vars


class _Said(NamedTuple):
    """What a failure's finding says beyond the estimate: why a cut on the pair does not explain it (None: no
    cut was checked), (the outputs that disagree on their own, a sentence on each), and whether it was seen
    twice or once (rules.SEEN_TWICE, rules.SEEN_ONCE)."""

    beyond: str | None
    alone: tuple[tuple[str, ...], str]
    seen: str


@dataclass
class Point:
    """The gradient of u·f at a point, and the outputs there (phi(0) of every line through it)."""

    g_in: dict[str, Any]  # tensors, None where TensorFlow finds no gradient
    g_var: list[Any]
    outputs: dict[str, np.ndarray]


@dataclass
class Attempt:
    kind: str  # "pass" | "fail" | "surrogate" | "unresolved"
    est: Estimate
    point: Point
    var_dirs: dict[int, np.ndarray]
    in_dirs: dict[str, np.ndarray] = field(default_factory=dict)
    at: tuple | None = None  # the runner's point (Runner.snapshot()) the line starts from


@dataclass(frozen=True)
class Judgement:
    """What the lines that showed a difference from finite differences (without two confirming failures) say:
    `kink` (an op with a kink on the path and differences that change slope along every such line: the
    difference is the kink's), `none` (neither, along `attempt`'s line, and the difference far beyond its bound:
    the gradient is wrong at that point), `mixed` (one without the other: undecided), `marginal` (a smooth line
    whose difference is within FAR times its bound: a nearby point decides)."""

    kind: str
    evidence: str
    kink_op: OpRef | None
    attempt: Attempt


@dataclass
class Bisection:
    """What splitting a failing check of several variables found: the smallest failing sets, the sets whose
    forward is flat while their gradient is not (surrogates), and whether a set beside a surrogate stayed
    undecided."""

    found: list[tuple[list[int], Estimate]] = field(default_factory=list)
    surrogates: list[tuple[list[int], Estimate]] = field(default_factory=list)
    undecided: bool = False


def _np(t) -> np.ndarray | None:
    return None if t is None else np.asarray(t)


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if np.size(x) else 0.0


def _agree(attempts: list[Attempt], kinked: bool = True) -> None:
    """A failure confirms an earlier one only with the same sign: v follows the gradient's signs, so a
    gradient off by a factor, or with flipped signs, errs the same way along every direction, while the
    error a kink leaves has a random sign. A disagreeing pair of small discrepancies is unresolved where an
    op with a kink lies on the path (`kinked`); large ones (a gradient missing for part of the source, whose
    components get random signs) stand, and so does any pair on a path without a kink."""
    fails = [a for a in attempts if a.kind == "fail"]
    if kinked and len(fails) == 2 and all(a.est.rel_error < 0.5 for a in fails) and (
            (fails[0].est.delta > 0) != (fails[1].est.delta > 0)):
        for a in fails:
            a.kind = "unresolved"


def output_label(outputs: tuple[str, ...], all_float: list[str]) -> str:
    """How a message names the outputs of a check: as the JSON report's `output` does."""
    return CheckedOutputs.of(outputs, all_float).label


class Checker:
    def __init__(self, runner: Runner, settings: Settings, rng: np.random.Generator,
                 progress: Callable[[str], None] | None = None):
        self.runner = runner
        self.s = settings
        self.rng = rng
        self.progress = progress or (lambda _msg: None)
        self.results: list[NumericResult] = []
        self.findings: list[Finding] = []
        self.notes: list[str] = []
        self._zero = runner.prepare({}, {}, {}, [None] * len(runner.vars))
        self.base_outputs: dict[str, np.ndarray] = {}

    # -- the whole run ---------------------------------------------------------------------------
    def run(self, groups: list[Group], random_ops: list[str]) -> None:
        """Check every group at the base point. Outputs that change between two evaluations at the same
        point are left out of every check: they are reported as nondeterministic, never as mismatches."""
        r = self.runner
        self.base_outputs = r.evaluate(0.0, self._zero)[1]
        if not self._all_finite(self.base_outputs):
            self._positive_point()
        everything = tuple(r.float_outputs)
        u_all = self.cotangent(everything)
        outputs, g_in, g_var = r.gradient(self._full(u_all))
        points = {everything: (u_all, Point(g_in, g_var, self.base_outputs))}
        again = [outputs]
        if random_ops:
            # Seeded random kernels repeat themselves in each new graph: ask the same graph twice.
            again.append(r.evaluate(0.0, self._zero)[1])
        unstable = self._nondeterministic(again, groups, random_ops)
        for group in groups:
            outs = tuple(o for o in group.outputs if o not in unstable)
            if not outs:
                self.results.append(NumericResult(
                    source=group.source, outputs=CheckedOutputs.of(group.outputs, r.float_outputs),
                    status="inconclusive", rel_error=None, step=None, dtype=self.s.dtype, evaluations=2,
                    reason="nondeterministic: two evaluations at the same point differ", cause="nondeterministic"))
                continue
            group.outputs = outs
            if outs not in points:
                u = self.cotangent(outs)
                points[outs] = (u, self._gradient(u, self.base_outputs))
            self.check_group(group, *points[outs])

    def _all_finite(self, outputs: dict[str, np.ndarray]) -> bool:
        return all(np.all(np.isfinite(np.asarray(outputs[o], np.float64))) for o in self.runner.float_outputs)

    def _positive_point(self) -> None:
        """The synthesised N(0, 1) point is outside the model's domain (NaN or Inf outputs: the log-density of a
        positive distribution, a square root): the checks run at its absolute values instead when the outputs
        are finite there, and a note says so. Inputs given with --inputs and inputs with a known domain (labels,
        token ids) stay as they are."""
        from .inputs import absolute_point

        r = self.runner
        inputs, var_base = r.snapshot()
        moved, flipped = absolute_point(inputs, r.input_sources, self.s.given, self.s.domains)
        if not flipped:
            return
        r.move_to(moved, var_base)
        outputs = r.evaluate(0.0, self._zero)[1]
        if not self._all_finite(outputs):
            r.move_to(inputs, var_base)  # not that either: the checks say the point is not finite
            return
        self.base_outputs = outputs
        self.notes.append(f"The synthesised inputs give NaN or Inf outputs; the checks ran at their absolute values "
                          f"({', '.join(flipped)}), where the outputs are finite: give real examples with --inputs.")

    def _nondeterministic(self, again: list[dict[str, np.ndarray]], groups: list[Group],
                          random_ops: list[str]) -> set[str]:
        # The gradient graph and the evaluation graph may round differently: count only differences far
        # beyond rounding.
        tolerance = max(1e3 * self.s.eps, 1e-9)
        unstable: dict[str, float] = {}
        for o in self.runner.float_outputs:
            a = np.asarray(self.base_outputs[o], np.float64)
            if not a.size or not np.all(np.isfinite(a)):
                continue
            size = max(float(np.max(np.abs(a))), 1e-30)
            diff = max(float(np.max(np.abs(a - np.asarray(b[o], np.float64)))) for b in again)
            if not diff <= tolerance * size:  # NaN counts as a difference
                unstable[o] = diff / size
        if unstable:
            sources = sorted({g.source for g in groups if set(g.outputs) & set(unstable)})
            ops = f" The model runs stateful random ops ({', '.join(random_ops)})." if random_ops else ""
            writes = sorted(self.s.op_types & VARIABLE_WRITES)
            if writes:  # the state a call leaves is the next call's: the weights a serving call writes (GA112)
                ops += (f" The model writes variables when it runs ({', '.join(writes)}): each evaluation starts from "
                        "the values the one before wrote.")
            worst = max(unstable, key=lambda o: unstable[o])
            self.findings.append(rules.Nondeterministic.finding(
                f"Two evaluations at the same point differ (relative difference {unstable[worst]:.1e} in "
                f"{worst}).{ops} Gradient checks through {', '.join(sorted(unstable))} are not reported.",
                sources=tuple(sources), outputs=tuple(sorted(unstable)),
                fix=None if random_ops or not writes else (
                    "Export a function that does not write its variables (the writes are named by GA112 where "
                    "they are trainable weights): an inference function, not a training step.")))
        return set(unstable)

    # -- cotangents, directions, points ------------------------------------------------------------
    def cotangent(self, outputs: tuple[str, ...]) -> dict[str, np.ndarray]:
        """Random signed cotangent, each output scaled by its own magnitude (never ones: the gradient
        of sum(softmax(x)) is exactly zero)."""
        u = {}
        for o in outputs:
            y = self.base_outputs[o]
            u[o] = self.rng.standard_normal(np.shape(y)) / (_rms(y) or 1.0)
        return u

    def _full(self, u: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {o: u[o] if o in u else np.zeros(np.shape(self.base_outputs[o])) for o in self.runner.float_outputs}

    def _gradient(self, u, outputs: dict[str, np.ndarray]) -> Point:
        _outputs, g_in, g_var = self.runner.gradient(self._full(u))
        return Point(g_in, g_var, outputs)

    def direction(self, value: np.ndarray, gradient: np.ndarray | None = None) -> np.ndarray:
        """A random direction scaled by the value's magnitude. Given the gradient, each component takes
        the gradient's sign (a random one where it is zero) and a random size in [0.5, 1.5): <g, v> has no
        cancellation, so a gradient off by a constant factor shows its full relative error, and every
        component is still probed."""
        dtype = np.float64 if np.asarray(value).dtype == np.float64 else np.float32
        scale = dtype(_rms(value) or 1.0)
        shape = np.shape(value)
        if gradient is None:
            return np.asarray(self.rng.standard_normal(shape, dtype=dtype) * scale)
        v = np.asarray(self.rng.random(shape, dtype=dtype) + dtype(0.5))
        v = np.array(np.copysign(v, np.asarray(gradient, dtype=dtype)))  # an array, also for a scalar source
        zero = np.asarray(gradient == 0)
        if zero.any():
            v[zero] *= self.rng.choice(np.array([-1, 1], dtype=dtype), size=int(zero.sum()))
        return v * scale

    def _balanced(self, group: Group, point: Point) -> dict[int, np.ndarray]:
        """Directions for the group's variables, weighted so that each variable contributes about as
        much to <g, v>: a large variable must not hide a small one's error."""
        r = self.runner
        g = {i: _np(point.g_var[i]) for i in group.variables}
        raw = {i: self.direction(np.asarray(r.var_base[i]), g[i]) for i in group.variables}
        # v follows g's signs, so |g v| summed is <|g|, |v|>: one dot product per variable.
        size = {i: _weight(g[i], raw[i]) for i in group.variables}
        positive = [s for s in size.values() if s > 0]
        if len(raw) == 1 or not positive:
            return raw
        target = float(np.median(positive))
        limit = BALANCE_LIMIT["float64" if self.s.upcast else "native"]
        weights = {i: float(np.clip(target / size[i], 1 / limit, limit)) if size[i] > 0 else limit
                   for i in group.variables}
        # No variable moves by more than the step (relative to its magnitude): the line stays as close
        # to linear as an input's.
        top = max(weights.values())
        return {i: raw[i] * raw[i].dtype.type(weights[i] / top) for i in group.variables}

    def _nearby(self, group: Group, u, snapshot) -> Point:
        r = self.runner
        inputs, var_base = dict(snapshot[0]), list(snapshot[1])
        for n in group.inputs:
            value = np.asarray(inputs[n])
            inputs[n] = value + NEARBY * self.direction(value)
        for i in group.variables:
            value = np.asarray(var_base[i])
            var_base[i] = value + NEARBY * self.direction(value)
        r.move_to(inputs, var_base)
        outputs = r.evaluate(0.0, self._zero)[1]
        return self._gradient(u, outputs)

    # -- one line --------------------------------------------------------------------------------
    def _phi(self, u: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> float:
        return float(sum(np.sum(u[o] * np.asarray(outputs[o], dtype=np.float64)) for o in u))

    def _on_line(self, u, point: Point, in_dirs: dict[str, np.ndarray], var_dirs: dict[int, np.ndarray],
                 examine: Callable[[sweep.Line], Any]) -> Any:
        r = self.runner
        terms = [(_np(point.g_in[n]), d) for n, d in in_dirs.items()]
        terms += [(_np(point.g_var[i]), d) for i, d in var_dirs.items()]
        products = [g * d for g, d in terms if g is not None]
        autodiff = float(sum(np.sum(p, dtype=np.float64) for p in products))
        scale = float(sum(np.sum(np.abs(p), dtype=np.float64) for p in products))
        prepared = r.prepare(in_dirs, var_dirs, point.g_in, point.g_var)
        phi_norm = float(np.sqrt(sum(np.sum(np.square(u[o] * np.asarray(point.outputs[o], np.float64)))
                                     for o in u)))

        def evaluate(t: float) -> tuple[float, float]:
            lin, outputs = r.evaluate(t, prepared)
            return self._phi(u, outputs), lin

        line = sweep.Line(evaluate=evaluate, autodiff=autodiff, scale=scale,
                          sigma_floor=0.5 * self.s.eps * phi_norm, phi_norm=phi_norm,
                          low_precision_autodiff=not self.s.upcast, phi0=self._phi(u, point.outputs),
                          rounding=0.5 * self.s.eps)
        try:
            return examine(line)
        finally:
            if var_dirs:
                r.restore()

    def sweep_line(self, u, point: Point, in_dirs: dict[str, np.ndarray],
                   var_dirs: dict[int, np.ndarray]) -> Estimate:
        return self._on_line(u, point, in_dirs, var_dirs,
                             lambda line: sweep.run(line, self.s.ladder, self.s.floor, self.s.resolution))

    def _slope_changes(self, u, attempt: Attempt) -> bool | None:
        """Whether the differences along the attempt's line change slope within the ladder's steps (the
        evidence of a kink met there); the runner is moved to the attempt's point and left there."""
        assert attempt.at is not None
        self.runner.move_to(*attempt.at)
        return self._on_line(u, attempt.point, attempt.in_dirs, attempt.var_dirs,
                             lambda line: sweep.slope_changes(line, self.s.ladder.steps))

    def _attempt(self, group: Group, u, point: Point) -> Attempt:
        inputs = self.runner.inputs
        in_dirs = {n: self.direction(np.asarray(inputs[n]), _np(point.g_in[n])) for n in group.inputs}
        var_dirs = self._balanced(group, point)
        at = self.runner.snapshot()
        est = self.sweep_line(u, point, in_dirs, var_dirs)
        kind = sweep.classify(est, self.s.floor, self.s.resolution)
        if kind == "fail" and self.s.strict and not est.rel_bound <= self.s.resolution:
            kind = "unresolved"
        return Attempt(kind, est, point, var_dirs, in_dirs, at)

    # -- one group -------------------------------------------------------------------------------
    def check_group(self, group: Group, u, point: Point) -> None:
        r = self.runner
        self.progress(f"checking {group.source} -> {output_label(group.outputs, r.float_outputs)}")
        if not self._finite_at(u, point, group):
            self.results.append(NumericResult(
                source=group.source, outputs=CheckedOutputs.of(group.outputs, r.float_outputs),
                status="inconclusive", rel_error=None, step=None, dtype=self.s.dtype, evaluations=2,
                reason="the outputs or the gradient are NaN or Inf at the checked point (numerical "
                       "stability)" + ("" if self.s.given else
                                    "; if the model's real inputs avoid that, pass them with --inputs"),
                cause=None if self.s.given else "synthesised_inputs"))
            return
        snapshot = r.snapshot()
        start = (snapshot, point)
        evaluations = 1  # the gradient at the base point
        attempts: list[Attempt] = []
        try:
            for _ in range(3):
                if attempts:
                    # Confirm elsewhere: a nearby point and a fresh direction, so that kinks met along
                    # the first line are not met again.
                    point = self._nearby(group, u, snapshot)
                    evaluations += 2
                attempts.append(self._attempt(group, u, point))
                evaluations += attempts[-1].est.evaluations
                _agree(attempts, self.s.domains.kink_on(self._sources(group), group.outputs)[0])
                kinds = [a.kind for a in attempts]
                if kinds[-1] == "pass" or kinds.count("fail") == 2 or kinds.count("surrogate") == 2:
                    break
                if self.s.strict and kinds[-1] != "fail":  # elsewhere, only a failure is worth a second look
                    break
            self._report(group, attempts, evaluations, u, start)
        finally:
            if len(attempts) > 1:
                r.move_to(*snapshot)

    def _finite_at(self, u, point: Point, group: Group) -> bool:
        if not np.isfinite(self._phi(u, point.outputs)):
            return False
        grads = [point.g_in[n] for n in group.inputs] + [point.g_var[i] for i in group.variables]
        return all(g is None or np.all(np.isfinite(np.asarray(g))) for g in grads)

    def _report(self, group: Group, attempts: list[Attempt], evaluations: int, u, start: tuple) -> None:
        """The check's row and findings from its attempts; `start`: (the runner's snapshot, the Point) it began at."""
        kinds = [a.kind for a in attempts]
        est = attempts[-1].est
        checked = CheckedOutputs.of(group.outputs, self.runner.float_outputs)

        def result(status: CheckStatus, reason: str | None, source: str = group.source, e: Estimate = est,
                   evals: int = evaluations, cause: UndecidedCause | None = None) -> NumericResult:
            return NumericResult(source=source, outputs=checked, status=status, rel_error=_finite(e.rel_error),
                                 step=e.step, dtype=self.s.dtype, evaluations=evals, reason=reason,
                                 bound=_finite(e.rel_threshold(self.s.floor)), cause=cause)

        judged = self._judge_differences(group, u, attempts)
        if judged is not None and judged.kind == "none":
            # no op on the path has a kink and the differences along the line are smooth: the difference is
            # the gradient's at that point, whatever a nearby point says (TensorFlow's SVD gradient at repeated
            # singular values, cumprod's where a factor is zero)
            assert judged.attempt.at is not None
            self.runner.move_to(*judged.attempt.at)
            self._report_failure(group, [judged.attempt], evaluations, u, result, once=judged.evidence)
        elif kinds[-1] == "pass":
            self._report_pass(group, attempts, judged, result)
        elif kinds.count("surrogate") == 2 or (
                "surrogate" in kinds and "fail" not in kinds and self.s.op_types & (QUANTISERS | STOP_OPS)):
            # Confirmed twice, or once where the model holds the ops straight-through estimators use.
            self._report_surrogate(group, attempts, result)
        elif kinds.count("fail") == 2:
            self._report_failure(group, attempts, evaluations, u, result)
        elif not self._each_apart(group, u, start):
            self._report_unresolved(group, attempts, judged, result)

    def _each_apart(self, group: Group, u, start: tuple) -> bool:
        """A check over several outputs that did not settle, at the numeric checks' own point: each output checked
        as a check of its own from where it began, which decides what the outputs together did not (a bilinear
        crop beside a nearest one whose jumps leave the sum undecided), with the evidence a model of that output
        alone gives. False, and nothing done, for one output or at a probe point (strict: a probe point's cost
        stays one sweep)."""
        if len(group.outputs) < 2 or self.s.strict:
            return False
        snapshot, point = start
        self.runner.move_to(*snapshot)
        for o in group.outputs:
            alone = {o: u[o]}
            self.check_group(replace(group, outputs=(o,)), alone, self._gradient(alone, point.outputs))
        return True

    def _report_pass(self, group: Group, attempts: list[Attempt], judged: Judgement | None, result) -> None:
        """The last line passed: a pass, unless a discrepancy seen first is not explained or nothing was compared."""
        kink_op = _kink_label(judged)
        if judged is not None and judged.kind == "mixed":
            self.results.append(replace(result(
                "inconclusive", f"passed at a nearby point, but the discrepancy seen first (rel. error "
                f"{judged.attempt.est.rel_error:.1e}) is not explained: {judged.evidence}"),
                evidence=judged.evidence, kink_op=kink_op))
            return
        reason = None
        if judged is not None:  # a kink or a marginal difference, with its evidence
            reason = (f"passed at a nearby point; the discrepancy seen first (rel. error "
                      f"{judged.attempt.est.rel_error:.1e}) is "
                      f"{'a kink' if judged.kind == 'kink' else 'marginal'}: {judged.evidence}")
        elif len(attempts) > 1:
            reason = (f"passed at a nearby point; along {len(attempts) - 1} earlier line(s) the "
                      f"difference quotients did not settle, without a discrepancy beyond their error bound")
        status: CheckStatus = "pass"
        cause: UndecidedCause | None = None
        # not a probe point; a rough line whose differences agree with the gradient (a tie of a maximum: TensorFlow's
        # gradient is the symmetric subgradient) is a kink the nearby point's pass stands for
        unsettled = (judged is None and len(attempts) > 1 and bool(self.s.given) and not self.s.strict
                     and self._far_off(attempts[:-1]))
        if unsettled:
            # the inputs given are the point asked about (a degenerate matrix, a tie, a square root at 0): a nearby
            # point that passes says nothing of a gradient there, where the differences did not settle (a jump, no
            # derivative)
            status = "inconclusive"
            reason = (f"at the inputs given the difference quotients did not settle along {len(attempts) - 1} "
                      "line(s) (the forward may jump there: no derivative); a nearby point passes, which does not "
                      "decide the inputs given")
        elif attempts[-1].est.scale == 0.0:  # nothing was compared: say so rather than pass
            status = "inconclusive"
            # synthesised inputs may mask everything out, which real examples decide
            cause = None if self.s.given else "synthesised_inputs"
            reason = ("gradient and finite differences are both zero at the checked point"
                      + (" (the inputs given may mask everything out)" if self.s.given else
                         " (synthesised inputs may mask everything out; give real examples with --inputs)"))
            if self._missing(group, attempts[-1].point):
                self.notes.append(
                    f"{group.source}: the static pass found a gradient path to {self._outputs_text(group)}; "
                    f"TensorFlow returns no gradient and the outputs do not move with it at the checked point.")
        self.results.append(replace(result(status, reason, cause=cause), evidence=judged.evidence if judged else None,
                                    kink_op=kink_op, unsettled=unsettled))

    def _far_off(self, attempts: list[Attempt]) -> bool:
        """Whether some line's differences are off the gradient by more than the resolution: differences that grow
        as the step shrinks (a square root at 0) or jump (a repeated eigenvalue's eigenvector), not a kink's
        symmetric difference."""
        return any(not a.est.nonfinite and a.est.rel_error > self.s.resolution for a in attempts)

    def _report_surrogate(self, group: Group, attempts: list[Attempt], result) -> None:
        """A surrogate gradient: the forward is flat along the line while the gradient is not. Where the model
        holds no quantiser or stop_gradient (how a straight-through estimator is written) and an op whose
        registered gradient TensorFlow makes a surrogate lies on the path, that op is named and the finding is a
        warning: a gradient that is not the derivative, which the model's author did not write."""
        est = next(a.est for a in attempts if a.kind == "surrogate")
        self.results.append(result(
            "inconclusive", f"surrogate gradient: the forward is flat along the direction (numeric "
            f"derivative {est.numeric:.2e}) while the gradient is not ({est.autodiff:.2e})", e=est))
        made = self._tensorflow_surrogate(group)
        self.findings.append(self._surrogate_finding(made, rules.SurrogateGradient.finding(
            f"The gradient of {self._outputs_text(group)} with respect to {self._describe(group)} is a surrogate: "
            f"the forward pass is piecewise constant along a random direction (derivative {est.numeric:.2e}) "
            f"while TensorFlow's gradient is {est.autodiff:.2e}, as with a straight-through estimator.",
            sources=self._sources(group), outputs=group.outputs)))

    def _tensorflow_surrogate(self, group: Group) -> OpRef | None:
        """Where the model writes no straight-through estimator (no quantiser, no stop_gradient): an op on the
        group's paths whose registered gradient, as its attrs configure it, TensorFlow makes a surrogate
        (Domains.surrogates), or None."""
        if self.s.op_types & (QUANTISERS | STOP_OPS):
            return None
        made = self.s.domains.on_path(list(self.s.domains.surrogates), self._sources(group), group.outputs)
        return made[0] if made else None

    def _surrogate_finding(self, made: OpRef | None, finding: Finding) -> Finding:
        """A GA203 finding, made a warning naming `made` (TensorFlow's own surrogate, not the model's author's) with
        what it does and the fix, when there is one."""
        if made is None:
            return finding
        return replace(finding, op=made, severity=Severity.WARNING,
                       fix=TENSORFLOW_SURROGATE_FIXES.get(made.op_type, finding.fix),
                       message=f"{finding.message} The model writes no straight-through estimator (no quantiser, no "
                               f"stop_gradient); on the path, {made.label}: {self.s.domains.surrogates[made]}.")

    def _report_unresolved(self, group: Group, attempts: list[Attempt], judged: Judgement | None,
                           result) -> None:
        """Neither a pass nor a confirmed failure: inconclusive, and a surrogate where a jumpy forward meets the
        ops of one."""
        # at the inputs given (the point asked about), differences that are rough along every line leave that
        # point undecided, whatever other points decide: there may be no derivative there (a square root at 0)
        rough_everywhere = all(a.est.kinky or a.est.jumpy for a in attempts)
        self.results.append(replace(result("inconclusive", self._unresolved_reason(attempts, judged)),
                                    evidence=judged.evidence if judged else None, kink_op=_kink_label(judged),
                                    unsettled=rough_everywhere and bool(self.s.given) and not self.s.strict
                                    and self._far_off(attempts)))
        # Quantised forwards jump at every step size (many elements cross quantisation levels): with
        # a quantiser or a straight-through stop_gradient in the model, that is its surrogate.
        jumps = any(a.est.jumpy for a in attempts)
        rough = jumps or any(a.est.kinky for a in attempts)
        ops = self.s.op_types & ((QUANTISERS if rough else frozenset()) | (STOP_OPS if jumps else frozenset()))
        if ops:
            self.findings.append(rules.SurrogateGradient.finding(
                f"The forward pass from {self._describe(group)} to {self._outputs_text(group)} jumps along random "
                f"directions and the model uses {', '.join(sorted(ops))}: its gradient is a surrogate, "
                f"not a derivative, and it cannot be checked numerically.",
                sources=self._sources(group), outputs=group.outputs))
        elif rough and not self.s.strict and (made := self._tensorflow_surrogate(group)) is not None:
            # the same evidence where the path holds an op whose registered gradient TensorFlow makes a surrogate
            # (a nearest crop whose samples cross pixel edges along the line), at the numeric checks' own point
            self.findings.append(self._surrogate_finding(made, rules.SurrogateGradient.finding(
                f"The forward pass from {self._describe(group)} to {self._outputs_text(group)} is rough along random "
                f"directions (its difference quotients do not settle) where TensorFlow's registered gradient on the "
                f"path is a surrogate, not a derivative: it cannot be checked numerically.",
                sources=self._sources(group), outputs=group.outputs)))

    def _differs(self, a: Attempt) -> bool:
        """A difference from finite differences beyond the bound was measured along the attempt's line: a
        failure, or one left unresolved because the line is rough (kinks or jumps seen along it). A difference
        left unresolved at a probe point because its bound is loose is not one (truncation not seen to
        converge)."""
        return a.kind == "fail" or (a.kind == "unresolved" and not a.est.nonfinite and (a.est.kinky or a.est.jumpy)
                                    and sweep.large(a.est, self.s.floor))

    def _judge_differences(self, group: Group, u, attempts: list[Attempt]) -> Judgement | None:
        """What explains the differences seen along lines without two confirming failures (None: no line
        showed one, or two failures confirm each other). A kink needs both an op that has one on a forward
        path from the group's sources to its outputs, and differences that change slope along the line."""
        seen = [a for a in attempts if self._differs(a)]
        if not seen or [a.kind for a in attempts].count("fail") == 2:
            return None
        kinked, op = self.s.domains.kink_on(self._sources(group), group.outputs)
        said = self._outputs_text(group)
        where = f"on the path from {self._describe(group)} to {said}"
        verdicts = [self._verdict(u, a, op, kinked, where) for a in seen]
        for kind in ("none", "mixed", "marginal", "kink"):
            for a, (k, evidence) in zip(seen, verdicts):
                if k == kind:
                    return Judgement(kind, evidence, op, a)
        return None

    def _verdict(self, u, a: Attempt, op, kinked: bool, where: str) -> tuple[str, str]:
        """(kind, evidence) of one line that showed a difference: Judgement's kinds, from whether an op with a
        kink lies on the path (`op`, `kinked`) and whether the differences change slope along the line."""
        slope = a.est.kinky or a.est.jumpy or bool(self._slope_changes(u, a))
        threshold = a.est.rel_threshold(self.s.floor)
        if not slope and a.est.rel_error <= FAR * threshold:
            return ("marginal", f"the difference (rel. error {a.est.rel_error:.1e}) is within {FAR:g} "
                                f"times its error bound ({threshold:.1e}) along a smooth line: the bound, "
                                f"an estimate, may be what is off there")
        if op is not None and slope:
            return ("kink", f"{op.label} has a kink {where}, and the differences along the line "
                            f"change slope across it")
        if not kinked and not slope:
            return ("none", f"no op with a kink (ReLU, abs, max, clip, floor...) lies {where} and the "
                            f"differences along the line do not change slope: the function is smooth "
                            f"there and its gradient is wrong at that point (the second point this check "
                            f"tried agreed, so it is not confirmed at two points; the rows at other points are "
                            f"their own)")
        if slope:
            return ("mixed", "the differences along the line change slope, but no op with a kink "
                             + (f"lies {where}" if self.s.domains.kinks is not None else
                                f"{where} can be named without the static pass's graph"))
        if op is not None:
            return ("mixed", f"{op.label} has a kink {where}, but the differences along the line do "
                             f"not change slope")
        return ("mixed", f"the differences along the line do not change slope, but without the "
                         f"static pass's graph an op with a kink {where} cannot be ruled out")

    def _unresolved_reason(self, attempts: list[Attempt], judged: Judgement | None = None) -> str:
        if judged is not None and judged.kind in ("mixed", "marginal"):
            return (f"a discrepancy (rel. error {judged.attempt.est.rel_error:.1e}) seen at one point was not "
                    f"confirmed at another and is not explained: {judged.evidence}; {len(attempts)} points tried")
        if any(a.est.nonfinite for a in attempts):
            why = "the outputs become NaN or Inf along the direction (numerical stability)"
        elif any(a.est.jumpy for a in attempts):
            why = "the forward jumps along the direction (a discontinuity or quantisation)"
        elif any(a.kind == "fail" for a in attempts):
            worst = max(a.est.rel_error for a in attempts if a.kind == "fail")
            why = f"a discrepancy (rel. error {worst:.1e}) seen at one point was not confirmed at another"
        elif attempts[-1].est.rel_bound >= 1:
            why = ("the difference quotients do not converge: their error bound is larger than the derivative "
                   "itself (a saturated output whose gradient is about zero here, or kinks)")
        else:
            why = (f"the difference quotients do not converge (error bound {attempts[-1].est.rel_bound:.1e} "
                   f"relative: kinks or rounding noise in {self.s.dtype})")
        return f"{why}; {len(attempts)} point{'s' if len(attempts) > 1 else ''} tried"

    def _missing(self, group: Group, point: Point) -> list[str]:
        names = [n for n in group.inputs if point.g_in.get(n) is None]
        names += [self.runner.var_names[i] for i in group.variables if point.g_var[i] is None]
        return names

    @staticmethod
    def _outputs_text(group: Group) -> str:
        return group.outputs[0] if len(group.outputs) == 1 else "outputs " + ", ".join(group.outputs)

    def _describe(self, group: Group) -> str:
        if group.source != ALL_VARIABLES:
            return group.source
        return f"the {len(group.variables)} trainable variables"

    def _variable_names(self, idx: list[int]) -> list[str]:
        return [self.runner.var_names[i] for i in idx]

    def _sources(self, group: Group) -> tuple[str, ...]:
        return tuple(group.inputs) if group.inputs else tuple(self._variable_names(group.variables))

    def _report_failure(self, group: Group, attempts: list[Attempt], evaluations: int, u, result,
                        once: str | None = None) -> None:
        """A confirmed failure (two points), or (`once`, its evidence) a failure seen at one point where no kink
        explains it: `attempts` then holds that attempt alone, and the runner sits at its point."""
        failed = [a for a in attempts if a.kind == "fail"] if once is None else list(attempts)
        confirming = failed[-1]  # the runner still sits at its point
        settled, beyond, kinds = self._settled_before(group, failed[0].est, confirming, evaluations, u, result)
        if settled:
            return
        culprits: list[tuple[list[int], Estimate]] = []
        if len(group.variables) > 1:
            split, spent = self._bisect(group, u, confirming)
            evaluations += spent
            if not split.found and split.surrogates:
                self._report_split_surrogate(group, split, failed[0].est, evaluations, result)
                return
            culprits = split.found
            if split.surrogates:  # beside the failing variables, the ones whose gradient is an estimator
                self.findings.append(self._split_surrogate_finding(group, split))
        names = self._variable_names
        pinned = [n for idx, _ in culprits for n in names(idx)]
        said = _Said(beyond, self._outputs_alone(kinds),
                     rules.SEEN_TWICE if once is None else rules.SEEN_ONCE)
        reason = _failure_reason(once, pinned, beyond)
        row = replace(result("fail", reason, e=failed[0].est, evals=evaluations), evidence=once)
        self.results.append(replace(row, expected_by="") if beyond else row)  # "": no cut explains it
        if group.inputs:
            self._mismatch(group, group.inputs, failed[0].est, confirming.point, None, said)
            return
        for idx, e in culprits or [(group.variables, failed[0].est)]:
            if len(idx) == 1 and len(group.variables) > 1:
                self.results.append(replace(result("fail", None, source=names(idx)[0], e=e, evals=e.evaluations),
                                            evidence=once))
            self._mismatch(group, names(idx), e, confirming.point, idx, said)

    def _settled_before(self, group: Group, est: Estimate, confirming: Attempt, evaluations: int, u, result
                        ) -> tuple[bool, str | None, dict[str, tuple[str, Estimate]]]:
        """What decides a failing check before it is a mismatch: labels that may not be a distribution, a cut that
        explains it, outputs that agree on their own beside others checked apart. (whether one of them decided it,
        why a cut on the pair does not explain it, each output's kind and estimate on its own)."""
        if self._doubtful(group, est, evaluations, result):
            return True, None, {}
        explained, beyond = self._cut_verdict(group, u, confirming, est)
        if explained is not None:
            self.results.append(result("pass", explained, e=est, evals=evaluations + 1))
            return True, beyond, {}
        kinds = self._alone(group, u, confirming)
        return beyond is None and self._checked_apart(group, u, confirming, kinds, result), beyond, kinds

    def _cut_verdict(self, group: Group, u, confirming: Attempt, est: Estimate) -> tuple[str | None, str | None]:
        """(why the stop_gradients crossing the group's pairs explain the failure, why they do not): at most
        one of them, both None when there are none or the model without them cannot be made or run."""
        stops = self._stops(group)
        if self.s.uncut is None or not stops:
            return None, None
        judged = self._cut_explains(u, confirming)
        if judged is None:
            return None, None
        if judged[0]:
            return (f"the difference from finite differences (rel. error {est.rel_error:.1e}) is "
                    f"what {stops} does: with it made an identity the gradient matches them (rel. error "
                    f"{judged[1]:.1e})"), None
        return None, (f"with {stops} made an identity the gradient still differs from finite differences "
                      f"(rel. error {judged[1]:.1e}): the cut does not explain it")

    def _doubtful(self, group: Group, est: Estimate, evaluations: int, result) -> bool:
        """Whether the failure goes through a gradient that assumes its labels are a distribution while synthesised
        inputs reach those labels through other ops: then an inconclusive row says so."""
        doubt = self.s.domains.doubtful(self._sources(group), group.outputs, set(self.s.given))
        if doubt is None:
            return False
        op = doubt.op
        self.results.append(result(
            "inconclusive", f"a discrepancy (rel. error {est.rel_error:.1e}) through {op.op_type} "
            f"'{op.op_name}' in {op.function}, whose registered gradient assumes its labels are a "
            f"distribution: {doubt.input} reaches those labels through other ops, so whether the "
            f"synthesised {doubt.input} makes them one is unknown; give real examples with --inputs",
            e=est, evals=evaluations, cause="synthesised_inputs"))
        return True

    def _stops(self, group: Group) -> str:
        """The stop_gradients crossing the group's pairs ("" when none, or when a pair is also cut otherwise)."""
        sources = group.inputs or self._variable_names(group.variables)
        return ", ".join(dict.fromkeys(self.s.stopped[s, o] for s in sources for o in group.outputs
                                       if (s, o) in self.s.stopped))

    def _cut_explains(self, u, attempt: Attempt) -> tuple[bool, float] | None:
        """(whether the model without its cuts agrees with the finite differences along the attempt's line,
        their relative difference); None when that copy cannot be made or run."""
        import tensorflow as tf

        from .runner import ModelError

        uncut = self.s.uncut
        if uncut is None:
            return None
        inputs, var_base = self.runner.snapshot()
        try:
            full = uncut(self._full(u), inputs, var_base, attempt.in_dirs, attempt.var_dirs)
        except (ModelError, tf.errors.OpError, LookupError, ValueError, TypeError):
            return None
        est = attempt.est
        denominator = max(est.scale, abs(est.numeric), abs(full))
        difference = abs(est.numeric - full)
        rel = difference / denominator if denominator > 0 else 0.0
        return difference <= est.rel_threshold(self.s.floor) * max(est.scale, abs(est.numeric)), rel

    def _alone(self, group: Group, u, attempt: Attempt) -> dict[str, tuple[str, Estimate]]:
        """For a failing check over several outputs: each output's (sweep.classify kind, estimate) on its own, from
        one gradient and one sweep per output along the attempt's line (the runner sits at its point); {} for a
        check of one output."""
        if len(group.outputs) < 2:
            return {}
        kinds = {}
        for o in group.outputs:
            alone = {o: u[o]}
            est = self.sweep_line(alone, self._gradient(alone, attempt.point.outputs), attempt.in_dirs,
                                  attempt.var_dirs)
            kinds[o] = (sweep.classify(est, self.s.floor, self.s.resolution), est)
        return kinds

    @staticmethod
    def _outputs_alone(kinds: dict[str, tuple[str, Estimate]]) -> tuple[tuple[str, ...], str]:
        """(the outputs whose gradient disagrees on their own, a sentence on each); ((), "") for one output."""
        if not kinds:
            return (), ""
        failing = tuple(o for o, (kind, _) in kinds.items() if kind == "fail")
        said = [f"{o} {'disagrees' if kind == 'fail' else 'agrees' if kind == 'pass' else 'cannot be decided'}"
                f" (rel. error {est.rel_error:.1e})" for o, (kind, est) in kinds.items()]
        return failing, f" Each output on its own: {'; '.join(said)}."

    def _checked_apart(self, group: Group, u, confirming: Attempt, kinds: dict[str, tuple[str, Estimate]],
                       result) -> bool:
        """A check over several outputs that fails where, each on its own along the same line, none disagrees
        and some agree: the difference is in the others (a surrogate, a line too rough to decide), which are
        checked again as a check of their own, with the evidence a model of those outputs alone would give (a
        nearest-neighbour crop's surrogate gradient beside a bilinear one); the outputs that agree pass. False,
        and nothing done, where that does not hold."""
        if any(kind == "fail" for kind, _ in kinds.values()):
            return False
        agree = tuple(o for o, (kind, _) in kinds.items() if kind == "pass")
        rest = tuple(o for o in group.outputs if o not in agree)
        if not agree or not rest:
            return False
        est = max((kinds[o][1] for o in agree), key=lambda e: e.rel_error)
        self.results.append(replace(
            result("pass", f"checked on its own along the line where {self._outputs_text(group)} together differ "
                           f"from finite differences: it agrees; the difference is in {', '.join(rest)}, checked "
                           "apart", e=est, evals=sum(kinds[o][1].evaluations for o in agree)),
            outputs=CheckedOutputs.of(agree, self.runner.float_outputs)))
        sub = replace(group, outputs=rest)
        sub_u = {o: u[o] for o in rest}
        self.check_group(sub, sub_u, self._gradient(sub_u, confirming.point.outputs))
        return True

    def _mismatch(self, group: Group, names: list[str], est: Estimate, point: Point,
                  var_idx: list[int] | None, said: _Said) -> None:
        """The finding of a failure of `names` (inputs, or the variables `var_idx`): a missing gradient when
        TensorFlow gives none, else a gradient mismatch."""
        beyond, alone, seen = said
        outputs = alone[0] or group.outputs  # the outputs that disagree on their own, when that could be told
        label = outputs[0] if len(outputs) == 1 else "outputs " + ", ".join(outputs)
        if var_idx is None:
            missing = [n for n in names if point.g_in.get(n) is None]
        else:
            missing = [self.runner.var_names[i] for i in var_idx if point.g_var[i] is None]
        where = names[0] if len(names) == 1 else (
            f"{len(names)} variables ({', '.join(names[:4])}{', ...' if len(names) > 4 else ''})")
        if missing and len(missing) == len(names):
            self.findings.append(rules.MissingGradient.finding(
                f"TensorFlow returns no gradient of {label} with respect to {where}, although the outputs "
                f"change with it (finite-difference derivative {est.numeric:.3e} along a random "
                f"direction, in {self.s.dtype}).", sources=tuple(names), outputs=group.outputs))
            return
        on_path = self.s.domains.on_path
        advice = rules.mismatch_advice(on_path(self.s.custom_gradients, names, outputs),
                                       on_path(self.s.domains.assuming, names, outputs), est.autodiff == 0,
                                       bool(self.s.given))
        writes = sorted(self.s.op_types & VARIABLE_WRITES)
        if writes:  # a state path the static pass cannot follow loses its part of the gradient silently
            advice = replace(advice, hint=advice.hint + (
                f" The model writes variables ({', '.join(writes)}): a value written into one and read back in a loop "
                "body or another function gets no gradient through the read, a path the static pass cannot see."))
        # enough digits that the two values shown differ where they do (a 1e-7 error needs 8 or more)
        digits = min(16, max(6, 2 - math.floor(math.log10(est.rel_error)))) if est.rel_error else 6
        finding = rules.GradientMismatch.finding(
            f"The gradient of {label} with respect to {where} disagrees with finite differences: relative "
            f"error {est.rel_error:.2e} (error bound {est.rel_threshold(self.s.floor):.1e}, step {est.step:.1e}, "
            f"{self.s.dtype}; autodiff {est.autodiff:.{digits}e}, finite differences {est.numeric:.{digits}e}), "
            f"{seen}{alone[1]}{advice.hint}", op=advice.op, sources=tuple(names), outputs=outputs)
        where_to_look = f"{alone[1]}{advice.hint}"
        if beyond:  # the static pass saw a cut on the pair, and it was checked: the cut does not explain it
            more = f" A stop_gradient crosses this pair: {beyond}."
            finding = replace(finding, message=finding.message + more, confirmed_by=beyond)
            where_to_look += more
        finding = replace(finding, advice=where_to_look)
        self.findings.append(replace(finding, fix=advice.fix) if advice.fix else finding)

    def _bisect(self, group: Group, u, confirming: Attempt) -> tuple[Bisection, int]:
        """Split the failing variables in halves and keep the halves that still fail, down to single
        variables: the smallest failing sets found, and the evaluations spent. Where no half fails but some are
        flat along their direction while their gradient is not (a surrogate: a straight-through estimator inside
        a compiled module, where the static pass sees no cut), those halves are the difference's cause."""
        spent = 0
        split = Bisection()
        todo = [(list(group.variables), confirming.est)]
        while todo:
            idx, idx_est = todo.pop()
            if len(idx) == 1:
                split.found.append((idx, idx_est))
                continue
            parts = []
            for part in (idx[:len(idx) // 2], idx[len(idx) // 2:]):
                est = self.sweep_line(u, confirming.point, {}, {i: confirming.var_dirs[i] for i in part})
                spent += est.evaluations
                parts.append((part, est, sweep.classify(est, self.s.floor, self.s.resolution)))
            failing = [(part, est) for part, est, kind in parts if kind == "fail"]
            flat = [(part, est) for part, est, kind in parts if kind == "surrogate"]
            todo.extend(failing)
            split.surrogates.extend(flat)
            if flat and not failing:
                split.undecided |= any(kind == "unresolved" for _, _, kind in parts)
            if not failing and not flat:  # the discrepancy only shows with the halves together: name the set
                split.found.append((idx, idx_est))
        split.found.sort(key=lambda item: item[0])
        return split, spent

    def _report_split_surrogate(self, group: Group, split: Bisection, est: Estimate, evaluations: int,
                                result) -> None:
        """The variables' difference is wholly the surrogate gradient of some of them (bisection found them flat
        along their directions, nothing failing): a GA203 as outside a module, and a pass when the others agree
        (inconclusive when they could not be decided)."""
        finding = self._split_surrogate_finding(group, split)
        names, flat = list(finding.sources), split.surrogates[0][1]
        said = (f"the difference from finite differences (rel. error {est.rel_error:.1e}) is the surrogate gradient "
                f"of {', '.join(names)}: the forward is flat along {'its' if len(names) == 1 else 'their'} "
                f"direction (numeric derivative {flat.numeric:.2e}) while the gradient is not ({flat.autodiff:.2e})")
        rest = ("; the other variables could not be decided" if split.undecided else "; the other variables agree")
        self.results.append(result("inconclusive" if split.undecided else "pass", said + rest, e=est,
                                   evals=evaluations))
        self.findings.append(finding)

    def _split_surrogate_finding(self, group: Group, split: Bisection) -> Finding:
        names = [n for idx, _ in sorted(split.surrogates, key=lambda item: item[0]) for n in self._variable_names(idx)]
        flat = split.surrogates[0][1]
        return rules.SurrogateGradient.finding(
            f"The gradient of {self._outputs_text(group)} with respect to {', '.join(names)} is a surrogate: the "
            f"forward pass is piecewise constant along a random direction (derivative {flat.numeric:.2e}) while "
            f"TensorFlow's gradient is {flat.autodiff:.2e}, as with a straight-through estimator.",
            sources=tuple(names), outputs=group.outputs)


def _failure_reason(once: str | None, pinned: list[str], beyond: str | None) -> str | None:
    """A failing row's reason: seen at one point (with its evidence), the variables it was pinned to, why a cut
    does not explain it; None when there is nothing to say."""
    seen = f"seen at one point: {once}" if once else None
    return "; ".join(r for r in (seen, f"pinned to {', '.join(pinned)}" if pinned else None, beyond) if r) or None


def _kink_label(judged: Judgement | None) -> str | None:
    """The label of the op with a kink the judgement names, if any."""
    return judged.kink_op.label if judged is not None and judged.kink_op is not None else None


def _weight(g, v) -> float:
    """<|g|, |v|>: how much a variable contributes to <g, v> (0 without a gradient)."""
    return 0.0 if g is None else float(np.dot(np.abs(g).ravel(), np.abs(v).ravel()))
