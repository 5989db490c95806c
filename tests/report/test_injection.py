"""Names from the model cannot inject into what gradaudit writes: an op name holding ESC and a newline and a
folder name holding '\\n::error::' stay inert in every format (no raw control character in text formats,
well-formed XML, JSON that parses, no workflow-command line that gradaudit did not write)."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
import tensorflow as tf
from click.testing import CliRunner

from gradaudit.cli import main
from gradaudit.report import FORMATS

EVIL_OP = "evil\x1b[2J\x1b]0;owned\x07\n::error::op-injected"
EVIL_FOLDER = "model\n::error::folder-injected"


def _rename(fdef, old: str, new: str) -> None:
    for node in fdef.node_def:
        if node.name == old:
            node.name = new
        node.input[:] = [("^" + new if i == "^" + old else new + i[len(old):] if i.split(":")[0] == old else i)
                         for i in node.input]
    for key, value in list(fdef.control_ret.items()):
        if value == old:
            fdef.control_ret[key] = new


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> str:
    """A SavedModel in a folder named EVIL_FOLDER whose WriteFile op (GA401) is named EVIL_OP."""
    from tensorflow.core.protobuf import saved_model_pb2

    class Writer(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.io.write_file("/nonexistent/never", tf.strings.as_string(tf.reduce_sum(x)))
            return {"y": x * self.w}

    module = Writer()
    path = str(tmp_path_factory.mktemp("inject") / EVIL_FOLDER)
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    for fdef in sm.meta_graphs[0].graph_def.library.function:
        if any(n.op == "WriteFile" for n in fdef.node_def):
            _rename(fdef, next(n.name for n in fdef.node_def if n.op == "WriteFile"), EVIL_OP)
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    return path


def _strings(doc) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        doc = list(doc.values())
    return [s for item in doc for s in _strings(item)] if isinstance(doc, list) else []


def _injected(text: str) -> list[str]:
    """Lines a CI runner or terminal would act on that gradaudit did not mean to write."""
    # gradaudit's own commands always carry properties (`::error file=...,title=...::`); an injected one
    # starts a line with a bare command
    bad = [line for line in text.splitlines()
           if line.startswith("::") and not line.startswith(("::error ", "::warning ", "::notice "))]
    return bad + (["raw ESC"] if "\x1b" in text else []) + (["raw BEL"] if "\x07" in text else [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_lets_a_name_inject(evil, fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [evil, "--static-only", "--format", fmt], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # the GA401 finding
    out = result.stdout
    assert "op-injected" in out and not _injected(out), _injected(out)
    if fmt in ("json", "sarif"):
        assert any(EVIL_OP in text for text in _strings(json.loads(out)))  # the exact name, escaped by JSON
    if fmt == "junit":
        root = ET.fromstring(out)  # well-formed
        assert any("op-injected" in (el.text or "") + (el.get("message") or "") for el in root.iter())


def test_error_lines_and_failures_cannot_inject(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / EVIL_FOLDER
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"\x0a\xff\xff")
    for fmt in ("github", "text", "junit", "markdown"):
        result = CliRunner().invoke(main, [str(broken), "--static-only", "--format", fmt])
        assert result.exit_code == 2
        assert not _injected(result.stderr) and not _injected(result.stdout), (fmt, result.stderr, result.stdout)
