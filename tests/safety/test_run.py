"""Execution safety: nothing of an unsafe model runs by default, the model folder is never written,
and --timeout bounds the part that runs the model."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat

import pytest
import tensorflow as tf
from click.testing import CliRunner
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main


def writer_model(path: str, target: str) -> str:
    class Writer(tf.Module):
        def __init__(self):
            self.w = tf.Variable(2.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.io.write_file(target, tf.strings.as_string(tf.reduce_sum(x)))
            return {"y": x * self.w}

    return save_module(Writer(), path)


def test_unsafe_model_is_not_executed_unless_allowed(tmp_path):
    target = tmp_path / "written.txt"
    path = writer_model(str(tmp_path / "writer"), str(target))
    report = audit_saved_model(path, AuditOptions())
    assert [f.rule for f in report.findings if f.rule == "unsafe-op"] == ["unsafe-op"]
    assert not report.numeric and not report.stability
    assert any("not proven safe (GA401)" in n for n in report.incomplete)
    assert not target.exists()
    report = audit_saved_model(path, AuditOptions(allow_unsafe_ops=True))
    assert report.numeric and target.exists()  # the model really writes when it is run


def tree_digest(root: str) -> dict[str, str]:
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, root)
            if os.path.isdir(full):
                out[rel] = "dir"
            else:
                with open(full, "rb") as fh:
                    out[rel] = hashlib.sha256(fh.read()).hexdigest() + f":{os.stat(full).st_mtime_ns}"
    return out


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.parametrize("name", ["log1pexp_custom", "cnn"])
def test_full_run_never_writes_into_the_model(samples, tmp_path, name):
    copy = str(tmp_path / name)
    shutil.copytree(os.path.join(samples, name), copy)
    before = tree_digest(copy)
    for folder, _, files in os.walk(copy):  # read-only copy: root ignores the bits, the digest does not
        for f in files:
            os.chmod(os.path.join(folder, f), stat.S_IRUSR | stat.S_IRGRP)
        os.chmod(folder, stat.S_IRUSR | stat.S_IXUSR)
    try:
        result = CliRunner().invoke(main, [copy, "--order", "2", "--format", "json"])
        assert result.exit_code in (0, 1), result.output
        assert '"numeric": [' in result.stdout and '"status": "pass"' in result.stdout
    finally:
        for folder, _, _ in os.walk(copy):
            os.chmod(folder, stat.S_IRWXU)
    assert tree_digest(copy) == before


@pytest.mark.slow  # runs the model in the child
def test_timeout_not_reached_gives_the_child_results(samples):
    report = audit_saved_model(os.path.join(samples, "wrong_custom_gradient_2x"), AuditOptions(timeout=300.0))
    # the check at the synthesised point (the probe points' checks follow it, some inconclusive at 2x)
    assert [n.status for n in report.numeric if n.source == "x" and n.scale is None] == ["fail"]
    assert "gradient-mismatch" in {f.rule for f in report.findings}


@pytest.mark.slow  # runs the model in the child
def test_a_relative_model_path_runs_in_the_child(samples, monkeypatch):
    """The child runs in another folder: it loads the model by its absolute path, whatever path the static pass
    parsed it under (a relative one here)."""
    monkeypatch.chdir(os.path.dirname(samples))
    report = audit_saved_model(os.path.join(os.path.basename(samples), "mlp"), AuditOptions(timeout=300.0))
    assert report.isolation is not None and report.isolation.time_budget_s == 300.0
    assert not [f for f in report.findings if f.rule == "unrunnable-model"]
    assert {n.status for n in report.numeric if n.scale is None} == {"pass"}
