"""ROI pooling (`tf.image.crop_and_resize`) with box inputs: synthesised boxes the op accepts, and the image's and
the boxes' gradients decided by the checks (float32 decides them: CropAndResize has no float64 version), a
wrong custom gradient beside them still caught. Truth: tf.GradientTape on the loaded model against central
differences of its float32 forward (accumulated in float64) along a random direction of the boxes."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


@tf.custom_gradient
def _scaled_wrong(z):
    return z * 1.0, lambda dy: dy * 1.05


def _roi(wrong: bool):
    class M(tf.Module):
        def __init__(self):
            self.k = tf.Variable(tf.random.stateless_normal([3, 3, 2, 2], seed=[1, 2]) * 0.3, name="k")

        @tf.function(input_signature=[tf.TensorSpec([1, 8, 8, 2], tf.float32, name="img"),
                                      tf.TensorSpec([2, 4], tf.float32, name="boxes")])
        def __call__(self, img, boxes):
            h = tf.nn.conv2d(img, self.k, 1, "SAME")
            h = _scaled_wrong(h) if wrong else h
            crops = tf.image.crop_and_resize(h, boxes, [0, 0], [4, 4])
            return {"y": tf.reduce_sum(crops ** 2, axis=[1, 2, 3])}

    return M()


@pytest.mark.parametrize("wrong", [False, True])
def test_roi_pooling_is_decided_on_its_boxes_and_image(tmp_path, wrong):
    report = audit_saved_model(save_module(_roi(wrong), str(tmp_path / "roi")), AuditOptions())
    base = {n.source: n for n in report.numeric if n.scale is None}
    assert {"img", "boxes"} <= set(base)
    assert base["boxes"].status == "pass"  # the boxes' own gradient, not through the custom gradient
    assert not [line for line in report.incomplete if "boxes" in line]
    if wrong:
        assert base["img"].status == "fail" and report.verdict() == "fail"
    else:
        assert {n.status for n in base.values()} == {"pass"} and report.verdict() == "pass"


def test_the_checked_gradients_are_the_true_ones(tmp_path):
    """The truth behind the pass: the loaded model's tape gradient of boxes matches central differences at boxes
    inside [0, 1], the range the synthesised boxes take."""
    path = save_module(_roi(False), str(tmp_path / "roi"))
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    rng = np.random.default_rng(3)
    img = tf.constant(rng.normal(size=(1, 8, 8, 2)), tf.float32)
    boxes = tf.Variable(np.array([[0.1, 0.2, 0.7, 0.9], [0.3, 0.05, 0.95, 0.6]], np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(fn(img=img, boxes=boxes)["y"])
    g = tape.gradient(loss, boxes).numpy()
    d = rng.normal(size=(2, 4)) * 0.01
    base = boxes.numpy().astype(np.float64)
    h = 1e-3

    def at(b):
        boxes.assign(b.astype(np.float32))
        return float(tf.reduce_sum(fn(img=img, boxes=boxes)["y"]))

    fd = (at(base + h * d) - at(base - h * d)) / (2 * h)
    assert abs(fd - float(np.sum(g * d))) < 2e-2 * abs(fd)
