"""--precision float16|bfloat16: will the model train in a lower precision? The gradients of every source and
the outputs of every op, computed in the model's own precision at its synthesised (or --inputs) point and over
the probe ladder, cast to the target dtype (precision_math.py): what flushes to zero, what overflows, the loss
scale a dynamic loss scaler settles on, and the op at fault when the forward pass overflows.

Entry point `run_precision`, called by `gradaudit.audit` after the stability probes. Gradients are those of
u·f for the probes' random cotangent u of unit scale (a loss whose derivative by the outputs is about 1); what
a lower precision does inside the backward pass itself (an intermediate product that underflows before a
large factor) is not seen here, only the gradients that reach the sources.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..model import Finding, OpRef, PrecisionResult, Severity
from ..rules import hazards as rules
from .forensics import Forensics
from .precision_math import (
    LOST,
    NOT_COMPUTED,
    Classes,
    came_back,
    classify,
    compute_dtype,
    limits,
    magnitudes,
    pct,
    power_of_two,
    rescue_scale,
    settled_loss_scale,
)
from .probes import same_point

# Ops that only pass a value on: an underflow is the producing op's, not theirs.
PASS_THROUGH = frozenset({"Identity", "IdentityN", "Reshape", "ExpandDims", "Squeeze", "Transpose"})
# Consumers that turn a zero into -inf, inf or NaN (for divisions: as the denominator, input 1).
SINGULAR = frozenset({"Log", "Reciprocal", "Inv", "Rsqrt", "Sqrt", "Pow"})
DIVISIONS = frozenset({"RealDiv", "Div", "Xdivy", "FloorDiv"})
FIX = {
    "Exp": "compute it in float32 (a layer with dtype='float32' under the mixed_float16 policy), or use a stable "
           "form: tf.nn.softmax, tf.math.reduce_logsumexp or tf.math.softplus instead of exp",
    "Square": "compute it in float32 (dtype='float32' on that layer), or square a normalised (smaller) value",
    "Pow": "compute it in float32 (dtype='float32' on that layer), or raise a normalised (smaller) value",
    "Sum": "sum in float32 (dtype='float32' on that layer), or take a mean instead of a sum over many terms",
    "AddN": "sum in float32 (dtype='float32' on that layer), or a mean instead of a sum of many terms",
}
FIX_OTHER = ("compute it in float32 (a layer with dtype='float32' under the mixed_float16 policy: a float32 "
             "island), or scale its inputs down (normalise them)")


@dataclass
class PrecisionOutcome:
    results: list[PrecisionResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # what was asked and could not be checked, and why


def run_precision(loads, analysis, options, target: str | None) -> PrecisionOutcome:
    """The model's own compute dtype (a note, whatever `target`), and with a target dtype its gradients and
    activations cast to it. `options` are the stability probes' (StabilityOptions: the same point and ladder)."""
    from .runner import ModelError

    outcome = PrecisionOutcome()
    own = compute_dtype(analysis)
    if own:
        outcome.notes.append(f"The model computes in {own[0]} ({own[1]} {own[2]} in its graph"
                             + (f": mixed precision, such as Keras' mixed_{own[0]} policy)" if "Cast" in own[2]
                                else ")")
                             + ("." if target is None else
                                f"; gradient entries that underflowed inside are zero in its own gradients already: "
                                f"--precision {target} counts the entries of its float64 copy's gradients, whose zeros "
                                "are exact" + (", and which of them are zero in the model's own." if own[0] == target
                                               else f", cast to {target}.")))
    if target is None:
        return outcome
    try:
        _measure(loads, analysis, options, target, outcome, own=own[0] if own else None)
    except ModelError as exc:
        outcome.incomplete.append(f"--precision {target} did not run: the loaded model cannot be "
                                  f"{'differentiated' if exc.stage == 'gradient' else 'run'}: {exc}")
    return outcome


