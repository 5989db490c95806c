"""One numeric session: choose the precision, load the model, build the point, group the sources, check."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..flow import STOP_OPS
from ..model import (
    ALL_VARIABLES,
    EVERY_OUTPUT,
    EVERY_SOURCE,
    CheckedOutputs,
    Finding,
    FlowEntry,
    NumericResult,
    OpRef,
    Output,
    Source,
    UndecidedCause,
)
from ..rules import numeric as rules
from .checks import Checker, Group, Settings
from .domains import Domains
from .inputs import InputError, given_inputs, synthesise, synthesised_notes
from .runner import ModelError, ModelLoads, PositionalFunction, Runner, UncutDerivative, describe, signature_variables
from .savedmodel import SavedModelInfo
from .sweep import Floor, ladder_for
from .task import LocalVerdict, NumericOptions, NumericOutcome, NumericTask
from .upcast import float64_blockers

EPS = {"float16": 9.77e-4, "bfloat16": 7.82e-3, "float32": 1.19e-7, "float64": 2.22e-16}
RESOLUTION = 1e-2  # a check that cannot bound the relative error below 1% is inconclusive
FLOOR_ULPS = 100  # relative discrepancies below 100 eps are never significant
# The least relative discrepancy a check in that dtype reports: what TensorFlow really computes in a float64 copy
# is not float64 arithmetic from end to end (a backward that recomputes the forward, tf.recompute_grad, sums in
# another order; constants and some kernels keep float32 or approximate values), and a gradient that agrees with
# the differences to 1e-8 is right for training. A custom gradient wrong by 1e-6 is a hundred times above it.
AGREEMENT = {"float64": 1e-8}


# ... and, at the probe points that look for a written gradient wrong only for small inputs (probes.CHECKED_WRITTEN)
# or for exact zeros (inputs × 0, where a sigmoid of the input is 0.5),
# on the float64 copy of a float32 model, relative to the derivative itself: the copy keeps the model's float32
# constants and the approximations made for float32 (TensorFlow Probability's series for betainc's derivative in b:
# 2.3e-7 off at p = 0.5), so a discrepancy within a few float32 rounding units of the derivative is the model's own
# precision there. The other checks keep their sensitivity (a custom gradient wrong by 1e-6 whose share of the
# derivative is diluted by other paths still fails).
COPY_AGREEMENT = 4 * EPS["float32"]


def floor_for(dtype: str) -> float:
    """The relative discrepancy never significant in `dtype`: FLOOR_ULPS rounding units, and at least AGREEMENT."""
    return max(FLOOR_ULPS * EPS[dtype], AGREEMENT.get(dtype, 0.0))


def check_floor(dtype: str, copy: bool) -> float | Floor:
    """floor_for `dtype`; with COPY_AGREEMENT of the derivative where `copy` (see COPY_AGREEMENT)."""
    return Floor(floor_for(dtype), COPY_AGREEMENT) if copy else floor_for(dtype)


DRAWS = ("Random", "Rng", "Multinomial", "TruncatedNormal")


def random_ops(op_types: frozenset[str], stateless: bool = False) -> list[str]:
    """The op types that draw random numbers statefully (two runs of the model differ); with `stateless`, the
    stateless draws too: a stateless draw of a float dtype gives other numbers in float64 than in float32 (the
    float64 copy of a model with `tf.random.stateless_normal` or a stateless dropout computes another function)."""
    from tensorflow.python.framework import op_def_registry

    def stateful(op: str) -> bool:
        op_def = op_def_registry.get(op)
        return op_def is not None and op_def.is_stateful and not op.startswith("Stateless")

    return sorted(op for op in op_types if any(k in op for k in DRAWS) and (stateless or stateful(op)))


class Plan:
    """Which inputs, variables and outputs take part, from the static pass's lists and flow. Built from
    a SavedModel signature (`Plan(info, ...)`) or from a function's specs (`Plan.of_function`)."""

    def __init__(self, info: SavedModelInfo, sources: list[Source], outputs: list[Output], flow: list[FlowEntry],
                 domains: Domains | None = None):
        import tensorflow as tf

        sig = info.meta_graph.signature_def
        if info.signature not in sig:
            raise KeyError(f"signature {info.signature!r} not found (have {sorted(sig)})")
        sig = sig[info.signature]
        self._setup({k: tf.TensorSpec(tf.TensorShape(t.tensor_shape), tf.as_dtype(t.dtype))
                     for k, t in sig.inputs.items()},
                    {k: tf.as_dtype(t.dtype) for k, t in sig.outputs.items()}, sources, outputs, flow, domains)

    @classmethod
    def of_function(cls, specs: dict[str, Any], out_dtypes: dict[str, Any], sources: list[Source],
                    outputs: list[Output], flow: list[FlowEntry], domains: Domains | None = None) -> Plan:
        plan = cls.__new__(cls)
        plan._setup(specs, out_dtypes, sources, outputs, flow, domains)  # noqa: SLF001 - its own alternate constructor
        return plan

    def _setup(self, specs: dict[str, Any], out_dtypes: dict[str, Any], sources: list[Source],
               outputs: list[Output], flow: list[FlowEntry], domains: Domains | None) -> None:
        self.specs = specs
        self.domains = domains or Domains()
        wanted = [o.name for o in outputs if o.name in out_dtypes] or sorted(out_dtypes)
        self.float_outputs = [o for o in wanted if out_dtypes[o].is_floating]
        self.input_sources = [s.name for s in sources if s.kind == "input" and s.differentiable
                              and s.name in specs and specs[s.name].dtype.is_floating]
        self.variable_sources = [s.name for s in sources if s.kind == "variable" and s.differentiable]
        self.native = self._native_dtype(out_dtypes, sources)
        # (function, node) of the saved custom gradients the model never runs (behind a cut; run_session sets it)
        self.behind_cuts: frozenset[tuple[str, str]] = frozenset()
        self._read_flow(flow)

    def _native_dtype(self, out_dtypes: dict[str, Any], sources: list[Source]) -> str:
        """The widest-rounding float dtype among the float outputs, inputs and differentiable variables."""
        import tensorflow as tf

        floats = [out_dtypes[o] for o in self.float_outputs] + [self.specs[n].dtype for n in self.input_sources]
        floats += [tf.as_dtype(s.dtype) for s in sources if s.kind == "variable" and s.differentiable
                   and s.dtype in EPS]
        return max((d.name for d in floats if d.name in EPS), key=lambda n: EPS[n], default="float32")

    def _read_flow(self, flow: list[FlowEntry]) -> None:
        self._status = {(f.source, f.output): f.status for f in flow}
        # pairs blocked only because TensorFlow raises when it differentiates the signature: checked, so that
        # the raise is seen at run time and said with TensorFlow's reason
        self._raises = {(f.source, f.output) for f in flow if f.raises}
        self._partial = {(f.source, f.output) for f in flow if f.partial_by}
        # the pairs whose partial cuts are stop_gradients, beside piecewise-constant ones at most (whose zero
        # gradient finite differences see too), with the stop_gradients (a copy without them is checked)
        self._stopped: dict[tuple[str, str], str] = {}
        for f in flow:
            stops = [c.op.short for c in f.partial_by if c.op.op_type in STOP_OPS]
            if stops and all(c.op.op_type in STOP_OPS or c.piecewise is True for c in f.partial_by):
                self._stopped[f.source, f.output] = ", ".join(stops)

    @property
    def stopped(self) -> dict[tuple[str, str], str]:
        """(source, output) -> the stop_gradients that cross the pair while other paths connect it, for the
        pairs whose partial cuts are all stop_gradients."""
        return dict(self._stopped)

    def connected(self, source: str) -> tuple[str, ...]:
        # A pair the static pass did not rule on is checked.
        return tuple(o for o in self.float_outputs if self._status.get((source, o), "connected") == "connected"
                     or (source, o) in self._raises)

    def disconnected(self, source: str) -> list[str]:
        """The float outputs the static pass finds no path to from `source`, not even a cut one."""
        return [o for o in self.float_outputs if self._status.get((source, o)) == "disconnected"]

    def output_groups(self, source: str) -> list[tuple[str, ...]]:
        """The connected outputs of `source`, those with a cut on one of their paths apart from the others: a
        difference the cut explains must not hide (or be blamed on) the outputs it does not touch."""
        outs = self.connected(source)
        cut = tuple(o for o in outs if (source, o) in self._partial)
        clean = tuple(o for o in outs if (source, o) not in self._partial)
        return [g for g in (clean, cut) if g]

    def empty(self) -> NumericOutcome | None:
        if not self.float_outputs:
            return NumericOutcome([_skipped(EVERY_SOURCE, "no float output")], [], [])
        if not self.input_sources and not self.variable_sources:
            return NumericOutcome([_skipped(EVERY_SOURCE, "no differentiable float source")], [], [])
        return None


