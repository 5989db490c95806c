"""--precision against TensorFlow's own float16 arithmetic: each model is audited in float32, then run again in
float16 (a float16 copy of its body, or the Keras mixed_float16 policy) with the same inputs and cotangent; the
gradients gradaudit says flush to zero are zero there, the loss scale it names makes them nonzero, and the
healthy twins get no finding and one summary line."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import tensorflow as tf

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.report import json_report
from gradaudit.report.json_load import report_from_dict
from gradaudit.report.terminal import render_plain

SEED = 0
X = np.array([[0.5, -1.0, 1.5, 2.0], [-0.75, 1.25, 0.25, -1.5]], np.float32)  # the point, given with --inputs
A = np.array([1e-3, 2e-3, 3e-3, 4e-3], np.float32)  # small, as in the ratio seed
B = np.array([2e-3, 3e-3, 5e-3, 7e-3], np.float32)


def cotangent(shape) -> np.ndarray:
    """The random cotangent the audit differentiates u·f with (the stability probes' own)."""
    return np.random.default_rng([SEED, 3]).standard_normal(shape)


def audit(path, tmp_path, **options):
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=X)
    return audit_saved_model(str(path), AuditOptions(timeout=None, precision="float16", inputs_file=str(inputs),
                                                     seed=SEED, **options))


def rows(report, kind="gradient", scale=None):
    return {r.name: r for r in report.precision if r.kind == kind and r.scale == scale}


def precision_rules(report) -> list[str]:
    return sorted(f.rule for f in report.findings if f.code.startswith("GA33"))


# -- the ratio seed's form: y = k * x * (-a / b), a and b small --------------------------------------------

class Ratio(tf.Module):
    """The body computes in `dtype`; the output is cast to float32 and scaled by k there (Keras' mixed precision
    computes the loss in float32): a tiny k makes every gradient tiny. `c` adds a second term of ordinary
    gradients (c * x * w), for a dynamic range no loss scale covers."""

    def __init__(self, k: float, c: float = 0.0, dtype=tf.float32):
        super().__init__()
        self.k, self.c, self.dtype = k, c, dtype
        self.a = tf.Variable(A, name="a")
        self.b = tf.Variable(B, name="b")
        self.w = tf.Variable(np.full(4, 0.5, np.float32), name="w")

    def body(self, x):
        def cast(t):
            return tf.cast(t, self.dtype)

        x = cast(x)
        y = self.k * tf.cast(x * -(cast(self.a) / cast(self.b)), tf.float32)
        return y + self.c * tf.cast(x * cast(self.w), tf.float32) if self.c else y

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": self.body(x)}


def save_ratio(tmp_path, k: float, c: float = 0.0):
    module = Ratio(k, c)
    path = tmp_path / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    return path


