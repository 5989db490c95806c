"""tf-keras models whose LayerNormalization or BatchNormalization exports FusedBatchNormV3 (float32 kernels only) are
checked in float64: the float64 copy computes each fused batch norm with float64 primitives (issue 22).

Before, their float64 copy failed and every check ran in float32, where `tfkeras_encoder_block` (healthy) got a
false GA201 for its variables (relative 3.0e-3 against a bound of 2.9e-3), the probe points of `tfkeras_mha_block`
(x 100, x -600, a saturated attention softmax) were undecided, and `tfkeras_mha_block_wrong` (a custom gradient
on the attention output wrong by 1e-4 relative) passed. The fixtures are built by
sample_models/thirdparty/build_tfkeras.py; tf-keras is not needed to load them.

The truth is computed here, independently of the audit: TensorFlow's own gradient of the model as saved (float32,
the fused op's registered gradient) and the float64 copy's tape gradient, each against float64 central differences
of the copy's forward, which is checked against the saved model's float32 forward first.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

THIRDPARTY = os.path.join(os.path.dirname(__file__), "..", "..", "sample_models", "thirdparty")
HEALTHY = ("tfkeras_mha_block", "tfkeras_encoder_block", "tfkeras_bn_cnn")
WRONG = "tfkeras_mha_block_wrong"
# The variables upstream of the broken twin's custom gradient (its attention): their gradients are wrong by 1e-4.
UPSTREAM = "mha/"


def _path(name: str) -> str:
    return os.path.join(THIRDPARTY, name)


@pytest.fixture(scope="module")
def audit():
    from gradaudit.api import AuditOptions, audit_saved_model

    cache = {}

    def get(name: str):
        if name not in cache:
            cache[name] = audit_saved_model(_path(name), AuditOptions())
        return cache[name]

    return get


def _phi(fn, x, u) -> tf.Tensor:
    return tf.reduce_sum(tf.cast(fn(x=x)["y"], tf.float64) * u)


def _tape(loaded, variables: dict, x: np.ndarray, u: np.ndarray, line: tuple[np.ndarray, dict]) -> float:
    """<grad(u·y), line> by TensorFlow's tape on `loaded`, in its own dtype."""
    vx, vv = line
    xt = tf.constant(x, loaded.fn.structured_input_signature[1]["x"].dtype)
    names = sorted(vv)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        phi = _phi(loaded.fn, xt, u)
    gx, *gv = tape.gradient(phi, [xt] + [variables[n] for n in names])
    return float(np.sum(gx.numpy() * vx)) + sum(float(np.sum(g.numpy() * vv[n])) for g, n in zip(gv, names))


def _differences(copy, variables: dict, x: np.ndarray, u: np.ndarray, line: tuple[np.ndarray, dict]) -> float:
    """The derivative of u·y along `line` on the float64 copy: fourth-order central differences, step 1e-5."""
    vx, vv = line
    base = {n: variables[n].numpy() for n in vv}

    def at(t: float) -> float:
        for n in vv:
            variables[n].assign(base[n] + t * vv[n])
        return float(_phi(copy.fn, tf.constant(x + t * vx, tf.float64), u))

    h = 1e-5  # small, so that no ReLU kink of bn_cnn is crossed; float64 rounding is below 1e-9 relative here
    try:
        return (8 * (at(h) - at(-h)) - (at(2 * h) - at(-2 * h))) / (12 * h)
    finally:
        for n in vv:
            variables[n].assign(base[n])


def _line(rng, x: np.ndarray, variables: dict, names: list[str]) -> tuple[np.ndarray, dict]:
    """A random direction in x (zero when `names` are given) or in the variables `names`, scaled by their values."""
    def scaled(value):
        return rng.standard_normal(value.shape) * float(np.sqrt(np.mean(np.square(value))) or 1.0)

    if not names:
        return scaled(x), {}
    return np.zeros_like(x), {n: scaled(variables[n].numpy().astype(np.float64)) for n in names}


