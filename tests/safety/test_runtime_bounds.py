"""Every resource of the part that runs the model is bounded: a While loop that never ends, a queue that
blocks for ever and a giant allocation end with verdict `incomplete` and one line saying why (never a hang,
a crash or a pass); a missing, truncated or corrupt variables file is named and the static report stays
complete; a FIFO or a device among the variables is refused at once (exit 2)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import tensorflow as tf
from click.testing import CliRunner
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.cli import main

DATA = os.path.join("variables", "variables.data-00000-of-00001")
INDEX = os.path.join("variables", "variables.index")


class _Base(tf.Module):
    def __init__(self):
        self.w = tf.Variable(1.5, name="w")


class Forever(_Base):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        _, h = tf.while_loop(lambda i, h: tf.constant(True), lambda i, h: (i + 1, tf.sin(h) * self.w), (0, x))
        return {"y": h}


class Blocking(_Base):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        queue = tf.raw_ops.FIFOQueueV2(component_types=[tf.float32], shapes=[[]], capacity=1)
        [item] = tf.raw_ops.QueueDequeueV2(handle=queue, component_types=[tf.float32])  # nothing is ever enqueued
        return {"y": x * self.w + item}


class Giant(_Base):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        big = tf.fill([512 * 1024 * 1024], self.w)  # 2 GiB of float32
        return {"y": x * tf.reduce_sum(big)}


class Healthy(_Base):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def __call__(self, x):
        return {"y": tf.tanh(x * self.w)}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bounds")
    return {name: save_module(cls(), str(root / name))
            for name, cls in [("forever", Forever), ("blocking", Blocking), ("giant", Giant), ("healthy", Healthy)]}


def _static_intact(report) -> None:
    assert {s.name for s in report.sources} == {"x", "w"}
    assert {e.status for e in report.flow} == {"connected"} and len(report.flow) == 2


@pytest.mark.slow  # one child process each, stopped by its bound
@pytest.mark.parametrize("name, options, says", [
    ("forever", {"timeout": 15.0}, "did not finish within --timeout 15 s"),
    ("blocking", {"timeout": 15.0, "allow_unsafe_ops": True}, "did not finish within --timeout 15 s"),
    ("giant", {"timeout": 300.0, "memory_limit": 1 << 30}, "OOM when allocating"),
])
def test_runaway_model_ends_incomplete_with_one_line(models, name, options, says):
    report = audit_saved_model(models[name], AuditOptions(**options))
    assert report.verdict() == "incomplete" and not report.ok
    assert not [n for n in report.numeric if n.status == "pass"]
    assert any(says in line for line in report.incomplete), report.incomplete
    assert all("\n" not in line for line in report.incomplete)
    assert report.isolation is not None and report.isolation.time_budget_s == options["timeout"]
    if "memory_limit" in options:
        assert report.isolation.memory_limit_bytes == options["memory_limit"]
    _static_intact(report)


def _broken(models, tmp_path, how: str) -> str:
    path = str(tmp_path / how)
    shutil.copytree(models["healthy"], path)
    data, index = os.path.join(path, DATA), os.path.join(path, INDEX)
    if how == "truncated_data":
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)
    elif how == "deleted_data":
        os.remove(data)
    elif how == "corrupt_index":
        with open(index, "r+b") as f:
            f.seek(os.path.getsize(index) - 4)
            f.write(b"\0\0\0\0")  # the table's magic number
    elif how == "deleted_index":
        os.remove(index)
    return path


@pytest.mark.parametrize("how, says", [
    ("truncated_data", f"{DATA} is truncated"),
    ("deleted_data", f"{DATA} is missing"),
    ("corrupt_index", f"{INDEX} is corrupt"),
    ("deleted_index", f"{INDEX} is missing"),
])
def test_broken_variables_are_named_and_the_static_report_stays(models, tmp_path, how, says):
    """Found before TensorFlow opens them: nothing of the model runs, in this process or another."""
    report = audit_saved_model(_broken(models, tmp_path, how), AuditOptions(timeout=300.0))
    assert report.verdict() == "incomplete"
    assert len(report.incomplete) == 1 and says in report.incomplete[0], report.incomplete
    assert report.isolation is None and not report.numeric and not report.stability
    _static_intact(report)


@pytest.mark.slow  # runs the model in a child process
def test_broken_variables_on_the_command_line(models, tmp_path):
    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, [_broken(models, tmp_path, "truncated_data"), "--json", str(out)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output and f"{DATA} is truncated" in result.output
    doc = json.loads(out.read_text())
    assert doc["verdict"] == "incomplete" and len(doc["flow"]) == 2


@pytest.mark.slow  # runs the model in a child process
@pytest.mark.parametrize("kind", ["fifo", "dev_zero"])
def test_special_variables_file_is_never_opened(models, tmp_path, kind):
    """By default the file is an unsafe-asset finding (GA403) and nothing runs; with --allow-unsafe-ops the
    run stops before TensorFlow's restore would block on it or read it for ever: exit 2, one line."""
    path = str(tmp_path / kind)
    shutil.copytree(models["healthy"], path)
    data = os.path.join(path, DATA)
    os.remove(data)
    if kind == "fifo":
        os.mkfifo(data)
    else:
        os.symlink("/dev/zero", data)
    result = CliRunner().invoke(main, [path, "--format", "json"])
    assert result.exit_code == 1, result.output
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["GA403"]
    result = CliRunner().invoke(main, [path, "--allow-unsafe-ops"])
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.stderr and len(result.stderr.strip().splitlines()) == 1
