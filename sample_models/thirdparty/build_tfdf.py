"""SavedModels written with tensorflow-decision-forests: float outputs computed by the forest inference op.

Run in the TF-DF venv (tensorflow-decision-forests 1.12.0, which pins TensorFlow 2.19.0 and tf_keras 2.19)::

    /work/venvs/tfdf/bin/python sample_models/thirdparty/build_tfdf.py [OUT_DIR]

The venv: ``python3.11 -m venv /work/venvs/tfdf && /work/venvs/tfdf/bin/pip install
tensorflow-decision-forests==1.12.0 ydf==0.11.0`` (ydf 0.16, which pip picks by default, is generated with
protobuf 6 while TensorFlow 2.19 installs protobuf 5: importing tensorflow_decision_forests then fails with
"Detected incompatible Protobuf Gencode/Runtime versions").

The forests are trained here on 48 synthetic rows (numpy, seed 0) in about a second: no data set, no
download. The trained YDF model lives in the SavedModel's assets/ folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf
import tensorflow_decision_forests as tfdf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import truth


def _data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 3)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64)
    return x, y


def _train_gbt():
    """Gradient boosted trees, 5 trees of depth <= 3, binary classification of 3 float features; the Keras
    model outputs the probability of class 1, float32 [None,1]."""
    x, y = _data()
    model = tfdf.keras.GradientBoostedTreesModel(num_trees=5, max_depth=3, min_examples=2, verbose=0,
                                                 random_seed=1)
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(16), verbose=0)
    return model


def tfdf_gbt(export_dir: str) -> dict:
    """The Keras model itself, saved with ``model.save`` (tf_keras SavedModel): signature ``serving_default``,
    input ``input_1`` float32 [None,3], output ``output_1`` float32 [None,1]. No trainable variable: the
    only float path from ``input_1`` to ``output_1`` goes through the forest inference op, which has no
    gradient."""
    _train_gbt().save(export_dir)
    return {"serving_default": {"input_1": np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)}}


class DenseThenForest(tf.Module):
    """A trainable linear map followed by the forest, beside a plain Dense path.

    Input ``x`` float32 [None,3]; trainable ``dense/kernel`` [3,3] (feeds the forest) and ``head/w`` [3]
    (plain path). Outputs ``forest`` = gbt(x @ dense/kernel) [None,1], float, only through the inference op;
    ``y`` = forest + sum(x * head/w) [None,1], a built-in path beside the forest path.
    """

    def __init__(self, forest):
        super().__init__()
        self.forest = forest
        self.kernel = tf.Variable([[1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [0.0, -0.2, 1.0]], name="dense/kernel")
        self.w = tf.Variable([0.5, -0.25, 1.0], name="head/w")

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        p = self.forest(tf.matmul(x, self.kernel))
        return {"forest": p, "y": p + tf.reduce_sum(x * self.w, axis=-1, keepdims=True)}


def tfdf_dense_forest(export_dir: str) -> dict:
    m = DenseThenForest(_train_gbt())
    tf.saved_model.save(m, export_dir, signatures={"serving_default": m.__call__.get_concrete_function()})
    return {"serving_default": {"x": np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)}}


MODELS = {"tfdf_gbt": tfdf_gbt, "tfdf_dense_forest": tfdf_dense_forest}


def main(out_dir: str) -> None:
    paths = []
    for name, builder in MODELS.items():
        path = os.path.join(out_dir, name)
        ins = builder(path)
        data = truth.signature_truth(path, ins)
        data.update(model=name, builder="build_tfdf.py",
                    environment=truth.environment("tensorflow-decision-forests", tfdf.__version__),
                    load_ops="tensorflow_decision_forests")
        truth.write(path, data)
        np.savez(os.path.join(path, "inputs.npz"), **ins["serving_default"])
        paths.append(path)
    subprocess.run([os.environ.get("GRADAUDIT_PLAIN_PYTHON", "python3"), os.path.join(HERE, "truth.py"),
                    "census", *paths], check=True)
    for p in paths:
        with open(os.path.join(p, "truth.json"), encoding="utf-8") as f:
            data = json.load(f)
        for row in data["entry_points"]["serving_default"]["pairs"]:
            print(f"{os.path.basename(p)} {row['source']} -> {row['output']}: {row['truth']}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else HERE)