@dataclass
class _Model:
    """What the checks run: `call(**inputs) -> outputs by name`, its variables by source name, and what
    the graph holds (op types for randomness and quantisers, custom gradients as suspects)."""

    call: Callable[..., dict[str, Any]]
    specs: dict[str, Any]
    variables: dict[str, Any]
    op_types: frozenset[str]
    custom_gradients: list[OpRef]
    state: tuple[Any, ...] = ()  # every variable it holds, trainable or not (put back after a call that moves one)


@dataclass(frozen=True)
class _Session:
    """What every check of one session shares: the plan, the point the checks start from, the options, and
    `progress`, told each step."""

    plan: Plan
    point: dict[str, np.ndarray]
    options: NumericOptions
    progress: Callable[[str], None]


def _skipped(source: str, reason: str, cause: UndecidedCause | None = None) -> NumericResult:
    """A check of `source` (EVERY_SOURCE: every source at once) against every float output that did not run."""
    return NumericResult(source=source, outputs=EVERY_OUTPUT, status="skipped", rel_error=None, step=None,
                         dtype=None, evaluations=0, reason=reason, every_source=source == EVERY_SOURCE, cause=cause)


def _point(plan: Plan, options: NumericOptions, domains: Domains) -> dict[str, np.ndarray] | NumericOutcome:
    try:
        return synthesise(plan.specs, options, domains)
    except InputError as exc:
        return NumericOutcome([_skipped(EVERY_SOURCE, f"no input to run the model: {exc}", "no_input")], [],
                              [f"Numeric checks skipped: {exc}"])


