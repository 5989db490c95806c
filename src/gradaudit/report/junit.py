"""JUnit XML for test dashboards: per model and signature, one test case per (source, output) flow and
per numeric check; a case fails when a finding at or above the threshold concerns it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import Finding, Report
from .common import concerns, display_path, fails, graph_file, model_label, visible, where

if TYPE_CHECKING:
    from ..model import AuditFailure
    from .diff import Diff

_OUTCOMES = ("failure", "error", "skipped")


def _describe(f: Finding) -> str:
    state = f" [suppressed: {f.suppressed}]" if f.suppressed else ""
    return f"{f.code} {f.rule} ({f.severity.value}){state}: {f.message}\nfix: {f.fix}"


def _failure(case: ET.Element, failing: list[Finding]) -> None:
    first = failing[0]
    message = f"{first.code} {first.rule}: {first.message}"
    if len(failing) > 1:
        message += f" (and {len(failing) - 1} more)"
    el = ET.SubElement(case, "failure", message=message, type=first.code)
    el.text = "\n\n".join(_describe(f) for f in failing)


@dataclass(frozen=True)
class _Suite:
    """One suite's element, with what each of its cases shares: the model's label, its graph file, the threshold."""

    element: ET.Element
    label: str
    file: str
    fail_on: str

    def case(self, group: str, name: str, findings: list[Finding], details: list[str], error: str | None = None,
             skipped: str | None = None) -> None:
        """A test case of `group` (a suffix of the label, or "" for the label alone): failing when a finding at or
        above the threshold concerns it, else an error or skipped when told, else a pass."""
        classname = f"{self.label}.{group}" if group else self.label
        case = ET.SubElement(self.element, "testcase", classname=classname, name=name, file=self.file)
        failing = [f for f in findings if fails(f, self.fail_on)]
        if failing:
            _failure(case, failing)
        elif error:
            ET.SubElement(case, "error", message=error, type="error").text = error
        elif skipped:
            ET.SubElement(case, "skipped", message=skipped)
        other = details + [_describe(f) for f in findings if f not in failing]
        if other:
            ET.SubElement(case, "system-out").text = "\n".join(other)


def _numeric_cases(suite: _Suite, report: Report) -> set[int]:
    """A case per numeric check, holding the numeric findings (GA2xx) of its pair; returns their ids."""
    placed: set[int] = set()
    for n in report.numeric:
        # a check of one output holds its pair's findings; a check of several together leaves them to the flow cases
        one = n.outputs.names[0] if len(n.outputs.names) == 1 else None
        mine = [f for f in report.findings if f.code.startswith("GA2") and one is not None
                and concerns(f, n.source, one)]
        placed |= {id(f) for f in mine}
        outcome = n.status + (f": {n.reason}" if n.reason else "")
        err = outcome if n.status == "error" else None
        skip = outcome if n.status in ("skipped", "inconclusive") else None
        measured = (f"{outcome}; relative error {n.rel_error}, step {n.step}, dtype {n.dtype}, "
                    f"{n.evaluations} evaluations")
        suite.case("numeric", f"{n.source} -> {n.outputs.label}", mine, [measured], err, skip)
    return placed


def _flow_cases(suite: _Suite, report: Report, placed: set[int]) -> set[int]:
    """A case per flow pair, holding the findings about the pair not placed yet; returns every finding placed."""
    for e in report.flow:
        mine = [f for f in report.findings if id(f) not in placed and concerns(f, e.source, e.output)]
        cuts = ", ".join(f"{c.op.label} ({c.rule})" for c in e.blocked_by)
        skip = "no path from this source to this output" if e.status == "disconnected" else None
        suite.case("flow", f"{e.source} -> {e.output}", mine,
                   [f"flow: blocked by {cuts}" if cuts else f"flow: {e.status}"], skipped=skip)
    return placed | {id(f) for e in report.flow for f in report.findings if concerns(f, e.source, e.output)}


def _suite(report: Report, fail_on: str) -> ET.Element:
    suite = _Suite(ET.Element("testsuite", name=model_label(report)), model_label(report),
                   display_path(graph_file(report)), fail_on)
    # Numeric findings (GA2xx) belong to the numeric check of their pair, not to its flow case.
    placed = _flow_cases(suite, report, _numeric_cases(suite, report))
    for f in report.findings:  # findings about no flow pair, e.g. a variable that reaches no output
        if id(f) not in placed:
            subject = where(f) or ", ".join(f.sources + f.outputs) or report.target.signature or "model"
            suite.case("findings", f"{f.code} {f.rule}: {subject}", [f], [])
    for line in report.incomplete:  # a requested check that did not run is an error case, never a pass
        suite.case("incomplete", line.split(":")[0], [], [], error=f"not checked: {line}")
    if report.notes:
        ET.SubElement(suite.element, "system-out").text = "\n".join(f"note: {n.text}" for n in report.notes)
    return suite.element


def _count(element: ET.Element, cases: list[ET.Element]) -> None:
    element.set("tests", str(len(cases)))
    for outcome in _OUTCOMES:
        key = outcome if outcome == "skipped" else outcome + "s"
        element.set(key, str(sum(c.find(outcome) is not None for c in cases)))


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    reports, failures = visible(list(reports)), visible(list(failures))  # XML 1.0 has no control characters
    root = ET.Element("testsuites", name="gradaudit")
    for report in reports:
        root.append(_suite(report, fail_on))
    for failure in failures:
        label = display_path(failure.path)
        _Suite(ET.SubElement(root, "testsuite", name=label), label, label, fail_on).case(
            "", "audit", [], [], error=failure.error)
    for suite in root:
        _count(suite, suite.findall("testcase"))
    _count(root, root.findall("testsuite/testcase"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def with_lost_pairs(xml: str, changes: Diff) -> str:
    """A rendered JUnit document with one more suite: a failing case per pair that lost its gradient since
    the baseline (`--baseline`), the totals counted again."""
    root = ET.fromstring(xml.split("\n", 1)[1])  # after the XML declaration
    suite = ET.SubElement(root, "testsuite", name="gradaudit baseline")
    for m, p in visible(changes.lost()):
        case = ET.SubElement(suite, "testcase", classname=m.label, name=f"{p.source} -> {p.output}")
        ET.SubElement(case, "failure", message=f"connected in the baseline, now {p.new}").text = (
            f"{p.source} -> {p.output}: connected in {visible(changes.old)}, {p.new} now")
    _count(suite, suite.findall("testcase"))
    _count(root, root.findall("testsuite/testcase"))
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render(report: Report, fail_on: str = "error") -> str:
    return render_many([report], fail_on)