def _measure(loads, analysis, options, target: str, outcome: PrecisionOutcome, own: str | None) -> None:
    """`own`: the half precision the model computes in already (its float32 ops, when it is `target`, are the
    islands it chose), whose losses are in its own gradients: they are counted on its float64 copy's."""
    islands = own == target
    from .inputs import InputError
    from .runner import signature_variables
    from .stability import probe_start

    try:
        plan, base = probe_start(loads, analysis, options.numeric)
    except InputError as exc:
        outcome.notes.append(f"Precision check ({target}) skipped: {exc}")
        return
    if base is None:
        outcome.notes.append(f"Precision check ({target}) skipped: no float output, or no differentiable float "
                             "source.")
        return
    loaded = loads.get(False)
    by_name = signature_variables(loads.info, loaded.fn)
    variables = [(v, by_name[v]) for v in plan.variable_sources if v in by_name]
    outputs = loaded.fn(**{k: base[k] for k in plan.specs})
    # the stability probes' cotangent: random and signed, never ones
    rng = np.random.default_rng([options.numeric.seed, 3])
    u = {o: rng.standard_normal(np.shape(outputs[o])) for o in plan.float_outputs}
    kept, points = _points(plan, base, options.scales, target)
    names = (list(plan.input_sources), [v for v, _ in variables])
    exact = None if own is None else _float64_copy(loads, (plan, base, [v for v, _ in variables]), target, own,
                                                   outcome)
    runs = PointRuns(loaded.fn, analysis, (plan.input_sources, variables, plan.float_outputs), base, u,
                     loads.base_gradients)
    loads.base_gradients = None  # held by `runs` alone from here
    causes: dict[tuple[str, OpRef], list[tuple[float | None, PrecisionResult, str]]] = {}
    forward = True  # the ops' outputs are checked until TensorFlow cannot run the frozen graph
    try:
        for scale, point in points:
            grads, values, failed = runs.at(point, forward=forward)
            if exact is None:
                outcome.results.extend(_gradient_rows(grads, names, target, scale))
            else:
                outcome.results.extend(_own_dtype_rows(exact.at(point, u), grads, (runs, point, u),
                                                       (names, target, scale, islands)))
            if failed is not None:
                forward = False
                outcome.incomplete.append(f"--precision {target}: the ops' outputs were not checked: TensorFlow "
                                          f"could not run a frozen copy of the graph ({failed})")
            elif forward:
                _activation_rows(values, (target, scale, islands), causes, outcome)
    finally:
        runs.close()
    base_rows = [r for r in outcome.results if r.kind == "gradient" and r.scale is None]
    outcome.findings.extend(_gradient_findings(base_rows, target, names[1]))
    outcome.findings.extend(_activation_findings(causes, target))
    outcome.notes.extend(_rounding_notes(outcome.results, target))
    if not outcome.findings and not outcome.incomplete:
        outcome.notes.append(_all_fit(base_rows, target, kept))


def _float64_copy(loads, at, target: str, own: str, outcome: PrecisionOutcome) -> ExactGradients | None:
    """The float64 copy's gradients of a model computing in `own` already (`at`: plan, base point, variables),
    or None with the reason in `outcome.incomplete`."""
    made = _exact_gradients(loads, *at)
    if not isinstance(made, str):
        return made
    outcome.incomplete.append(
        f"--precision {target}: the model computes in {own} already, so a gradient entry that underflowed "
        f"inside is zero in its own gradient like an exact zero; only its float64 copy tells them apart, and "
        f"{made}")
    return None


