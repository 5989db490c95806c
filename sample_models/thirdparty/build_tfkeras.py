"""tf-keras (Keras 2) models saved with ``tf.saved_model.save`` (run in its own venv, see README.md)::

    /work/venvs/tfkeras/bin/python sample_models/thirdparty/build_tfkeras.py [OUT_DIR] [NAME...]

Keras 2's LSTM/GRU layers export two implementations of the recurrence (a CuDNN one and a standard
While loop) as functions tagged ``_api_implements``/``_api_preferred_device`` for Grappler's
implementation selector, a graph shape Keras 3 does not write. Keras 2's LayerNormalization and
BatchNormalization export ``FusedBatchNormV3`` (in training mode, NCHW, for a layer norm; in inference mode
for a batch norm), which has float32 kernels only. One signature, ``serving_default(ids) -> {"y": ...}``
(``x`` for the float models), saved from a ``tf.Module`` that holds the model's variables and the serving
function (saving the Keras 2 model object itself writes every layer's call functions too: 2.3 MB for the
masked LSTM). Fixed seeds, no downloads. Writes OUT_DIR/<name>/ with truth.json and inputs.npz (see
_truth.py).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf
import tf_keras as keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import signature_truth, table, write_truth

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = {"name": "tf-keras", "version": keras.__version__}
VOCAB, SEQ = 50, 10


def _text(rnn, mask_zero):
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.layers.Input((SEQ,), dtype="int32", name="ids"),
                             keras.layers.Embedding(VOCAB, 8, mask_zero=mask_zero, name="embedding"),
                             rnn(6, name=rnn.__name__.lower()),
                             keras.layers.Dense(2, name="head")], name="text")


def lstm_masked():
    """tf-keras Embedding(50, 8, mask_zero=True) -> LSTM(6) -> Dense(2); int32 ``ids`` [None, 10].

    Expected: embedding/embeddings, the LSTM kernel, recurrent_kernel and bias, head/kernel, head/bias
    -> y connected, through whichever implementation (CuDNN-style or standard While loop) TensorFlow
    picks on CPU.
    """
    return _text(keras.layers.LSTM, True)


def gru_unmasked():
    """tf-keras Embedding(50, 8) -> GRU(6) -> Dense(2) without masking; int32 ``ids`` [None, 10]."""
    return _text(keras.layers.GRU, False)


class _TrainingHead(keras.Model):
    def __init__(self):
        super().__init__(name="net")
        self.body = keras.layers.Dense(3, name="body")
        self.aux = keras.layers.Dense(3, name="aux")

    def call(self, inputs, training=None):
        h = self.body(inputs)
        if training:  # an auxiliary head used only in training (Inception-style)
            h = h + self.aux(inputs)
        return h


def training_head():
    """tf-keras subclassed model saved whole (``tf.saved_model.save(model)``): Dense ``body`` always, Dense
    ``aux`` added only when ``training=True``; float32 ``input_1`` [None, 4] -> ``output_1``.

    The serving signature (inference) never reads aux/kernel, aux/bias: training through it gives them no
    gradient (Keras: "Gradients do not exist for variables"). Only Keras' own per-layer and training-mode
    traces (``call_and_return_all_conditional_losses``) capture them.
    """
    keras.utils.set_random_seed(4)
    model = _TrainingHead()
    model(tf.ones([1, 4]))
    model(tf.ones([1, 4]), training=True)
    return model


class _ScaledGradient(keras.layers.Layer):
    """The identity, whose custom gradient is the incoming gradient times (1 + err): wrong by ``err`` relative."""

    def __init__(self, err, **kwargs):
        super().__init__(**kwargs)
        self.err = err

    def call(self, inputs):
        err = self.err

        @tf.custom_gradient
        def scaled(t):
            return tf.identity(t), lambda dy: dy * (1.0 + err)

        return scaled(inputs)


def mha_block(err=None):
    """tf-keras MultiHeadAttention(2 heads, key_dim 4) self-attention, residual, LayerNormalization, mean over the
    sequence, Dense(3, softmax); float32 ``x`` [None, 6, 8] -> ``y`` (class probabilities).

    LayerNormalization lowers to FusedBatchNormV3 (training mode, NCHW), which has no float64 kernel: before the
    float64 copy rewrote it, the checks of such a model ran in float32, the probe points' too (x 100, x -600, where
    the attention softmax saturates). With ``err``, the attention output passes through a custom gradient wrong by
    ``err`` relative (the broken twin, ``mha_block_wrong``).
    """
    keras.utils.set_random_seed(4)
    x = keras.layers.Input((6, 8), name="x")
    att = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, name="mha")(x, x)
    if err is not None:
        att = _ScaledGradient(err, name="wrong_gradient")(att)
    h = keras.layers.LayerNormalization(name="ln")(x + att)
    h = keras.layers.GlobalAveragePooling1D(name="pool")(h)
    return keras.Model(x, keras.layers.Dense(3, activation="softmax", name="head")(h), name="mha_block")


def mha_block_wrong():
    """``mha_block`` (the same weights) with a custom gradient on the attention output wrong by 1e-4 relative."""
    return mha_block(1e-4)


def encoder_block():
    """tf-keras pre-norm Transformer encoder block: LayerNormalization, MultiHeadAttention(4 heads, key_dim 8),
    residual, LayerNormalization, Dense(32, relu), Dense(16), residual, Dense(3); float32 ``x`` [None, 8, 16] -> ``y``.

    Two FusedBatchNormV3 (the layer norms). In float32 (before the rewrite) a default audit reported a false GA201
    for its variables at the synthesised point (relative 3.0e-3 against a bound of 2.9e-3).
    """
    keras.utils.set_random_seed(4)
    x = keras.layers.Input((8, 16), name="x")
    n = keras.layers.LayerNormalization(name="ln1")(x)
    h = x + keras.layers.MultiHeadAttention(num_heads=4, key_dim=8, name="mha")(n, n)
    f = keras.layers.LayerNormalization(name="ln2")(h)
    f = keras.layers.Dense(32, activation="relu", name="ff1")(f)
    h = h + keras.layers.Dense(16, name="ff2")(f)
    return keras.Model(x, keras.layers.Dense(3, name="head")(h), name="encoder_block")


def bn_cnn():
    """tf-keras Conv2D(4) -> BatchNormalization -> ReLU -> Conv2D(4) -> BatchNormalization -> ReLU -> global mean ->
    Dense(2), served in inference mode; float32 ``x`` [None, 8, 8, 3] -> ``y``.

    Each BatchNormalization is a FusedBatchNormV3 with is_training=False, reading its moving mean and variance
    (set to random values, so that inference differs from training); they are non-trainable, not sources.
    """
    keras.utils.set_random_seed(7)
    x = keras.layers.Input((8, 8, 3), name="x")
    h = x
    for i in (1, 2):
        h = keras.layers.Conv2D(4, 3, padding="same", name=f"conv{i}")(h)
        h = keras.layers.BatchNormalization(name=f"bn{i}")(h)
        h = keras.layers.ReLU(name=f"relu{i}")(h)
    h = keras.layers.GlobalAveragePooling2D(name="pool")(h)
    model = keras.Model(x, keras.layers.Dense(2, name="head")(h), name="bn_cnn")
    rng = np.random.default_rng(7)
    for i in (1, 2):
        bn = model.get_layer(f"bn{i}")
        bn.set_weights([rng.uniform(0.5, 1.5, 4), rng.normal(0, 0.3, 4), rng.normal(0, 0.5, 4), rng.uniform(0.5, 2, 4)])
    return model


MODELS = {"tfkeras_lstm_masked": lstm_masked, "tfkeras_gru_unmasked": gru_unmasked,
          "tfkeras_training_head": training_head, "tfkeras_mha_block": mha_block,
          "tfkeras_mha_block_wrong": mha_block_wrong, "tfkeras_encoder_block": encoder_block,
          "tfkeras_bn_cnn": bn_cnn}
# The float-input models: their input shape (after the batch) and the seed of their recorded inputs.
FLOAT_INPUTS = {"tfkeras_mha_block": ((6, 8), 21), "tfkeras_mha_block_wrong": ((6, 8), 21),
                "tfkeras_encoder_block": ((8, 16), 22), "tfkeras_bn_cnn": ((8, 8, 3), 23)}
SAVED_WHOLE = {"tfkeras_training_head"}  # tf.saved_model.save(model): Keras writes its own traces too


def _build_whole(name, out_dir):
    model = MODELS[name]()
    path = os.path.join(out_dir, name)
    tf.saved_model.save(model, path)
    x = np.random.default_rng(12).normal(size=(3, 4)).astype(np.float32)
    doc = write_truth(path, {"serving_default": {"input_1": (x, "real, N(0, 1)")}}, LIBRARY, os.path.basename(__file__),
                      notes=MODELS[name].__doc__.strip().splitlines()[0])
    return path, doc


def _build_float(name, out_dir):
    """A float-input model served in inference mode; its custom gradients (the broken twin's) saved with it."""
    model = MODELS[name]()
    shape, seed = FLOAT_INPUTS[name]

    @tf.function(input_signature=[tf.TensorSpec([None, *shape], tf.float32, name="x")])
    def serve(x):
        return {"y": model(x, training=False)}

    path = os.path.join(out_dir, name)
    root = tf.Module()
    root.weights = list(model.variables)
    root.serve = serve
    tf.saved_model.save(root, path, signatures={"serving_default": serve},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    x = np.random.default_rng(seed).normal(size=(3, *shape)).astype(np.float32)
    doc = write_truth(path, {"serving_default": {"x": (x, "real, N(0, 1)")}}, LIBRARY, os.path.basename(__file__),
                      notes=MODELS[name].__doc__.strip().splitlines()[0])
    return path, doc


def build(name, out_dir=HERE):
    if name in SAVED_WHOLE:
        return _build_whole(name, out_dir)
    if name in FLOAT_INPUTS:
        return _build_float(name, out_dir)
    model = MODELS[name]()

    @tf.function(input_signature=[tf.TensorSpec([None, SEQ], tf.int32, name="ids")])
    def serve(ids):
        return {"y": model(ids, training=False)}

    path = os.path.join(out_dir, name)
    # A tf.Module root holding the model's variables: saving the Keras 2 model itself also writes every
    # layer's call functions (2.3 MB for the masked LSTM); the serving graph is the same.
    root = tf.Module()
    root.weights = list(model.variables)
    root.serve = serve
    tf.saved_model.save(root, path, signatures={"serving_default": serve})
    rng = np.random.default_rng(11)
    ids = rng.integers(1, VOCAB, size=(3, SEQ)).astype(np.int32)
    masked = "unmasked" not in name
    if masked:
        ids[0, 7:] = 0
        ids[1, 4:] = 0
    domain = "token ids in [1, 50)" + ("; 0 = padding, trailing only (rows 0, 1)" if masked else "")
    pad = np.zeros((2, SEQ), np.int32)
    r = signature_truth(path, "serving_default", {"ids": pad}, second_order=False)
    out = tf.saved_model.load(path).signatures["serving_default"](ids=tf.constant(pad))
    extra = {"all_padding": {"ids": "int32 [2, 10], all 0",
                             "outputs": {k: v.numpy().reshape(-1).tolist() for k, v in out.items()},
                             "pairs": r["pairs"]}}
    doc = write_truth(path, {"serving_default": {"ids": (ids, domain)}}, LIBRARY, os.path.basename(__file__),
                      notes=MODELS[name].__doc__.strip().splitlines()[0], extra=extra)
    return path, doc


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for n in (sys.argv[2:] or MODELS):
        p, d = build(n, out)
        print(p, table(d))
