"""Errors that end a run with exit code 2 and one line on stderr."""

from __future__ import annotations

import dataclasses
import os
from typing import Any


class GradauditError(Exception):
    """Usage, load or input error: the CLI prints the message on one line and exits 2."""


class InternalError(Exception):
    """gradaudit itself failed while running a stage: said to be gradaudit's fault (never the model's, never a
    pass), exit 2, and the report as far as it got is still written."""

    def __init__(self, stage: str, exc: BaseException, report: Any = None):
        self.stage = stage
        self.cause = exc
        first = str(exc).splitlines()[0] if str(exc) else ""
        self.detail = f"{exc.__class__.__name__}: {first}" if first else exc.__class__.__name__
        super().__init__(f"internal error in gradaudit while {stage}: {self.detail}; please report it")
        self.report = None  # the partial Report, when one exists
        if report is not None:
            self.with_report(report)

    def __reduce__(self):  # crosses process boundaries (--jobs workers, the --timeout child) intact
        return (_rebuild_internal, (self.stage, self.detail, self.args, self.report))

    @classmethod
    def from_parts(cls, stage: str, detail: str, report: Any = None) -> InternalError:
        """The same error rebuilt from its stage and detail (another process's, sent as data)."""
        err = cls(stage, RuntimeError(detail))
        err.detail, err.report = detail, report
        err.args = (f"internal error in gradaudit while {stage}: {detail}; please report it",)
        return err

    def with_report(self, report: Any) -> InternalError:
        """Keep the report as far as it got, marked incomplete: what this stage would have found is missing."""
        if self.report is None:
            line = f"{self.stage} did not finish: internal error in gradaudit ({self.detail})"
            incomplete = report.incomplete if line in report.incomplete else [*report.incomplete, line]
            self.report = dataclasses.replace(report, incomplete=incomplete)
        return self


_FRAMEWORK_DIRS = (f"{os.sep}tensorflow{os.sep}", f"{os.sep}keras{os.sep}", f"{os.sep}tf_keras{os.sep}",
                   f"{os.sep}tensorflow_probability{os.sep}")


def raised_by_tensorflow(exc: BaseException) -> bool:
    """Whether TensorFlow (or Keras) raised `exc` while loading, running or differentiating the model: a
    runtime error of TensorFlow's, or any exception whose innermost frame is in TensorFlow's code (a gradient
    function that refuses the model's shapes, an op that is not registered). Such a failure is the model's
    (its checks could not be made), not gradaudit's."""
    try:
        import tensorflow as tf

        if isinstance(exc, tf.errors.OpError):
            return True
    except ImportError:  # pragma: no cover - TensorFlow is a dependency
        pass
    tb = exc.__traceback__
    if tb is None:
        return False
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename)
        tb = tb.tb_next
    if isinstance(exc, RecursionError):  # the limit strikes wherever the stack is deepest: in any frame below
        return any(d in f for f in frames for d in _FRAMEWORK_DIRS)  # TensorFlow's recursion on nested calls
    return any(d in frames[-1] for d in _FRAMEWORK_DIRS)


def _rebuild_internal(stage: str, detail: str, args: tuple, report: Any) -> InternalError:
    err = InternalError.from_parts(stage, detail, report)
    err.args = args
    return err
