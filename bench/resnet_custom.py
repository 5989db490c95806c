"""A ResNet-sized Keras model (about 24M parameters: ResNet50's stages and widths at 96x96 input) whose one block
has a custom-gradient activation, exact or wrong by a relative `--wrong` (issue 20: a wrong custom gradient inside a
ResNet-sized model must be caught). Exported with `model.export`; weights random, never downloaded.

    python bench/resnet_custom.py OUT_DIR [--wrong 0.01]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def build(wrong: float):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)

    @tf.custom_gradient
    def softplus(x):
        def grad(dy):
            return dy * tf.sigmoid(x) * (1.0 + wrong)

        return tf.math.softplus(x), grad

    class CustomSoftplus(keras.layers.Layer):
        def call(self, x):
            return softplus(x)

    def block(x, filters: int, stride: int, custom: bool):
        shortcut = x
        y = keras.layers.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.ReLU()(y)
        y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
        y = keras.layers.BatchNormalization()(y)
        y = CustomSoftplus()(y) if custom else keras.layers.ReLU()(y)
        y = keras.layers.Conv2D(4 * filters, 1, use_bias=False)(y)
        y = keras.layers.BatchNormalization()(y)
        if stride != 1 or shortcut.shape[-1] != 4 * filters:
            shortcut = keras.layers.Conv2D(4 * filters, 1, strides=stride, use_bias=False)(shortcut)
            shortcut = keras.layers.BatchNormalization()(shortcut)
        return keras.layers.ReLU()(keras.layers.Add()([y, shortcut]))

    inputs = keras.Input((96, 96, 3))
    x = keras.layers.Conv2D(64, 7, strides=2, padding="same")(inputs)
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(keras.layers.ReLU()(x))
    for stage, (filters, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3))):
        for b in range(blocks):
            x = block(x, filters, 2 if b == 0 and stage > 0 else 1, custom=(stage == 2 and b == 1))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(1000, activation="softmax")(x))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--wrong", type=float, default=0.01)
    args = parser.parse_args()
    model = build(args.wrong)
    model.export(args.out, verbose=False)
    print(f"{model.count_params():,} parameters, custom gradient wrong by {args.wrong:g}")


if __name__ == "__main__":
    main()
