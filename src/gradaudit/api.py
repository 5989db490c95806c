"""The Python API: `audit(target, **options) -> Report`. The CLI is a thin layer over this."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .errors import GradauditError, InternalError
from .model import Finding, Isolation, Report, Target
from .progress import say
from .targets import AuditTarget

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "half", "double"})

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
    # seconds for the model-running part, run in a confined child process (isolate.py); None or 0: in this
    # process, without time budget, memory limit or sandbox
    timeout: float | None = None
    memory_limit: int | None = None  # bytes of data for that child; None: half the physical memory; 0: no limit
    # Python packages to import or shared libraries to load (tf.load_op_library) before the audit, so that
    # their custom ops and gradients are known
    load_ops: tuple[str, ...] = ()
    precision: str | None = None  # float16 or bfloat16: how the gradients and activations fare in it; None: not


@dataclass
class _Draft:
    """An audit's results as its stages hand them over (static pass, safety gate, numeric checks, probes,
    reconciliation). The Report is built from it once, at the end (`build`), and is not changed after."""

    target: Target
    sources: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    flow: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    numeric: list = field(default_factory=list)
    stability: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    note_stages: list = field(default_factory=list)  # the stage that wrote each note, in the notes' order
    seed: int | None = None
    paths: list = field(default_factory=list)
    incomplete: list = field(default_factory=list)
    isolation: Isolation | None = None
    inputs_given: bool = False  # --inputs gave the checked point: no hint to give it
    precision: list = field(default_factory=list)

    def note(self, stage: str, lines) -> None:
        """Notes of one stage (static, numeric, stability), each once."""
        for line in lines:
            if line not in self.notes:
                self.notes.append(line)
                self.note_stages.append(stage)

    def build(self) -> Report:
        """The Report of every field the draft shares with it (lists copied); the others keep their defaults
        (`fail_on`: the policy sets it)."""
        mine = {f.name for f in fields(self)}
        values: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(Report) if f.name in mine}
        copied: dict[str, Any] = {k: list(v) if isinstance(v, list) else v for k, v in values.items()}
        return Report(**copied)


def _rules_check(analysis, report: _Draft) -> list:
    """Every static rule family; a rule that raises is gradaudit's bug, not the model's."""
    from .static import STATIC_CHECKS

    findings: list[Finding] = []
    for check in STATIC_CHECKS:
        try:
            findings.extend(check(analysis))
        except Exception as exc:
            report.findings = findings
            raise InternalError(f"running the static rules ({check.__module__}.{check.__name__})", exc,
                                report.build()) from exc
    return findings


def _static_report(model: AuditTarget, sig, target: Target) -> tuple[_Draft, object]:
    """The static pass on any target: flow, then every static rule family."""
    from .flow import analyse
    from .graph.dataflow import GraphTooLarge
    from .graph.gradients import GradientOracle
    from .paths import blocked_paths
    from .safety.gate import is_pure

    say("static pass: gradient flow")
    try:
        # iterative: no recursion on the graph's depth; an op's kernel may run on synthetic values (to tell a
        # piecewise constant op from one whose derivative TensorFlow does not implement) only if it is pure
        analysis = analyse(model, sig, GradientOracle(may_run=is_pure))
    except GraphTooLarge as exc:
        raise GradauditError(f"{target.path}: the static pass cannot analyse {target.signature!r}: {exc}") from None
    except MALFORMED as exc:  # a protobuf that parses but does not describe a consistent graph
        detail = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise GradauditError(f"{target.path}: malformed model, the graph of {target.signature!r} cannot be "
                             f"analysed ({exc.__class__.__name__}: {detail})") from None
    report = _Draft(target=target, sources=analysis.sources, outputs=analysis.outputs, flow=analysis.flow,
                    notes=list(analysis.notes), note_stages=["static"] * len(analysis.notes))
    report.findings = _rules_check(analysis, report)
    report.paths = blocked_paths(analysis)
    return report, analysis


def _guard(stage: str, report: _Draft, run) -> None:
    """Run a stage of the audit; an exception that is not a verdict on the model is gradaudit's failure."""
    try:
        run()
    except (GradauditError, InternalError) as exc:
        if isinstance(exc, InternalError):
            exc.with_report(report.build())
        raise
    except Exception as exc:
        raise InternalError(stage, exc, report.build()) from exc