def truth(name: str) -> dict[str, float]:
    """The relative errors of the saved model's float32 gradient ("x32", "vars32") and of the float64 copy's
    ("x64", "vars64") against float64 differences, along x and along the variables upstream of the attention
    (every trainable variable when the model has no attention); "forward": the copy's largest difference from the
    saved model's float32 outputs relative to their largest magnitude, at the recorded inputs and at x -600."""
    from gradaudit.numeric.runner import load, signature_variables
    from gradaudit.numeric.savedmodel import read_saved_model

    info = read_saved_model(_path(name), (), "serving_default")
    native, copy = load(info, (), False), load(info, (), True)
    try:
        x = np.load(os.path.join(_path(name), "inputs.npz"))["x"].astype(np.float64)
        forward = 0.0
        for point in (x, -600 * x / np.max(np.abs(x))):
            y32 = native.fn(x=tf.constant(point, tf.float32))["y"].numpy()
            y64 = copy.fn(x=tf.constant(point.astype(np.float32), tf.float64))["y"].numpy()
            forward = max(forward, float(np.max(np.abs(y64 - y32)) / np.max(np.abs(y32))))
        v32, v64 = signature_variables(info, native.fn), signature_variables(info, copy.fn)
        rng = np.random.default_rng(0)
        y = native.fn(x=tf.constant(x, tf.float32))["y"].numpy()
        u = rng.standard_normal(y.shape) / float(np.sqrt(np.mean(np.square(y))))
        upstream = sorted(n for n in v64 if n.startswith(UPSTREAM) and v64[n].trainable) or sorted(
            n for n in v64 if v64[n].trainable)
        found = {"forward": forward}
        for key, names in (("x", []), ("vars", upstream)):
            line = _line(rng, x, v64, names)
            exact = _differences(copy, v64, x, u, line)
            found[key + "32"] = abs(_tape(native, v32, x, u, line) - exact) / abs(exact)
            found[key + "64"] = abs(_tape(copy, v64, x, u, line) - exact) / abs(exact)
        return found
    finally:
        native.close()
        copy.close()


def test_the_fixtures_hold_fused_batch_norms_in_both_modes():
    """What the fixtures are for: tf-keras' layer norms are FusedBatchNormV3 in training mode (is_training left at
    its default, true; NCHW), its batch norms in inference mode; the broken twin has one saved custom gradient."""
    from gradaudit.numeric.savedmodel import read_saved_model

    def fused(name):
        library = read_saved_model(_path(name), (), "serving_default").meta_graph.graph_def.library
        return [(n.attr["is_training"].b if "is_training" in n.attr else True, n.attr["data_format"].s or b"NHWC")
                for f in library.function for n in f.node_def if n.op == "FusedBatchNormV3"]

    assert fused("tfkeras_mha_block") == fused(WRONG) == [(True, b"NCHW")]
    assert fused("tfkeras_encoder_block") == [(True, b"NCHW")] * 2
    assert fused("tfkeras_bn_cnn") == [(False, b"NHWC")] * 2
    assert len(read_saved_model(_path(WRONG), (), "serving_default").custom_gradients) == 1


@pytest.mark.parametrize("name", HEALTHY)
def test_the_truth_of_the_healthy_models(name):
    """The copy's forward is the saved model's to float32 rounding, also where the softmax saturates (x -600);
    TensorFlow's gradient of the saved model agrees with float64 differences to float32 rounding, the copy's to
    float64's."""
    found = truth(name)
    assert found["forward"] < 1e-5
    assert found["x32"] < 1e-5 and found["vars32"] < 1e-5
    assert found["x64"] < 1e-8 and found["vars64"] < 1e-8


def test_the_truth_of_the_broken_twin():
    """The attention's variables' gradients are wrong by 1e-4 relative, in the saved model (float32) and in the
    copy (the custom gradient runs in float64 there); x's is diluted by the residual path, which skips it."""
    found = truth(WRONG)
    assert found["forward"] < 1e-5
    assert 8e-5 < found["vars32"] < 1.2e-4 and 9e-5 < found["vars64"] < 1.1e-4
    assert found["x64"] < 5e-5


