"""`--format github`: workflow-command annotations, escaped as the runner expects."""

from __future__ import annotations

from gradaudit.batch import AuditFailure
from gradaudit.report import github

from .report_helpers import REPO, suppressed


def test_one_annotation_per_active_finding_by_severity(argmax_report, stop_report, disconnected_report,
                                                        monkeypatch):
    monkeypatch.chdir(REPO)
    lines = github.render_many([argmax_report, stop_report, disconnected_report]).splitlines()
    commands = [line.split(" ", 1)[0] for line in lines if line.startswith("::")]
    assert commands == ["::error", "::warning", "::notice", "::warning"]  # stop: GA108 w1, GA106
    assert lines[0].startswith("::error file=sample_models/classifier_argmax/saved_model.pb,"
                               "title=gradaudit GA103 zero-gradient [serving_default]::ArgMax 'ArgMax'")
    assert "Fix: Use a smooth surrogate" in lines[0]
    assert lines[1].startswith("gradaudit: sample_models/classifier_argmax [serving_default]: fail")


def test_suppressed_findings_are_not_annotated(argmax_report):
    lines = github.render(suppressed(argmax_report)).splitlines()
    assert not any(line.startswith("::") for line in lines)
    assert "pass" in lines[0] and "1 suppressed" in lines[0]


def test_values_and_properties_are_escaped():
    line = github.annotation("error", "50% done\nnext", file="a,b:c.pb", title="t")
    assert line == "::error file=a%2Cb%3Ac.pb,title=t::50%25 done%0Anext"


def test_failures_are_error_annotations(mlp_report):
    lines = github.render_many([mlp_report], "error", [AuditFailure("m", "m: no such file")]).splitlines()
    assert lines[-1] == "::error title=gradaudit%3A model not audited::m: no such file"
