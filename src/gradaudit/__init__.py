"""gradaudit: can this TensorFlow model really be differentiated, and where and why not."""

from . import testing
from .api import AuditOptions, audit
from .errors import GradauditError, InternalError
from .model import Finding, FlowEntry, NumericResult, Report, Severity, Source
from .version import __version__


def to_json(report: Report, fail_on: str | None = None) -> str:
    """The same JSON document the CLI writes with --format json (schema_version 1)."""
    from .report.json_report import render

    return render(report, fail_on or report.fail_on)


__all__ = ["AuditOptions", "Finding", "FlowEntry", "GradauditError", "InternalError", "NumericResult", "Report",
           "Severity", "Source", "__version__", "audit", "testing", "to_json"]