def run_session(loads: ModelLoads, task: NumericTask, domains: Domains | None = None) -> NumericOutcome:
    info = loads.info
    plan = Plan(info, task.sources, task.outputs, task.flow, domains)
    if task.analysis is not None:
        plan.behind_cuts = frozenset((r.function, r.op_name) for r in task.analysis.custom_gradients_behind_cuts())
    point = _point(plan, task.options, plan.domains)
    if isinstance(point, NumericOutcome):
        return point
    return _point_noted(_checked_at(loads, task, plan, point), plan, task.options)


def _point_noted(outcome: NumericOutcome, plan: Plan, options: NumericOptions) -> NumericOutcome:
    """The outcome with a note on each integer input synthesised for what the graph says it is (the checks
    decided at those values only: rows a scatter update writes are distinct, where its gradient is the
    derivative)."""
    return replace(outcome, notes=[*synthesised_notes(plan.specs, options, plan.domains), *outcome.notes])


def _checked_at(loads: ModelLoads, task: NumericTask, plan: Plan, point: dict[str, np.ndarray]) -> NumericOutcome:
    """The checks of a SavedModel signature at `point`: decided by the local checks, or on the float64 copy, or
    in the model's own precision."""
    info = loads.info
    if (nothing := plan.empty()) is not None:
        return nothing
    if task.local is not None:
        return decided_locally(plan, task.local)
    session = _Session(plan, point, task.options, task.say)
    notes: list[str] = []
    why = "float64 evaluation disabled"
    failed64, dropped = None, None
    if task.options.upcast:
        blockers = ["the model has no TF2 object graph"] if info.function is None else float64_blockers(info)
        if not blockers:
            try:
                outcome = _load_and_check(loads, session, True)
                return _with_precision(outcome, "float64 copy of the model", notes)
            except _Float64Failed as exc:
                blockers, failed64, dropped = [str(exc)], exc.error, exc.__cause__ or exc
        why = f"the model's own precision: {'; '.join(blockers)}"
        notes.append(f"Float64 evaluation is not possible ({'; '.join(blockers)}): checked in "
                     f"{plan.native} with tolerances from the measured noise.")
    outcome = _load_and_check(loads, session, False)
    if failed64 is not None and outcome.stopped == failed64:
        # The model fails the same way as saved (a gradient that raises at these inputs, an op that cannot load):
        # that error is the model's, not the float64 copy's, which stays for the probes' other points; no check
        # ran in either precision.
        return _with_precision(outcome, None, [])
    if dropped is not None:
        loads.fail(True, dropped)  # the copy's own failure: the probes go without it, and say why
    return _with_precision(outcome, why, notes)


