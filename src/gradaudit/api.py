"""The Python API: `audit(target, **options) -> Report`. The CLI is a thin layer over this."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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


def _rules_check(analysis) -> list:
    from .rules import STATIC_CHECKS

    return [f for check in STATIC_CHECKS for f in check(analysis)]


def audit_saved_model(path: str, options: AuditOptions, signature: str | None = None) -> Report:
    from .flow import analyse
    from .graph.gradients import GradientOracle
    from .targets.saved_model import SavedModelFile

    key = signature or options.signature
    try:
        model = SavedModelFile(path, options.tags)
        sig = model.signature(key)
        analysis = analyse(model, sig, GradientOracle())
        findings = _rules_check(analysis)
    except MALFORMED as exc:  # a protobuf that parses but does not describe a consistent graph
        detail = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise GradauditError(f"{path}: malformed model, the graph of {key!r} cannot be analysed "
                             f"({exc.__class__.__name__}: {detail})") from None
    report = Report(
        target=Target(os.path.abspath(path), "saved_model", key, tuple(options.tags)),
        sources=analysis.sources, outputs=analysis.outputs, flow=analysis.flow, findings=findings)
    if not options.static_only:
        _run_numeric(report, path, options, key)
    report.findings.sort(key=lambda f: (-f.severity.rank, f.code, f.op.function if f.op else "",
                                        f.op.op_name if f.op else "", f.message))
    return report


def _run_numeric(report: Report, path: str, options: AuditOptions, key: str) -> None:
    try:
        from .numeric import NumericOptions, run_numeric
    except ImportError:  # numeric checks not available in this build
        report.notes.append("numeric checks are not available")
        return
    report.seed = options.seed
    outcome = run_numeric(path, options.tags, key, report.sources, report.outputs, report.flow,
                          NumericOptions(seed=options.seed, batch_size=options.batch_size, dim=options.dim,
                                         shapes=options.shapes, inputs_file=options.inputs_file))
    report.numeric.extend(outcome.results)
    report.findings.extend(outcome.findings)
    report.notes.extend(outcome.notes)


def signature_keys(path: str, tags: tuple[str, ...] = ("serve",)) -> list[str]:
    from .targets.saved_model import SavedModelFile

    return SavedModelFile(path, tags).signature_keys()


def audit(target: str, **options) -> Report:
    """Audit `target` (a SavedModel folder) and return the Report."""
    opts = AuditOptions(**options)
    if isinstance(target, (str, os.PathLike)):
        return audit_saved_model(os.fspath(target), opts)
    raise GradauditError(f"cannot audit a {type(target).__name__}")
