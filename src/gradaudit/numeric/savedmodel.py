"""What the numeric checks read from saved_model.pb itself: the signature's function, which variable each
captured argument is, the checkpoint key of each variable, and the op types the signature can run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..model import OpRef


@dataclass(frozen=True)
class BoundVariable:
    position: int  # index among the signature function's captured inputs
    node_id: int  # object-graph node id, shared with the checkpoint's object graph
    name: str  # SavedVariable name, e.g. "dense/kernel"
    trainable: bool


@dataclass
class SavedModelInfo:
    path: str
    proto: Any  # saved_model_pb2.SavedModel
    meta_graph: Any  # the MetaGraphDef chosen by tags
    signature: str
    function: str | None  # concrete function behind the signature, None for TF1 models
    bound: list[BoundVariable | None] = field(default_factory=list)  # per captured input
    op_types: frozenset[str] = frozenset()  # ops the signature runs, forward and custom gradients
    custom_gradients: list[OpRef] = field(default_factory=list)  # ops with a saved custom gradient

    def variable_names(self) -> dict[int, str]:
        return {b.position: b.name for b in self.bound if b is not None}


def _signature_function(meta_graph, signature: str) -> tuple[str | None, list[int]]:
    og = meta_graph.object_graph_def
    if not og.nodes:
        return None, []
    signatures = [c.node_id for c in og.nodes[0].children if c.local_name == "signatures"]
    if not signatures:
        return None, []
    entry = [c.node_id for c in og.nodes[signatures[0]].children if c.local_name == signature]
    if not entry:
        return None, []
    node = og.nodes[entry[0]]
    if node.WhichOneof("kind") != "bare_concrete_function":
        return None, []
    name = node.bare_concrete_function.concrete_function_name
    return name, list(og.concrete_functions[name].bound_inputs)


def _scan(meta_graph, root: str | None) -> tuple[frozenset[str], list[OpRef]]:
    """Op types the signature function can run (following calls, loop bodies, branches and saved
    custom-gradient functions), and the ops whose gradient is a saved custom gradient."""
    library = meta_graph.graph_def.library
    functions = {f.signature.name: f for f in library.function}
    gradients = {g.registered_op_type: g.gradient_func for g in library.registered_gradients}
    todo = [root] if root is not None else list(functions)
    seen: set[str] = set()
    ops: set[str] = set() if root is not None else {n.op for n in meta_graph.graph_def.node}
    custom: list[OpRef] = []
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in functions[name].node_def:
            ops.add(node.op)
            todo.append(node.op)
            for key, attr in node.attr.items():
                if attr.HasField("func"):
                    todo.append(attr.func.name)
                elif attr.list.func:
                    todo.extend(f.name for f in attr.list.func)
                elif key == "_gradient_op_type" and node.op not in ("PartitionedCall", "StatefulPartitionedCall"):
                    custom.append(OpRef(node.op, node.name, name))
                    todo.append(gradients.get(attr.s.decode(), ""))
    return frozenset(op for op in ops if op not in functions), custom


def read_saved_model(path: str, tags: tuple[str, ...], signature: str, proto: Any = None) -> SavedModelInfo:
    """`proto`: the SavedModel the static pass already parsed (it is parsed here otherwise)."""
    from ..targets.saved_model import SavedModelFile

    # The same reading and meta-graph choice as the static pass (pb or pbtxt, tags as a set).
    proto = proto if proto is not None else SavedModelFile.parse(path)
    meta_graph = SavedModelFile.choose_meta_graph(proto, tags) if tags else proto.meta_graphs[0]
    function, bound_ids = _signature_function(meta_graph, signature)
    from ..targets.saved_model import variable_display_names

    nodes = meta_graph.object_graph_def.nodes
    names = variable_display_names(meta_graph.object_graph_def, bound_ids)
    bound: list[BoundVariable | None] = []
    for position, node_id in enumerate(bound_ids):
        node = nodes[node_id]
        if node.WhichOneof("kind") == "variable":
            bound.append(BoundVariable(position, node_id, names[node_id], node.variable.trainable))
        else:
            bound.append(None)
    op_types, custom = _scan(meta_graph, function)
    return SavedModelInfo(path=path, proto=proto, meta_graph=meta_graph, signature=signature,
                          function=function, bound=bound, op_types=op_types, custom_gradients=custom)


def checkpoint_values(info: SavedModelInfo) -> dict[int, Any]:
    """Values of the signature's bound variables read from the model's checkpoint, by node id."""
    import tensorflow as tf
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    reader = tf.train.load_checkpoint(os.path.join(info.path, "variables", "variables"))
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    values = {}
    for b in info.bound:
        if b is None:
            continue
        keys = [a.checkpoint_key for a in graph.nodes[b.node_id].attributes if a.name == "VARIABLE_VALUE"]
        if not keys:
            raise KeyError(f"variable {b.name} has no value in the checkpoint")
        values[b.node_id] = reader.get_tensor(keys[0])
    return values


def declared_sources(path: str, tags: tuple[str, ...] = (), signature: str = "serving_default"):
    """Sources and outputs as the signature declares them: every input (float ones differentiable) and
    every trainable variable it captures; every output. For running the numeric checks without the
    static pass (benchmarks, tests); `gradaudit.audit` passes the static pass's own lists."""
    import tensorflow as tf

    from ..model import Output, Source

    info = read_saved_model(path, tags, signature)
    sig = info.meta_graph.signature_def[signature]

    def shape(t):
        return None if t.tensor_shape.unknown_rank else tuple(
            None if d.size < 0 else d.size for d in t.tensor_shape.dim)

    sources = [Source(k, "input", tf.as_dtype(t.dtype).name, shape(t), tf.as_dtype(t.dtype).is_floating)
               for k, t in sorted(sig.inputs.items())]
    nodes = info.meta_graph.object_graph_def.nodes
    for b in info.bound:
        if b is not None and b.trainable:
            var = nodes[b.node_id].variable
            sources.append(Source(b.name, "variable", tf.as_dtype(var.dtype).name,
                                  tuple(d.size for d in var.shape.dim), True))
    outputs = [Output(k, tf.as_dtype(t.dtype).name, shape(t)) for k, t in sorted(sig.outputs.items())]
    return sources, outputs
