"""GA401 unsafe-op: found statically in the signature, the init op and table initializers."""

from __future__ import annotations

import os

import tensorflow as tf
from helpers import save_module

from gradaudit.api import AuditOptions, audit_saved_model


def unsafe(report):
    return [f for f in report.findings if f.rule == "unsafe-op"]


def test_write_file_in_signature(static_report):
    found = unsafe(static_report("unsafe_write_file"))
    assert [f.op.op_type for f in found] == ["WriteFile"] and found[0].severity.value == "error"
    assert "signature 'serving_default'" in found[0].message


def test_saver_functions_are_not_findings(static_report):
    assert not unsafe(static_report("mlp"))  # every SavedModel holds SaveV2/RestoreV2 in its saver


def test_print_to_file_and_initializer_read(tmp_path):
    class M(tf.Module):
        def __init__(self):
            self.v = tf.Variable(1.0, name="v")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.print(x, output_stream="file:///tmp/gradaudit-never-written.txt")
            return {"y": x * self.v}

    r = audit_saved_model(save_module(M(), str(tmp_path / "p")), AuditOptions(static_only=True))
    assert [f.op.op_type for f in unsafe(r)] == ["PrintV2"]

    class Plain(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.print(x)  # to stderr: not a finding
            return {"y": x * 2.0}

    r = audit_saved_model(save_module(Plain(), str(tmp_path / "q")), AuditOptions(static_only=True))
    assert not unsafe(r)


def test_vocabulary_asset_is_safe(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("a\nb\nc\n")

    class Lookup(tf.Module):
        def __init__(self):
            init = tf.lookup.TextFileInitializer(str(vocab), tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
                                                 tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER)
            self.table = tf.lookup.StaticHashTable(init, -1)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="s")])
        def __call__(self, s):
            return {"id": self.table.lookup(s)}

    path = save_module(Lookup(), str(tmp_path / "lookup"))
    assert os.path.exists(os.path.join(path, "assets", "vocab.txt"))
    r = audit_saved_model(path, AuditOptions(static_only=True))
    assert not unsafe(r)
    assert [s.differentiable for s in r.sources] == [False]
