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
