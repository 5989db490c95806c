"""A model that computes in float16 inside (a float16 island, as Keras' mixed_float16 policy makes): gradient entries
below float16's smallest subnormal are exactly zero in its gradient, while its float64 copy's are not. The default
audit says so (GA330, with the loss scale that brings them back), where `--precision` alone could not tell an
underflowed zero from an exact one. The truth is the tape on the loaded model (exactly zero) against float64 central
differences of the same function (not zero); the twin whose gradients are in float16's range gets no GA330."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


class Island(tf.Module):
    def __init__(self, loss_scale: float):
        self.loss_scale = loss_scale
        self.w = tf.Variable(np.random.default_rng(15).standard_normal((4, 4)).astype("float32") * 1e-2, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.matmul(tf.cast(x, tf.float16) * 1e-2, tf.cast(self.w, tf.float16))
        return {"loss": self.loss_scale * tf.reduce_sum(tf.cast(tf.tanh(h), tf.float32), -1)}


def _truth(path: str, loss_scale: float) -> tuple[float, float]:
    """(largest |tape gradient| of x on the loaded model, largest |float64 central difference|)."""
    loaded = tf.saved_model.load(path)
    x = np.random.default_rng(0).standard_normal((1, 4))
    xt = tf.constant(x, tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=xt)["loss"])
    tape_max = float(np.max(np.abs(tape.gradient(y, xt).numpy())))
    w = loaded.w.numpy().astype(np.float64)

    def f(v):
        return loss_scale * np.sum(np.tanh((v * 1e-2) @ w))

    h = 1e-4
    numeric = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)]
    return tape_max, float(np.max(np.abs(numeric)))


def test_gradients_that_underflow_inside_a_float16_island_are_reported(tmp_path):
    path = save_module(Island(1e-4), str(tmp_path / "island"))
    tape_max, true_max = _truth(path, 1e-4)
    assert tape_max == 0.0 and true_max > 1e-9  # the truth: zero in the model, not in exact arithmetic
    r = audit_saved_model(path, AuditOptions())
    found = [f for f in r.findings if f.code == "GA330" and "x" in f.sources]
    assert found and "2**" in found[0].message, [f.message for f in r.findings]
    assert r.verdict() == "pass"  # information: a dynamic loss scale brings them back
    assert not [f for f in r.findings if f.code == "GA206"]  # float16 rounding is not a float32 gradient error


def test_a_float16_island_whose_gradients_fit_gets_no_finding(tmp_path):
    path = save_module(Island(1e3), str(tmp_path / "fits"))
    tape_max, true_max = _truth(path, 1e3)
    assert tape_max > 0 and abs(tape_max - true_max) < 1e-2 * true_max
    r = audit_saved_model(path, AuditOptions())
    assert not [f for f in r.findings if f.code == "GA330"], [f.message for f in r.findings]
    assert any("nothing underflowed inside" in n.text for n in r.notes)


def _scaled_tape(path: str, scale: float) -> np.ndarray:
    """The loaded model's gradient of x with the loss scaled by `scale` before the backward pass, as a dynamic loss
    scaler does it (the scaled cotangent goes through the model's own float16 backward), divided back."""
    loaded = tf.saved_model.load(path)
    xt = tf.constant(np.random.default_rng(0).standard_normal((1, 4)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = loaded.signatures["serving_default"](x=xt)["loss"]
    return tape.gradient(y, xt, output_gradients=tf.fill(tf.shape(y), tf.constant(scale, tf.float32))).numpy() / scale


def test_precision_float16_on_a_model_in_float16_counts_what_underflowed_inside_and_the_named_scale_saves_it(tmp_path):
    """`--precision float16` on a model that computes in float16 already: its own gradient holds the underflowed
    entries as zeros, so the counts are its float64 copy's, and those zero in its own (once, not again from the
    probes); the loss scale named brings them back in TensorFlow's own float16 backward."""
    path = save_module(Island(1e-4), str(tmp_path / "island"))
    r = audit_saved_model(path, AuditOptions(precision="float16"))
    found = [f for f in r.findings if f.code == "GA330"]
    assert len(found) == 1 and "x" in found[0].sources, [f.message for f in r.findings]
    assert not [n for n in r.notes_of("precision") if "every gradient fits" in n]
    (x,) = [p for p in r.precision if p.kind == "gradient" and p.name == "x" and p.scale is None]
    assert x.reference == "float64 copy" and x.zero_inside == 1.0 and x.underflow == 1.0
    assert x.zero_rescued == 1.0 and x.rescue_scale is not None  # measured: its own gradient at a scale is nonzero
    assert x.loss_scale is not None and np.all(_scaled_tape(path, 1.0) == 0)
    rescued = _scaled_tape(path, x.loss_scale)
    assert np.all(rescued != 0), rescued  # the truth: the named scale makes them non-zero in float16
    assert not [f for f in r.findings if f.code == "GA206"]  # float16 rounding is not a float32 gradient error


def test_precision_float16_on_a_float16_model_whose_gradients_fit_says_so(tmp_path):
    path = save_module(Island(1e3), str(tmp_path / "fits"))
    r = audit_saved_model(path, AuditOptions(precision="float16"))
    assert not [f for f in r.findings if f.code.startswith("GA33")], [f.message for f in r.findings]
    assert [n for n in r.notes_of("precision") if "every gradient fits" in n]
    base = [p for p in r.precision if p.kind == "gradient" and p.scale is None]
    assert base and all(p.reference == "float64 copy" and p.zero_inside == 0.0 for p in base)


class IslandWithBits(Island):
    """The island with an output that reinterprets the input's bytes as float16 halves (tf.bitcast): no float64
    copy of it can be made, since a float64 holds other bytes (a bitcast to integers is made in the copy from the
    input cast back to float32 first)."""

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.matmul(tf.cast(x, tf.float16) * 1e-2, tf.cast(self.w, tf.float16))
        return {"loss": self.loss_scale * tf.reduce_sum(tf.cast(tf.tanh(h), tf.float32), -1),
                "bits": tf.cast(tf.bitcast(x, tf.float16), tf.int32)}


def test_precision_float16_on_a_float16_model_without_a_float64_copy_is_incomplete(tmp_path):
    """Without the float64 copy, an underflowed zero cannot be told from an exact one: incomplete, saying why,
    never 'every gradient fits' (the model's own gradient of x is all zeros here, which fits any dtype)."""
    path = save_module(IslandWithBits(1e-4), str(tmp_path / "bits"))
    tape_max, _ = _truth(path, 1e-4)
    assert tape_max == 0.0
    r = audit_saved_model(path, AuditOptions(precision="float16"))
    assert any("only its float64 copy tells them apart" in i and "Bitcast" in i for i in r.incomplete), r.incomplete
    assert r.verdict() == "incomplete"
    assert not [n for n in r.notes_of("precision") if "every gradient fits" in n]


def test_precision_bfloat16_on_a_float16_model_counts_the_exact_gradient_not_float16s_zeros(tmp_path):
    """bfloat16 keeps float32's range: x's exact gradient (about 1e-9) fits it, while the model's own float16
    backward leaves it all zeros. The rows count the float64 copy's entries (the zeros are float16's loss, the
    probes' GA330, not bfloat16's)."""
    path = save_module(Island(1e-4), str(tmp_path / "island"))
    tape_max, true_max = _truth(path, 1e-4)
    assert tape_max == 0.0 and float(tf.cast(tf.constant(true_max, tf.float32), tf.bfloat16)) > 0
    r = audit_saved_model(path, AuditOptions(precision="bfloat16"))
    (x,) = [p for p in r.precision if p.kind == "gradient" and p.name == "x" and p.scale is None]
    assert x.reference == "float64 copy" and x.entries == 4 and x.underflow == 0.0 and x.zero_inside is None
    assert not [f for f in r.findings if f.code == "GA330" and "bfloat16" in f.message], [f.message for f in r.findings]
    assert [f for f in r.findings if f.code == "GA330" and "float16 inside" in f.message]  # the probes' own
    assert "cast to bfloat16" in r.notes_of("precision")[0]


class Half(tf.Module):
    """A model in float16 throughout (no Cast op): its backward multiplies by 1e-4 twice, below float16's range."""

    def __init__(self):
        rng = np.random.default_rng(2)
        self.w = tf.Variable(rng.standard_normal((4, 4)).astype("float16"), name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float16, name="x")])
    def __call__(self, x):
        return {"y": tf.tanh(tf.matmul(x, self.w)) * 1e4 * 1e-4 * 1e-4}


def test_precision_float16_on_a_model_in_float16_throughout_counts_what_its_backward_lost(tmp_path):
    """Tester 9's m8b: no Cast op, so the model was not seen as computing in float16, and its all-zero gradient
    'fit'. The truth: the tape on the loaded model gives zeros, float64 differences of the same function do not."""
    path = save_module(Half(), str(tmp_path / "half"))
    loaded = tf.saved_model.load(path)
    x = np.random.default_rng(0).standard_normal((1, 4)).astype("float16")
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        y = tf.reduce_sum(loaded.signatures["serving_default"](x=xt)["y"])
    assert not np.any(tape.gradient(y, xt).numpy())
    w = loaded.w.numpy().astype(np.float64)
    h = 1e-4
    def f(v):
        return np.sum(np.tanh(v @ w)) * 1e-4

    numeric = [(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(4)]
    assert max(abs(v) for v in numeric) > 1e-6
    r = audit_saved_model(path, AuditOptions(precision="float16"))
    assert not [n for n in r.notes_of("precision") if "every gradient fits" in n]
    (found,) = [f for f in r.findings if f.code == "GA330"]
    assert "x" in found.sources and "w" in found.sources, found.message
    assert "op(s) computing in float16" in r.notes_of("precision")[0]


class Saturated(tf.Module):
    """tanh(x @ w) computed in float16, w large: tanh rounds to 1 for most entries, so 1 - tanh² is exactly zero in
    the model's own backward while the exact derivative is about 1e-6 to 1e-30: a rounding, not an underflow (a
    power-of-two loss scale leaves it zero)."""

    def __init__(self):
        self.w = tf.Variable(np.random.default_rng(3).standard_normal((4, 16)).astype("float32") * 8, name="w")

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def __call__(self, x):
        h = tf.tanh(tf.matmul(tf.cast(x, tf.float16), tf.cast(self.w, tf.float16)))
        return {"y": tf.reduce_sum(tf.cast(h, tf.float32), -1)}


def _bfloat16_saturated(path: str) -> str:
    """A Keras mixed_bfloat16 model whose first tanh layer saturates (bfloat16 keeps 8 bits: tanh rounds to 1 from
    about 3), exported."""
    import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.utils.set_random_seed(0)
        inp = keras.Input((8,))
        wide = keras.initializers.RandomNormal(stddev=2.0)
        h = keras.layers.Dense(32, activation="tanh", kernel_initializer=wide)(inp)
        out = keras.layers.Activation("softmax", dtype="float32")(keras.layers.Dense(10)(h))
        keras.Model(inp, out).export(path, verbose=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return path


def _zeros_kept_at_scale(path: str, name: str, shape: tuple[int, ...], scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(the loaded model's own gradient of its first variable named `name`, the same with the cotangent × scale):
    TensorFlow's own half-precision backward, at the point and cotangent given."""
    loaded = tf.saved_model.load(path)
    fn = loaded.signatures["serving_default"]
    (key,) = fn.structured_input_signature[1]
    x = tf.constant(np.random.default_rng(1).standard_normal(shape), tf.float32)
    candidates = list(getattr(loaded, "variables", None) or [loaded.w])  # a Keras export lists its variables
    var = next(v for v in candidates if name in v.name and v.dtype == tf.float32 and len(v.shape) == 2)
    grads = []
    for factor in (1.0, scale):
        with tf.GradientTape() as tape:
            out = next(iter(fn(**{key: x}).values()))
        grads.append(tape.gradient(out, var, output_gradients=tf.fill(tf.shape(out), factor)).numpy())
    return grads[0], grads[1]


@pytest.mark.parametrize("kind", ["float16 module", "keras mixed_bfloat16"])
def test_gradient_zeros_that_a_loss_scale_keeps_are_rounding_not_underflow(tmp_path, kind):
    """A model in a half precision whose own gradient is exactly zero where its float64 copy's is not, because the
    dtype rounds (a saturated tanh), not because anything underflowed: no GA330 and no loss scale for it (tester
    9's m3a); the rows hold the evidence (zero inside, none rescued at the scale tried) and a note says so."""
    if kind == "float16 module":
        path, target, name, shape = save_module(Saturated(), str(tmp_path / "sat")), "float16", "w", (2, 4)
    else:
        path, target, name, shape = _bfloat16_saturated(str(tmp_path / "sat_bf16")), "bfloat16", "dense", (2, 8)
    own, scaled = _zeros_kept_at_scale(path, name, shape, 2.0 ** 8)
    assert np.any(own == 0) and np.array_equal(own == 0, scaled == 0)  # the truth: the scale brings none back
    r = audit_saved_model(path, AuditOptions(precision=target))
    assert not [f for f in r.findings if f.code in ("GA330", "GA331")], [f.message for f in r.findings]
    rows = [p for p in r.precision if p.kind == "gradient" and p.scale is None and p.zero_inside]
    assert rows and all(p.zero_rescued == 0.0 and p.rescue_scale for p in rows), rows
    assert any("rounding" in n and "no loss scale brings them back" in n for n in r.notes_of("precision"))
    default = audit_saved_model(path, AuditOptions())  # the probes' comparison of the two gradients alike
    assert not [f for f in default.findings if f.code == "GA330"], [f.message for f in default.findings]
    if kind == "float16 module":  # saturated at the probe points too
        assert any("rounding" in n.text and "no loss scale brings them back" in n.text for n in default.notes)
