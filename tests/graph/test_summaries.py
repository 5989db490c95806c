"""Each function is analysed once and composed at its calls: a library where each function calls the next twice
(2^40 paths) is audited with the right verdict, a function that calls itself (directly or through another) is a
malformed model at once, and one function called at two places with different connectivity gets each place's
own statuses, held against tf.GradientTape on the loaded model."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf
from helpers import save_module
from tensorflow.core.protobuf import saved_model_pb2
from truth import compared, contradictions, tape_truth

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.errors import GradauditError


def _base(tmp_path, name: str) -> str:
    """y = round(sin(x)) * 2: blocked by Round inside the traced __call__ function."""
    class M(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            return {"y": tf.round(tf.sin(x)) * 2.0}

    return save_module(M(), str(tmp_path / name))


def _rewire(path: str, levels: int, calls: int = 2, cycle: int = 0, distinct: bool = False) -> None:
    """Put `levels` functions between the signature wrapper and __call__: f_k(x) = sum of `calls` calls of
    f_{k+1}(x), each fed x itself or (`distinct`) its own Identity of x. With `cycle` > 0 the last `cycle`
    functions call each other in a ring instead."""
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    lib = sm.meta_graphs[0].graph_def.library
    call = next(f for f in lib.function if f.signature.name.startswith("__inference___call__"))
    names = [f"__inference_level_{k}" for k in range(levels)]
    for k, name in enumerate(names):
        f = lib.function.add()
        f.CopyFrom(call)
        f.signature.name = name
        del f.node_def[:]
        callee = names[k + 1] if k + 1 < levels else call.signature.name
        if cycle and k >= levels - cycle:
            callee = names[k + 1] if k + 1 < levels else names[levels - cycle]
        outs = []
        for c in range(calls):
            fed = f.signature.input_arg[0].name
            if distinct:
                copy = f.node_def.add()
                copy.name, copy.op = f"copy{c}", "Identity"
                copy.input.append(fed)
                copy.attr["T"].type = 1
                fed = f"copy{c}:output:0"
            node = f.node_def.add()
            node.name, node.op = f"call{c}", "PartitionedCall"
            node.input.append(fed)
            node.attr["f"].func.name = callee
            node.attr["Tin"].list.type.append(1)
            node.attr["Tout"].list.type.append(1)
            outs.append(f"call{c}:output:0")
        total = outs[0]
        for c, out in enumerate(outs[1:]):
            add = f.node_def.add()
            add.name, add.op = f"sum{c}", "AddV2"
            add.input.extend([total, out])
            add.attr["T"].type = 1
            total = f"sum{c}:z:0"
        for out in f.signature.output_arg:
            f.ret[out.name] = total
    for f in lib.function:
        if f.signature.name.startswith("__inference_signature_wrapper"):
            for node in f.node_def:
                if node.attr["f"].func.name == call.signature.name:
                    node.attr["f"].func.name = names[0]
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())


@pytest.mark.parametrize("distinct", [False, True], ids=["same-tensor", "distinct-tensors"])
def test_a_library_with_two_to_the_forty_paths_is_audited(tmp_path, distinct):
    path = _base(tmp_path, "doubling")
    _rewire(path, 40, distinct=distinct)
    [entry] = audit_saved_model(path, AuditOptions(static_only=True)).flow
    assert entry.status == "blocked"
    assert [(c.op.op_type, c.op.function.startswith("__inference___call__")) for c in entry.blocked_by] == [
        ("Round", True)]


@pytest.mark.parametrize("ring", [1, 2, 3], ids=["self", "mutual", "three"])
def test_recursion_is_a_malformed_model(tmp_path, ring):
    path = _base(tmp_path, f"ring{ring}")
    _rewire(path, 4, calls=1, cycle=ring)
    with pytest.raises(GradauditError, match=r"malformed model.*__inference_level_\d calls itself") as err:
        audit_saved_model(path, AuditOptions(static_only=True))
    assert "\n" not in str(err.value)


class TwoSites(tf.Module):
    """One function called at two places: at the first its argument carries x1's gradient, at the second x2's
    is stopped before the call. Its Round cuts one of x1's paths to y1 (partial), and nothing of x2's."""

    def __init__(self):
        self.w = tf.Variable([1.5, -0.5], name="w")

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32), tf.TensorSpec([2], tf.float32)])
    def body(self, u, w):
        return u * w + tf.round(u)

    @tf.function(input_signature=[tf.TensorSpec([2], tf.float32, name="x1"),
                                  tf.TensorSpec([2], tf.float32, name="x2")])
    def __call__(self, x1, x2):
        return {"y1": self.body(x1, self.w), "y2": self.body(tf.stop_gradient(x2), self.w),
                "y3": self.body(x1 * x2, self.w)}


def test_one_function_called_with_different_connectivity(tmp_path):
    path = save_module(TwoSites(), str(tmp_path / "two_sites"))
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    lib = sm.meta_graphs[0].graph_def.library
    body = next(f.signature.name for f in lib.function if "_body_" in f.signature.name)
    sites = [n for f in lib.function for n in f.node_def if n.attr["f"].func.name == body]
    assert len(sites) == 3  # the test is about one function composed at several calls

    report = audit_saved_model(path, AuditOptions(static_only=True))
    truth = tape_truth(path, ["serving_default"])["serving_default"]
    assert contradictions(report, truth) == []
    assert compared(report, truth) >= 6
    flow = {(e.source, e.output): e for e in report.flow}
    assert flow["x1", "y1"].status == "connected"
    assert [(c.op.op_type, c.op.function) for c in flow["x1", "y1"].partial_by] == [("Round", body)]
    assert flow["x2", "y2"].status == "blocked"
    assert [c.op.op_type for c in flow["x2", "y2"].blocked_by] == ["StopGradient"]
    assert not flow["x2", "y2"].blocked_by[0].op.function == body
    assert flow["x1", "y2"].status == "disconnected" and flow["x2", "y1"].status == "disconnected"
    assert flow["x2", "y3"].status == "connected"
    assert [c.op.op_type for c in flow["x2", "y3"].partial_by] == ["Round"]
    assert flow["w", "y2"].status == "connected" and not flow["w", "y2"].partial_by


def test_nothing_recurses_on_the_depth_of_calls(tmp_path):
    """The static pass itself, on the caller's stack with Python's default recursion limit, on calls nested
    deeper than that limit."""
    import sys

    from gradaudit.flow import analyse
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.targets.saved_model import SavedModelFile

    path = _base(tmp_path, "deep")
    depth = sys.getrecursionlimit() + 200
    _rewire(path, depth, calls=1)
    model = SavedModelFile(path)
    analysis = analyse(model, model.signature("serving_default"), GradientOracle())
    [entry] = analysis.flow
    assert entry.status == "blocked" and [c.op.op_type for c in entry.blocked_by] == ["Round"]


def test_one_node_budget_and_a_deadline_for_every_graph(tmp_path):
    """Bodies, summaries' edges and composed copies draw on one budget: the analysis that fits in it fails with
    one node less; a deadline already past stops the pass with its own error (api.py reports both, exit 2)."""
    from gradaudit.flow import analyse
    from gradaudit.graph.dataflow import Budget, GraphTooLarge, StaticPassTooSlow
    from gradaudit.graph.gradients import GradientOracle
    from gradaudit.targets.saved_model import SavedModelFile

    path = _base(tmp_path, "budget")
    _rewire(path, 40)
    model = SavedModelFile(path)
    sig = model.signature("serving_default")
    budget = Budget()
    analysis = analyse(model, sig, GradientOracle(), budget)
    assert budget.used > len(analysis.graph.dtype)  # the bodies and the composed graph together
    with pytest.raises(GraphTooLarge, match=f"budget of {budget.used - 1:,} nodes"):
        analyse(model, sig, GradientOracle(), Budget(max_nodes=budget.used - 1))
    with pytest.raises(StaticPassTooSlow, match="time budget of 0 s"):
        analyse(model, sig, GradientOracle(), Budget(seconds=0))


class DatasetInside(tf.Module):
    """Functions named only by an attr (a dataset's map and reduce functions) are walked, never joined to the
    caller's values; they can be built after the function that names them."""

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32, name="x")])
    def __call__(self, x):
        ds = tf.data.Dataset.from_tensor_slices(x).map(lambda v: tf.round(v) * 2.0)
        return {"y": ds.reduce(0.0, lambda a, b: a + b) + tf.sin(x), "z": tf.round(x)}


def test_functions_named_by_attrs_are_walked(tmp_path):
    path = save_module(DatasetInside(), str(tmp_path / "dataset"))
    report = audit_saved_model(path, AuditOptions(static_only=True))
    truth = tape_truth(path, ["serving_default"])["serving_default"]
    assert contradictions(report, truth) == []
    flow = {(e.source, e.output): e for e in report.flow}
    assert flow["x", "y"].status == "connected"
    assert flow["x", "z"].status == "blocked" and [c.op.op_type for c in flow["x", "z"].blocked_by] == ["Round"]
