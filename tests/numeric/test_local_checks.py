"""Local checks (numeric/local.py): each op's gradient on its own at the values the model's forward gave it.

The truth is TensorFlow's: the wrong gradients here are written on purpose (a custom gradient 1% off, a gradient
override on Sin), and the test measures on the loaded model, with tf.GradientTape against central differences in
float64 of its own forward, that the model's gradient really is off before asserting what gradaudit says.
A model of a million trainable parameters or more is decided by the local checks by default (--local-checks auto):
no float64 copy of it is made.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model

WIDTH = 1024  # a 1024 x 1024 dense layer: above stability.local.LARGE_MODEL (1M trainable parameters)


def _big_model(path: str, wrong: float):
    """A conv block, then a wide dense layer, then an activation with a hand-written gradient (`wrong`: its
    relative error), then a head: over a million trainable parameters, float32."""
    rng = np.random.default_rng(0)

    @tf.custom_gradient
    def softplus(x):
        y = tf.math.softplus(x)

        def grad(dy):
            return dy * tf.sigmoid(x) * (1.0 + wrong)

        return y, grad

    class Big(tf.Module):
        def __init__(self):
            super().__init__()
            self.k = tf.Variable(rng.normal(0, 0.3, (3, 3, 1, 4)).astype("float32"), name="conv")
            self.w1 = tf.Variable(rng.normal(0, 0.05, (64, WIDTH)).astype("float32"), name="w1")
            self.w2 = tf.Variable(rng.normal(0, 0.05, (WIDTH, WIDTH)).astype("float32"), name="w2")
            self.w3 = tf.Variable(rng.normal(0, 0.05, (WIDTH, 3)).astype("float32"), name="w3")

        @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32)])
        def __call__(self, x):
            h = tf.nn.relu(tf.nn.conv2d(x, self.k, 1, "SAME"))
            h = tf.reshape(tf.nn.max_pool2d(h, 2, 2, "VALID"), [-1, 64])
            h = tf.tanh(h @ self.w1)
            h = softplus(h @ self.w2)
            return {"y": h @ self.w3}

    m = Big()
    if path:
        tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    return m


def _relative_gradient_error(path: str) -> float:
    """How far the loaded model's gradient (tf.GradientTape through its saved custom gradient) is from the true
    derivative: the same forward rebuilt in float64 from the loaded variables with TensorFlow's own ops, whose
    registered float64 gradients the tape composes. Relative, over a batch of random inputs."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 8, 8, 1)).astype("float32")
    u = rng.normal(size=(2, 3))
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        phi = tf.reduce_sum(fn(x=xt)["y"] * u.astype("float32"))
    saved = tape.gradient(phi, xt).numpy().astype(np.float64)
    w = {n: tf.constant(getattr(loaded, a).numpy().astype(np.float64))
         for n, a in (("conv", "k"), ("w1", "w1"), ("w2", "w2"), ("w3", "w3"))}
    x64 = tf.constant(x.astype(np.float64))
    with tf.GradientTape() as tape:
        tape.watch(x64)
        h = tf.nn.relu(tf.nn.conv2d(x64, w["conv"], 1, "SAME"))
        h = tf.reshape(tf.nn.max_pool2d(h, 2, 2, "VALID"), [-1, 64])
        h = tf.math.softplus(tf.tanh(h @ w["w1"]) @ w["w2"])
        phi64 = tf.reduce_sum((h @ w["w3"]) * u)
    true = tape.gradient(phi64, x64).numpy()
    return float(np.linalg.norm(saved - true) / np.linalg.norm(true))


@pytest.fixture(scope="module")
def big_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("local")
    paths = {}
    for name, wrong in (("healthy", 0.0), ("wrong", 0.01)):
        paths[name] = str(root / name)
        _big_model(paths[name], wrong)
    return paths


@pytest.mark.slow
def test_a_wrong_custom_gradient_inside_a_large_model_is_caught_and_named(big_models):
    assert _relative_gradient_error(big_models["wrong"]) > 2e-3  # the truth: TensorFlow's gradient is off
    report = audit_saved_model(big_models["wrong"], AuditOptions())
    assert report.verdict("error") == "fail"
    mismatches = [f for f in report.findings if f.code == "GA201"]
    assert mismatches and mismatches[0].op is not None and mismatches[0].op.op_type == "IdentityN"
    assert "custom gradient" in mismatches[0].message
    assert mismatches[0].outputs == ("y",) and "x" in mismatches[0].sources  # tester 7's big_cg listed no output
    failed = [c for c in report.local if c.status == "fail" and c.scale is None]
    assert [c.kind for c in failed] == ["custom_gradient"] and failed[0].rel_error > failed[0].bound
    assert {n.status for n in report.numeric if n.scale is None} == {"fail"}