class FrozenRuns(Forensics):
    """The forensics' frozen graph with the gradients of u·f built into it once (`with_gradients`): then one
    session run per point fetches every op's float values and every source's gradient, the forward pass and
    the backward pass of one run. Variables are the frozen graph's constants; their gradients are those of the
    constants that stand for them."""

    def __init__(self, fn, analysis):
        super().__init__(fn, analysis.graph, analysis.gradient_functions)
        self._failed: Exception | None = None  # why the graph could not be frozen, raised again on each use
        self._gradients: tuple[dict, list[str], list] | None = None  # (u placeholders, sources, gradient tensors)
        self._differentiated = False  # gradient ops were added to the graph (or TensorFlow began to add them)

    def _build(self) -> None:
        if self._failed is not None:
            raise self._failed
        try:
            super()._build()
        except Exception as exc:
            self._failed = exc
            raise

    @property
    def pristine(self) -> bool:
        """Whether the frozen graph holds no gradient op (never built, or never differentiated): its forward
        runs are those of a frozen graph without them."""
        return not self._differentiated

    @property
    def ready(self) -> bool:
        """Whether the gradient ops are built (`with_gradients`)."""
        return self._gradients is not None

    def with_gradients(self, sources: tuple, u: dict[str, np.ndarray]) -> None:
        """Add the gradients of u·f (u fed at each run) by the input sources and the variables, `sources` =
        (input names, (name, variable) pairs, float outputs): as numeric.runner.Runner computes them on the
        loaded function, u·f summed in float64. Raises when TensorFlow cannot differentiate the frozen graph."""
        import tensorflow as tf

        inputs, variables, outputs = sources
        if self._graph is None:
            self._build()
        constant = {id(h): t.op.name for h, t in zip(self.fn.captured_inputs, self.fn.graph.internal_captures)}
        xs = [self._inputs[n] for n in inputs]
        xs += [self._graph.get_tensor_by_name(f"{constant[id(v.handle)]}:0") for _, v in variables]
        self._differentiated = True
        with self._graph.as_default():
            us = {o: tf.compat.v1.placeholder(tf.float64, shape=np.shape(u[o])) for o in outputs}
            phi = tf.add_n([tf.reduce_sum(tf.cast(self._outputs[o], tf.float64) * us[o]) for o in outputs])
            grads = [None if g is None else tf.convert_to_tensor(g)  # IndexedSlices from a gather
                     for g in tf.gradients(phi, xs)]
        self._stale()
        self._gradients = (us, [*inputs, *(n for n, _ in variables)], grads)

    def values_and_gradients(self, feed: dict[str, np.ndarray], u: dict[str, np.ndarray]) -> tuple[dict, list]:
        """({source: its gradient of u·f, None where TensorFlow finds none}, `float_values`) at `feed`, in one
        session run."""
        assert self._gradients is not None
        us, names, grads = self._gradients
        tensors = self._float_tensors()
        wanted = [g for g in grads if g is not None]
        fetched, grad_values = self._run([tensors, wanted], feed, {us[o]: u[o] for o in us})
        by_source = dict(zip([n for n, g in zip(names, grads) if g is not None], grad_values))
        values = dict(zip((t.name for t in tensors), fetched))
        return ({n: by_source.get(n) for n in names},
                [(self._ref(op), op, [values[t.name] for t in op.inputs if t.name in values],
                  [values[t.name] for t in op.outputs if t.name in values]) for op in self._ops])


