"""Forensics names the op whose own backward made the NaN: under tf.where, a masked log(1 + exp(x)) gets a zero
upstream gradient, and Exp's backward turns it into 0 * inf = NaN. SelectV2's own backward gives x a finite
gradient; the NaN only reaches it through the other branch."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": tf.where(x > 20.0, x, tf.math.log(1.0 + tf.exp(x)))}

    path = str(tmp_path_factory.mktemp("where") / "softplus_where")
    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return audit_saved_model(path, AuditOptions(probe_scales=(1.0, 100.0)))


def test_exp_not_select_is_named(report):
    (f,) = [f for f in report.findings if f.rule == "unstable-gradient"]
    assert f.op is not None and f.op.op_type == "Exp", f.message
    assert "Exp received 100" in f.message
    row = next(s for s in report.stability if s.scale == 100.0)
    assert row.status == "nonfinite_gradient" and row.op_type == "Exp"


def test_the_log1p_exp_lint_is_confirmed_on_that_op(report):
    (lint,) = [f for f in report.findings if f.rule == "log1p-exp"]
    assert lint.severity.value == "error" and "Confirmed by the stability probes" in lint.message