def _not_checked(report: _Draft) -> None:
    """Requested checks that could not run, or ran without deciding anything, make the audit incomplete: one
    line per kind of check."""
    lines = []
    errors = [n for n in report.numeric if n.status == "error"]
    if errors:
        first = next((n.reason for n in errors if n.reason), "no reason given")
        lines.append(f"{len(errors)} numeric check(s) could not run (first: {first})")
    unbuilt = [n for n in report.numeric if n.status == "skipped" and (n.reason or "").startswith("no input to run")]
    if unbuilt:  # the checks were requested and never ran: no point to run them at
        lines.append(f"numeric checks did not run: {unbuilt[0].reason}")
    undecided = _undecided_sources(report)
    if undecided:
        why = next((n.reason for n in report.numeric if n.source in undecided and n.reason), None)
        hint = ("" if report.inputs_given or (why and ("--inputs" in why or "nondeterministic" in why))
                else "; pass real examples with --inputs")
        lines.append(f"no numeric check could decide the gradient of {', '.join(undecided)}"
                     + (f" ({why})" if why else "") + hint)
    report.incomplete.extend(line for line in lines if line not in report.incomplete)


def _undecided_sources(report: _Draft) -> list[str]:
    """Differentiable sources with a connected output that numeric checks ran for, none of which decided
    (pass, fail, or a difference a named cut or sampler explains): inconclusive everywhere, or not reported."""
    from .numeric import ALL_VARIABLES

    if not report.numeric or all(n.status == "error" for n in report.numeric):
        return []
    variables = {s.name for s in report.sources if s.kind == "variable"}
    connected = {e.source for e in report.flow if e.status == "connected"}
    decided: set[str] = set()
    checked: set[str] = set()
    for n in report.numeric:
        names = variables if n.source == ALL_VARIABLES else {n.source}
        if n.status != "skipped":
            checked |= names
        if n.status in ("pass", "fail") or n.expected_by:
            decided |= names
    for f in report.findings:  # a straight-through estimator found: the check did decide what the gradient is
        if f.rule == "surrogate-gradient":
            decided |= variables if ALL_VARIABLES in f.sources else set(f.sources)
    return sorted((checked & connected) - decided)


def _check_inputs(sig, options: AuditOptions) -> None:
    """--inputs and --shape that do not fit the signature are usage errors (exit 2), found before the
    model is loaded."""
    if not (options.inputs_file or options.shapes):
        return
    import tensorflow as tf

    from .numeric.inputs import InputError, synthesise
    from .safety.budget import check_inputs_file

    if options.inputs_file:
        check_inputs_file(options.inputs_file)
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
    except (ValueError, TypeError) as exc:  # an array numpy cannot read as the input's dtype
        raise GradauditError(f"--inputs {options.inputs_file}: {exc}") from None


def _may_execute(report: _Draft, options: AuditOptions) -> bool:
    """Nothing of a model runs unless the safety gate proved every op it runs harmless (GA401, GA402, GA403
    findings block it, suppressed or not) or the user says so."""
    from .rules import get_rule

    if options.static_only:
        return False
    blocking = sorted({f.code for f in report.findings if get_rule(f.rule).blocks_execution})
    if not options.allow_unsafe_ops and blocking:
        report.incomplete.append(f"numeric checks and probes did not run: ops or files not proven safe "
                                 f"({', '.join(blocking)}); --allow-unsafe-ops runs them anyway")
        return False
    return True


def _finish(report: _Draft) -> Report:
    """The reconciled results, and the Report built from them."""
    from .rules.numeric import explain_mismatches

    _not_checked(report)

    if report.numeric:
        variables = {s.name for s in report.sources if s.kind == "variable"}
        floats = tuple(o.name for o in report.outputs if o.dtype in FLOAT_DTYPES)
        partial = frozenset((f.source, c.op) for f in report.flow for c in f.partial_by)
        report.findings, report.numeric = explain_mismatches(report.findings, report.numeric, variables, floats,
                                                             partial)
    report.findings.sort(key=lambda f: (-f.severity.rank, f.code, f.op.function if f.op else "",
                                        f.op.op_name if f.op else "", f.message))
    return report.build()


