"""Numeric gradient checks: run the SavedModel and compare TensorFlow's gradients with finite differences.

Entry point `run_numeric`, called by `gradaudit.audit` after the static pass; the model is loaded here
and nowhere else. Results name a source per check: a float input, a single variable, or `ALL_VARIABLES`
("*") for the trainable variables checked together (a failing group is followed by one result per
variable found at fault); the outputs (model.CheckedOutputs) are named, or every float output together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..model import ALL_VARIABLES, EVERY_OUTPUT, EVERY_SOURCE, Finding, FlowEntry, NumericResult, Output, Source

__all__ = ["ALL_VARIABLES", "LocalVerdict", "NumericOptions", "NumericOutcome", "NumericTask", "run_numeric",
           "run_numeric_function"]



@dataclass(frozen=True)
class NumericOptions:
    seed: int = 0
    batch_size: int = 2
    dim: int = 4  # for unknown non-batch dimensions
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # --shape NAME=D0,D1
    inputs_file: str | None = None  # --inputs FILE.npz, arrays by signature input key
    upcast: bool = True  # try float64 evaluation


@dataclass
class NumericOutcome:
    results: list[NumericResult]
    findings: list[Finding]
    notes: list[str]  # what could not be checked and why, shown in the report
    stopped: str | None = None  # TensorFlow's reason when the model could not be loaded, run or differentiated
    raised: str | None = None  # that reason when it was differentiating the loaded model that raised


@dataclass(frozen=True)
class LocalVerdict:
    """What the local checks (stability/local.py: each op on its own at the values the model's forward gave it)
    decided for the whole model: "pass" (every differentiable op passed: the model's gradient is TensorFlow's chain
    rule over them) or "fail" (an op's gradient is wrong: the local finding names it); the evidence, the precision
    and the effort behind it. The whole-model checks do not run then."""

    status: Literal["pass", "fail"]
    evidence: str
    dtype: str
    evaluations: int
    rel_error: float | None = None
    # a failure: the sources whose gradient it concerns (the rest are decided pass); None: every source
    sources: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NumericTask:
    """What the numeric checks are asked, from the static pass's result: its sources, outputs and flow (which
    pairs are connected, cut or raise), its StaticAnalysis (`analysis`: what values the inputs are made for,
    token ids, label distributions; None: generic inputs), the options, and `progress`, told each step."""

    sources: list[Source]
    outputs: list[Output]
    flow: list[FlowEntry]
    options: NumericOptions = field(default_factory=NumericOptions)
    analysis: Any = None
    progress: Callable[[str], None] | None = None
    local: LocalVerdict | None = None  # decided by the local checks: no whole-model check runs
    # a traced function checked in its own precision: why its saved copy has no float64 copy ("": not said)
    float64_blocked: str = ""

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)


def run_numeric(model_dir: str, tags: tuple[str, ...], signature: str, task: NumericTask,
                loads=None) -> NumericOutcome:
    """Check, for every differentiable source of a SavedModel signature, that TensorFlow's gradient is
    the derivative of the forward pass.

    Never raises for a model that cannot load, run or be differentiated: those become results with
    status `error` (and a finding when the model itself is at fault).

    `loads` (a runner.ModelLoads) shares the parsed and loaded model with the stability probes; without
    it the model is read and loaded here and closed at the end.
    """
    from .domains import infer
    from .runner import ModelLoads
    from .session import run_session

    own = loads is None
    shared = ModelLoads(model_dir, tags, signature) if loads is None else loads
    try:
        return _guarded(lambda: run_session(shared, task, infer(task.analysis)))
    finally:
        if own:
            shared.close()


def run_numeric_function(fn, task: NumericTask, variable_names: Mapping[int, object] | None = None) -> NumericOutcome:
    """The same checks on a traced ConcreteFunction (Python and Keras targets). Inputs are named by their
    placeholders' op names, outputs by `task.outputs` (in the function's flat output order), variables by
    `variable_names` (id of the variable's handle -> an object with `.name`), else by `var.name`. The
    float64 upcast needs a SavedModel, so these run in the function's own precision."""
    from .domains import infer
    from .session import run_function_session

    return _guarded(lambda: run_function_session(fn, task, dict(variable_names or {}), infer(task.analysis)))


def _guarded(run: Callable[[], NumericOutcome]) -> NumericOutcome:
    """A model that cannot load, run or be differentiated gives results inside `run`; anything else that
    escapes is gradaudit's own failure, said to be one (never an `error` row under a passing verdict)."""
    from ..errors import InternalError, raised_by_tensorflow
    from .runner import describe

    try:
        return run()
    except InternalError:
        raise
    except Exception as exc:
        if not raised_by_tensorflow(exc):
            raise InternalError("running the numeric checks", exc) from exc
        # TensorFlow failed on the model (running or differentiating it): these checks could not be made
        reason = f"numeric checks stopped: {describe(exc)}"
        return NumericOutcome(
            [NumericResult(source=EVERY_SOURCE, outputs=EVERY_OUTPUT, status="error", rel_error=None, step=None,
                           dtype=None, evaluations=0, reason=reason, every_source=True)], [], [])
