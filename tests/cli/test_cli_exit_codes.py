"""Exit codes: 0 nothing at or above --fail-on, 1 findings at or above it, 2 usage or load error."""

from __future__ import annotations

import pytest

from .cli_helpers import run

# model fixture -> exit code for --fail-on error, warning, info, never
EXPECTED = {
    "argmax": (1, 1, 1, 0),        # one error
    "disconnected": (0, 1, 1, 0),  # one warning
    "stop": (0, 0, 1, 0),          # one info
    "mlp": (0, 0, 0, 0),           # clean
}


@pytest.mark.parametrize("model", EXPECTED)
@pytest.mark.parametrize("threshold", ["error", "warning", "info", "never"])
def test_exit_code_per_threshold(request, model, threshold):
    path = request.getfixturevalue(model)
    expected = EXPECTED[model][("error", "warning", "info", "never").index(threshold)]
    assert run(path, "--static-only", "--fail-on", threshold).exit_code == expected


def test_exit_zero_reports_but_does_not_fail(argmax):
    result = run(argmax, "--static-only", "--exit-zero")
    assert result.exit_code == 0 and "FAIL: 1 error" in result.stdout


def test_exit_zero_does_not_hide_errors(argmax, tmp_path):
    result = run(argmax, tmp_path / "missing", "--static-only", "--exit-zero")
    assert result.exit_code == 2 and "missing: no such file or directory" in result.stderr


def test_worst_result_decides_for_many_models(argmax, stop, mlp, tmp_path):
    assert run(mlp, stop, "--static-only").exit_code == 0
    assert run(mlp, argmax, "--static-only").exit_code == 1
    assert run(mlp, stop, "--static-only", "--fail-on", "info").exit_code == 1
    assert run(argmax, tmp_path / "missing", "--static-only").exit_code == 2
