"""Mutated saved_model.pb files (bit flips, truncation, spliced fields): gradaudit reports or exits 2
with one line, never crashes or hangs."""

from __future__ import annotations

import os
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradaudit.api import AuditOptions, audit_saved_model
from gradaudit.errors import GradauditError

BASES = ["classifier_argmax", "while_loop", "case", "log1pexp_custom"]


@pytest.fixture(scope="module")
def originals(samples):
    out = {}
    for name in BASES:
        with open(os.path.join(samples, name, "saved_model.pb"), "rb") as f:
            out[name] = f.read()
    return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, samples):
    path = tmp_path_factory.mktemp("fuzz") / "model"
    shutil.copytree(os.path.join(samples, "classifier_argmax"), path)
    return path


def _audit_reports_or_exits_2(workdir, data: bytes) -> None:
    """The model with `data` as its saved_model.pb gives a report or one line (GradauditError, exit 2 in the
    CLI); an internal error or a crash fails the test."""
    with open(workdir / "saved_model.pb", "wb") as f:
        f.write(data)
    try:
        report = audit_saved_model(str(workdir), AuditOptions(static_only=True))
    except GradauditError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert report.target.kind == "saved_model"


def mutate(data: bytes, kind: str, a: int, b: int, flips: list[int]) -> bytes:
    n = len(data)
    if kind == "truncate":
        return data[: a % n]
    if kind == "flip":
        buf = bytearray(data)
        for f in flips:
            buf[f % n] ^= 1 << (f % 8)
        return bytes(buf)
    if kind == "splice":  # copy a run of bytes from one place to another (duplicated / shifted fields)
        i, j = sorted((a % n, b % n))
        k = (a * 7 + b) % n
        return data[:k] + data[i:j] + data[k:]
    # drop a run of bytes
    i, j = sorted((a % n, b % n))
    return data[:i] + data[j:]


