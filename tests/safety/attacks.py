"""Hostile SavedModels for the safety gate: each writes or reads a canary file when TensorFlow loads, calls
or differentiates it. build(name, folder, canary) saves one; ATTACKS says what the gate must name."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import tensorflow as tf

SPEC = tf.TensorSpec([None], tf.float32, name="x")
SAVE = tf.saved_model.SaveOptions(experimental_custom_gradients=True)


@dataclass(frozen=True)
class Attack:
    op_type: str  # the op the finding names
    where: str  # a part of the message saying where it runs from
    reads: bool  # the canary is a secret that must not be read (else a file that must not be created)
    code: str = "GA401"


def _save(module, path: str, fn=None) -> str:
    tf.saved_model.save(module, path, signatures={"serving_default": fn or module.__call__}, options=SAVE)
    return path


def _with_call(call, **attrs):
    cls = type("Hostile", (tf.Module,), {"__call__": tf.function(call, input_signature=[SPEC], autograph=False)})
    module = cls()
    for key, value in attrs.items():
        setattr(module, key, value)
    return module


def custom_gradient_writes(path: str, canary: str) -> str:
    @tf.custom_gradient
    def double(x):
        def grad(dy):
            tf.io.write_file(canary, "gradient ran")
            return dy * 2.0

        return x * 2.0, grad

    return _save(_with_call(lambda self, x: {"y": double(x) * self.w}, w=tf.Variable(1.0, name="w")), path)


def _dataset_model(path: str, make) -> str:
    def call(self, x):
        ds = make(tf.data.Dataset.from_tensor_slices(x))
        return {"y": x * self.w + ds.reduce(0.0, lambda a, b: a + b)}

    return _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)


def dataset_cache(path: str, canary: str) -> str:
    return _dataset_model(path, lambda ds: ds.cache(canary))


def dataset_snapshot(path: str, canary: str) -> str:
    return _dataset_model(path, lambda ds: ds.snapshot(canary))


def tfrecord_writer(path: str, canary: str) -> str:
    def call(self, x):
        strings = tf.data.Dataset.from_tensor_slices(tf.strings.as_string(x))
        tf.data.experimental.TFRecordWriter(canary).write(strings)
        return {"y": x * self.w}

    return _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)


class _Resource(tf.saved_model.experimental.TrackableResource):
    def __init__(self, canary: str, where: str):
        self.canary, self.where = canary, where
        super().__init__()

    def _create_resource(self):
        if self.where == "create":
            tf.io.write_file(self.canary, "creator ran")
        return tf.raw_ops.VarHandleOp(dtype=tf.float32, shape=[], shared_name=f"hostile_{self.where}")

    def _initialize(self):
        if self.where == "initialize":
            tf.io.write_file(self.canary, "initializer ran")
        return tf.raw_ops.AssignVariableOp(resource=self.resource_handle, value=1.0)

    def _destroy_resource(self):
        if self.where == "destroy":
            tf.io.write_file(self.canary, "destroyer ran")
        return tf.raw_ops.DestroyResourceOp(resource=self.resource_handle, ignore_lookup_error=True)


def _resource_model(path: str, canary: str, where: str) -> str:
    res = _Resource(canary, where)

    def call(self, x):
        return {"y": x * tf.raw_ops.ReadVariableOp(resource=self.res.resource_handle, dtype=tf.float32)}

    return _save(_with_call(call, res=res), path)


def destroyer_writes(path: str, canary: str) -> str:
    return _resource_model(path, canary, "destroy")


def initializer_writes(path: str, canary: str) -> str:
    return _resource_model(path, canary, "initialize")


def creator_writes(path: str, canary: str) -> str:
    return _resource_model(path, canary, "create")


def dataset_function_writes(path: str, canary: str) -> str:
    """A WriteFile inside a dataset's map function (a function attribute of MapDataset)."""
    def step(v):
        with tf.control_dependencies([tf.io.write_file(canary, "map ran")]):
            return tf.identity(v)

    return _dataset_model(path, lambda ds: ds.map(step))


def _tf1_model(path: str, canary: str, where: str) -> str:
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        w = tf.compat.v1.get_variable("w", initializer=2.0, use_resource=True)
        write = tf.io.write_file(canary, "tf1 init ran")
        if where == "local_variable":  # the TF2 loader runs local variables' initializers (no main op here)
            with tf.control_dependencies([write]):
                start = tf.constant(0.0, name="start")
            tf.compat.v1.get_variable("count", initializer=start, use_resource=True, trainable=False,
                                      collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES])
        if where == "signature":
            with tf.control_dependencies([write]):  # only a control input of the output
                y = tf.identity(x * w, name="y")
        else:
            y = tf.identity(x * w, name="y")
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(path)
            sig = tf.compat.v1.saved_model.predict_signature_def({"x": x}, {"y": y})
            if where == "table_initializer":
                tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.TABLE_INITIALIZERS, write)
            kwargs = {"main_op": write} if where == "main_op" else {}
            builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": sig},
                                                 **kwargs)
            builder.save()
    return path