def decided_locally(plan: Plan, local: LocalVerdict) -> NumericOutcome:
    """The checks' rows when the local checks decided the model: one per check the whole-model path would make
    (each input, the variables by the outputs they reach), with the local verdict and its evidence."""
    groups = [Group(n, outs, inputs=[n]) for n in plan.input_sources for outs in plan.output_groups(n)]
    groups += variable_groups(plan, list(plan.variable_sources))[0]
    results = []
    for g in groups:
        # a failure that names its sources: the other checks passed, so the groups without them pass
        passed = local.sources is not None and not set(g.inputs or _group_variables(g, plan)) & set(local.sources)
        results.append(NumericResult(
            source=g.source, outputs=CheckedOutputs.of(g.outputs, plan.float_outputs),
            status="pass" if passed else local.status, rel_error=None if passed else local.rel_error, step=None,
            dtype=local.dtype, evaluations=local.evaluations,
            evidence=local.evidence + ("; this gradient crosses none of the failing inputs" if passed else ""),
            precision_reason="local checks: each op at the values the model's forward gave it"))
    return NumericOutcome(results, [], [])


def _group_variables(group: Group, plan: Plan) -> list[str]:
    """The variables a group of the variables' check holds, by name."""
    names = list(plan.variable_sources)
    return [names[i] for i in group.variables if i < len(names)]


def _with_precision(outcome: NumericOutcome, why: str | None, notes: list[str]) -> NumericOutcome:
    """Every check that ran says which precision it used and why."""
    results = [replace(r, precision_reason=why) if r.dtype is not None and r.precision_reason is None else r
               for r in outcome.results]
    return replace(outcome, results=results, notes=notes + outcome.notes)


def run_function_session(fn, task: NumericTask, variable_names: dict[int, Any] | None,
                         domains: Domains | None = None) -> NumericOutcome:
    """The same checks on a traced ConcreteFunction (Python and Keras targets), in its own precision."""
    import tensorflow as tf

    captured = {id(t) for t in fn.graph.internal_captures}
    placeholders = [t for t in fn.inputs if id(t) not in captured]
    specs = {t.op.name: tf.TensorSpec(t.shape, t.dtype) for t in placeholders}
    flat = tf.nest.flatten(fn.structured_outputs)
    outputs = task.outputs
    names = [o.name for o in outputs] if len(outputs) == len(flat) else [f"output_{i}" for i in range(len(flat))]
    plan = Plan.of_function(specs, {n: t.dtype for n, t in zip(names, flat)}, task.sources, outputs, task.flow,
                            domains)
    point = _point(plan, task.options, plan.domains)
    if isinstance(point, NumericOutcome):
        return point
    if (nothing := plan.empty()) is not None:
        return nothing
    if task.local is not None:  # decided by the local checks of the function's saved copy
        return _point_noted(decided_locally(plan, task.local), plan, task.options)
    model = _function_model(fn, PositionalFunction(fn, [t.op.name for t in placeholders], names), specs,
                            variable_names or {})
    outcome = _check(model, _Session(plan, point, task.options, task.say), False)
    blocked = task.float64_blocked or "float64 copies are made of SavedModels only"
    note = f"Float64 evaluation is not possible ({blocked}): checked in the function's own precision."
    why = f"{blocked}: the function's own precision" if task.options.upcast else "float64 evaluation disabled"
    return _point_noted(_with_precision(outcome, why, [note] if task.options.upcast else []), plan, task.options)


