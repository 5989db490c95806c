"""Python functions, Keras models and files, the Python API and the pytest helper."""

from __future__ import annotations

import json
import os

import example_models
import jsonschema
import keras
import pytest

import gradaudit
from gradaudit import GradauditError, audit
from gradaudit.report import json_report
from gradaudit.testing import assert_differentiable

pytestmark = pytest.mark.slow  # every test here runs a model's numeric checks

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/, where example_models.py is


def flow(report, source, output):
    return next(f for f in report.flow if f.source == source and f.output == output)


@pytest.mark.parametrize("target", ["example_models:argmax_head", os.path.join(HERE, "example_models.py") +
                                    ":argmax_head", "example_models:concrete"])
def test_module_file_and_concrete_function_targets(target):
    r = audit(target, static_only=True)
    assert r.target.kind == "python"
    assert {s.name for s in r.sources} == {"x", "w"}
    assert flow(r, "x", "cls").status == "blocked" and flow(r, "w", "probs").status == "connected"
    assert [f.rule for f in r.findings] == ["zero-gradient"]
    jsonschema.validate(json.loads(gradaudit.to_json(r)), json_report.schema())


def test_objects_directly():
    r = audit(example_models.argmax_head, static_only=True)
    assert flow(r, "x", "cls").status == "blocked"
    r = audit(example_models.scaler, static_only=True)
    assert [f.sources for f in r.findings if f.rule == "disconnected-source"] == [("unused",)]
    assert flow(r, "a", "y").status == "connected"


def test_custom_gradient_in_python_function_is_analysed():
    r = audit("example_models:custom_ste", static_only=True)
    assert flow(r, "x", "y").status == "connected"
    assert [f.rule for f in r.findings] == ["custom-gradient"]


def test_input_spec_for_a_function_without_signature():
    with pytest.raises(GradauditError, match="--input-spec"):
        audit("example_models:no_signature", static_only=True)
    r = audit("example_models:no_signature", static_only=True, input_specs=("x=float32[None,3]",))
    assert [(s.name, s.shape) for s in r.sources] == [("x", (None, 3))]
    assert flow(r, "x", "y").status == "connected"
    with pytest.raises(GradauditError, match="expected NAME=DTYPE"):
        audit("example_models:no_signature", static_only=True, input_specs=("x:float32",))


def test_keras_model_object_and_factory():
    r = audit(example_models.make_mlp(), static_only=True)
    assert r.target.kind == "keras" and r.ok
    assert {s.name for s in r.sources} == {"x", "d1/kernel", "d1/bias", "d2/kernel", "d2/bias"}
    assert all(f.status == "connected" for f in r.flow)
    r = audit("example_models:make_mlp", static_only=True)  # a no-argument factory
    assert all(f.status == "connected" for f in r.flow) and len(r.flow) == 5


def test_keras_file_with_argmax_head(tmp_path):
    keras.utils.set_random_seed(0)
    inp = keras.Input((4,), name="x")
    probs = keras.layers.Dense(3, activation="softmax", name="dense")(inp)
    cls = keras.ops.cast(keras.ops.argmax(probs, axis=-1), "float32")
    path = str(tmp_path / "argmax.keras")
    keras.Model(inp, {"probs": probs, "cls": cls}).save(path)
    r = audit(path, static_only=True)
    assert r.target.kind == "keras"
    cut = flow(r, "dense/kernel", "cls")
    assert cut.status == "blocked" and [c.op.op_type for c in cut.blocked_by] == ["ArgMax"]
    assert flow(r, "x", "probs").status == "connected"
    assert [f.rule for f in r.findings] == ["zero-gradient"]


@pytest.mark.parametrize("target,message", [
    ("no_such_module_xyz:f", "module not found"),
    ("example_models:missing", "has no attribute 'missing'"),
    ("example_models:answer", "cannot be audited"),
    ("/nonexistent/file.py:f", "no such file"),
])
def test_target_errors(target, message):
    with pytest.raises(GradauditError, match=message):
        audit(target, static_only=True)


