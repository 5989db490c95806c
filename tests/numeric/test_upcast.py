"""The float64 copy: same function, same custom gradients, in float64; and when it cannot be made."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.numeric.runner import load
from gradaudit.numeric.savedmodel import read_saved_model
from gradaudit.numeric.upcast import float64_blockers


def test_float64_copy_computes_the_same_function_and_custom_gradient(models):
    info = read_saved_model(models("mlp"), (), "serving_default")
    assert float64_blockers(info) == []
    native, copy = load(info, (), False), load(info, (), True)
    try:
        x = np.random.default_rng(0).standard_normal((2, 4))
        x32, x64 = tf.constant(x, tf.float32), tf.constant(x.astype(np.float32), tf.float64)
        with tf.GradientTape() as t32, tf.GradientTape() as t64:
            t32.watch(x32)
            t64.watch(x64)
            y32, y64 = native.fn(x=x32)["y"], copy.fn(x=x64)["y"]
        assert y64.dtype == tf.float64
        np.testing.assert_allclose(y64.numpy(), y32.numpy(), rtol=1e-5, atol=1e-6)
        # The saved custom gradient (seed 001's log1pexp) runs in float64 too.
        g32, g64 = t32.gradient(y32, x32), t64.gradient(y64, x64)
        assert g64.dtype == tf.float64
        np.testing.assert_allclose(g64.numpy(), g32.numpy(), rtol=1e-4, atol=1e-6)
    finally:
        native.close()
        copy.close()


def test_blockers_name_the_op(models):
    assert float64_blockers(read_saved_model(models("fake_quant"), (), "serving_default")) == [
        "FakeQuantWithMinMaxArgs takes inputs and returns outputs in float32 only"]
    # FusedBatchNormV3 has float32 kernels only, but the copy computes it with float64 primitives
    assert float64_blockers(read_saved_model(models("fused"), (), "serving_default")) == []


# -- fused batch norms: float64 primitives in the copy ------------------------------------------------------

_LAYOUT_SHAPES = {"NHWC": (2, 3, 3, 4), "NCHW": (2, 4, 3, 3), "NDHWC": (2, 2, 3, 3, 4), "NCDHW": (2, 4, 2, 3, 3)}
_OUTPUTS = ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2", "reserve_space_3")


def _batch_norm_model(path: str, op: str, training: bool, layout: str, factor: float) -> str:
    """One raw fused batch norm with every output returned, and `z`, which reads y and the batch variance inside the
    function (the statistics pass no gradient back through the fused op)."""
    rng = np.random.default_rng(1)

    class M(tf.Module):
        def __init__(self):
            self.scale = tf.Variable(rng.uniform(0.5, 1.5, 4).astype("float32"), name="scale")
            self.offset = tf.Variable(rng.normal(size=4).astype("float32"), name="offset")
            self.mean = tf.Variable(rng.normal(size=4).astype("float32"), name="mean")
            self.variance = tf.Variable(rng.uniform(0.5, 1.5, 4).astype("float32"), name="variance")

        @tf.function(input_signature=[tf.TensorSpec([None, *_LAYOUT_SHAPES[layout][1:]], tf.float32, name="x")])
        def __call__(self, x):
            out = getattr(tf.raw_ops, op)(x=x, scale=self.scale, offset=self.offset, mean=self.mean,
                                          variance=self.variance, epsilon=1e-3, exponential_avg_factor=factor,
                                          data_format=layout, is_training=training)
            found = dict(zip(_OUTPUTS, out))
            found["z"] = tf.tanh(out[0]) * tf.reduce_mean(out[2])
            return found

    tf.saved_model.save(M(), path)
    return path


def _gradients(loaded, x: np.ndarray, u: np.ndarray, output: str) -> dict:
    """Gradients of u·output by the tape, w.r.t. x and each variable (by name); None where TensorFlow gives none."""
    xt = tf.constant(x, loaded.fn.structured_input_signature[1]["x"].dtype)
    variables = {v.name.split(":")[0]: v for v in loaded.fn.variables}
    with tf.GradientTape() as tape:
        tape.watch(xt)
        phi = tf.reduce_sum(tf.cast(loaded.fn(x=xt)[output], tf.float64) * u)
    grads = tape.gradient(phi, [xt] + list(variables.values()))
    return {n: None if g is None else g.numpy().astype(np.float64) for n, g in zip(["x", *variables], grads)}


@pytest.mark.parametrize(("op", "training", "layout", "factor"), [
    ("FusedBatchNormV3", True, "NCHW", 1.0),  # tf-keras LayerNormalization
    ("FusedBatchNormV3", False, "NHWC", 1.0),  # tf-keras BatchNormalization in inference
    ("FusedBatchNormV2", True, "NHWC", 0.3),  # running statistics blended into the outputs
    ("FusedBatchNorm", False, "NCHW", 1.0),
    ("FusedBatchNormV3", True, "NDHWC", 0.3),
    ("FusedBatchNormV3", False, "NCDHW", 1.0),
])
def test_fused_batch_norm_becomes_float64_primitives(tmp_path, op, training, layout, factor):
    """The copy's outputs are TensorFlow's float32 kernel's to float32 rounding, every output but the reserve spaces
    (the kernel's scratch, which differs between TensorFlow's CPU paths); its gradients are the fused op's
    registered gradient's (none to the mean and variance inputs, none back from the statistics) and the derivative
    of its forward to float64 rounding."""
    info = read_saved_model(_batch_norm_model(str(tmp_path / "bn"), op, training, layout, factor), (),
                            "serving_default")
    assert float64_blockers(info) == []
    native, copy = load(info, (), False), load(info, (), True)
    try:
        rng = np.random.default_rng(0)
        x = (rng.standard_normal(_LAYOUT_SHAPES[layout]) * 3 + 1).astype(np.float32).astype(np.float64)
        y32, y64 = native.fn(x=tf.constant(x, tf.float32)), copy.fn(x=tf.constant(x, tf.float64))
        assert set(y64) == set(y32) and all(y64[k].dtype == tf.float64 for k in y64)
        for k in y32:
            # The reserve spaces are the kernel's scratch for its gradient: their values and even their shapes depend
            # on TensorFlow's CPU path (on an AMD EPYC without AVX-512, inference's reserve_space_1 is zeros and
            # training's reserve_space_3 has shape [] where another machine gave the mean and shape [0]).
            if k.startswith("reserve"):
                continue
            assert y64[k].shape == y32[k].shape, k
            if y32[k].shape.num_elements():
                np.testing.assert_allclose(y64[k].numpy(), y32[k].numpy(), rtol=0,
                                           atol=1e-6 * float(np.max(np.abs(y32[k].numpy()))), err_msg=k)
        u = rng.standard_normal(x.shape)
        g32, g64 = _gradients(native, x, u, "z"), _gradients(copy, x, u, "z")
        assert g32["mean"] is g32["variance"] is g64["mean"] is g64["variance"] is None
        for n in ("x", "scale", "offset"):
            np.testing.assert_allclose(g64[n], g32[n], rtol=0, atol=1e-5 * float(np.max(np.abs(g32[n]))), err_msg=n)
        v, h = rng.standard_normal(x.shape), 1e-5
        phi = [float(np.sum(copy.fn(x=tf.constant(x + t * v, tf.float64))["y"].numpy() * u)) for t in (h, -h)]
        autodiff = float(np.sum(_gradients(copy, x, u, "y")["x"] * v))
        assert abs((phi[0] - phi[1]) / (2 * h) - autodiff) < 1e-8 * abs(autodiff)
    finally:
        native.close()
        copy.close()