def _function_model(fn, call, specs: dict[str, Any], variable_names: dict[int, Any]) -> _Model:
    """What the checks run of a traced function: its call, variables, op types and custom gradients."""
    graphs = [fn.graph] + [f.graph for f in fn.graph._functions.values() if hasattr(f, "graph")]  # noqa: SLF001
    ops = [(g, op) for g in graphs for op in g.get_operations()]
    return _Model(call, specs, _function_variables(fn, variable_names), frozenset(op.type for _, op in ops),
                  _custom_gradients(ops), tuple(fn.variables))


def _function_variables(fn, variable_names: dict[int, Any]) -> dict[str, Any]:
    """The function's variables by source name: the name `variable_names` gives its handle, else `var.name`."""
    variables = {}
    for v in fn.variables:
        info = variable_names.get(id(v.handle))
        variables[info.name if info is not None else v.name.split(":")[0]] = v
    return variables


def _custom_gradients(ops: list[tuple[Any, Any]]) -> list[OpRef]:
    """The ops of (graph, op) with a custom gradient, other than the calls into the functions that hold them."""
    custom = []
    for g, op in ops:
        try:
            op.get_attr("_gradient_op_type")
        except ValueError:
            continue
        if op.type not in ("PartitionedCall", "StatefulPartitionedCall"):
            custom.append(OpRef(op.type, op.name, getattr(g, "name", "<graph>")))
    return custom


class _Float64Failed(RuntimeError):
    """The float64 copy could not be loaded or run; the checks fall back to native precision. `error` is
    TensorFlow's reason, to compare with the model's own failure."""

    def __init__(self, message: str, error: str):
        super().__init__(message)
        self.error = error


def _float64_errors() -> tuple[type[BaseException], ...]:
    import tensorflow as tf

    return (tf.errors.OpError, LookupError, ValueError, TypeError, KeyError)


def _load_and_check(loads: ModelLoads, session: _Session, use64: bool) -> NumericOutcome:
    """The checks on the model loaded in float64 (`use64`) or as saved; the loaded model stays in `loads`
    for the stability probes, unless it cannot run."""
    info, plan = loads.info, session.plan
    session.progress("loading the model" + (" (float64 copy)" if use64 else ""))
    try:
        loaded = loads.get(use64)
    except Exception as exc:
        if use64:
            raise _Float64Failed(f"the float64 copy does not load: {describe(exc)}", describe(exc)) from exc
        groups = [Group(n, tuple(plan.float_outputs), inputs=[n]) for n in plan.input_sources]
        groups += [Group(ALL_VARIABLES, tuple(plan.float_outputs))] if plan.variable_sources else []
        return _model_error(ModelError(describe(exc), "load"), groups, plan, plan.native)
    try:
        model = _Model(loaded.fn, loaded.fn.structured_input_signature[1],
                       signature_variables(info, loaded.fn), info.op_types, info.custom_gradients,
                       tuple(getattr(loaded.fn, "variables", ())))
        return _check(model, session, use64, loads if use64 else None)
    except Exception as exc:
        if not use64 or not isinstance(exc, _float64_errors()) or isinstance(exc, _Float64Failed):
            raise
        # Whatever the message: a compiled module fixed to float32 (XlaCallModule), a kernel without
        # a float64 version, a variable that cannot take a double. The model may still run as saved; whether
        # the error is the copy's is decided once the model as saved has run (`run_numeric`).
        raise _Float64Failed(f"the float64 copy does not run: {describe(exc)}", describe(exc)) from exc


def _unseen(model: _Model, session: _Session, dtype: str, variables: list[str]
            ) -> tuple[list[NumericResult], list[Finding]]:
    """The sources the static pass finds disconnected from some float output, moved once each: a failing row and a
    GA204 for each that moves one all the same (numeric/unseen.py)."""
    from . import unseen

    plan = session.plan
    disconnected = {s: plan.disconnected(s) for s in [*plan.input_sources, *variables]}
    found = unseen.check(unseen.Target(model.call, model.specs, list(model.state),
                                       {n: model.variables[n] for n in variables}),
                         session.point, disconnected, session.options.seed)
    return unseen.results(found, plan.float_outputs, dtype)


