"""A check over several outputs that fails while, each on its own along the same line, no output disagrees and
some agree: the others are checked apart, with the evidence a model of those outputs alone gives (tester 19: a
bilinear and a nearest-neighbour crop of the same boxes got a GA201 error, the nearest crop alone a GA203).

Truth: tf.GradientTape on the loaded model against central differences of its own forward (float64 where its ops
allow, float32 for CropAndResize, which takes boxes in float32 only): the agreeing output's gradient is the
derivative; the other's forward does not move along the line while TensorFlow's gradient is not zero (a
surrogate); a smooth output with a wrong custom gradient beside a healthy one still fails, naming that output.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import save_module

pytestmark = pytest.mark.slow


def _crops(path: str) -> str:
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.5, -0.7], name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4, 4, 2], tf.float32),
                                      tf.TensorSpec([None, 4], tf.float32)])
        def __call__(self, x, boxes):
            xs = x * self.w
            ind = tf.range(tf.shape(x)[0])
            return {"bilinear": tf.image.crop_and_resize(xs, boxes, ind, [3, 3], method="bilinear"),
                    "nearest": tf.image.crop_and_resize(xs, boxes, ind, [3, 3], method="nearest")}

    return save_module(M(), path)


def _crops_of_a_variable(path: str) -> str:
    """Tester 20's: both crops of a fixed image variable, the boxes the only input; at seed 1 the nearest crop's
    own check did not settle (its samples cross pixel edges along the line) and no warning was given."""
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.img = tf.Variable(tf.reshape(tf.sin(tf.range(72, dtype=tf.float32) * 0.37), [1, 6, 6, 2]), name="img")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="boxes")])
        def __call__(self, boxes):
            ind = tf.zeros([tf.shape(boxes)[0]], tf.int32)
            return {"bilinear": tf.image.crop_and_resize(self.img, boxes, ind, [3, 3], method="bilinear"),
                    "nearest": tf.image.crop_and_resize(self.img, boxes, ind, [3, 3], method="nearest")}

    return save_module(M(), path)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_nearest_crop_whose_differences_do_not_settle_is_still_the_named_surrogate(tmp_path, seed):
    """The op is told by its attrs: the nearest crop is named, never the bilinear one beside it (whose kinks at
    pixel edges leave its own check undecided at some seeds)."""
    from gradaudit.api import AuditOptions, audit_saved_model

    path = _crops_of_a_variable(str(tmp_path / "crops"))
    # every sample 0.05 pixel or more from a nearest crop's rounding edge (a half pixel of the 6 x 6 image)
    feed = {"boxes": np.array([[0.13, 0.21, 0.69, 0.81], [0.33, 0.08, 0.88, 0.67]], np.float32)}
    tape, differences = _tape_and_differences(path, feed, "boxes", "nearest", 1e-5)
    assert differences == 0.0 and abs(tape) > 0.1  # flat forward, a gradient all the same
    report = audit_saved_model(path, AuditOptions(seed=seed))
    assert report.verdict() == "pass", ([(f.code, f.message) for f in report.findings], report.incomplete)
    assert [(f.sources, f.outputs, f.severity.value, f.op and f.op.op_name) for f in report.findings
            if f.code == "GA203"] == [(("boxes",), ("nearest",), "warning", "CropAndResize_1")]


def _custom(path: str, wrong: float | None) -> str:
    """tanh beside a custom-gradient output: a straight-through rounding (`wrong` None), or sin whose written
    gradient is (1 + wrong) times its derivative."""
    import tensorflow as tf

    @tf.custom_gradient
    def written(h):
        if wrong is None:
            return tf.round(4 * h) / 4, lambda dy: dy
        return tf.sin(h), lambda dy: dy * tf.cos(h) * (1.0 + wrong)

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(0).standard_normal((3, 3)), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64)])
        def __call__(self, x):
            h = x @ self.w
            return {"smooth": tf.tanh(h), "written": written(h) * 2.0}

    return save_module(M(), path)


def _tape_and_differences(path: str, feed: dict, source: str, output: str, h: float) -> tuple[float, float]:
    """(<tape gradient, d>, central difference along d) of sum(u * output) with respect to `source`."""
    import tensorflow as tf

    obj = tf.saved_model.load(path)
    fn = obj.signatures["serving_default"]
    specs = fn.structured_input_signature[1]
    at = {k: tf.constant(v, specs[k].dtype) for k, v in feed.items()}
    u = np.random.default_rng(1).standard_normal(fn(**at)[output].shape)
    with tf.GradientTape() as tape:
        tape.watch(at[source])
        phi = tf.reduce_sum(tf.cast(fn(**at)[output], tf.float64) * u)
    g = np.asarray(tape.gradient(phi, at[source]), np.float64)
    d = np.random.default_rng(2).standard_normal(g.shape)

    def moved(t):
        shifted = dict(at, **{source: tf.constant(feed[source] + t * d, specs[source].dtype)})
        return float(np.sum(np.asarray(fn(**shifted)[output], np.float64) * u))

    return float(np.sum(g * d)), (moved(h) - moved(-h)) / (2 * h)


@pytest.mark.parametrize("seed", [0, 1])  # at seed 1 the two crops together did not settle: incomplete before
def test_a_nearest_crop_beside_a_bilinear_one_is_a_named_surrogate_and_the_bilinear_crop_passes(tmp_path, seed):
    from gradaudit.api import AuditOptions, audit_saved_model

    path = _crops(str(tmp_path / "crops"))
    rng = np.random.default_rng(3)
    feed = {"x": rng.standard_normal((2, 4, 4, 2)).astype(np.float32),
            "boxes": np.array([[0.12, 0.2, 0.71, 0.83], [0.3, 0.07, 0.9, 0.66]], np.float32)}
    tape, differences = _tape_and_differences(path, feed, "boxes", "bilinear", 1e-3)
    assert abs(tape - differences) <= 1e-2 * abs(differences)  # the bilinear crop's gradient is the derivative
    tape, differences = _tape_and_differences(path, feed, "boxes", "nearest", 1e-3)
    assert differences == 0.0 and abs(tape) > 1.0  # the nearest crop is flat; TensorFlow's gradient is not zero

    report = audit_saved_model(path, AuditOptions(seed=seed))
    assert report.verdict() == "pass", ([(f.code, f.message) for f in report.findings], report.incomplete)
    assert not [f for f in report.findings if f.code == "GA201"]
    surrogates = [f for f in report.findings if f.code == "GA203"]
    assert [(f.sources, f.outputs, f.severity.value, f.op and f.op.op_type) for f in surrogates] == [
        (("boxes",), ("nearest",), "warning", "CropAndResize")]
    assert "method='bilinear'" in (surrogates[0].fix or "")
    own = [n for n in report.numeric if n.source == "boxes" and n.scale is None]
    bilinear = [n.status for n in own if n.outputs.names == ("bilinear",)]
    # at seed 0 the bilinear crop on its own passes; at seed 1 its float32 differences along the line it got do
    # not settle (its kinks at pixel edges): undecided, never a failure
    assert bilinear == ["pass"] if seed == 0 else bilinear and "fail" not in bilinear, own
    assert not [n for n in own if n.outputs.names == ("bilinear", "nearest")], own  # decided apart, not together


def test_a_straight_through_custom_gradient_beside_a_smooth_output_is_an_estimator_not_a_mismatch(tmp_path):
    from gradaudit.api import AuditOptions, audit_saved_model

    path = _custom(str(tmp_path / "ste"), None)
    feed = {"x": np.random.default_rng(4).standard_normal((2, 3))}
    tape, differences = _tape_and_differences(path, feed, "x", "smooth", 1e-6)
    assert abs(tape - differences) <= 1e-6 * abs(differences)
    tape, differences = _tape_and_differences(path, feed, "x", "written", 1e-9)
    assert differences == 0.0 and abs(tape) > 0.1

    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "pass", [(f.code, f.message) for f in report.findings]
    assert not [f for f in report.findings if f.code == "GA201"]
    assert ("x", ("written",)) in [(f.sources[0], f.outputs) for f in report.findings if f.code == "GA203"]


def test_a_wrong_custom_gradient_beside_a_healthy_output_still_fails_naming_its_output(tmp_path):
    from gradaudit.api import AuditOptions, audit_saved_model

    path = _custom(str(tmp_path / "wrong"), 0.05)
    feed = {"x": np.random.default_rng(4).standard_normal((2, 3))}
    tape, differences = _tape_and_differences(path, feed, "x", "written", 1e-6)
    assert abs(tape - differences) > 0.02 * abs(differences)  # 5% off, truly

    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "fail"
    mismatches = [f for f in report.findings if f.code == "GA201"]
    assert mismatches and all(f.outputs == ("written",) for f in mismatches), [
        (f.sources, f.outputs) for f in mismatches]
