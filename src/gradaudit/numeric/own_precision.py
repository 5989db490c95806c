"""The gradient a float32 model trains with, against the exact one its float64 copy computes.

The numeric checks and the probe-point checks of a float32 model run on its float64 copy: they tell whether the
gradient TensorFlow builds is the derivative of the forward, in exact arithmetic. The model trains with its float32
gradient, and TensorFlow's float32 arithmetic, or one of its float32 kernels, can be far off where float64 is not
(the float32 Polygamma kernel, the gradient of digamma, for x < -7.5; a LayerNormalization after a huge rescaling,
whose backward falls into float32's subnormals). At the synthesised point and at the probe points the gradient is
checked at, both gradients (of the same u·f) are compared, source by source:

- the gap ||g32 - g64|| / ||g64|| over the entries float32 can hold: where both are below FLOOR (float32's
  smallest normal number over its rounding unit) float32 cannot represent the value whatever its arithmetic;
- float32's own noise there: how far the float32 gradient moves, beyond the float64 one, at a point moved by
  NUDGE (relative). A true gradient below float32's resolution (zero by an invariance, such as a shift before a
  normalisation) differs by rounding alone, and a kink between the float32 and float64 values moves with it;
- a gap above GAP and NOISE times that noise is checked against float64 finite differences along g32 - g64, the
  direction where the two gradients disagree most. Differences that agree with the float64 gradient make the
  float32 one wrong (GA206); differences that agree with the float32 gradient make the float64 copy the one that
  is off (a note: the model's own gradient is right); anything else leaves the point undecided (`incomplete`).

Only float32 models with a float64 copy are compared: a model that computes in float16 or bfloat16 inside is the
`--precision` check's question, and a model with random ops draws other numbers in its copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..model import CheckedOutputs, CheckStatus, Finding, NumericResult, Severity
from .precision_math import LOST, pct

# A float32 gradient further than this from the exact one (relative, norm over the source) is not what the model
# should train with; below it float32 rounding of a long chain can account for it.
GAP = 1e-2
# ... and further than this many times float32's own noise at the point.
NOISE = 10.0
# How far the point is moved (relative to each value) to measure that noise: a few float32 rounding units.
NUDGE = 1e-6
# A gap that moves the float32 outputs by fewer of their rounding units than this, even for a move of the source by
# its own magnitude, is below what float32 resolves.
RESOLVE = 100.0
# Entries below this magnitude in both gradients are not compared: float32 cannot hold them accurately.
FLOOR = float(np.finfo(np.float32).tiny / np.finfo(np.float32).eps)
WHY = "the model's own float32 gradient against its float64 copy's, at the same point and cotangent"


@dataclass(frozen=True)
class Gap:
    """One source's float32 gradient against its float64 copy's at one point (norms over the source)."""

    source: str
    diff: float  # ||g32 - g64||
    noise: float  # ||how far g32 moved at the nudged point, beyond how far g64 moved||: float32's own noise
    norm64: float  # ||g64||
    # how many rounding units of the float32 outputs (u·f) the gap moves them by, at most, when the source moves by
    # its own magnitude: below RESOLVE the float32 forward cannot show the difference (a saturated tanh, whose
    # float32 gradient is 0 where the true one is 1e-9), and neither can training
    reach: float = np.inf

    @property
    def rel(self) -> float:
        """The gap relative to the exact gradient (inf: that is zero and the float32 one is not)."""
        return self.diff / self.norm64 if self.norm64 else (np.inf if self.diff else 0.0)

    @property
    def rel_noise(self) -> float:
        return self.noise / self.norm64 if self.norm64 else (np.inf if self.noise else 0.0)

    @property
    def flagged(self) -> bool:
        """Beyond 1% and beyond float32's own noise: checked with float64 differences along the gap."""
        return self.diff > GAP * self.norm64 and self.diff > NOISE * self.noise

    @property
    def saturated(self) -> bool:
        """Too small to move the float32 outputs (a saturated tanh): only an op found at fault makes it a finding."""
        return self.reach <= RESOLVE

    @property
    def rounding(self) -> bool:
        """Beyond 1% and within float32's own noise, which is smaller than the exact gradient itself: float32's
        rounding makes a gradient it could hold unreliable (a cancellation), as the nudged point shows."""
        return (self.diff > GAP * self.norm64 and not self.flagged and 0 < self.noise < self.norm64
                and not self.saturated)

    def text(self) -> str:
        if self.norm64:
            return f"{pct(self.rel)} off (float32's own noise there {pct(self.rel_noise)})"
        return f"0 in float64, {self.diff:.2g} in float32 (float32's own noise there {self.noise:.2g})"