def read_saved_model(path: str, options: AuditOptions):
    """The one parse of a SavedModel an audit makes (the --load-ops packages first: their ops' definitions)."""
    from .targets.saved_model import SavedModelFile

    if options.load_ops:
        from .custom_ops import load_ops

        load_ops(options.load_ops)
    return SavedModelFile(path, options.tags)


def audit_saved_model(path: str, options: AuditOptions, signature: str | None = None, model=None) -> Report:
    """The audit of one signature of a SavedModel; `model`: its parse (read_saved_model), when the caller
    has one."""
    key = signature or options.signature
    try:
        model = model or read_saved_model(path, options)
        sig = model.signature(key)
    except MALFORMED as exc:
        raise GradauditError(f"{path}: malformed model ({exc.__class__.__name__}: {exc})") from None
    report, analysis = _static_report(model, sig, Target(os.path.abspath(path), "saved_model", key,
                                                         tuple(options.tags)))
    if not options.static_only:
        _check_inputs(sig, options)
    if sig.function is not None and not options.static_only:
        report.incomplete.append(f"numeric checks and probes did not run: they run on signatures, and {key!r} "
                                 "is a saved function of a model without signatures (--static-only audits its "
                                 "graph alone)")
    elif _may_execute(report, options) and _variables_restorable(report, model, path):
        report.seed, report.inputs_given = options.seed, bool(options.inputs_file)
        if options.timeout:
            return _execute_isolated(report, analysis, model, path, options)
        report.isolation = _IN_PROCESS
        _execute(report, analysis, path, options, key, model.proto)
    return _finish(report)


def _full_tracebacks() -> None:
    """TensorFlow trims its own frames from tracebacks; gradaudit needs them to tell a failure of TensorFlow on
    the model (a gradient function refusing its shapes: the model could not be checked) from its own bug."""
    import tensorflow as tf

    tf.debugging.disable_traceback_filtering()


def _execute(report: _Draft, analysis, path: str, options: AuditOptions, key: str, proto=None) -> None:
    """The part of an audit that runs the model: numeric checks, then stability probes, on the model read
    once (`proto`, the static pass's parse) and loaded at most once in each precision."""
    from .numeric.runner import ModelLoads, graphs_as_written

    _full_tracebacks()
    loads = ModelLoads(path, options.tags, key, proto)
    try:
        with graphs_as_written():
            _guard("running the numeric checks", report,
                   lambda: _run_numeric(report, path, options, key, analysis, loads))
            _guard("running the stability probes", report,
                   lambda: _run_stability(report, analysis, path, options, key, loads))
            _guard("checking precision", report, lambda: _run_precision(report, analysis, options, loads))
    finally:
        loads.close()


def _executed_part(kind: str, path: str, options: AuditOptions, static) -> dict[str, Any]:
    """In the child process, sent back as data (wire.py): for a SavedModel, the runtime stages on the
    parent's static pass (`static`: its draft, analysis and parse; nothing is read or analysed again), then
    the reconciliation; for a Keras file (`static` None), the whole audit, since Keras must build the model
    to trace it. gradaudit's own failure and the model's (exit 2) come back as values, so that the parent says
    which it is."""
    from .wire import encode

    options = replace(options, timeout=None)
    try:
        if kind == "keras":
            return {"report": encode(_audit_keras_file(path, options))}
        report, analysis, model = static
        if options.load_ops:  # this process's own TensorFlow must know the custom ops too
            from .custom_ops import load_ops

            load_ops(options.load_ops)
        _execute(report, analysis, path, options, report.target.signature, model.proto)
        return {"report": encode(_finish(report))}
    except InternalError as exc:
        return {"internal": {"stage": exc.stage, "detail": exc.detail,
                             "report": encode(exc.report) if exc.report is not None else None}}
    except GradauditError as exc:
        return {"error": str(exc)}


