"""Reports of the checked-in sample models (static pass), each audited once per module."""

from __future__ import annotations

import dataclasses

import pytest

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.model import CheckedOutputs, Finding, NumericResult, Report, Severity

from .report_helpers import SAMPLES


def _audit(name: str) -> Report:
    return audit_saved_model(str(SAMPLES / name), AuditOptions(static_only=True))


@pytest.fixture(scope="module")
def argmax_report() -> Report:
    """One error: ArgMax cuts x, dense/bias, dense/kernel -> cls."""
    return _audit("classifier_argmax")


@pytest.fixture(scope="module")
def stop_report() -> Report:
    """StopGradient cuts x, w1 -> y: one info (GA106), and one warning (GA108: w1 never trains)."""
    return _audit("stop_gradient")


@pytest.fixture(scope="module")
def disconnected_report() -> Report:
    """One warning about a variable, concerning no output."""
    return _audit("disconnected_variable")


@pytest.fixture(scope="module")
def mlp_report() -> Report:
    return _audit("mlp")


@pytest.fixture(scope="module")
def numeric_report(mlp_report) -> Report:
    """The mlp's static report with numeric results of every status and one numeric finding: what the
    numeric checks will add (they are not wired in the CLI tests)."""
    src = [s.name for s in mlp_report.sources if s.differentiable][:4]
    out = mlp_report.outputs[0].name
    results = [NumericResult(s, CheckedOutputs((out,)), status, 1e-3 if status == "fail" else None, 1e-3, "float64", 8,
                             reason=None if status in ("pass", "fail") else f"why {status}",
                             bound=1e-8 if status == "fail" else None)
               for s, status in zip(src, ("pass", "fail", "skipped", "error"))]
    finding = Finding("GA201", "gradient-mismatch", Severity.ERROR, f"gradient of {out} w.r.t. {src[1]} is wrong",
                      "check the custom gradient", sources=(src[1],), outputs=(out,))
    return dataclasses.replace(mlp_report, numeric=results, findings=[*mlp_report.findings, finding])
