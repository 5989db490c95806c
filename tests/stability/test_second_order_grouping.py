"""One op at fault, one second-order-mismatch: a custom gradient with tf.stop_gradient inside breaks the second
derivative with respect to every input it reaches; the finding names it once, with each input's numbers."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def test_one_finding_lists_every_input_the_custom_gradient_breaks(tmp_path):
    import numpy as np
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    @tf.custom_gradient
    def act(x):
        def grad(dy):
            return dy * tf.stop_gradient(tf.cos(x))  # right first derivative, no second

        return tf.sin(x), grad

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.full((4, 3), 0.3, "float32"), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32), tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, a, b):
            return {"y": act(a * 0.5 + b) @ self.w}

    m = M()
    path = str(tmp_path / "stopped_second_order")
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    r = audit_saved_model(path, AuditOptions(order=2, probe_scales=(1.0,)))
    (f,) = [f for f in r.findings if f.rule == "second-order-mismatch"]
    assert set(f.sources) == {"a", "b"} and f.outputs == ("y",)
    assert f.op is not None and f.op.op_type == "IdentityN" and "tf.stop_gradient" in f.message
    assert "a: 0.0000e+00 vs " in f.message and "b: 0.0000e+00 vs " in f.message
    # each input's check is still its own row
    rows = {n.source: n.status for n in r.numeric if n.order == 2}
    assert rows["a"] == rows["b"] == "fail"
