"""One wrong custom gradient is one finding: the whole-model checks find a mismatch for every source upstream of it
(one GA201 each, the same fix five times on tester 15's MLP); the local checks at the same point then find the
custom gradient that fails its own check with the cotangent the model hands it, and its one finding, naming the op,
stands for those sources' mismatches. Truth: the tape of the loaded model against float64 central differences of
a numpy twin, source by source: the sources the finding names are exactly those whose gradient is wrong."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module, scaled_tanh

from gradaudit.api import AuditOptions, audit_saved_model


class Mlp(tf.Module):
    """x -> tanh -> custom tanh (wrong by `factor`) -> linear: the sources upstream of the custom one are wrong."""

    def __init__(self, factor: float):
        rng = np.random.default_rng(3)
        self.w1 = tf.Variable(rng.standard_normal((4, 5)).astype(np.float32) * 0.5, name="w1")
        self.w2 = tf.Variable(rng.standard_normal((5, 5)).astype(np.float32) * 0.5, name="w2")
        self.w3 = tf.Variable(rng.standard_normal((5, 2)).astype(np.float32) * 0.5, name="w3")
        self.act = scaled_tanh(factor)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.act(tf.tanh(x @ self.w1) @ self.w2) @ self.w3}

    def twin(self, x, w):
        return np.tanh(np.tanh(x @ w["w1"]) @ w["w2"]) @ w["w3"]


class TwoBranches(tf.Module):
    """Two inputs; the custom tanh (wrong) on the first branch only: a and wa are wrong, b and wb are not."""

    def __init__(self, factor: float):
        rng = np.random.default_rng(4)
        self.wa = tf.Variable(rng.standard_normal((3, 2)).astype(np.float32), name="wa")
        self.wb = tf.Variable(rng.standard_normal((3, 2)).astype(np.float32), name="wb")
        self.act = scaled_tanh(factor)

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="a"),
                                  tf.TensorSpec([None, 3], tf.float32, name="b")])
    def __call__(self, a, b):
        return {"y": self.act(a @ self.wa) + tf.sin(b @ self.wb)}


def _wrong_sources(path: str, inputs: dict[str, np.ndarray], forward) -> set[str]:
    """The sources whose tape gradient of u·y differs from float64 central differences of `forward` by more than
    1e-3 relative (the truth)."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    variables = {v.name.split(":")[0]: v for v in fn.variables if v.trainable}
    u = np.random.default_rng(0).standard_normal(np.shape(fn(**{k: tf.constant(v) for k, v in inputs.items()})["y"]))
    xs = {k: tf.constant(v) for k, v in inputs.items()}
    with tf.GradientTape() as tape:
        tape.watch(list(xs.values()))
        phi = tf.reduce_sum(tf.cast(fn(**xs)["y"], tf.float64) * u)
    names = list(xs) + list(variables)
    grads = tape.gradient(phi, list(xs.values()) + list(variables.values()))
    values = {**{k: v.astype(np.float64) for k, v in inputs.items()},
              **{k: v.numpy().astype(np.float64) for k, v in variables.items()}}
    wrong = set()
    for name, g in zip(names, grads):
        d = np.random.default_rng(1).standard_normal(values[name].shape)
        h = 1e-6
        up = {**values, name: values[name] + h * d}
        down = {**values, name: values[name] - h * d}
        numeric = float(np.sum(u * (forward(up) - forward(down)))) / (2 * h)
        auto = float(np.sum(np.asarray(g, np.float64) * d))
        if abs(numeric - auto) > 1e-3 * abs(numeric):
            wrong.add(name)
    return wrong


@pytest.mark.parametrize("kind", ["mlp", "two branches"])
def test_one_wrong_custom_gradient_is_one_finding_naming_it(tmp_path, kind):
    if kind == "mlp":
        module = Mlp(1.02)
        inputs = {"x": np.random.default_rng(6).standard_normal((2, 4)).astype(np.float32)}

        def forward(v):
            return module.twin(v["x"], v)
    else:
        module = TwoBranches(1.02)
        inputs = {k: np.random.default_rng(i).standard_normal((2, 3)).astype(np.float32)
                  for i, k in enumerate(("a", "b"))}

        def forward(v):
            return np.tanh(v["a"] @ v["wa"]) + np.sin(v["b"] @ v["wb"])
    path = save_module(module, str(tmp_path / "model"))
    truth = _wrong_sources(path, inputs, forward)
    assert truth == ({"x", "w1", "w2"} if kind == "mlp" else {"a", "wa"})
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    mismatches = [f for f in report.findings if f.code == "GA201"]
    assert len(mismatches) == 1, [(f.sources, f.message) for f in mismatches]
    (found,) = mismatches
    assert found.op is not None and found.op.op_type == "IdentityN" and set(found.sources) == truth
    assert any(r.status == "fail" for r in report.numeric if r.scale is None)  # the whole-model rows stay


def test_a_healthy_custom_gradient_gets_no_mismatch(tmp_path):
    path = save_module(Mlp(1.0), str(tmp_path / "model"))
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass" and not [f for f in report.findings if f.code == "GA201"]
