"""Each GA1xx rule: a model where it must fire, and one where it must not. Asserted by slug."""

from __future__ import annotations

import os

import pytest
from helpers import save_module


def rules_of(report, severity=None) -> set[str]:
    return {f.rule for f in report.findings if severity is None or f.severity.value == severity}


def finding(report, rule):
    found = [f for f in report.findings if f.rule == rule]
    assert found, f"no {rule} finding in {[f.rule for f in report.findings]}"
    return found[0]


def flow(report, source, output):
    return next(f for f in report.flow if f.source == source and f.output == output)


def test_zero_gradient_argmax_blocks_class_output_only(static_report):
    r = static_report("classifier_argmax")
    f = finding(r, "zero-gradient")
    assert f.op.op_type == "ArgMax" and f.severity.value == "error" and f.code == "GA103"
    assert f.outputs == ("cls",) and set(f.sources) == {"x", "dense/kernel", "dense/bias"}
    assert flow(r, "x", "cls").status == "blocked"
    assert [c.op.op_type for c in flow(r, "x", "cls").blocked_by] == ["ArgMax"]
    assert flow(r, "x", "probs").status == "connected"
    assert flow(r, "dense/kernel", "probs").status == "connected"
    assert r.verdict() == "fail"


@pytest.mark.parametrize("name", ["mlp", "cnn", "while_loop", "cond", "nested_function", "embedding",
                                  "normal_logpdf", "softplus", "ste", "fake_quant", "log1pexp_custom"])
def test_healthy_models_have_no_errors(static_report, name):
    r = static_report(name)
    assert not rules_of(r, "error"), [f.message for f in r.findings]
    assert all(f.status == "connected" for f in r.flow), [(f.source, f.output, f.status) for f in r.flow]


def test_no_gradient_op(static_report):
    r = static_report("no_gradient_op")
    f = finding(r, "no-gradient")
    assert f.op.op_type == "AdjustContrastv2" and f.severity.value == "error"
    assert flow(r, "x", "y").status == "blocked"
    # TensorFlow raises LookupError for every pair as soon as the loaded call runs under a tape
    assert flow(r, "w_out", "y").status == "blocked" and flow(r, "w_out", "y").raises
    assert "no-gradient" not in rules_of(static_report("mlp"))


def test_not_differentiable_op(static_report):
    r = static_report("not_differentiable_op")
    f = finding(r, "not-differentiable")
    assert f.op.op_type == "HSVToRGB"
    assert set(f.sources) == {"x", "w_in"}
    assert "not-differentiable" not in rules_of(static_report("cnn"))


def test_integer_path_cast_to_int(static_report):
    r = static_report("quantize_int")
    f = finding(r, "integer-path")
    assert f.op.op_type == "Cast" and "int32" in f.message
    assert flow(r, "x", "q").status == "blocked" and flow(r, "scale", "q").status == "connected"


def test_integer_indices_and_shapes_are_not_findings(static_report):
    r = static_report("embedding")  # int32 token ids gather rows, a bool mask selects them
    assert not r.findings
    kinds = {s.name: s.differentiable for s in r.sources}
    assert kinds["ids"] is False and kinds["mask"] is False and kinds["embedding/table"] is True


@pytest.mark.parametrize("name,op_type", [("numpy_function", "PyFunc"), ("pyfunc_float", "EagerPyFunc")])
def test_py_function(static_report, name, op_type):
    f = finding(static_report(name), "py-function")
    assert f.op.op_type == op_type and f.severity.value == "error" and f.sources == ("x",)


def test_stop_gradient_is_info_and_names_the_cut(static_report):
    r = static_report("stop_gradient")
    f = finding(r, "stop-gradient")
    assert f.severity.value == "info" and f.op.op_type == "StopGradient"
    assert flow(r, "w1", "y").status == "blocked" and flow(r, "w2", "y").status == "connected"
    assert r.verdict() == "pass"


def test_straight_through_estimator_is_not_a_zero_gradient(static_report):
    r = static_report("ste")
    assert "zero-gradient" not in rules_of(r)  # the Round sits inside stop_gradient on purpose
    assert flow(r, "x", "y").status == "connected"


