"""Flow through a compiled module (jax2tf's XlaCallModule) follows the StableHLO saved in the op, forward and in
its saved gradient, instead of calling every pair `connected`; a module this TensorFlow cannot read makes the
pairs through it `unknown`, the module named. Truth: truth.json, tf.GradientTape on the loaded model (the
fixtures' builder, build_jax.py, with jax 0.10.2)."""

from __future__ import annotations

import json
import os
import shutil

from gradaudit.api import AuditOptions, audit_saved_model

THIRDPARTY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "sample_models", "thirdparty")


def _truth(name):
    with open(os.path.join(THIRDPARTY, name, "truth.json")) as f:
        pairs = json.load(f)["entry_points"]["serving_default"]["pairs"]
    return {(p["source"], p["output"]): p["truth"] for p in pairs}


def _flow(report):
    return {(e.source, e.output): e for e in report.flow}


def test_results_of_one_module_that_read_half_the_arguments_are_disconnected_from_the_rest():
    truth = _truth("jax_two_heads")
    flow = _flow(audit_saved_model(os.path.join(THIRDPARTY, "jax_two_heads"), AuditOptions(static_only=True)))
    assert set(flow) == set(truth)
    for pair, t in truth.items():
        assert flow[pair].status == ("connected" if t == "nonzero" else "disconnected"), (pair, t)


def test_a_stop_gradient_inside_the_module_blocks_its_parameter():
    truth = _truth("jax_stop_gradient_param")
    report = audit_saved_model(os.path.join(THIRDPARTY, "jax_stop_gradient_param"), AuditOptions(static_only=True))
    flow = _flow(report)
    for pair, t in truth.items():
        assert flow[pair].status == ("connected" if t == "nonzero" else "blocked"), (pair, t)
    [f] = [f for f in report.findings if f.rule == "custom-gradient"]
    assert f.severity.value == "error" and f.sources == ("act/w",)
    assert "compiled module" in f.message and "stop_gradient" in f.message
    assert "Make the gradient function" not in f.fix and "export again" in f.fix


def test_a_module_that_cannot_be_read_is_unknown_not_connected(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    path = tmp_path / "unreadable"
    shutil.copytree(os.path.join(THIRDPARTY, "jax_two_heads"), path)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    for f in sm.meta_graphs[0].graph_def.library.function:
        for n in f.node_def:
            if n.op == "XlaCallModule":  # as a StableHLO newer than this TensorFlow's would be to it
                n.attr["module"].s = b"ML\xefR not a module this TensorFlow reads"
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    report = audit_saved_model(str(path), AuditOptions(static_only=True))
    assert {e.status for e in report.flow} == {"unknown"}
    assert any("XlaCallModule" in note.text for note in report.notes)


def test_a_saved_gradient_of_two_results_lists_both_outputs(tmp_path):
    """jax2tf's custom gradient is one IdentityN over every result of the module: its GA107 lists the outputs of
    all its results (tester 16: only the first). Truth: the module's two heads each get a gradient from the saved
    gradient function (truth.json); a tf.custom_gradient of two results is the same op and the same class."""
    import tensorflow as tf

    truth = _truth("jax_two_heads")
    report = audit_saved_model(os.path.join(THIRDPARTY, "jax_two_heads"), AuditOptions(static_only=True))
    [f] = [f for f in report.findings if f.rule == "custom-gradient"]
    assert set(f.outputs) == {o for (_, o), t in truth.items() if t == "nonzero"}

    @tf.custom_gradient
    def heads(a, b):
        return (tf.tanh(a), tf.sin(b)), lambda da, db: (da * (1 - tf.tanh(a) ** 2), db * tf.cos(b))

    class Heads(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                      tf.TensorSpec([None], tf.float32, name="b")])
        def __call__(self, a, b):
            y1, y2 = heads(a, b)
            return {"y1": y1, "y2": y2}

    path = str(tmp_path / "heads")
    tf.saved_model.save(Heads(), path, options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    a, b = tf.constant([0.3]), tf.constant([0.7])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([a, b])
        out = loaded(a=a, b=b)
    assert tape.gradient(out["y1"], a) is not None and tape.gradient(out["y2"], b) is not None
    [f] = [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings if f.rule == "custom-gradient"]
    assert set(f.outputs) == {"y1", "y2"} and set(f.sources) == {"a", "b"}