def _child_result(data: Any) -> Report | InternalError:
    """What the child sent, checked field by field: a Report, or gradaudit's own failure in the child; the
    model's fault is raised (GradauditError, exit 2). WireError when it is none of them (a model that got ops
    past the gate may have written it)."""
    from .wire import WireError, decode

    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("result: expected one of report, internal, error")
    if "report" in data:
        return decode(Report, data["report"], "report")
    if "error" in data:
        raise GradauditError(decode(str, data["error"], "error"))
    internal = data.get("internal")
    if not isinstance(internal, dict) or set(internal) != {"stage", "detail", "report"}:
        raise WireError("result: expected one of report, internal, error")
    stage, detail = decode(str, internal["stage"], "stage"), decode(str, internal["detail"], "detail")
    partial = None if internal["report"] is None else decode(Report, internal["report"], "report")
    return InternalError.from_parts(stage, detail, partial)


def _in_child(kind: str, path: str, options: AuditOptions, static=None) -> tuple[Report | InternalError, Isolation]:
    """The audit of `path` in the confined child: its result checked, and the isolation in force. Raises
    isolate.Stopped when it brought none, WireError when what it sent is not a result."""
    from .isolate import run_isolated
    from .safety.sandbox import default_memory_limit

    limit = default_memory_limit() if options.memory_limit is None else options.memory_limit or None
    path, options = os.path.abspath(path), _absolute_paths(options)  # the child runs in another folder
    readable = _readable(_model_folder(path) if kind == "saved_model" else path, options)
    sent, isolation = run_isolated(_executed_part, (kind, path, options, static), options.timeout, readable, limit)
    return _child_result(sent), isolation


def _absolute_paths(options: AuditOptions) -> AuditOptions:
    """The options' files (--inputs, the --load-ops libraries) as absolute paths."""
    from .custom_ops import is_library

    return replace(options, inputs_file=os.path.abspath(options.inputs_file) if options.inputs_file else None,
                   load_ops=tuple(os.path.abspath(lib) if is_library(lib) else lib for lib in options.load_ops))


_IN_PROCESS = Isolation(None, None, None, None, ("the model ran in gradaudit's own process (no --timeout): no "
                                                 "sandbox, memory limit or time budget",))


def _model_folder(path: str) -> str:
    """A SavedModel target is its folder or its saved_model.pb."""
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def _variables_restorable(report: _Draft, model, path: str) -> bool:
    """The model's variables/ before TensorFlow's restore opens it: a FIFO or a device is refused (exit 2); a
    missing, truncated or corrupt file makes the audit incomplete, naming the file."""
    from .safety.checkpoint import check_variables, variables_problem

    folder = _model_folder(path)
    check_variables(folder)
    problem = variables_problem(folder, bool(model.all_variables()))
    if problem:
        report.incomplete.append(f"numeric checks and stability probes did not run: {problem}; the static "
                                 "report is complete")
    return problem is None


def _readable(model: str, options: AuditOptions) -> tuple[str, ...]:
    """What the child that runs the model reads besides the Python environment: the model (its folder, or
    the Keras file), --inputs, and the shared libraries of --load-ops."""
    from .custom_ops import is_library

    extra = [options.inputs_file] if options.inputs_file else []
    return (model, *extra, *(lib for lib in options.load_ops if is_library(lib)))


def _stopped(exc) -> str:
    from .isolate import Timeout

    if isinstance(exc.reason, Timeout):
        return f"did not finish within --timeout {exc.reason.seconds:g} s"
    return f"did not finish: {exc}"


def _execute_isolated(report: _Draft, analysis, model, path: str, options: AuditOptions) -> Report:
    """The runtime stages in the confined child, on this process's static pass: the child's finished Report,
    or the static one, incomplete, with the reason no result came."""
    from .isolate import Stopped
    from .wire import WireError

    try:
        child, isolation = _in_child("saved_model", path, options, (report, analysis, model))
    except Stopped as exc:
        report.isolation = exc.isolation
        report.incomplete.append(f"numeric checks and stability probes {_stopped(exc)}; the static report is "
                                 "complete")
        return _finish(report)
    except WireError as exc:
        report.incomplete.append(f"numeric checks and stability probes did not finish: the process running the "
                                 f"model sent a malformed result ({exc}); the static report is complete")
        return _finish(report)
    if isinstance(child, InternalError):
        raise child if child.report is not None else child.with_report(report.build())
    return replace(child, isolation=isolation)


