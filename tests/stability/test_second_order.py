"""--order 2: Hessian-vector products against central differences of the gradient."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from .conftest import finding, rules_of


def second_order(report) -> list:
    return [n for n in report.numeric if n.order == 2]


def test_custom_gradient_through_stop_gradient_is_caught(audited):
    r = audited("second_order_stop_gradient", order=2)
    f = finding(r, "second-order-mismatch")
    assert f.severity.value == "error" and f.sources == ("x",) and f.outputs == ("y",)
    assert "exactly zero" in f.message and "stop_gradient" in f.message
    # the op whose backward goes wrong: the custom gradient that cuts its own derivative
    assert f.op is not None and f.op.op_type == "IdentityN" and "uses tf.stop_gradient" in f.message
    (result,) = second_order(r)
    assert result.status == "fail" and result.dtype == "float64"
    assert "second-order-mismatch" not in rules_of(audited("second_order_stop_gradient"))  # order 1


@pytest.mark.parametrize("name", ["normal_logpdf", "mlp", "log1pexp_custom", "ratio_stable"])
def test_correct_second_derivatives_pass(audited, name):
    r = audited(name, order=2)
    assert not rules_of(r) & {"second-order-mismatch", "second-order-unavailable"}
    results = second_order(r)
    assert results and {n.status for n in results} == {"pass"}


def test_variables_are_checked_together(audited):
    sources = {n.source for n in second_order(audited("mlp", order=2))}
    assert sources == {"x", "*"}


def test_tensorflow_cannot_differentiate_twice(audited):
    """A loaded While loop: TensorFlow's own reason, as a finding, not a crash."""
    r = audited("while_loop", order=2)
    f = finding(r, "second-order-unavailable")
    assert "handle data" in f.message and set(f.sources) == {"x", "w"}
    assert {n.status for n in second_order(r)} == {"error"}


@pytest.mark.slow  # runs the model in a child process
def test_order_and_probe_scales_on_the_command_line(samples, tmp_path, monkeypatch):
    from gradaudit.cli import main

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(main, [f"{samples}/second_order_stop_gradient", "--order", "2", "--probe-scales",
                                  "0,1", "--format", "json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert "GA320" in {f["code"] for f in doc["findings"]}
    assert sorted({s["scale"] for s in doc["stability"]}) == [0.0, 1.0]
    bad = runner.invoke(main, [f"{samples}/second_order_stop_gradient", "--probe-scales", "big"])
    assert bad.exit_code == 2 and "--probe-scales" in bad.output