def test_custom_gradient_saved_is_info(static_report):
    r = static_report("log1pexp_custom")
    f = finding(r, "custom-gradient")
    assert f.severity.value == "info" and "internal_grad_fn" in f.message


def test_custom_gradient_replaces_a_cut_forward(tmp_path):
    """A custom gradient around round(): the forward's Round is not a cut; the custom gradient decides."""
    import tensorflow as tf

    from gradaudit.api import AuditOptions, audit_saved_model

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            @tf.custom_gradient
            def rounded(v):
                return tf.round(v), lambda dy: dy

            @tf.custom_gradient
            def dead(v):  # a custom gradient that returns no gradient at all
                return v * 2.0, tf.zeros_like

            @tf.custom_gradient
            def ignores_dy(v):  # right derivative, but not multiplied by the incoming gradient
                return tf.sin(v), lambda dy: tf.cos(v)

            @tf.custom_gradient
            def none(v):
                return v * 2.0, lambda dy: None

            return {"y": rounded(x) * 3.0, "z": dead(x), "w": ignores_dy(x), "n": none(x)}

    m = M()
    path = save_module(m, str(tmp_path / "cg"))
    r = audit_saved_model(path, AuditOptions(static_only=True))
    assert "zero-gradient" not in rules_of(r)
    assert flow(r, "x", "y").status == "connected"
    for out in ("z", "w", "n"):  # zeros_like(dy), cos(x) and None do not depend on dy
        assert flow(r, "x", out).status == "blocked"
        assert [c.rule for c in flow(r, "x", out).blocked_by] == ["custom-gradient"]
    dead = [f for f in r.findings if f.rule == "custom-gradient" and f.severity.value == "error"]
    assert sorted(o for f in dead for o in f.outputs) == ["n", "w", "z"]
    assert all("ignores the incoming gradient" in f.message for f in dead)

    unsaved = str(tmp_path / "cg_unsaved")
    tf.saved_model.save(m, unsaved, signatures={"serving_default": m.__call__},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    r = audit_saved_model(unsaved, AuditOptions(static_only=True))
    f = finding(r, "custom-gradient")
    assert f.severity.value == "error" and "LookupError" in f.message
    assert flow(r, "x", "y").status == "blocked"


def test_disconnected_source(static_report):
    r = static_report("disconnected_variable")
    f = finding(r, "disconnected-source")
    assert f.sources == ("unused",) and f.severity.value == "warning"
    assert "disconnected-source" not in rules_of(static_report("while_loop"))  # w is read inside the loop


def test_unknown_op_is_reported_not_a_crash(samples, tmp_path):
    import shutil

    from tensorflow.core.protobuf import saved_model_pb2

    from gradaudit.api import AuditOptions, audit_saved_model

    path = str(tmp_path / "custom_op")
    shutil.copytree(os.path.join(samples, "while_loop"), path)
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as fh:
        sm.ParseFromString(fh.read())
    renamed = 0
    for fdef in sm.meta_graphs[0].graph_def.library.function:
        for node in fdef.node_def:
            if node.op == "Tanh":
                node.op = "MyCompanyFancyTanh"
                renamed += 1
    assert renamed
    with open(os.path.join(path, "saved_model.pb"), "wb") as fh:
        fh.write(sm.SerializeToString())
    r = audit_saved_model(path, AuditOptions(static_only=True))
    f = finding(r, "unknown-op")
    # on the float path from x to y: whether a gradient passes cannot be known, and that is an error
    assert f.op.op_type == "MyCompanyFancyTanh" and f.severity.value == "error"
    assert set(f.sources) == {e.source for e in r.flow if e.status == "unknown"} >= {"x"}
    assert f.outputs == ("y",)
    entry = flow(r, "x", "y")
    assert entry.status == "unknown" and not entry.blocked_by
    assert {u.op_type for u in entry.unknown_by} == {"MyCompanyFancyTanh"}
    assert r.verdict() == "fail"
