"""What the gate walks beyond the call graph of the signature: functions TensorFlow's implementation selector
swaps in at run time (`api_implements`), and the TF1 local variables' initializers the TF2 loader runs.
Each escape is first shown to be real (TensorFlow itself runs the WriteFile), then refused by a default audit."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from gradaudit import audit
from gradaudit.api import AuditOptions, audit_saved_model

from .attacks import INTERFACE, build, implements_pair

ESCAPES = {  # attack -> (the finding's root text, the function the WriteFile is in)
    "implements_sibling_writes": ("swapped in by TensorFlow's implementation selector for __inference_called_",
                                  "__inference_sibling_"),
    "tf1_local_variable_writes": ("the initializer of local variable 'count:0' (the local_variables collection)",
                                  "<graph>"),
}


def _function(path: str, prefix: str) -> str:
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    [name] = [f.signature.name for f in sm.meta_graphs[0].graph_def.library.function
              if f.signature.name.startswith(prefix)]
    return name


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_tensorflow_really_runs_the_write(tmp_path, name):
    canary = tmp_path / "canary"
    path = build(name, str(tmp_path), str(canary))
    assert not canary.exists()  # building it ran nothing of it
    loaded = tf.saved_model.load(path)
    loaded.signatures["serving_default"](x=tf.constant([1.0, 2.0]))
    assert canary.exists()


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_a_default_audit_refuses_to_run_it(tmp_path, name):
    canary = tmp_path / "canary"
    path = build(name, str(tmp_path), str(canary))
    root, where = ESCAPES[name]
    report = audit(path)
    [finding] = [f for f in report.findings if f.code == "GA401"]
    assert finding.op.op_type == "WriteFile" and finding.op.function.startswith(where)
    assert root in finding.message
    assert report.verdict() == "fail" and not report.numeric and not canary.exists()


def test_the_root_names_both_functions_and_the_interface(tmp_path):
    path = build("implements_sibling_writes", str(tmp_path), str(tmp_path / "canary"))
    [finding] = [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings if f.code == "GA401"]
    called, sibling = _function(path, "__inference_called_"), _function(path, "__inference_sibling_")
    assert finding.op.function == sibling
    assert (f"the function {sibling}, swapped in by TensorFlow's implementation selector for {called} "
            f"(api_implements '{INTERFACE}')") in finding.message


def test_a_pure_implements_pair_still_runs(tmp_path):
    report = audit(implements_pair(str(tmp_path / "pure_pair"), None), probe_scales=(1.0,))
    assert not [f for f in report.findings if f.code in ("GA401", "GA402")]
    assert report.numeric  # the gate allowed it: the model ran


def test_a_sibling_is_walked_transitively(tmp_path):
    """The swapped-in function's callees are walked, and so are the siblings of those callees."""
    spec = tf.TensorSpec([None], tf.float32, name="x")
    canary = str(tmp_path / "canary")

    def attrs(name: str, device: str) -> dict:
        return {"api_implements": name, "api_preferred_device": device}

    @tf.function(input_signature=[spec], autograph=False, experimental_attributes=attrs("inner", "GPU"))
    def inner_called(x):
        return x * 3.0

    @tf.function(input_signature=[spec], autograph=False, experimental_attributes=attrs("inner", "CPU"))
    def inner_sibling(x):
        tf.io.write_file(canary, "inner sibling ran")
        return x * 3.0

    @tf.function(input_signature=[spec], autograph=False, experimental_attributes=attrs("outer", "GPU"))
    def outer_called(x):
        return x * 2.0

    @tf.function(input_signature=[spec], autograph=False, experimental_attributes=attrs("outer", "CPU"))
    def outer_sibling(x):
        return inner_called(x) - x

    class Nested(tf.Module):
        @tf.function(input_signature=[spec], autograph=False)
        def __call__(self, x):
            return {"y": outer_called(x)}

    module = Nested()
    module.fns = [inner_sibling, outer_sibling]
    path = str(tmp_path / "nested")
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    [finding] = [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings if f.code == "GA401"]
    assert finding.op.function == _function(path, "__inference_inner_sibling_")
    assert f"for {_function(path, '__inference_inner_called_')} (api_implements 'inner')" in finding.message


def test_a_pure_tf1_local_variable_is_not_a_finding(tmp_path):
    path = str(tmp_path / "tf1_counter")
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        count = tf.compat.v1.get_variable("count", initializer=0.0, use_resource=True, trainable=False,
                                          collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        y = tf.identity(x * 2.0 + count, name="y")
        with tf.compat.v1.Session(graph=graph) as sess:
            builder = tf.compat.v1.saved_model.Builder(path)
            sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
            builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig})
            builder.save()
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert not [f for f in report.findings if f.code.startswith("GA4")]
