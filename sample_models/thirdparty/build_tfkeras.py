"""tf-keras (Keras 2) text models saved with ``tf.saved_model.save`` (run in its own venv, see README.md)::

    /work/venvs/tfkeras/bin/python sample_models/thirdparty/build_tfkeras.py [OUT_DIR] [NAME...]

Keras 2's LSTM/GRU layers export two implementations of the recurrence (a CuDNN one and a standard
While loop) as functions tagged ``_api_implements``/``_api_preferred_device`` for Grappler's
implementation selector, a graph shape Keras 3 does not write. One signature,
``serving_default(ids) -> {"y": ...}``, saved from a ``tf.Module`` that holds the model's variables and
the serving function (saving the Keras 2 model object itself writes every layer's call functions too:
2.3 MB for the masked LSTM). Fixed seeds, no downloads. Writes OUT_DIR/<name>/ with
truth.json and inputs.npz (see _truth.py).
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


MODELS = {"tfkeras_lstm_masked": lstm_masked, "tfkeras_gru_unmasked": gru_unmasked,
          "tfkeras_training_head": training_head}
SAVED_WHOLE = {"tfkeras_training_head"}  # tf.saved_model.save(model): Keras writes its own traces too


def _build_whole(name, out_dir):
    model = MODELS[name]()
    path = os.path.join(out_dir, name)
    tf.saved_model.save(model, path)
    x = np.random.default_rng(12).normal(size=(3, 4)).astype(np.float32)
    doc = write_truth(path, {"serving_default": {"input_1": (x, "real, N(0, 1)")}}, LIBRARY, os.path.basename(__file__),
                      notes=MODELS[name].__doc__.strip().splitlines()[0])
    return path, doc


def build(name, out_dir=HERE):
    if name in SAVED_WHOLE:
        return _build_whole(name, out_dir)
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
