"""JSON reports read back (diff, merge): every field round-trips, and what is not a report is exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gradaudit.errors import GradauditError
from gradaudit.model import FlowEntry, OpRef, StabilityResult
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
        notes=["a note"], incomplete=["numeric checks did not run"], seed=7)
    _round_trip(report)


@pytest.mark.parametrize("content", ["[1, 2]", '{"schema_version": 1}', "{oops", '{"schema_version": 1, '
                                     '"reports": [{"target": {}}]}'])
def test_not_a_report(tmp_path, content):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(GradauditError, match="r.json"):
        load(str(path))
