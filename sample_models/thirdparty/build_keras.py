"""Keras 3 text models and a labels-input model, exported with ``model.export`` (main environment)::

    python3 sample_models/thirdparty/build_keras.py [OUT_DIR] [NAME...]

Keras 3 (the main environment's, TensorFlow backend); ``model.export`` writes the signatures ``serve``
and ``serving_default`` with the ``keras.Input`` names as input keys. Fixed seeds, no downloads.
Writes OUT_DIR/<name>/ with truth.json and inputs.npz (see _truth.py).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import signature_truth, table, write_truth

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = {"name": "keras", "version": keras.__version__}
VOCAB, SEQ = 50, 10


def _text(rnn, mask_zero):
    keras.utils.set_random_seed(3)
    ids = keras.Input((SEQ,), dtype="int32", name="ids")
    h = keras.layers.Embedding(VOCAB, 8, mask_zero=mask_zero, name="embedding")(ids)
    h = rnn(6, name=rnn.__name__.lower())(h)
    out = keras.layers.Dense(2, name="head")(h)
    return keras.Model(ids, out, name="text")


def lstm_masked():
    """Embedding(50, 8, mask_zero=True) -> LSTM(6) -> Dense(2); int32 ``ids`` [None, 10], 0 = padding.

    Sources: the trainable variables only (ids are integers). Expected: embedding/embeddings, the
    LSTM kernels and bias, head/kernel, head/bias -> output_0 connected (While loop; the mask selects
    between new and carried state). Needs ids in [1, 50) with padding only at the end: an all-zero
    input is all padding: the output is then the head bias alone and every gradient but head/bias's
    is exactly zero (``all_padding`` in truth.json), so a numeric check on it has nothing to compare.
    """
    return _text(keras.layers.LSTM, True)


def gru_masked():
    """Embedding(50, 8, mask_zero=True) -> GRU(6) -> Dense(2); int32 ``ids`` [None, 10], 0 = padding."""
    return _text(keras.layers.GRU, True)


def lstm_unmasked():
    """Embedding(50, 8) -> LSTM(6) -> Dense(2) without masking; int32 ``ids`` [None, 10]."""
    return _text(keras.layers.LSTM, False)


def gru_unmasked():
    """Embedding(50, 8) -> GRU(6) -> Dense(2) without masking; int32 ``ids`` [None, 10]."""
    return _text(keras.layers.GRU, False)


class SoftmaxXent(keras.layers.Layer):
    def call(self, labels, logits):
        return tf.nn.softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def softmax_xent():
    """Dense(3) logits and tf.nn.softmax_cross_entropy_with_logits(labels, logits) per example.

    Inputs ``x`` float32 [None, 4] and ``labels`` float32 [None, 3] (a distribution per row: TF's
    registered gradient for ``labels`` is only the derivative of the forward value on rows that sum to
    1). Outputs ``output_0`` = logits [None, 3], ``output_1`` = loss [None]. Expected: x, labels,
    dense/kernel, dense/bias -> loss connected; labels -> logits none (no path).
    """
    keras.utils.set_random_seed(4)
    x = keras.Input((4,), name="x")
    labels = keras.Input((3,), name="labels")
    logits = keras.layers.Dense(3, name="dense")(x)
    loss = SoftmaxXent(name="xent")(labels, logits)
    return keras.Model([x, labels], [logits, loss], name="xent")


def _ids(masked, rng):
    ids = rng.integers(1, VOCAB, size=(3, SEQ)).astype(np.int32)
    if masked:
        ids[0, 7:] = 0  # trailing padding
        ids[1, 4:] = 0
    return ids


def _inputs(name):
    rng = np.random.default_rng(11)
    if name.startswith("keras_softmax"):
        labels = rng.dirichlet(np.ones(3), size=3).astype(np.float32)
        return {"x": (rng.normal(size=(3, 4)).astype(np.float32), "real, N(0, 1)"),
                "labels": (labels, "rows are distributions: >= 0, sum 1 (Dirichlet(1,1,1))")}
    masked = "unmasked" not in name
    domain = "token ids in [1, 50)" + ("; 0 = padding, trailing only (rows 0, 1)" if masked else "")
    return {"ids": (_ids(masked, rng), domain)}


MODELS = {"keras_lstm_masked": lstm_masked, "keras_gru_masked": gru_masked,
          "keras_lstm_unmasked": lstm_unmasked, "keras_gru_unmasked": gru_unmasked,
          "keras_softmax_xent": softmax_xent}


def _all_padding(path):
    """What the model does when every token is padding (id 0), the input gradaudit used to synthesise."""
    ids = np.zeros((2, SEQ), np.int32)
    sig = tf.saved_model.load(path).signatures["serving_default"]
    out = sig(ids=tf.constant(ids))
    r = signature_truth(path, "serving_default", {"ids": ids}, second_order=False)
    return {"ids": "int32 [2, 10], all 0",
            "outputs": {k: v.numpy().reshape(-1).tolist() for k, v in out.items()},
            "output_finite": {k: bool(np.all(np.isfinite(v.numpy()))) for k, v in out.items()},
            "pairs": r["pairs"]}


def build(name, out_dir=HERE):
    model = MODELS[name]()
    path = os.path.join(out_dir, name)
    model.export(path, verbose=False)
    inputs = _inputs(name)
    extra = None
    if "softmax" not in name:
        extra = {"all_padding": _all_padding(path)}
    doc = write_truth(path, {"serving_default": inputs}, LIBRARY, os.path.basename(__file__),
                      notes=MODELS[name].__doc__.strip().splitlines()[0], extra=extra)
    return path, doc


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for n in (sys.argv[2:] or MODELS):
        p, d = build(n, out)
        print(p, table(d), d.get("all_padding", {}).get("output_finite"))
