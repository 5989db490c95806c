"""--static-only is safe on any model file: hostile files end with one load error line and exit 2 (or, for a
variables index too large to check, a line saying so), within 2 GiB of address space, never with an internal
error, a traceback or the machine's memory."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import zipfile

import pytest
from google.protobuf import text_format
from tensorflow.core.protobuf import saved_model_pb2

from gradaudit.safety.budget import MAX_TEXT_GRAPH_BYTES
from gradaudit.safety.checkpoint import MAX_INDEX_BYTES, MAX_INDEX_ENTRIES, variables_problem

from .hostile import empty_nodes_saved_model, small_saved_model, tensor_bundle_index

LIMIT = 2 << 30  # address space of the child: TensorFlow's import fits, none of the bombs' allocations do


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> str:
    return small_saved_model(str(tmp_path_factory.mktemp("static_bounds") / "small"))


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _static_only(target: str) -> subprocess.CompletedProcess:
    """`gradaudit TARGET --static-only` in a child limited to 2 GiB of address space (the timeout only stops a
    hang from hanging the suite)."""
    return subprocess.run([sys.executable, "-m", "gradaudit", target, "--static-only"], check=False,
                          capture_output=True, text=True, timeout=600, preexec_fn=_limited,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})


def _load_error(done: subprocess.CompletedProcess, phrase: str) -> None:
    """Exit 2 with one error line holding `phrase`: not an internal error, a MemoryError or a kill."""
    lines = [line for line in done.stderr.strip().splitlines() if line.startswith("gradaudit:")]
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert len(lines) == 1 and phrase in lines[0], done.stderr[-2000:]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert "MemoryError" not in done.stderr


def _copy(small: str, tmp_path, name: str) -> str:
    path = str(tmp_path / name)
    shutil.copytree(small, path)
    return path


def _proto(path: str) -> saved_model_pb2.SavedModel:
    sm = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        sm.ParseFromString(f.read())
    return sm


def _write(path: str, sm: saved_model_pb2.SavedModel) -> None:
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(sm.SerializeToString())


def _call_function(sm):
    return next(f for f in sm.meta_graphs[0].graph_def.library.function
                if f.signature.name.startswith("__inference___call__"))


@pytest.mark.slow
@pytest.mark.parametrize("where", ["function", "graph"])
def test_output_index_bomb_is_a_malformed_model(small, tmp_path, where):
    """An op this TensorFlow does not know, used at output 300,000,000: its outputs were sized from that use
    (11.5 GB). No op has more than 1,000,000 outputs."""
    path = _copy(small, tmp_path, where)
    sm = _proto(path)
    if where == "function":
        body = _call_function(sm)
        mul = next(n for n in body.node_def if n.op == "Mul")
        unknown = body.node_def.add(name="unk", op="NoSuchOp")
        unknown.input.append(mul.input[0])
        mul.input[1] = "unk:out:300000000"
    else:
        graph = sm.meta_graphs[0].graph_def
        call = next(n for n in graph.node if n.op == "StatefulPartitionedCall")
        graph.node.add(name="unknown_op", op="NoSuchOp")
        call.input[0] = "unknown_op:300000000"
    _write(path, sm)
    _load_error(_static_only(path), "used at output 300000000, beyond the 1,000,000 outputs an op may have")


@pytest.mark.slow
def test_message_bomb_is_refused_before_parsing(small, tmp_path):
    """20 MB of empty NodeDefs parse into 10 million messages (+1.1 GB): counted first, refused unparsed."""
    path = _copy(small, tmp_path, "message_bomb")
    with open(os.path.join(path, "saved_model.pb"), "wb") as f:
        f.write(empty_nodes_saved_model(10_000_000))
    _load_error(_static_only(path), "holds more than 5,000,000 protobuf messages, more than the static pass analyses")


def test_message_count_is_exact_on_a_real_model(small):
    """The scan counts what the parser makes: every message, map entries included."""
    from gradaudit.safety.protoscan import count_messages

    def parsed(m) -> int:
        n = 1
        for field, value in m.ListFields():
            if field.message_type is None:
                continue
            if hasattr(value, "ListFields"):
                n += parsed(value)
            elif field.message_type.GetOptions().map_entry:
                has_message = field.message_type.fields_by_name["value"].message_type is not None
                n += sum(1 + (parsed(value[k]) if has_message else 0) for k in value)
            else:
                n += sum(parsed(v) for v in value)
        return n

    with open(os.path.join(small, "saved_model.pb"), "rb") as f:
        data = f.read()
    assert count_messages(data, saved_model_pb2.SavedModel.DESCRIPTOR) == parsed(_proto(small)) > 100


def test_message_count_bound_refuses_early_and_accepts_early():
    from gradaudit.safety.protoscan import message_count_bound

    bomb = empty_nodes_saved_model(1000)
    assert message_count_bound(bomb, saved_model_pb2.SavedModel.DESCRIPTOR, 500) > 500
    assert message_count_bound(bomb, saved_model_pb2.SavedModel.DESCRIPTOR, 2000) <= 2000
    # a graph of one node holding a large string: few messages whatever its size
    big = saved_model_pb2.SavedModel()
    big.meta_graphs.add().graph_def.node.add(name="n" * 100_000)
    assert message_count_bound(big.SerializeToString(), saved_model_pb2.SavedModel.DESCRIPTOR, 10) <= 10
    # a length that runs past the end, or a group: what follows is counted by the bytes left, never trusted
    past_end = b"\x12\xff\xff\x7f" + b"\x1a\x00" * 30  # meta_graphs, then saver_defs inside it
    assert message_count_bound(past_end, saved_model_pb2.SavedModel.DESCRIPTOR, 10) > 10
    assert message_count_bound(b"\x0b" + b"\x00" * 40, saved_model_pb2.SavedModel.DESCRIPTOR, 10) > 10


def _pbtxt(small: str, tmp_path, name: str, text: str) -> str:
    path = _copy(small, tmp_path, name)
    os.remove(os.path.join(path, "saved_model.pb"))
    with open(os.path.join(path, "saved_model.pbtxt"), "w") as f:
        f.write(text)
    return path


@pytest.mark.slow
def test_big_pbtxt_is_refused_before_parsing(small, tmp_path):
    """Text parses slowly (up to 2.5 s/MB here) and no deadline can stop the parse: the cap bounds it."""
    text = text_format.MessageToString(_proto(small))
    filler = "# " + "x" * 1000 + "\n"
    text += filler * (MAX_TEXT_GRAPH_BYTES // len(filler) + 1)
    path = _pbtxt(small, tmp_path, "big_text", text)
    _load_error(_static_only(path), "saved_model.pbtxt is larger than 16 MiB; not read")


def test_pbtxt_under_the_cap_still_loads(small, tmp_path):
    from gradaudit.targets.saved_model import SavedModelFile

    path = _pbtxt(small, tmp_path, "text", text_format.MessageToString(_proto(small)))
    assert SavedModelFile(path).signature_keys() == ["serving_default"]


@pytest.mark.slow
def test_deeply_nested_pbtxt_is_a_load_error(small, tmp_path):
    text = text_format.MessageToString(_proto(small))
    depth = 5000
    nested = "attr { key: 'k' value { func { name: 'f' " * depth + "} } }" * depth
    at = text.index("node {") + len("node {")
    path = _pbtxt(small, tmp_path, "nested", text[:at] + nested + text[at:])
    _load_error(_static_only(path), "cannot load saved_model.pbtxt: its messages are nested too deeply")


@pytest.mark.slow
@pytest.mark.parametrize("special, phrase", [
    ("/proc/self/mem", "cannot load saved_model.pb"),  # EIO; or refused as longer than its size
    ("/proc/self/pagemap", "saved_model.pb"),
    ("/dev/zero", "not a regular file"),
])
def test_graph_file_linked_to_a_special_file(small, tmp_path, special, phrase):
    if not os.path.exists(special):
        pytest.skip(f"no {special} here")
    path = _copy(small, tmp_path, os.path.basename(special))
    pb = os.path.join(path, "saved_model.pb")
    os.remove(pb)
    os.symlink(special, pb)
    done = _static_only(path)
    _load_error(done, phrase)
    assert "cannot load saved_model.pb" in done.stderr or "not a regular file" in done.stderr \
        or "more bytes than its size says" in done.stderr, done.stderr


def test_proc_file_is_read_no_further_than_its_size(tmp_path):
    """/proc/self/pagemap says it is 0 bytes long and reads for ever: refused after one byte."""
    from gradaudit.errors import GradauditError
    from gradaudit.safety.budget import read_capped

    if not os.path.exists("/proc/self/status"):
        pytest.skip("no /proc here")
    with pytest.raises(GradauditError, match="more bytes than its size says|cannot read"):
        read_capped("/proc/self/status", "saved_model.pb")


@pytest.mark.slow
def test_deeply_nested_function_calls(small, tmp_path):
    """A chain of 3,000 functions each calling the next: analysed (exit 0) or refused (exit 2), never an
    internal error."""
    path = _copy(small, tmp_path, "deep_calls")
    sm = _proto(path)
    library = sm.meta_graphs[0].graph_def.library
    depth = 3000
    for k in range(depth):
        fn = library.function.add()
        fn.signature.name = f"chain_{k}"
        fn.signature.input_arg.add(name="x", type=1)
        fn.signature.output_arg.add(name="y", type=1)
        node = fn.node_def.add(name="c", input=["x"])
        if k + 1 < depth:
            node.op = "PartitionedCall"
            node.attr["f"].func.name = f"chain_{k + 1}"
            node.attr["Tin"].list.type.append(1)
            node.attr["Tout"].list.type.append(1)
        else:
            node.op = "Identity"
            node.attr["T"].type = 1
        fn.ret["y"] = "c:output:0"
    body = _call_function(sm)
    mul = next(n for n in body.node_def if n.op == "Mul")
    ref = f"{mul.name}:z:0"
    user = next(n for n in body.node_def if ref in n.input)
    deep = body.node_def.add(name="deep", op="PartitionedCall", input=[ref])
    deep.attr["f"].func.name = "chain_0"
    deep.attr["Tin"].list.type.append(1)
    deep.attr["Tout"].list.type.append(1)
    user.input[list(user.input).index(ref)] = "deep:output:0"
    _write(path, sm)
    done = _static_only(path)
    assert done.returncode in (0, 2), done.stderr[-2000:]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_keras_config_declaring_a_huge_input_is_refused(tmp_path):
    """The config's shapes make Keras allocate the variables before it reads the weights: a [None, 3e9] input
    gives Dense a 12 GB kernel in a file of 10 KB."""
    import keras

    ok = str(tmp_path / "ok.keras")
    keras.Sequential([keras.Input(shape=(3,)), keras.layers.Dense(1)]).save(ok)
    with zipfile.ZipFile(ok) as archive:
        members = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    config = json.loads(members["config.json"])

    def widen(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key in ("batch_shape", "batch_input_shape", "input_shape") and isinstance(item, list):
                    item[-1] = 3_000_000_000
                else:
                    widen(item)
        elif isinstance(value, list):
            for item in value:
                widen(item)

    widen(config)
    members["config.json"] = json.dumps(config).encode()
    bomb = str(tmp_path / "bomb.keras")
    with zipfile.ZipFile(bomb, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    refused = _static_only(bomb)
    # the layer's name carries Keras's per-process counter (dense, dense_5): the shape is what is checked
    _load_error(refused, "its config declares variables larger than the file holds (")
    assert "kernel of shape (3000000000, 1)" in refused.stderr
    done = _static_only(ok)
    assert done.returncode == 0, done.stderr[-2000:]


def _variables(tmp_path, index: bytes, data_bytes: int) -> str:
    path = tmp_path / "model"
    (path / "variables").mkdir(parents=True)
    (path / "variables" / "variables.index").write_bytes(index)
    with open(path / "variables" / "variables.data-00000-of-00001", "wb") as f:
        f.truncate(data_bytes)
    return str(path)


@pytest.mark.slow  # a model's numeric checks, seconds
def test_index_with_too_many_entries_is_reported_not_read(tmp_path):
    path = _variables(tmp_path, tensor_bundle_index(MAX_INDEX_ENTRIES + 1), 4 * (MAX_INDEX_ENTRIES + 1))
    problem = variables_problem(path, True)
    assert problem is not None and "variables.index is too large to check" in problem
    assert f"more than {MAX_INDEX_ENTRIES:,} entries" in problem


@pytest.mark.slow  # a model's numeric checks, seconds
def test_index_at_the_entry_cap_is_checked(tmp_path):
    path = _variables(tmp_path, tensor_bundle_index(MAX_INDEX_ENTRIES), 4 * MAX_INDEX_ENTRIES - 1)
    assert variables_problem(path, True) == ("variables/variables.data-00000-of-00001 is truncated: "
                                             f"{4 * MAX_INDEX_ENTRIES - 1:,} bytes, the index needs "
                                             f"{4 * MAX_INDEX_ENTRIES:,}")


def test_index_over_the_byte_cap_is_reported_not_read(tmp_path):
    index = tensor_bundle_index(10)
    path = _variables(tmp_path, index, 40)
    with open(os.path.join(path, "variables", "variables.index"), "r+b") as f:
        f.truncate(MAX_INDEX_BYTES + 1)  # sparse: nothing of it is read
    problem = variables_problem(path, True)
    assert problem is not None and "too large to check" in problem and f"{MAX_INDEX_BYTES + 1:,} bytes" in problem


def test_index_whose_blocks_repeat_is_corrupt(tmp_path):
    """An index block that names the same data block again and again would be read again and again."""
    import struct

    from .hostile import _block, _varint

    data = _block([(b"a", b"")])
    handle = _varint(0) + _varint(len(data) - 5)
    index = _block([(b"k%06d" % i, handle) for i in range(1000)])
    footer = (_varint(0) + _varint(0) + _varint(len(data)) + _varint(len(index) - 5)).ljust(40, b"\0")
    path = _variables(tmp_path, data + index + footer + struct.pack("<Q", 0xDB4775248B80FB57), 0)
    problem = variables_problem(path, True)
    assert problem is not None and "corrupt (its blocks add up to more than the file)" in problem


def _many_sources_model(path: str, sources: int, chain: int) -> str:
    """`sources` float inputs summed, then a chain of `chain` identities: reachability masks of `sources` bits on
    every node of the chain (the red team's 40,000 inputs over 200,000 nodes held 6.8 GB in the parent)."""
    import tensorflow as tf

    spec = [tf.TensorSpec([], tf.float32, name=f"a{i}") for i in range(sources)]

    @tf.function(input_signature=spec, autograph=False)
    def f(*xs):
        h = tf.add_n(list(xs))
        for _ in range(chain):
            h = tf.identity(h)
        return {"y": h}

    module = tf.Module()
    module.f = f
    tf.saved_model.save(module, path, signatures={"serving_default": f})
    return path


@pytest.mark.slow  # a model's numeric checks, seconds
def test_reachability_masks_are_bounded_before_they_are_made(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import gradaudit.graph.dataflow as dataflow
    from gradaudit.cli import main

    path = _many_sources_model(str(tmp_path / "wide"), 400, 3000)
    assert CliRunner().invoke(main, [path, "--static-only"]).exit_code == 0  # within the default bound
    monkeypatch.setattr(dataflow, "MAX_MASK_BYTES", 200_000)
    result = CliRunner().invoke(main, [path, "--static-only"])
    assert result.exit_code == 2 and "reachability masks" in result.output and "400 sources" in result.output
    assert "Traceback" not in result.output
