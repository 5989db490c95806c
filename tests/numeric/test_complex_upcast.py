"""Complex intermediates in the float64 copy (issue 22): complex64 becomes complex128 beside float32 becoming
float64, so a model that goes through `tf.complex`, an FFT and `tf.math.angle` is checked on the float64 copy
(the rewrite left `Complex` with T=double, Tout=complex64, which has no kernel: the checks fell back to
float32). A custom gradient on the complex path wrong by 1e-6, which float32 cannot see, fails there."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _model(path: str, err: float) -> str:
    import tensorflow as tf

    @tf.custom_gradient
    def scaled(x):
        return 1.5 * x, lambda dy: dy * 1.5 * (1 + err)

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.5, -0.5, 0.25, 2.0], name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            z = tf.complex(scaled(x * self.w), 0.5 * x + 1.0)
            spectrum = tf.signal.rfft(x * self.w)
            return {"phase": tf.math.angle(z), "power": tf.reduce_sum(tf.abs(spectrum) ** 2, axis=-1)}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return path


def _truth(path: str) -> float:
    """tf.GradientTape's input gradient on the loaded model against float64 central differences of its forward
    (the model computes in float32: the differences are of the float64 copy's forward, made by hand here)."""
    import tensorflow as tf

    fn = (obj := tf.saved_model.load(path)).signatures["serving_default"]
    w = obj.w.numpy().astype(np.float64)
    x = np.random.default_rng(0).standard_normal((2, 4))
    u = {k: np.random.default_rng(i).standard_normal(s) for i, (k, s) in enumerate((("phase", (2, 4)),
                                                                                    ("power", (2,))))}
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        out = fn(x=xt)
        phi = tf.add_n([tf.reduce_sum(out[k] * u[k]) for k in u])
    g = tape.gradient(phi, xt).numpy().astype(np.float64)

    def forward(x64):
        z = 1.5 * x64 * w + 1j * (0.5 * x64 + 1.0)
        power = np.sum(np.abs(np.fft.rfft(x64 * w)) ** 2, axis=-1)
        return float(np.sum(np.angle(z) * u["phase"]) + np.sum(power * u["power"]))

    d, h = np.random.default_rng(3).standard_normal((2, 4)), 1e-5
    numeric = (forward(x + h * d) - forward(x - h * d)) / (2 * h)
    return abs(float(np.sum(g * d)) - numeric) / abs(numeric)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("complex")
    return {err: _model(str(root / f"err{err:g}"), err) for err in (0.0, 1e-6)}


def _numeric(path: str):
    from gradaudit.numeric import NumericOptions, NumericTask, run_numeric
    from gradaudit.numeric.savedmodel import declared_sources

    sources, outputs = declared_sources(path)
    return run_numeric(path, (), "serving_default", NumericTask(sources, outputs, [], NumericOptions()))


def test_a_model_with_complex_intermediates_is_checked_on_its_float64_copy(built):
    assert _truth(built[0.0]) < 1e-5  # float32 gradient, right to float32 rounding
    outcome = _numeric(built[0.0])
    assert outcome.results and all(r.status == "pass" for r in outcome.results), outcome.results
    assert {(r.dtype, r.precision_reason) for r in outcome.results} == {("float64", "float64 copy of the model")}
    assert not any("Float64 evaluation is not possible" in n for n in outcome.notes)


def test_a_custom_gradient_on_the_complex_path_wrong_by_1e6_fails(built):
    outcome = _numeric(built[1e-6])
    assert "fail" in {r.status for r in outcome.results}
    assert any(f.code == "GA201" for f in outcome.findings)
