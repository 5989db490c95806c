"""A crash is never a pass, a check that did not run makes the audit incomplete, and what gradaudit cannot
know it does not state: internal errors, timeouts, models without signatures, ops whose gradient raises."""

from __future__ import annotations

import json
import os

import pytest
import tensorflow as tf
from click.testing import CliRunner
from helpers import save_module, save_slow_model

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main
from gradaudit.errors import GradauditError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THIRDPARTY = os.path.join(ROOT, "sample_models", "thirdparty")


@pytest.fixture(scope="module")
def slow_model(tmp_path_factory) -> str:
    """A healthy model whose forward pass never ends in practice: only a timeout stops the checks."""
    return save_slow_model(str(tmp_path_factory.mktemp("slow") / "slow"))


@pytest.mark.slow  # runs the model in the child
def test_timeout_is_incomplete_never_a_pass(slow_model):
    report = audit_saved_model(slow_model, AuditOptions(timeout=2.0))
    assert not report.findings and {e.status for e in report.flow} == {"connected"}  # static part intact
    assert report.verdict() == "incomplete" and not report.ok
    assert len(report.incomplete) == 1 and "--timeout" in report.incomplete[0]
    assert not report.numeric  # one line for the checks that did not run, not one row per source


@pytest.mark.slow  # runs the model in a child process
def test_timeout_exit_codes(slow_model, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [slow_model, "--timeout", "2", "--json", str(out)])
    assert result.exit_code == 1, result.output
    assert "INCOMPLETE" in result.output and "not checked:" in result.output
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "incomplete" and doc["incomplete"]
    assert CliRunner().invoke(main, [slow_model, "--timeout", "2", "--fail-on", "never"]).exit_code == 0
    assert CliRunner().invoke(main, [slow_model, "--timeout", "2", "--exit-zero"]).exit_code == 0


@pytest.mark.parametrize("stage, target", [
    ("running the stability probes", "gradaudit.numeric.stability._run"),
    ("running the numeric checks", "gradaudit.numeric.session.run_session"),
    ("running the static rules", "gradaudit.static.flow_rules.check"),
])
def test_a_crash_inside_gradaudit_is_said_to_be_one(samples, tmp_path, monkeypatch, stage, target):
    """gradaudit's own code is made to fail (the model is healthy): exit 2, the one-line internal-error message
    naming the stage, never a pass and never 'malformed model'; the partial report is still written."""
    module, _, name = target.rpartition(".")

    def broken(*_args, **_kwargs):
        raise RuntimeError("simulated bug")

    import importlib

    monkeypatch.setattr(importlib.import_module(module), name, broken)
    if target.endswith(".check"):  # the registry holds the function itself
        from gradaudit import static

        monkeypatch.setattr(static, "STATIC_CHECKS", tuple(broken if c.__name__ == "check" and c.__module__ ==
                                                             module else c for c in static.STATIC_CHECKS))
    out = tmp_path / "r.json"
    # --timeout 0: the run stays in this process, where the patched function is
    result = CliRunner().invoke(main, [os.path.join(samples, "mlp"), "--json", str(out), "--timeout", "0"])
    assert result.exit_code == 2, result.output
    line = f"internal error in gradaudit while {stage}"
    assert line in result.stderr and "RuntimeError: simulated bug; please report it" in result.stderr
    assert "malformed" not in result.stderr and "PASS" not in result.output
    doc = json.loads(out.read_text())  # the report as far as it got
    assert doc["verdict"] == "fail" and doc["errors"] and line in doc["errors"][0]["error"]
    assert doc["reports"] and doc["reports"][0]["flow"]