def _check(model: _Model, session: _Session, use64: bool, loads: ModelLoads | None = None) -> NumericOutcome:
    """`loads`: the float64 copy's, to check on a copy without cuts whether a cut explains a mismatch."""
    plan, options = session.plan, session.options
    dtype = "float64" if use64 else plan.native
    results: list[NumericResult] = []
    notes: list[str] = _not_given(plan, options)
    variables = []
    for name in plan.variable_sources:
        if name in model.variables:
            variables.append((name, model.variables[name]))
        else:
            notes.append(f"Variable {name} is not captured by the audited function: not checked.")

    groups: list[Group] = []
    for n in plan.input_sources:
        outs_groups = plan.output_groups(n)
        groups.extend(Group(n, outs, inputs=[n]) for outs in outs_groups)
        if not outs_groups:
            results.append(_skipped(n, "no gradient path to a float output (static pass)"))
    var_groups, unconnected = variable_groups(plan, [name for name, _var in variables])
    if unconnected:
        notes.append(f"{unconnected} trainable variable(s) have no gradient path to a float output: not checked "
                     "numerically (they were moved at the checked point to see whether an output moves with them).")
    groups.extend(var_groups)
    unseen_rows, unseen_findings = _unseen(model, session, dtype, [name for name, _ in variables])
    results += unseen_rows
    if not groups:
        return NumericOutcome(results, unseen_findings, notes)

    runner = Runner(model.call, session.point, plan.input_sources, variables, plan.float_outputs, specs=model.specs)
    eps = EPS[dtype]
    settings = Settings(dtype=dtype, upcast=use64, eps=eps, ladder=ladder_for(eps, use64),
                        floor=floor_for(dtype), resolution=RESOLUTION, op_types=model.op_types,
                        custom_gradients=model.custom_gradients, domains=plan.domains,
                        given=given_inputs(options.inputs_file), stopped=plan.stopped,
                        uncut=UncutDerivative(loads, plan.input_sources, [n for n, _ in variables], plan.float_outputs,
                                              plan.behind_cuts) if loads is not None and plan.stopped else None)
    checker = Checker(runner, settings, np.random.default_rng([options.seed, 1]), session.progress)
    try:
        checker.run(groups, random_ops(model.op_types))
    except ModelError as exc:
        if use64:
            raise _Float64Failed(f"the float64 copy does not run: {exc}", str(exc)) from exc
        failed = _model_error(exc, groups, plan, dtype, synthesised_structure(plan, options))
        return replace(failed, results=results + failed.results, notes=notes + failed.notes)
    return NumericOutcome(results + checker.results, unseen_findings + checker.findings, notes + checker.notes)


def _not_given(plan: Plan, options: NumericOptions) -> list[str]:
    """With --inputs, the signature inputs the file does not hold: synthesised, and said so."""
    if not options.inputs_file:
        return []
    given = given_inputs(options.inputs_file)
    missing = sorted(n for n in plan.specs if n not in given)
    if not missing:
        return []
    return [f"--inputs {os.path.basename(options.inputs_file)} holds no {', '.join(missing)}: "
            f"{'it was' if len(missing) == 1 else 'they were'} synthesised as without --inputs."]


def synthesised_structure(plan: Plan, options: NumericOptions) -> list[str]:
    """The integer inputs that were synthesised (not read from --inputs): indices, lengths, row splits, segment
    ids whose valid values the graph may not tell."""
    given = given_inputs(options.inputs_file)
    return sorted(n for n, spec in plan.specs.items() if spec.dtype.is_integer and n not in given)


# TensorFlow's errors about the values a kernel was given (an index out of range, row splits that do not
# partition the values, an assertion on the inputs): with synthesised integer inputs, the inputs' fault.
VALUE_ERRORS = ("InvalidArgumentError", "OutOfRangeError")
# the op whose registered gradient raised, read from the failing node's name in TensorFlow's message
_GRADIENT_OF = re.compile(r"gradients(?:_\d+)?/(?:[^ ()]*/)?([A-Za-z0-9]+)_grad/")


