"""Stability probes: the forward value and the gradient of every output at a ladder of input scales.

Each float input, normalised to a largest magnitude of 1, is multiplied by every rung of the ladder and
by its negative; all float inputs together and, when there are several, each alone (the others keep
their synthesised values). A non-finite value is judged against the float64 copy of the model at the
same point: a forward that is non-finite there too is outside the function's domain (0/0), and an
infinite gradient whose float64 value is beyond the dtype's range is a true overflow; neither is a finding.

At a few of the points (`CHECKED`), where the forward and the gradient are finite, the gradient is also
checked against finite differences, as the numeric checks do at the synthesised point: a custom gradient
wrong only for large inputs (x > 2) fails there, and, in a model holding a gradient somebody wrote, one wrong only
for small inputs fails at x 1e-3 (`CHECKED_WRITTEN`). The probe's own gradient pass is the check's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..model import ALL_VARIABLES, Finding, LocalCheck, NumericResult, OpRef, ProbeStatus, StabilityResult
from .forensics import Culprit
from .local import LARGE_MODEL, shared_forensics
from .memory import give_back

# 1e2, 3e2 and 6e2 cover float32's exp overflow (x > 88.7) below float64's (x > 709.8), where the float64
# copy tells a float32 overflow from a true one; 1e1 the moderate values between the synthesised point's and those.
DEFAULT_SCALES = (0.0, 1e-30, 1e-20, 1e-10, 1e-3, 1.0, 1e1, 1e2, 3e2, 6e2, 1e4)
# (scale, sign) of the probe points where the gradient is also checked against finite differences: moderate and
# large inputs, where hand-written gradients go wrong (in float32 tiny ones only show rounding noise). The
# synthesised input has elements of both signs, so each point covers positive and negative values: x 10 the
# moderate range between the synthesised point's |x| <~ 2 and x 100 (a custom gradient wrong only for 2 < x < 5
# passed every other point), x 100 and x -600 the large one.
CHECKED = ((1e1, -1), (1e2, 1), (6e2, -1), (0.0, 1))
# ... and, where the model holds a gradient somebody wrote (a saved custom gradient, a gradient override, a jax2tf
# module's) and its probe points are checked whole (not op by op: a model below LARGE_MODEL parameters), also at
# small inputs: a hand-written gradient clamped or approximated below some threshold (a safe log's derivative
# floored at 1e-2) is wrong only there, and a float64 check there is as precise as anywhere.
CHECKED_WRITTEN = ((1e-3, 1),)
# Where the batch dimension lets the points be stacked (examples the model treats apart), the moderate point x -10 is
# checked as these points together along the batch, signs alternating: the whole moderate range at once, where one
# scaled copy of eight synthesised values can miss a window of a few units.
MODERATE = ((2.0, 1), (3.0, -1), (5.0, 1), (7.0, -1), (10.0, 1), (15.0, -1), (20.0, 1), (30.0, -1), (50.0, 1))
MODERATE_LABEL = "inputs × ±2 to ±50 (9 points stacked along the batch)"
# Rows of one batched gradient pass over the ladder's points (the base point's rows included); fewer for a model of
# LARGE_MODEL parameters or more, whose backward holds every row's activations (a ResNet50's 32 rows: 1 GiB more
# than 8 rows, for about 6% more CPU time).
BATCH_ROWS = 32
BATCH_ROWS_LARGE = 8
# The `scale` of an observation at the inputs given with --inputs (not a rung of the ladder).
GIVEN = -1.0

# What one (source, output) pair did at one probe point, least to most severe.
OK, DOMAIN, OVERFLOW, FORWARD, GRADIENT = range(5)
STATUS: dict[int, ProbeStatus] = {OK: "ok", DOMAIN: "nonfinite_forward", OVERFLOW: "nonfinite_gradient",
                                  FORWARD: "nonfinite_forward", GRADIENT: "nonfinite_gradient"}


@dataclass(frozen=True)
class Observation:
    kind: int  # OK, DOMAIN, OVERFLOW, FORWARD or GRADIENT
    scale: float
    sign: int
    config: tuple[str, ...]  # the inputs that were scaled
    value: str = ""  # the non-finite value seen: "nan", "inf", "-inf"
    gradient: str = ""  # for a non-finite forward: the gradient's non-finite value, "" when it stays finite
    culprit: Culprit | None = None
    note: str = ""
    # for a non-finite forward: the float64 copy's value there when it is finite and within the model's own
    # dtype's range ("about 123"): the true result fits, an intermediate of the written form overflows
    fits: str = ""
    # for a non-finite gradient whose own backward is finite: the output in whose backward the NaN/Inf was made
    # (TensorFlow runs the signature's whole backward, zero cotangents for the other outputs: 0 × inf)
    through: str = ""

    @property
    def reported(self) -> bool:
        return self.kind in (FORWARD, GRADIENT)

    def where(self, all_inputs: list[str]) -> str:
        if self.scale == GIVEN:
            return "the inputs given with --inputs"
        scaled = "all float inputs" if set(self.config) == set(all_inputs) else "only " + ", ".join(self.config)
        return f"{scaled} × {'-' if self.sign < 0 else ''}{self.scale:g}"

    def detail(self, all_inputs: list[str]) -> str | None:
        if self.kind == OK:
            return None
        if self.kind in (DOMAIN, FORWARD):
            what = f"forward {self.value}, gradient {self.gradient or 'finite'}"
        else:
            what = f"gradient {self.value}, forward finite"
        parts = [f"{self.where(all_inputs)}: {what}"]
        parts += [self.culprit.detail] if self.culprit else []
        parts += [self.note] if self.note else []
        return "; ".join(parts)


def nonfinite(x) -> str:
    """'' when x is finite (or None: no gradient), else the first kind of non-finite value in it."""
    if x is None:
        return ""
    a = np.asarray(x, dtype=np.float64)
    bad = a[~np.isfinite(a)]
    if not bad.size:
        return ""
    return "nan" if np.isnan(bad).any() else ("inf" if bad[0] > 0 else "-inf")


def dense(g) -> np.ndarray | None:
    """A gradient as a float64 array; a sparse one (IndexedSlices, from a gather) made dense."""
    if g is None:
        return None
    if hasattr(g, "indices"):
        import tensorflow as tf

        g = tf.convert_to_tensor(g)
    return np.asarray(g, dtype=np.float64)


def same_point(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    """Whether two points (or cotangents) are the same arrays, bit for bit and dtype for dtype."""
    return a.keys() == b.keys() and all(np.asarray(a[k]).dtype == np.asarray(b[k]).dtype
                                        and np.array_equal(a[k], b[k]) for k in a)


def scaled_point(base: dict[str, np.ndarray], config: tuple[str, ...], scale: float, sign: int
                 ) -> dict[str, np.ndarray]:
    """`base` with each input of `config` normalised to a largest magnitude of 1 and multiplied by sign × scale."""
    p = dict(base)
    for n in config:
        x = np.asarray(base[n], dtype=np.float64)
        m = float(np.max(np.abs(x))) if x.size else 0.0
        unit = x / m if m > 0 else np.ones_like(x)
        p[n] = (sign * scale * unit).astype(base[n].dtype)
    return p


def valid_scales(scales, dtypes) -> tuple[list[float], list[float]]:
    """(scales every dtype represents, scales skipped): beyond the largest finite value, or below the
    smallest subnormal, the scaled input is not the scale asked for."""
    keep: set[float] = set()
    skipped: set[float] = set()
    for s in (abs(float(s)) for s in scales):
        fits = all(s <= float(np.finfo(d).max) and (s == 0 or s >= float(np.finfo(d).smallest_subnormal))
                   for d in dtypes)
        (keep if fits else skipped).add(s)
    return sorted(keep), sorted(skipped)


@dataclass
class LadderOutcome:
    results: list[StabilityResult]
    reported: list[tuple[str, str, Observation]]  # (source, output, observation) that make findings
    notes: list[str] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)  # the scales probed
    numeric: list[NumericResult] = field(default_factory=list)  # gradient checks at probe points
    mismatches: list[Finding] = field(default_factory=list)  # gradient-mismatch found there
    # (where, TensorFlow's reason) of the probe points where TensorFlow could not differentiate the model
    raised: list[tuple[str, str]] = field(default_factory=list)
    # points where the float32 gradient differs from the float64 copy's and differences could not tell which is
    # right (own_precision): the verdict is incomplete at best
    undecided: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ProbeConfig:
    """How a Prober runs: the seed of its random cotangents and directions, whether it may make a float64 copy
    (`upcast`), the inputs read from --inputs (`given`), and `suspects(sources, output)`: the ops on the gradient
    path between them whose backward can make a NaN or Inf (read from the static pass), named when forensics
    cannot locate the op at fault."""

    seed: int
    upcast: bool
    given: frozenset[str] = frozenset()
    suspects: Callable[..., tuple] | None = None
    local: bool = False  # the local checks decide the probe-point checks (as they decided the numeric checks)
    # --precision's target: a model that computes in it inside is compared with its float64 copy by that stage
    # (stability.precision, point by point over the ladder), not again here
    precision: str | None = None


class ProbeAt(NamedTuple):
    """A probe point: the inputs of `config` scaled by sign × scale."""

    config: tuple[str, ...]
    scale: float
    sign: int


# the reason recorded for a probe point where the model's forward itself raises (stability._raising_points words it)
FORWARD_RAISES = "the forward raises: "


class _Stack:
    """The batched ladder's passes over one config: `points` probe points stacked after the base point in each, all
    run by one Runner (one trace of the model's gradient), made on the first pass and moved to each stack after."""

    def __init__(self, points: int):
        self.points = points
        self._runner: Any = None

    def runner(self, prober: Prober, stacked: dict[str, np.ndarray]):
        from .runner import Runner

        if self._runner is None:
            self._runner = Runner(prober.loaded.fn, stacked, prober.plan.input_sources, prober.variables,
                                  prober.plan.float_outputs)
        else:
            self._runner.move_to(stacked, self._runner.var_base)
        return self._runner


# what a Prober holds per base point: `_rebased` swaps it
_FRAME = ("base", "base_outputs", "u", "label", "stacked", "_runners", "_last", "_last64", "_base_grads")


class Prober:
    """Gradients of one loaded model at moved points, with the float64 copy and forensics on demand."""

    def __init__(self, loads, plan, base: dict[str, np.ndarray], variables: list, analysis, config: ProbeConfig):
        """`loads` (numeric.runner.ModelLoads): the model as the numeric checks read and loaded it, and its
        float64 copy, shared here. `analysis`: the static pass's StaticAnalysis, whose graph and gradient
        functions the forensics read."""
        seed, upcast, given, suspects = config.seed, config.upcast, config.given, config.suspects
        self.config = config
        self.label: str | None = None  # how messages name the point checked, when it is not one scaled copy
        self.independent = False  # a stacked pass gave the base point's own outputs and gradients in its rows
        self.loads = loads
        self.loaded, self.info, self.tags = loads.get(False), loads.info, loads.tags
        self.plan, self.base = plan, base
        self.variables = variables  # (source name, loaded tf.Variable)
        self.var_names = [n for n, _ in variables]
        self.base_vars = [np.asarray(v.numpy()) for _, v in variables]
        # the dtype each source has in the model (gradients are handed over as float64)
        self.dtypes = {**{n: base[n].dtype for n in plan.input_sources},
                       **{n: np.dtype(v.dtype.as_numpy_dtype) for n, v in variables}}
        self.upcast = upcast
        self.seed, self.given = seed, given
        self.notes: list[str] = []
        # (outputs, input gradients, variable gradients) as the runner gave them at the last point, on the
        # model and on its float64 copy
        self._last: tuple | None = None
        self._last64: tuple | None = None
        self.checked: list[NumericResult] = []
        self.mismatches: list[Finding] = []
        self.raised: list[tuple[str, str]] = []  # (where, TensorFlow's reason): points it cannot differentiate
        self.forensics = shared_forensics(loads, analysis)
        self.analysis, self.local = analysis, config.local
        self.local_checks: list[LocalCheck] = []
        self._check_graphs: Any = None  # local.CheckGraphs: the probe points check the same ops at the same shapes
        self.suspects = suspects or (lambda _sources, _output: ())
        self._runners: dict[tuple[str | None, bool, bool], object] = {}  # per base point (_enter)
        self._f64: Any = None  # the loaded float64 copy; False when it cannot be made
        self._culprits: dict[tuple, Culprit | None] = {}
        self._uncuts: dict[tuple, Any] = {}
        self._forensics_failed: set[tuple] = set()  # culprit keys whose frozen graph could not be differentiated
        self._own: Any = None  # own_precision.Comparison, on first use; False when the model is not compared
        self.stacked = False  # the base is the moderate points stacked along the batch (check_moderate)
        self._enter(base)

    def _enter(self, base: dict[str, np.ndarray]) -> None:
        """Make `base` the point the runners are traced at and the cotangent is shaped for (the per-base state
        `_FRAME` names)."""
        outputs = self.loaded.fn(**{k: base[k] for k in self.plan.specs})
        self.base = base
        self.base_outputs = {o: np.asarray(outputs[o]) for o in self.plan.float_outputs}
        self._base_grads: dict[str, Any] | None = None  # the input gradients at the base point alone, on first use
        self._runners = {}
        self._last = self._last64 = None
        rng = np.random.default_rng([self.seed, 3])
        # A random signed cotangent, never ones: the gradient of sum(softmax(x)) is exactly zero.
        self.u = {o: rng.standard_normal(np.shape(outputs[o])) for o in self.plan.float_outputs}

    @contextmanager
    def _rebased(self, base: dict[str, np.ndarray], label: str) -> Iterator[None]:
        """This prober with `base` as its base point, named `label` in messages, for the duration; its own base
        point, runners and cotangent after."""
        saved = {k: getattr(self, k) for k in _FRAME}
        try:
            self._enter(base)
            self.label, self.stacked = label, True
            yield
        finally:
            self.__dict__.update(saved)

    def runner(self, output: str | None = None, f64: bool = False, with_variables: bool = True):
        """The numeric checks' Runner for u·f, over one output or (None) all of them; without variables, the
        gradient pass leaves the variables' gradients out (a ResNet50's backward to its weights costs as
        much as the one to its input)."""
        from .runner import Runner, signature_variables

        if len(self.plan.float_outputs) == 1:
            output = None  # one runner serves both
        key = (output, f64, with_variables)
        if key not in self._runners:
            fn = self._f64.fn if f64 else self.loaded.fn
            variables = self.variables if with_variables else []
            if f64 and with_variables:
                by_name = signature_variables(self.info, fn)
                variables = [(n, by_name[n]) for n in self.var_names]
            outs = self.plan.float_outputs if output is None else [output]
            self._runners[key] = Runner(fn, self.base, self.plan.input_sources, variables, outs)
        return self._runners[key]

    def gradients(self, point: dict[str, np.ndarray], output: str | None = None, f64: bool = False,
                  var_values: list[np.ndarray] | None = None, with_variables: bool = True):
        """(outputs, {source: float64 gradient, None where TensorFlow gives none}) of u·f at `point`
        (every signature input) and `var_values` (default: the variables' own values)."""
        runner = self._runner_at(point, (output, f64, with_variables), var_values)
        u = self.u if output is None else {output: self.u[output]}
        out, g_in, g_var = runner.gradient(u)
        if output is None:
            if f64:
                self._last64 = (out, g_in, g_var)
            else:
                self._last = (out, g_in, g_var)
        grads = {k: dense(g) for k, g in {**g_in, **dict(zip(self.var_names if with_variables else [], g_var))}.items()}
        if (self.config.precision and output is None and not f64 and with_variables and var_values is None
                and not self.stacked and same_point(point, self.base)):  # the precision stage's own point
            self.loads.base_gradients = (dict(point), self.u, grads)
        return out, grads

    def scaled_gradients(self, point: dict[str, np.ndarray], factor: float) -> dict[str, np.ndarray | None]:
        """{source: gradient} of (factor·u)·f at `point` in the model's own precision: the backward a loss scale
        `factor` runs (a power of two), not divided back."""
        _, g_in, g_var = self._runner_at(point, (None, False, True), None).gradient(
            {o: v * factor for o, v in self.u.items()})
        return {k: dense(g) for k, g in {**g_in, **dict(zip(self.var_names, g_var))}.items()}

    def _runner_at(self, point: dict[str, np.ndarray], kind: tuple, var_values: list[np.ndarray] | None):
        """The runner of `kind` = (output, f64, with_variables), moved to `point` and `var_values` (default: the
        variables' own values)."""
        runner = self.runner(*kind)
        var_values = self.base_vars if var_values is None else var_values
        runner.move_to({k: np.asarray(v, runner.input_dtypes[k].as_numpy_dtype) for k, v in point.items()},
                       [np.asarray(v, b.dtype.as_numpy_dtype) for v, b in zip(var_values, runner.var_base)])
        return runner

    def float64(self) -> bool:
        """Load the float64 copy once; False (with a note) when it cannot be made."""
        if self._f64 is None:
            from .runner import describe
            from .upcast import float64_blockers

            self._f64 = False
            if not self.upcast:
                self.notes.append("Stability probes without float64 comparison (disabled): every non-finite "
                                  "value is reported.")
                return False
            blockers = ["no TF2 object graph"] if self.info.function is None else float64_blockers(self.info)
            if blockers:
                self.notes.append(f"Stability probes without float64 comparison ({'; '.join(blockers)}): every "
                                  "non-finite value is reported.")
                return False
            try:
                self._f64 = self.loads.get(True)
            except Exception as exc:  # noqa: BLE001 - the float64 copy is optional
                self.notes.append(f"The float64 copy for the stability probes is not available "
                                  f"({describe(exc)}): every non-finite value is reported.")
        return bool(self._f64)

    def float64_gradients(self, point: dict[str, np.ndarray], output: str | None, with_variables: bool = True):
        """`gradients` of the float64 copy, None without one; a copy that loads but cannot run (a compiled
        XlaCallModule fixed to float32) is dropped, whatever the error, and the probes go on without it."""
        from .runner import ModelError

        if not self.float64():
            return None
        try:
            return self.gradients(point, output, f64=True, with_variables=with_variables)
        except ModelError as exc:
            self.loads.fail(True, exc)
            self._f64 = False
            self.notes.append(f"The float64 copy for the stability probes cannot run ({exc}): every non-finite "
                              "value is reported.")
            return None

    def point(self, config: tuple[str, ...], scale: float, sign: int) -> dict[str, np.ndarray]:
        """The probe point (config, scale, sign); (scale GIVEN) the base point itself."""
        return dict(self.base) if scale == GIVEN else scaled_point(self.base, config, scale, sign)

    def check_moderate(self, config: tuple[str, ...]) -> bool:
        """Check the gradient at the MODERATE points stacked along the batch, as one point (its results labelled
        scale 10); False when the model's examples cannot be stacked (the batched ladder did not show them apart, or
        the model is decided by its local checks, whose recorded values would grow with the stack)."""

        if self.local or not self.independent or self._batch_rows() is None:
            return False
        blocks = [scaled_point(self.base, config, scale, sign) for scale, sign in MODERATE]
        stacked = {k: np.concatenate([b[k] for b in blocks], axis=0) for k in self.base}
        before = len(self.checked)
        with self._rebased(stacked, MODERATE_LABEL):
            self.check_at(list(config), GIVEN, 1)
            self.checked[before:] = [replace(r, scale=1e1, reason=f"{r.reason}; at {MODERATE_LABEL}" if r.reason
                                             else f"at {MODERATE_LABEL}") for r in self.checked[before:]]
            self.compare_precision(dict(stacked), f"the probe points {MODERATE_LABEL}", 1e1)
        return True

    def culprit(self, key: tuple, find, on_path: tuple = ()) -> Culprit | None:
        """The op `find()` locates; when forensics fails, the one op on the gradient path (`on_path`: the
        ops between the probed sources and the output whose backward can make a NaN/Inf) if there is one."""
        if key not in self._culprits:
            try:
                self._culprits[key] = find()
            except Exception as exc:  # noqa: BLE001 - forensics is best effort; the probe result stands
                self._forensics_failed.add(key)
                note = (f"The op at fault in a stability probe could not be located: TensorFlow could not "
                        f"differentiate a frozen copy of the graph ({type(exc).__name__}; known to happen with "
                        "While, If and Case ops).")
                self.notes += [note] if note not in self.notes else []
                self._culprits[key] = None
                if len(on_path) == 1:
                    (op,) = on_path
                    self._culprits[key] = Culprit(op, f"not located by differentiating a frozen copy of the graph; "
                                                      f"{op.op_type} '{op.op_name}' is the only op on the gradient "
                                                      "path whose backward can make a NaN/Inf", on_path)
        return self._culprits[key]

    def _quiet_culprit(self, key: tuple, find) -> Culprit | None:
        """The op `find()` locates for an observation that is not reported; None, and no note, where forensics
        fails: it is detail, not evidence."""
        if key not in self._culprits:
            try:
                found = find()
            except Exception:  # noqa: BLE001 - best effort, as culprit()'s, and said nowhere
                return None
            self._culprits[key] = found  # every output at that point shares the frozen graph's run
        return self._culprits[key]

    def close(self) -> None:
        if self._check_graphs is not None:
            self._check_graphs.close()
        if self._own and self._own.checker is not None:
            self._own.checker.close()
        self.forensics.close()  # the loaded model and its float64 copy are closed by `loads`' owner

    def _forward_raises(self, point: dict[str, np.ndarray]) -> str | None:
        """TensorFlow's reason when the loaded model's forward alone raises at `point`, else None."""
        import tensorflow as tf

        from .runner import describe

        try:
            self.loaded.fn(**{k: tf.constant(v, self.plan.specs[k].dtype) for k, v in point.items()
                              if k in self.plan.specs})
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            return describe(exc)
        return None

    # -- one probe point ---------------------------------------------------------------------------
    def observe(self, config: tuple[str, ...], scale: float, sign: int) -> dict[tuple[str, str], Observation]:
        """What every (source, output) pair does at the probe point (config, scale, sign), or (scale GIVEN) at
        the base point itself: the inputs given with --inputs."""
        from .runner import ModelError

        point = dict(self.base) if scale == GIVEN else self.point(config, scale, sign)
        try:
            out, grads = self.gradients(point)
            per_output = dict.fromkeys(self.plan.float_outputs, (out, grads))
            if len(per_output) > 1 and any(nonfinite(g) for g in grads.values()):
                per_output = {o: self.gradients(point, o) for o in self.plan.float_outputs}  # whose gradient?
        except ModelError as exc:
            if exc.stage != "gradient":
                raise
            # TensorFlow cannot differentiate the model at this point (a determinant's gradient at a singular
            # matrix): the hazard itself, reported; nothing is observed there. Where its forward alone raises too
            # (a solve of that matrix), that is the reason said
            forward = self._forward_raises(point)
            reason = str(exc) if forward is None else FORWARD_RAISES + forward
            self.raised.append((Observation(OK, scale, sign, config).where(self.plan.input_sources), reason))
            return {}
        exact: dict[str, tuple] = {}

        def float64_at(o: str):
            """(outputs, gradients) of the float64 copy at this point, None without one; once per output."""
            if o not in exact:
                exact[o] = self.float64_gradients(point, o)
            return exact[o]

        seen: dict[tuple[str, str], Observation] = {}
        for o, (o_out, o_grads) in per_output.items():
            sources = self._sources_of(o)
            forward = nonfinite(o_out[o])
            if forward:
                kind, culprit, note = self._judge_forward(point, o, float64_at, config, scale, sign)
                fits = _fits(float64_at(o), o, o_out[o]) if kind == FORWARD else ""
                for s in sources:
                    seen[s, o] = Observation(kind, scale, sign, config, forward, nonfinite(o_grads.get(s)),
                                             culprit, note, fits)
                continue
            for s in sources:
                grad = o_grads.get(s)
                seen[s, o] = (self._judge_gradient(point, o, s, grad, float64_at(o), ProbeAt(config, scale, sign))
                              if nonfinite(grad) else Observation(OK, scale, sign, config))
        return seen

    def _sources_of(self, output: str) -> list[str]:
        """The inputs and variables the static pass connects to `output`: the pairs a probe point judges."""
        return [s for s in self.plan.input_sources + self.var_names if output in self.plan.connected(s)]

    def observe_many(self, config: tuple[str, ...], points: list[tuple[float, int]]
                     ) -> list[dict[tuple[str, str], Observation]]:
        """`observe` at every (scale, sign) of `points`, the points stacked along the batch dimension in one
        gradient pass where the model allows it; a point whose rows are not all finite is observed again on
        its own (its float64 reference and forensics need it alone)."""
        finite = self._batched_finite(config, points)
        seen = []
        for (scale, sign), ok in zip(points, finite):
            if ok:
                seen.append({(s, o): Observation(OK, scale, sign, config) for o in self.plan.float_outputs
                             for s in self._sources_of(o)})
            else:
                seen.append(self.observe(config, scale, sign))
        return seen

    def _batched_finite(self, config: tuple[str, ...], points: list[tuple[float, int]]) -> list[bool]:
        """For each point, whether its outputs and gradients are all finite, from gradient passes over the
        points stacked along the batch dimension (at most BATCH_ROWS rows each); False where that cannot
        tell (no batch dimension, or a model whose examples are not independent) so that the point is
        observed alone. The base point rides along in every batch: its rows must equal the model's own
        outputs at that point, or the examples influence each other and the batch says nothing."""
        rows = self._batch_rows()
        if rows is None or len(points) < 2:
            return [False] * len(points)
        per_batch = max(1, self._rows_per_pass() // rows - 1)
        stack = _Stack(per_batch if len(points) > per_batch else len(points))
        finite: list[bool] = []
        for start in range(0, len(points), per_batch):
            chunk = points[start:start + per_batch]
            finite += self._finite_chunk(config, chunk, rows, stack) or [False] * len(chunk)
            give_back()  # the pass's stacked rows, activations and gradients are freed before the next one
        return finite

    def _rows_per_pass(self) -> int:
        """Rows of one batched gradient pass: fewer for a large model, whose activations dominate its memory."""
        return BATCH_ROWS_LARGE if self.large() else BATCH_ROWS

    def large(self) -> bool:
        """The model has local.LARGE_MODEL trainable parameters or more."""
        from .local import LARGE_MODEL, model_parameters

        return model_parameters(self.loaded.fn) >= LARGE_MODEL

    def _batch_rows(self) -> int | None:
        """The batch size of the base point when every input and float output has it as its leading
        dimension and the signature lets it vary; None otherwise."""
        sizes = {int(np.shape(v)[0]) if np.ndim(v) else -1 for v in self.base.values()}
        sizes |= {int(np.shape(v)[0]) if np.ndim(v) else -1 for v in self.base_outputs.values()}
        if len(sizes) != 1 or -1 in sizes:
            return None
        specs = self.plan.specs
        if any(specs[k].shape.rank is None or specs[k].shape.rank == 0 or specs[k].shape[0] is not None
               for k in specs):
            return None
        return next(iter(sizes))

    def _finite_chunk(self, config, chunk: list[tuple[float, int]], rows: int, stack: _Stack) -> list[bool] | None:
        from .runner import ModelError

        # a shorter chunk repeats its last point up to the stack's size: every pass has the shapes of the first,
        # whose traced gradient it reuses (a ResNet50's backward costs about a second to trace)
        padded = chunk + [chunk[-1]] * max(0, stack.points - len(chunk))
        blocks = [self.base] + [self.point(config, scale, sign) for scale, sign in padded]
        stacked = {k: np.concatenate([b[k] for b in blocks], axis=0) for k in self.base}
        n = len(blocks)
        try:
            runner = stack.runner(self, stacked)
            out, g_in, g_var = runner.gradient({o: np.concatenate([self.u[o]] * n, axis=0) for o in self.u})
        except ModelError:
            return None  # observed one by one, where the error is reported as it always was
        if not self._base_rows_agree(out, rows) or not self._base_gradient_rows_agree(g_in, rows):
            return None
        self.independent = True
        rows_ok = self._finite_rows(out, g_in, n)[:len(chunk) + 1]
        if any(nonfinite(dense(g)) for g in g_var):
            # The variables' gradients are summed over the points: any of them may be at fault. Without the
            # points whose own rows are not finite, one more pass tells whether the others are clean.
            good = [p for p, ok in zip(chunk, rows_ok[1:]) if ok]
            if not rows_ok[0] or len(good) == len(chunk) or not good:
                return None
            again = iter(self._finite_chunk(config, good, rows, stack) or [False] * len(good))
            return [bool(ok) and next(again) for ok in rows_ok[1:]]
        return [bool(x) for x in rows_ok[1:]]

    def _base_rows_agree(self, out, rows: int) -> bool:
        """Whether the first `rows` rows of the stacked outputs are the base point's own outputs: the stacked
        pass computes each point as it would alone (no example mixes with the others)."""
        for o, mine in self.base_outputs.items():
            theirs = np.asarray(out[o], np.float64)[:rows]
            mine64 = np.asarray(mine, np.float64)
            size = float(np.max(np.abs(mine64[np.isfinite(mine64)]), initial=0.0))
            if theirs.shape != mine64.shape or not np.allclose(theirs, mine64, rtol=1e-3, atol=1e-3 * size + 1e-30,
                                                                  equal_nan=True):
                return False
        return True

    def _base_gradient_rows_agree(self, g_in, rows: int) -> bool:
        """Whether the first `rows` rows of the stacked input gradients are the base point's own: a model whose
        examples meet only in the backward (a norm over the whole batch that the forward clips by, as
        tf.clip_by_global_norm of a layer's activations does) gives equal outputs and different gradients, and a
        gradient NaN at every point alone (a zero norm) can be finite in the stack."""
        if self._base_grads is None:
            _, grads = self.gradients(self.base, with_variables=False)
            self._base_grads = {k: grads.get(k) for k in g_in}
        for k, g in g_in.items():
            mine = self._base_grads.get(k)
            if (g is None) != (mine is None):
                return False
            if g is None or mine is None:
                continue
            theirs, mine64 = np.asarray(dense(g), np.float64)[:rows], np.asarray(mine, np.float64)
            size = float(np.max(np.abs(mine64[np.isfinite(mine64)]), initial=0.0))
            if theirs.shape != mine64.shape or not np.allclose(theirs, mine64, rtol=1e-3, atol=1e-3 * size + 1e-30,
                                                                  equal_nan=True):
                return False
        return True

    def _finite_rows(self, out, g_in, n: int) -> np.ndarray:
        """For each of the `n` stacked points, whether its outputs and input gradients are all finite."""
        rows_ok = np.ones(n, dtype=bool)
        for values in [out[o] for o in self.plan.float_outputs] + [dense(g) for g in g_in.values()]:
            if values is None:
                continue
            a = np.asarray(values, np.float64).reshape(n, -1)
            rows_ok &= np.isfinite(a).all(axis=1)
        return rows_ok

    def variables_at_probe_points(self) -> bool:
        """Whether the probe-point checks also check the variables: when the model holds custom gradients, whose
        gradient for a weight can be wrong only for large activations as well as for an input (TensorFlow's
        registered gradients are not checked there again: a ResNet50's variables would cost two more sweeps
        moving 25M parameters)."""
        return bool(self.var_names) and bool(self.info.custom_gradients)

    def check_at(self, inputs: list[str], scale: float, sign: int) -> None:
        """Check the gradient of every input in `inputs` (and of the variables, `variables_at_probe_points`)
        against finite differences at a probe point: on the float64 copy when one runs (the numeric checks'
        own, already loaded: rounding hides nothing there, where float32 cannot decide for an output that
        oscillates or cancels at large scales), else in the model's own precision. With `local`, each op is checked
        on its own at the values it receives there, and the whole-model checks run only if one is left undecided."""
        before, found = len(self.checked), len(self.mismatches)
        if self.local and scale == 0.0 and self.large():
            # a large model at inputs x 0 meets every kink at once (each ReLU's input and each max-pool window is 0:
            # a ResNet50's local checks left 25 undecided there, and its whole-model check, on its float64 copy, did
            # not settle): 12 s that decide nothing
            self.notes.append(f"The gradient at inputs × 0 is not checked against finite differences in a model of "
                              f"{LARGE_MODEL:,} trainable parameters or more (only that it is finite there): every "
                              "kink is met at once there.")
            return
        decided, failures = self._local_at(inputs, scale, sign) if self.local else (False, [])
        if decided:
            self.mismatches.extend(failures)
            return
        self._whole_model_at(inputs, scale, sign)
        if failures and any(_discrepant(r) for r in self.checked[before:]):
            self.mismatches.extend(failures)  # the model's gradient is not right there either: the op is named
        elif failures:
            ops = ", ".join(sorted({f.op.label for f in failures if f.op is not None}))
            self.notes.append(f"At the probe point inputs × {sign * scale:g}, the local checks found the gradient of "
                              f"{ops} off at the values the model gives it there, but the model's own gradient there "
                              "is not found off (its whole-model checks: "
                              f"{', '.join(sorted({r.status for r in self.checked[before:]})) or 'none'}): that op's "
                              "error does not reach the outputs here.")
        elif not self.local and any(_discrepant(r) for r in self.checked[before:]):
            self._name_ops_at(inputs, scale, sign, before, found)

    def _name_ops_at(self, inputs: list[str], scale: float, sign: int, rows: int, found: int) -> None:
        """The whole-model checks at this probe point (its rows from `rows` on, their findings from `found` on) saw
        a discrepancy that fails or that no kink explains: the local checks at the same point name the op whose
        gradient is not its derivative at the values the model's forward gave it there (TensorFlow's Cumprod
        gradient where a factor is exactly 0, Xlogy's at x = 0: wrong at that point only, so a nearby point never
        confirms it). Each row such an op covers (its source and an output on the op's paths) fails with that
        evidence, and the op's finding stands for the row's whole-model one. A custom gradient is named so at inputs
        × 0 when its own check passes at inputs × 1 (tester 24: one that returns 0 at exactly x = 0): one never its
        forward's derivative may be meant to be (a straight-through estimator), which the whole-model checks judge."""
        failures, written = self._ops_wrong_at(inputs, scale, sign)
        named: list[Finding] = []
        # the sources of the rows each named op explains: its finding is said of those (tester 24: an Xlogy of labels
        # and of x was said of x and w too, whose rows there pass)
        explained: dict[int, set[str]] = {}
        for i in range(rows, len(self.checked)):
            r = self.checked[i]
            ops = self._covering(r, failures) if _discrepant(r) else []
            if not ops:
                continue
            for f in ops:
                explained.setdefault(id(f), set()).update(
                    set(f.sources) & set(self.var_names) if r.source == ALL_VARIABLES else {r.source})
            self.checked[i] = replace(r, status="fail", evidence=_named_evidence(ops, written))
            named.extend(f for f in ops if f not in named)
        named = [replace(f, sources=tuple(s for s in f.sources if s in explained[id(f)]) or f.sources) for f in named]
        covered = {s for f in named for s in f.sources}
        whole = [f for f in self.mismatches[found:] if not (set(f.sources) and set(f.sources) <= covered)]
        self.mismatches[found:] = whole + named

    def _ops_wrong_at(self, inputs: list[str], scale: float, sign: int) -> tuple[list[Finding], set]:
        """(the findings of the ops the local checks at this probe point find wrong that may be named, the custom
        gradients among them): TensorFlow's own gradients, and at inputs × 0 a custom gradient whose own check passes
        at inputs × 1 (elsewhere the whole-model finding names it, once for every point)."""
        seen = len(self.local_checks)
        _decided, failures = self._local_at(inputs, scale, sign)
        failed = [c for c in self.local_checks[seen:] if c.status == "fail"]
        own = {c.op for c in failed if c.kind == "op"}
        written: set = set()
        if scale == 0.0 and any(c.kind == "custom_gradient" for c in failed):
            written = {c.op for c in failed if c.kind == "custom_gradient"} & self._written_right_at_one(inputs)
        return [f for f in failures if f.op in own | written], written

    def _written_right_at_one(self, inputs: list[str]) -> set:
        """The custom gradients whose own check passes at inputs × 1 (recorded nowhere: a reference point)."""
        from ..errors import raised_by_tensorflow
        from . import local

        point = self.point(tuple(inputs), 1.0, 1)
        rng = np.random.default_rng([self.seed, 9, 1000, 2])
        try:
            outcome = local.LocalChecker(self.forensics, rng, analysis=self.analysis, value_free=False,
                                         graphs=self._check_graphs).run(point)
        except Exception as exc:
            if not raised_by_tensorflow(exc):
                raise
            return set()
        return {c.op for c in outcome.checks if c.kind == "custom_gradient" and c.status == "pass"}

    def _covering(self, r: NumericResult, failures: list[Finding]) -> list[Finding]:
        """The op findings among `failures` whose op lies on the row's pairs: its source, and one of its outputs."""
        outputs = set(self.plan.float_outputs) if r.outputs.every else set(r.outputs.names)
        variables = set(self.var_names)
        return [f for f in failures if set(f.outputs) & outputs and (
            r.source in f.sources or (r.source == ALL_VARIABLES and bool(set(f.sources) & variables)))]

    def compare_precision(self, point: dict[str, np.ndarray], where: str, scale: float | None,
                          check: bool = True) -> None:
        """The model's float32 gradient against its float64 copy's at `point` (own_precision), for a float32 model
        with a float64 copy; `where` names the point in messages, `scale` is its signed probe scale. `check` False:
        only decide whether the model is compared."""
        from . import own_precision
        from .runner import ModelError

        if self._own is None:
            why = own_precision.wanted(self)
            self._own = own_precision.Comparison() if why is None else False
            if why and self.plan.native == "float32":
                self.notes.append(f"The float32 gradients were not compared with the float64 copy's: {why}.")
        if self._own is False or not check:
            return
        try:
            if self._own.half is None and self._own.points == 0:
                self._own.half = own_precision.half_inside(self)
            if self._own.half is not None:
                if self._own.half != self.config.precision and own_precision.whole_model(self):
                    own_precision.compare_underflow(self, point, where, self._own)
            elif own_precision.whole_model(self):
                own_precision.compare_at(self, point, where, scale, self._own)
            elif not self.stacked:  # the op-by-op check graphs are shaped for one example: a stack is not compared
                own_precision.compare_ops(self, point, where, self._own)
        except ModelError as exc:  # the probes report the points TensorFlow cannot differentiate
            if exc.stage != "gradient":
                raise

    def has_float64(self) -> bool:
        """Whether the float64 copy is loaded already, here or by the numeric checks (nothing is loaded here)."""
        return bool(self._f64) or (self._f64 is None and self.loads.has(True))

    @property
    def last64(self) -> tuple | None:
        """(outputs, input gradients, variable gradients) of the float64 copy at its last whole-model point."""
        return self._last64

    def own_precision(self) -> Any:
        """What comparing the float32 and float64 gradients gave (an own_precision.Comparison), None if nothing."""
        return self._own or None

    def _whole_model_at(self, inputs: list[str], scale: float, sign: int) -> None:
        if self.plan.native != "float64":
            exact = self._float64_checks(None, inputs, scale, sign)
            if exact is not None:
                self.checked.extend(replace(r, scale=sign * scale, precision_reason="float64 copy of the model")
                                    for r in exact)
                return
        with_variables = self.variables_at_probe_points()
        self.gradients(self.point(tuple(inputs), scale, sign), with_variables=with_variables)
        if self._last is None:
            return
        native = self._check_groups(self.runner(None, False, with_variables), self._last,
                                    ProbeAt(tuple(inputs), scale, sign), self.plan.native, None)
        why = "the stability probes run the model in its own precision"
        self.checked.extend(replace(r, scale=sign * scale, precision_reason=why) for _, r in native)

    def _local_at(self, inputs: list[str], scale: float, sign: int) -> tuple[bool, list[Finding]]:
        """The local checks at the probe point: whether they decided it (every op passed, or a custom gradient
        failed with the model's own cotangent), and the findings of the ops that failed (when undecided, kept only
        if the whole-model checks there do not pass either)."""
        from . import local

        point = self.point(tuple(inputs), scale, sign)
        rng = np.random.default_rng([self.seed, 9, abs(int(scale * 1e3)), sign + 1])
        if self._check_graphs is None:
            self._check_graphs = local.CheckGraphs()
        try:
            outcome = local.LocalChecker(self.forensics, rng, analysis=self.analysis, value_free=False,
                                         graphs=self._check_graphs).run(point)
        except Exception as exc:  # a frozen graph TensorFlow cannot run (a variable the model writes, frozen to a
            from ..errors import raised_by_tensorflow  # constant): undecided here, the whole-model checks decide

            if not raised_by_tensorflow(exc):
                raise
            return False, []
        self.local_checks.extend(replace(c, scale=sign * scale) for c in outcome.checks)
        where = f"inputs × {sign * scale:g} (stability probes, local checks)"
        found = [replace(f, message=f"At the probe point {where}: {f.message}")
                 for f in local.findings(outcome, self.analysis)]
        return local.verdict(outcome) is not None, found

    def _float64_checks(self, groups: list | None, inputs: list[str], scale: float, sign: int
                        ) -> list[NumericResult] | None:
        """One result per group (None: every input of `inputs` with its output groups), checked on the
        float64 copy at the probe point; None without a copy that runs."""
        point = self.point(tuple(inputs), scale, sign)
        # a runner without the variables' gradients unless they are checked too, moved to the point
        with_variables = self.variables_at_probe_points()
        if self.float64_gradients(point, None, with_variables=with_variables) is None or self._last64 is None:
            return None
        results = self._check_groups(self.runner(None, True, with_variables), self._last64,
                                     ProbeAt(tuple(inputs), scale, sign), "float64", groups)
        return [r for _, r in results]

    def _check_groups(self, runner, at: tuple, probe: ProbeAt, dtype: str,
                      groups: list | None) -> list[tuple[Any, NumericResult]]:
        """(group, result) of each check at the point `at` = (outputs, input gradients, variable gradients)
        the runner sits at, the probe point `probe`: `groups`, or every input of `probe.config` with its output
        groups (a group of several outputs all inconclusive is checked again output by output)."""
        from .checks import Checker, Group

        f64 = dtype == "float64" and self.plan.native != "float64"
        small = (probe.scale, probe.sign) in CHECKED_WRITTEN or probe.scale == 0.0
        checker = Checker(runner, self.settings(runner, dtype, f64, small),
                          np.random.default_rng([self.seed, 5, abs(int(probe.scale * 1e3)), probe.sign + 1]))
        checker.base_outputs = at[0]
        at_outputs = self._cotangents(runner, at)
        checked: list[tuple[Any, NumericResult]] = []

        def check(group) -> None:
            before = len(checker.results)
            checker.check_group(group, *at_outputs(tuple(group.outputs)))
            checked.extend((group, r) for r in checker.results[before:])

        split = groups is None
        for group in self._probe_groups(runner, probe.config) if groups is None else groups:
            before = len(checked)
            check(group)
            if split and len(group.outputs) > 1 and all(r.status == "inconclusive" for _, r in checked[before:]):
                # one output oscillating or saturating at this scale must not hide another's wrong
                # gradient: check them one by one
                del checked[before:]
                for o in group.outputs:
                    check(Group(group.source, (o,), inputs=list(group.inputs), variables=list(group.variables)))
        shown = self.label or f"inputs × {probe.sign * probe.scale:g}"
        where = f"{shown} (stability probes{', float64 copy' if f64 else ''})"
        reported = {s for f in self.mismatches for s in f.sources}
        for f in checker.findings:
            if f.rule == "gradient-mismatch" and not set(f.sources) & reported:  # one per source is enough
                self.mismatches.append(replace(f, message=f"At the probe point {where}: "
                                                          f"{f.message}"))
        return checked

    def settings(self, runner, dtype: str, f64: bool, small: bool = False):
        """The numeric checks' Settings at a probe point, in `dtype` (`f64`: on the float64 copy of a model that
        is not float64; `small`: a CHECKED_WRITTEN point or inputs × 0, session.COPY_AGREEMENT): strict, as a probe
        point's extremes ask."""
        from .checks import Settings
        from .session import EPS, RESOLUTION, check_floor
        from .sweep import ladder_for

        eps = EPS[dtype]
        return Settings(dtype=dtype, upcast=f64, eps=eps, ladder=ladder_for(eps, f64),
                        floor=check_floor(dtype, small and f64 and self.plan.native == "float32"),
                        resolution=RESOLUTION, op_types=self.info.op_types,
                        custom_gradients=self.info.custom_gradients, domains=self.plan.domains,
                        given=self.given, strict=True, stopped=self.plan.stopped,
                        uncut=self._uncut(runner) if f64 and self.plan.stopped else None)

    def _probe_groups(self, runner, inputs) -> list:
        """Every input of `inputs` with each of its output groups, and the runner's variables (when it has them,
        `variables_at_probe_points`) in its order."""
        from .checks import Group
        from .session import variable_groups

        groups = [Group(n, outs, inputs=[n]) for n in inputs for outs in self.plan.output_groups(n)]
        if runner.vars:
            groups += variable_groups(self.plan, runner.var_names)[0]
        return groups

    def _cotangents(self, runner, at: tuple) -> Callable[[tuple[str, ...]], tuple[dict[str, np.ndarray], Any]]:
        """outs -> (the cotangent on `outs` only, zero on the others, and its gradient Point at `at`), each computed
        once: a check labelled with some outputs differentiates and differences those alone, never an output
        the source reaches only through a stop_gradient."""
        from .checks import Point

        out, g_in, g_var = at
        points: dict[tuple[str, ...], tuple[dict[str, np.ndarray], Point]] = {}

        def at_outputs(outs: tuple[str, ...]) -> tuple[dict[str, np.ndarray], Point]:
            if outs not in points:
                if set(outs) == set(self.u):
                    points[outs] = (self.u, Point(g_in, g_var, out))
                else:
                    u = {o: self.u[o] if o in outs else np.zeros_like(self.u[o]) for o in self.u}
                    _, gi, gv = runner.gradient(u)
                    points[outs] = (u, Point(gi, gv, out))
            return points[outs]

        return at_outputs

    def _uncut(self, runner):
        """The float64 copy without its cuts, for the runner's sources (one per set of variables)."""
        from .runner import UncutDerivative

        key = tuple(runner.var_names)
        if key not in self._uncuts:
            self._uncuts[key] = UncutDerivative(self.loads, self.plan.input_sources, runner.var_names,
                                                self.plan.float_outputs)
        return self._uncuts[key]

    def _judge_forward(self, point, output, float64_at, config, scale, sign):
        """(kind, culprit, note) of a non-finite forward."""
        exact = float64_at(output)
        key = ("forward", config, scale, sign)
        if exact is not None and nonfinite(exact[0][output]):
            # not a float32 hazard, but where it starts is still said (tester 21: an empty segment's max is the
            # dtype's lowest value, which a MatMul after it overflows at every input)
            located = self._quiet_culprit(key, lambda: self.forensics.forward(point))
            return DOMAIN, located, ("non-finite in float64 too (outside the function's domain, or beyond float64's "
                                     "range): not reported")
        culprit = self.culprit(key, lambda: self.forensics.forward(point))
        return FORWARD, culprit, "" if culprit is not None else self._unlocated(key)

    def _judge_gradient(self, point, output, source, grad, exact, at: ProbeAt) -> Observation:
        """The observation of a non-finite gradient of `output` for `source` at the probe point `at` (`exact`:
        the float64 copy's (outputs, gradients) there, None without one)."""
        config, scale, sign = at
        value = nonfinite(grad)
        if value != "nan" and exact is not None and exact[1].get(source) is not None:
            bad = ~np.isfinite(grad)
            dtype = self.dtypes[source]
            true = np.abs(exact[1][source][bad]) if exact[1][source].shape == bad.shape else np.array([])
            # A true value that is infinite in float64 too is no overflow: the derivative is infinite or does
            # not exist there (Sqrt at 0, Angle at the origin), a hazard like a NaN.
            if true.size and np.all(np.isfinite(true)) and np.all(true > float(np.finfo(dtype).max)):
                return Observation(OVERFLOW, scale, sign, config, value, note=f"its true value, about "
                                   f"{float(true.max()):.3g} by float64, is beyond {dtype}'s range: an overflow "
                                   "of the value itself, not reported")
        key = ("gradient", output, config, scale, sign)
        culprit = self.culprit(key, lambda: self.forensics.backward(point, output, self.u[output]),
                               self.suspects(config, output))
        note = ""
        if culprit is None and key not in self._forensics_failed and len(self.plan.float_outputs) > 1:
            culprit, note, through = self._made_by_another_output(point, output, config, scale, sign)
            return Observation(GRADIENT, scale, sign, config, value, culprit=culprit,
                               note=note or ("" if culprit is not None else self._unlocated(key)), through=through)
        return Observation(GRADIENT, scale, sign, config, value, culprit=culprit,
                           note=note or ("" if culprit is not None else self._unlocated(key)))

    def _unlocated(self, key: tuple) -> str:
        """Why the forensics located no op for the probe observation `key` ("forward" or "gradient" first)."""
        if key in self._forensics_failed:
            return "TensorFlow could not run a frozen copy of the graph to look for it"
        if key[0] == "forward":
            return "in a frozen copy of the graph run at that point, no op returned a NaN/Inf from finite float inputs"
        return ("in a frozen copy of the graph differentiated at that point, no op's backward turned finite "
                "gradients into NaN/Inf")

    def _made_by_another_output(self, point, output, config, scale, sign) -> tuple[Culprit | None, str, str]:
        """(culprit, note, the other output) of a non-finite gradient of `output` that the frozen graph,
        differentiated for `output` alone, did not locate. Where that backward is finite at the point, the NaN/Inf
        is made in another output's backward, which TensorFlow runs with zero cotangents as part of the
        signature's (0 × inf): the op located there is the cause of both (one finding)."""
        try:
            alone_finite = self.forensics.own_backward_finite(point, output, self.u[output])
        except Exception:  # noqa: BLE001 - forensics is best effort; the probe result stands
            alone_finite = False
        if not alone_finite:
            return None, "", ""
        for other in self.plan.float_outputs:
            if other == output:
                continue
            found = self.culprit(("gradient", other, config, scale, sign),
                                 lambda other=other: self.forensics.backward(point, other, self.u[other]),
                                 self.suspects(config, other))
            if found is not None:
                return found, "", other
        return None, ("with several outputs TensorFlow runs the backward of the whole signature function (zero "
                      "cotangents for the other outputs), and this output's own backward is finite here, so a "
                      "NaN/Inf made in another output's backward (0 × inf) reaches this gradient; look at the "
                      "findings on the other outputs first"), ""


def _fits(exact, output: str, value) -> str:
    """The float64 copy's value of `output` ("about -217", the one of largest magnitude) when it is finite and
    within the range of the dtype the model computed `value` in, else ""."""
    if exact is None or output not in exact[0]:
        return ""
    true = np.asarray(exact[0][output], dtype=np.float64)
    dtype = np.asarray(value).dtype
    if not true.size or not np.all(np.isfinite(true)) or not np.issubdtype(dtype, np.floating):
        return ""
    top = float(true.flat[int(np.argmax(np.abs(true)))])  # the value of largest magnitude, with its sign
    return f"about {top:.3g}" if abs(top) <= float(np.finfo(dtype).max) else ""


def run_ladder(prober: Prober, scales) -> LadderOutcome:
    """Probe every (config, scale, sign); one result per (source, output, scale): its worst observation."""
    plan = prober.plan
    # Class-probability labels stay a distribution: they are not scaled.
    inputs = [n for n in plan.input_sources
              if getattr(plan.domains.inputs.get(n), "kind", None) != "distribution"]
    if inputs or prober.var_names:
        prober.compare_precision(dict(prober.base), "the inputs given with --inputs" if prober.given
                                 else "the synthesised point", None)
    worst, reported, skipped = _climb(prober, inputs, scales)
    if prober.given and inputs:
        # The ladder scales the inputs normalised to a largest magnitude of 1: the given point itself is not on
        # it, and the model as saved may overflow there while the float64 checks at that point pass.
        reported += [(s, o, obs) for (s, o), obs in prober.observe(tuple(inputs), GIVEN, 1).items() if obs.reported]
    results = _ladder_results(prober, _rows_of(prober, worst), inputs)
    notes = _ladder_notes(prober, inputs, skipped) + _domain_notes(list(worst.values()), plan.input_sources)
    probed = sorted({abs(float(s)) for s in scales} - skipped - {0.0})
    own = prober.own_precision()
    if own is not None:
        from .own_precision import summary
        from .own_precision import underflow_findings as own_findings

        notes += own.notes + summary(own)
    return LadderOutcome(results, reported, notes, probed, prober.checked + (own.rows if own else []),
                         prober.mismatches + (own.merged() + own_findings(own) if own else []),
                         list(prober.raised),
                         own.undecided if own else [])


def _ladder_notes(prober: Prober, inputs: list[str], skipped: set[float]) -> list[str]:
    """What the ladder's rows do not say: inputs replaced by ones (all zeros: no scale moves them), scales skipped."""
    zeros = [n for n in inputs if not np.any(np.asarray(prober.base[n]))]
    notes = [f"Stability probes: {', '.join(zeros)} {'is' if len(zeros) == 1 else 'are'} all zeros at the base "
             "point, which no scale moves: the probes scale a tensor of ones in its place (inputs × s is ones × s "
             "there)."] if zeros else []
    return notes + ([f"Stability probes skipped scale(s) {', '.join(f'{s:g}' for s in sorted(skipped))}: beyond the "
                     "range of the inputs' dtype."] if skipped else [])


def _domain_notes(observed: list[Observation], inputs: list[str]) -> list[str]:
    """Where the forward is not finite in the float64 copy either (not reported: outside the function's domain, or
    beyond float64's range), the op it starts at, so that a person sees it outside the JSON (tester 24: a mean over
    the unmasked steps of an all-padding input is 0/0)."""
    by_op: dict[OpRef, list[Observation]] = {}
    for obs in observed:
        if obs.kind == DOMAIN and obs.culprit is not None:
            by_op.setdefault(obs.culprit.op, []).append(obs)
    notes = []
    for op, seen in list(by_op.items())[:3]:
        where = list(dict.fromkeys(o.where(inputs) for o in seen))  # in the ladder's order
        notes.append(f"The forward is {seen[0].value} in the float64 copy too at {', '.join(where[:4])}"
                     + (f" and {len(where) - 4} more" if len(where) > 4 else "")
                     + f" (outside the function's domain, or beyond float64's range: not reported); it starts at "
                       f"{op.label}: {seen[0].culprit.detail if seen[0].culprit else ''}.")
    return notes


def _named_evidence(ops: list[Finding], written: set) -> str:
    """A probe-point row's evidence where the local checks there name the ops at fault (`written`: custom gradients
    among them, wrong at that point only)."""
    labels = ", ".join(sorted({f.op.label for f in ops if f.op is not None}))
    return (f"the gradient of {labels} failed its own check at the values the model's forward gave it at this point "
            "(the local checks): the discrepancy is that op's"
            + ("; a custom gradient that passes its own check at inputs × 1, so wrong at this point, not a surrogate"
               if any(f.op in written for f in ops) else ""))


def _discrepant(r: NumericResult) -> bool:
    """A check at a probe point that failed, or that measured a difference beyond its bound which no kink on the
    path explains (left inconclusive because the nearby point it tried agreed)."""
    return r.status == "fail" or (r.status == "inconclusive" and r.kink_op is None and r.rel_error is not None
                                  and r.bound is not None and r.rel_error > r.bound)


def _checked_points(prober: Prober) -> tuple[tuple[float, int], ...]:
    """The (scale, sign) of the probe points where the gradient is checked: CHECKED, and CHECKED_WRITTEN in a model
    with a written gradient, not where the probe points are decided op by op (a large model: a float32 custom
    gradient's own check at small values sees mostly rounding, and escalating it would load the float64 copy)."""
    return CHECKED + (CHECKED_WRITTEN if prober.info.custom_gradients and not prober.local else ())


def _climb(prober: Prober, inputs: list[str], scales):
    """Observe every (config, scale, sign) of the ladder: all `inputs` together and, when there are several,
    each alone; the gradient is checked at the CHECKED points of the first config where all is finite.
    Returns the worst observation per (source, output, scale), the reported ones, and the scales skipped."""
    configs = ([tuple(inputs)] if inputs else []) + ([(n,) for n in inputs] if len(inputs) > 1 else [])
    checked = _checked_points(prober)
    worst: dict[tuple[str, str, float], Observation] = {}
    reported: list[tuple[str, str, Observation]] = []
    skipped: set[float] = set()
    for config in configs:
        kept, dropped = valid_scales(scales, [prober.base[n].dtype for n in config])
        skipped.update(dropped)
        points = [(scale, sign) for scale in kept for sign in ((1,) if scale == 0 else (1, -1))]
        for (scale, sign), seen in zip(points, prober.observe_many(config, points)):
            for (s, o), obs in seen.items():
                key = (s, o, scale)
                if key not in worst or obs.kind > worst[key].kind:
                    worst[key] = obs
                if obs.reported:
                    reported.append((s, o, obs))
            if (scale, sign) in checked and config == configs[0] and seen and all(
                    obs.kind == OK for obs in seen.values()):
                _check_point(prober, config, scale, sign)
    return worst, reported, skipped


def _check_point(prober: Prober, config: tuple[str, ...], scale: float, sign: int) -> None:
    """The gradient checks and the float32 comparison at a CHECKED point (the first: the moderate points stacked,
    where the model allows it)."""
    if (scale, sign) == CHECKED[0] and prober.check_moderate(config):
        return
    prober.check_at(list(config), scale, sign)
    if scale == 0.0:
        # the float32 comparison looks for float32 losing the gradient at extreme inputs; at exact zeros a model's
        # values are degenerate (a layer norm's variance is 0), and a float32 gradient of rounding noise against an
        # exact 0 there decides nothing
        return
    prober.compare_precision(prober.point(config, scale, sign), f"the probe point inputs × {sign * scale:g}",
                             sign * scale)


def _rows_of(prober: Prober, worst: dict[tuple[str, str, float], Observation]
             ) -> dict[tuple[str, str, float], tuple[Observation, list[str]]]:
    """The worst observation per row. Variables are not scaled: with several, one row per (output, scale) stands
    for all of them, as in the numeric checks ("*"), with the names of those that went wrong."""
    label = dict.fromkeys(prober.var_names, ALL_VARIABLES) if len(prober.var_names) > 1 else {}
    rows: dict[tuple[str, str, float], tuple[Observation, list[str]]] = {}
    for (s, o, scale), obs in worst.items():
        key = (label.get(s, s), o, scale)
        worst_obs, bad = rows.get(key, (obs, []))
        rows[key] = (obs if obs.kind > worst_obs.kind else worst_obs,
                     bad + ([s] if obs.kind != OK and s in label else []))
    return rows


def _ladder_results(prober: Prober, rows: dict[tuple[str, str, float], tuple[Observation, list[str]]],
                    inputs: list[str]) -> list[StabilityResult]:
    """One StabilityResult per row, by source (inputs, then variables), output and scale."""
    plan = prober.plan
    order = {n: i for i, n in enumerate(plan.input_sources + [ALL_VARIABLES] + prober.var_names)}
    outs = {n: i for i, n in enumerate(plan.float_outputs)}
    results = []
    for (s, o, scale), (obs, bad) in sorted(rows.items(), key=lambda kv: (order[kv[0][0]], outs[kv[0][1]],
                                                                          kv[0][2])):
        detail = obs.detail(inputs)
        if bad:
            detail = f"{', '.join(bad[:5])}{f' and {len(bad) - 5} more' if len(bad) > 5 else ''}: {detail}"
        culprit = obs.culprit.op if obs.culprit else None
        results.append(StabilityResult(s, o, scale, STATUS[obs.kind], culprit.op_type if culprit else None,
                                       culprit.op_name if culprit else None, detail,
                                       reported=obs.kind != OK and obs.reported))
    return results
