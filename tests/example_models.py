"""Python targets for tests: audited as `example_models:NAME` (module) and by file path."""

import keras
import tensorflow as tf

w = tf.Variable(tf.ones([4, 3]), name="w")


@tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
def argmax_head(x):
    h = x @ w
    return {"probs": tf.nn.softmax(h), "cls": tf.cast(tf.argmax(h, -1), tf.float32)}


@tf.function
def no_signature(x):
    return {"y": tf.sin(x)}


@tf.custom_gradient
def _sin_wrong(x):
    return tf.sin(x), lambda dy: dy * tf.cos(x) * 2.0


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
def wrong_gradient(x):
    return {"y": _sin_wrong(x)}


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
def custom_ste(x):
    @tf.custom_gradient
    def rounded(v):
        return tf.round(v), lambda dy: dy

    return {"y": rounded(x) * 3.0}


def make_mlp():
    keras.utils.set_random_seed(0)
    inp = keras.Input((8,), name="x")
    h = keras.layers.Dense(4, activation="relu", name="d1")(inp)
    return keras.Model(inp, keras.layers.Dense(2, name="d2")(h))


class Scaler(tf.Module):
    def __init__(self):
        self.a = tf.Variable(1.5, name="a")
        self.unused = tf.Variable(2.0, name="unused")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": x * self.a}


scaler = Scaler()
concrete = argmax_head.get_concrete_function()
answer = 42


@tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
def log1pexp_naive(x):
    return tf.math.log(1.0 + tf.exp(x))


def make_log_sigmoid_model():
    inp = keras.Input((3,), name="x")
    return keras.Model(inp, keras.ops.log(keras.ops.sigmoid(keras.layers.Dense(2, name="d")(inp))))