def test_a_model_without_signatures_audits_its_saved_functions(tmp_path):
    path = os.path.join(THIRDPARTY, "no_signatures")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [path, "--all-signatures", "--static-only", "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert sorted(r["target"]["signature"] for r in doc["reports"]) == ["decode", "encode"]  # stable names
    decode = next(r for r in doc["reports"] if r["target"]["signature"] == "decode")
    assert {(e["source"], e["output"], e["status"]) for e in decode["flow"]} >= {("code", "recon", "connected")}
    # without --static-only the numeric checks cannot run on a saved function: incomplete, not a pass
    report = audit_saved_model(path, AuditOptions(signature="decode"))
    assert report.verdict() == "incomplete" and "saved function" in report.incomplete[0]


def test_all_signatures_on_a_model_with_nothing_to_audit_is_an_error(tmp_path):
    path = str(tmp_path / "empty")
    tf.saved_model.save(tf.Module(), path, signatures={})
    result = CliRunner().invoke(main, [path, "--all-signatures", "--static-only"])
    assert result.exit_code == 2 and "no signatures and no saved functions" in result.stderr


def test_a_gradient_function_that_raises_is_an_error_not_connected():
    report = audit_saved_model(os.path.join(THIRDPARTY, "prevent_gradient"), AuditOptions(static_only=True))
    [f] = [f for f in report.findings if f.rule == "gradient-raises"]
    assert f.code == "GA110" and f.severity.value == "error" and f.op.op_type == "PreventGradient"
    assert "Gradient explicitly disabled" in f.message
    blocked = {(e.source, e.output) for e in report.flow if e.status == "blocked"}
    assert blocked and all(any(c.rule == "gradient-raises" for c in e.blocked_by)
                           for e in report.flow if e.status == "blocked")
    assert report.verdict() == "fail"


def test_a_sampler_whose_gradient_skips_its_seed_is_connected():
    """TFP's reparameterized Gamma sampler: its saved gradient returns nothing for the integer seed; the
    recorded structure says which inputs its results belong to."""
    report = audit_saved_model(os.path.join(THIRDPARTY, "tfp_gamma_rsample"), AuditOptions(static_only=True))
    assert {e.status for e in report.flow} == {"connected"}
    assert not [f for f in report.findings if f.rule == "integer-path"]


def test_a_gradient_that_cannot_be_verified_is_unknown_with_a_note(tmp_path, monkeypatch):
    """A MatMul whose saved node lost its type attribute: its replica cannot be built, which says nothing about
    its gradient. Its pairs are `unknown` with a note naming it, never silently connected. TensorFlow itself
    refuses to load such a graph ("NodeDef missing attr 'T'"), and so does the static pass (exit 2); the replica
    path is checked with that load check switched off."""
    from tensorflow.core.protobuf import saved_model_pb2

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(tf.ones([3, 2]), name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.matmul(x, self.w), "z": x * 2.0}

    path = save_module(M(), str(tmp_path / "m"))
    sm = saved_model_pb2.SavedModel()
    pb = os.path.join(path, "saved_model.pb")
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    edited = 0
    for fdef in sm.meta_graphs[0].graph_def.library.function:
        for node in fdef.node_def:
            if node.op == "MatMul":
                del node.attr["T"]
                edited += 1
    assert edited
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    with pytest.raises(GradauditError, match="TensorFlow would reject this graph: .*MatMul.* lacks attr 'T'"):
        audit_saved_model(path, AuditOptions(static_only=True))
    monkeypatch.setattr("gradaudit.targets.saved_model.check_graph", lambda *_a: None)
    report = audit_saved_model(path, AuditOptions(static_only=True))
    statuses = {(e.source, e.output): e.status for e in report.flow}
    assert statuses[("x", "y")] == "unknown" and statuses[("w", "y")] == "unknown"
    assert statuses[("x", "z")] == "connected"
    assert any("MatMul" in n.text and "cannot be verified" in n.text for n in report.notes)
    assert report.verdict() == "incomplete"


@pytest.mark.parametrize("shape, expected", [([3, 3], "connected"), ([None, None], "blocked")])
def test_a_gradient_that_raises_only_for_some_shapes(tmp_path, shape, expected):
    """QrGrad raises for dynamic shapes only: the replica is judged with the saved shapes, as TensorFlow does."""
    from truth import contradictions, tape_truth

    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, name="x")])
        def __call__(self, x):
            return {"r": tf.linalg.qr(x)[1]}

    path = save_module(M(), str(tmp_path / "qr"))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert [e.status for e in report.flow] == [expected]
    assert ("gradient-raises" in {f.rule for f in report.findings}) == (expected == "blocked")
    if shape[0] is not None:
        assert contradictions(report, tape_truth(path, ["serving_default"])["serving_default"]) == []


def test_an_internal_error_in_the_timeout_child_is_said_to_be_one(samples, tmp_path, monkeypatch):
    """The --timeout child runs the model in a fresh process; a bug there comes back as gradaudit's
    failure with the child's partial report, not as a pass or a crash of the parent."""
    from gradaudit import api
    from gradaudit.errors import InternalError
    from gradaudit.model import Isolation

    # what the child sends (wire.py) when gradaudit fails in it before it has a report
    sent = {"internal": {"stage": "running the numeric checks", "detail": "RuntimeError: in the child",
                         "report": None}}
    isolation = Isolation("landlock-abi7", "landlock", 1 << 30, 30.0)
    monkeypatch.setattr("gradaudit.isolate.run_isolated", lambda *_a, **_k: (sent, isolation))
    with pytest.raises(InternalError) as caught:
        api.audit_saved_model(os.path.join(samples, "mlp"), AuditOptions(timeout=30.0))
    assert caught.value.report is not None and caught.value.report.verdict() == "incomplete"
    assert "RuntimeError: in the child" in str(caught.value)


