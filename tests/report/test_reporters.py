"""The reporter registry and the choice between one report's shape and several reports' shape."""

from __future__ import annotations

import json

import click

from gradaudit.cli import audit_command
from gradaudit.report import FORMATS, MANY_REPORTERS, REPORTERS, render, terminal


def test_every_format_choice_has_a_reporter_for_one_and_for_many():
    (fmt,) = [p for p in audit_command.params if p.name == "fmt"]
    assert isinstance(fmt.type, click.Choice)
    assert list(fmt.type.choices) == list(FORMATS) == list(REPORTERS) == list(MANY_REPORTERS)


def test_one_report_keeps_the_single_shape(argmax_report, mlp_report):
    one = json.loads(render("json", [argmax_report]))
    assert one["target"]["path"] == argmax_report.target.path and "reports" not in one
    many = json.loads(render("json", [argmax_report, mlp_report]))
    assert [r["target"]["path"] for r in many["reports"]] == [argmax_report.target.path, mlp_report.target.path]
    assert many["verdict"] == "fail" and many["summary"]["error"] == 1


def test_every_format_renders_one_and_many(argmax_report, mlp_report):
    for fmt in FORMATS:
        single = render(fmt, [argmax_report])
        both = render(fmt, [argmax_report, mlp_report])
        assert "ArgMax" in single and "ArgMax" in both, fmt
        assert len(both) > len(single), fmt


def test_text_summary_table_only_for_several_models(argmax_report, mlp_report):
    assert "Summary (fail-on: error)" not in terminal.render_plain(argmax_report)
    text = terminal.render_plain_many([argmax_report, mlp_report])
    summary = text[text.index("Summary (fail-on: error)"):]
    assert "FAIL" in summary and "PASS" in summary and "classifier_argmax" in summary
