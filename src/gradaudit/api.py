"""The Python API: `audit(target, **options) -> Report`. The CLI is a thin layer over this."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

from .errors import GradauditError
from .model import Report, Target


# What a parsed but inconsistent graph raises inside the static pass (dangling references, missing
# outputs, wrong attribute kinds): reported as a load error, exit 2.
MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError, MemoryError,
             UnicodeDecodeError)


@dataclass(frozen=True)
class AuditOptions:
    tags: tuple[str, ...] = ("serve",)
    signature: str = "serving_default"
    static_only: bool = False
    seed: int = 0
    batch_size: int = 2
    dim: int = 4
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    inputs_file: str | None = None
    input_specs: tuple[str, ...] = ()  # NAME=DTYPE[D0,...] for a tf.function without input_signature
    allow_unsafe_ops: bool = False
    order: int = 1  # 2: also check second derivatives (Hessian-vector products)
    probe_scales: tuple[float, ...] | None = None  # stability probe ladder; None: the default one
    timeout: float | None = None  # seconds for the model-running part, run in a child process


def _rules_check(analysis) -> list:
    from .rules import STATIC_CHECKS

    return [f for check in STATIC_CHECKS for f in check(analysis)]


def _static_report(model, sig, target: Target) -> tuple[Report, object]:
    """The static pass on any target: flow, then every static rule family."""
    from .flow import analyse
    from .graph.gradients import GradientOracle
    from .paths import blocked_paths

    try:
        analysis = analyse(model, sig, GradientOracle())
        findings = _rules_check(analysis)
    except MALFORMED as exc:  # a protobuf that parses but does not describe a consistent graph
        detail = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise GradauditError(f"{target.path}: malformed model, the graph of {target.signature!r} cannot be "
                             f"analysed ({exc.__class__.__name__}: {detail})") from None
    report = Report(target=target, sources=analysis.sources, outputs=analysis.outputs, flow=analysis.flow,
                    findings=findings)
    report.paths = blocked_paths(analysis)
    return report, analysis


def _check_inputs(sig, options: AuditOptions) -> None:
    """--inputs and --shape that do not fit the signature are usage errors (exit 2), found before the
    model is loaded."""
    if not (options.inputs_file or options.shapes):
        return
    import tensorflow as tf

    from .numeric.inputs import InputError, synthesise

    specs = {s.name: tf.TensorSpec(s.shape, tf.dtypes.as_dtype(s.dtype)) for s in sig.inputs}
    unknown = sorted(set(options.shapes) - set(specs))
    if unknown:
        raise GradauditError(f"--shape names {', '.join(unknown)}, not inputs of the signature "
                             f"({', '.join(sorted(specs))})")
    try:
        synthesise(specs, seed=options.seed, batch_size=options.batch_size, dim=options.dim,
                   shapes=options.shapes, inputs_file=options.inputs_file)
    except InputError as exc:
        raise GradauditError(str(exc)) from None


def _may_execute(report: Report, options: AuditOptions) -> bool:
    """Nothing of a model with unsafe ops runs unless the user says so."""
    if options.static_only:
        return False
    if not options.allow_unsafe_ops and any(f.rule == "unsafe-op" for f in report.findings):
        report.notes.append("numeric checks and probes skipped: unsafe ops present (GA401); "
                            "--allow-unsafe-ops runs them anyway")
        return False
    return True


def _finish(report: Report) -> Report:
    from .rules.numeric import explain_mismatches

    if report.numeric:
        variables = {s.name for s in report.sources if s.kind == "variable"}
        report.findings, report.numeric = explain_mismatches(report.findings, report.numeric, variables)
    report.findings.sort(key=lambda f: (-f.severity.rank, f.code, f.op.function if f.op else "",
                                        f.op.op_name if f.op else "", f.message))
    return report


def audit_saved_model(path: str, options: AuditOptions, signature: str | None = None) -> Report:
    from .targets.saved_model import SavedModelFile

    key = signature or options.signature
    try:
        model = SavedModelFile(path, options.tags)
        sig = model.signature(key)
    except MALFORMED as exc:
        raise GradauditError(f"{path}: malformed model ({exc.__class__.__name__}: {exc})") from None
    report, analysis = _static_report(model, sig, Target(os.path.abspath(path), "saved_model", key,
                                                         tuple(options.tags)))
    if not options.static_only:
        _check_inputs(sig, options)
    if sig.function is not None and not options.static_only:
        report.notes.append(f"numeric checks and probes run on signatures; {key!r} is a saved function of a "
                            "model without signatures, so only the static pass ran")
    elif _may_execute(report, options):
        report.seed = options.seed
        if options.timeout:
            _execute_isolated(report, path, options, key)
        else:
            _execute(report, analysis, path, options, key)
    return _finish(report)


def _execute(report: Report, analysis, path: str, options: AuditOptions, key: str) -> None:
    """The part of an audit that runs the model: numeric checks, then stability probes."""
    _run_numeric(report, path, options, key)
    _run_stability(report, analysis, path, options, key)


def _executed_part(path: str, options: AuditOptions, key: str) -> Report:
    """In the child process: the whole audit again (the static pass is cheap) without the timeout."""
    return audit_saved_model(path, replace(options, timeout=None), key)


def _execute_isolated(report: Report, path: str, options: AuditOptions, key: str) -> None:
    from .isolate import ChildFailed, Timeout, run_isolated
    from .model import NumericResult

    try:
        child = run_isolated(_executed_part, (path, options, key), options.timeout)
    except (Timeout, ChildFailed) as exc:
        reason = f"timeout: {exc}" if isinstance(exc, Timeout) else str(exc)
        report.numeric.extend(NumericResult(s.name, "*", "error", None, None, None, 0, reason)
                              for s in report.sources if s.differentiable)
        report.notes.append(f"numeric checks and probes did not complete ({reason}); the static report "
                            "is complete")
        return
    report.seed = child.seed
    report.numeric.extend(child.numeric)
    report.stability.extend(child.stability)
    report.findings[:] = child.findings
    report.notes.extend(child.notes)


def audit_object(obj, options: AuditOptions, label: str | None = None, kind: str = "python") -> Report:
    """Audit a tf.function, ConcreteFunction, tf.Module or keras.Model by reading its traced graph."""
    from .targets.python import TracedModel, parse_input_spec, trace

    label = label or getattr(obj, "__name__", None) or type(obj).__name__
    specs = [parse_input_spec(s) for s in options.input_specs]
    traced = trace(obj, label, specs, kind)
    model = TracedModel(traced)
    sig = model.signature()
    report, _ = _static_report(model, sig, Target(label, traced.kind, None, ()))
    if not options.static_only:
        _check_inputs(sig, options)
    if _may_execute(report, options):
        report.seed = options.seed
        _run_numeric_traced(report, traced, options)
        _probe_traced(report, traced, options)
        if options.timeout:
            report.notes.append(f"--timeout applies to SavedModels; this {traced.kind} target ran in-process")
    return _finish(report)


_STABILITY_RULES = {"unstable-gradient", "nonfinite-forward", "second-order-mismatch", "second-order-unavailable"}


def _probe_traced(report: Report, traced, options: AuditOptions) -> None:
    """Stability probes and --order 2 run on a SavedModel: the traced function is saved to a temporary
    folder (with its custom gradients) and probed there; results come back under this report's names."""
    import tempfile

    import tensorflow as tf

    from .targets.saved_model import SavedModelFile

    with tempfile.TemporaryDirectory(prefix="gradaudit-traced-") as tmp:
        holder = tf.Module()
        holder.captured = list(traced.fn.variables)
        try:
            tf.saved_model.save(holder, tmp, signatures={"serving_default": traced.fn},
                                options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
            model = SavedModelFile(tmp)
            sig = model.signature("serving_default")
            copy, analysis = _static_report(model, sig, Target(tmp, "saved_model", "serving_default", ("serve",)))
        except Exception as exc:  # noqa: BLE001 - a function TensorFlow cannot save is not probed
            report.notes.append(f"stability probes not run: the traced function cannot be saved for them "
                                f"({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
            return
        _run_stability(copy, analysis, tmp, options, "serving_default")
    rename = _names_from_copy(copy, report)

    def renamed(item):
        if hasattr(item, "sources"):
            fields = {"sources": tuple(rename.get(n, n) for n in item.sources),
                      "outputs": tuple(rename.get(n, n) for n in item.outputs)}
        else:
            fields = {"source": rename.get(item.source, item.source), "output": rename.get(item.output, item.output)}
        return replace(item, **fields)

    report.stability.extend(renamed(s) for s in copy.stability)
    report.numeric.extend(renamed(n) for n in copy.numeric if (n.reason or "").startswith("order 2"))
    # hazard lints (GA30x) the probes confirmed are errors in the copy: take those versions
    confirmed = {(f.rule, f.op.op_name): f for f in copy.findings
                 if f.op and f.code.startswith("GA30") and f.severity.value == "error"}
    report.findings[:] = [renamed(confirmed[f.rule, f.op.op_name]) if f.op and (f.rule, f.op.op_name) in confirmed
                          else f for f in report.findings]
    report.findings.extend(renamed(f) for f in copy.findings if f.rule in _STABILITY_RULES)
    report.notes.extend(n for n in copy.notes if n.startswith(("Stability", "stability")))


def _names_from_copy(copy: Report, report: Report) -> dict[str, str]:
    """The saved copy names inputs and variables as the traced graph does; a Keras model's outputs are
    output_0, output_1, ... there, in the traced function's flat order."""
    ours = [o.name for o in report.outputs]
    theirs = [o.name for o in copy.outputs]
    if sorted(ours) == sorted(theirs):
        return {}
    if len(ours) == len(theirs) and all(t.startswith("output_") and t[7:].isdigit() for t in theirs):
        return {t: ours[int(t[7:])] for t in theirs if int(t[7:]) < len(ours)}
    return {}


def _add_numeric(report: Report, outcome) -> None:
    report.numeric.extend(outcome.results)
    report.findings.extend(outcome.findings)
    report.notes.extend(outcome.notes)


def _run_numeric_traced(report: Report, traced, options: AuditOptions) -> None:
    from .numeric import run_numeric_function

    _add_numeric(report, run_numeric_function(traced.fn, report.sources, report.outputs, report.flow,
                                              _numeric_options(options), variable_names=traced.variable_names))


def _numeric_options(options: AuditOptions):
    from .numeric import NumericOptions

    return NumericOptions(seed=options.seed, batch_size=options.batch_size, dim=options.dim,
                          shapes=options.shapes, inputs_file=options.inputs_file)


def _run_numeric(report: Report, path: str, options: AuditOptions, key: str) -> None:
    from .numeric import run_numeric

    _add_numeric(report, run_numeric(path, options.tags, key, report.sources, report.outputs, report.flow,
                                     _numeric_options(options)))


def _run_stability(report: Report, analysis, path: str, options: AuditOptions, key: str) -> None:
    from .stability import DEFAULT_SCALES, StabilityOptions, run_stability

    numeric = _numeric_options(options)
    if not options.inputs_file:  # the ladder needs no batch: one example halves its cost on large models
        numeric = replace(numeric, batch_size=1)
    outcome = run_stability(path, options.tags, key, analysis, StabilityOptions(
        numeric=numeric, scales=options.probe_scales or DEFAULT_SCALES, order=options.order))
    report.stability.extend(outcome.results)
    report.numeric.extend(outcome.numeric)
    report.findings[:] = outcome.confirm(report.findings) + outcome.findings
    report.notes.extend(outcome.notes)


def signature_keys(path: str, tags: tuple[str, ...] = ("serve",)) -> list[str]:
    from .targets.saved_model import SavedModelFile

    return SavedModelFile(path, tags).signature_keys()


def audit(target, **options) -> Report:
    """Audit `target` and return the Report.

    `target` is a SavedModel folder, a `.keras`/`.h5` file, `package.module:attr` or `file.py:attr`,
    or the object itself: a tf.function, ConcreteFunction, tf.Module or keras.Model.
    `options` are AuditOptions fields (signature, tags, static_only, seed, input_specs, ...).
    """
    from .targets.python import KERAS_SUFFIXES, is_python_target, load_keras_file, resolve

    opts = AuditOptions(**{k: tuple(v) if k in ("tags", "input_specs") and isinstance(v, list) else v
                           for k, v in options.items()})
    if not isinstance(target, (str, os.PathLike)):
        return audit_object(target, opts)
    target = os.fspath(target)
    if target.endswith(KERAS_SUFFIXES):
        model = load_keras_file(target, allow_unsafe=opts.allow_unsafe_ops)
        return audit_object(model, opts, label=os.path.abspath(target), kind="keras")
    if is_python_target(target):
        return audit_object(resolve(target), opts, label=target)
    return audit_saved_model(target, opts)
