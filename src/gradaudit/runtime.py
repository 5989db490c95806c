"""The runtime stages, run on a StaticResult: the numeric checks, the stability probes (and second order),
the precision check. Each stage's outcome becomes one part of a RuntimeResult; what the parts mean together
with the static findings is reconcile.py's to say. The runtime reads the graph from the static result and
never analyses it again.

A stage that fails because of gradaudit (not the model) stops the runtime: `StageFailed` carries the error
and the parts that finished before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from .errors import GradauditError, InternalError
from .model import Note, Severity
from .progress import say
from .results import (
    AuditOptions,
    NumericPart,
    PrecisionPart,
    ProbePart,
    RuntimeResult,
    Stage,
    StageFailure,
    StaticResult,
)


class StageFailed(Exception):
    """gradaudit failed in a runtime stage: `error` says where, `partial` holds the stages before it."""

    def __init__(self, error: InternalError, partial: RuntimeResult):
        super().__init__(str(error))
        self.error, self.partial = error, partial

    def result(self) -> RuntimeResult:
        """The partial result with the failure as data (what the child sends)."""
        return replace(self.partial, failure=StageFailure(self.error.stage, self.error.detail))


def check_inputs(sig, options: AuditOptions) -> None:
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
        synthesise(specs, options)
    except InputError as exc:
        raise GradauditError(str(exc)) from None
    except (ValueError, TypeError) as exc:  # an array numpy cannot read as the input's dtype
        raise GradauditError(f"--inputs {options.inputs_file}: {exc}") from None


def _full_tracebacks() -> None:
    """TensorFlow trims its own frames from tracebacks; gradaudit needs them to tell a failure of TensorFlow on
    the model (a gradient function refusing its shapes: the model could not be checked) from its own bug."""
    import tensorflow as tf

    tf.debugging.disable_traceback_filtering()


def _stages(steps: list[tuple[str, str, Callable[[], Any]]]) -> RuntimeResult:
    """Run (part name, stage, run) in order into one RuntimeResult; the first failure of gradaudit's own stops
    them (StageFailed); a failure of the model's (GradauditError) is raised as it is; running out of memory stops
    them too, as the audit's `stopped` reason (incomplete), never as gradaudit's bug."""
    parts: dict[str, Any] = {}
    for name, stage, run in steps:
        try:
            parts[name] = run()
        except GradauditError:
            raise
        except MemoryError as exc:  # the model's checks need more memory than the process may have: not a bug
            return RuntimeResult(**parts, stopped=_out_of_memory(stage, exc))
        except InternalError as exc:
            raise StageFailed(exc, RuntimeResult(**parts)) from exc
        except Exception as exc:
            raise StageFailed(InternalError(stage, exc), RuntimeResult(**parts)) from exc
    return RuntimeResult(**parts)


def _out_of_memory(stage: str, exc: MemoryError) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    what = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return (f"{stage.replace('running ', '', 1)} ran out of memory ({what}):"
            " the checks of this model need more memory than the process running it may use (--memory-limit; "
            "the default is half of the physical memory); the stages after it did not run")


def run_saved_model(static: StaticResult, options: AuditOptions) -> RuntimeResult:
    """The runtime stages on a SavedModel, on the model read once (the static pass's parse, which also says where
    the model is) and loaded at most once in each precision."""
    from .numeric.runner import ModelLoads, graphs_as_written

    _full_tracebacks()
    path = static.model.location
    key = static.target.signature or options.signature
    loads = ModelLoads(path, options.tags, key, static.model)
    local = _LocalMode(options, lambda: loads.get(False).fn)
    try:
        with graphs_as_written():
            return _stages([
                ("numeric", "running the numeric checks", lambda: _numeric(static, path, options, loads, local)),
                ("probes", "running the stability probes", lambda: _probes(static, path, options, loads, local)),
                ("precision", "checking precision", lambda: _precision(static, options, loads)),
            ])
    finally:
        loads.close()


def _numeric_options(options: AuditOptions):
    from .numeric import NumericOptions

    return NumericOptions(seed=options.seed, batch_size=options.batch_size, dim=options.dim,
                          shapes=options.shapes, inputs_file=options.inputs_file)


def _notes(stage: Stage, lines: Iterable[str]) -> tuple[Note, ...]:
    """What a runtime stage could not check, each line with that stage: where it is measured, not reconciled."""
    return tuple(Note(stage, line) for line in lines)


def _numeric_part(outcome) -> NumericPart:
    return NumericPart(tuple(outcome.results), tuple(outcome.findings), _notes("numeric", outcome.notes),
                       raised=outcome.raised)


class _LocalMode:
    """Whether the local checks decide this audit's numeric and probe-point checks (--local-checks; auto: a model
    of stability.local.LARGE_MODEL trainable parameters or more), found once on the loaded model."""

    def __init__(self, options: AuditOptions, function: Callable[[], Any]):
        """`function()`: the signature's function (loaded or traced) whose trainable parameters are counted."""
        self._options, self._function = options, function
        self._wanted: bool | None = None

    def wanted(self) -> bool:
        if self._wanted is None:
            self._wanted = self._decide()
        return self._wanted

    def _decide(self) -> bool:
        mode = self._options.local_checks
        if mode != "auto":
            return mode == "always"
        from .numeric.local import LARGE_MODEL, model_parameters

        try:
            fn = self._function()
        except Exception:  # noqa: BLE001 - a model that does not load: the numeric checks say so
            return False
        return model_parameters(fn) >= LARGE_MODEL


