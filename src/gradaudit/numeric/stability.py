"""Numerical stability of a loaded SavedModel: probes over a ladder of input scales, forensics naming the
op at fault, and second-order checks. The static hazard lints they confirm live in static/hazards.py.

Entry point `run_stability`, called by `gradaudit.audit` after the numeric checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..model import Finding, LocalCheck, NumericResult, StabilityResult
from ..results import HazardVerdict, RaisedAt
from .probes import DEFAULT_SCALES, FORWARD_RAISES
from .task import NumericOptions

__all__ = ["DEFAULT_SCALES", "StabilityOptions", "StabilityOutcome", "run_stability"]


@dataclass(frozen=True)
class StabilityOptions:
    numeric: NumericOptions = field(default_factory=NumericOptions)  # how inputs are made: seed, --inputs
    scales: tuple[float, ...] = DEFAULT_SCALES
    order: int = 1
    # the numeric checks' batch: the probes run at one example (`numeric.batch_size` 1) only when the model
    # treats the examples of a batch apart, which a forward pass at this batch tells
    batch_size: int = 1
    local: bool = False  # the local checks decide the probe-point checks (they decided the numeric checks)
    precision: str | None = None  # --precision's target dtype


@dataclass
class StabilityOutcome:
    results: list[StabilityResult] = field(default_factory=list)
    numeric: list[NumericResult] = field(default_factory=list)  # checks at probe points, second order
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None  # TensorFlow's reason when running the model stopped the probes
    synthesised: tuple[str, ...] = ()  # the integer inputs made up here (indices, lengths), not given with --inputs
    # requested parts of the probes that did not run or did not finish, with the reason (the verdict is
    # `incomplete` at best)
    incomplete: list[str] = field(default_factory=list)
    # what the probes saw of the static hazard lints (reconcile.judge_hazards applies it)
    verdicts: list[HazardVerdict] = field(default_factory=list)
    local: list[LocalCheck] = field(default_factory=list)  # the local checks at probe points
    raised: list[RaisedAt] = field(default_factory=list)  # where differentiating the model raised, by reason


def run_stability(model_dir: str, tags: tuple[str, ...], signature: str, analysis,
                  options: StabilityOptions, loads=None) -> StabilityOutcome:
    """Probe the model loaded from `model_dir` (and check second order when `options.order` is 2).

    `analysis` is the static pass's StaticAnalysis: its sources, flow and graph (to name ops) and the
    hazards to confirm. A model that cannot run gives notes, never an exception. `loads` (a
    numeric.runner.ModelLoads) is the model as the numeric checks read and loaded it; without it the model
    is read and loaded here and closed at the end.
    """
    from ..errors import InternalError, raised_by_tensorflow
    from .runner import ModelLoads

    outcome = StabilityOutcome()
    own = loads is None
    shared = ModelLoads(model_dir, tags, signature) if loads is None else loads
    try:
        _run(shared, analysis, options, outcome)
    except InternalError:
        raise
    except Exception as exc:
        if not raised_by_tensorflow(exc):
            raise InternalError("running the stability probes", exc) from exc
        from .runner import describe

        outcome.stopped = _refused(describe(exc), outcome)  # TensorFlow failed on the model: it could not be probed
    finally:
        if own:
            shared.close()
    return outcome


def _refused(error: str, outcome: StabilityOutcome) -> str:
    """Why the probes stopped: a kernel refusing values where integer inputs were made up here is the synthesised
    inputs being outside what the model accepts (give --inputs), said as such; any other error as TensorFlow said it."""
    from .session import VALUE_ERRORS

    if outcome.synthesised and error.startswith(VALUE_ERRORS):
        return (f"the synthesised inputs are outside what the model accepts ({', '.join(outcome.synthesised)} "
                f"synthesised; TensorFlow: {error}); give real examples with --inputs")
    return error


def _run(loads, analysis, options: StabilityOptions, outcome: StabilityOutcome) -> None:
    from .inputs import InputError, given_inputs
    from .probes import ProbeConfig, Prober
    from .runner import ModelError, signature_variables
    from .second_order import run_second_order
    from .session import synthesised_structure

    info = loads.info
    n = options.numeric
    try:
        plan, base = probe_start(loads, analysis, n)
    except InputError as exc:
        outcome.notes.append(f"Stability probes skipped: {exc}")
        outcome.incomplete.append(f"stability probes did not run: {exc}")
        return
    if base is None:
        outcome.notes.append("Stability probes skipped: no float output, or no differentiable float source.")
        return
    outcome.synthesised = tuple(synthesised_structure(plan, n))
    loaded = loads.get(False)
    base = _batch_point(loaded, plan, base, options, outcome)
    base = _in_domain(loaded.fn, plan, base, given_inputs(n.inputs_file), outcome)
    by_name = signature_variables(info, loaded.fn)
    variables = [(v, by_name[v]) for v in plan.variable_sources if v in by_name]
    prober = None
    try:
        prober = Prober(loads, plan, base, variables, analysis,
                        ProbeConfig(n.seed, n.upcast, given_inputs(n.inputs_file), _suspects_on_path(analysis),
                                    options.local, options.precision))
        if plan.input_sources:
            _ladder(prober, analysis, options, outcome)
        else:
            outcome.notes.append("Stability probes skipped: no float input to scale.")
        if options.order >= 2:
            second = run_second_order(prober, n.seed)
            outcome.numeric.extend(second.results)
            outcome.findings.extend(second.findings)
    except ModelError as exc:
        what = 'differentiated' if exc.stage == 'gradient' else 'run'
        said = _refused(str(exc), outcome)
        said = f"the loaded model cannot be {what}: {exc}" if said == str(exc) else said
        outcome.notes.append(f"Stability probes not run: {said}")
        outcome.incomplete.append(f"stability probes stopped: {said}")
    finally:
        if prober is not None:
            outcome.notes.extend(prober.notes)
            outcome.local.extend(prober.local_checks)
            from .local import probe_note

            outcome.notes.extend(probe_note(prober.local_checks))
            prober.close()


def _batch_point(loaded, plan, base: dict, options: StabilityOptions, outcome: StabilityOutcome) -> dict:
    """The probes' base point: `base` (one example), or the numeric checks' batch when the model's outputs
    for one example change with the others of its batch (said in a note)."""
    import numpy as np

    from .inputs import synthesise

    n = options.numeric
    if n.batch_size >= options.batch_size:
        return base
    wider = synthesise(plan.specs, replace(n, batch_size=options.batch_size), plan.domains)
    if all(np.shape(wider[k]) == np.shape(v) for k, v in base.items() if k in wider):
        return base  # the signature fixes its inputs' shapes: there is no batch size to choose
    batched = frozenset(k for k, v in base.items() if k in wider and np.shape(wider[k]) != np.shape(v))
    found = _mixes_examples(loaded.fn, wider, plan.float_outputs, batched)
    if found is None:
        return base
    why, mixes = found
    outcome.notes.append(f"Stability probes at a batch of {options.batch_size}, as the numeric checks: {why}"
                         + (", so one example alone would not show what a batch does." if mixes else "."))
    return wider


def _in_domain(fn, plan, base: dict, given: frozenset[str], outcome: StabilityOutcome) -> dict:
    """The probes' base point: `base`, or, where the model's outputs are NaN or Inf there and finite at the
    absolute values of its synthesised N(0, 1) inputs (a square root, a positive distribution's log-density),
    those absolute values, as the numeric checks do (said in a note). Otherwise every probe point would be
    outside the function's domain and nothing would be observed."""
    import numpy as np

    from .inputs import absolute_point

    def finite(point: dict) -> bool:
        try:
            got = fn(**point)
        except Exception:  # noqa: BLE001 - a point TensorFlow refuses is not a better base
            return False
        return all(np.all(np.isfinite(np.asarray(v, np.float64))) for o, v in got.items()
                   if o in plan.float_outputs)

    moved, flipped = absolute_point(base, plan.input_sources, given, plan.domains)
    if not flipped or finite(base) or not finite(moved):
        return base
    outcome.notes.append(f"Stability probes scale the absolute values of the synthesised inputs "
                         f"({', '.join(flipped)}), where the outputs are finite, as the numeric checks do.")
    return moved


def _ladder(prober, analysis, options: StabilityOptions, outcome: StabilityOutcome) -> None:
    """The ladder of input scales, its findings and hazard verdicts, into `outcome`."""
    from ..static.hazards import hazards_of
    from .probes import run_ladder
    from .verdicts import ladder_findings

    plan = prober.plan
    ladder = run_ladder(prober, options.scales)
    outcome.results.extend(ladder.results)
    outcome.numeric.extend(ladder.numeric)
    outcome.findings.extend(ladder.mismatches)
    outcome.notes.extend(ladder.notes)
    outcome.incomplete.extend(ladder.undecided)
    findings, outcome.verdicts = ladder_findings(
        ladder.reported, plan.input_sources, hazards_of(analysis), ladder.scales)
    outcome.findings.extend(findings)
    if not ladder.raised:
        return
    expected = [e for e in analysis.flow if e.raises]
    if expected:  # the static pass found that TensorFlow refuses every gradient of the signature: that finding
        cut = expected[0].blocked_by[0].op.label if expected[0].blocked_by else "an op on its path"
        outcome.notes.append(f"Stability probes: TensorFlow raises differentiating the model at every probe point "
                             f"tried ({len(ladder.raised)}), as the static pass found ({cut} has no usable "
                             "gradient): nothing else could be observed.")
    else:
        outcome.raised.extend(_raising_points(ladder.raised, plan, analysis))
    where, reason = ladder.raised[0]
    ran = "run" if reason.startswith(FORWARD_RAISES) else "differentiate"
    outcome.incomplete.append(
        f"stability probes could not {ran} the model at {len(ladder.raised)} probe point(s) "
        f"(first: {where}: {reason.removeprefix(FORWARD_RAISES) if ran == 'run' else reason}): nothing was "
        "observed there")


def probe_start(loads, analysis, numeric: NumericOptions):
    """The plan of the runs that move the model's inputs (the probes, the precision check) and their base point,
    synthesised as the numeric checks make it; the point is None when there is no float output or no
    differentiable float source. Raises numeric.inputs.InputError when no input can be made."""
    from .domains import infer
    from .inputs import synthesise
    from .session import Plan

    plan = Plan(loads.info, analysis.sources, analysis.outputs, analysis.flow, infer(analysis))
    if not plan.float_outputs or not (plan.input_sources or plan.variable_sources):
        return plan, None
    n = numeric
    return plan, synthesise(plan.specs, n, plan.domains)


def _raising_points(raised: list[tuple[str, str]], plan, analysis) -> list[RaisedAt]:
    """One unstable-gradient finding per reason TensorFlow gave for refusing to differentiate the model at probe
    points (a determinant's or an inverse's gradient at a singular matrix), naming the points and the op whose
    gradient raised where the error's node name tells it (`gradients/<op>_grad/...`), with its reason and points."""
    import re

    from ..rules import hazards as rules

    by_reason: dict[str, list[str]] = {}
    for where, reason in raised:
        by_reason.setdefault(reason, []).append(where)
    findings: list[RaisedAt] = []
    for reason, points in by_reason.items():
        forward = reason.startswith(FORWARD_RAISES)
        said = reason[len(FORWARD_RAISES):] if forward else reason
        match = re.search(r"gradients(?:_\d+)?/(.+?)_grad/" if not forward else r"\(op ([^)]+)\)", said)
        ops = [n.ref for n in analysis.graph.ops.values() if match and n.ref.op_name == match.group(1)]
        op = ops[0] if len(ops) == 1 else None
        shown = "; ".join(points[:4]) + (f" and {len(points) - 4} more" if len(points) > 4 else "")
        text = ((f"TensorFlow raises when it runs the model at probe point(s) {shown}, its forward already: {said}"
                 + (f". {op.label} raises there" if op else "")
                 + ": serving or training on such an input stops with this error.") if forward else
                (f"TensorFlow raises when it differentiates the model at probe point(s) {shown}: {said}"
                 + (f". The gradient of {op.label} raises there" if op else "")
                 + ": training on such an input stops with this error."))
        findings.append(RaisedAt(reason, tuple(points), rules.UnstableGradient.finding(
            text, op=op, sources=tuple(plan.input_sources), outputs=tuple(plan.float_outputs))))
    return findings


def _suspects_on_path(analysis):
    """(sources, output) -> the ops on a gradient path from those sources to the output whose backward can
    turn a finite gradient into NaN/Inf (sqrt, pow, log, division...), from the static pass's masks."""
    from .forensics import SINGULAR_BACKWARD

    singular = SINGULAR_BACKWARD - {"Mul", "Square", "Exp"}
    index = {s.name: i for i, s in enumerate(analysis.sources)}
    outputs = {o.name: j for j, o in enumerate(analysis.outputs)}
    nodes = [n for n in analysis.graph.ops.values() if n.ref.op_type in singular]

    def suspects(sources, output: str) -> tuple:
        if output not in outputs:
            return ()
        wanted = sum(1 << index[s] for s in sources if s in index)
        found = []
        for node in nodes:
            src, out = analysis.op_masks(node, grad=True)
            if src & wanted and out >> outputs[output] & 1:
                found.append(node.ref)
        return tuple(sorted(set(found), key=lambda r: (r.function, r.op_name)))

    return suspects


def _mixes_examples(fn, point: dict, outputs: list[str], batched: frozenset[str]) -> tuple[str, bool] | None:
    """(why the probes keep the batch, whether that is because the model's outputs for one example depend on the
    other examples of its batch: batch statistics, a loss over the batch), or None when each example's outputs are
    those it has alone, or when two calls at the batch differ (random draws, weights the call writes), which leaves
    nothing to compare: the forward at `point` against each of its examples run by itself (the `batched` inputs
    cut row by row, the others, a fixed-shape seed, as they are)."""
    import numpy as np

    from .runner import ModelError

    def run(feed: dict) -> dict:
        return {o: np.asarray(v, np.float64) for o, v in fn(**feed).items() if o in outputs}

    try:
        together = run(point)
        rows = point[min(batched)].shape[0] if batched else 0
        alone = [run({k: a[i:i + 1] if k in batched else a for k, a in point.items()}) for i in range(rows)]
    except (ModelError, ValueError, TypeError) as exc:
        return f"its examples could not be run one by one ({type(exc).__name__})", False
    except Exception as exc:  # noqa: BLE001 - TensorFlow's refusal of a batch of one is an answer too
        return f"its examples could not be run one by one ({type(exc).__name__})", False
    for o, value in sorted(together.items()):  # the same output named in every run
        if value.ndim == 0 or value.shape[0] != rows:
            return f"its output {o} has no batch dimension", False
        each = np.concatenate([a[o] for a in alone], axis=0)
        if each.shape != value.shape or not _close(each, value):
            again = run(point)[o]
            if not _close(again, value):
                return None  # the same batch twice gives other outputs: the examples cannot be compared
            return f"its output {o} for one example changes with the other examples of the batch", True
    return None


def _close(a, b) -> bool:
    import numpy as np

    scale = float(np.max(np.abs(b[np.isfinite(b)]), initial=0.0))
    return bool(np.allclose(a, b, rtol=1e-4, atol=1e-6 * scale + 1e-30, equal_nan=True))