class PointRuns:
    """The gradients of every source and the values of every op at each point. One run of the frozen graph
    per point computes both (FrozenRuns); where TensorFlow cannot build or run that, from then on the loaded
    model's gradient pass (numeric.runner.Runner) and a forward run of a frozen graph without gradient ops,
    as this stage always did, whose errors are the ones reported. A point equal to one already run (the rung
    at scale 1 when the model's own inputs have a largest magnitude of 1) is not run again."""

    def __init__(self, fn, analysis, sources: tuple, base: dict[str, np.ndarray], u: dict[str, np.ndarray],
                 known: tuple[dict, dict, dict] | None = None):
        """`sources` = (input sources, (name, loaded variable) pairs, float outputs); `known`: (point, cotangent,
        gradients) another stage computed on the loaded model (numeric.runner.ModelLoads.base_gradients), whose
        gradients are not computed again at that point."""
        self.fn, self.analysis, self.sources, self.base, self.u = fn, analysis, sources, base, u
        self.known = known
        self.frozen: Forensics = FrozenRuns(fn, analysis)
        self.together = True
        self._runner: Any = None
        self._done: list[tuple[dict[str, np.ndarray], tuple[dict, list, str | None]]] = []

    def at(self, point: dict[str, np.ndarray], forward: bool) -> tuple[dict, list, str | None]:
        """(gradients by source as float64 arrays, the ops' float values (`Forensics.float_values`), why those
        could not be computed or None); with `forward` False (the ops' outputs are not checked any more) the
        values are not asked for. Raises ModelError when the loaded model cannot be differentiated there."""
        for seen, (grads, values, failed) in self._done:
            if same_point(seen, point):
                return (grads, values, failed) if forward else (grads, [], None)
        if self._known_at(point):
            assert self.known is not None
            result = self._forward_only(point, dict(self.known[2]), forward)
        else:
            together = self._together(point) if self.together else None
            result = self._apart(point, forward) if together is None else together
        self._done.append((point, result))
        return result

    def gradients(self, point: dict[str, np.ndarray], u: dict[str, np.ndarray]) -> dict:
        """The gradients by source at a point already run, for another cotangent `u` (a loss scale's): one more
        gradient pass, the way that point's was computed."""
        from .probes import dense

        frozen = self.frozen
        if self.together and isinstance(frozen, FrozenRuns) and frozen.ready:
            return {k: dense(g) for k, g in frozen.values_and_gradients(point, u)[0].items()}
        return self._runner_gradients(point, u)

    def _runner_gradients(self, point: dict[str, np.ndarray], u: dict[str, np.ndarray]) -> dict:
        """The loaded model's gradient pass at a point (numeric.runner.Runner, made on first use)."""
        from .probes import dense
        from .runner import Runner

        inputs, variables, outputs = self.sources
        if self._runner is None:
            self._runner = Runner(self.fn, self.base, inputs, variables, outputs)
        self._runner.move_to(point, self._runner.var_base)
        _, g_in, g_var = self._runner.gradient(u)
        return {**{k: dense(g) for k, g in g_in.items()}, **{v: dense(g) for (v, _), g in zip(variables, g_var)}}

    def _together(self, point: dict[str, np.ndarray]) -> tuple[dict, list, str | None] | None:
        from .probes import dense

        frozen = self.frozen
        assert isinstance(frozen, FrozenRuns)
        try:
            if not frozen.ready:
                frozen.with_gradients(self.sources, self.u)
            grads, values = frozen.values_and_gradients(point, self.u)
        except Exception:  # noqa: BLE001 - the frozen graph may refuse what the loaded model does; the Runner decides
            self.together = False
            if not frozen.pristine:  # its ops changed (a While differentiated): the forward runs on a fresh copy
                frozen.close()
                self.frozen = Forensics(self.fn, self.analysis.graph, self.analysis.gradient_functions)
            return None
        return {k: dense(g) for k, g in grads.items()}, values, None

    def _known_at(self, point: dict[str, np.ndarray]) -> bool:
        """Whether the gradients at `point` are known already: the same point and cotangent, bit for bit, and
        every source of this stage."""
        if self.known is None:
            return False
        seen, u, grads = self.known
        inputs, variables, _ = self.sources
        return (same_point(seen, point) and same_point(u, self.u)
                and set(grads) == {*inputs, *(n for n, _ in variables)})

    def _apart(self, point: dict[str, np.ndarray], forward: bool) -> tuple[dict, list, str | None]:
        return self._forward_only(point, self._runner_gradients(point, self.u), forward)  # one gradient pass

    def _forward_only(self, point: dict[str, np.ndarray], grads: dict, forward: bool) -> tuple[dict, list, str | None]:
        """(`grads`, the ops' float values at `point` from a forward run of the frozen graph, why they could not be
        computed or None)."""
        from .runner import describe

        if not forward:
            return grads, [], None
        try:
            return grads, self.frozen.float_values(point), None
        except Exception as exc:  # noqa: BLE001 - the forward side is checked on a frozen copy TensorFlow may refuse
            return grads, [], describe(exc)

    def close(self) -> None:
        self.frozen.close()


class ExactGradients:
    """The float64 copy's gradients of the same u·f at the same points (numeric.upcast), for a model that computes
    in the target dtype already: its own gradients hold the entries that underflowed inside as zeros."""

    def __init__(self, fn64, plan, base: dict[str, np.ndarray], variables: list[tuple[str, Any]]):
        from .runner import Runner

        self.runner = Runner(fn64, base, plan.input_sources, variables, plan.float_outputs)

    def at(self, point: dict[str, np.ndarray], u: dict[str, np.ndarray]) -> dict[str, np.ndarray | None]:
        from .probes import dense

        runner = self.runner
        runner.move_to({k: np.asarray(v, runner.input_dtypes[k].as_numpy_dtype) for k, v in point.items()},
                       runner.var_base)
        _, g_in, g_var = runner.gradient(u)
        return {**{k: dense(g) for k, g in g_in.items()},
                **{n: dense(g) for n, g in zip(runner.var_names, g_var)}}


