"""`--format github`: GitHub Actions workflow commands (`::error file=...,title=...::message`), which the
runner turns into annotations on the model's graph file, and one plain summary line per model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model import Finding, Report, Severity
from .common import display_path, graph_file, model_label, visible, with_fix

if TYPE_CHECKING:
    from ..model import AuditFailure

COMMAND = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(command: str, message: str, file: str | None = None, title: str | None = None) -> str:
    props = ",".join(f"{k}={_prop(v)}" for k, v in (("file", file), ("title", title)) if v)
    return f"::{command}{' ' + props if props else ''}::{_data(message)}"


def _finding(report: Report, f: Finding) -> str:
    return annotation(COMMAND[f.severity], with_fix(f), display_path(graph_file(report)),
                      f"gradaudit {f.code} {f.rule} [{report.target.signature}]")


def _lines(report: Report, fail_on: str) -> list[str]:
    c = report.summary()
    lines = [_finding(report, f) for f in report.findings if not f.suppressed]
    lines += [annotation("warning", f"not checked: {line}", display_path(graph_file(report)),
                         f"gradaudit: audit incomplete [{report.target.signature}]") for line in report.incomplete]
    lines.append(f"gradaudit: {model_label(report)}: {report.verdict(fail_on)} ({c['error']} error(s), "
                 f"{c['warning']} warning(s), {c['info']} info, "
                 f"{sum(1 for f in report.findings if f.suppressed)} suppressed; fail-on: {fail_on})")
    return lines


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    reports, failures = visible(list(reports)), visible(list(failures))  # no raw newline starts a command line
    lines = [line for r in reports for line in _lines(r, fail_on)]
    lines += [annotation("error", f.error, title="gradaudit: model not audited") for f in failures]
    return "\n".join(lines) + "\n"


def render(report: Report, fail_on: str = "error") -> str:
    return render_many([report], fail_on)