def _gradient_raises(error: str) -> str:
    """GA204's message for a gradient pass that raised: where a kernel of an op's registered gradient refused the
    values it was given (a determinant's gradient inverts a singular matrix), that op's gradient at these values,
    not a gradient TensorFlow lacks."""
    op = _GRADIENT_OF.search(error)
    if op and error.startswith(VALUE_ERRORS):
        return (f"TensorFlow's gradient of {op.group(1)} raises at the values the model gives it at this point, so no "
                f"source gets a gradient here: {error}. The forward runs there; the gradient TensorFlow registered "
                "for that op is not defined at such values, although the derivative may be")
    return f"Differentiating the loaded model raises in TensorFlow, so no source gets a gradient: {error}"


def _gradient_raises_fix(error: str) -> str | None:
    """The fix for `_gradient_raises`' value case (None: the rule's own)."""
    if _GRADIENT_OF.search(error) and error.startswith(VALUE_ERRORS):
        return ("Keep the op's inputs away from the values where its gradient raises (check with --inputs at "
                "others), or give it a gradient defined there (tf.custom_gradient: for a determinant, the "
                "adjugate instead of det(A) inv(A)^T).")
    return None


def variable_groups(plan: Plan, names: list[str]) -> tuple[list[Group], int]:
    """The checks of the variables `names` (Runner.vars in that order): one per group of outputs they reach,
    the variables together ("*") unless one alone; and how many reach no float output."""
    by_outputs: dict[tuple[str, ...], list[int]] = {}
    unconnected = 0
    for i, name in enumerate(names):
        outs_groups = plan.output_groups(name)
        for outs in outs_groups:
            by_outputs.setdefault(outs, []).append(i)
        if not outs_groups:
            unconnected += 1
    return [Group(names[idx[0]] if len(idx) == 1 else ALL_VARIABLES, outs, variables=idx)
            for outs, idx in by_outputs.items()], unconnected


def _model_error(exc: ModelError, groups: list[Group], plan: Plan, dtype: str,
                 synthesised: list[str] | None = None) -> NumericOutcome:
    """The outcome of checks that could not run (`groups`, in `dtype`): an error row for each, a note, and the
    finding when the model is at fault; `synthesised`, the integer inputs made up here."""
    finding: Finding | None
    cause: UndecidedCause | None = None
    if exc.stage != "load" and synthesised and str(exc).startswith(VALUE_ERRORS):
        # the kernel refused the values it was given, and some of them were made up here: the inputs are outside
        # what the model accepts, which says nothing against the model
        reason = (f"the synthesised inputs are outside what the model accepts ({', '.join(synthesised)} synthesised; "
                  f"TensorFlow: {exc}); give real examples with --inputs")
        finding, cause = None, "synthesised_inputs"
    elif exc.stage == "load":
        reason = f"the model cannot be loaded: {exc}"
        finding = rules.UnrunnableModel.finding(
            f"tf.saved_model.load fails, so the gradients could not be checked: {exc}",
            outputs=tuple(plan.float_outputs))
    elif exc.stage == "gradient":
        reason = f"TensorFlow cannot differentiate the loaded model: {exc}"
        finding = rules.MissingGradient.finding(
            _gradient_raises(str(exc)), sources=tuple(g.source for g in groups),
            outputs=tuple(sorted({o for g in groups for o in g.outputs})), fix=_gradient_raises_fix(str(exc)))
    else:
        reason = f"the loaded model cannot run: {exc}"
        finding = rules.UnrunnableModel.finding(
            f"The loaded model cannot run, so its gradients could not be checked: {exc}",
            outputs=tuple(plan.float_outputs))
    notes = [f"Numeric checks not run: {reason}"]
    errors = [NumericResult(source=g.source, outputs=CheckedOutputs.of(g.outputs, plan.float_outputs), status="error",
                            rel_error=None, step=None, dtype=dtype, evaluations=0, reason=reason, cause=cause)
              for g in groups]
    return NumericOutcome(errors, [finding] if finding else [], notes, stopped=str(exc),
                          raised=str(exc) if exc.stage == "gradient" else None)