def _exact_gradients(loads, plan, base: dict[str, np.ndarray], variables: list[str]) -> ExactGradients | str:
    """The float64 copy's gradient runner, or why there is none (its words end the incomplete line)."""
    from .runner import describe, signature_variables
    from .upcast import float64_blockers

    info = loads.info
    blockers = ["no TF2 object graph"] if info.function is None else float64_blockers(info)
    if blockers:
        return f"no float64 copy of it can be made ({'; '.join(blockers)})"
    try:
        copy = loads.get(True)
        by_name = signature_variables(info, copy.fn)
        return ExactGradients(copy.fn, plan, base, [(v, by_name[v]) for v in variables if v in by_name])
    except Exception as exc:  # noqa: BLE001 - the float64 copy is TensorFlow's to refuse; the check says so
        return f"its float64 copy does not load ({describe(exc)})"


def _points(plan, base: dict[str, np.ndarray], scales, target: str
            ) -> tuple[list[float], list[tuple[float | None, dict[str, np.ndarray]]]]:
    """(the ladder's scales `target` and the inputs represent, the points: the model's own (scale None), then
    the scaled inputs at each of those scales). Class-probability labels are not scaled."""
    from .probes import scaled_point, valid_scales

    scaled = [s for s in plan.input_sources if getattr(plan.domains.inputs.get(s), "kind", None) != "distribution"]
    kept, _ = valid_scales(scales, [target, *(base[s].dtype for s in scaled)]) if scaled else ([], [])
    points: list[tuple[float | None, dict[str, np.ndarray]]] = [(None, base)]
    points += [(s, scaled_point(base, tuple(scaled), s, 1)) for s in kept]
    return kept, points


def _activation_rows(values: list, at: tuple[str, float | None, bool], causes: dict,
                     outcome: PrecisionOutcome) -> None:
    """The rows of the ops whose outputs overflow or underflow at one point, `at` = (target, scale, islands), into
    `outcome`, and each under its (kind, op) in `causes`."""
    for kind, row, consumer in _activation_causes(values, *at):
        causes.setdefault((kind, row.op), []).append((at[1], row, consumer))
        outcome.results.append(row)


def _gradient_rows(grads: dict[str, np.ndarray | None], names: tuple[list[str], list[str]], target: str,
                   scale: float | None, own: dict[str, np.ndarray | None] | None = None,
                   inside: bool = False) -> list[PrecisionResult]:
    """One row per source (`names` = (inputs, variables)) with a gradient at this point; the loss scale is the one
    scale for all of them, set by the trainable variables' largest entry (the gradients a loss scaler checks;
    the inputs' when there is no variable). With `own` (the model computes in a half precision already), `grads`
    are its float64 copy's and `own` its own gradients, whose zeros are counted (`zero_inside`) when `inside`:
    the model computes in `target` itself."""
    mags = {s: magnitudes(grads[s]) for s in names[0] + names[1] if grads.get(s) is not None}
    classes = {s: classify(a, target, prepared=True) for s, a in mags.items()}
    trained = [c for s, c in classes.items() if s in names[1]] or list(classes.values())
    largest = max((c.largest for c in trained if c.largest is not None), default=None)
    loss_scale = settled_loss_scale(largest, target)

    def zero_at(s: str, factor: float | None) -> float | None:
        return classify(mags[s], target, factor, prepared=True).underflow if factor else None

    shared = {s: zero_at(s, loss_scale) for s in classes}
    dim = {s: classify(mags[s], target, loss_scale, prepared=True).subnormal if loss_scale else None for s in classes}
    alone = {s: zero_at(s, settled_loss_scale(c.largest, target)) for s, c in classes.items()}
    one = None if loss_scale is None else not any(_only_shared(shared[s], alone[s]) >= LOST for s in classes)
    zeros = {} if own is None or not inside else {s: _zero_inside(grads[s], own.get(s)) for s in classes}
    return [PrecisionResult("gradient", s, target, scale, c.entries, c.underflow, c.subnormal, c.overflow,
                            c.largest, c.smallest, loss_scale, shared[s], one, alone[s],
                            reference=None if own is None else "float64 copy", zero_inside=zeros.get(s),
                            subnormal_scaled=dim[s], nonfinite=_nonfinite(grads[s]))
            for s, c in classes.items()]


def _nonfinite(values) -> float:
    """The fraction of the entries that are inf or NaN."""
    a = np.asarray(values)
    return float(np.count_nonzero(~np.isfinite(a))) / a.size if a.size else 0.0


