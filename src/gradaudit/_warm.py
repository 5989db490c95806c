"""Imported by the process the model-running children fork from: TensorFlow is imported there once."""

from .batch import import_tensorflow_quietly

import_tensorflow_quietly()