def _numeric(static: StaticResult, path: str, options: AuditOptions, loads, local: _LocalMode) -> NumericPart:
    from .numeric import run_numeric
    from .numeric.session import random_ops

    say("numeric checks")
    key = static.target.signature or options.signature
    # two runs of a model with random ops differ, so its whole-model checks cannot decide (GA202): each op checked
    # on its own at the values one run gave it can (a wrong custom gradient beside dropout or noise)
    nondeterministic = options.local_checks == "auto" and bool(random_ops(loads.info.op_types))
    checked = _local_checks(static, options, loads) if local.wanted() or nondeterministic else None
    task = _numeric_task(static, options, progress=lambda m: say(f"numeric checks: {m}"),
                         local=checked[1] if checked else None)
    part = _numeric_part(run_numeric(path, options.tags, key, task, loads=loads))
    if checked is None:
        return _located(static, options, loads, part)
    outcome, verdict = checked
    from .numeric import local as stage

    found = stage.findings(outcome, static.analysis, confirmed=not _whole_model_passed(part))
    return replace(part, findings=tuple(found) + part.findings,
                   notes=_notes("numeric", stage.notes(outcome, verdict is not None)) + part.notes,
                   local=tuple(outcome.checks))


def _located(static: StaticResult, options: AuditOptions, loads, part: NumericPart) -> NumericPart:
    """Where the whole-model checks found gradient mismatches (GA201 errors, one per source) in a model with saved
    custom gradients, the local checks at the same point look for the custom gradient at fault: each one whose own
    check fails with the cotangent the model's backward hands it (LocalOutcome.decisive) is one finding naming it,
    which stands for the mismatches of the sources it covers (one cause, one finding; their rows stay). Nothing
    changes where the local checks cannot run or name no custom gradient, in a compiled module (judged by bisecting
    its variables), or where a cut or a surrogate may explain the mismatches (reconcile judges those)."""
    mismatches = [f for f in part.findings if f.code == "GA201" and f.severity is Severity.ERROR]
    if not mismatches or not _may_locate(static, loads):
        return part
    checked = _local_checks(static, options, loads)
    return part if checked is None else _folded(part, mismatches, checked[0], static.analysis)


def _may_locate(static: StaticResult, loads) -> bool:
    info = loads.info
    return "XlaCallModule" not in info.op_types and not any(f.partial_by for f in static.flow)


def _folded(part: NumericPart, mismatches: list, outcome, analysis) -> NumericPart:
    """`part` with the mismatches the failing gradients of `outcome` cover replaced by their findings: its custom
    gradients checked with the cotangent the model's backward hands them, or, in a model that holds none, the ops
    whose registered gradient (TensorFlow's own) is not their derivative at the values the model gave them (an
    Xlogy at x = 0), the only gradients the model's can be composed of."""
    from .numeric import local as stage

    custom = any(c.kind == "custom_gradient" for c in outcome.checks)
    found = [f for f in stage.findings(outcome, analysis)
             if f.sources and (f.op in outcome.decisive or not custom)]
    covered = {s for f in found for s in f.sources}
    folded = [f for f in mismatches if f.sources and set(f.sources) <= covered]
    if not folded:
        return part
    return replace(part, findings=tuple(found) + tuple(f for f in part.findings if f not in folded),
                   notes=part.notes + (_folded_note(folded, found, custom),), local=part.local + tuple(outcome.checks))


def _folded_note(folded: list, found: list, custom: bool) -> Note:
    """The note on mismatches folded into the findings of the gradients that failed their own checks."""
    ops = ", ".join(f.op.label for f in found if f.op is not None)
    what = "custom gradient" if custom else "registered gradient"
    several = len(found) > 1
    return Note("numeric", f"The gradient mismatches of {', '.join(s for f in folded for s in f.sources)} are one "
                           f"cause: the {what}{'s' if several else ''} of {ops}, which failed "
                           f"{'their' if several else 'its'} own check at the values the model's forward gave "
                           "it (the numeric rows are the whole-model checks').")


def _whole_model_passed(part: NumericPart) -> bool:
    """Every check at the numeric checks' point passed: the whole-model checks' (called only where an op failed on
    its own, when the local checks decide nothing, so every row is theirs) or a local failure's rows (fail)."""
    rows = [r for r in part.results if r.scale is None]
    return bool(rows) and all(r.status == "pass" for r in rows)


