"""Reporters: each turns finished Reports into text. The name -> reporter maps feed the CLI's choices.

A reporter is `render(report, fail_on) -> str`; `render_many(reports, fail_on, failures) -> str` renders a
run of several reports (models or signatures) and the models that could not be audited as one document."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..model import Report
from . import github, html, json_report, junit, markdown, sarif, terminal

if TYPE_CHECKING:
    from ..model import AuditFailure

Reporter = Callable[[Report, str], str]
ManyReporter = Callable[[Sequence[Report], str, Sequence["AuditFailure"]], str]

REPORTERS: dict[str, Reporter] = {
    "text": terminal.render_plain,
    "json": json_report.render,
    "sarif": sarif.render,
    "junit": junit.render,
    "markdown": markdown.render,
    "github": github.render,
    "html": html.render,
}

MANY_REPORTERS: dict[str, ManyReporter] = {
    "text": terminal.render_plain_many,
    "json": json_report.render_many,
    "sarif": sarif.render_many,
    "junit": junit.render_many,
    "markdown": markdown.render_many,
    "github": github.render_many,
    "html": html.render_many,
}

FORMATS = tuple(REPORTERS)


def render(fmt: str, reports: Sequence[Report], fail_on: str = "error",
           failures: Sequence[AuditFailure] = ()) -> str:
    """One report and no failure keep the single-report shape (the JSON contract for one model)."""
    if len(reports) == 1 and not failures:
        return REPORTERS[fmt](reports[0], fail_on)
    return MANY_REPORTERS[fmt](reports, fail_on, failures)
