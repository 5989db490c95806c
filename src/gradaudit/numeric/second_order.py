"""Second order (`--order 2`): Hessian-vector products of the loaded model against central differences of
its gradient, with the numeric checks' ladder of steps and error bounds.

Along p(t) = z + t v, phi(t) = <grad(u·f)(p(t)), w> and its derivative at 0 is w·H·v. TensorFlow's value
comes from differentiating the gradient again (reverse over reverse, non-persistent tapes): H·w, so that
lin(t) = <H·w, p(t) - z> is what autodiff predicts for the points actually evaluated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from ..model import CheckedOutputs, CheckStatus, Finding, NumericResult, OpRef
from ..rules import hazards as rules
from .probes import dense

LABEL = "order 2"  # every second-order result's reason starts with this, for a reader (its field: order=2)


@dataclass
class SecondOrderOutcome:
    results: list[NumericResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def tf_reason(exc: BaseException) -> str:
    """TensorFlow's own sentence from an exception raised while tracing: the last `XxxError: ...` line
    (a traced function's message starts with "in user code:" and a Python stack)."""
    if not str(exc).strip():  # an `assert` in TensorFlow's own code: said as what it is and where
        from .runner import describe

        return describe(exc)
    lines = [ln.strip() for ln in str(exc).splitlines()]
    starts = [i for i, ln in enumerate(lines) if re.match(r"^[A-Za-z_.]*(Error|Exception): ", ln)]
    if not starts:
        text = " ".join(ln for ln in lines if ln) or type(exc).__name__
        return clipped(f"{type(exc).__name__}: {text}")
    i = starts[-1]
    end = next((j for j in range(i + 1, len(lines)) if not lines[j]), len(lines))
    return clipped(" ".join(lines[i:end]))


def clipped(text: str, limit: int = 400) -> str:
    """`text` cut to `limit` characters at the end of its last whole sentence there (tester 23: TensorFlow's reason
    ended mid-word, "... e.g."); at a word, with an ellipsis, where no sentence ends early enough."""
    if len(text) <= limit:
        return text
    head = text[:limit]
    ends = [m.end() for m in re.finditer(r"(?<!e\.g)(?<!i\.e)[.!?][`')\]]*(?=\s)", head)]
    if ends and ends[-1] > limit // 3:
        return head[:ends[-1]].rstrip()
    return head.rsplit(" ", 1)[0].rstrip(" ,;:") + " ..."


def _dot(a, b) -> float:
    return float(np.sum(np.asarray(a, dtype=np.float64) * np.asarray(b, dtype=np.float64)))


def _direction(rng, value) -> np.ndarray:
    value = np.asarray(value, dtype=np.float64)
    rms = float(np.sqrt(np.mean(value * value))) if value.size else 0.0
    return rng.standard_normal(value.shape) * (rms or 1.0)


class _HessianVector:
    """H·w, the gradient of <grad(u·f), w>, at the runner's current point; traced once (w is an argument)."""

    def __init__(self, runner):
        import tensorflow as tf

        self.runner = runner
        self._fn = tf.function(self._impl, autograph=False)

    def _impl(self, inputs, u, w_in, w_var):
        import tensorflow as tf

        r = self.runner
        sources = [inputs[n] for n in r.input_sources] + list(r.vars)
        with tf.GradientTape(watch_accessed_variables=False) as outer:
            outer.watch(sources)
            with tf.GradientTape(watch_accessed_variables=False) as inner:
                inner.watch(sources)
                out = r.fn(**inputs)
                phi = tf.add_n([tf.reduce_sum(tf.cast(out[o], tf.float64) * u[o]) for o in r.float_outputs])
            grads = [None if g is None else tf.convert_to_tensor(g) for g in inner.gradient(phi, sources)]
            weights = [w_in[n] for n in r.input_sources] + list(w_var)
            terms = [tf.reduce_sum(tf.cast(g, tf.float64) * w) for g, w in zip(grads, weights) if g is not None]
            s = tf.add_n(terms) if terms else tf.constant(0.0, tf.float64)
        return outer.gradient(s, sources)

    def __call__(self, u, w_in, w_var) -> list[np.ndarray | None]:
        import tensorflow as tf

        r = self.runner
        hw = self._fn(r.inputs, {o: tf.constant(u[o]) for o in r.float_outputs},
                      {n: tf.constant(w_in[n]) for n in r.input_sources}, [tf.constant(w) for w in w_var])
        return [dense(h) for h in hw]


def run_second_order(prober, seed: int) -> SecondOrderOutcome:
    """One check per float input and one for the trainable variables together."""
    from . import sweep
    from .checks import output_label
    from .session import EPS, FLOOR_ULPS, RESOLUTION

    plan = prober.plan
    use64, why = _precision(prober)
    dtype = "float64" if use64 else plan.native
    eps = EPS[dtype]
    hvp = _HessianVector(prober.runner(None, use64))
    rng = np.random.default_rng([seed, 4])
    point = _BasePoint(prober, use64)
    outcome = SecondOrderOutcome()
    unavailable: dict[str, tuple[list[str], set[str]]] = {}  # TensorFlow's reason -> (sources, outputs)
    # the op to blame -> the failed checks it explains (names, outputs, estimate) and why: one finding per op
    wrong: dict[object, tuple[list[tuple[list[str], tuple[str, ...], sweep.Estimate]], _Blame]] = {}

    for label, names in _groups(prober):
        outs = tuple(sorted({o for n in names for o in plan.connected(n)}))
        shown = CheckedOutputs.of(outs, plan.float_outputs)
        v = {n: _direction(rng, point.values[n]) for n in names}
        w = {n: _direction(rng, point.values[n]) for n in names}
        g0 = point.gradients({})  # also moves the runner to the base point, where H·w is taken
        try:
            hw = point.hessian_times(hvp, w)
        except Exception as exc:  # noqa: BLE001 - TensorFlow's reason is the finding
            reason = tf_reason(exc)
            outcome.results.append(NumericResult(label, shown, "error", None, None, dtype, 0,
                                                 f"{LABEL}: TensorFlow cannot build the second-order gradient: "
                                                 f"{reason}", order=2))
            unavailable.setdefault(reason, ([], set()))
            unavailable[reason][0].extend(names)
            unavailable[reason][1].update(outs)
            continue
        line = _line(point, v, w, hw, g0, eps)
        est = sweep.run(line, sweep.ladder_for(eps, use64), FLOOR_ULPS * eps, RESOLUTION)
        verdict = sweep.classify(est, FLOOR_ULPS * eps, RESOLUTION)
        if verdict == "fail":
            blame = _blame(prober, (names, outs), (v, w), est)
            key = blame.op if blame.op is not None else len(wrong)
            wrong.setdefault(key, ([], blame))[0].append((names, outs, est))
        outcome.results.append(_result(label, shown, est, verdict, dtype, why))
    for failed, blame in wrong.values():
        outcome.findings.append(_mismatch(failed, blame, dtype, plan.float_outputs))
    for reason, (names, out_names) in unavailable.items():
        outputs = tuple(sorted(out_names))
        outcome.findings.append(rules.SecondOrderUnavailable.finding(
            f"TensorFlow cannot differentiate the gradient of {output_label(outputs, plan.float_outputs)} "
            f"with respect to {', '.join(names)} a second time: {reason}", sources=names, outputs=outputs))
    return outcome


def _precision(prober) -> tuple[bool, str]:
    """Whether the checks differentiate the float64 copy, and why they run in the precision they do."""
    from .runner import ModelError

    if not prober.float64():
        return False, "the float64 copy cannot be made (see the notes): the model's own precision"
    try:  # a copy that loads may still not run (XlaCallModule): then the model's own precision
        prober.gradients(prober.base, None, True)
    except ModelError as exc:
        return False, f"the float64 copy cannot run ({exc}): the model's own precision"
    return True, "float64 copy of the model"


def _groups(prober) -> list[tuple[str, list[str]]]:
    """(label, sources) of each check: every connected float input alone, the connected variables together."""
    from ..model import ALL_VARIABLES

    plan = prober.plan
    groups = [(n, [n]) for n in plan.input_sources if plan.connected(n)]
    variables = [n for n in prober.var_names if plan.connected(n)]
    if variables:
        groups.append((variables[0] if len(variables) == 1 else ALL_VARIABLES, variables))
    return groups


class _BasePoint:
    """Every float input and trainable variable at the probes' base point, and the gradient of u·f (first
    order, and H·w) at points that move some of them, in the precision of the checks."""

    def __init__(self, prober, use64: bool):
        plan = prober.plan
        self.prober, self.use64 = prober, use64
        self.names = plan.input_sources + prober.var_names
        self.values = {**{n: prober.base[n] for n in plan.input_sources},
                       **dict(zip(prober.var_names, prober.base_vars))}
        self.dtypes = {n: np.dtype(np.float64) if use64 else prober.dtypes[n] for n in self.names}

    def gradients(self, moved: dict[str, np.ndarray]) -> dict[str, np.ndarray | None]:
        """The gradient where the sources in `moved` take those values and the others their base values."""
        prober = self.prober
        inputs = {**prober.base, **{n: v for n, v in moved.items() if n in prober.plan.input_sources}}
        return prober.gradients(inputs, None, self.use64, [moved.get(n, self.values[n]) for n in prober.var_names])[1]

    def hessian_times(self, hvp: _HessianVector, w: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """H·w at the runner's current point, for w given on some sources (zero on the others); zero where
        TensorFlow finds no dependence."""
        prober = self.prober
        weights = {n: w.get(n, np.zeros(np.shape(self.values[n]))) for n in self.names}
        hw_list = hvp(prober.u, {n: weights[n] for n in prober.plan.input_sources},
                      [weights[n] for n in prober.var_names])
        return {n: np.zeros(np.shape(self.values[n])) if h is None else h for n, h in zip(self.names, hw_list)}


def _line(point: _BasePoint, v: dict[str, np.ndarray], w: dict[str, np.ndarray],
          hw: dict[str, np.ndarray], g0: dict[str, np.ndarray | None], eps: float):
    """The sweep's line along v: phi(t) = <gradient at base + t v, w>, which autodiff predicts moves by
    <H·w, t v> (the module docstring). v, w and H·w are given on the sources checked together, in order."""
    from . import sweep

    base = point.values
    names = list(v)
    g0 = {n: np.zeros(np.shape(base[n])) if g0.get(n) is None else g0[n] for n in names}
    terms = [hw[n] * v[n] for n in names]
    autodiff = float(sum(np.sum(t) for t in terms))
    scale = float(sum(np.sum(np.abs(t)) for t in terms))
    phi0 = sum(_dot(g0[n], w[n]) for n in names)
    phi_norm = float(np.sqrt(sum(np.sum((g0[n] * w[n]) ** 2) for n in names)))

    def evaluate(t: float) -> tuple[float, float]:
        p = {n: (base[n] + t * v[n]).astype(point.dtypes[n]) for n in names}  # the point actually evaluated
        g = point.gradients(p)
        phi = sum(_dot(g[n], w[n]) for n in names if g[n] is not None)
        return phi, sum(_dot(hw[n], p[n].astype(np.float64) - base[n]) for n in names)

    return sweep.Line(evaluate=evaluate, autodiff=autodiff, scale=scale, sigma_floor=0.5 * eps * phi_norm,
                      phi_norm=phi_norm, low_precision_autodiff=not point.use64, phi0=phi0, rounding=0.5 * eps)


def _result(label: str, shown: CheckedOutputs, est, verdict: str, dtype: str, why: str) -> NumericResult:
    """The check's row: the sweep's verdict in the words of second order."""
    size = max(est.scale, abs(est.numeric))
    rel = abs(est.delta) / size if size > 0 else 0.0
    status: CheckStatus
    if verdict == "fail":
        status, reason = "fail", f"{LABEL}: H·v {est.autodiff:.4e}, central differences {est.numeric:.4e}"
    elif verdict == "pass":
        status, reason = "pass", f"{LABEL}: Hessian-vector product agrees with central differences"
    else:  # unresolved, or a gradient flat along the line (ReLU networks): no verdict
        status, reason = "inconclusive", (f"{LABEL}: the difference quotients of the gradient do not settle "
                                          f"(error bound {est.rel_bound:.1e} relative)")
    return NumericResult(label, shown, status, rel if np.isfinite(rel) else None, est.step,
                         dtype, est.evaluations + 1, reason, precision_reason=why, order=2)


def _mismatch(failed: list, blame: _Blame, dtype: str, float_outputs: list[str]) -> Finding:
    """One second-order-mismatch for the checks one op at fault explains, with each source group's numbers."""
    from .checks import output_label

    names = [n for group, _, _ in failed for n in group]
    outs = tuple(sorted({o for _, group_outs, _ in failed for o in group_outs}))
    zero = all(est.autodiff == 0 for _, _, est in failed)
    why = (" TensorFlow's second derivative is exactly zero: the gradient function does not depend on the input "
           "(tf.stop_gradient or numpy inside a custom gradient)." if zero else "")
    step = failed[0][2].step
    if len(failed) == 1:
        est = failed[0][2]
        seen = (f"w·H·v is {est.autodiff:.4e} by differentiating the gradient again, but {est.numeric:.4e} ± "
                f"{est.bound:.1e} by central differences of the gradient (step {step:.1e}, {dtype})")
    else:
        seen = ("w·H·v by differentiating the gradient again vs by central differences of the gradient ("
                + "; ".join(f"{', '.join(group)}: {est.autodiff:.4e} vs {est.numeric:.4e} ± {est.bound:.1e}"
                            for group, _, est in failed) + f"; step {step:.1e}, {dtype})")
    return rules.SecondOrderMismatch.finding(
        f"The second derivative of {output_label(outs, float_outputs)} with respect to {', '.join(names)} is "
        f"wrong: along random directions {seen}.{why}{blame.where}", op=blame.op, sources=tuple(names), outputs=outs,
        fix=blame.fix)


@dataclass(frozen=True)
class _Blame:
    """The op a failed second-order check is said of (None: none named), the sentence that says why, and the advice
    where it is not the rule's own (None)."""

    op: OpRef | None
    where: str
    fix: str | None = None


# the forward's ops whose first derivative TensorFlow takes as zero: where a result is stationary in the stopped value
# (the mean inside tf.nn.moments' variance, in Keras' LayerNormalization and BatchNormalization), the first derivative
# is right and the second is not
_FORWARD_CUTS = ("StopGradient", "PreventGradient")
_CUT_FIX = ("Where a second derivative is needed (a gradient penalty, a Hessian, meta-learning), compute that part "
            "without tf.stop_gradient: a variance as tf.reduce_mean(tf.square(x - tf.reduce_mean(x, axes, "
            "keepdims=True)), axes) instead of tf.nn.moments (which Keras' LayerNormalization uses).")


def _blame(prober, pair: tuple[list[str], tuple[str, ...]], directions: tuple[dict, dict], est) -> _Blame:
    """Why a second-order check failed: a saved custom gradient's derivative (_suspects); in a model without one, a
    stop_gradient of the forward on the pair's path when the copy with every stop_gradient made an identity gives the
    second derivative the central differences measured (its evidence in the sentence)."""
    if prober.info.custom_gradients:
        return _Blame(*_suspects(prober))
    plain = _Blame(None, " The model has no saved custom gradient: the ops on the path have TensorFlow's registered "
                         "gradients, whose own derivatives are at fault.")
    cuts = _forward_cuts(prober, *pair)
    if not cuts:
        return plain
    labels = ", ".join(c.label for c in cuts[:3]) + (", ..." if len(cuts) > 3 else "")
    made = "an identity" if len(cuts) == 1 else "identities"
    try:
        uncut = _uncut_hessian(prober, *directions)
    except Exception as exc:  # a copy TensorFlow cannot make or run: no evidence, said so
        from ..errors import raised_by_tensorflow

        if not raised_by_tensorflow(exc):
            raise
        return replace(plain, where=plain.where + f" Its forward holds {labels} on the path; the copy with them made "
                                                  f"identities could not be checked ({type(exc).__name__}).")
    if abs(uncut - est.numeric) <= 2 * est.bound + 1e-9 * max(abs(est.numeric), est.scale):
        return _Blame(cuts[0] if len(cuts) == 1 else None, (
            f" The model has no saved custom gradient; with {labels} made {made} (the float64 copy), w·H·v is "
            f"{uncut:.4e}, as the central differences give: a stop_gradient in the forward whose first derivative is "
            "right (the result does not move with the stopped value to first order, as a variance with its mean) "
            "cuts the second."), _CUT_FIX)
    return replace(plain, where=plain.where + f" With {labels} made {made}, w·H·v is still {uncut:.4e}: "
                                              "the stop_gradient does not explain it.")


def _forward_cuts(prober, names: list[str], outs: tuple[str, ...]) -> list[OpRef]:
    """The forward's stop_gradient ops that the sources `names` reach and whose result reaches one of `outs`."""
    analysis = prober.analysis
    want_in = sum(1 << i for i, s in enumerate(analysis.sources) if s.name in names)
    want_out = sum(1 << j for j, o in enumerate(analysis.outputs) if o.name in outs)
    cuts: list[OpRef] = []
    for node in analysis.graph.ops.values():
        if node.ref.op_type in _FORWARD_CUTS and node.ref not in cuts:
            reach, to = analysis.op_masks(node)
            if reach & want_in and to & want_out:
                cuts.append(node.ref)
    return cuts


def _uncut_hessian(prober, v: dict[str, np.ndarray], w: dict[str, np.ndarray]) -> float:
    """<H·w, v> at the base point on the float64 copy with every stop_gradient made an identity."""
    from .runner import Runner, signature_variables

    loaded = prober.loads.uncut()
    by_name = signature_variables(prober.info, loaded.fn)
    runner = Runner(loaded.fn, {k: np.asarray(x) for k, x in prober.base.items()}, prober.plan.input_sources,
                    [(n, by_name[n]) for n in prober.var_names], prober.plan.float_outputs)
    names = prober.plan.input_sources + prober.var_names
    values = {**{n: prober.base[n] for n in prober.plan.input_sources}, **dict(zip(prober.var_names, prober.base_vars))}
    weights = {n: w.get(n, np.zeros(np.shape(values[n]))) for n in names}
    hw = _HessianVector(runner)(prober.u, {n: weights[n] for n in prober.plan.input_sources},
                                [weights[n] for n in prober.var_names])
    return sum(_dot(h, v[n]) for n, h in zip(names, hw) if n in v and h is not None)


# Ops inside a gradient function whose own derivative is not the derivative of what they compute.
_SECOND_ORDER_CUTS = {"StopGradient": "tf.stop_gradient", "PreventGradient": "tf.stop_gradient",
                      "PyFunc": "numpy (tf.numpy_function)", "PyFuncStateless": "numpy (tf.numpy_function)",
                      "EagerPyFunc": "tf.py_function"}


def _suspects(prober) -> tuple:
    """(the op to blame, a sentence): a second derivative differentiates the gradient functions again, so
    the saved custom gradients are where it goes wrong, first those that cut their own derivative."""
    custom = list(prober.info.custom_gradients)
    if not custom:
        return None, (" The model has no saved custom gradient: the ops on the path have TensorFlow's registered "
                      "gradients, whose own derivatives are at fault.")
    library = {f.signature.name: f for f in prober.info.meta_graph.graph_def.library.function}
    functions = prober.forensics.custom_gradient_functions()
    cutting = []
    for ref in custom:
        fdef = library.get(functions.get(ref, ""))
        ops = {n.op for n in fdef.node_def} if fdef is not None else set()
        cutting += [(ref, _SECOND_ORDER_CUTS[o]) for o in sorted(ops & set(_SECOND_ORDER_CUTS))]
    if cutting:
        ref, what = cutting[0]
        return ref, (f" The custom gradient of {ref.label} ({functions.get(ref)}) uses {what}: its own "
                     "derivative is cut there.")
    shown = ", ".join(r.label for r in custom[:3]) + (", ..." if len(custom) > 3 else "")
    return (custom[0] if len(custom) == 1 else None), (
        f" The saved custom gradient{'s' if len(custom) > 1 else ''} differentiated again: {shown}.")
