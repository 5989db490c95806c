"""Which TensorFlow dtypes carry a gradient."""

from __future__ import annotations

import functools

from tensorflow.python.framework import dtypes as tf_dtypes

DT_INVALID = 0
DT_BOOL = 10
DT_RESOURCE = 20
DT_VARIANT = 21


@functools.cache
def carries_gradient(dtype: int) -> bool:
    """Float and complex tensors, resource handles (read by ReadVariableOp & co.) and variants
    (TensorLists in while loops) can carry a gradient; an unknown dtype is assumed to."""
    if dtype == DT_INVALID:
        return True
    if dtype > 100:  # reference dtypes of TF1 variables
        dtype -= 100
    if dtype in (DT_RESOURCE, DT_VARIANT):
        return True
    try:
        dt = tf_dtypes.as_dtype(dtype)
    except TypeError:
        return False
    return dt.is_floating or dt.is_complex


@functools.cache
def dtype_name(dtype: int) -> str:
    if dtype == DT_INVALID:
        return "unknown"
    try:
        return tf_dtypes.as_dtype(dtype).name
    except TypeError:
        return f"dtype{dtype}"


@functools.cache
def is_float(dtype: int) -> bool:
    """A value dtype that is floating point or complex (not resource/variant)."""
    try:
        dt = tf_dtypes.as_dtype(dtype)
    except TypeError:
        return False
    return dt.is_floating or dt.is_complex
