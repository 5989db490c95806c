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
def test_structurally_mutated_model_reports_or_exits_2(originals, workdir, base, kind, a, b):
    """Changed op types, unknown ops, dangling inputs and output indices, attributes of the wrong kind or
    missing, missing functions, duplicate names, self-loops: a report or one line (exit 2), never
    gradaudit's internal error, a crash or a hang."""
    _audit_reports_or_exits_2(workdir, mutate_structure(originals[base], kind, a, b))