@pytest.mark.parametrize("sent", [{"report": {"target": "forged"}}, {"report": None}, ["ok"],
                                  {"internal": {"stage": 1}}, {"error": 42}])
def test_a_result_from_the_child_that_is_not_one_is_incomplete_never_a_pass(samples, monkeypatch, sent):
    """What a model that got ops past the gate might write instead of the child's result: the static report,
    incomplete, with the reason."""
    from gradaudit import api
    from gradaudit.model import Isolation

    monkeypatch.setattr("gradaudit.isolate.run_isolated",
                        lambda *_a, **_k: (sent, Isolation("landlock-abi7", "landlock", 1 << 30, 30.0)))
    report = api.audit_saved_model(os.path.join(samples, "mlp"), AuditOptions(timeout=30.0))
    assert report.verdict() == "incomplete" and not report.numeric
    assert any("sent a malformed result" in line for line in report.incomplete), report.incomplete


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.parametrize("name, args", [("qr_dynamic", []), ("tfdf_gbt", ["--allow-unsafe-ops"])])
def test_tensorflow_failing_on_the_model_is_the_model_not_gradaudit(tmp_path, name, args):
    """QrGrad refuses dynamic shapes inside tape.gradient; a custom op not loaded makes tf.saved_model.load fail.
    Both are TensorFlow failing on the model: its checks could not be made (never exit 2 'internal error')."""
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [os.path.join(THIRDPARTY, name), "--json", str(out), *args])
    assert result.exit_code == 1, result.output
    assert "internal error" not in result.stderr
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "fail" and doc["incomplete"]  # GA110 / GA109 fail it; the checks say why not run


def test_a_variable_another_entry_point_uses_is_info_naming_it():
    """encode never reads `scale` (decode does): training through encode gives it no gradient, but it is not
    dead, so one info line that names decode, not a warning."""
    report = audit_saved_model(os.path.join(THIRDPARTY, "no_signatures"), AuditOptions(static_only=True,
                                                                                       signature="encode"))
    [f] = [f for f in report.findings if f.rule == "disconnected-source"]
    assert f.sources == ("scale",) and f.severity.value == "info" and "decode" in f.message


@pytest.mark.slow  # a model's numeric checks, seconds
def test_checks_that_decide_nothing_make_the_audit_incomplete(tmp_path):
    """Every check inconclusive (the output is NaN at the synthesised point: log of a negative input) is not a
    pass: the report says which sources were never decided and how to give real inputs."""

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable([1.5, 0.5], name="w")

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.math.log(x - 100.0) * self.w}

    path = save_module(M(), str(tmp_path / "m"))
    report = audit_saved_model(path, AuditOptions())
    assert report.verdict() == "incomplete", [(n.source, n.status, n.reason) for n in report.numeric]
    assert any("could decide" in line and "w" in line for line in report.incomplete)
    import numpy as np

    np.savez(tmp_path / "in.npz", x=np.full((2, 2), 150.0, np.float32))
    report = audit_saved_model(path, AuditOptions(inputs_file=str(tmp_path / "in.npz")))
    assert report.verdict() == "pass" and not report.incomplete


@pytest.mark.slow  # runs the model in a child process
def test_an_inputs_file_numpy_cannot_read_is_a_usage_error(samples, tmp_path):
    import numpy as np

    np.savez(tmp_path / "bad.npz", x=np.array([["a"] * 8] * 2))  # the right shape, strings
    result = CliRunner().invoke(main, [os.path.join(samples, "mlp"), "--inputs", str(tmp_path / "bad.npz")])
    assert result.exit_code == 2 and "internal error" not in result.stderr, result.stderr
    assert "--inputs" in result.stderr


def test_a_model_without_signatures_is_audited_by_its_saved_functions_in_a_recursive_run(tmp_path):
    """One model saved without signatures must not turn a model zoo's run into a tool error (exit 2)."""
    import shutil

    zoo = tmp_path / "zoo"
    shutil.copytree(os.path.join(THIRDPARTY, "no_signatures"), zoo / "nosig")
    shutil.copytree(os.path.join(THIRDPARTY, "prevent_gradient"), zoo / "prevent")
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [str(zoo), "--recursive", "--static-only", "--json", str(out)])
    assert result.exit_code == 1, result.output  # prevent_gradient fails; nothing is an error
    doc = json.loads(out.read_text())
    assert "errors" not in doc
    assert sorted(r["target"]["signature"] for r in doc["reports"]) == ["decode", "encode", "serving_default"]
