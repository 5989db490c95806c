"""Numeric gradient checks: run the SavedModel and compare TensorFlow's gradients with finite differences.

Entry point `run_numeric`, called by `gradaudit.audit` after the static pass; the model is loaded here
and nowhere else. Results name a source per check: a float input, a single variable, or `ALL_VARIABLES`
("*") for the trainable variables checked together (a failing group is followed by one result per
variable found at fault); the outputs (model.CheckedOutputs) are named, or every float output together.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ..model import ALL_VARIABLES, EVERY_OUTPUT, EVERY_SOURCE, NumericResult
from .task import LocalVerdict, NumericOptions, NumericOutcome, NumericTask

__all__ = ["ALL_VARIABLES", "LocalVerdict", "NumericOptions", "NumericOutcome", "NumericTask", "run_numeric",
           "run_numeric_function"]



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
