"""gradaudit: can this TensorFlow model really be differentiated, and where and why not."""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("gradaudit")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+src"

from .api import AuditOptions, audit  # noqa: E402
from .errors import GradauditError  # noqa: E402
from . import testing  # noqa: E402
from .model import Finding, FlowEntry, NumericResult, Report, Severity, Source  # noqa: E402

__all__ = ["AuditOptions", "Finding", "FlowEntry", "GradauditError", "NumericResult", "Report",
           "Severity", "Source", "__version__", "audit", "testing"]