def _own_dtype_rows(exact: dict, own: dict, at: tuple, spec: tuple) -> list[PrecisionResult]:
    """The gradient rows of a model that computes in a half precision already: `exact` its float64 copy's
    gradients, `own` its own at the point `at` = (runs, point, cotangent), `spec` = (names, target, scale, islands).
    Zeros of its own gradient are its own dtype's losses, `target`'s only when they are one (`islands`); those are
    told apart by its own gradient at the loss scale: an underflow comes back, a rounding to zero does not. The
    entries it rounds to zero are left out of the counts (no loss scale changes them; `_rounding_notes` says them),
    so that no finding promises a scale for them."""
    names, target, scale, islands = spec
    rows = _gradient_rows(exact, names, target, scale, own=own, inside=islands)
    factor = rescue_scale(rows[0].loss_scale if rows else None, at[2], target) if any(
        r.zero_inside for r in rows) else None
    if factor is None:
        return rows
    runs, point, u = at
    scaled = runs.gradients(point, {o: v * factor for o, v in u.items()})
    kept = {s: g if g is None else np.where(_rounded(g, own.get(s), scaled.get(s)), 0.0, g) for s, g in exact.items()}
    counted = {r.name: r for r in _gradient_rows(kept, names, target, scale)}
    return [replace(counted.get(r.name, r), reference=r.reference, zero_inside=r.zero_inside, rescue_scale=factor,
                    zero_rescued=_zero_inside(exact[r.name], own.get(r.name), scaled.get(r.name)))
            if r.zero_inside else r for r in rows]


def _rounded(exact, own, scaled) -> np.ndarray | bool:
    """The entries of the exact gradient that are nonzero, zero in the model's own, and not finite and nonzero in
    its own at a loss scale: rounded to zero inside it (False where the three cannot be compared)."""
    if own is None or scaled is None or not np.shape(exact) == np.shape(own) == np.shape(scaled):
        return False
    return (np.asarray(exact) != 0) & (np.asarray(own) == 0) & ~came_back(scaled)


def _zero_inside(exact, own, scaled=None) -> float | None:
    """The fraction of the exact gradient's nonzero entries (no rounding of a zero: above 1e-12 of its largest)
    that are exactly zero in the model's own gradient, and with `scaled` (its own gradient at a loss scale) finite
    and nonzero there; None where they cannot be compared entry by entry."""
    if own is None or np.shape(own) != np.shape(exact):
        return None
    if scaled is not None:
        if np.shape(scaled) != np.shape(exact):
            return None
        own = np.where(came_back(scaled), own, np.ones_like(own))  # a zero at scale 1 counts only if it came back
    mags = np.abs(np.asarray(exact, np.float64))
    finite = np.isfinite(mags) & np.isfinite(np.asarray(own, np.float64))
    top = float(mags[finite].max(initial=0.0))
    counted = finite & (mags > 1e-12 * top) & (mags > 0)
    n = int(np.count_nonzero(counted))
    return int(np.count_nonzero(counted & (np.asarray(own) == 0))) / n if n else None


def _lost(r: PrecisionResult) -> float:
    """The fraction of a source's gradient entries zero at loss scale 1: after the cast, or already inside (zero
    in the model's own gradient, and nonzero at a loss scale: an underflow, not a rounding)."""
    return max(r.underflow, r.zero_rescued or 0.0)


def _only_shared(shared: float | None, alone: float | None) -> float:
    """The fraction of a source's entries zero at the shared loss scale that its own scale would keep."""
    return max(0.0, (shared or 0.0) - (alone or 0.0))


def _fits(values: list, target: str) -> bool:
    lim = limits(target)
    return all(float(np.max(np.abs(np.asarray(v, np.float64)[np.isfinite(v)]), initial=0.0)) <= lim.largest
               for v in values)