@pytest.mark.slow
def test_a_healthy_large_model_is_decided_by_its_local_checks_without_a_float64_copy(big_models, monkeypatch):
    assert _relative_gradient_error(big_models["healthy"]) < 1e-4
    import gradaudit.numeric.runner as runner

    loaded = []
    real = runner.load
    monkeypatch.setattr(runner, "load", lambda info, tags, float64, **kw: loaded.append(float64)
                        or real(info, tags, float64, **kw))
    report = audit_saved_model(big_models["healthy"], AuditOptions())
    assert report.verdict("error") == "pass", [f.message for f in report.findings]
    assert loaded == [False]  # the model as saved, once; no float64 copy
    rows = [n for n in report.numeric if n.scale is None]
    assert rows and all(n.status == "pass" and "decided by local checks" in (n.evidence or "") for n in rows)
    assert report.local and all(c.status == "pass" for c in report.local)
    kinds = {c.op.op_type for c in report.local}
    assert {"IdentityN", "Relu", "MaxPool", "Tanh", "Conv2D", "MatMul"} <= kinds
    assert any(c.shared > 1 for c in report.local if c.op.op_type == "MatMul") or \
        sum(c.op.op_type == "MatMul" for c in report.local if c.scale is None) >= 1


@pytest.mark.slow
def test_the_whole_model_checks_agree_on_the_large_models(big_models):
    """The same verdicts from the float64 whole-model path (--local-checks never): the local path is not a laxer
    judge."""
    assert audit_saved_model(big_models["wrong"], AuditOptions(local_checks="never")).verdict("error") == "fail"
    assert audit_saved_model(big_models["healthy"], AuditOptions(local_checks="never")).verdict("error") == "pass"


def _variable_gradient_model(path: str, wrong: float) -> None:
    """A custom gradient that differentiates a variable it reads (tf.custom_gradient's `variables`), wrong by
    `wrong` for the variable only."""
    w = tf.Variable(np.linspace(0.5, 1.5, 3).astype("float32"), name="w")

    @tf.custom_gradient
    def scaled(x):
        y = tf.sin(x * w)

        def grad(dy, variables=None):
            c = dy * tf.cos(x * w)
            return c * w, [tf.reduce_sum(c * x, axis=0) * (1.0 + wrong)]

        return y, grad

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = w

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x):
            return {"y": scaled(x) * 2.0}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))


@pytest.mark.parametrize("wrong", [0.05, 0.0])
def test_a_custom_gradient_of_a_variable_is_left_to_the_whole_model_checks(tmp_path, wrong):
    """A custom gradient whose function captures a variable cannot be run on the frozen graph (no variables there):
    the local checks leave it unchecked and do not decide; the whole-model checks do, catching the variable's wrong
    gradient."""
    path = os.path.join(tmp_path, "m")
    _variable_gradient_model(path, wrong)
    report = audit_saved_model(path, AuditOptions(local_checks="always"))
    assert any("IdentityN" in n.text and "not checked on its own" in n.text for n in report.notes)
    rows = [n for n in report.numeric if n.scale is None]
    assert rows and not any("decided by local checks" in (n.evidence or "") for n in rows)
    assert report.verdict("error") == ("fail" if wrong else "pass")


def test_a_kink_at_the_recorded_values_is_checked_at_a_nearby_point_and_says_so(samples):
    """sample_models/cnn: a max-pool over ReLU outputs, whose zeros tie in its windows at the synthesised point."""
    report = audit_saved_model(os.path.join(samples, "cnn"), AuditOptions(local_checks="always"))
    assert report.verdict("error") == "pass"
    pools = [c for c in report.local if c.op.op_type == "MaxPool" and c.scale is None]
    assert pools and pools[0].status == "pass"
    if pools[0].evidence:  # a tie at the recorded values
        assert "kink" in pools[0].evidence and "away" in pools[0].evidence


