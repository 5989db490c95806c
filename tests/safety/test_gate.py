"""The safety gate on hostile SavedModels: after a default run (no --allow-unsafe-ops) no canary file is
created and no secret is read, and the run exits 1 naming the op and where it runs from."""

from __future__ import annotations

import gc
import json
import os

import pytest
import tensorflow as tf
from click.testing import CliRunner

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main

from .attacks import ATTACKS, build


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """name -> (model path, canary path), every attack built once; secrets exist, written canaries do not."""
    folder = tmp_path_factory.mktemp("hostile")
    secrets = tmp_path_factory.mktemp("secrets")
    built = {}
    for name, (_, attack) in ATTACKS.items():
        canary = str((secrets if attack.reads else folder) / f"{name}.canary")
        if attack.reads:
            with open(canary, "w") as f:
                f.write("secret\n")
        built[name] = (build(name, str(folder), canary), canary)
    gc.collect()  # building ran the resources' initializers and destroyers here: their canaries go
    for name, (_, canary) in built.items():
        if not ATTACKS[name][1].reads and os.path.exists(canary):
            os.remove(canary)
    return built


def _age(path: str) -> float:
    """Set the file's access time before its modification time, so that any read moves it (relatime)."""
    st = os.stat(path)
    os.utime(path, (st.st_mtime - 3600, st.st_mtime))
    return os.stat(path).st_atime


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_default_run_runs_nothing_and_names_the_op(hostile, name, tmp_path, monkeypatch):
    path, canary = hostile[name]
    attack = ATTACKS[name][1]
    monkeypatch.chdir(tmp_path)
    atime = _age(canary) if attack.reads else None
    result = CliRunner().invoke(main, [path, "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    named = [f for f in doc["findings"] if f["code"] == attack.code and f["op_type"] == attack.op_type]
    assert any(attack.where in f["message"] for f in named), doc["findings"]
    assert not doc["numeric"] and not doc.get("stability")
    if attack.reads:
        assert os.stat(canary).st_atime == atime, "the secret was read"
    else:
        assert not os.path.exists(canary), "the canary was written"


@pytest.mark.slow  # a model's numeric checks, seconds
def test_the_canary_is_real_when_the_user_allows_it(hostile, tmp_path):
    path, canary = hostile["custom_gradient_writes"]
    report = audit_saved_model(path, AuditOptions(allow_unsafe_ops=True, probe_scales=(1.0,)))
    assert report.numeric and os.path.exists(canary)  # the saved gradient really writes when it runs


def test_a_lookup_table_of_its_own_asset_is_safe(tmp_path):
    from .attacks import _lookup_model, tf1_lookup_with_asset

    report = audit_saved_model(_lookup_model(str(tmp_path / "lookup")), AuditOptions(static_only=True))
    assert not [f for f in report.findings if f.code.startswith("GA4")]
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\n")
    path = tf1_lookup_with_asset(str(tmp_path / "tf1_lookup"), str(vocab))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert not [f for f in report.findings if f.code.startswith("GA4")]
    os.remove(os.path.join(path, "assets", "vocab.txt"))  # the same graph, reading a file outside the model:
    os.rmdir(os.path.join(path, "assets"))
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    del sm.meta_graphs[0].collection_def["saved_model_assets"]
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert [f.op.op_type for f in report.findings if f.code == "GA401"] == ["InitializeTableFromTextFileV2"]


def test_unproven_op_blocks_execution_as_a_warning(tmp_path):
    class Queued(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            q = tf.raw_ops.FIFOQueueV2(component_types=[tf.float32], capacity=1)
            put = tf.raw_ops.QueueEnqueueV2(handle=q, components=[tf.reduce_sum(x)])
            with tf.control_dependencies([put]):
                got = tf.raw_ops.QueueDequeueV2(handle=q, component_types=[tf.float32])[0]
            return {"y": x * self.w * got}

    module = Queued()
    path = str(tmp_path / "queued")
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    report = audit_saved_model(path, AuditOptions())
    unproven = [f for f in report.findings if f.rule == "unproven-op"]
    [f] = unproven  # one finding names every op type not proven safe
    assert all(t in f.message for t in ("FIFOQueueV2", "QueueEnqueueV2", "QueueDequeueV2"))
    assert {f.severity.value for f in unproven} == {"warning"} and not report.numeric
    assert report.verdict("error") == "incomplete"  # the checks that did not run are said, not a pass


def test_an_op_this_tensorflow_does_not_know_is_not_proven_safe(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    class Plain(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.nn.relu(x * self.w)}

    module = Plain()
    path = str(tmp_path / "unknown")
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    assert not [f for f in audit_saved_model(path, AuditOptions(static_only=True)).findings
                if f.code.startswith("GA4")]
    relu = [n for f in sm.meta_graphs[0].graph_def.library.function for n in f.node_def if n.op == "Relu"]
    relu[0].op = "GradauditNoSuchOp"
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    report = audit_saved_model(path, AuditOptions(static_only=True))
    found = [f for f in report.findings if f.rule == "unproven-op"]
    assert [f.op.op_type for f in found] == ["GradauditNoSuchOp"]
    assert "not an op this TensorFlow knows" in found[0].message


def test_special_files_and_symlinks_leaving_the_folder_are_found_without_opening_them(tmp_path):
    from .attacks import _table_model

    path = _table_model(str(tmp_path / "special"))
    os.mkfifo(os.path.join(path, "variables", "extra.fifo"))  # opening it would block the loader forever
    os.symlink("/etc", os.path.join(path, "assets.extra"))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    named = {f.op.op_name: f.message for f in report.findings if f.rule == "unsafe-asset"}
    assert set(named) == {"variables/extra.fifo", "assets.extra"}
    assert "not a regular file" in named["variables/extra.fifo"] and "/etc" in named["assets.extra"]


def test_links_the_loader_does_not_follow_are_not_findings(tmp_path):
    from .attacks import _table_model

    path = _table_model(str(tmp_path / "linked"))
    os.symlink("/etc/hostname", os.path.join(path, "README"))  # beside the model, never read by the loader
    report = audit_saved_model(path, AuditOptions(static_only=True))
    assert not [f for f in report.findings if f.rule == "unsafe-asset"]


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.parametrize("where", ["variables", "gs"])
def test_a_dataset_cache_into_the_model_or_the_network_is_found(tmp_path, where, monkeypatch):
    from .attacks import _dataset_model

    path = str(tmp_path / "cache_model")
    target = os.path.join(path, "variables", "cache") if where == "variables" else "gs://gradaudit-never/cache"
    _dataset_model(path, lambda ds: ds.cache(target))
    before = sorted(os.listdir(os.path.join(path, "variables")))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [path, "--format", "json"], catch_exceptions=False)
    doc = json.loads(result.stdout)
    assert result.exit_code == 1
    assert [f["op_type"] for f in doc["findings"] if f["code"] == "GA401"] == ["CacheDatasetV2"]
    assert sorted(os.listdir(os.path.join(path, "variables"))) == before and not doc["numeric"]
