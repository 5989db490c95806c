"""The text report's numeric and stability tables, on real audits: each cell says what the report's results
say (status, relative error, dtype), the probe cells name the failure kind, and the caption explains the cells
that are not judged only when there are some."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from gradaudit.report import terminal

STABILITY_CELL = {"ok": "ok", "nonfinite_gradient": "NaN/Inf grad", "nonfinite_forward": "NaN/Inf fwd"}


def _text(report) -> str:
    buf = io.StringIO()  # wide enough that no cell wraps
    terminal.print_report(report, Console(file=buf, width=400, color_system=None, force_terminal=False))
    return buf.getvalue()


def _rows(text: str, title: str) -> list[list[str]]:
    """The body rows of the table titled `title`: one list of cells per row."""
    lines = text[text.index(title):].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┡")) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("│"):
            break
        rows.append([cell.strip() for cell in line.split("│")[1:-1]])
    return rows


def test_the_numeric_table_shows_each_check_of_the_report(audited):
    report = audited("wrong_custom_gradient")
    rows = _rows(_text(report), "Numeric gradient checks")
    plain = [n for n in report.numeric if n.scale is None]  # the synthesised point: one row each
    assert plain and any(n.status == "fail" for n in plain)
    for n in plain:
        shown = "*" if n.outputs.every else ", ".join(n.outputs.names)  # the table's name for every float output
        [row] = [r for r in rows if r[0] == n.source and r[1] == shown]
        assert row[2] == n.status and row[3] == f"{n.rel_error:.2e}" and row[5] == n.dtype, row
    assert "fail" in {r[2] for r in rows}


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_stability_table_names_the_failure_at_each_scale(audited):
    for name, source, output, scale, cell in [("unstable_norm", "x", "y", 0.0, "NaN/Inf grad"),
                                              ("log1pexp_naive", "x", "y", 100.0, "NaN/Inf fwd")]:
        report = audited(name)
        text = _text(report)
        rows = _rows(text, "Stability probes")
        scales = sorted({s.scale for s in report.stability})
        by_pair = {r[0]: r[1:] for r in rows}
        assert by_pair[f"{source} -> {output}"][scales.index(scale)] == cell, name
        assert by_pair[f"{source} -> {output}"][scales.index(1.0)] == "ok", name
        for s in report.stability:  # every cell is its result's status (or, non-finite in float64 too, not judged)
            shown = by_pair[f"{s.source} -> {s.output}"][scales.index(s.scale)]
            assert shown in ({"ok"} if s.status == "ok" else {STABILITY_CELL[s.status], "inf/nan, not judged"}), s


def test_cells_not_judged_are_marked_and_explained(audited):
    report = audited("ratio_stable")  # 0 and tiny scales: a true value beyond float32's range, not a finding
    text = _text(report)
    rows = {r[0]: r[1:] for r in _rows(text, "Stability probes")}
    scales = sorted({s.scale for s in report.stability})
    assert rows["b -> f"][scales.index(0.0)] == "inf/nan, not judged"
    assert rows["b -> f"][scales.index(1.0)] == "ok"
    assert "inf/nan, not judged: non-finite in the float64 reference as well" in text
    assert not [f for f in report.findings if f.code.startswith("GA3") and f.severity.value == "error"]