def test_never_runs_no_local_check(samples):
    report = audit_saved_model(os.path.join(samples, "mlp"), AuditOptions(local_checks="never"))
    assert report.local == [] and report.verdict("error") == "pass"


@pytest.mark.slow
def test_a_resnet_sized_model_with_one_wrong_custom_activation_fails_naming_it(tmp_path):
    """bench/resnet_custom.py: ResNet50's stages and widths (25.6M parameters) with one block's activation a custom
    gradient, wrong by 1% or exact. The default audit decides it by local checks: the wrong one fails with the
    custom gradient named, its exact twin passes."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "resnet_custom", Path(__file__).resolve().parents[2] / "bench" / "resnet_custom.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    verdicts = {}
    for wrong in (0.01, 0.0):
        path = str(tmp_path / f"rn{wrong}")
        builder.build(wrong).export(path, verbose=False)
        report = audit_saved_model(path, AuditOptions())
        verdicts[wrong] = report.verdict("error")
        named = {f.op.op_type for f in report.findings if f.code == "GA201" and f.op is not None}
        assert named == ({"IdentityN"} if wrong else set())
        assert all("decided by local checks" in (n.evidence or "") or n.status == "fail"
                   for n in report.numeric if n.scale is None)
    assert verdicts == {0.01: "fail", 0.0: "pass"}


# The new-user tester's false passes of the first local checks, each a class (small models, --local-checks always;
# the truth: the same model's --local-checks never, the whole-model float64 checks, and the construction itself).

_SIG = [tf.TensorSpec([None, 8], tf.float32)]


def _save(module, path: str) -> None:
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))


class _Small(tf.Module):
    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(3)
        self.w1 = tf.Variable(rng.normal(0, 0.3, (8, 16)).astype("float32"), name="w1")
        self.w2 = tf.Variable(rng.normal(0, 0.3, (16, 2)).astype("float32"), name="w2")


@tf.RegisterGradient("GradauditLocalWrongIdentity")
def _wrong_identity(_op, grad):  # saving traces it with op=None
    return grad * 1.1


class _OverriddenIdentity(_Small):
    """gradient_override_map on an Identity: its gradient is 1.1 times the upstream one."""

    @tf.function(input_signature=_SIG)
    def __call__(self, x):
        h = tf.nn.softplus(x @ self.w1)
        with tf.compat.v1.get_default_graph().gradient_override_map({"Identity": "GradauditLocalWrongIdentity"}):
            h = tf.identity(h)
        return {"y": h @ self.w2}


class _ClosesOver(_Small):
    """A custom gradient right for its argument whose forward also reads a tensor made from a variable (`a`): the
    variable's gradient through it is lost."""

    def __init__(self):
        super().__init__()
        self.a = tf.Variable([0.3, 0.4], name="a")

    @tf.function(input_signature=_SIG)
    def __call__(self, x):
        s = tf.reduce_sum(self.a)

        @tf.custom_gradient
        def scaled(h):
            return h * s, lambda dy: dy * s

        return {"y": scaled(x @ self.w1) @ self.w2 + 0.1 * s}  # `a` also reaches y directly: connected


@tf.custom_gradient
def _drops_small(h):
    def grad(dy):
        return tf.where(tf.abs(dy) < 1e-3, tf.zeros_like(dy), dy) * tf.sigmoid(h)

    return tf.nn.softplus(h), grad


class _DropsSmallUpstream(_Small):
    """A custom gradient that zeroes upstream gradients below 1e-3, where the model's own are: its gradient is
    zero in the model, though it is right for a cotangent of ones."""

    @tf.function(input_signature=_SIG)
    def __call__(self, x):
        return {"y": 1e-4 * (_drops_small(x @ self.w1) @ self.w2)}


@pytest.mark.parametrize("module", [_OverriddenIdentity, _ClosesOver, _DropsSmallUpstream])
def test_gradients_the_first_local_checks_passed_fail(tmp_path, module):
    path = str(tmp_path / module.__name__)
    _save(module(), path)
    whole = audit_saved_model(path, AuditOptions(local_checks="never"))
    assert whole.verdict("error") == "fail"  # the truth, by the whole-model float64 checks
    report = audit_saved_model(path, AuditOptions(local_checks="always"))
    assert report.verdict("error") == "fail"
    assert any(f.code == "GA201" for f in report.findings)
    rows = [n for n in report.numeric if n.scale is None]
    assert not any(n.status == "pass" and "decided by local checks" in (n.evidence or "") for n in rows)


