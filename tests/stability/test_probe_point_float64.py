"""Probe-point gradient checks that float32 cannot decide are decided on the float64 copy.

sin(x) at |x| ~ 1e2 turns over every few units: float32's finite-difference steps (relative to the
input's magnitude) span a good part of a period, so the float32 check at those probe points is
inconclusive; the float64 copy at the same point, with its small steps, decides it.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _sin_model(path: str, factor: float, bound: float = 10.0) -> str:
    """y = sin(x) (and, with `second`, z = x * w) whose custom gradient is multiplied by `factor` where
    |x| > bound (right everywhere with factor 1): the synthesised N(0, 1) point never sees it."""
    import tensorflow as tf

    @tf.custom_gradient
    def sin(x):
        def grad(dy):
            return dy * tf.cos(x) * tf.where(tf.abs(x) > bound, factor, 1.0)

        return tf.sin(x), grad

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": sin(x)}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return path


@pytest.fixture(scope="module")
def sin_audit(tmp_path_factory):
    from gradaudit.api import AuditOptions, audit_saved_model

    root = tmp_path_factory.mktemp("sin")
    cache = {}

    def get(factor: float, **options):
        key = (factor, tuple(sorted(options.items())))
        if key not in cache:
            path = _sin_model(str(root / f"sin_{factor:g}_{len(cache)}"), factor)
            cache[key] = audit_saved_model(path, AuditOptions(**options))
        return cache[key]

    return get


def _probe_rows(report):
    return [n for n in report.numeric if n.scale is not None]


def test_wrong_only_for_large_inputs_fails_on_the_float64_copy(sin_audit):
    r = sin_audit(0.5)
    base = [n for n in r.numeric if n.scale is None]
    assert [n.status for n in base] == ["pass"]  # the synthesised point never reaches |x| > 10
    failed = [n for n in _probe_rows(r) if n.status == "fail"]
    assert failed and all(n.dtype == "float64" for n in failed)
    # probe points are checked on the float64 copy when there is one, and the report says so
    assert all(n.precision_reason == "float64 copy of the model" for n in failed)
    # one scaled copy of the point: every |x| > 10, the whole error; the moderate points stacked (x 2 to 50, labelled
    # 10) have some entries below 10, so less of it
    assert all(0.45 < n.rel_error < 0.55 for n in failed if n.scale != 10)
    assert all(0.0 < n.rel_error < 0.55 for n in failed)
    (f,) = [f for f in r.findings if f.rule == "gradient-mismatch"]
    assert f.severity.value == "error" and f.sources == ("x",) and f.outputs == ("y",)
    assert f.op is not None and f.op.op_type == "IdentityN"  # the saved custom gradient
    assert "float64 copy" in f.message and "custom gradients" in f.message
    assert r.verdict() == "fail"


def test_right_gradient_passes_at_the_same_probe_points(sin_audit):
    r = sin_audit(1.0)
    rows = _probe_rows(r)
    assert rows and {n.status for n in rows} == {"pass"} and {n.dtype for n in rows} == {"float64"}
    assert "gradient-mismatch" not in {f.rule for f in r.findings} and r.verdict() == "pass"


def test_without_float64_the_probe_points_stay_inconclusive_and_are_kept(sin_audit, tmp_path):
    """No float64 copy: nothing decides the large probe points; their rows stay in the outcome with their
    reason, and the wrong gradient is claimed only where a float32 check decides it."""
    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.numeric import NumericOptions
    from gradaudit.numeric.stability import StabilityOptions, run_stability
    from gradaudit.targets.saved_model import SavedModelFile

    path = _sin_model(str(tmp_path / "sin"), 0.5)
    model = SavedModelFile(path, ("serve",))
    analysis = analyse(model, model.signature("serving_default"), GradientOracle())
    outcome = run_stability(path, ("serve",), "serving_default", analysis,
                            StabilityOptions(numeric=NumericOptions(upcast=False)))
    rows = outcome.numeric
    large = [n for n in rows if abs(n.scale) >= 100]  # x 100 and x -600, where sin oscillates too fast for float32
    assert large and {n.status for n in large} == {"inconclusive"} and {n.dtype for n in rows} == {"float32"}
    # x 1e-3 (the model has a custom gradient: probes.CHECKED_WRITTEN), where it is right: float32 decides a pass
    assert {n.status for n in rows if n.scale == 1e-3} == {"pass"}
    assert all(n.scale is not None for n in rows) and all(n.reason for n in rows if n.status != "pass")
    # the moderate points stacked (x 2 to 50) are within float32's reach: there the wrong gradient (|x| > 10) is
    # decided, and only there
    moderate = [n for n in rows if n.scale == 10]
    assert moderate and {n.status for n in moderate} <= {"fail", "inconclusive"}
    claimed = "gradient-mismatch" in {f.rule for f in outcome.findings}
    assert claimed == any(n.status == "fail" for n in moderate)


def _scaled_activation(path: str, factor: float) -> str:
    """y = (a * h * tanh(h)) @ V with h = x @ W (small W: |h| < 3 at N(0, 1) inputs) and a custom gradient
    whose input gradient is exact and whose gradient for the trainable `a` is multiplied by `factor` where
    |h| > 3: only a variable's check at a large probe point can see it."""
    import numpy as np
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            r = np.random.default_rng(12)
            self.W = tf.Variable((r.standard_normal((4, 6)) * 0.15).astype("float32"), name="W")
            self.a = tf.Variable(np.full(6, 1.3, "float32"), name="a")
            self.V = tf.Variable(r.standard_normal((6, 2)).astype("float32"), name="V")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            a = self.a

            @tf.custom_gradient
            def act(h):
                def grad(dy, variables=None):
                    t = tf.tanh(h)
                    wrong = tf.where(tf.abs(h) > 3, factor, 1.0)
                    return dy * a * (t + h * (1 - t * t)), [tf.reduce_sum(dy * h * t * wrong, axis=0)]

                return a * h * tf.tanh(h), grad

            return {"y": act(x @ self.W) @ self.V}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return path


@pytest.mark.parametrize("factor", [1.0, 1.01])
def test_a_weight_whose_custom_gradient_is_wrong_only_for_large_activations(tmp_path, factor):
    from gradaudit.api import AuditOptions, audit_saved_model

    r = audit_saved_model(_scaled_activation(str(tmp_path / "scaled"), factor), AuditOptions())
    base = [n for n in r.numeric if n.scale is None]
    assert {n.status for n in base} == {"pass"}  # the synthesised point cannot see it
    probed = [n for n in r.numeric if n.scale is not None and n.source not in ("x",)]
    assert probed, "the variables are checked at the probe points (the model has a custom gradient)"
    mismatches = [f for f in r.findings if f.rule == "gradient-mismatch"]
    if factor == 1.0:
        assert not mismatches and {n.status for n in probed} <= {"pass", "inconclusive"}
    else:
        assert [f.sources for f in mismatches] == [("a",)] and r.verdict() == "fail"
        assert any(n.source == "a" and n.status == "fail" and abs(n.rel_error - 0.0099) < 5e-4 for n in probed)
