"""The reviewed ops of --load-ops packages (safety/package_ops.py) on the committed tensorflow-text and TF-DF
fixtures: with their package registered (here: their real OpDefs, tests/safety/package_opdefs.pbtxt, dumped from
the packages), the gate proves every op the fixtures run harmless; TF-DF's model loader only where it reads the
model's own assets folder. Without the package: no GA402, one GA109 line naming it, nothing run.

The packages are not installed where the suite runs: the tests that run the real package skip without it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from gradaudit.api import AuditOptions, audit_saved_model, read_saved_model
from gradaudit.safety import gate
from gradaudit.safety.package_ops import PACKAGE_OPS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
THIRDPARTY = os.path.join(ROOT, "sample_models", "thirdparty")
TEXT = ("tftext_whitespace_bag", "tftext_wordpiece_bag", "tftext_max_spanning_tree", "tftext_viterbi")
TFDF = ("tfdf_gbt", "tfdf_dense_forest")
LOAD = "SimpleMLLoadModelFromPathWithHandle"


def _opdefs() -> dict:
    from google.protobuf import text_format
    from tensorflow.core.framework import op_def_pb2

    ops = op_def_pb2.OpList()
    with open(os.path.join(os.path.dirname(__file__), "package_opdefs.pbtxt"), encoding="utf-8") as f:
        text_format.Parse(f.read(), ops)
    return {o.name: o for o in ops.op}


def _registered(path: str, monkeypatch, defs: dict | None = None):
    """The parsed model, its signature, and a library in which the package's ops are registered."""
    model = read_saved_model(path, AuditOptions())
    sig = model.signature("serving_default")
    known = model.library.op_def
    defs = _opdefs() if defs is None else defs
    monkeypatch.setattr(model.library, "op_def", lambda t: defs.get(t) or known(t))
    return model, sig


def _census(name: str) -> list[str]:
    with open(os.path.join(THIRDPARTY, name, "truth.json"), encoding="utf-8") as f:
        return json.load(f)["unknown_to_plain_tensorflow"]


@pytest.mark.parametrize("name", TEXT + TFDF)
def test_every_op_the_fixtures_need_from_a_package_is_reviewed_under_its_real_definition(name, monkeypatch):
    defs = _opdefs()
    for op in _census(name):
        assert op in PACKAGE_OPS, op
        entry = PACKAGE_OPS[op]
        assert tuple(a.name for a in defs[op].input_arg) == entry.inputs
        assert tuple(a.name for a in defs[op].attr) == entry.attrs
    model, sig = _registered(os.path.join(THIRDPARTY, name), monkeypatch)
    assert gate.check(model, sig) == []


def test_the_reviewed_classes_and_their_reasons():
    text = [e for e in PACKAGE_OPS.values() if e.package == "tensorflow_text"]
    assert text and {e.cls for e in text} == {"pure"}
    assert PACKAGE_OPS[LOAD].cls == "assets" and PACKAGE_OPS[LOAD].path_input == "path"
    assert all(e.why and e.version for e in PACKAGE_OPS.values())
    # TF-DF's loader that takes any path, and its training ops, are not on the list
    assert not {"SimpleMLLoadModelFromPath", "SimpleMLModelTrainer"} & set(PACKAGE_OPS)


def test_an_op_registered_under_another_definition_is_not_the_reviewed_one(monkeypatch):
    defs = _opdefs()
    other = type(defs["MaxSpanningTree"])()
    other.CopyFrom(defs["MaxSpanningTree"])
    other.input_arg[0].name = "path"
    defs["MaxSpanningTree"] = other
    model, sig = _registered(os.path.join(THIRDPARTY, "tftext_max_spanning_tree"), monkeypatch, defs)
    found = gate.check(model, sig)
    assert {v.op.op_type for v in found} == {"MaxSpanningTree"} and {v.cls for v in found} == {"unproven"}
    assert "another definition than the reviewed tensorflow-text 2.21.1" in found[0].why


