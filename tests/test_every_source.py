"""A numeric row's "*" means one of two things: the trainable variables checked together (ALL_VARIABLES) or every
source at once, for checks that did not run (EVERY_SOURCE, `every_source`). The JSON writes "*" for both, and
`every_source` tells them apart; the readers (undecided sources, the pytest helper, the tables) never guess."""

from __future__ import annotations

import json

import pytest

from gradaudit.model import (
    ALL_VARIABLES,
    EVERY_OUTPUT,
    EVERY_SOURCE,
    CheckedOutputs,
    FlowEntry,
    NumericResult,
    Report,
    Source,
    Target,
)
from gradaudit.reconcile import undecided_sources
from gradaudit.report import json_report
from gradaudit.report.json_load import report_from_dict
from gradaudit.report.numeric_rows import numeric_rows
from gradaudit.testing import _problems


def _row(source: str, status: str, every_source: bool = False, scale: float | None = None) -> NumericResult:
    return NumericResult(source, EVERY_OUTPUT, status, None, None, None, 0, reason="why", scale=scale,
                         every_source=every_source)


def _report(*numeric: NumericResult) -> Report:
    sources = [Source("x", "input", "float32", (2,), True), Source("w", "variable", "float32", (2,), True),
               Source("v", "variable", "float32", (2,), True)]
    flow = [FlowEntry(s.name, "y", "connected") for s in sources]
    return Report(Target("m", "saved_model", "serving_default"), sources=sources, flow=flow, numeric=list(numeric))


def test_a_row_for_every_source_is_written_as_a_star_and_read_back_as_itself():
    every, variables = _row(EVERY_SOURCE, "error", every_source=True), _row(ALL_VARIABLES, "error")
    doc = json.loads(json_report.render(_report(every, variables)))
    assert [(n["source"], n.get("every_source")) for n in doc["numeric"]] == [("*", True), ("*", None)]
    assert report_from_dict(doc).numeric == [every, variables]


def test_only_every_source_has_every_source():
    with pytest.raises(ValueError, match="every source"):
        _row("x", "skipped", every_source=True)


def test_a_stopped_check_of_every_source_leaves_every_source_undecided_the_variables_check_only_the_variables():
    assert undecided_sources(_report(_row(EVERY_SOURCE, "error", every_source=True), _row("x", "pass"))) == ["v", "w"]
    assert undecided_sources(_report(_row(ALL_VARIABLES, "inconclusive"), _row("x", "pass"))) == ["v", "w"]
    assert undecided_sources(_report(_row(EVERY_SOURCE, "error", every_source=True), _row("w", "pass"),
                                     _row("v", "pass"))) == ["x"]
    assert undecided_sources(_report(_row(ALL_VARIABLES, "error"), _row("w", "pass"), _row("v", "pass"))) == []


def test_the_pytest_helper_holds_a_stopped_check_of_every_source_against_any_source():
    every = _report(_row(EVERY_SOURCE, "error", every_source=True))
    variables = _report(_row(ALL_VARIABLES, "error"))
    assert _problems(every, ["x"], "error") and _problems(every, ["w"], "error")
    assert not _problems(variables, ["x"], "error") and _problems(variables, ["w"], "error")


def test_the_tables_never_fold_a_row_for_every_source_with_the_variables_check():
    rows = numeric_rows([_row(ALL_VARIABLES, "inconclusive", scale=1.0), _row(ALL_VARIABLES, "inconclusive", scale=2.0),
                         _row(EVERY_SOURCE, "inconclusive", every_source=True, scale=3.0)])
    assert [r.count for r in rows] == [2, 1] and rows[1].result.every_source
    assert rows[0].outputs == (EVERY_OUTPUT.label,) == ("*",) and CheckedOutputs(("y",)).label == "y"
