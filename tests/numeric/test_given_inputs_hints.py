"""With --inputs, no check and no 'incomplete' line tells the user to give real examples with --inputs: they
did; the reason names what the given point does instead."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class Relu(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.nn.relu(x)}


def test_inputs_that_mask_everything_say_so_without_asking_for_inputs(tmp_path):
    path = save_module(Relu(), str(tmp_path / "relu"))
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=-np.ones((2, 3), "float32"))  # every ReLU off: gradient and differences both zero
    r = audit_saved_model(path, AuditOptions(inputs_file=str(inputs), probe_scales=(1.0,)))
    (base,) = [n for n in r.numeric if n.scale is None]
    assert base.status == "inconclusive" and "the inputs given may mask everything out" in base.reason
    assert r.verdict() == "incomplete" and r.incomplete
    assert not any("--inputs" in line for line in r.incomplete + [n.reason or "" for n in r.numeric])
    synthesised = audit_saved_model(path, AuditOptions(probe_scales=(1.0,)))
    assert all(n.status != "inconclusive" or "--inputs" in (n.reason or "") for n in synthesised.numeric)
