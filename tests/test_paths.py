"""paths.py: each blocked pair's path runs from its source through the op that cuts it to its output; long
stretches are counted, not listed; connected pairs have none."""

from __future__ import annotations

import os

import pytest

from gradaudit.api import AuditOptions, audit_saved_model

SAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sample_models")


def _static(path: str):
    return audit_saved_model(path, AuditOptions(static_only=True))


@pytest.fixture(scope="module")
def deep_round(tmp_path_factory) -> str:
    """x -> 8 tanh layers -> round -> 8 more -> y: a long path both sides of the cut."""
    import tensorflow as tf

    class Deep(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.ones([3]) * 0.1, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            h = x * self.w
            for _ in range(8):
                h = tf.tanh(h)
            h = tf.round(h)
            for _ in range(8):
                h = tf.sin(h)
            return {"y": h}

    path = str(tmp_path_factory.mktemp("deep") / "deep_round")
    module = Deep()
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    return path


def test_one_path_per_blocked_pair_through_its_cut():
    report = _static(os.path.join(SAMPLES, "classifier_argmax"))
    blocked = {(e.source, e.output) for e in report.flow if e.status == "blocked"}
    assert {(p.source, p.output) for p in report.paths} == blocked
    for p in report.paths:
        cut = p.steps[p.cut]
        assert (cut.op_type, cut.op_name) == ("ArgMax", "ArgMax")
        assert [s.op_type for s in p.steps[p.cut - 2:p.cut]] == ["AddV2", "Softmax"]
    (x,) = [p for p in report.paths if p.source == "x"]
    assert x.steps[0].op_type == "MatMul"  # x is read by the MatMul first
    (kernel,) = [p for p in report.paths if p.source == "dense/kernel"]
    assert kernel.steps[0].op_type == "ReadVariableOp" and kernel.steps[1].op_type == "MatMul"


def test_the_path_after_the_cut_leads_to_the_output():
    report = _static(os.path.join(SAMPLES, "stop_gradient"))
    (w1,) = [p for p in report.paths if p.source == "w1"]
    after = [s.op_type for s in w1.steps[w1.cut + 1:]]
    assert w1.steps[w1.cut].op_type == "StopGradient" and after[0] == "MatMul"  # @ w2, then to y


def test_no_path_for_a_model_whose_pairs_are_connected():
    assert _static(os.path.join(SAMPLES, "mlp")).paths == []


def test_long_stretches_are_counted_not_listed(deep_round):
    report = _static(deep_round)
    (x,) = [p for p in report.paths if p.source == "x"]
    cut = x.steps[x.cut]
    assert cut.op_type == "Round"
    before, after = x.steps[:x.cut], x.steps[x.cut + 1:]
    assert len(before) == 4 and before[0].op_type == "Mul" and [s.op_type for s in before[2:]] == ["Tanh", "Tanh"]
    # Mul and 8 Tanh: Mul, Tanh, [5 more], Tanh, Tanh
    assert before[2].skipped == 5 and sum(s.skipped for s in before) == 5
    assert [s.op_type for s in after[:2]] == ["Sin", "Sin"] and sum(s.skipped for s in after) > 0
