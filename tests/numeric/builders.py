"""Small SavedModels for the numeric checks, each written by the test that needs it."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

SAVE = tf.saved_model.SaveOptions(experimental_custom_gradients=True)


def _rng(seed: int = 1) -> np.random.Generator:
    return np.random.default_rng(seed)


def _var(rng, shape, name, scale=0.5):
    return tf.Variable((rng.standard_normal(shape) * scale).astype("float32"), name=name)


def save(module: tf.Module, path: str, fn=None) -> str:
    tf.saved_model.save(module, path, signatures={"serving_default": fn or module.__call__}, options=SAVE)
    return path


def scaled_log1pexp(err: float):
    """Seed 001's stable log1pexp; its gradient is multiplied by (1 + err)."""

    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)

        def grad(dy):
            return dy * (1 - 1 / (1 + e)) * (1 + err)

        return tf.math.log(1 + e), grad

    return log1pexp


def custom_mlp(path: str, err: float = 0.0) -> str:
    """MLP whose hidden activation is seed 001's custom log1pexp, wrong by a relative `err`."""
    act = scaled_log1pexp(err)
    rng = _rng()

    class M(tf.Module):
        def __init__(self):
            self.w1 = _var(rng, (4, 16), "w1")
            self.b1 = tf.Variable(np.zeros(16, "float32"), name="b1")
            self.w2 = _var(rng, (16, 3), "w2")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": tf.tanh(act(x @ self.w1 + self.b1) @ self.w2)}

    return save(M(), path)


def relu_abs_mlp(path: str) -> str:
    """Piecewise-linear model: ReLU, abs and a max: kinks everywhere."""
    rng = _rng(2)

    class M(tf.Module):
        def __init__(self):
            self.w1 = _var(rng, (6, 64), "w1")
            self.b1 = tf.Variable(np.zeros(64, "float32"), name="b1")
            self.w2 = _var(rng, (64, 32), "w2")
            self.w3 = _var(rng, (32, 4), "w3")
            self.w4 = _var(rng, (8, 4), "w4")

        @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32)])
        def __call__(self, x):
            h = tf.nn.relu(x @ self.w1 + self.b1)
            h = tf.abs(h @ self.w2) - tf.nn.relu(-h @ self.w2)
            return {"y": tf.reduce_max(tf.reshape(h, [-1, 4, 8]), axis=1) @ self.w4,
                    "probs": tf.nn.softmax(h @ self.w3)}

    return save(M(), path)


def while_model(path: str) -> str:
    """A tf.while_loop iterating a smooth map a data-dependent number of times."""
    rng = _rng(3)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (5, 5), "w", 0.3)

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.float32)])
        def __call__(self, x):
            def body(i, h):
                return i + 1, tf.tanh(h @ self.w + x)

            _, h = tf.while_loop(lambda i, h: i < 4, body, (tf.constant(0), x))
            return {"y": h}

    return save(M(), path)


def ste_model(path: str) -> str:
    """Straight-through rounding: forward piecewise constant, gradient the identity."""
    rng = _rng(4)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 3), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            q = x + tf.stop_gradient(tf.round(x * 4.0) / 4.0 - x)
            return {"y": q @ self.w}

    return save(M(), path)


def fake_quant_model(path: str) -> str:
    """tf.quantization.fake_quant on the input of a dense layer."""
    rng = _rng(5)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 3), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            q = tf.quantization.fake_quant_with_min_max_args(x, min=-3.0, max=3.0, num_bits=4)
            return {"y": q @ self.w}

    return save(M(), path)


def dropout_model(path: str) -> str:
    rng = _rng(6)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 8), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": tf.nn.dropout(tf.tanh(x @ self.w), rate=0.5)}

    return save(M(), path)


def pyfunc_model(path: str) -> str:
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            y = tf.numpy_function(np.sinh, [x], tf.float32)
            return {"y": tf.reshape(y, tf.shape(x)) + x}

    return save(M(), path)


