"""JSON reports read back (diff, merge): every field round-trips, and what is not a report is exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gradaudit.errors import GradauditError
from gradaudit.model import EVERY_OUTPUT, CheckedOutputs, FlowEntry, Note, NumericResult, OpRef, StabilityResult
from gradaudit.report import json_report
from gradaudit.report.json_load import load, report_from_dict

from .report_helpers import suppressed


def _round_trip(report) -> None:
    doc = json.loads(json_report.render(report))
    assert json.loads(json_report.render(report_from_dict(doc))) == doc


def test_sample_reports_round_trip(argmax_report, stop_report, numeric_report):
    for report in (argmax_report, stop_report, numeric_report, suppressed(stop_report)):
        _round_trip(report)
    assert argmax_report.paths  # the blocked chains are part of the contract


def test_every_field_round_trips(argmax_report):
    ref = OpRef("Frob", "frob", "f")
    report = dataclasses.replace(
        argmax_report, flow=[*argmax_report.flow, FlowEntry("x", "other", "unknown", unknown_by=(ref,))],
        stability=[StabilityResult("x", "probs", 1e-30, "nonfinite_gradient", "Log", "Log", "NaN")],
        numeric=[NumericResult("x", CheckedOutputs(("probs",)), "pass", 1e-9, 1e-3, "float64", 4),
                 NumericResult("x", CheckedOutputs(("probs", "other")), "fail", 0.5, 1e-3, "float64", 4),
                 NumericResult("*", EVERY_OUTPUT, "skipped", None, None, None, 0, reason="no float output",
                               every_source=True)],
        notes=[Note("static", "a note"), Note("numeric", "another")], incomplete=["numeric checks did not run"], seed=7)
    _round_trip(report)
    doc = json.loads(json_report.render(report))
    assert [n["output"] for n in doc["numeric"]] == ["probs", "probs,other", "*"]
    again = report_from_dict(doc)
    assert again.numeric == report.numeric and again.notes == report.notes


@pytest.mark.parametrize("content", ["[1, 2]", '{"schema_version": 1}', "{oops", '{"schema_version": 1, '
                                     '"reports": [{"target": {}}]}'])
def test_not_a_report(tmp_path, content):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(GradauditError, match="r.json"):
        load(str(path))
