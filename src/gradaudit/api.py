"""The Python API: `audit(target, **options) -> Report`. The CLI is a thin layer over this."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import fields, replace
from typing import TYPE_CHECKING, Any, cast

from .errors import GradauditError, InternalError
from .kinds import Kind, kind_of, register
from .model import Isolation, Report, Target, TargetKind
from .reconcile import reconcile
from .results import AuditOptions, Gate, RuntimeResult, StaticResult
from .runtime import StageFailed, check_inputs, run_saved_model, run_traced
from .static_pass import MALFORMED, run_static
from .targets import (
    is_keras_file,
    is_python_target,
    is_saved_model,
    keras_file_files,
    python_graph_file,
    saved_model_files,
    saved_model_graph_file,
)

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .isolate import Stopped
    from .suppress import Policy
    from .targets import AuditTarget
    from .targets.saved_model import SavedModelFile, SignatureGraph

__all__ = ["AuditOptions", "audit", "audit_object", "audit_saved_model", "read_saved_model", "signature_keys"]


def read_saved_model(path: str, options: AuditOptions) -> SavedModelFile:
    """The one parse of a SavedModel an audit makes (the --load-ops packages first: their ops' definitions)."""
    from .targets.saved_model import SavedModelFile

    if options.load_ops:
        from .custom_ops import load_ops

        load_ops(options.load_ops)
    return SavedModelFile(path, options.tags)


def audit_saved_model(path: str, options: AuditOptions, signature: str | None = None,
                      model: SavedModelFile | None = None) -> Report:
    """The audit of one signature of a SavedModel; `model`: its parse (read_saved_model), when the caller
    has one. Target -> static pass -> gate -> runtime (here or in the confined child) -> reconcile."""
    key = signature or options.signature
    try:
        model = model or read_saved_model(path, options)
        sig = model.signature(key)
    except MALFORMED as exc:
        raise GradauditError(f"{path}: malformed model ({exc.__class__.__name__}: {exc})") from None
    static = run_static(model, sig, Target(os.path.abspath(path), "saved_model", key, tuple(options.tags)))
    if not options.static_only:
        check_inputs(sig, options)
    gate = _saved_model_gate(static, sig, path, options)
    if not gate.run:
        return reconcile(static, gate)
    if options.timeout:
        return _reconciled(static, gate, _runtime_in_child(static, options))
    try:
        runtime = run_saved_model(static, options)
    except StageFailed as exc:
        raise exc.error.with_report(reconcile(static, gate, replace(exc.partial, isolation=_IN_PROCESS))) from exc
    return reconcile(static, gate, replace(runtime, isolation=_IN_PROCESS))


def _reconciled(static: StaticResult, gate: Gate, runtime: RuntimeResult) -> Report:
    """The Report; a runtime that stopped on gradaudit's own failure (in the child) is said to be one, with
    the report as far as it got."""
    report = reconcile(static, gate, runtime)
    if runtime.failure is not None:
        raise InternalError.from_parts(runtime.failure.stage, runtime.failure.detail).with_report(report)
    return report


def _blocking_reasons(static: StaticResult, options: AuditOptions) -> tuple[str, ...]:
    """Nothing of a model runs unless the safety gate proved every op it runs harmless (GA401, GA402, GA403
    findings block it, suppressed or not) or the user says so: the reason it does not run, if so."""
    from .rules import get_rule

    blocking = sorted({f.code for f in static.findings if get_rule(f.rule).blocks_execution})
    unknown = sorted({f.code for f in static.findings if f.rule == "unknown-op"})
    if options.allow_unsafe_ops:
        return ()
    if blocking:
        return (f"numeric checks and probes did not run: ops or files not proven safe ({', '.join(blocking)}); "
                "--allow-unsafe-ops runs them anyway",)
    if unknown:  # TensorFlow cannot load a graph with ops it does not know
        return (f"numeric checks and probes did not run: the model holds ops this TensorFlow does not know "
                f"({', '.join(unknown)}), so it cannot be loaded; --load-ops with the package it names makes them "
                "known",)
    return ()


def _runs(options: AuditOptions) -> Gate:
    return Gate(run=True, seed=options.seed, inputs_given=bool(options.inputs_file))


def _saved_model_gate(static: StaticResult, sig: SignatureGraph, path: str, options: AuditOptions) -> Gate:
    """Whether the runtime stages run on a SavedModel signature, and why not: --static-only, a saved function
    (no signature to call), ops not proven safe, variables that cannot be restored."""
    if options.static_only:
        return Gate(run=False)
    if sig.function is not None:
        return Gate(run=False, reasons=(f"numeric checks and probes did not run: they run on signatures, and "
                                        f"{static.target.signature!r} is a saved function of a model without "
                                        "signatures (--static-only audits its graph alone)",))
    blocked = _blocking_reasons(static, options)
    if blocked:
        return Gate(run=False, reasons=blocked)
    problem = _variables_problem(static.model, path)
    if problem:
        return Gate(run=False, reasons=(f"numeric checks and stability probes did not run: {problem}; the static "
                                        "report is complete",))
    return _runs(options)


def _executed_part(path: str, options: AuditOptions, static: StaticResult | None) -> dict[str, Any]:
    """In the child process, sent back as data (wire.py): for a SavedModel, the runtime stages on the
    parent's static pass (`static`; nothing is read or analysed again), which the parent reconciles; for a
    Keras file (`static` None), the whole audit, since Keras must build the model to trace it. gradaudit's own
    failure and the model's (exit 2) come back as values, so that the parent says which it is."""
    from .wire import encode

    options = replace(options, timeout=None)
    try:
        if static is None:
            return {"report": encode(_audit_keras_file(path, options))}
        if options.load_ops:  # this process's own TensorFlow must know the custom ops too
            from .custom_ops import load_ops

            load_ops(options.load_ops)
        try:
            return {"runtime": encode(run_saved_model(static, options))}
        except StageFailed as exc:
            return {"runtime": encode(exc.result())}
    except InternalError as exc:
        return {"internal": {"stage": exc.stage, "detail": exc.detail,
                             "report": encode(exc.report) if exc.report is not None else None}}
    except GradauditError as exc:
        return {"error": str(exc)}


def _child_result(data: Any) -> Report | RuntimeResult | InternalError:
    """What the child sent, checked field by field: a Report (a Keras file's audit), a RuntimeResult (a
    SavedModel's runtime stages), or gradaudit's own failure in the child; the model's fault is raised
    (GradauditError, exit 2). WireError when it is none of them (a model that got ops past the gate may have
    written it)."""
    from .wire import WireError, decode

    if not isinstance(data, dict) or len(data) != 1:
        raise WireError("result: expected one of report, runtime, internal, error")
    if "report" in data:
        report: Report = decode(Report, data["report"], "report")
        return report
    if "runtime" in data:
        runtime: RuntimeResult = decode(RuntimeResult, data["runtime"], "runtime")
        return runtime
    if "error" in data:
        raise GradauditError(decode(str, data["error"], "error"))
    internal = data.get("internal")
    if not isinstance(internal, dict) or set(internal) != {"stage", "detail", "report"}:
        raise WireError("result: expected one of report, runtime, internal, error")
    stage, detail = decode(str, internal["stage"], "stage"), decode(str, internal["detail"], "detail")
    partial = None if internal["report"] is None else decode(Report, internal["report"], "report")
    return InternalError.from_parts(stage, detail, partial)


def _in_child(path: str, options: AuditOptions, static: StaticResult | None = None
              ) -> tuple[Report | RuntimeResult | InternalError, Isolation]:
    """The runtime stages of a SavedModel on its `static` pass, or (`static` None) the whole audit of a Keras
    file, in the confined child: its result checked, and the isolation in force. Raises isolate.Stopped when it
    brought none, WireError when what it sent is not a result."""
    from .isolate import run_isolated
    from .safety.sandbox import default_memory_limit

    limit = default_memory_limit() if options.memory_limit is None else options.memory_limit or None
    path, options = os.path.abspath(path), _absolute_paths(options)  # the child runs in another folder
    readable = _readable(_model_folder(path) if static is not None else path, options)
    sent, isolation = run_isolated(_executed_part, (path, options, static), options.timeout, readable, limit)
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


def _variables_problem(model: AuditTarget, path: str) -> str | None:
    """The model's variables/ before TensorFlow's restore opens it: a FIFO or a device is refused (exit 2); a
    missing, truncated or corrupt file is the reason the runtime does not run, naming the file."""
    from .safety.checkpoint import check_variables, variables_problem

    folder = _model_folder(path)
    check_variables(folder)
    return variables_problem(folder, bool(model.all_variables()))


def _readable(model: str, options: AuditOptions) -> tuple[str, ...]:
    """What the child that runs the model reads besides the Python environment: the model (its folder, or
    the Keras file), --inputs, and the shared libraries of --load-ops."""
    from .custom_ops import is_library

    extra = [options.inputs_file] if options.inputs_file else []
    return (model, *extra, *(lib for lib in options.load_ops if is_library(lib)))


def _stopped(exc: Stopped) -> str:
    from .isolate import Timeout

    if isinstance(exc.reason, Timeout):
        return f"did not finish within --timeout {exc.reason.seconds:g} s"
    return f"did not finish: {exc}"


def _runtime_in_child(static: StaticResult, options: AuditOptions) -> RuntimeResult:
    """The runtime stages in the confined child, on this process's static pass: what they measured, or, when
    no result came, why (`stopped`)."""
    from .isolate import Stopped
    from .wire import WireError

    try:
        child, isolation = _in_child(static.model.location, options, static)
    except Stopped as exc:
        return RuntimeResult(isolation=exc.isolation, stopped=f"numeric checks and stability probes "
                                                              f"{_stopped(exc)}; the static report is complete")
    except WireError as exc:
        return RuntimeResult(stopped=f"numeric checks and stability probes did not finish: the process running the "
                                     f"model sent a malformed result ({exc}); the static report is complete")
    if isinstance(child, InternalError):
        raise child if child.report is not None else child.with_report(reconcile(static, _runs(options)))
    if not isinstance(child, RuntimeResult):
        return RuntimeResult(stopped="numeric checks and stability probes did not finish: the process running the "
                                     "model sent a report instead of its measurements; the static report is complete")
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
        child, isolation = _in_child(path, options)
    except Stopped as exc:
        return Report(target=target, isolation=exc.isolation, runtime_stopped=True,
                      incomplete=[f"the audit of the Keras file {_stopped(exc)}"])
    except WireError as exc:
        return Report(target=target, runtime_stopped=True,
                      incomplete=[f"the audit of the Keras file did not finish: the process running it sent a "
                                  f"malformed result ({exc})"])
    if isinstance(child, InternalError):
        raise child
    if not isinstance(child, Report):
        return Report(target=target, runtime_stopped=True,
                      incomplete=["the audit of the Keras file did not finish: the process running it sent "
                                  "measurements instead of its report"])
    return replace(child, target=target, isolation=isolation if child.isolation is not None else None)


def audit_object(obj: object, options: AuditOptions, label: str | None = None, kind: TargetKind = "python") -> Report:
    """Audit a tf.function, ConcreteFunction, tf.Module or keras.Model by reading its traced graph."""
    from .targets.python import TracedModel, parse_input_spec, trace

    label = label or getattr(obj, "__name__", None) or type(obj).__name__
    specs = [parse_input_spec(s) for s in options.input_specs]
    traced = trace(obj, label, specs, kind)
    with tempfile.TemporaryDirectory(prefix="gradaudit-traced-") as folder:
        report = _audit_saved_copy(traced, folder, options)
    if isinstance(report, Report):
        return report
    unsaved = report
    model = TracedModel(traced)
    sig = model.signature()
    static = run_static(model, sig, Target(label, traced.kind, None, ()))
    if not options.static_only:
        check_inputs(sig, options)
    blocked = () if options.static_only else _blocking_reasons(static, options)
    if options.static_only or blocked:
        return reconcile(static, Gate(run=False, reasons=blocked))
    return _in_process(static, _runs(options), traced.kind, lambda: run_traced(static, traced, options, unsaved))


def _audit_saved_copy(traced: Any, folder: str, options: AuditOptions) -> Report | str:
    """A traced target audited as the SavedModel it saves to in `folder` (targets.python.save_copy), under its own
    label: one static pass (--static-only too: one reader of every target's graph), and the runtime on the copy in
    this process (a py_function's body runs from this process's
    registry). Where TensorFlow cannot save it, why (the traced function is audited itself)."""
    from .targets.python import save_copy

    unsaved = save_copy(traced, folder)
    if unsaved is not None:
        return unsaved
    model = read_saved_model(folder, replace(options, tags=("serve",)))
    sig = model.signature("serving_default")
    static = run_static(model, sig, Target(traced.label, traced.kind, None, ()))
    if options.static_only:
        return reconcile(static, Gate(run=False))
    check_inputs(sig, options)
    blocked = _blocking_reasons(static, options)
    if blocked:
        return reconcile(static, Gate(run=False, reasons=blocked))
    runs = replace(options, signature="serving_default", tags=("serve",))
    return _in_process(static, _runs(options), traced.kind, lambda: run_saved_model(static, runs))


def _in_process(static: StaticResult, gate: Gate, kind: TargetKind, run: Callable[[], RuntimeResult]) -> Report:
    """The report of a traced target's runtime stages, run here (`run`): nothing confines them."""
    isolation = Isolation(None, None, None, None, (f"a {kind} target runs in gradaudit's own process: no sandbox, "
                                                   "memory limit or time budget",))
    try:
        runtime = run()
    except StageFailed as exc:
        raise exc.error.with_report(reconcile(static, gate, exc.partial)) from exc
    return reconcile(static, gate, replace(runtime, isolation=isolation))


def signature_keys(model: SavedModelFile) -> list[str]:
    """What --all-signatures audits in a parsed SavedModel: the signatures, or, for a model saved without
    any, its saved functions by their stable names. A model with neither is an error, never an empty pass."""
    keys = model.signature_keys() or list(model.saved_functions())
    if not keys:
        raise GradauditError(f"{model.path}: nothing to audit: the model has no signatures and no saved functions")
    return keys


def _from_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The options and policy a configuration file sets, as `audit` keyword arguments: read and checked by the
    command line's option declarations (keys are the option names)."""
    from .options import api_config

    return api_config(path, {f.name for f in fields(AuditOptions)} | {"select", "ignore", "ignore_ops", "fail_on"})


def _policy(select: object, ignore: object, ignore_ops: object) -> Policy:
    from .suppress import IgnoreOp, Policy, UnknownRule, parse_rules, split_values

    def listed(value: object) -> list[str]:
        if isinstance(value, str):
            return [value]
        return list(cast("Iterable[str]", value or ()))

    try:
        return Policy(select=parse_rules(listed(select)) if select else None,
                      ignore=parse_rules(listed(ignore)) if ignore else frozenset(),
                      ignore_ops=tuple(IgnoreOp.parse(t) for t in split_values(listed(ignore_ops))))
    except (UnknownRule, ValueError) as exc:
        raise GradauditError(str(exc)) from None


def audit(target: object, *, config: str | os.PathLike[str] | None = None, fail_on: str | None = None,
          **options: Any) -> Report:
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
    policy_keys = ("select", "ignore", "ignore_ops")
    explicit = {k: options.pop(k, None) for k in policy_keys} | {"fail_on": fail_on}
    settings.update({k: v for k, v in explicit.items() if v is not None})
    settings.update(options)
    policy = _policy(settings.pop("select", None), settings.pop("ignore", None), settings.pop("ignore_ops", None))
    threshold = settings.pop("fail_on", "error")
    if threshold not in ("error", "warning", "info", "never"):
        raise GradauditError(f"fail_on must be error, warning, info or never, not {threshold!r}")
    return replace(policy.apply(_audit_target(target, settings)), fail_on=threshold)


def _audit_target(target: object, options: dict[str, Any]) -> Report:
    fields: dict[str, Any] = {k: tuple(v) if k in ("tags", "input_specs", "load_ops") and isinstance(v, list) else v
                              for k, v in options.items()}
    opts = AuditOptions(**fields)
    if opts.load_ops:
        from .custom_ops import load_ops

        load_ops(opts.load_ops)
    if not isinstance(target, (str, os.PathLike)):
        return audit_object(target, opts)
    target = os.fspath(target)
    return kind_of(target).audit(target, opts)


def _audit_signatures(path: str, options: AuditOptions, all_signatures: bool) -> tuple[Report, ...]:
    """A run of many models audits a SavedModel's default signature, or with `all_signatures` every one; for a
    model saved without signatures (the default signature asked), its saved functions, each by its stable
    name. A path that holds no SavedModel is the one audit, which says why."""
    if not is_saved_model(path):
        return (audit(path, **vars(options)),)
    model = read_saved_model(path, options)  # the one parse: the signatures are looked up in it
    if all_signatures or (options.signature == AuditOptions.signature and not model.signature_keys()):
        return tuple(audit_saved_model(path, options, key, model) for key in signature_keys(model))
    return (audit_saved_model(path, options, None, model),)


def _audit_python_target(target: str, options: AuditOptions) -> Report:
    from .targets.python import resolve

    return audit_object(resolve(target), options, label=target)


def _is_saved_model_path(_target: str) -> bool:
    return True  # what no other kind recognises: a missing path or one that holds no model is said so by its audit


# The built-in kinds, asked last to first: a Keras file, a Python object, else a SavedModel
register(Kind("saved_model", _is_saved_model_path, audit_saved_model, audit_each=_audit_signatures,
              files=saved_model_files, graph_file=saved_model_graph_file))
register(Kind("python", is_python_target, _audit_python_target, graph_file=python_graph_file,
              uncached="module:attr targets are not cached (the code they import cannot be hashed)", runs_code=True))
register(Kind("keras", is_keras_file, _audit_keras_file, files=keras_file_files, runs_code=True))
