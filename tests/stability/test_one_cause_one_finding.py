"""One cause, one finding: an overflow inside tf.linalg.expm reaches every output computed from it, and is
reported once, listing those outputs; different ops at fault stay different findings. The op at fault is
located inside the frozen graph for every output (differentiating a While loop for a second output
rewrites the loop op, which a session made before could not run)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _expm_model(path: str, squash: bool) -> str:
    """Outputs all computed from expm(x): with `squash`, through tanh (finite outputs whose gradient is NaN
    once expm overflows: unstable-gradient); without, expm itself and its sums (inf outputs:
    nonfinite-forward), one of them (`norm`, e*e) overflowing on its own at a smaller scale."""
    import tensorflow as tf

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 3, 3], tf.float32)])
        def __call__(self, x):
            e = tf.linalg.expm(x)
            if squash:
                s = tf.tanh(e)
                return {"s": s, "trace": tf.linalg.trace(s), "first": s[:, 0, 0]}
            return {"e": e, "trace": tf.linalg.trace(e), "norm": tf.reduce_sum(e * e, axis=[1, 2]),
                    "first": e[:, 0, 0]}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__})
    return path


@pytest.fixture(scope="module")
def expm_audit(tmp_path_factory):
    from gradaudit.api import AuditOptions, audit_saved_model

    root = tmp_path_factory.mktemp("expm")
    return {squash: audit_saved_model(_expm_model(str(root / f"expm_{squash}"), squash), AuditOptions())
            for squash in (True, False)}


def _of(report, rule: str):
    return [f for f in report.findings if f.rule == rule]


def test_a_gradient_overflow_in_expm_is_one_finding_for_all_outputs(expm_audit):
    r = expm_audit[True]
    (f,) = _of(r, "unstable-gradient")
    assert sorted(f.outputs) == ["first", "s", "trace"] and f.sources == ("x",)
    # the loop of expm's squaring, named where the model has it (not a frozen graph's name)
    assert f.op is not None and f.op.op_type in ("While", "StatelessWhile")
    assert f.op.op_name == "matrix_exponential/while" and f.op.function.startswith("__inference___call__")
    assert "The gradients of " in f.message and "not located" not in f.message
    # the stability rows still say, per output, where the gradient went wrong
    bad = {(s.output, s.scale) for s in r.stability if s.status == "nonfinite_gradient"}
    assert {o for o, _ in bad} == {"first", "s", "trace"}
    assert r.verdict() == "fail"


def test_different_ops_at_fault_stay_different_findings(expm_audit):
    r = expm_audit[False]
    found = {f.op.op_type if f.op else None: f for f in _of(r, "nonfinite-forward")}
    loop = [f for t, f in found.items() if t in ("While", "StatelessWhile")]
    assert len(loop) == 1 and sorted(loop[0].outputs) == ["e", "first", "norm", "trace"]
    assert loop[0].message.startswith("e, ") and " are inf at input scale(s)" in loop[0].message
    # e*e overflows float32 at a scale where expm itself is still finite: its own cause, its own finding
    assert "Mul" in found and found["Mul"].outputs == ("norm",)
    assert len(_of(r, "nonfinite-forward")) == 2


def test_one_raising_cause_whose_text_holds_an_object_address_is_one_finding(tmp_path):
    """tf.recompute_grad beside tf.vectorized_map: the saved model's backward raises a TypeError whose text names an
    IndexedSlices object by its address, a new one at every point (tester 11's m_recompute: one GA204 and 21 GA310
    that differed only there). The tape on the loaded model raises it too; it is said once."""
    import numpy as np
    import tensorflow as tf
    from helpers import save_module

    from gradaudit.api import AuditOptions, audit_saved_model

    class M(tf.Module):
        def __init__(self):
            self.w1 = tf.Variable(np.random.default_rng(0).normal(size=(4, 8)).astype("float32") * 0.5, name="w1")
            self.w2 = tf.Variable(np.random.default_rng(1).normal(size=(8, 3)).astype("float32") * 0.5, name="w2")

        def block(self, x):
            return tf.tanh(x @ self.w1)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            h = tf.recompute_grad(self.block)(x)
            return {"y": tf.vectorized_map(lambda r: tf.reduce_sum(tf.sin(tf.linalg.matvec(tf.transpose(self.w2), r))),
                                           h)}

    path = save_module(M(), str(tmp_path / "recompute"))
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    x = tf.constant(np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="missing a required argument"), tf.GradientTape() as tape:
        tape.watch(x)  # TensorFlow builds the call's backward as the call runs under the tape, and raises there
        tape.gradient(tf.reduce_sum(fn(x=x)["y"]), x)
    report = audit_saved_model(path, AuditOptions())
    raising = [f for f in report.findings if "missing a required argument" in f.message]
    assert [f.code for f in raising] == ["GA204"], [f.message[:120] for f in raising]
    assert " at 0x" not in raising[0].message
    assert report.verdict() == "fail"