@pytest.mark.parametrize("name", HEALTHY)
def test_healthy_models_pass_in_float64(audit, name):
    """Every check, the probe points' included (x 100, x -600), runs on the float64 copy and passes. Where the
    model's own float32 gradient at a probe point is off the float64 copy's by float32's rounding of a saturated
    softmax (seen on an AMD EPYC for the attention's key and query weights at x -600, not elsewhere), that is at
    most information naming no op, with its rows' evidence: no float32 kernel is at fault."""
    r = audit(name)
    assert r.verdict() == "pass"
    assert not [f for f in r.findings if f.code == "GA201"]
    checks = [n for n in r.numeric if n.dtype == "float64"]
    assert checks and {n.precision_reason for n in checks} == {"float64 copy of the model"}
    assert {n.status for n in checks if n.scale != 0.0} == {"pass"}
    assert {n.scale for n in checks} == {None, 0.0, 10.0, 100.0, -600.0}  # 0.0: inputs x 0
    # at inputs x 0 a layer norm's variance is 0 (its gradient there is 1/sqrt(eps) times the input's deviations, and
    # the differences do not converge): a pass, or undecided with a difference within its own error bound
    assert all(n.status == "pass" or (n.status == "inconclusive" and n.rel_error is not None and n.bound is not None
                                      and n.rel_error <= n.bound) for n in checks if n.scale == 0.0), checks
    compared = [n for n in r.numeric if n.dtype == "float32"]
    assert all(n.scale in (100.0, -600.0) and n.evidence for n in compared), compared
    assert not [n for n in compared if n.status == "fail"], compared  # information is no failed row beside a pass
    assert all(f.severity.value == "info" and f.op is None for f in r.findings if f.code == "GA206"), [
        f.message for f in r.findings]
    assert not any("Float64 evaluation is not possible" in note.text or "FusedBatchNorm" in note.text
                   for note in r.notes)


def test_the_broken_twin_fails_in_float64_on_the_variables_the_truth_names(audit):
    r = audit(WRONG)
    assert r.verdict() == "fail"
    mismatches = [f for f in r.findings if f.code == "GA201"]
    blamed = {s for f in mismatches for s in f.sources}
    assert blamed - {"x"} and all(s.startswith(UPSTREAM) for s in blamed - {"x"})  # never ln/*, head/*
    assert all(f.op is not None and f.op.op_type == "IdentityN" for f in mismatches)  # the custom gradient
    base = {n.source: n for n in r.numeric if n.scale is None}
    assert (base["*"].status, base["*"].dtype) == ("fail", "float64")
    singles = [n for s, n in base.items() if s.startswith(UPSTREAM)]
    assert singles and all(n.status == "fail" and 5e-5 < n.rel_error < 2e-4 for n in singles)


@pytest.mark.slow
def test_a_float32_only_batch_norm_is_not_blamed_where_a_custom_gradient_is_wrong():
    """With the local checks (`always`), the layer norm's FusedBatchNormV3 (no float64 kernel: checked in float32)
    at the probe points x 100 and x -600 gave differences far from its gradient (-3253 against 10.1): its float32
    forward cancels there, while the float64 copy, whose batch norm is float64 primitives, finds the model's
    gradient wrong by the custom gradient's 1e-4 only (the tests above). Before, two GA201 errors said TensorFlow's
    own FusedBatchNormV3 gradient is wrong; such a float32 check is undecided now, with that reason, and the
    failure is the custom gradient's."""
    from gradaudit.api import AuditOptions, audit_saved_model

    report = audit_saved_model(_path(WRONG), AuditOptions(local_checks="always"))
    assert report.verdict("error") == "fail"
    mismatches = [f for f in report.findings if f.code == "GA201"]
    assert mismatches and not [f for f in mismatches if f.op is not None and f.op.op_type == "FusedBatchNormV3"]
    assert {f.op.op_type for f in mismatches if f.op is not None} <= {"IdentityN"}
    norms = [c for c in report.local if c.op.op_type == "FusedBatchNormV3"]
    assert norms and all(c.status != "fail" for c in norms)
    for c in norms:
        if c.status == "undecided" and c.evidence and "converge" in c.evidence:
            assert c.dtype == "float32" and "not evidence against TensorFlow's gradient" in c.evidence