@dataclass
class Comparison:
    """What comparing the two gradients at the points gave: rows for the gaps that were checked, findings,
    notes, and the points left undecided (the verdict is `incomplete` at best)."""

    rows: list[NumericResult] = field(default_factory=list)
    found: list[tuple[str, Finding]] = field(default_factory=list)  # each finding with the point it was found at
    notes: list[str] = field(default_factory=list)
    undecided: list[str] = field(default_factory=list)
    points: int = 0  # points compared
    largest: float = 0.0  # the largest gap seen below GAP
    # gaps above GAP that float32's own noise at their point matches (a true gradient below float32's resolution
    # there): (source, where, gap, noise)
    noisy: list[tuple[float, str]] = field(default_factory=list)
    # gaps above GAP below what the float32 outputs resolve (Gap.reach): (gap, what it is)
    unresolved: list[tuple[float, str]] = field(default_factory=list)
    # gaps above GAP whose direction float64 differences cannot resolve from zero: what they said, per point
    unmeasurable: list[str] = field(default_factory=list)
    forward: float = 0.0  # the float32 forward's relative gap from the float64 copy's at the last point compared
    ops_checked: int = 0  # ops compared on their own (compare_ops), the most at one point
    checker: Any = None  # the local.LocalChecker compare_ops uses at every point (close() ends its sessions)
    # a model computing in float16 or bfloat16 inside: per source, the point where the most of its gradient entries
    # are exactly zero while the float64 copy's are not (underflowed inside): (share, smallest lost |g|, where)
    underflow: dict[str, tuple[float, float, str]] = field(default_factory=dict)
    largest64: dict[str, float] = field(default_factory=dict)  # per source, the largest |g| of the float64 copy
    # per source, the point where the most of its entries are zero in the model's gradient and not in the float64
    # copy's, and stay zero at a loss scale: the half precision's rounding, not an underflow (share, where)
    rounded: dict[str, tuple[float, str]] = field(default_factory=dict)
    half: str | None = None  # that compute dtype
    nonfinite: int = 0  # points compared where no source's gradients were finite in both (nothing compared there)


    @property
    def findings(self) -> list[Finding]:
        return [f for _, f in self.found]

    def add(self, where: str, finding: Finding) -> None:
        self.found.append((where, finding))

    def record(self, gaps: list[Gap], where: str) -> None:
        """Keep what the gaps at one point that are not flagged say (the summary's lines)."""
        self.largest = max([self.largest] + [g.rel for g in gaps if g.rel <= GAP])
        for g in gaps:
            if g.rel <= GAP or g.flagged or g.rounding:
                continue
            if g.saturated:
                self.unresolved.append((g.rel, f"{g.source} at {where}: {g.text()}, moving the outputs by at most "
                                               f"{g.reach:.2g} of their float32 rounding units"))
            else:
                self.noisy.append((g.rel, f"{g.source} at {where}: {g.text()}"))


    def merged(self) -> list[Finding]:
        """The findings, one per op at fault (the first point's, naming the other points it was found at too)."""
        first: dict[Any, int] = {}
        also: dict[int, list[str]] = {}
        kept: list[Finding] = []
        for where, f in self.found:
            if f.op is not None and f.op in first:
                also[first[f.op]].append(where)
                continue
            if f.op is not None:
                first[f.op] = len(kept)
                also[len(kept)] = []
            kept.append(f)
        return [replace(f, message=f"{f.message} The same at {'; '.join(also[i])}.") if also.get(i) else f
                for i, f in enumerate(kept)]