def tf1_main_op_writes(path: str, canary: str) -> str:
    return _tf1_model(path, canary, "main_op")


def tf1_table_initializer_writes(path: str, canary: str) -> str:
    return _tf1_model(path, canary, "table_initializer")


def tf1_control_dependency_writes(path: str, canary: str) -> str:
    return _tf1_model(path, canary, "signature")


def tf1_local_variable_writes(path: str, canary: str) -> str:
    return _tf1_model(path, canary, "local_variable")


INTERFACE = "gradaudit_double"


def implements_pair(path: str, canary: str | None) -> str:
    """Two functions implementing one interface (`api_implements`): the signature calls the one preferring a
    GPU; on a CPU, TensorFlow's implementation selector swaps in its sibling preferring the CPU, which nothing
    calls and which writes `canary` (None: a pure sibling, as in Keras's cuDNN/standard pairs)."""
    def attrs(device: str) -> dict:
        return {"api_implements": INTERFACE, "api_preferred_device": device}

    @tf.function(input_signature=[SPEC], autograph=False, experimental_attributes=attrs("GPU"))
    def called(x):
        return x * 2.0

    @tf.function(input_signature=[SPEC], autograph=False, experimental_attributes=attrs("CPU"))
    def sibling(x):
        if canary is not None:
            tf.io.write_file(canary, "sibling ran")
        return x + x

    # the sibling is saved as a method of the module: in the function library, called by nothing
    return _save(_with_call(lambda self, x: {"y": called(x) * self.w}, w=tf.Variable(1.0, name="w"),
                            called=called, sibling=sibling), path)


def implements_sibling_writes(path: str, canary: str) -> str:
    return implements_pair(path, canary)


def candidate_sampler_reads(path: str, canary: str) -> str:
    def call(self, x):
        classes = tf.zeros([1, 1], tf.int64)
        sampled, _, _ = tf.random.fixed_unigram_candidate_sampler(classes, 1, 2, True, 3, vocab_file=canary)
        return {"y": x * self.w + tf.cast(tf.reduce_sum(sampled), tf.float32)}

    return _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)


def decode_proto_reads(path: str, canary: str) -> str:
    def call(self, x):
        _, values = tf.io.decode_proto(tf.constant([b""]), "gradaudit.Canary", ["f"], [tf.float32],
                                       descriptor_source=canary)
        return {"y": x * self.w + tf.reduce_sum(values[0])}

    return _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)


def _bound_by_caller(path: str, op_type: str, attr: str, value: str) -> str:
    """Edit the saved model so that `op_type`'s `attr`, inside the function that holds it, is a placeholder the
    calling node fills in: the call becomes a direct call of that function (node op = its name) whose attribute holds
    `value` (what the red team found: the gate read the placeholder as an empty string)."""
    from tensorflow.core.framework import attr_value_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    library = sm.meta_graphs[0].graph_def.library
    inner = set()
    for fd in library.function:
        for n in fd.node_def:
            if n.op == op_type:
                n.attr[attr].CopyFrom(attr_value_pb2.AttrValue(placeholder="bound"))
                a = fd.signature.attr.add()
                a.name, a.type = "bound", "string"
                inner.add(fd.signature.name)
    outputs = {fd.signature.name: fd.signature.output_arg[0].name for fd in library.function}
    for fd in library.function:
        for n in fd.node_def:
            if n.op not in ("StatefulPartitionedCall", "PartitionedCall") or n.attr["f"].func.name not in inner:
                continue
            called = n.attr["f"].func.name
            for key in ("f", "config", "config_proto", "executor_type", "Tin", "Tout", "_collective_manager_ids",
                        "_read_only_resource_inputs"):
                if key in n.attr:
                    del n.attr[key]
            n.op = called
            n.attr["bound"].CopyFrom(attr_value_pb2.AttrValue(s=value.encode()))
            for other in fd.node_def:
                other.input[:] = [i.replace(f"{n.name}:output:", f"{n.name}:{outputs[called]}:") for i in other.input]
            for k, v in fd.ret.items():
                fd.ret[k] = v.replace(f"{n.name}:output:", f"{n.name}:{outputs[called]}:")
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    return path


def print_stream_bound_by_caller(path: str, canary: str) -> str:
    @tf.function(autograph=False)
    def inner(x):
        tf.print(x)
        return x * 2.0

    def call(self, x):
        return {"y": inner(x) * self.w}

    _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)
    return _bound_by_caller(path, "PrintV2", "output_stream", f"file://{canary}")