@settings(max_examples=int(os.environ.get("GRADAUDIT_FUZZ_EXAMPLES", "80")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(BASES), kind=st.sampled_from(["truncate", "flip", "splice", "drop"]),
       a=st.integers(0, 2**31), b=st.integers(0, 2**31), flips=st.lists(st.integers(0, 2**31), max_size=8))
@pytest.mark.slow  # a model's numeric checks, seconds
def test_mutated_model_reports_or_exits_2(originals, workdir, base, kind, a, b, flips):
    _audit_reports_or_exits_2(workdir, mutate(originals[base], kind, a, b, flips))


# -- structured mutations: a well-formed protobuf that describes an inconsistent graph ------------------

STRUCTURED = ["op_type", "unknown_op", "dangling_input", "bad_output_index", "attr_kind", "drop_function",
              "drop_attr", "duplicate_name", "self_input"]


def _bodies(sm):
    """(node list) of the graph and of every library function, each non-empty."""
    graph_def = sm.meta_graphs[0].graph_def
    bodies = [graph_def.node] + [f.node_def for f in graph_def.library.function]
    return [b for b in bodies if len(b)]


def mutate_structure(data: bytes, kind: str, a: int, b: int) -> bytes:
    from tensorflow.core.protobuf import saved_model_pb2

    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString(data)
    library = sm.meta_graphs[0].graph_def.library
    if kind == "drop_function" and len(library.function):
        del library.function[a % len(library.function)]
        return sm.SerializeToString()
    bodies = _bodies(sm)
    body = bodies[a % len(bodies)]
    node = body[b % len(body)]
    other = body[(a + b) % len(body)]
    if kind == "op_type":
        node.op = other.op
    elif kind == "unknown_op":
        node.op = "NoSuchOpAnywhere"
    elif kind == "dangling_input":
        node.input.append("no_such_node:0")
    elif kind == "bad_output_index":
        node.input.append(f"{other.name}:{7 + b % 5}")
    elif kind == "attr_kind" and node.attr:
        key = sorted(node.attr)[b % len(node.attr)]
        value = node.attr[key]
        if value.WhichOneof("value") == "s":
            value.i = a
        else:
            value.s = b"not what this attribute holds"
    elif kind == "drop_attr" and node.attr:
        del node.attr[sorted(node.attr)[a % len(node.attr)]]
    elif kind == "duplicate_name":
        node.name = other.name
    elif kind == "self_input":
        node.input.append(f"{node.name}:0")
    return sm.SerializeToString()


@settings(max_examples=int(os.environ.get("GRADAUDIT_FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.sampled_from(BASES), kind=st.sampled_from(STRUCTURED), a=st.integers(0, 2**31),
       b=st.integers(0, 2**31))
@pytest.mark.slow  # a model's numeric checks, seconds
def test_structurally_mutated_model_reports_or_exits_2(originals, workdir, base, kind, a, b):
    """Changed op types, unknown ops, dangling inputs and output indices, attributes of the wrong kind or
    missing, missing functions, duplicate names, self-loops: a report or one line (exit 2), never
    gradaudit's internal error, a crash or a hang."""
    _audit_reports_or_exits_2(workdir, mutate_structure(originals[base], kind, a, b))


# -- graphs TensorFlow would not load: refused, never passed ---------------------------------------------------


def _call_body(sm):
    return next(f for f in sm.meta_graphs[0].graph_def.library.function
                if any(n.op == "MatMul" for n in f.node_def))


def _edit(kind: str, sm) -> str:
    """Make one thing TensorFlow checks on load wrong in `sm`; the phrase the refusal holds."""
    body = _call_body(sm)
    matmul = next(n for n in body.node_def if n.op == "MatMul")
    if kind == "missing_attr":
        del matmul.attr["T"]
        return "lacks attr 'T', which its op requires"
    if kind == "attr_kind":
        matmul.attr["transpose_a"].s = b"yes"
        return "attr 'transpose_a' holds a string, not a bool"
    if kind == "disallowed_type":
        for n in body.node_def:
            if n.op == "MatMul":
                n.attr["T"].type = 7  # DT_STRING
        return "holds string, which its op does not allow"
    if kind == "extra_input":
        matmul.input.insert(2, matmul.input[0])
        return "has more inputs than the 2 its op takes"
    if kind == "dangling_input":
        matmul.input[0] = "no_such_node:output:0"
        return "names nothing in it"
    # MatMul's second input is 'MatMul/ReadVariableOp:value:0'
    producer = next(n for n in body.node_def if n.name == matmul.input[1].split(":")[0])
    if kind == "no_such_output_arg":
        matmul.input[1] = f"{producer.name}:no_such_arg:0"
        return "has no output 'no_such_arg'"
    if kind == "output_index":
        matmul.input[1] = f"{producer.name}:value:5"
        return "has no such output"
    if kind == "dtype":
        producer.attr["dtype"].type = 3  # the variable read now gives int32, MatMul takes float
        return "is int32 where its op takes float"
    if kind == "duplicate_name":
        body.node_def[1].name = body.node_def[0].name
        return "two nodes are named"
    if kind == "control_first":
        matmul.input.insert(0, f"^{producer.name}")
        return "after a control input"
    if kind == "missing_function":  # a saved object names a function the library does not have
        saved = next(n for n in sm.meta_graphs[0].object_graph_def.nodes
                     if n.WhichOneof("kind") == "function" and n.function.concrete_functions)
        saved.function.concrete_functions[0] = "no_such_function"
        return "names function 'no_such_function', which is not in the library"
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["missing_attr", "attr_kind", "disallowed_type", "extra_input", "dangling_input",
                                  "no_such_output_arg", "output_index", "dtype", "duplicate_name", "control_first",
                                  "missing_function"])
def test_graph_tensorflow_would_reject_is_a_load_error(samples, tmp_path, kind):
    from tensorflow.core.protobuf import saved_model_pb2

    path = tmp_path / "model"
    shutil.copytree(os.path.join(samples, "classifier_argmax"), path)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    phrase = _edit(kind, sm)
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(GradauditError) as exc:
        audit_saved_model(str(path), AuditOptions(static_only=True))
    message = str(exc.value)
    assert "TensorFlow would reject this graph: " in message and phrase in message and "\n" not in message


def test_every_sample_model_is_one_tensorflow_loads(samples):
    """No false refusal: the check passes each sample model (TensorFlow loads them all to build them)."""
    from gradaudit.targets.saved_model import SavedModelFile

    names = sorted(os.listdir(samples))
    assert len(names) > 20
    for name in names:
        SavedModelFile(os.path.join(samples, name))


@pytest.mark.slow
def test_no_pass_on_a_mutated_graph_tensorflow_rejects(samples, tmp_path):
    """Seeded structured mutations of the sample models, each pass and each 'TensorFlow would reject' refusal
    asked of TensorFlow itself (tf.saved_model.load, and a TF1 session, which imports the graph's own nodes as
    TF Serving does). No pass is on a graph TensorFlow rejects, except for ops this TensorFlow does not know:
    they are reported (an info line when they decide no gradient) and a model using them loads once their
    package is imported (--load-ops). No refusal is of a graph both load."""
    outcomes = _harness_in_a_fresh_process(samples, tmp_path)
    passes = [o for o in outcomes if o.verdict == "pass"]
    assert passes and len(passes) < len(outcomes)
    false_passes = [o for o in passes if not (o.tf_ok and o.graph_ok)]
    unexplained = [(o.base, o.kind, o.a, o.b, o.tf_error, o.graph_error) for o in false_passes
                   if "Op type not registered" not in (o.tf_error or o.graph_error)]
    assert not unexplained, unexplained
    refused = [o for o in outcomes if "TensorFlow would reject" in o.message]
    assert refused
    assert not [o.message for o in refused if o.tf_ok and o.graph_ok]


def _harness_in_a_fresh_process(samples: str, tmp_path):
    """The harness's outcomes, run in a fresh interpreter: the static verdicts must not depend on what earlier
    tests registered in this process (the custom-op tests load a library of ops TensorFlow then knows here)."""
    import json
    import subprocess
    import sys
    from types import SimpleNamespace

    code = ("import dataclasses, json, sys; from fuzz_harness import run; "
            "print(json.dumps([dataclasses.asdict(o) for o in run(sys.argv[1], int(sys.argv[2]), seed=1, "
            "workdir=sys.argv[3], ask_rejected=True)]))")
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code, samples, os.environ.get("GRADAUDIT_TF_FUZZ", "120"),
                           str(tmp_path)], capture_output=True, text=True, env=env, timeout=3000)
    assert done.returncode == 0, done.stderr[-3000:]
    return [SimpleNamespace(**o) for o in json.loads(done.stdout.strip().splitlines()[-1])]



def test_a_missing_saved_gradient_function_is_refused_as_tensorflow_refuses_it(samples, tmp_path):
    """The 'drop_function' mutation that passed: a custom gradient whose gradient function is gone. TensorFlow's
    loader cannot order the library then ("cyclic dependency ... Could not resolve"), and the check says so."""
    import shutil

    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from gradaudit.errors import GradauditError
    from gradaudit.targets.saved_model import SavedModelFile

    path = tmp_path / "dropped_gradient"
    shutil.copytree(os.path.join(samples, "log1pexp_custom"), path)
    sm = saved_model_pb2.SavedModel()
    sm.ParseFromString((path / "saved_model.pb").read_bytes())
    library = sm.meta_graphs[0].graph_def.library
    gone = {g.gradient_func for g in library.registered_gradients}
    kept = [f for f in library.function if f.signature.name not in gone]
    del library.function[:]
    library.function.extend(kept)
    (path / "saved_model.pb").write_bytes(sm.SerializeToString())
    with pytest.raises(Exception, match="cyclic dependency"):
        tf.saved_model.load(str(path))
    with pytest.raises(GradauditError, match="TensorFlow would reject this graph: .*saved custom gradient"):
        SavedModelFile(str(path))