def _audit_keras_file(path: str, options: AuditOptions) -> Report:
    """A Keras file is loaded (Keras builds the model from its configuration: its code runs) and traced in the
    confined child when there is a --timeout, --static-only included: a configuration that declares a huge
    shape or a recurrent layer over millions of steps is bounded there, not in gradaudit's own process."""
    from .targets.python import load_keras_file

    if not options.timeout:
        model = load_keras_file(path, allow_unsafe=options.allow_unsafe_ops)
        return audit_object(model, options, label=os.path.abspath(path), kind="keras")
    from .isolate import Stopped
    from .wire import WireError

    target = Target(os.path.abspath(path), "keras", None)
    try:
        child, isolation = _in_child("keras", path, options)
    except Stopped as exc:
        return _Draft(target=target, isolation=exc.isolation,
                      incomplete=[f"the audit of the Keras file {_stopped(exc)}"]).build()
    except WireError as exc:
        return _Draft(target=target, incomplete=[f"the audit of the Keras file did not finish: the process running "
                                                 f"it sent a malformed result ({exc})"]).build()
    if isinstance(child, InternalError):
        raise child
    return replace(child, target=target, isolation=isolation if child.isolation is not None else None)


def audit_object(obj, options: AuditOptions, label: str | None = None, kind: str = "python") -> Report:
    """Audit a tf.function, ConcreteFunction, tf.Module or keras.Model by reading its traced graph."""
    from .targets.python import TracedModel, parse_input_spec, trace

    label = label or getattr(obj, "__name__", None) or type(obj).__name__
    specs = [parse_input_spec(s) for s in options.input_specs]
    traced = trace(obj, label, specs, kind)
    model = TracedModel(traced)
    sig = model.signature()
    report, analysis = _static_report(model, sig, Target(label, traced.kind, None, ()))
    if not options.static_only:
        _check_inputs(sig, options)
    if _may_execute(report, options):
        report.seed, report.inputs_given = options.seed, bool(options.inputs_file)
        from .numeric.runner import graphs_as_written

        _full_tracebacks()
        with graphs_as_written():
            _guard("running the numeric checks", report,
                   lambda: _run_numeric_traced(report, traced, options, analysis))
            _guard("running the stability probes", report, lambda: _probe_traced(report, traced, options))
        if options.precision:
            report.incomplete.append(f"--precision {options.precision} did not run: it runs on SavedModels (audit "
                                     "the folder model.export or tf.saved_model.save writes)")
        report.isolation = Isolation(None, None, None, None, (f"a {traced.kind} target runs in gradaudit's own "
                                                              "process: no sandbox, memory limit or time budget",))
    return _finish(report)


def _probe_traced(report: _Draft, traced, options: AuditOptions) -> None:
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
            report.note("stability", [f"stability probes not run: the traced function cannot be saved for them "
                                      f"({exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"])
            return
        outcome = _stability_outcome(analysis, tmp, options, "serving_default")
    rename = _names_from_copy(copy, report)

    def renamed(item):
        if hasattr(item, "sources"):
            fields = {"sources": tuple(rename.get(n, n) for n in item.sources),
                      "outputs": tuple(rename.get(n, n) for n in item.outputs)}
        else:
            fields = {"source": rename.get(item.source, item.source), "output": rename.get(item.output, item.output)}
        return replace(item, **fields)

    # the copy's own numeric checks do not run: its numeric rows are the probe points' and second order's
    report.stability.extend(renamed(s) for s in outcome.results)
    report.numeric.extend(renamed(n) for n in outcome.numeric)
    # hazard lints the probes judged (confirmed: an error; reached and not confirmed: info), found on the
    # copy's graph: this report's same lints take their verdicts
    judged = {(f.rule, f.op.op_name): f for f in outcome.confirm(copy.findings)
              if f.op and (f.confirmed_by or f.probed)}
    report.findings[:] = [renamed(judged[f.rule, f.op.op_name]) if f.op and (f.rule, f.op.op_name) in judged
                          else f for f in report.findings]
    # what the probes found on the copy
    report.findings.extend(_not_yet_reported(report, [renamed(f) for f in outcome.findings]))
    _add_stability_notes(report, outcome)