def test_a_straight_through_estimator_is_left_to_the_whole_model_checks(tmp_path):
    """h + stop_gradient(round(h) - h): the gradient is not the forward's derivative by design; the whole-model
    checks call it a surrogate (GA203), which the local checks cannot say."""

    class Ste(_Small):
        @tf.function(input_signature=_SIG)
        def __call__(self, x):
            h = x @ self.w1
            return {"y": (h + tf.stop_gradient(tf.round(h * 4) / 4 - h)) @ self.w2}

    path = str(tmp_path / "ste")
    _save(Ste(), path)
    report = audit_saved_model(path, AuditOptions(local_checks="always"))
    assert report.verdict("error") == "pass"
    assert any(f.code == "GA203" for f in report.findings)
    assert not any("decided by local checks" in (n.evidence or "") for n in report.numeric)


@pytest.mark.slow
def test_a_large_python_target_is_decided_by_the_local_checks_of_its_saved_copy():
    """The same 1.1M-parameter module audited as a Python object (its traced function): the local checks run on
    the copy the probes already save, and the finding names the traced graph's custom gradient."""
    from gradaudit.api import audit_object

    report = audit_object(_big_model("", 0.01), AuditOptions())
    assert report.verdict("error") == "fail"
    assert any(f.code == "GA201" and f.op is not None and f.op.op_type == "IdentityN" for f in report.findings)
    assert any(c.kind == "custom_gradient" and c.status == "fail" for c in report.local)
    healthy = audit_object(_big_model("", 0.0), AuditOptions())
    assert healthy.verdict("error") == "pass"
    assert all("decided by local checks" in (n.evidence or "") for n in healthy.numeric if n.scale is None)


class _MaskedCumprod(_Small):
    """TensorFlow's cumprod gradient is wrong where a factor is exactly zero; here the zeros come from a mask whose
    derivative is zero, so the model's gradient is right (the tester's cumprod0)."""

    @tf.function(input_signature=_SIG)
    def __call__(self, x):
        h = x @ self.w1
        masked = h * tf.cast(h > 0, tf.float32)
        return {"y": tf.math.cumprod(masked + 0.5 * tf.cast(h > 0, tf.float32), axis=1) @ self.w2}


class _IntegerInside(_Small):
    """A custom gradient that computes an integer from its own input (k = [h > 0] + 1) and is 10% wrong: moving the
    input moves k, the local differences jump (the tester's cgint10)."""

    @tf.function(input_signature=_SIG)
    def __call__(self, x):
        @tf.custom_gradient
        def f(h):
            k = tf.cast(h > 0, tf.float32) + 1.0
            return h * k, lambda dy: dy * k * 1.1

        return {"y": f(x @ self.w1) @ self.w2}


def test_an_op_wrong_on_its_own_but_not_in_the_model_is_a_warning_not_a_failure(tmp_path):
    path = str(tmp_path / "cumprod")
    _save(_MaskedCumprod(), path)
    whole = audit_saved_model(path, AuditOptions(local_checks="never"))
    assert whole.verdict("error") == "pass"  # the truth: the model's gradient is its forward's derivative
    report = audit_saved_model(path, AuditOptions(local_checks="always"))
    assert report.verdict("error") == "pass"
    cumprod = [f for f in report.findings if f.code == "GA201" and f.op is not None and f.op.op_type == "Cumprod"]
    if cumprod:  # the synthesised point puts a zero factor in: TensorFlow's own gradient is wrong there, named
        assert {f.severity.name for f in cumprod} == {"WARNING"} and "does not reach it here" in cumprod[0].message
    # at inputs x 0 every factor is 0: the op's local check fails there and the model's gradient is right (the
    # mask's derivative is 0), which a note says; x 0 is checked on this small model, only a large one skips it
    zero = [c for c in report.local if c.scale == 0.0 and c.op is not None and c.op.op_type == "Cumprod"]
    assert zero and {c.status for c in zero} == {"fail"}
    assert any("× 0" in n and "does not reach the outputs here" in n for n in report.notes_of("stability"))
    assert not any("every kink is met at once" in n.text for n in report.notes)