def _activation_causes(ops, target: str, scale: float | None, islands: bool):
    """(kind, row, consumer) for each op that makes an overflow ("overflow": its float inputs fit the dtype,
    its output does not) or an underflow that a log, division or root turns into a non-finite value
    ("underflow", with that consumer's label). With `islands`, ops computing in float32 or float64 are left
    out: the model computes in the target dtype and keeps those in float32 on purpose."""
    for ref, op, ins, outs in ops:
        if op.type in NOT_COMPUTED or (islands and all(t.dtype.size >= 4 for t in op.outputs if t.dtype.is_floating)):
            continue
        tensors = [t for t in op.outputs if t.dtype.is_floating]
        for t, value in zip(tensors, outs):
            c = classify(value, target)
            if c.overflow and _fits(ins, target):
                yield "overflow", _row(ref, c, target, scale), ""
            elif c.underflow >= LOST and op.type not in PASS_THROUGH:
                consumer = next((f"{k.type} '{k.name}'" for k in t.consumers()
                                 if k.type in SINGULAR or (k.type in DIVISIONS and list(k.inputs).index(t) == 1)),
                                "")
                if consumer:
                    yield "underflow", _row(ref, c, target, scale), consumer


def _row(ref: OpRef, c: Classes, target: str, scale: float | None) -> PrecisionResult:
    return PrecisionResult("activation", ref.short, target, scale, c.entries, c.underflow, c.subnormal, c.overflow,
                           c.largest, c.smallest, op=ref)


def _where(scale: float | None) -> str:
    return "the model's own point" if scale is None else f"inputs × {scale:g}"


def _gradient_findings(rows: list[PrecisionResult], target: str, variables: list[str]) -> list[Finding]:
    """The gradient findings at one point; the loss scale is the one the trainable variables' largest entry sets
    (the inputs' when there is no variable), the `setter` the messages name."""
    scale = rows[0].loss_scale if rows else None
    trained = [r for r in rows if r.name in variables] or rows
    largest = max((r.largest or 0 for r in trained), default=0.0)
    setter = f"largest |g| {largest:.3g}" + (", of the trainable variables" if trained is not rows else "")
    found = [_rescued_finding(rows, target, (scale, setter)), _range_finding(rows, target, (scale, setter)),
             _overflow_finding(rows, target, scale)]
    return [f for f in found if f is not None]


def _rescued_finding(rows: list[PrecisionResult], target: str, at: tuple) -> Finding | None:
    """Gradient entries zero at loss scale 1 that the shared loss scale keeps (`at` = (scale, what set it)), and
    what share of them stays subnormal there (in range, with bits lost)."""
    scale, setter = at
    rescued = [r for r in rows if scale is not None and _lost(r) - (r.underflow_scaled or 0) >= LOST]
    if not rescued:
        return None
    inside = [r for r in rescued if r.zero_rescued]
    return rules.GradientUnderflow.finding(
        f"In {target}, gradient entries flush to zero (below {limits(target).smallest_subnormal:.3g} after the cast) "
        f"at loss scale 1: " + ", ".join(f"{r.name} {pct(_lost(r))} (smallest nonzero |g| {r.smallest:.3g})"
                                         for r in rescued)
        + ("" if not inside else
           f" (the model computes in {target} already: exactly zero in its own gradient where its float64 copy's are "
           f"not, and nonzero with the cotangent × {power_of_two(inside[0].rescue_scale)}, "  # type: ignore[arg-type]
           + ", ".join(f"{r.name} {pct(r.zero_rescued)}" for r in inside if r.zero_rescued) + ")")
        + f"; a dynamic loss scale settles on {power_of_two(scale)} ({setter}), where they are in range"
        + ("" if not (dim := [r for r in rescued if (r.subnormal_scaled or 0) >= LOST]) else
           ", though subnormal there for " + ", ".join(f"{r.name} {pct(r.subnormal_scaled or 0.0)}" for r in dim)
           + f" (below {limits(target).smallest_normal:.3g}: bits of precision lost)"),
        sources=[r.name for r in rescued])


def _range_finding(rows: list[PrecisionResult], target: str, at: tuple) -> Finding | None:
    """Entries zero at the shared scale that the source's own scale would keep (entries lost at every scale are
    over the dtype's range below their own source's largest: negligible beside it, not a cause); `at` = (the
    scale, what set it)."""
    scale, setter = at
    still = [r for r in rows if scale is not None and _only_shared(r.underflow_scaled, r.underflow_own) >= LOST]
    if not still:
        return None
    widest = max((r.largest or 0) for r in rows) / min(r.largest or np.inf for r in still)
    return rules.GradientRange.finding(
        f"No single loss scale serves every source in {target}: at {power_of_two(scale)}, the largest the "
        f"gradients allow ({setter}), gradient entries still flush "
        f"to zero that a scale for their source alone would keep: "
        + ", ".join(f"{r.name} {pct(_only_shared(r.underflow_scaled, r.underflow_own))} (largest |g| "
                    f"{r.largest:.3g})" for r in still)
        + f"; the sources' largest gradients are {widest:.3g} apart",
        sources=[r.name for r in still])