def many_variables(path: str, bad: int | None, n: int = 50, factor: float = 2.0) -> str:
    """A chain of n small layers with their own variables, of very different sizes; the gradient of
    variable `bad` (a 3-element bias) is multiplied by `factor` through a custom gradient."""
    rng = _rng(7)

    def scaled(f):
        @tf.custom_gradient
        def ident(v):
            return tf.identity(v), lambda dy: dy * f

        return ident

    wrong = scaled(factor)

    class M(tf.Module):
        def __init__(self):
            self.vs = []
            for i in range(n):
                if i == bad:
                    self.vs.append(tf.Variable((rng.standard_normal(3) * 0.1).astype("float32"), name=f"bias_{i}"))
                elif i % 2 == 0:
                    self.vs.append(_var(rng, (3, 3), f"kernel_{i}", 0.6))
                else:
                    self.vs.append(tf.Variable((rng.standard_normal(3) * 0.1).astype("float32"), name=f"bias_{i}"))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            h = x
            for i, v in enumerate(self.vs):
                v = wrong(v) if i == bad else v
                h = tf.tanh(h @ v) if len(v.shape) == 2 else h + v
            return {"y": h}

    return save(M(), path)


def keras_cnn(path: str) -> str:
    """Keras CNN with batch normalisation and max pooling, exported with model.export."""
    import keras

    keras.utils.set_random_seed(8)
    inputs = keras.Input((12, 12, 3))
    h = keras.layers.Conv2D(8, 3, padding="same")(inputs)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.MaxPooling2D()(h)
    h = keras.layers.Conv2D(8, 3)(h)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.ReLU()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = keras.layers.Dense(5, activation="softmax")(h)
    model = keras.Model(inputs, outputs)
    # Non-trivial moving statistics, as after training.
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.moving_mean.assign(np.linspace(-0.2, 0.2, 8).astype("float32"))
            layer.moving_variance.assign(np.linspace(0.5, 1.5, 8).astype("float32"))
    model.export(path, verbose=False)
    return path


def fused_bn_model(path: str, err: float = 0.0) -> str:
    """tf.nn.fused_batch_norm in inference mode (FusedBatchNormV3 has float32 kernels only: the float64 copy computes
    it with float64 primitives) and a custom log1pexp."""
    act = scaled_log1pexp(err)
    rng = _rng(9)

    class M(tf.Module):
        def __init__(self):
            self.k = _var(rng, (3, 3, 2, 4), "k")
            self.scale = tf.Variable(np.linspace(0.5, 1.5, 4).astype("float32"), name="scale")
            self.offset = tf.Variable(np.zeros(4, "float32"), name="offset")

        @tf.function(input_signature=[tf.TensorSpec([None, 6, 6, 2], tf.float32)])
        def __call__(self, x):
            h = tf.nn.conv2d(x, self.k, 1, "SAME")
            h, _, _ = tf.compat.v1.nn.fused_batch_norm(
                h, self.scale, self.offset, mean=tf.zeros(4), variance=tf.ones(4), is_training=False)
            return {"y": tf.reduce_mean(act(h), axis=[1, 2])}

    return save(M(), path)


def stopped_model(path: str) -> str:
    """Outputs that depend on x and w only through tf.stop_gradient: TensorFlow returns no gradient."""
    rng = _rng(10)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 3), "w")
            self.v = _var(rng, (4, 3), "v")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": tf.stop_gradient(tf.tanh(x @ self.w)), "z": tf.tanh(tf.stop_gradient(x) @ self.v)}

    return save(M(), path)


def sqrt_model(path: str) -> str:
    """sqrt of the input: only defined for positive inputs (pass them with --inputs)."""

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return {"y": tf.sqrt(x) * 2.0}

    return save(M(), path)


