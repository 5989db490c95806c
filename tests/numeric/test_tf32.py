"""TensorFloat-32 (float32 matmuls and convolutions at a 10-bit mantissa on Ampere and newer GPUs) is off while
the checks run and as the user had it after; grappler likewise. This machine has no GPU: the test holds the
setting TensorFlow reads, which is what a GPU run would obey."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

import gradaudit.runtime
from gradaudit.api import AuditOptions, audit_saved_model


@pytest.mark.parametrize("users", [True, False])
def test_tf32_is_off_during_the_checks_and_restored_after(samples, monkeypatch, users):
    seen: list[tuple[bool, bool]] = []
    real = gradaudit.runtime._numeric

    def recording(*args, **kwargs):
        seen.append((tf.config.experimental.tensor_float_32_execution_enabled(),
                     bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer"))))
        return real(*args, **kwargs)

    monkeypatch.setattr(gradaudit.runtime, "_numeric", recording)
    before = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.experimental.enable_tensor_float_32_execution(users)
    try:
        report = audit_saved_model(os.path.join(samples, "mlp"), AuditOptions())
        assert seen == [(False, True)]  # TF32 off and grappler off while the checks ran
        assert tf.config.experimental.tensor_float_32_execution_enabled() is users  # the user's setting again
        assert report.numeric and {n.status for n in report.numeric if n.scale is None} == {"pass"}
    finally:
        tf.config.experimental.enable_tensor_float_32_execution(before)
