"""--inputs that hold some of the signature's inputs: the others are synthesised, and the report says which."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class _TwoInputs(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x"),
                                  tf.TensorSpec([None, 3], tf.float32, name="labels")])
    def __call__(self, x, labels):
        return {"loss": tf.reduce_sum(tf.square(tf.tanh(x) - labels), axis=1)}


def test_an_input_the_file_lacks_is_said_to_be_synthesised(tmp_path):
    path = save_module(_TwoInputs(), str(tmp_path / "m"))
    np.savez(tmp_path / "part.npz", x=np.ones((2, 3), np.float32))
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "part.npz")))
    assert any("holds no labels" in n and "synthesised" in n for n in report.notes_of("numeric"))
    np.savez(tmp_path / "all.npz", x=np.ones((2, 3), np.float32), labels=np.zeros((2, 3), np.float32))
    full = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "all.npz")))
    assert not any("holds no" in n.text for n in full.notes)