def _local_checks(static: StaticResult, options: AuditOptions, loads):
    """(the local checks' outcome at the numeric checks' point, the verdict they give the model or None), or None
    when there is no point to check (the numeric checks say why)."""
    from .numeric import local
    from .numeric.inputs import InputError
    from .numeric.session import random_ops
    from .numeric.stability import probe_start

    try:
        _plan, point = probe_start(loads, static.analysis, _numeric_options(options))
    except InputError:
        return None
    if point is None:
        return None
    say("local checks")
    outcome = local.run_local(loads, static.analysis, point, options.seed, say)
    if random_ops(loads.info.op_types):  # two runs of the model differ: the whole-model checks see it (GA202)
        return outcome, None
    if any(f.partial_by for f in static.flow):  # a stop_gradient or a surrogate on a connected pair: the model's
        return outcome, None  # gradient is not its forward's derivative there by design; the whole-model checks say so
    return outcome, local.verdict(outcome, static.analysis)


def _numeric_task(static: StaticResult, options: AuditOptions, progress: Callable[[str], None] | None = None,
                  local=None):
    """What the numeric checks are asked: the static result's sources, outputs, flow and analysis, the options, and
    the local checks' verdict when they decided the model."""
    from .numeric import NumericTask

    return NumericTask(list(static.sources), list(static.outputs), list(static.flow), _numeric_options(options),
                       analysis=static.analysis, progress=progress, local=local)


def _stability_options(options: AuditOptions, local: bool = False):
    from .numeric.stability import DEFAULT_SCALES, StabilityOptions

    numeric = _numeric_options(options)
    if not options.inputs_file:  # the ladder needs no batch: one example halves its cost on large models
        numeric = replace(numeric, batch_size=1)
    return StabilityOptions(numeric=numeric, scales=options.probe_scales or DEFAULT_SCALES, order=options.order,
                            batch_size=options.batch_size, local=local, precision=options.precision)


def _probe_part(outcome) -> ProbePart:
    return ProbePart(results=tuple(outcome.results), numeric=tuple(outcome.numeric), findings=tuple(outcome.findings),
                     verdicts=tuple(outcome.verdicts), notes=_notes("stability", outcome.notes),
                     stopped=outcome.stopped, incomplete=tuple(outcome.incomplete), local=tuple(outcome.local),
                     raised=tuple(outcome.raised))


def _probe_outcome(analysis, path: str, options: AuditOptions, key: str, loads=None, local: bool = False):
    from .numeric.stability import run_stability

    say("stability probes" + (" and second order" if options.order == 2 else ""))
    return run_stability(path, options.tags, key, analysis, _stability_options(options, local), loads)


def _probes(static: StaticResult, path: str, options: AuditOptions, loads, local: _LocalMode) -> ProbePart:
    key = static.target.signature or options.signature
    return _probe_part(_probe_outcome(static.analysis, path, options, key, loads, local.wanted()))


def _precision(static: StaticResult, options: AuditOptions, loads) -> PrecisionPart:
    from .numeric.precision import run_precision

    if options.precision:
        say(f"precision: {options.precision}")
    outcome = run_precision(loads, static.analysis, _stability_options(options), options.precision)
    return PrecisionPart(tuple(outcome.results), tuple(outcome.findings), _notes("precision", outcome.notes),
                         tuple(outcome.incomplete))


def run_traced(static: StaticResult, traced, options: AuditOptions, why: str) -> RuntimeResult:
    """The runtime stages on a traced Python or Keras function that TensorFlow cannot save (`why`): every other one
    is audited as the SavedModel it saves to (api._audit_saved_copy). The numeric checks run on the function itself,
    with no float64 copy; the probes and --precision, which run on a loaded SavedModel, do not, and say why."""
    from .numeric import run_numeric_function
    from .numeric.precision import run_precision
    from .numeric.runner import graphs_as_written

    _full_tracebacks()
    task = replace(_numeric_task(static, options), float64_blocked=f"the traced function {why}")

    def numeric() -> NumericPart:
        return _numeric_part(run_numeric_function(traced.fn, task, variable_names=traced.variable_names))

    def probes() -> ProbePart:
        return ProbePart(notes=(Note("stability", f"stability probes not run: the traced function {why}"),))

    def precision() -> PrecisionPart:
        notes = _notes("precision", run_precision(None, static.analysis, _stability_options(options), None).notes)
        if not options.precision:
            return PrecisionPart(notes=notes)
        return PrecisionPart(notes=notes, incomplete=(f"--precision {options.precision} did not run: the traced "
                                                      f"function {why}",))

    with graphs_as_written():
        return _stages([("numeric", "running the numeric checks", numeric),
                        ("probes", "running the stability probes", probes),
                        ("precision", "checking precision", precision)])
