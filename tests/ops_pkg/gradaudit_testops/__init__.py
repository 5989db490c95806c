"""gradaudit_testops: a real custom-op package for gradaudit's tests (importing it is what --load-ops does).

Importing it loads the compiled ``ops.cc`` with ``tf.load_op_library`` and registers the Python gradient of
``GaScale``. The shared library is ``$GRADAUDIT_TESTOPS_SO`` when that is set, else ``_gradaudit_testops.so``
beside this file; build it with ``python tests/ops_pkg/gradaudit_testops/build.py OUT_DIR`` (see build.py).

Ops (all CPU, float32 / string):
  GaScale   float -> float, y = 2 * x; gradient 2 * dy, registered here (not in the .so).
  GaNoGrad  float -> float, y = x * x + 1; no gradient registered anywhere (LookupError under a tape).
  GaStrLen  string -> int32, byte length of each string; not differentiable (integer output).
"""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow.python.framework import ops as _ops

SO_ENV = "GRADAUDIT_TESTOPS_SO"
SO_NAME = "_gradaudit_testops.so"
SO_PATH = os.environ.get(SO_ENV) or os.path.join(os.path.dirname(os.path.abspath(__file__)), SO_NAME)

if not os.path.exists(SO_PATH):
    raise ImportError(f"gradaudit_testops: no compiled ops at {SO_PATH}; build them with "
                      f"'python {os.path.join(os.path.dirname(os.path.abspath(__file__)), 'build.py')} OUT_DIR' "
                      f"and set {SO_ENV} to the .so it prints")

library = tf.load_op_library(SO_PATH)
ga_scale = library.ga_scale
ga_no_grad = library.ga_no_grad
ga_str_len = library.ga_str_len


def _ga_scale_grad(op, dy):
    return 2.0 * dy


if "GaScale" not in _ops._gradient_registry.list():  # a second import (another name, reload) must not fail
    tf.RegisterGradient("GaScale")(_ga_scale_grad)