def sampler_vocab_bound_by_caller(path: str, canary: str) -> str:
    @tf.function(autograph=False)
    def inner(x):
        classes = tf.zeros([1, 1], tf.int64)
        sampled, _, _ = tf.random.fixed_unigram_candidate_sampler(classes, 1, 2, True, 3, unigrams=[1.0, 1.0, 1.0])
        return x + tf.cast(tf.reduce_sum(sampled), tf.float32)

    def call(self, x):
        return {"y": inner(x) * self.w}

    _save(_with_call(call, w=tf.Variable(1.0, name="w")), path)
    return _bound_by_caller(path, "FixedUnigramCandidateSampler", "vocab_file", canary)


def computed_table_path_reads(path: str, canary: str) -> str:
    """A model with a real asset, whose lookup table's file name is computed from it: the asset exemption
    must not cover it."""
    vocab = os.path.join(os.path.dirname(path), "vocab_for_computed.txt")
    with open(vocab, "w") as f:
        f.write("a\nb\n")
    asset = tf.saved_model.Asset(vocab)
    relative = os.path.relpath(canary, os.path.join(path, "assets"))

    def call(self, x):
        table = tf.raw_ops.HashTableV2(key_dtype=tf.string, value_dtype=tf.int64)
        name = tf.strings.join([self.asset.asset_path, "/../", relative])
        init = tf.raw_ops.InitializeTableFromTextFileV2(table_handle=table, filename=name, key_index=-2,
                                                        value_index=-1)
        with tf.control_dependencies([init]):
            size = tf.raw_ops.LookupTableSizeV2(table_handle=table)
        return {"y": x * self.w + tf.cast(size, tf.float32)}

    return _save(_with_call(call, w=tf.Variable(1.0, name="w"), asset=asset), path)


def _lookup_model(path: str) -> str:
    vocab = os.path.join(os.path.dirname(path), os.path.basename(path) + "_vocab.txt")
    with open(vocab, "w") as f:
        f.write("a\nb\n")
    init = tf.lookup.TextFileInitializer(vocab, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64,
                                         tf.lookup.TextFileIndex.LINE_NUMBER)

    def call(self, x):
        return {"y": x * self.w + tf.cast(self.table.lookup(tf.constant(["a"]))[0], tf.float32)}

    path = _save(_with_call(call, w=tf.Variable(1.0, name="w"), table=tf.lookup.StaticHashTable(init, -1)), path)
    os.remove(vocab)
    return path


def _rename_asset(path: str, name: str) -> None:
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    for asset in sm.meta_graphs[0].asset_file_def:
        asset.filename = name
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())


def asset_absolute(path: str, canary: str) -> str:
    _rename_asset(_lookup_model(path), canary)
    return path


def asset_dotdot(path: str, canary: str) -> str:
    _rename_asset(_lookup_model(path), os.path.relpath(canary, os.path.join(path, "assets")))
    return path


def asset_symlink(path: str, canary: str) -> str:
    _lookup_model(path)
    for name in os.listdir(os.path.join(path, "assets")):
        os.remove(os.path.join(path, "assets", name))
        os.symlink(canary, os.path.join(path, "assets", name))
    return path


ATTACKS: dict[str, tuple] = {
    "custom_gradient_writes": (custom_gradient_writes,
                               Attack("WriteFile", "as the saved custom gradient of IdentityN", False)),
    "dataset_cache": (dataset_cache, Attack("CacheDatasetV2", "signature", False)),
    "dataset_snapshot": (dataset_snapshot, Attack("SnapshotDatasetV2", "signature", False)),
    "tfrecord_writer": (tfrecord_writer, Attack("DatasetToTFRecord", "signature", False)),
    "destroyer_writes": (destroyer_writes, Attack("WriteFile", "_destroy_resource", False)),
    "initializer_writes": (initializer_writes, Attack("WriteFile", "initializer", False)),
    "tf1_main_op_writes": (tf1_main_op_writes, Attack("WriteFile", "saved_model_main_op", False)),
    "tf1_table_initializer_writes": (tf1_table_initializer_writes, Attack("WriteFile", "table_initializer", False)),
    "creator_writes": (creator_writes, Attack("WriteFile", "_create_resource", False)),
    "dataset_function_writes": (dataset_function_writes, Attack("WriteFile", "Dataset_map", False)),
    "tf1_control_dependency_writes": (tf1_control_dependency_writes, Attack("WriteFile", "signature", False)),
    "tf1_local_variable_writes": (tf1_local_variable_writes,
                                  Attack("WriteFile", "the initializer of local variable 'count:0'", False)),
    "implements_sibling_writes": (implements_sibling_writes,
                                  Attack("WriteFile", "swapped in by TensorFlow's implementation selector", False)),
    "candidate_sampler_reads": (candidate_sampler_reads, Attack("FixedUnigramCandidateSampler", "signature", True)),
    "decode_proto_reads": (decode_proto_reads, Attack("DecodeProtoV2", "signature", True)),
    "print_stream_bound_by_caller": (print_stream_bound_by_caller, Attack("PrintV2", "signature", False)),
    "sampler_vocab_bound_by_caller": (sampler_vocab_bound_by_caller,
                                      Attack("FixedUnigramCandidateSampler", "signature", True)),
    "computed_table_path_reads": (computed_table_path_reads,
                                  Attack("InitializeTableFromTextFileV2", "signature", True)),
    "asset_absolute": (asset_absolute, Attack("asset", "outside", True, "GA403")),
    "asset_dotdot": (asset_dotdot, Attack("asset", "outside", True, "GA403")),
    "asset_symlink": (asset_symlink, Attack("asset", "symlink", True, "GA403")),
}


