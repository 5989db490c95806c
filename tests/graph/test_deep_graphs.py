"""Deep graphs: a signature whose function calls another, 1,000 levels deep, is audited (the static pass
composes function summaries without recursing on depth); a function that calls itself is a malformed model at
once."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from helpers import save_module
from tensorflow.core.protobuf import saved_model_pb2

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.errors import GradauditError


def _nested(tmp_path, depth: int, self_call: bool = False) -> str:
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.round(tf.sin(x)) * 2.0}

    path = save_module(M(), str(tmp_path / f"nest{depth}"))
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    lib = sm.meta_graphs[0].graph_def.library
    call = next(f for f in lib.function if f.signature.name.startswith("__inference___call__"))
    prev = call.signature.name
    for k in range(depth):  # f_k(x) = PartitionedCall(f_{k-1})(x)
        f = lib.function.add()
        f.CopyFrom(call)
        f.signature.name = f"__inference_nest_{k}"
        del f.node_def[:]
        node = f.node_def.add()
        node.name, node.op = "inner", "PartitionedCall"
        node.input.append(f.signature.input_arg[0].name)
        node.attr["f"].func.name = f.signature.name if self_call else prev
        node.attr["Tin"].list.type.append(1)
        node.attr["Tout"].list.type.append(1)
        for out in f.signature.output_arg:
            f.ret[out.name] = "inner:output:0"
        prev = f.signature.name
    for f in lib.function:
        if f.signature.name.startswith("__inference_signature_wrapper"):
            for node in f.node_def:
                if node.attr["f"].func.name == call.signature.name:
                    node.attr["f"].func.name = prev
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())
    return path


def test_a_thousand_nested_calls_are_audited(tmp_path):
    report = audit_saved_model(_nested(tmp_path, 1000), AuditOptions(static_only=True))
    [entry] = report.flow
    assert entry.status == "blocked" and [c.op.op_type for c in entry.blocked_by] == ["Round"]
    assert entry.blocked_by[0].op.function.startswith("__inference___call__")


def test_a_function_that_calls_itself_is_malformed(tmp_path):
    with pytest.raises(GradauditError, match="malformed model.*calls itself"):
        audit_saved_model(_nested(tmp_path, 1, self_call=True), AuditOptions(static_only=True))