def test_a_custom_gradient_that_computes_an_integer_from_its_input_fails(tmp_path):
    path = str(tmp_path / "integer")
    _save(_IntegerInside(), path)
    assert audit_saved_model(path, AuditOptions(local_checks="never", probe_scales=(1.0,))).verdict("error") == "fail"
    report = audit_saved_model(path, AuditOptions(local_checks="always", probe_scales=(1.0,)))
    assert report.verdict("error") == "fail"
    rows = [n for n in report.numeric if n.scale is None]
    assert rows and not any("decided by local checks" in (n.evidence or "") for n in rows)


@pytest.mark.parametrize("wrong", ["bias", "input"])
def test_a_custom_gradient_wrong_for_one_input_names_the_sources_of_that_input(tmp_path, wrong):
    """A custom bias-add whose gradient is 3% off for one of its two inputs (tester 10's m13): checked locally, the
    inputs are moved one at a time, so the finding and the failing rows name the sources that reach the wrong input
    (the bias's variable, or the input and the kernel before it), with their own 3% error, and the rows of the
    sources that reach only the right input pass."""
    scale_h, scale_b = (1.0, 0.97) if wrong == "bias" else (0.97, 1.0)

    @tf.custom_gradient
    def bias_add(h, b):
        return h + b, lambda dy: (scale_h * dy, scale_b * tf.reduce_sum(dy, axis=0))

    class M(tf.Module):
        def __init__(self):
            super().__init__()
            self.W = tf.Variable(tf.random.stateless_normal([6, 5], [1, 1]) * 0.3, name="W")
            self.b = tf.Variable(tf.random.stateless_normal([5], [2, 2]) * 0.1, name="b")
            self.V = tf.Variable(tf.random.stateless_normal([5, 3], [3, 3]) * 0.3, name="V")

        @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.tanh(bias_add(x @ self.W, self.b)) @ self.V}

    path = str(tmp_path / wrong)
    m = M()
    tf.saved_model.save(m, path, signatures=m.__call__.get_concrete_function(),
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    loaded = tf.saved_model.load(path)
    x = tf.constant(np.random.default_rng(0).standard_normal((2, 6)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=x)["y"])
    g_x, g_b = tape.gradient(y, [x, loaded.b])
    w, b, v = (np.asarray(t.numpy(), np.float64) for t in (loaded.W, loaded.b, loaded.V))
    dz = (1 - np.tanh(x.numpy() @ w + b) ** 2) * v.sum(axis=1)  # the true derivative, float64
    assert np.allclose(g_b.numpy(), dz.sum(0) * scale_b, rtol=1e-5) and np.allclose(g_x.numpy(), dz @ w.T * scale_h,
                                                                                    rtol=1e-5)
    report = audit_saved_model(path, AuditOptions(local_checks="always"))
    (check,) = [c for c in report.local if c.kind == "custom_gradient" and c.scale is None]
    assert check.status == "fail" and len(check.failing_inputs) == 1 and abs(check.rel_error - 0.03) < 5e-3
    (finding,) = [f for f in report.findings if f.rule == "gradient-mismatch" and f.op == check.op]
    expected = {"b"} if wrong == "bias" else {"x", "W"}
    assert set(finding.sources) == expected, finding.sources
    rows = {n.source: n.status for n in report.numeric if n.scale is None}
    assert rows["x"] == ("pass" if wrong == "bias" else "fail"), rows
    assert rows["*"] == "fail" and report.verdict() == "fail"



@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_large_arrays_step_a_block_at_a_time_is_the_one_expressions_numbers(dtype):
    """The local checks step a large weight a block at a time: the array fed is x + t·d rounded as numpy rounds
    it in one expression, and the prediction is <g, fed - x> in float64, over blocks that do not divide the
    array evenly."""
    from gradaudit.numeric import local

    rng = np.random.default_rng(3)
    size = 5 * local._BLOCK + 1234
    x, d, g = (rng.normal(size=(size,)) for _ in range(3))
    if dtype == "float32":
        x, d = x.astype(np.float32), d.astype(np.float32)
    t = 3.7e-5
    fed, lin = local._stepped(x, d, t, np.dtype(dtype), g)
    np.testing.assert_array_equal(fed, np.asarray(x + t * d, dtype=dtype))
    exact = float(np.dot(g, fed.astype(np.float64) - x.astype(np.float64)))
    assert lin == pytest.approx(exact, rel=1e-9) and abs(exact) > 0