def test_keras_file_needing_unsafe_deserialisation(tmp_path):
    inp = keras.Input((4,), name="x")
    path = str(tmp_path / "lambda.keras")
    keras.Model(inp, keras.layers.Lambda(lambda t: t * 2.0)(inp)).save(path)
    with pytest.raises(GradauditError, match="unsafe deserialisation"):
        audit(path, static_only=True)


def test_assert_differentiable():
    report = assert_differentiable(example_models.make_mlp(), static_only=True)
    assert report.ok
    with pytest.raises(AssertionError) as info:
        assert_differentiable("example_models:argmax_head", static_only=True)
    text = str(info.value)
    assert "ArgMax" in text and "zero-gradient" in text and "fix:" in text
    with pytest.raises(AssertionError, match="x -> cls: blocked by ArgMax"):
        assert_differentiable("example_models:argmax_head", wrt=["x"], fail_on="never", static_only=True)
    with pytest.raises(AssertionError, match="not a differentiable source"):
        assert_differentiable("example_models:scaler", wrt=["nope"], static_only=True)
    assert gradaudit.testing is not None


def test_wrong_custom_gradient_in_python_function_is_caught_numerically():
    r = audit("example_models:wrong_gradient")
    check = next(n for n in r.numeric if n.source == "x")
    assert check.status == "fail" and check.rel_error > 0.1
    assert "gradient-mismatch" in {f.rule for f in r.findings} and not r.ok


def test_healthy_keras_model_passes_numerically():
    r = audit(example_models.make_mlp())
    # at the synthesised point every check passes; at a probe point where every ReLU is off (inputs × -600)
    # gradient and differences are both zero: inconclusive, never a failure
    assert r.numeric and all(n.status == "pass" for n in r.numeric if n.scale is None), r.numeric
    assert all(n.status in ("pass", "inconclusive") for n in r.numeric), r.numeric
    assert r.ok


