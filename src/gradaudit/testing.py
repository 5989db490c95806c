"""A pytest helper: `assert_differentiable(obj)` fails a user's test with the cut ops and failed checks."""

from __future__ import annotations

from typing import Iterable

from .model import Report, Severity


def _problems(report: Report, wrt: Iterable[str] | None, fail_on: str) -> list[str]:
    lines = []
    threshold = None if fail_on == "never" else Severity(fail_on).rank
    for f in report.findings:
        if not f.suppressed and threshold is not None and f.severity.rank >= threshold:
            lines.append(f"{f.severity.value} {f.code} {f.rule}: {f.message} (fix: {f.fix})")
    if wrt is not None:
        names = {s.name for s in report.sources if s.differentiable}
        for name in wrt:
            if name not in names:
                lines.append(f"{name}: not a differentiable source of this model "
                             f"(sources: {', '.join(sorted(names)) or 'none'})")
                continue
            entries = [e for e in report.flow if e.source == name]
            for e in entries:
                if e.status == "blocked":
                    cuts = ", ".join(f"{c.op.op_type} '{c.op.op_name}' ({c.rule})" for c in e.blocked_by)
                    lines.append(f"{name} -> {e.output}: blocked by {cuts or 'an unknown op'}")
            if entries and all(e.status == "disconnected" for e in entries):
                lines.append(f"{name}: reaches no output")
    for n in report.numeric:
        if n.status in ("fail", "error"):
            lines.append(f"numeric check {n.source} -> {n.output}: {n.status}"
                         + (f", relative error {n.rel_error:.2e}" if n.rel_error is not None else "")
                         + (f" ({n.reason})" if n.reason else ""))
    return list(dict.fromkeys(lines))


def assert_differentiable(obj, *, wrt: Iterable[str] | None = None, fail_on: str = "error", **options) -> Report:
    """Audit `obj` (anything `gradaudit.audit` accepts) and raise AssertionError when a finding is at or
    above `fail_on`, when a source named in `wrt` has a blocked path or reaches no output, or when a
    numeric check fails. Returns the Report when all is well."""
    from .api import audit

    report = audit(obj, **options)
    problems = _problems(report, list(wrt) if wrt is not None else None, fail_on)
    if problems:
        head = f"{report.target.path} is not differentiable as required ({len(problems)} problem(s)):"
        raise AssertionError("\n".join([head, *("  - " + p for p in problems)]))
    return report