def _names_from_copy(copy: _Draft, report: _Draft) -> dict[str, str]:
    """The saved copy names inputs and variables as the traced graph does; a Keras model's outputs are
    output_0, output_1, ... there, in the traced function's flat order."""
    ours = [o.name for o in report.outputs]
    theirs = [o.name for o in copy.outputs]
    if sorted(ours) == sorted(theirs):
        return {}
    if len(ours) == len(theirs) and all(t.startswith("output_") and t[7:].isdigit() for t in theirs):
        return {t: ours[int(t[7:])] for t in theirs if int(t[7:]) < len(ours)}
    return {}


def _add_numeric(report: _Draft, outcome) -> None:
    report.numeric.extend(outcome.results)
    report.findings.extend(outcome.findings)
    report.note("numeric", outcome.notes)


def _run_numeric_traced(report: _Draft, traced, options: AuditOptions, analysis=None) -> None:
    from .numeric import run_numeric_function

    _add_numeric(report, run_numeric_function(traced.fn, report.sources, report.outputs, report.flow,
                                              _numeric_options(options), variable_names=traced.variable_names,
                                              analysis=analysis))


def _numeric_options(options: AuditOptions):
    from .numeric import NumericOptions

    return NumericOptions(seed=options.seed, batch_size=options.batch_size, dim=options.dim,
                          shapes=options.shapes, inputs_file=options.inputs_file)


def _run_numeric(report: _Draft, path: str, options: AuditOptions, key: str, analysis=None, loads=None) -> None:
    from .numeric import run_numeric

    say("numeric checks")
    _add_numeric(report, run_numeric(path, options.tags, key, report.sources, report.outputs, report.flow,
                                     _numeric_options(options), progress=lambda m: say(f"numeric checks: {m}"),
                                     analysis=analysis, loads=loads))


def _stability_options(options: AuditOptions):
    from .stability import DEFAULT_SCALES, StabilityOptions

    numeric = _numeric_options(options)
    if not options.inputs_file:  # the ladder needs no batch: one example halves its cost on large models
        numeric = replace(numeric, batch_size=1)
    return StabilityOptions(numeric=numeric, scales=options.probe_scales or DEFAULT_SCALES, order=options.order,
                            batch_size=options.batch_size)


def _stability_outcome(analysis, path: str, options: AuditOptions, key: str, loads=None):
    from .stability import run_stability

    say("stability probes" + (" and second order" if options.order == 2 else ""))
    return run_stability(path, options.tags, key, analysis, _stability_options(options), loads)


def _add_stability_notes(report: _Draft, outcome) -> None:
    report.note("stability", outcome.notes)
    if outcome.stopped:
        report.incomplete.append(f"stability probes stopped: {outcome.stopped}")
    report.incomplete.extend(line for line in outcome.incomplete if line not in report.incomplete)


def _not_yet_reported(report: _Draft, findings: list) -> list:
    """The probes' findings without the gradient mismatches the numeric checks already reported for the same
    sources and op: one wrong gradient seen at the synthesised point and again at a probe point is one
    finding (the probe point's row stays in the numeric table)."""

    def op_key(f):
        return (f.op.op_type, f.op.op_name) if f.op else None

    known = {(op_key(f), s) for f in report.findings if f.rule == "gradient-mismatch" for s in f.sources}
    return [f for f in findings if f.rule != "gradient-mismatch" or not f.sources
            or not all((op_key(f), s) in known for s in f.sources)]


def _run_stability(report: _Draft, analysis, path: str, options: AuditOptions, key: str, loads=None) -> None:
    outcome = _stability_outcome(analysis, path, options, key, loads)
    report.stability.extend(outcome.results)
    report.numeric.extend(outcome.numeric)
    report.findings[:] = outcome.confirm(report.findings) + _not_yet_reported(report, outcome.findings)
    _add_stability_notes(report, outcome)