@pytest.mark.slow
def test_console_script_imports_modules_of_the_working_folder():
    import shutil
    import subprocess

    exe = shutil.which("gradaudit")
    assert exe, "the gradaudit console script is installed by `pip install -e .`"
    proc = subprocess.run([exe, "example_models:argmax_head", "--static-only", "--format", "json"], cwd=HERE,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["findings"][0]["rule"] == "zero-gradient"


@pytest.mark.slow  # starts a gradaudit process
@pytest.mark.parametrize("target,message", [
    ("no_such_module_xyz:f", "module not found"),
    ("example_models:missing", "has no attribute"),
    ("example_models:answer", "cannot be audited"),
    ("example_models:no_signature", "--input-spec"),
])
def test_cli_target_errors_exit_2_with_one_line(target, message, tmp_path):
    from click.testing import CliRunner

    from gradaudit.cli import main

    result = CliRunner().invoke(main, [target, "--static-only"])
    assert result.exit_code == 2 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in result.stderr

    inp = keras.Input((4,), name="x")
    path = str(tmp_path / "lambda.keras")
    keras.Model(inp, keras.layers.Lambda(lambda t: t * 2.0)(inp)).save(path)
    result = CliRunner().invoke(main, [path, "--static-only"])
    assert result.exit_code == 2 and "unsafe deserialisation" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_python_targets_get_the_stability_probes():
    r = audit("example_models:log1pexp_naive")
    lint = next(f for f in r.findings if f.rule == "log1p-exp")
    assert lint.severity.value == "error" and "Confirmed by the stability probes" in lint.message
    assert "nonfinite-forward" in {f.rule for f in r.findings}
    assert {(s.source, s.output) for s in r.stability} == {("x", "output_0")}
    keras_report = audit(example_models.make_log_sigmoid_model())
    outputs = {o.name for o in keras_report.outputs}
    assert keras_report.stability and {s.output for s in keras_report.stability} <= outputs | {"*"}


def test_probe_point_checks_of_several_outputs_name_the_models_outputs():
    """A Keras model with a list of outputs runs its probes on a saved copy whose outputs are output_0,
    output_1, ...: a probe-point check of two of its outputs together names both as the model does (each name
    mapped back; the joined label "output_0,output_1" was not)."""
    import tensorflow as tf

    class Stopped(keras.layers.Layer):
        def call(self, t):
            return t + tf.stop_gradient(tf.square(t))

    inp = keras.Input((3,), name="x")
    hidden = keras.layers.Dense(2, name="d")(inp)
    heads = [keras.layers.Dense(2, name="y1")(hidden), keras.layers.Dense(2, name="y2")(hidden),
             Stopped(name="y3")(hidden)]
    r = audit(keras.Model(inp, heads))
    names = {o.name for o in r.outputs}
    assert names == {"y1", "y2", "y3"}
    probed = [n for n in r.numeric if n.scale is not None]
    assert any(len(n.outputs.names) == 2 for n in probed)  # the outputs without the cut, checked together
    assert all(set(n.outputs.names) <= names for n in r.numeric)
    assert {row["output"] for row in json_report.to_dict(r)["numeric"] if row["scale"] is not None} == {"y1,y2", "y3"}


def test_keras_model_with_dict_inputs(recwarn):
    a, b = keras.Input((3,), name="a"), keras.Input((2,), name="b")
    out = keras.layers.Dense(1, name="head")(keras.layers.Concatenate()([a, b]))
    r = audit(keras.Model({"a": a, "b": b}, out), static_only=True)
    assert {s.name for s in r.sources if s.kind == "input"} == {"a", "b"}
    assert all(f.status == "connected" for f in r.flow)
    assert not [w for w in recwarn if "structure of inputs" in str(w.message)]


def test_findings_of_traced_functions_name_the_function():
    r = audit("example_models:argmax_head", static_only=True)
    assert r.findings[0].op.function.startswith("__inference_argmax_head")


def test_a_file_target_python_cannot_import_is_a_usage_error(tmp_path):
    """mypy found it: a file:attr target without a .py suffix crashed (spec_from_file_location gives None)."""
    target = tmp_path / "sub" / "model_def"
    target.parent.mkdir()
    target.write_text("x = 1\n")
    with pytest.raises(GradauditError, match="not a Python file gradaudit can import"):
        audit(f"{target}:x", static_only=True)


@pytest.mark.parametrize("policy", ["mixed_float16", "float32"])
def test_a_keras_file_is_checked_on_a_float64_copy_like_its_export(tmp_path, policy):
    """A healthy Keras CNN as a .keras file and as `model.export`: the same verdict, the numeric checks at the
    model's own point decided in float64 on both (tester 10's M1: the mixed_float16 .keras file stayed incomplete,
    its float32 differences of float16 arithmetic undecided, while its export passed)."""
    import numpy as np

    keras.mixed_precision.set_global_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        inp = keras.Input((8, 8, 1), name="img")
        h = keras.layers.Conv2D(4, 3, activation="relu", name="conv")(inp)
        h = keras.layers.Dense(8, activation="tanh", name="d1")(keras.layers.Flatten()(h))
        out = keras.layers.Dense(3, name="logits", dtype="float32")(h)
        model = keras.Model(inp, out)
        model.save(str(tmp_path / "m.keras"))
        model.export(str(tmp_path / "exported"), verbose=False)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    reports = {kind: audit(str(tmp_path / name)) for kind, name in (("keras", "m.keras"), ("export", "exported"))}
    for kind, r in reports.items():
        own = [n for n in r.numeric if n.scale is None]
        assert own and all(n.status == "pass" and n.dtype == "float64" for n in own), (kind, own)
        assert r.verdict() == "pass", (kind, r.incomplete, [f.message for f in r.findings])
    keras_sources = {n.source for n in reports["keras"].numeric}
    assert keras_sources == {n.source for n in reports["export"].numeric}
    assert np.isfinite([n.rel_error for n in reports["keras"].numeric if n.rel_error is not None]).all()


def test_a_keras_file_without_a_float64_copy_says_why_as_its_export_does(tmp_path):
    """A Resizing layer's kernel (ResizeBilinear) takes float32 only: the .keras file is checked in its own
    precision, and says that reason, the export's, not "float64 copies are made of SavedModels only" (tester 12's
    M3, first seen with keras.ops.argmax's Bitcast, which the float64 copy now casts back to float32 before)."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((4, 4, 1), name="x")
    hidden = keras.layers.Flatten()(keras.layers.Resizing(6, 6, interpolation="bilinear")(inp))
    probs = keras.layers.Dense(3, activation="softmax", name="dense")(hidden)
    model = keras.Model(inp, {"probs": probs, "cls": keras.ops.cast(keras.ops.argmax(probs, axis=-1), "float32")})
    model.save(str(tmp_path / "resize.keras"))
    model.export(str(tmp_path / "exported"), verbose=False)
    for name in ("resize.keras", "exported"):
        r = audit(str(tmp_path / name))
        reasons = {n.precision_reason for n in r.numeric if n.scale is None}
        assert reasons and all("Resize" in why and "float32" in why for why in reasons), (name, reasons)
        assert not [n for n in r.notes if "SavedModels only" in n.text], name


class _SameNames:
    """Two tf.Variables both named `Variable` at the attributes w1 and w2; w2 reaches y only through a
    stop_gradient (tester 25)."""

    @staticmethod
    def module():
        import tensorflow as tf

        class M(tf.Module):
            def __init__(self):
                self.w1 = tf.Variable(1.5)
                self.w2 = tf.Variable(0.5)

            @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
            def __call__(self, x):
                return {"y": x * self.w1 + tf.stop_gradient(x * self.w2)}

        return M()


@pytest.mark.parametrize("static_only", [True, False])
def test_variables_that_share_a_name_are_named_by_their_object_path(tmp_path, static_only):
    """As the same module's SavedModel names them (`Variable (w1)`), in a full audit and with --static-only, and the
    variable behind the stop_gradient gets its GA108 (before: `Variable` twice and no GA108 with --static-only,
    `Variable (captured.0)` in a full audit)."""
    import tensorflow as tf

    module = _SameNames.module()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.__call__})
    saved = audit(str(tmp_path / "sm"), static_only=True)
    traced = audit(module, static_only=static_only)
    assert {s.name for s in traced.sources} == {s.name for s in saved.sources} == {"x", "Variable (w1)",
                                                                                   "Variable (w2)"}
    stopped = [f for f in traced.findings if f.code == "GA108"]
    assert [f.sources for f in stopped] == [f.sources for f in saved.findings if f.code == "GA108"]
    assert [f.sources for f in stopped] == [("Variable (w2)",)]  # the one behind the stop_gradient


def test_what_the_models_own_code_raises_while_traced_is_its_error(tmp_path):
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
    def boom(x):
        raise ValueError("boom at trace")

    with pytest.raises(GradauditError, match="tracing it raised ValueError: boom at trace"):
        audit(boom, static_only=True)


def test_a_module_without_a_call_points_at_its_functions():
    import tensorflow as tf

    class Codec(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
        def encode(self, x):
            return {"z": tf.round(x)}

    with pytest.raises(GradauditError, match=r"audit one of its tf.functions as a target of its own \(codec.encode\)"):
        gradaudit.api.audit_object(Codec(), gradaudit.api.AuditOptions(static_only=True), label="codec")
    assert audit(Codec().encode, static_only=True).verdict() == "fail"  # the function it names audits (GA103)
