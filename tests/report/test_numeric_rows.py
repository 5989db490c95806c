"""Probe-point checks in the reports: passes and failures one line each, the inconclusive ones of a source
folded into one line with their outputs, scales and reason; the JSON report keeps every check."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from gradaudit.model import EVERY_OUTPUT, CheckedOutputs, NumericResult, Report
from gradaudit.report import html, json_report, markdown, terminal
from gradaudit.report.numeric_rows import numeric_rows

WHY = "the outputs or the gradient are NaN or Inf at the checked point"


def _check(status: str, outputs: tuple[str, ...] = ("y",), scale: float | None = None, source: str = "x",
           reason: str | None = None) -> NumericResult:
    return NumericResult(source, CheckedOutputs(outputs), status,
                         1e-9 if status == "pass" else 0.5 if status == "fail" else None, 1e-7, "float32", 12,
                         reason=reason, scale=scale, precision_reason="its own precision")


@pytest.fixture(scope="module")
def probed(mlp_report) -> Report:
    """The synthesised point passed; at the probe points x passed once, and was inconclusive six times over
    two outputs; w was inconclusive once."""
    x = [_check("pass")]
    x += [_check("pass", ("y",), 100.0)]
    x += [_check("inconclusive", (o,), s, reason=f"{WHY} ({o} at {s:g})") for s in (100.0, -600.0) for o in ("y", "z")]
    x += [_check("inconclusive", ("y", "z"), s, reason="bound too loose") for s in (300.0, 1e4)]
    w = [_check("inconclusive", ("y",), 100.0, source="w", reason="flat")]
    return dataclasses.replace(mlp_report, numeric=x + w)


def test_inconclusive_probe_points_fold_into_one_row_per_source(probed):
    rows = numeric_rows(probed.numeric)
    assert [(r.result.source, r.result.status, r.count) for r in rows] == [
        ("x", "pass", 1), ("x", "pass", 1), ("x", "inconclusive", 6), ("w", "inconclusive", 1)]
    folded = rows[2]
    assert folded.outputs == ("y", "z") and folded.scales == (100.0, -600.0, 300.0, 1e4)
    assert folded.evaluations == 6 * 12 and folded.where == "inputs × 100, -600, 300, 10000"
    assert folded.reason.startswith("6 probe-point checks, all inconclusive; the first: ")
    assert "(y at 100)" in folded.reason
    assert "JSON" in folded.reason
    single = rows[3]  # a single inconclusive check keeps its own reason, unfolded
    assert not single.folded and single.reason == "flat" and single.where == "inputs × 100"


def test_rows_name_the_outputs_of_each_check():
    """A check's outputs by name, a check of several together with each name, every float output as "*"; a
    fold names each output of its checks once."""
    rows = numeric_rows([_check("pass", ("y", "z")), _check("pass", ("y",), source="w"),
                         NumericResult("v", EVERY_OUTPUT, "pass", 1e-9, 1e-7, "float32", 12)])
    assert [r.outputs for r in rows] == [("y", "z"), ("y",), ("*",)] and rows[0].output == "y, z"
    folded = numeric_rows([NumericResult("v", EVERY_OUTPUT, "inconclusive", None, None, "float32", 2, scale=1.0),
                           _check("inconclusive", ("y",), 10.0, source="v"),
                           _check("inconclusive", ("z", "y"), 100.0, source="v")])
    assert len(folded) == 1 and folded[0].outputs == ("*", "y", "z")


def test_terminal_shows_the_folded_row(probed):
    text = terminal.render_plain(probed)
    table = text[text.index("Numeric gradient checks"):]
    assert "x (inputs × 100, -600," in table and "6 probe-point checks," in table  # rich wraps long cells
    assert "w (inputs × 100)" in table and "flat" in table
    assert table.count("inconclusive") == 3  # the folded row's status and reason, w's status


def test_markdown_lists_the_checks_under_their_counts(probed):
    text = markdown.render(probed)
    assert "<summary>Numeric gradient checks: 7 inconclusive, 2 pass</summary>" in text
    table = text[text.index("| source → output |"):text.index("</details>")]
    assert len([ln for ln in table.splitlines() if ln.startswith("| `")]) == 4
    assert "6 probe" in table and r"inputs × 100, \-600" not in table  # no needless escaping of '-'


def test_html_has_one_bar_per_row_and_no_bar_for_a_fold(probed):
    page = html.render(probed)
    bars = re.findall(r'<div class="bar" data-status="(\w+)"[^>]*>(.*?)</div>', page)
    assert [s for s, _ in bars] == ["pass", "pass", "inconclusive", "inconclusive"]
    assert bars[2][1] == ""  # no one error to draw for six checks
    assert "at inputs × 100, -600, 300, 10000" in page and "6 probe-point checks, all inconclusive" in page


def test_json_keeps_every_check(probed):
    data = json.loads(json_report.render(probed))
    assert len(data["numeric"]) == len(probed.numeric) == 9
    assert sum(n["status"] == "inconclusive" and n["scale"] is not None for n in data["numeric"]) == 7


@pytest.mark.slow  # a model's numeric checks, seconds
def test_a_real_audit_folds_what_float32_cannot_decide():
    """jax_mlp's compiled module is fixed to float32: at the probe points its float32 checks cannot decide
    (no float64 copy runs); the text report shows one line per source for them, the JSON every check."""
    import os

    from gradaudit.api import AuditOptions, audit_saved_model

    path = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty", "jax_mlp")
    r = audit_saved_model(path, AuditOptions())
    undecided = [n for n in r.numeric if n.scale is not None and n.status == "inconclusive"]
    assert len(undecided) > 1 and {n.dtype for n in undecided} == {"float32"}
    rows = [row for row in numeric_rows(r.numeric) if row.result.scale is not None and row.folded]
    assert len(rows) == len({n.source for n in undecided})
    assert sum(row.count for row in rows) == len(undecided)
    text = terminal.render_plain(r)
    assert all(f"{row.count} probe-point checks," in text for row in rows)
    data = json.loads(json_report.render(r))
    assert len(data["numeric"]) == len(r.numeric)


def test_a_long_precision_reason_is_shortened_in_the_tables_only():
    long = ("the model's own precision: the float64 copy does not run: InvalidArgumentError: Error refining "
            "argument shapes: refinement element types must match in tensor<4x2xf32> -> tensor<4x2xf64>")
    n = NumericResult("x", CheckedOutputs(("y",)), "pass", 1e-6, 1e-3, "float32", 12, precision_reason=long)
    (row,) = numeric_rows([n])
    assert row.details() == "the model's own precision: the float64 copy does not run (the notes say why)"
    assert row.result.precision_reason == long  # the JSON keeps it whole
    short = NumericResult("x", CheckedOutputs(("y",)), "pass", 1e-6, 1e-3, "float32", 12,
                          precision_reason="float64 copy of the model")
    assert numeric_rows([short])[0].details() == "float64 copy of the model"