def build(name: str, folder: str, canary: str) -> str:
    path = os.path.join(folder, name)
    shutil.rmtree(path, ignore_errors=True)
    return ATTACKS[name][0](path, canary)


def tf1_lookup_with_asset(path: str, vocab: str) -> str:
    """A TF1 model whose lookup table reads its own asset (the builder's saved_model_assets collection)."""
    with tf.Graph().as_default() as graph:
        keys = tf.compat.v1.placeholder(tf.string, [None], name="s")
        x = tf.compat.v1.placeholder(tf.float32, [None], name="x")
        w = tf.compat.v1.get_variable("w", initializer=2.0, use_resource=True)
        asset = tf.constant(vocab, name="asset_path")
        tf.compat.v1.add_to_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS, asset)
        table = tf.lookup.StaticHashTable(tf.lookup.TextFileInitializer(
            asset, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE, tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), -1)
        y = x * w * tf.cast(tf.reduce_sum(table.lookup(keys)), tf.float32)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(tf.compat.v1.tables_initializer())
            builder = tf.compat.v1.saved_model.Builder(path)
            sig = tf.compat.v1.saved_model.predict_signature_def({"s": keys, "x": x}, {"y": y})
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={"serving_default": sig}, main_op=tf.compat.v1.tables_initializer(),
                assets_collection=tf.compat.v1.get_collection(tf.compat.v1.GraphKeys.ASSET_FILEPATHS))
            builder.save()
    return path


def _inject_write(fdef, canary: str) -> None:
    """Append `WriteFile(canary)` to a FunctionDef, as a control output so that it runs with the function."""
    with tf.Graph().as_default() as graph:
        tf.io.write_file(tf.constant(canary, name="canary_name"), tf.constant("ran", name="canary_text"),
                         name="canary_write")
    for node in graph.as_graph_def().node:
        if node.name == "canary_write":
            node.input[:] = ["canary_name:output:0", "canary_text:output:0"]
        fdef.node_def.append(node)
    fdef.signature.control_output.append("canary_write")
    fdef.control_ret["canary_write"] = "canary_write"


def _tampered(path: str, canary: str, pick) -> str:
    from tensorflow.core.protobuf import saved_model_pb2

    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    meta = sm.meta_graphs[0]
    name = pick(meta)
    _inject_write(next(f for f in meta.graph_def.library.function if f.signature.name == name), canary)
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    return path


def _table_model(path: str) -> str:
    def call(self, x):
        return {"y": x * self.w + tf.cast(self.table.lookup(tf.constant(["a"]))[0], tf.float32)}

    table = tf.lookup.experimental.MutableHashTable(tf.string, tf.int64, -1)
    return _save(_with_call(call, w=tf.Variable(1.0, name="w"), table=table), path)


def restore_function_writes(path: str, canary: str) -> str:
    """A saveable object's restore function (a MutableHashTable's) edited to write a file."""
    def restore_fn(meta):
        og = meta.object_graph_def
        node = next(n for n in og.nodes if n.saveable_objects)
        fn_node = og.nodes[next(iter(node.saveable_objects.values())).restore_function]
        return fn_node.bare_concrete_function.concrete_function_name

    return _tampered(_table_model(path), canary, restore_fn)


def saver_restore_writes(path: str, canary: str) -> str:
    """The saver's own restore function edited to write a file beside restoring the variables."""
    def traced_restore(meta):
        return next(f.signature.name for f in meta.graph_def.library.function
                    if f.signature.name.startswith("__inference__traced_restore"))

    return _tampered(_table_model(path), canary, traced_restore)


ATTACKS["restore_function_writes"] = (restore_function_writes, Attack("WriteFile", "restore function", False))
ATTACKS["saver_restore_writes"] = (saver_restore_writes, Attack("WriteFile", "saver's restore", False))