def _masked(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    small = (np.abs(a) < FLOOR) & (np.abs(b) < FLOOR)
    return np.where(small, 0.0, a), np.where(small, 0.0, b)


def gap_of(source: str, g32: tuple[np.ndarray, np.ndarray], g64: tuple[np.ndarray, np.ndarray],
           resolution: float) -> Gap | None:
    """The gap of one source from its gradients (at the point, at the nudged point) in float32 and float64, and
    `resolution`: the source's magnitude over the float32 outputs' rounding (Gap.reach per unit of gap); None when a
    gradient is missing, not finite or of another shape (the probes and the numeric checks report those)."""
    arrays = [*g32, *g64]
    if any(g is None for g in arrays) or len({np.shape(g) for g in arrays}) > 1 or not all(
            np.all(np.isfinite(g)) for g in arrays):
        return None
    a, b = _masked(g32[0], g64[0])
    an, bn = _masked(g32[1], g64[1])
    diff = float(np.linalg.norm(a - b))
    return Gap(source, diff, float(np.linalg.norm((an - a) - (bn - b))), float(np.linalg.norm(b)), diff * resolution)


def forward_gap(out32: dict[str, Any], out64: dict[str, Any], outputs: list[str]) -> float:
    """||f32 - f64|| / ||f64|| over the float outputs (inf where one is not finite and the other is)."""
    a = np.concatenate([np.ravel(np.asarray(out32[o], np.float64)) for o in outputs])
    b = np.concatenate([np.ravel(np.asarray(out64[o], np.float64)) for o in outputs])
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return np.inf
    norm = float(np.linalg.norm(b))
    diff = float(np.linalg.norm(a - b))
    return diff / norm if norm else (np.inf if diff else 0.0)


def nudged(point: dict[str, np.ndarray], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """`point` with every float value moved by about NUDGE of itself (integer inputs as they are)."""
    moved = {}
    for k, v in point.items():
        x = np.asarray(v)
        if np.issubdtype(x.dtype, np.floating):
            x = (x.astype(np.float64) * (1 + NUDGE * rng.standard_normal(x.shape))).astype(x.dtype)
        moved[k] = x
    return moved


@dataclass(frozen=True)
class Along:
    """Float64 finite differences along g32 - g64 (over the flagged sources), against both gradients there."""

    numeric: float  # the differences' derivative
    float64: float  # <g64, d>
    float32: float  # <g32, d>
    bound: float  # the differences' error bound
    status: str  # sweep.classify of the float64 gradient along the line: pass, fail, unresolved, surrogate
    evaluations: int

    @property
    def float32_wrong(self) -> bool:
        """The differences exclude the float32 gradient: they agree with the float64 one (`pass`; or `unresolved`, a
        float64 gradient too small against their bound to be judged relative to itself, within that bound of them)
        and are far from the float32 one, beyond their bound and 1%."""
        off = abs(self.numeric - self.float32)
        beyond = off > max(10 * self.bound, GAP * max(abs(self.numeric), abs(self.float32)))
        if self.status == "unresolved":
            return beyond and abs(self.numeric - self.float64) <= self.bound
        return self.status == "pass" and beyond

    @property
    def unmeasurable(self) -> bool:
        """The differences agree with the float64 gradient, and the float32 one is within their bound too: the gap
        is below what even float64 differences of the forward resolve."""
        return self.status == "pass" and abs(self.numeric - self.float32) <= 10 * self.bound

    @property
    def float64_wrong(self) -> bool:
        off = abs(self.numeric - self.float32)
        return self.status == "fail" and off <= max(10 * self.bound, GAP * abs(self.numeric))

    def text(self) -> str:
        return (f"along the direction where they differ, float64 finite differences give {self.numeric:.6g} "
                f"(bound {self.bound:.2g}), the float64 gradient {self.float64:.6g} and the float32 gradient "
                f"{self.float32:.6g}")


def along_gap(prober, at64: tuple, flagged: list[Gap], grads: tuple[dict[str, Any], dict[str, Any]]) -> Along:
    """Sweep the float64 copy (its runner at the point, `at64` its (outputs, input gradients, variable gradients))
    along d = g32 - g64 over the flagged sources, each part scaled to its values' magnitude."""
    from . import sweep
    from .checks import Checker, Point

    g32, g64 = grads
    runner = prober.runner(None, True, True)
    names = {g.source for g in flagged}
    in_dirs: dict[str, np.ndarray] = {}
    var_dirs: dict[int, np.ndarray] = {}
    a32 = 0.0
    for s in names:
        diff = np.asarray(g32[s], np.float64) - np.asarray(g64[s], np.float64)
        if s in runner.inputs:
            value = np.asarray(runner.inputs[s])
        else:
            value = np.asarray(runner.var_base[prober.var_names.index(s)])
        size = float(np.sqrt(np.mean(np.square(value, dtype=np.float64)))) or 1.0
        d = diff * (size / (float(np.sqrt(np.mean(np.square(diff)))) or 1.0))
        a32 += float(np.sum(np.asarray(g32[s], np.float64) * d))
        if s in runner.inputs:
            in_dirs[s] = d
        else:
            var_dirs[prober.var_names.index(s)] = d
    settings = prober.settings(runner, "float64", True)
    checker = Checker(runner, settings, np.random.default_rng([prober.seed, 13]))
    out, g_in, g_var = at64
    est = checker.sweep_line(prober.u, Point(g_in, g_var, out), in_dirs, var_dirs)
    status = sweep.classify(est, settings.floor, settings.resolution)
    return Along(est.numeric, est.autodiff, a32, est.bound, status, est.evaluations)


def compare_at(prober, point: dict[str, np.ndarray], where: str, scale: float | None, into: Comparison) -> None:
    """Compare the float32 and float64 gradients of every source at `point` (`where` names it in messages, `scale`
    is its signed probe scale, None for the synthesised point) and record what it gave `into`."""
    rng = np.random.default_rng([prober.seed, 17, len(into.rows) + into.points])
    moved = nudged(point, rng)
    _, n32 = prober.gradients(moved, with_variables=True)
    moved64 = prober.float64_gradients(moved, None, with_variables=True)
    out32, g32 = prober.gradients(point, with_variables=True)
    at = prober.float64_gradients(point, None, with_variables=True)
    if moved64 is None or at is None or prober.last64 is None:
        return
    g64, n64 = at[1], moved64[1]
    into.forward = forward_gap(out32, at[0], prober.plan.float_outputs)
    into.points += 1
    per_unit = _per_unit(prober, point, out32)
    gaps = [g for g in (gap_of(s, (g32[s], n32.get(s)), (g64.get(s), n64.get(s)), per_unit(s)) for s in g32)
            if g is not None]
    if not gaps:  # no source has finite gradients of one shape in both: the probes report what is not finite
        into.nonfinite += 1
    flagged = [g for g in gaps if g.flagged]
    into.record(gaps, where)
    _rounding(prober, [g for g in gaps if g.rounding], (where, scale), into)
    if not flagged:
        return
    along = along_gap(prober, prober.last64, flagged, (g32, g64))
    if along.unmeasurable:
        into.unmeasurable.append(f"{', '.join(g.source for g in flagged)} at {where} ({along.text()})")
        return
    located = _locate(prober, point) if not along.float64_wrong else (None, "", ())
    if located[0] is None and all(g.saturated for g in flagged):
        # a saturated function, no op at fault: what float32 computes, too small to move its outputs
        into.unresolved += [(g.rel, f"{g.source} at {where}: {pct(g.rel)} off, moving the outputs by at most "
                                    f"{g.reach:.2g} of their float32 rounding units, no op's own float32 gradient off")
                            for g in flagged]
        return
    _judge(prober, flagged, along, (where, scale), into, located)


def _rounding(prober, gaps: list[Gap], at: tuple[str, float | None], into: Comparison) -> None:
    """One finding for the gaps at a point that float32's own noise accounts for while the exact gradient is larger
    than that noise: a warning at the synthesised point, information at a probe point."""
    from ..rules import numeric as rules

    if not gaps:
        return
    where, scale = at
    outputs = tuple(prober.plan.float_outputs)
    into.add(where, rules.Float32Gradient.finding(
        f"At {where}, float32's own rounding makes the gradient of {', '.join(g.source for g in gaps)} unreliable: "
        + "; ".join(f"{g.source}: {g.text()}" for g in gaps)
        + f". At a point moved by {NUDGE:g} of itself the float32 gradient moves by that much while the exact one "
          "does not: a cancellation (a difference of nearly equal large values) in the forward or its backward, "
          "which float32 cannot compute to better than that here. Rewrite the form that cancels, or compute it in "
          "float64.", sources=tuple(g.source for g in gaps), outputs=outputs,
        severity=Severity.WARNING if scale is None else Severity.INFO))


def _per_unit(prober, point: dict[str, np.ndarray], out32: dict[str, Any]):
    """source -> its magnitude (the norm of its values, of ones where they are all zero) over the rounding of the
    float32 outputs projected on the cotangent (float32's unit times ||u·f||): Gap.reach per unit of gap."""
    phi = float(np.sqrt(sum(np.sum(np.square(prober.u[o] * np.asarray(out32[o], np.float64)))
                            for o in prober.plan.float_outputs)))
    rounding = float(np.finfo(np.float32).eps) * phi
    values = {**{n: point[n] for n in prober.plan.input_sources},
              **dict(zip(prober.var_names, prober.base_vars))}

    def per_unit(source: str) -> float:
        x = np.asarray(values[source], np.float64)
        size = float(np.linalg.norm(x)) or float(np.sqrt(x.size))
        return size / rounding if rounding > 0 else np.inf

    return per_unit


def half_inside(prober) -> str | None:
    """float16 or bfloat16 when the model computes in it inside (Keras' mixed_float16 policy, a float16 island)."""
    from .precision_math import compute_dtype

    own = compute_dtype(prober.analysis)
    return own[0] if own else None


def compare_underflow(prober, point: dict[str, np.ndarray], where: str, into: Comparison) -> None:
    """For a model computing in a half precision inside: the gradient entries that are exactly zero in the model's
    gradient while its float64 copy's are not (and are no rounding of a zero there), and that its own gradient at
    a loss scale brings back: they underflowed inside (one that stays zero is the dtype's rounding, `rounded`). One
    GA330 per source at the end (`merged`), with the loss scale that brings them into range."""
    _, g = prober.gradients(point, with_variables=True)
    at = prober.float64_gradients(point, None, with_variables=True)
    if at is None:
        return
    into.points += 1
    back = _scaled_back(prober, point, g, at[1], into.half or "float16")
    for s, a in g.items():
        b = at[1].get(s)
        if a is None or b is None or np.shape(a) != np.shape(b) or not (np.all(np.isfinite(a))
                                                                        and np.all(np.isfinite(b))):
            continue
        mags = np.abs(np.asarray(b, np.float64))
        top = float(mags.max(initial=0.0))
        exact = (mags >= FLOOR) & (mags > 1e-12 * top)  # nonzero in float64, and no rounding of a zero
        n = int(np.count_nonzero(exact))
        if not n:
            continue
        into.largest64[s] = max(into.largest64.get(s, 0.0), top)
        zero = exact & (np.asarray(a) == 0)
        lost = zero & back.get(s, True)
        rounded = int(np.count_nonzero(zero & ~lost)) / n
        if rounded > into.rounded.get(s, (0.0, ""))[0]:
            into.rounded[s] = (rounded, where)
        share = int(np.count_nonzero(lost)) / n
        if share and share > into.underflow.get(s, (0.0, 0.0, ""))[0]:
            into.underflow[s] = (share, float(mags[lost].min()), where)


def _scaled_back(prober, point: dict[str, np.ndarray], own: dict, exact: dict, half: str) -> dict[str, np.ndarray]:
    """Per source, the entries of the model's own gradient that its gradient at a loss scale makes finite and
    nonzero, when some entry is zero in its own and not in the float64 copy's (else nothing to tell apart)."""
    from .precision_math import came_back, rescue_scale, settled_loss_scale

    zero = [s for s, a in own.items() if a is not None and exact.get(s) is not None and np.shape(a) == np.shape(
        exact[s]) and np.any((np.asarray(a) == 0) & (np.asarray(exact[s]) != 0))]
    if not zero:
        return {}
    top = max(float(np.max(np.abs(np.asarray(b, np.float64)), initial=0.0)) for b in exact.values() if b is not None)
    factor = rescue_scale(settled_loss_scale(top, half), prober.u, half)
    if factor is None:
        return {}
    scaled = prober.scaled_gradients(point, factor)
    return {s: came_back(scaled[s]) for s in zero
            if scaled.get(s) is not None and np.shape(scaled[s]) == np.shape(own[s])}


def underflow_findings(into: Comparison) -> list[Finding]:
    """One GA330 per source whose gradient lost at least LOST of its entries inside the model's half precision."""
    from ..rules import hazards as rules
    from .precision_math import limits, power_of_two, settled_loss_scale

    dtype = into.half or "float16"
    found = []
    for s, (share, smallest, where) in sorted(into.underflow.items()):
        if share < LOST:
            continue
        scale = settled_loss_scale(into.largest64.get(s), dtype)
        tiny = limits(dtype).smallest_subnormal
        rescued = scale is not None and smallest * scale >= tiny
        rescue = ("" if scale is None else
                  f"; a dynamic loss scale settles on {power_of_two(scale)} (largest |g| "
                  f"{into.largest64[s]:.3g})" + (", where they are in range (Keras' LossScaleOptimizer, which "
                                                  "mixed_float16 training uses, finds it)" if rescued else
                                                  ", and even there the smallest stay below it"))
        found.append(rules.GradientUnderflow.finding(
            f"The model computes in {dtype} inside, and at {where} {pct(share)} of the gradient entries of {s} are "
            f"exactly zero where its float64 copy's are not (the smallest {smallest:.3g}; {dtype}'s smallest "
            f"subnormal is {tiny:.3g}): they underflowed inside, and training without a loss scale leaves them "
            f"unchanged{rescue}.", sources=(s,), severity=Severity.INFO if rescued else None))
    return found


def whole_model(prober) -> bool:
    """Compare the whole model's gradients (a float64 copy is loaded, or cheap to load), else each op's own: a large
    model (stability.local.LARGE_MODEL trainable parameters or more) is compared op by op even where its float64 copy
    was loaded for an undecided check (four gradient passes over a ResNet50's 25M weights per point cost more than
    its audit), and a model decided by its local checks loads no float64 copy for this."""
    from .local import LARGE_MODEL, model_parameters

    if model_parameters(prober.loaded.fn) >= LARGE_MODEL:
        return False
    return not prober.local or prober.has_float64()


def compare_ops(prober, point: dict[str, np.ndarray], where: str, into: Comparison) -> None:
    """Each op's own float32 gradient against its float64 kernel's at the values the model gives it at `point`: a
    gap is an error naming the op (a large model's path: its gradient goes through the op, and no whole-model float64
    copy is made to measure how much of the gap reaches it)."""
    from ..errors import raised_by_tensorflow
    from ..rules import numeric as rules
    from .local import LocalChecker, op_pairs

    if into.checker is None:  # one for every point: its check graphs serve the same ops at the same shapes
        into.checker = LocalChecker(prober.forensics, np.random.default_rng([prober.seed, 19]),
                                    analysis=prober.analysis, value_free=False)
    checker = into.checker
    try:
        gaps = checker.float32_gaps(point)
    except Exception as exc:
        if not raised_by_tensorflow(exc):
            raise
        into.notes.append(f"The ops' float32 gradients could not be compared at {where}: TensorFlow could not run "
                          f"a frozen copy ({type(exc).__name__}).")
        return
    into.points += 1
    into.ops_checked = max(into.ops_checked, checker.float32_checked)
    pairs = op_pairs(prober.analysis)
    into.notes += [f"At {where}, {g.apart_text()}." for g in gaps if not g.comparable]
    for g in (g for g in gaps if g.comparable):
        sources, outputs = pairs(g.op)
        into.add(where, rules.Float32Gradient.finding(
            f"At {where}, {g.text()} (checked on its own, the same cotangent and direction for both). The model's "
            "float32 gradient goes through it; its gradient was checked in float64 op by op (a large model: no "
            "float64 copy of the whole model is made).", op=g.op, sources=sources, outputs=outputs))


def _locate(prober, point: dict[str, np.ndarray]):
    """(the op whose own float32 gradient is furthest off its float64 one at the values the model gives it there, as
    a local.OpGap, or None; a sentence on what was found)."""
    from ..errors import raised_by_tensorflow
    from .local import LocalChecker

    checker = LocalChecker(prober.forensics, np.random.default_rng([prober.seed, 19]), analysis=prober.analysis,
                           value_free=False)
    try:
        found = checker.float32_gaps(point)
    except Exception as exc:
        if not raised_by_tensorflow(exc):
            raise
        return None, (f"The op at fault could not be located (TensorFlow could not run a frozen copy: "
                      f"{type(exc).__name__})."), ()
    finally:
        checker.close()
    others = tuple(g for g in found if not g.comparable)
    apart = " ".join(f"{g.apart_text()[0].upper()}{g.apart_text()[1:]}." for g in others)
    gaps = [g for g in found if g.comparable]
    if not gaps:
        return None, apart or ("No op's own float32 gradient is off at the values it receives there: float32's "
                               "arithmetic along the chain (values in its subnormals, or beyond its range) loses the "
                               "gradient."), others
    worst = max(gaps, key=lambda g: abs(g.float32 - g.float64) / max(abs(g.float64), 1e-300))
    more = f" ({len(gaps) - 1} more op(s) too)" if len(gaps) > 1 else ""
    return worst, f"{worst.text()}{more}." + (f" {apart}" if apart else ""), others


def _judge(prober, flagged: list[Gap], along: Along, at: tuple[str, float | None], into: Comparison,
           located: tuple[Any, str, tuple]) -> None:
    from ..rules import numeric as rules

    where, scale = at
    outputs = prober.plan.float_outputs
    label = CheckedOutputs.of(outputs, outputs)
    names = ", ".join(g.source for g in flagged)
    worst = max(flagged, key=lambda g: g.rel)
    gaps = "; ".join(f"{g.source}: {g.text()}" for g in flagged)
    culprit, found, others = located
    if along.float32_wrong or culprit is not None:
        severity = _severity(culprit, scale, into.forward)
        # a row's status is its finding's: information (float32's own rounding at a probe point's extreme inputs)
        # is no failed check beside a passing verdict; its reason and evidence say what was measured
        status: CheckStatus = "pass" if severity is Severity.INFO else "fail"
        reason = (f"the float32 and float64 gradients are of different results: {others[0].op.label}'s own float32 "
                  "outputs are another result than its float64 kernel's there (a sign or a basis; not an error)"
                  if culprit is None and others else "the float32 gradient is not the derivative: the float64 copy's is"
                  + (f"; {culprit.op.label}'s own float32 gradient is off at its values" if culprit is not None else
                     "; no op is at fault on its own: float32's rounding along the chain, what float32 computes here "
                     "(not an error)"))
        into.add(where, rules.Float32Gradient.finding(
            f"At {where}, the gradient the model computes in float32 for {names} is far from the exact one: "
            f"{gaps}. " + (f"The float64 copy's gradient is the true one there: {along.text()}. " if along.float32_wrong
                           else f"Float64 differences along the gap do not decide ({along.status}: {along.text()}), "
                                "but one op's own float32 gradient is off at its values. ")
            + f"{_forward(into.forward)} "
            f"{found}{_unlocated(culprit, scale, bool(others))}".rstrip(),
            op=culprit.op if culprit is not None else None, severity=severity,
            sources=tuple(g.source for g in flagged), outputs=_reached(prober, culprit, outputs)))
    elif along.float64_wrong:
        status, reason = "pass", "the float32 gradient agrees with the differences; the float64 copy's does not"
        into.notes.append(f"At {where}, the float64 copy's gradient for {names} is off where the model's own "
                          f"float32 gradient is right ({along.text()}): the float64 copy, not the model, differs.")
    else:
        status, reason = "inconclusive", "float64 differences along the gap could not tell which gradient is right"
        into.undecided.append(f"the float32 gradient of {names} differs from the float64 copy's at {where} "
                              f"({pct(worst.rel)}) and float64 differences could not tell which is right "
                              f"({along.status} along the gap)")
    for g in flagged:
        into.rows.append(NumericResult(
            source=g.source, outputs=label, status=status, rel_error=g.rel if np.isfinite(g.rel) else None,
            step=None, dtype="float32", evaluations=along.evaluations + 4, reason=reason, precision_reason=WHY,
            scale=scale, bound=GAP, evidence=f"{g.source}: {g.text()}; {along.text()}"))


def _reached(prober, culprit, outputs: list[str]) -> tuple[str, ...]:
    """The outputs a gap is said of: those whose gradient paths cross the op at fault (tester 19: digamma's
    float32 kernel was said of lgamma too), every output when no op is at fault or none is found."""
    if culprit is None:
        return tuple(outputs)
    from .local import op_pairs

    crossing = set(op_pairs(prober.analysis)(culprit.op)[1])
    return tuple(o for o in outputs if o in crossing) or tuple(outputs)


def _severity(culprit, scale: float | None, forward: float) -> Severity:
    """An error where an op's own float32 gradient is found off at its values (a kernel, an underflow: something to
    fix); without one, float32's rounding along a chain (a saturated softmax cancels in its backward) is a limit of
    float32 itself: a warning at the synthesised point, information at a probe point's extreme inputs or where the
    float32 forward is off too."""
    if culprit is not None:
        return Severity.ERROR
    return Severity.WARNING if scale is None and forward <= GAP * GAP else Severity.INFO


def _unlocated(culprit, scale: float | None, apart: bool) -> str:
    if culprit is not None:
        return ""
    if apart:  # the op's two gradients are of different results: said by _locate
        return " Not an error."
    return (" Not an error: no op is at fault on its own, and float32's rounding along the chain is what float32 "
            "computes" + (" at these extreme inputs." if scale is not None else "."))


def _forward(gap: float) -> str:
    if gap <= GAP * GAP:
        return (f"The float32 forward agrees with the float64 copy's ({pct(gap)} apart): float32's arithmetic in the "
                "backward, or TensorFlow's float32 kernel of an op's gradient on the path, loses the gradient at "
                "these values.")
    return (f"The float32 forward is {pct(gap)} off the float64 copy's there too: the model's values leave what "
            "float32 computes accurately, and its gradient with them.")


def wanted(prober) -> str | None:
    """Why the two gradients are not compared on this model (None: they are)."""
    from .session import random_ops

    if prober.plan.native != "float32":
        return f"the model computes in {prober.plan.native}"
    drawn = random_ops(prober.info.op_types, stateless=True)
    if drawn:
        return (f"the model draws random numbers ({', '.join(drawn[:3])}), which its float64 copy draws differently: "
                "another function")
    if whole_model(prober) and not prober.float64():
        return "no float64 copy of the model runs"
    return None


def summary(into: Comparison) -> list[str]:
    """One line on the points compared: where the gradients agree, and the gaps float32's own noise matches."""
    if not into.points:
        return []
    if into.half is not None:
        return _half_summary(into)
    lines = []
    if into.ops_checked and not into.findings:
        lines.append(f"The float32 gradient of each of {into.ops_checked} op(s) agrees with its float64 kernel's at "
                     f"the values the model gives it, at {into.points} point(s).")
    elif not into.rows and not into.ops_checked and into.points > into.nonfinite:
        lines.append(f"The float32 gradients agree with the float64 copy's at {into.points - into.nonfinite} "
                     f"point(s): within {pct(into.largest)}" + (" elsewhere" if into.noisy else "") + ".")
    if into.nonfinite:
        lines.append(f"The float32 and float64 gradients were not compared at {into.nonfinite} point(s): no "
                     "source's gradient is finite there in both (the stability probes report where).")
    if into.noisy:
        largest = max(into.noisy)[1]
        lines.append(f"The float32 gradient differs from the float64 copy's by more than {pct(GAP)} at "
                     f"{len(into.noisy)} (source, point) pair(s), each within float32's own noise there, measured "
                     f"at a point moved by {NUDGE:g} (the largest: {largest}): there float32's rounding alone moves "
                     "the gradient by as much as the gap (a gradient too small for float32 to resolve, or one that "
                     "changes fast with the point, as at a repeated eigenvalue), not a float32 error to report.")
    if into.unresolved:
        lines.append(f"The float32 gradient differs from the float64 copy's by more than {pct(GAP)} at "
                     f"{len(into.unresolved)} (source, point) pair(s), each by less than the float32 outputs resolve "
                     f"(the largest: {max(into.unresolved)[1]}): a true gradient too small to change the float32 "
                     "outputs (of a saturated function, or one zero or nearly so by an invariance, as a softmax's "
                     "logits under a shift they all share), whose float32 value is 0 or its rounding, not a float32 "
                     "error to report.")
    if into.unmeasurable:
        lines.append(f"The float32 gradient differs from the float64 copy's beyond float32's noise at "
                     f"{len(into.unmeasurable)} point(s), by less than float64 finite differences of the forward "
                     f"resolve ({into.unmeasurable[0]}): not a float32 error to report.")
    return lines


def _half_summary(into: Comparison) -> list[str]:
    """The summary of a model computing in a half precision inside: whether anything underflowed, and the zeros that
    are its rounding."""
    lines = []
    lost = [s for s, (share, _, _) in into.underflow.items() if share > 0]
    rounded = sorted((s, share, where) for s, (share, where) in into.rounded.items() if share >= LOST)
    if not lost and not rounded:
        lines.append(f"The model computes in {into.half} inside: no gradient entry is zero where its float64 "
                     f"copy's is not, at {into.points} point(s) (nothing underflowed inside).")
    if rounded:
        lines.append(f"The model computes in {into.half} inside, and its own gradient is exactly zero where its "
                     "float64 copy's is not, also with the cotangent scaled by a loss scale: "
                     + ", ".join(f"{s} {pct(share)} at {where}" for s, share, where in rounded)
                     + f". A power-of-two scale changes nothing but under- and overflow, so these are "
                       f"{into.half}'s rounding (a cancellation, a saturated activation), not an underflow: no "
                       "loss scale brings them back.")
    return lines
