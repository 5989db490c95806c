"""Flow statuses across nested calls, While, If and Case, and what is (not) a cut."""

from __future__ import annotations

import pytest
import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model

X = tf.TensorSpec([None, 4], tf.float32, name="x")


def audit_fn(tmp_path, name, fn, signature=(X,), **variables):
    module = tf.Module()
    for key, value in variables.items():
        setattr(module, key, value)
    module.call = tf.function(lambda *a: fn(module, *a), input_signature=list(signature))
    path = save_module(module, str(tmp_path / name), module.call)
    return audit_saved_model(path, AuditOptions(static_only=True))


def status(report, source, output="y"):
    return next(f for f in report.flow if f.source == source and f.output == output)


def cut_types(entry):
    return sorted(c.op.op_type for c in entry.blocked_by)


@pytest.fixture
def w():
    return tf.Variable(tf.ones([4, 4]), name="w")


def test_cut_inside_nested_functions_is_named_with_its_function(tmp_path, w):
    @tf.function
    def inner(h):
        return tf.cast(tf.argmax(h, -1), tf.float32)

    @tf.function
    def middle(h, kernel):
        return inner(tf.matmul(h, kernel))

    r = audit_fn(tmp_path, "nested", lambda m, x: {"y": middle(x, m.w), "z": tf.matmul(x, m.w)}, w=w)
    e = status(r, "x")
    assert e.status == "blocked" and cut_types(e) == ["ArgMax"]
    assert "inner" in e.blocked_by[0].op.function
    assert status(r, "w").status == "blocked"
    assert status(r, "x", "z").status == "connected" and status(r, "w", "z").status == "connected"


def test_while_loop_body_carries_gradient_and_cuts_inside_it(tmp_path, w):
    def smooth(m, x):
        return {"y": tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h @ m.w)), (0, x))[1]}

    def rounded(m, x):
        return {"y": tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.round(h @ m.w)), (0, x))[1]}

    r = audit_fn(tmp_path, "smooth", smooth, w=w)
    assert status(r, "x").status == "connected" and status(r, "w").status == "connected"
    r = audit_fn(tmp_path, "rounded", rounded, w=w)
    assert status(r, "x").status == "blocked" and cut_types(status(r, "x")) == ["Round"]
    assert status(r, "w").status == "blocked"


def test_value_carried_around_the_loop_reaches_later_iterations(tmp_path, w):
    """The variable only enters through the loop-carried accumulator: only the back edge connects it."""
    def fn(m, x):
        def body(i, acc, h):
            return i + 1, h, acc @ m.w  # acc takes h, h takes acc @ w: w reaches y only via carried values
        return {"y": tf.while_loop(lambda i, a, h: i < 3, body, (0, x, x))[1]}

    r = audit_fn(tmp_path, "carried", fn, w=w)
    assert status(r, "w").status == "connected"


def test_if_branches(tmp_path, w):
    def both_cut(m, x):
        return {"y": tf.cond(tf.reduce_sum(x) > 0, lambda: tf.round(x @ m.w), lambda: tf.floor(x))}

    def one_cut(m, x):
        return {"y": tf.cond(tf.reduce_sum(x) > 0, lambda: tf.round(x), lambda: tf.sin(x))}

    r = audit_fn(tmp_path, "both", both_cut, w=w)
    assert status(r, "x").status == "blocked" and cut_types(status(r, "x")) == ["Floor", "Round"]
    r = audit_fn(tmp_path, "one", one_cut)
    assert status(r, "x").status == "connected"
    assert {f.op.op_type for f in r.findings if f.rule == "zero-gradient"} == {"Round"}  # a path is still cut


def test_case_branches(tmp_path, static_report):
    r = static_report("case")
    assert status(r, "x").status == "connected"
    assert {f.op.op_type for f in r.findings if f.rule == "zero-gradient"} == {"Round"}

    def all_cut(m, x, b):
        return {"y": tf.switch_case(b, [lambda: tf.sign(x), lambda: tf.round(x)])}

    r = audit_fn(tmp_path, "case_cut", all_cut, (X, tf.TensorSpec([], tf.int32, name="b")))
    assert status(r, "x").status == "blocked" and cut_types(status(r, "x")) == ["Round", "Sign"]


def test_index_use_of_argmax_is_named_when_it_is_the_only_path(tmp_path):
    table = tf.Variable(tf.ones([4, 3]), name="table")
    r = audit_fn(tmp_path, "gather", lambda m, x: {"y": tf.gather(m.table, tf.argmax(x, -1))}, table=table)
    assert status(r, "table").status == "connected"
    assert status(r, "x").status == "blocked" and cut_types(status(r, "x")) == ["ArgMax"]


def test_shape_only_dependence_is_disconnected_not_blocked(tmp_path):
    r = audit_fn(tmp_path, "shape", lambda m, x: {"y": tf.zeros(tf.shape(x)) + 1.0, "z": tf.ones_like(x)})
    assert status(r, "x").status == "disconnected" and status(r, "x", "z").status == "disconnected"
    assert not r.findings


def test_comparison_in_where_is_not_a_finding(tmp_path):
    r = audit_fn(tmp_path, "leaky", lambda m, x: {"y": tf.where(x > 0, x, 0.1 * x)})
    assert status(r, "x").status == "connected" and not r.findings


def test_step_function_through_bool(tmp_path):
    r = audit_fn(tmp_path, "step", lambda m, x: {"y": tf.cast(x > 0, tf.float32) * 2.0})
    e = status(r, "x")
    assert e.status == "blocked" and [c.rule for c in e.blocked_by] == ["integer-path"]
    assert cut_types(e) == ["Greater"]


def test_non_trainable_variables_are_not_sources(static_report):
    r = static_report("cnn")
    names = {s.name for s in r.sources}
    assert not any("moving" in n for n in names)
    assert any(s.kind == "variable" and s.name.endswith("kernel") for s in r.sources)


def test_all_signatures_and_saved_functions(tmp_path, static_report):
    r = static_report("mlp", signature="serve")
    assert r.target.signature == "serve" and all(f.status == "connected" for f in r.flow)

    class M(tf.Module):
        def __init__(self):
            self.v = tf.Variable(2.0, name="v")

        @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
        def apply(self, x):
            return tf.floor(x * self.v)

    m = M()
    path = str(tmp_path / "nosig")
    tf.saved_model.save(m, path, signatures={})
    from gradaudit.errors import GradauditError
    from gradaudit.targets.saved_model import SavedModelFile

    with pytest.raises(GradauditError, match="no signatures; pass --signature with one of"):
        audit_saved_model(path, AuditOptions(static_only=True))
    funcs = SavedModelFile(path).saved_functions()
    assert list(funcs) == ["apply"] and funcs["apply"].startswith("__inference_apply_")
    for key in ("apply", funcs["apply"]):  # the stable name, and the generated one
        r = audit_saved_model(path, AuditOptions(static_only=True, signature=key))
        assert {s.name for s in r.sources} == {"x", "v"}
        assert {f.rule for f in r.findings} == {"zero-gradient"}
    assert r.target.signature == funcs["apply"]
    assert audit_saved_model(path, AuditOptions(static_only=True, signature="apply")).target.signature == "apply"


def test_moments_stop_gradient_is_not_reported(tmp_path):
    r = audit_fn(tmp_path, "moments", lambda m, x: {"y": tf.nn.moments(x, axes=[1])[1]})
    assert status(r, "x").status == "connected" and not r.findings
    r = audit_fn(tmp_path, "plain", lambda m, x: {"y": x * 2.0 + tf.stop_gradient(x)})
    assert [f.rule for f in r.findings] == ["stop-gradient"]
