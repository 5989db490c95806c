"""Helpers shared by test modules (conftest.py holds the fixtures)."""

from __future__ import annotations


def save_module(module, path: str, fn=None) -> str:
    """Save a tf.Module with `fn` (default: its __call__) as the serving_default signature."""
    import tensorflow as tf

    tf.saved_model.save(module, path, signatures={"serving_default": fn or module.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return path


def scaled_tanh(factor: float):
    """tanh with a custom gradient `factor` times the true one (1.0: the true gradient), for a wrong custom
    gradient of known size."""
    import tensorflow as tf

    @tf.custom_gradient
    def f(x):
        y = tf.tanh(x)
        return y, lambda dy: dy * (1.0 - y * y) * factor

    return f


def save_slow_model(path: str) -> str:
    """A healthy model whose forward pass loops 10^9 times: a run is still inside the model when a timeout or
    a signal stops it."""
    import tensorflow as tf

    class Slow(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            _, h = tf.while_loop(lambda i, h: i < 10**9, lambda i, h: (i + 1, tf.sin(h) * self.w), (0, x))
            return {"y": h}

    return save_module(Slow(), path)
