"""SavedModels written by TensorFlow Model Optimization on tf-keras (run in its own venv, see README.md)::

    /work/venvs/tfmot/bin/python sample_models/thirdparty/build_tfmot.py [OUT_DIR] [NAME...]

Quantization-aware training (``quantize_model``) and magnitude pruning (``prune_low_magnitude``, kept
wrapped or stripped with ``strip_pruning``) of small tf-keras models, trained for a few steps on fixed
random data (so the quantizer ranges and the pruning masks are real), then exported with
``tf.saved_model.save`` and one signature ``serving_default(x) -> {"y": ...}``. No downloads.
Writes OUT_DIR/<name>/ with truth.json and inputs.npz (see _truth.py).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # tfmot works on tf-keras (Keras 2), not Keras 3

import numpy as np
import tensorflow as tf
import tensorflow_model_optimization as tfmot
import tf_keras as keras

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _truth import table, write_truth

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = {"name": "tensorflow-model-optimization", "version": tfmot.__version__,
           "tf-keras": keras.__version__}


def _data(shape, n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n,) + shape).astype(np.float32)
    y = rng.normal(size=(n, 2)).astype(np.float32)
    return x, y


def _fit(model, shape, callbacks=(), epochs=2):
    x, y = _data(shape)
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, callbacks=list(callbacks), shuffle=False)


def _dense_base():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.layers.Input((4,), name="x"),
                             keras.layers.Dense(8, activation="relu", name="dense"),
                             keras.layers.Dense(2, name="head")], name="mlp")


def _conv_base():
    keras.utils.set_random_seed(2)
    return keras.Sequential([keras.layers.Input((6, 6, 1), name="x"),
                             keras.layers.Conv2D(4, 3, name="conv"),
                             keras.layers.BatchNormalization(name="bn"),
                             keras.layers.ReLU(name="relu"),
                             keras.layers.Flatten(name="flatten"),
                             keras.layers.Dense(2, name="head")], name="cnn")


def qat_mlp():
    """quantize_model(Dense(8, relu) -> Dense(2)): FakeQuantWithMinMaxVars on input, weights and activations.

    Trainable: dense/kernel, dense/bias, head/kernel, head/bias (the quantizer min/max variables and
    optimizer_step are non-trainable). Expected: every source -> y connected (fake quant's
    straight-through gradient, zero outside the quantizer's [min, max]).
    """
    model = tfmot.quantization.keras.quantize_model(_dense_base())
    _fit(model, (4,))
    return model, [None, 4]


def qat_cnn():
    """quantize_model(Conv2D -> BatchNorm -> ReLU -> Dense): tfmot folds the BatchNorm into the conv.

    Expected: x and the trainable conv/bn/head weights -> y connected; BN moving statistics are
    non-trainable.
    """
    model = tfmot.quantization.keras.quantize_model(_conv_base())
    _fit(model, (6, 6, 1))
    return model, [None, 6, 6, 1]


def _pruned():
    schedule = tfmot.sparsity.keras.ConstantSparsity(0.5, begin_step=0, frequency=1)
    model = tfmot.sparsity.keras.prune_low_magnitude(_dense_base(), pruning_schedule=schedule)
    _fit(model, (4,), callbacks=[tfmot.sparsity.keras.UpdatePruningStep()])
    return model


def pruned_mlp():
    """prune_low_magnitude(Dense(8, relu) -> Dense(2)), kept wrapped (50% sparsity, masks applied).

    The wrapper's inference call assigns ``kernel * mask`` back to the kernel (AssignVariableOp) before
    the layer reads it; mask and threshold are non-trainable variables. Expected: x, kernels and
    biases -> y connected (the gradient reaches every kernel entry, masked ones included).
    """
    return _pruned(), [None, 4]


def pruned_stripped_mlp():
    """strip_pruning(prune_low_magnitude(...)): a plain Dense model with a 50%-sparse kernel.

    Expected: x, dense/kernel, dense/bias, head/kernel, head/bias -> y connected.
    """
    return tfmot.sparsity.keras.strip_pruning(_pruned()), [None, 4]


MODELS = {"tfmot_qat_mlp": qat_mlp, "tfmot_qat_cnn": qat_cnn,
          "tfmot_pruned_mlp": pruned_mlp, "tfmot_pruned_stripped_mlp": pruned_stripped_mlp}


def build(name, out_dir=HERE):
    model, shape = MODELS[name]()

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="x")])
    def serve(x):
        return {"y": model(x, training=False)}

    path = os.path.join(out_dir, name)
    tf.saved_model.save(model, path, signatures={"serving_default": serve},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    x = np.random.default_rng(5).normal(size=[3] + shape[1:]).astype(np.float32)
    doc = write_truth(path, {"serving_default": {"x": (x, "real, N(0, 1)")}}, LIBRARY,
                      os.path.basename(__file__), notes=MODELS[name].__doc__.strip().splitlines()[0])
    return path, doc


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else HERE
    for n in (sys.argv[2:] or MODELS):
        p, d = build(n, out)
        print(p, table(d), sorted(d["variables"].items()))