def unknown_rank_model(path: str) -> str:
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(None, tf.float32)])
        def __call__(self, x):
            return {"y": tf.reduce_sum(tf.tanh(x))}

    return save(M(), path)


PYFUNC_SCRIPT = """
import sys
sys.path.insert(0, sys.argv[2])
import builders
builders.pyfunc_model(sys.argv[1])
"""


def embedding_model(path: str) -> str:
    """Token ids (int32) through an embedding, with a float mask: the ids are not a source."""
    rng = _rng(11)

    class M(tf.Module):
        def __init__(self):
            self.table = _var(rng, (10, 4), "embedding/table")
            self.w = _var(rng, (4, 2), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 5], tf.int32), tf.TensorSpec([None, 5], tf.float32)])
        def __call__(self, ids, mask):
            h = tf.nn.embedding_lookup(self.table, ids) * mask[..., None]
            return {"y": tf.tanh(tf.reduce_sum(h, axis=1) @ self.w)}

    return save(M(), path)


def no_gradient_model(path: str) -> str:
    """Mod has no registered gradient: differentiating the loaded function raises LookupError."""
    rng = _rng(12)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 3), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": tf.raw_ops.Mod(x=x, y=tf.constant(3.0)) @ self.w + x @ self.w}

    return save(M(), path)


def scalar_variable_model(path: str) -> str:
    """A scalar (0-d) trainable variable next to a matrix one."""
    rng = _rng(13)

    class M(tf.Module):
        def __init__(self):
            self.scale = tf.Variable(1.5, name="scale")
            self.w = _var(rng, (3, 2), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return {"y": tf.tanh(self.scale * x @ self.w)}

    return save(M(), path)


def wrong_above_two(path: str, factor: float = 0.5) -> str:
    """A softplus whose custom gradient is right for x <= 2 and multiplied by `factor` for x > 2 (right
    everywhere with factor 1): the synthesised N(0, 1) point rarely sees it; probe points at large scales do."""

    @tf.custom_gradient
    def softplus(x):
        def grad(dy):
            return dy * tf.sigmoid(x) * tf.where(x > 2.0, factor, 1.0)

        return tf.nn.softplus(x), grad

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x):
            return {"y": softplus(x) * tf.constant([1.0, -0.5, 0.25, 2.0])}

    return save(M(), path)


def keras_log1pexp(path: str) -> str:
    """A Keras model whose activation is log(exp(x) + 1) written out (GA301), exported with model.export."""
    import keras

    inp = keras.Input((4,), name="x")
    h = keras.layers.Dense(8, activation=lambda z: keras.ops.log(keras.ops.exp(z) + 1.0))(inp)
    out = keras.layers.Dense(2)(h)
    model = keras.Model(inp, out)
    model.export(path, verbose=False)
    return path


def keras_text(path: str, mask: bool) -> str:
    """Embedding (vocabulary 50) -> LSTM -> Dense; with mask_zero=True token id 0 is padding."""
    import keras

    keras.utils.set_random_seed(3)
    inp = keras.Input((6,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(50, 8, mask_zero=mask)(inp)
    h = keras.layers.LSTM(5)(h)
    model = keras.Model(inp, keras.layers.Dense(2)(h))
    model.export(path, verbose=False)
    return path


def softmax_xent(path: str, smoothed: bool = False) -> str:
    """A loss model: logits = x @ w, loss = softmax_cross_entropy_with_logits(labels, logits), with the
    labels a float input (taken as they are, or label-smoothed: then their domain is not read)."""
    rng = _rng(4)

    class M(tf.Module):
        def __init__(self):
            self.w = _var(rng, (4, 3), "w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x"),
                                      tf.TensorSpec([None, 3], tf.float32, name="labels")])
        def __call__(self, x, labels):
            y = labels * 0.9 + 0.1 / 3.0 if smoothed else labels
            loss = tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=x @ self.w)
            return {"loss": loss}

    return save(M(), path)