def _overflow_finding(rows: list[PrecisionResult], target: str, scale: float | None) -> Finding | None:
    """Gradient entries beyond the dtype's largest finite value at loss scale 1."""
    over = [r for r in rows if r.overflow]
    if not over:
        return None
    return rules.GradientOverflow.finding(
        f"In {target}, gradient entries exceed the largest finite value ({limits(target).largest:.6g}) at loss "
        "scale 1: " + ", ".join(f"{r.name} {pct(r.overflow)} (largest |g| {r.largest:.3g})" for r in over)
        + (f"; a dynamic loss scaler must fall to {power_of_two(scale)}" if scale else ""),
        sources=[r.name for r in over])


def _activation_findings(causes: dict, target: str) -> list[Finding]:
    lim = limits(target)
    found = []
    for (kind, op), seen in causes.items():
        where = ", ".join(_where(s) for s, _, _ in seen)
        own = any(s is None for s, _, _ in seen)
        worst = max((r for _, r, _ in seen), key=lambda r: r.largest or 0)
        if kind == "overflow":
            found.append(rules.ActivationOverflow.finding(
                f"{op.short} returns values up to {worst.largest:.3g} from inputs that fit {target}, beyond its "
                f"largest finite value ({lim.largest:.6g}): inf in {target} at {where}", op=op,
                fix=f"{op.op_type}: {FIX.get(op.op_type, FIX_OTHER)}.",
                severity=None if own else Severity.INFO))
        else:
            consumer = seen[0][2]
            found.append(rules.ActivationUnderflow.finding(
                f"{op.short} returns values down to {worst.smallest:.3g}, zero in {target} (up to "
                f"{pct(max(r.underflow for _, r, _ in seen))} of them), and feeds {consumer}: a non-finite value in "
                f"{target} at {where}", op=op,
                severity=None if own else Severity.INFO))
    return found


def _rounding_notes(rows: list[PrecisionResult], target: str) -> list[str]:
    """A line on the entries a model computing in `target` rounds to zero in its own gradient (zero where its
    float64 copy's are not, and still zero at a loss scale): precision lost, which no loss scale brings back. Per
    source, the point where the most are."""
    worst: dict[str, tuple[float, PrecisionResult]] = {}
    for r in rows:
        share = (r.zero_inside or 0) - (r.zero_rescued or 0) if r.rescue_scale is not None else 0.0
        if share >= LOST and share > worst.get(r.name, (0.0, r))[0]:
            worst[r.name] = (share, r)
    if not worst:
        return []
    return [f"Precision {target}: the model computes in {target} already, and its own gradient is exactly zero where "
            "its float64 copy's is not, also with the cotangent scaled by a loss scale: "
            + ", ".join(f"{name} {pct(share)} at {_where(r.scale)} (× {power_of_two(r.rescue_scale)})"  # type: ignore[arg-type]
                        for name, (share, r) in sorted(worst.items()))
            + f". A power-of-two scale changes nothing but under- and overflow, so these are {target}'s rounding "
              "(a cancellation, a saturated activation), not an underflow: no loss scale brings them back."]


def _all_fit(rows: list[PrecisionResult], target: str, scales: list[float]) -> str:
    scale = rows[0].loss_scale if rows else None
    largest = max((r.largest for r in rows if r.largest is not None), default=None)
    smallest = min((r.smallest for r in rows if r.smallest is not None), default=None)
    sizes = (f"|g| from {smallest:.3g} to {largest:.3g}" if largest is not None and smallest is not None
             else "no nonzero gradient")
    ladder = f" or over the probe ladder ({', '.join(f'{s:g}' for s in scales)})" if scales else ""
    return (f"Precision {target}: every gradient fits ({len(rows)} source(s) at the model's own point, {sizes}"
            + ("; bfloat16 keeps float32's exponent range, so no loss scale is needed (Keras trains it without one)"
               if target == "bfloat16" else f"; a dynamic loss scale settles on {power_of_two(scale)}" if scale else "")
            + f"), and no op's output overflows or underflows into a log, division or root there{ladder}.")