def float16_gradients(k: float, c: float, loss_scale: float) -> dict[str, np.ndarray]:
    """TensorFlow's float16 gradients of loss_scale · u·f (body in float16, variables float32), unscaled."""
    module = Ratio(k, c, tf.float16)
    x = tf.constant(X)
    u = tf.constant(cotangent((2, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = loss_scale * tf.reduce_sum(u * module.body(x))
    g = tape.gradient(loss, {"x": x, "a": module.a, "b": module.b, "w": module.w})
    return {n: np.asarray(v, np.float64) / loss_scale for n, v in g.items() if v is not None}


def zero_fraction(values: np.ndarray, reference: np.ndarray) -> float:
    """Of the entries nonzero in `reference` (float32), the fraction zero in `values` (float16)."""
    nonzero = reference != 0
    return float(np.count_nonzero(values[nonzero] == 0)) / int(np.count_nonzero(nonzero))


def _f32(k: float, c: float) -> dict[str, np.ndarray]:
    """The same gradients in float32: the reference whose nonzero entries are counted."""
    module = Ratio(k, c)
    x = tf.constant(X)
    u = tf.constant(cotangent((2, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(u * module.body(x))
    g = tape.gradient(loss, {"x": x, "a": module.a, "b": module.b, "w": module.w})
    return {n: np.asarray(v, np.float64) for n, v in g.items() if v is not None}


def test_ratio_gradients_below_float16_flush_to_zero_and_the_named_loss_scale_saves_them(tmp_path):
    k = 1e-11
    report = audit(save_ratio(tmp_path, k), tmp_path)
    own = rows(report)
    assert set(own) == {"x", "a", "b"}  # w does not reach y when c is 0
    assert max(r.largest for r in own.values()) < 6e-8  # the seed's form, scaled below float16's subnormals
    assert precision_rules(report) == ["gradient-underflow"]
    (f,) = [f for f in report.findings if f.rule == "gradient-underflow"]
    assert f.code == "GA330" and set(f.sources) == {"x", "a", "b"}
    scale = own["a"].loss_scale
    assert scale is not None and scale == 2.0 ** round(np.log2(scale))
    assert all(r.underflow_scaled == 0 and r.one_scale for r in own.values())
    # TensorFlow's float16: what gradaudit says underflows is zero there, in the same share
    reference = _f32(k, 0.0)
    at_one = float16_gradients(k, 0.0, 1.0)
    for name, r in own.items():
        assert r.underflow == 1.0
        assert zero_fraction(at_one[name], reference[name]) == r.underflow, name
    # ... and nonzero and finite at the loss scale gradaudit names, close to the float32 gradient
    scaled = float16_gradients(k, 0.0, scale)
    for name in own:
        assert zero_fraction(scaled[name], reference[name]) == 0.0, name
        assert np.all(np.isfinite(scaled[name])), name
        np.testing.assert_allclose(scaled[name], reference[name], rtol=1e-2)
    # twice the scale overflows somewhere in float16: it is the largest that does not
    assert not all(np.all(np.isfinite(v)) for v in float16_gradients(k, 0.0, 2 * scale).values())


def test_a_dynamic_range_wider_than_float16_has_no_single_loss_scale(tmp_path):
    k, c = 1e-15, 10.0
    report = audit(save_ratio(tmp_path, k, c), tmp_path)
    own = rows(report)
    assert "gradient-range" in precision_rules(report)
    (f,) = [f for f in report.findings if f.rule == "gradient-range"]
    assert f.code == "GA331" and set(f.sources) == {"a", "b"}
    scale = own["w"].loss_scale
    assert not own["w"].one_scale and own["w"].underflow_scaled == 0
    assert own["a"].underflow_own == 0  # a scale for a alone would keep them: the shared scale loses them
    reference = _f32(k, c)
    scaled = float16_gradients(k, c, scale)
    for name in ("a", "b"):  # still zero in TensorFlow's float16 at the scale the largest gradient allows
        assert own[name].underflow_scaled == 1.0
        assert zero_fraction(scaled[name], reference[name]) == 1.0, name
    assert zero_fraction(scaled["w"], reference["w"]) == 0.0
    assert np.all(np.isfinite(scaled["w"]))


def test_the_healthy_ratio_twin_gets_no_finding_and_one_summary_line(tmp_path):
    report = audit(save_ratio(tmp_path, 1e-2), tmp_path)
    assert precision_rules(report) == []
    assert all(r.underflow == 0 and r.overflow == 0 for r in rows(report).values())
    reference, at_one = _f32(1e-2, 0.0), float16_gradients(1e-2, 0.0, 1.0)
    assert all(zero_fraction(at_one[n], reference[n]) == 0.0 for n in rows(report))
    summary = [n for n in report.notes_of("precision") if n.startswith("Precision float16: every gradient fits")]
    assert len(summary) == 1


# -- Keras models under the mixed_float16 policy ----------------------------------------------------------

def keras_model(kind: str, policy: str | None = None, weights=None):
    import keras

    keras.mixed_precision.set_global_policy(policy or "float32")
    try:
        keras.utils.set_random_seed(1)
        inp = keras.Input(shape=(4,), name="x")
        if kind == "tanh_mlp":
            h = keras.layers.Dense(8, activation="tanh", name="hidden")(inp)
            out = keras.layers.Dense(2, name="out", dtype="float32")(h)
        else:  # "exp": exp of a dense layer's output, beyond 11 when `weights` say so
            h = keras.layers.Dense(4, name="dense", use_bias=False)(inp)
            out = keras.layers.Activation("exponential", name="exp")(h)
        model = keras.Model(inp, out)
        if weights is not None:
            model.set_weights(weights)
        return model
    finally:
        keras.mixed_precision.set_global_policy("float32")


def export(model, tmp_path):
    path = tmp_path / "keras_model"
    model.export(str(path), verbose=False)
    return path


def keras_gradients(model, scale: float = 1.0) -> dict[str, np.ndarray]:
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        y = tf.cast(model(x), tf.float32)
        loss = scale * tf.reduce_sum(tf.constant(cotangent(y.shape), tf.float32) * y)
    variables = {v.path: v for v in model.trainable_variables}
    grads = tape.gradient(loss, list(variables.values()))
    return {n: np.asarray(g, np.float64) / scale for n, g in zip(variables, grads)}


def test_a_small_tanh_mlp_fits_float16(tmp_path):
    model = keras_model("tanh_mlp")
    report = audit(export(model, tmp_path), tmp_path)
    assert precision_rules(report) == []
    own = rows(report)
    assert {"hidden/kernel", "hidden/bias", "out/kernel", "out/bias", "x"} <= set(own)
    assert all(r.underflow == 0 and r.overflow == 0 for r in own.values())
    summary = [n for n in report.notes_of("precision") if "every gradient fits" in n]
    assert len(summary) == 1
    # the same weights under mixed_float16: no gradient entry nonzero in float32 is zero in float16
    mixed = keras_model("tanh_mlp", "mixed_float16", model.get_weights())
    assert mixed.layers[1].compute_dtype == "float16"
    reference, half = keras_gradients(model), keras_gradients(mixed)
    for name in reference:
        assert zero_fraction(half[name], reference[name]) == 0.0, name
        np.testing.assert_allclose(half[name], reference[name], rtol=2e-2, atol=1e-3)


def test_exp_beyond_11_overflows_in_float16_and_the_op_is_named(tmp_path):
    big = [np.eye(4, dtype=np.float32) * 8.0]  # x up to 2: exp(16) = 8.9e6 > 65504
    model = keras_model("exp", weights=big)
    report = audit(export(model, tmp_path), tmp_path)
    overflows = {f.op.op_type: f for f in report.findings if f.rule == "activation-overflow"}
    f = overflows["Exp"]
    assert f.code == "GA333" and f.severity.value == "error" and "model's own point" in f.message
    # the MatMul before it overflows only at the probe scale 1e4 (8 × 1e4): info
    assert overflows["MatMul"].severity.value == "info" and "10000" in overflows["MatMul"].message
    assert "float32" in f.fix
    # TensorFlow's float16 under mixed_float16: the forward is inf exactly where gradaudit says
    mixed = keras_model("exp", "mixed_float16", big)
    y16 = np.asarray(mixed(tf.constant(X)), np.float64)
    y32 = np.asarray(model(tf.constant(X)), np.float64)
    (row,) = [r for r in report.precision if r.kind == "activation" and r.scale is None and r.op == f.op]
    assert np.mean(np.isinf(y16)) == row.overflow == np.mean(y32 > 65504) > 0
    # the fix it names, a float32 island through the dtype policy, keeps it finite
    import keras

    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inp = keras.Input(shape=(4,), name="x")
        h = keras.layers.Dense(4, name="dense", use_bias=False)(inp)
        island = keras.Model(inp, keras.layers.Activation("exponential", dtype="float32")(h))
        island.set_weights(big)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.all(np.isfinite(np.asarray(island(tf.constant(X)))))


def test_exp_below_11_is_no_finding(tmp_path):
    small = [np.eye(4, dtype=np.float32)]  # exp(2) at most
    model = keras_model("exp", weights=small)
    path = export(model, tmp_path)
    report = audit(path, tmp_path, probe_scales=(1e-3, 1.0))
    assert precision_rules(report) == []
    # over the whole ladder, exp of inputs × 100 overflows float16 (and float32 from 88.7): info, not a warning
    ladder = audit(path, tmp_path)
    assert {f.severity.value for f in ladder.findings if f.code in ("GA333", "GA334")} == {"info"}
    mixed = keras_model("exp", "mixed_float16", small)
    assert np.all(np.isfinite(np.asarray(mixed(tf.constant(X)))))


def test_a_mixed_float16_model_says_so_in_the_default_report(tmp_path):
    mixed = keras_model("tanh_mlp", "mixed_float16")
    report = audit_saved_model(str(export(mixed, tmp_path)), AuditOptions(timeout=None, probe_scales=(1.0,)))
    (note,) = report.notes_of("precision")
    assert note.startswith("The model computes in float16") and report.precision == []
    plain = keras_model("tanh_mlp")
    path = tmp_path / "plain"
    plain.export(str(path), verbose=False)
    assert audit_saved_model(str(path), AuditOptions(timeout=None, probe_scales=(1.0,))).notes_of("precision") == []
    # asked for float16, it checks what is left, and its float32 islands (the output layer) are its own choice
    checked = audit_saved_model(str(export(mixed, tmp_path / "again")), AuditOptions(timeout=None, probe_scales=(1.0,),
                                                                                  precision="float16"))
    assert "counts the entries of its float64 copy's gradients" in checked.notes_of("precision")[0]
    assert precision_rules(checked) == [] and rows(checked)
    assert all(r.reference == "float64 copy" for r in checked.precision if r.kind == "gradient")


def test_precision_results_round_trip_through_the_json_report(tmp_path):
    report = audit(save_ratio(tmp_path, 1e-11), tmp_path, probe_scales=(1.0, 1e2))
    doc = json_report.to_dict(report)
    jsonschema.validate(doc, json_report.schema())
    assert {r["scale"] for r in doc["precision"]} == {None, 1.0, 100.0}
    again = report_from_dict(json.loads(json.dumps(doc)))
    assert again.precision == report.precision
    text = render_plain(report)
    assert "Precision float16" in text and "zero 100%" in text


@pytest.mark.slow
def test_the_command_line_runs_it_in_the_confined_child(tmp_path):
    from click.testing import CliRunner

    from gradaudit.cli import main

    path = save_ratio(tmp_path, 1e-11)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=X)
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [str(path), "--precision", "float16", "--inputs", str(inputs),
                                       "--probe-scales", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output  # a warning does not fail at --fail-on error
    doc = json.loads(out.read_text())
    assert [f["code"] for f in doc["findings"] if f["code"].startswith("GA33")] == ["GA330"]
    assert doc["precision"] and doc["isolation"]["time_budget_s"]


def test_bfloat16_keeps_float32s_range_where_float16_flushes(tmp_path):
    k = 1e-11
    path = save_ratio(tmp_path, k)
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=X)
    report = audit_saved_model(str(path), AuditOptions(timeout=None, precision="bfloat16", inputs_file=str(inputs)))
    assert precision_rules(report) == []
    own = rows(report)
    assert all(r.dtype == "bfloat16" and r.underflow == 0 for r in own.values())
    # no power of two is named for a dtype no one loss-scales (tester 10's N1: "settles on 2**126")
    (fits,) = [n for n in report.notes_of("precision") if "every gradient fits" in n]
    assert "no loss scale is needed" in fits and "2**" not in fits
    # TensorFlow's bfloat16: none of them is zero
    module = Ratio(k, dtype=tf.bfloat16)
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.constant(cotangent((2, 4)), tf.float32) * module.body(x))
    g = tape.gradient(loss, {"x": x, "a": module.a, "b": module.b})
    assert all(np.all(np.asarray(v) != 0) for v in g.values())


class LogSigmoid(tf.Module):
    """log(sigmoid(w x)): sigmoid(-20) = 2e-9 is zero in float16, and log(0) = -inf; the stable form is not."""

    def __init__(self, stable: bool, dtype=tf.float32):
        super().__init__()
        self.stable, self.dtype = stable, dtype
        self.w = tf.Variable(np.full(4, 20.0, np.float32), name="w")

    def body(self, x):
        z = tf.cast(x, self.dtype) * tf.cast(self.w, self.dtype)
        return tf.math.log_sigmoid(z) if self.stable else tf.math.log(tf.sigmoid(z))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.cast(self.body(x), tf.float32)}


@pytest.mark.parametrize("stable", [False, True])
def test_an_activation_that_underflows_into_a_log_is_named(tmp_path, stable):
    module = LogSigmoid(stable)
    path = tmp_path / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    report = audit(path, tmp_path, probe_scales=(1.0,))
    y16 = np.asarray(LogSigmoid(stable, tf.float16).body(tf.constant(X)), np.float64)
    if stable:
        # (its gradients of saturated entries, 4e-8 and below, need a loss scale: gradient-underflow)
        assert "activation-underflow" not in precision_rules(report) and np.all(np.isfinite(y16))
        return
    (f,) = [f for f in report.findings if f.rule == "activation-underflow"]
    assert f.code == "GA334" and f.severity.value == "warning" and f.op.op_type == "Sigmoid"
    assert "Log 'Log'" in f.message or "feeds Log" in f.message
    (row,) = [r for r in report.precision if r.kind == "activation" and r.scale is None and r.op == f.op]
    # TensorFlow's float16: -inf exactly where sigmoid's output flushed to zero
    assert np.mean(np.isinf(y16)) == row.underflow > 0


# -- Python and Keras targets: checked on the saved copy, as their export is -------------------------------

def traced_audit(target, tmp_path, **options):
    """`gradaudit.audit` of an object or a Keras file, in process, with the point given as --inputs."""
    from gradaudit import audit as run

    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=X)
    return run(target, timeout=None, precision="float16", inputs_file=str(inputs), seed=SEED, **options)


def precision_table(report) -> dict:
    """(kind, name, scale) -> the row's fractions and loss scale, rounded; and the GA33x findings."""
    table = {(r.kind, r.name, r.scale): (r.entries, round(r.underflow, 6), round(r.subnormal, 6),
                                         round(r.overflow, 6), r.loss_scale, r.one_scale,
                                         r.op.op_type if r.op else None, r.op.op_name if r.op else None)
             for r in report.precision}
    findings = sorted((f.code, f.severity.value, f.sources, f.op.op_type if f.op else None,
                       f.op.op_name if f.op else None) for f in report.findings if f.code.startswith("GA33"))
    return {"rows": table, "findings": findings}


def test_a_keras_model_as_an_object_or_a_file_gets_the_precision_results_of_its_export(tmp_path):
    big = [np.eye(4, dtype=np.float32) * 8.0]  # exp(16) overflows at the point itself, and its gradient
    model = keras_model("exp", weights=big)
    exported = precision_table(audit(export(model, tmp_path), tmp_path))
    assert {f[0] for f in exported["findings"]} == {"GA332", "GA333"} and exported["rows"]  # gradients too
    as_object = traced_audit(model, tmp_path)
    assert not [line for line in as_object.incomplete if "precision" in line]
    assert precision_table(as_object) == exported
    model.save(tmp_path / "m.keras")
    assert precision_table(traced_audit(str(tmp_path / "m.keras"), tmp_path)) == exported


def test_a_tf_module_gets_the_precision_results_of_its_saved_model_and_tensorflows_float16_zeros(tmp_path):
    """The ratio seed's form as a traced target: the same rows and finding as its SavedModel, and what they say
    flushes to zero is zero in TensorFlow's float16."""
    k = 1e-11
    module = Ratio(k)
    saved = audit(save_ratio(tmp_path, k), tmp_path)
    traced = traced_audit(module, tmp_path)
    assert precision_table(traced) == precision_table(saved)
    assert precision_rules(traced) == ["gradient-underflow"]
    (f,) = [f for f in traced.findings if f.rule == "gradient-underflow"]
    assert set(f.sources) == {"x", "a", "b"}
    own = rows(traced)
    assert max(r.largest for r in own.values()) < 6e-8
    reference, at_one = _f32(k, 0.0), float16_gradients(k, 0.0, 1.0)
    scaled = float16_gradients(k, 0.0, own["a"].loss_scale)
    for name, r in own.items():
        assert zero_fraction(at_one[name], reference[name]) == r.underflow == 1.0, name
        assert zero_fraction(scaled[name], reference[name]) == 0.0, name
    # the tf.function alone (its variables named as the module's) and the healthy twin's summary line
    assert precision_table(traced_audit(module.__call__, tmp_path)) == precision_table(saved)
    healthy = traced_audit(Ratio(1e-2), tmp_path)
    assert precision_rules(healthy) == []
    assert len([n for n in healthy.notes_of("precision") if "every gradient fits" in n]) == 1


def test_a_mixed_float16_keras_object_says_so_in_the_default_report():
    from gradaudit import audit as run

    report = run(keras_model("tanh_mlp", "mixed_float16"), timeout=None, probe_scales=(1.0,))
    (note,) = report.notes_of("precision")
    assert note.startswith("The model computes in float16") and report.precision == []


class Loop(tf.Module):
    """A While loop: TensorFlow cannot run the frozen copy of its graph the forward side reads."""

    def __init__(self):
        super().__init__()
        self.w = tf.Variable(np.full(4, 0.5, np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        _, y = tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, v * self.w + 1.0), (tf.constant(0), x))
        return {"y": y}


def test_what_cannot_be_checked_makes_the_audit_incomplete_and_the_gradients_are_still_judged(tmp_path):
    module = Loop()
    path = tmp_path / "model"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    report = audit(path, tmp_path, probe_scales=(1.0,))
    (line,) = [line for line in report.incomplete if line.startswith("--precision float16")]
    assert "ops' outputs were not checked" in line and report.verdict() == "incomplete"
    assert set(rows(report)) == {"x", "w"} and not report.notes_of("precision")


def test_gradients_beyond_65504_overflow_and_the_scaler_falls_below_1(tmp_path):
    k = 1e3  # gradients k·u·x/b up to about 1e6
    report = audit(save_ratio(tmp_path, k), tmp_path, probe_scales=(1.0,))
    own = rows(report)
    (f,) = [f for f in report.findings if f.rule == "gradient-overflow"]
    assert f.code == "GA332" and "a" in f.sources
    scale = own["a"].loss_scale
    assert scale < 1 and own["a"].overflow > 0
    reference = _f32(k, 0.0)
    with np.errstate(invalid="ignore"):
        at_one = float16_gradients(k, 0.0, 1.0)
        at_scale = float16_gradients(k, 0.0, scale)
    for name, r in own.items():  # TensorFlow's float16: inf in the share gradaudit says; finite at its scale
        assert np.mean(~np.isfinite(at_one[name])) == r.overflow, name
        assert np.all(np.isfinite(at_scale[name])), name
        np.testing.assert_allclose(at_scale[name], reference[name], rtol=1e-2)


def test_the_loss_scale_is_the_one_the_trainable_variables_allow_not_the_inputs(tmp_path):
    """A loss scaler checks the gradients the optimizer applies, the trainable variables', never the inputs'
    (tester 10's m04: the input's larger gradient set the named scale one power of two low). `y = x @ w` with a
    large w: x's gradient is about 50 times w's; the scale named is the largest power of two that keeps w's
    float16 gradient finite (TensorFlow's own gradient, cast), at which x's would overflow."""

    class Wide(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.random.default_rng(1).standard_normal((4, 3)).astype("float32") * 200, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": x @ self.w}

    module = Wide()
    path = tmp_path / "wide"
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    loaded = tf.saved_model.load(str(path))
    x = tf.constant(X)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = loaded.signatures["serving_default"](x=x)["y"]
        loss = tf.reduce_sum(tf.constant(cotangent((2, 3)), tf.float32) * y)
    grads = [np.abs(np.asarray(g, np.float64)) for g in tape.gradient(loss, [x, loaded.w])]
    g_x, g_w = (float(g.max()) for g in grads)
    assert g_x > 8 * g_w  # the input's gradient is the larger
    finite = [k for k in range(40) if np.isfinite(np.float16(g_w * 2.0 ** k))]
    expected = 2.0 ** max(finite)
    report = audit(path, tmp_path)
    own = rows(report)
    assert {r.loss_scale for r in own.values()} == {expected}
    assert not np.isfinite(np.float16(g_x * expected))  # the inputs' gradient would not have allowed it
    cast = np.abs(np.asarray(grads[1][grads[1] > 0] * expected, np.float16).astype(np.float64))
    subnormal = float(np.mean((cast > 0) & (cast < np.finfo(np.float16).tiny)))
    assert own["w"].subnormal_scaled == pytest.approx(subnormal)  # numpy's own cast at that scale


def test_a_gradient_already_inf_in_float32_is_said_not_finite_not_ok(tmp_path):
    """exp(8x) at the probe scale 100: the loaded float32 model's own gradient is inf there (TensorFlow's tape), so
    nothing is left to cast; the row says the entries are not finite before the cast, never "ok" (tester 10's m19)."""
    from gradaudit.report.precision_rows import cell_text

    big = [np.eye(4, dtype=np.float32) * 8.0]
    path = export(keras_model("exp", weights=big), tmp_path)
    loaded = tf.saved_model.load(str(path))
    fn = loaded.signatures["serving_default"]
    (key,) = fn.structured_input_signature[1]
    x = tf.constant(X * 100)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(next(iter(fn(**{key: x}).values())))
    assert not np.all(np.isfinite(tape.gradient(y, x).numpy()))  # the truth: inf in float32 already
    report = audit(path, tmp_path)
    at100 = rows(report, scale=100.0)
    assert at100 and all(r.nonfinite and r.nonfinite > 0 for r in at100.values()), at100
    assert all("not finite" in cell_text(r) for r in at100.values())
    assert all(r.nonfinite == 0 for r in rows(report).values())  # finite at the model's own point


# -- outputs no op reads: a fused batch norm's reserve spaces in inference ---------------------------------

class FusedBatchNorm(tf.Module):
    """A convolution, TensorFlow's fused batch norm in inference (FusedBatchNormV3: besides y it returns reserve
    spaces that nothing reads, whose memory TensorFlow does not fill), and a dense head: every value the model
    computes fits float16 at the point."""

    def __init__(self):
        super().__init__()
        rng = np.random.default_rng(1)
        self.k = tf.Variable(rng.standard_normal((3, 3, 3, 4)).astype(np.float32) * 0.3, name="k")
        self.gamma = tf.Variable(np.ones(4, np.float32), name="gamma")
        self.beta = tf.Variable(np.zeros(4, np.float32), name="beta")
        self.mean = tf.Variable(np.full(4, 0.1, np.float32), trainable=False, name="mean")
        self.var = tf.Variable(np.full(4, 2.0, np.float32), trainable=False, name="var")
        self.w = tf.Variable(rng.standard_normal((4, 2)).astype(np.float32), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.nn.conv2d(x, self.k, 1, "SAME")
        h, _, _ = tf.compat.v1.nn.fused_batch_norm(h, self.gamma, self.beta, self.mean, self.var, is_training=False)
        return {"y": tf.reduce_mean(tf.nn.relu(h), axis=[1, 2]) @ self.w}


def _largest_read_value(path, points: list[np.ndarray]) -> float:
    """The truth, from TensorFlow's own freeze (convert_variables_to_constants_v2, its calls inlined): the largest
    magnitude of any float tensor an op of the forward reads, or the function returns, at `points`."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    loaded = tf.saved_model.load(str(path))  # holds the variables the signature reads
    frozen = convert_variables_to_constants_v2(loaded.signatures["serving_default"])
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
    read = {t for op in graph.get_operations() for t in op.inputs if t.dtype in (tf.float32, tf.float64)}
    (x,) = [t for t in read if t.op.type == "Placeholder"]
    largest = 0.0
    with tf.compat.v1.Session(graph=graph) as session:
        for point in points:
            values = session.run(sorted(read, key=lambda t: t.name), {x: point})
            largest = max([largest] + [float(np.max(np.abs(v))) for v in values if np.size(v)])
    return largest


@pytest.mark.parametrize("which", ["module", "tf-keras fixture"])
def test_outputs_no_op_reads_are_not_activations_of_the_model(tmp_path, which):
    """A FusedBatchNormV3 in inference returns reserve spaces no op reads, holding whatever memory they were given
    (seen here up to 1e38): they are not the model's values. Truth: every float tensor the forward reads fits
    float16 at the points checked, so no GA333 and no batch-norm activation row beyond float16's range."""
    from pathlib import Path

    if which == "module":
        module = FusedBatchNorm()
        path = tmp_path / "model"
        tf.saved_model.save(module, str(path), signatures={"serving_default": module.__call__})
    else:
        path = Path(__file__).parents[2] / "sample_models" / "thirdparty" / "tfkeras_bn_cnn"
    x = np.random.default_rng(3).standard_normal((2, 8, 8, 3)).astype(np.float32)
    np.savez(tmp_path / "inputs.npz", x=x)
    assert _largest_read_value(path, [x, x / np.max(np.abs(x))]) < 65504  # the truth: everything read fits
    report = audit_saved_model(str(path), AuditOptions(timeout=None, precision="float16", seed=SEED,
                                                       inputs_file=str(tmp_path / "inputs.npz"), probe_scales=(1.0,)))
    batch_norms = [r for r in report.precision if r.kind == "activation" and r.op is not None
                   and r.op.op_type == "FusedBatchNormV3"]
    assert not [r for r in batch_norms if r.overflow or (r.largest or 0.0) >= 65504], batch_norms
    assert "GA333" not in [f.code for f in report.findings], [f.message for f in report.findings]