def _run_precision(report: _Draft, analysis, options: AuditOptions, loads) -> None:
    from .stability.precision import run_precision

    if options.precision:
        say(f"precision: {options.precision}")
    outcome = run_precision(loads, analysis, _stability_options(options), options.precision)
    report.precision.extend(outcome.results)
    report.findings.extend(outcome.findings)
    report.note("precision", outcome.notes)
    report.incomplete.extend(outcome.incomplete)


def signature_keys(model) -> list[str]:
    """What --all-signatures audits in a parsed SavedModel: the signatures, or, for a model saved without
    any, its saved functions by their stable names. A model with neither is an error, never an empty pass."""
    keys = model.signature_keys() or list(model.saved_functions())
    if not keys:
        raise GradauditError(f"{model.path}: nothing to audit: the model has no signatures and no saved functions")
    return keys


def _from_config(path: str | os.PathLike) -> dict:
    """The options and policy a configuration file sets, as `audit` keyword arguments: read and checked by the
    command line's option declarations (keys are the option names)."""
    from .options import api_config

    return api_config(path, {f.name for f in fields(AuditOptions)} | {"select", "ignore", "ignore_ops", "fail_on"})


def _policy(select, ignore, ignore_ops):
    from .suppress import IgnoreOp, Policy, UnknownRule, parse_rules, split_values

    def listed(value) -> list[str]:
        return [value] if isinstance(value, str) else list(value or ())

    try:
        return Policy(select=parse_rules(listed(select)) if select else None,
                      ignore=parse_rules(listed(ignore)) if ignore else frozenset(),
                      ignore_ops=tuple(IgnoreOp.parse(t) for t in split_values(listed(ignore_ops))))
    except (UnknownRule, ValueError) as exc:
        raise GradauditError(str(exc)) from None


def audit(target, *, config: str | os.PathLike | None = None, select=None, ignore=None, ignore_ops=None,
          fail_on: str | None = None, **options) -> Report:
    """Audit `target` and return the Report.

    `target` is a SavedModel folder, a `.keras`/`.h5` file, `package.module:attr` or `file.py:attr`,
    or the object itself: a tf.function, ConcreteFunction, tf.Module or keras.Model.
    `options` are AuditOptions fields (signature, tags, static_only, seed, input_specs, load_ops, ...).
    The policy takes the CLI's options under the same names: `select`, `ignore` (rule codes, prefixes or
    slugs), `ignore_ops` (`GLOB` or `RULE:GLOB`), `fail_on` (the threshold of `report.verdict()` and
    `report.ok`), and `config`, a pyproject.toml ([tool.gradaudit]) or TOML file whose keys set the same
    options and policy; arguments win over the file.
    """
    settings = _from_config(config) if config is not None else {}
    explicit = {"select": select, "ignore": ignore, "ignore_ops": ignore_ops, "fail_on": fail_on}
    settings.update({k: v for k, v in explicit.items() if v is not None})
    settings.update(options)
    policy = _policy(settings.pop("select", None), settings.pop("ignore", None), settings.pop("ignore_ops", None))
    threshold = settings.pop("fail_on", "error")
    if threshold not in ("error", "warning", "info", "never"):
        raise GradauditError(f"fail_on must be error, warning, info or never, not {threshold!r}")
    return replace(policy.apply(_audit_target(target, settings)), fail_on=threshold)


def _audit_target(target, options: dict) -> Report:
    from .targets.python import KERAS_SUFFIXES, is_python_target, resolve

    fields: dict[str, Any] = {k: tuple(v) if k in ("tags", "input_specs", "load_ops") and isinstance(v, list) else v
                              for k, v in options.items()}
    opts = AuditOptions(**fields)
    if opts.load_ops:
        from .custom_ops import load_ops

        load_ops(opts.load_ops)
    if not isinstance(target, (str, os.PathLike)):
        return audit_object(target, opts)
    target = os.fspath(target)
    if target.endswith(KERAS_SUFFIXES):
        return _audit_keras_file(target, opts)
    if is_python_target(target):
        return audit_object(resolve(target), opts, label=target)
    return audit_saved_model(target, opts)
