"""Helpers shared by test modules (conftest.py holds the fixtures)."""

from __future__ import annotations


def save_module(module, path: str, fn=None) -> str:
    """Save a tf.Module with `fn` (default: its __call__) as the serving_default signature."""
    import tensorflow as tf

    tf.saved_model.save(module, path, signatures={"serving_default": fn or module.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return path