def _tfdf_copy(tmp_path, mutate) -> str:
    """tfdf_gbt copied, its loader node changed by mutate(initializer function, loader node)."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = str(tmp_path / "tfdf_gbt")
    shutil.copytree(os.path.join(THIRDPARTY, "tfdf_gbt"), path)
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    [(fdef, node)] = [(f, n) for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def
                      if n.op == LOAD]
    mutate(fdef, node)
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())
    return path


def _regex(fdef):
    return next(n for n in fdef.node_def if n.op == "StaticRegexReplace")


def _const_path(fdef, node):
    const = fdef.node_def.add(name="elsewhere", op="Const")
    const.attr["dtype"].type = 7  # DT_STRING
    const.attr["value"].tensor.dtype = 7
    const.attr["value"].tensor.string_val.append(b"/etc/")
    node.input[1] = "elsewhere:output:0"


@pytest.mark.parametrize("mutate, said", [
    (lambda fdef, node: node.attr["file_prefix"].__setattr__("s", b"../../../etc/x"), "file_prefix attribute"),
    (_const_path, "not proven to be the model's own assets folder"),
    (lambda fdef, node: _regex(fdef).attr["pattern"].__setattr__("s", b"assets/.*"), "not proven"),
    (lambda fdef, node: _regex(fdef).attr["rewrite"].__setattr__("s", b"../"), "not proven"),
])
def test_the_model_loader_reading_anything_but_its_assets_stays_refused(tmp_path, monkeypatch, mutate, said):
    model, sig = _registered(_tfdf_copy(tmp_path, mutate), monkeypatch)
    found = gate.check(model, sig)
    assert [(v.op.op_type, v.cls) for v in found] == [(LOAD, "io")] and said in found[0].why


def test_a_pattern_that_matches_the_model_folder_is_not_only_the_file_name(tmp_path, monkeypatch):
    """Removing the asset's name from `<folder>/assets/<name>` leaves `<folder>/assets/` only where the name
    is nowhere in the folder's own path."""
    folder = tmp_path / "258b9b64eb884e6cdone"
    folder.mkdir()
    model, sig = _registered(_tfdf_copy(folder, lambda fdef, node: None), monkeypatch)
    assert [(v.op.op_type, v.cls) for v in gate.check(model, sig)] == [(LOAD, "io")]


@pytest.mark.parametrize("name", TEXT + TFDF)
def test_without_the_package_one_line_names_it_and_nothing_runs(name):
    opts = AuditOptions(inputs_file=os.path.join(THIRDPARTY, name, "inputs.npz"))
    report = audit_saved_model(os.path.join(THIRDPARTY, name), opts)
    assert not [f for f in report.findings if f.code.startswith("GA4")]
    package = PACKAGE_OPS[_census(name)[0]]
    named = [f for f in report.findings if f.rule == "unknown-op" and f.severity.value == "info"]
    assert len(named) == 1 and named[0].message.startswith(f"needs {package.dist}: {package.load} ")
    assert not report.numeric and report.verdict() in ("incomplete", "fail")
    assert any("cannot be loaded" in line for line in report.incomplete), report.incomplete
    if name in ("tftext_whitespace_bag", "tftext_wordpiece_bag"):  # tokenizers: only string and integer paths
        assert report.verdict() == "incomplete" and len(report.findings) == 1


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


# With the real package: the audit runs the model in the sandbox, without --allow-unsafe-ops. In a child
# process: importing the package registers its ops in the process for good.
@pytest.mark.slow  # runs the model in a child process
@pytest.mark.skipif(not _installed("tensorflow_text"), reason="tensorflow-text is not installed here")
@pytest.mark.parametrize("name, verdict", [("tftext_whitespace_bag", "pass"), ("tftext_wordpiece_bag", "pass"),
                                           ("tftext_max_spanning_tree", "pass"), ("tftext_viterbi", "fail")])
def test_text_models_run_with_the_package(tmp_path, name, verdict):
    doc = _audit_with(tmp_path, name, "tensorflow_text")
    assert not [f for f in doc["findings"] if f["code"].startswith("GA4")] and doc["numeric"]
    assert doc["verdict"] == verdict, doc["findings"]
    flow = {(e["source"], e["output"]): e["status"] for e in doc["flow"]}
    with open(os.path.join(THIRDPARTY, name, "truth.json"), encoding="utf-8") as f:
        truth = json.load(f)["entry_points"]["serving_default"]["pairs"]
    for pair in truth:  # nonzero: connected; none (viterbi's transitions, only through an int output): blocked
        expected = {"nonzero": "connected", "none": "blocked"}[pair["truth"]]
        assert flow[(pair["source"], pair["output"])] == expected, pair


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.skipif(not _installed("tensorflow_decision_forests"),
                    reason="tensorflow-decision-forests is not installed here (it needs TensorFlow 2.19)")
@pytest.mark.parametrize("name", TFDF)
def test_decision_forests_run_with_the_package_and_raise_as_tensorflow_does(tmp_path, name):
    doc = _audit_with(tmp_path, name, "tensorflow_decision_forests")
    assert not [f for f in doc["findings"] if f["code"].startswith("GA4")]
    assert doc["verdict"] == "fail" and any(f["code"] == "GA204" and "No gradient defined" in f["message"]
                                            for f in doc["findings"])


def _audit_with(tmp_path, name: str, package: str) -> dict:
    out = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    subprocess.run([sys.executable, "-m", "gradaudit", "audit", os.path.join(THIRDPARTY, name), "--load-ops",
                    package, "--inputs", os.path.join(THIRDPARTY, name, "inputs.npz"), "--json", str(out)],
                   env=env, capture_output=True, timeout=600, check=False)
    return json.loads(out.read_text())
