"""A pytest helper: `assert_differentiable(obj)` fails a user's test with the cut ops and failed checks.

It agrees with the CLI: the same policy options (`select`, `ignore`, `ignore_ops`, `fail_on`, `config`), a
mismatch that a named cut explains is expected, and with `wrt` only what concerns those sources counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .model import ALL_VARIABLES, Report, Severity


def _concerns(names: tuple[str, ...], wrt: set[str] | None, variables: set[str]) -> bool:
    """Whether something about `names` (sources, ALL_VARIABLES the variables together; empty: the whole model)
    counts for `wrt`."""
    if wrt is None or not names:
        return True
    return any(n in wrt or (n == ALL_VARIABLES and wrt & variables) for n in names)


def _flow_problems(report: Report, wrt: list[str]) -> list[str]:
    lines = []
    names = {s.name for s in report.sources if s.differentiable}
    for name in wrt:
        if name not in names:
            lines.append(f"{name}: not a differentiable source of this model "
                         f"(sources: {', '.join(sorted(names)) or 'none'})")
            continue
        entries = [e for e in report.flow if e.source == name]
        for e in entries:
            if e.status == "blocked":
                cuts = ", ".join(f"{c.op.short} ({c.rule})" for c in e.blocked_by)
                lines.append(f"{name} -> {e.output}: blocked by {cuts or 'an op not named'}")
            elif e.status == "unknown":
                ops = ", ".join(r.short for r in e.unknown_by)
                lines.append(f"{name} -> {e.output}: unknown, its path runs through {ops} (see --load-ops)")
        if entries and all(e.status == "disconnected" for e in entries):
            lines.append(f"{name}: reaches no output")
    return lines


def _problems(report: Report, wrt: Iterable[str] | None, fail_on: str) -> list[str]:
    lines = []
    wanted = set(wrt) if wrt is not None else None
    variables = {s.name for s in report.sources if s.kind == "variable"}
    threshold = None if fail_on == "never" else Severity(fail_on).rank
    for f in report.findings:
        if (not f.suppressed and threshold is not None and f.severity.rank >= threshold
                and _concerns(f.sources, wanted, variables)):
            lines.append(f"{f.severity.value} {f.code} {f.rule}: {f.message} (fix: {f.fix})")
    if wrt is not None:
        lines += _flow_problems(report, list(wrt))
    for n in report.numeric:
        about = () if n.every_source else (n.source,)  # a row for every source concerns the whole model
        if n.status in ("fail", "error") and not n.expected_by and _concerns(about, wanted, variables):
            lines.append(f"numeric check {n.source} -> {n.outputs.label}: {n.status}"
                         + (f", relative error {n.rel_error:.2e}" if n.rel_error is not None else "")
                         + (f" ({n.reason})" if n.reason else ""))
    if fail_on != "never":
        lines += [f"not checked: {line}" for line in report.incomplete]
    return list(dict.fromkeys(lines))


def assert_differentiable(obj: Any, *, wrt: Iterable[str] | None = None, fail_on: str | None = None,
                          **options: Any) -> Report:
    """Audit `obj` (anything `gradaudit.audit` accepts, with its options and policy) and raise AssertionError
    when a finding is at or above `fail_on` (default: the configuration's, else `error`), when a source named
    in `wrt` has a blocked or unknown path or reaches no output, when a numeric check fails without a named
    cut explaining it, or when a requested check did not run. With `wrt`, findings and checks about other
    sources are not held against the model. Returns the Report when all is well."""
    from .api import audit

    report = audit(obj, fail_on=fail_on, **options)
    problems = _problems(report, list(wrt) if wrt is not None else None, report.fail_on)
    if problems:
        head = f"{report.target.path} is not differentiable as required ({len(problems)} problem(s)):"
        raise AssertionError("\n".join([head, *("  - " + p for p in problems)]))
    return report
