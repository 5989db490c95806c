"""The probe ladder's points are stacked along the batch dimension in one gradient pass; a point whose rows are
not finite, or a model whose examples influence each other, is probed point by point. Either way the
stability rows and findings are those of probing every point alone."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.numeric.probes import Prober

SPEC = [tf.TensorSpec([None, 3], tf.float32, name="x")]


class Healthy(tf.Module):
    def __init__(self):
        self.w = tf.Variable([[0.5, -0.2], [0.1, 0.3], [-0.4, 0.2]])

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        return {"y": tf.tanh(x @ self.w)}


class Norm(tf.Module):  # NaN gradient at x = 0, inf forward of exp at large scales
    def __init__(self):
        self.w = tf.Variable([1.0, 2.0, 3.0])

    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        return {"y": tf.sqrt(tf.reduce_sum(tf.square(x * self.w), axis=1)) + tf.math.log(1.0 + tf.exp(x[:, 0]))}


class MixesTheBatch(tf.Module):  # each example is divided by the batch's mean: examples are not independent
    @tf.function(input_signature=SPEC)
    def __call__(self, x):
        return {"y": tf.sqrt(tf.abs(x / (tf.reduce_mean(x) + 1.0)))}


def _audit(path: str, batched: bool, monkeypatch) -> tuple:
    calls = []
    observe = Prober.observe

    def counted(self, *args):
        calls.append(args)
        return observe(self, *args)

    with monkeypatch.context() as m:
        m.setattr(Prober, "observe", counted)
        if not batched:
            m.setattr(Prober, "_batch_rows", lambda self: None)
        report = audit_saved_model(path, AuditOptions())
    return report, len(calls)


@pytest.mark.parametrize("module, alone", [(Healthy, 0), (Norm, None), (MixesTheBatch, 21)])
def test_batched_ladder_reports_what_probing_each_point_alone_reports(tmp_path, monkeypatch, module, alone):
    path = save_module(module(), str(tmp_path / module.__name__))
    batched, observed = _audit(path, True, monkeypatch)
    single, every = _audit(path, False, monkeypatch)
    assert every == 21  # eleven scales, both signs but zero's
    assert batched.stability == single.stability
    assert sorted((f.rule, f.op, f.message) for f in batched.findings) == sorted(
        (f.rule, f.op, f.message) for f in single.findings)
    if alone is not None:
        assert observed == alone  # healthy: no point probed alone; batch-mixing: every point alone
    else:
        bad = {s.scale for s in single.stability if s.status != "ok"}
        assert bad and 0 < observed < every  # only the non-finite points are probed again alone


@pytest.mark.parametrize("module", [Healthy, Norm])
def test_passes_of_several_stacks_share_one_traced_gradient_and_report_the_same(tmp_path, monkeypatch, module):
    """With 9 rows a pass, the 21 points take stacks of 8, 8 and 5 (padded to 8 with its last point): one Runner,
    whose gradient is traced once, and the rows and findings of probing each point alone."""
    from gradaudit.numeric import probes

    path = save_module(module(), str(tmp_path / module.__name__))
    single, _ = _audit(path, False, monkeypatch)
    runners = []
    make = probes._Stack.runner

    def kept(self, prober, stacked):
        runner = make(self, prober, stacked)
        if not any(r is runner for r in runners):
            runners.append(runner)
        return runner

    with monkeypatch.context() as m:
        m.setattr(probes, "BATCH_ROWS", 9)
        m.setattr(probes._Stack, "runner", kept)
        batched, _ = _audit(path, True, monkeypatch)
    assert len(runners) == 1  # one config (one input): one stack, one Runner for all its passes
    assert runners[0]._gradient.experimental_get_tracing_count() == 1
    assert batched.stability == single.stability
    assert sorted((f.rule, f.op, f.message) for f in batched.findings) == sorted(
        (f.rule, f.op, f.message) for f in single.findings)
