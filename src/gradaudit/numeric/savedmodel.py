"""What the numeric checks read from saved_model.pb itself: the signature's function, which variable each
captured argument is, the checkpoint key of each variable, and the op types the signature can run."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..model import OpRef

if TYPE_CHECKING:
    from ..targets.saved_model import SavedModelFile


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


def saved_model_info(model: SavedModelFile, signature: str, path: str | None = None) -> SavedModelInfo:
    """What the checks need of one signature, from the static pass's parse of the model (never read again).
    `path`: where the model is loaded from, when not the parse's own path (the child runs in another folder and
    is given the absolute one)."""
    function, bound_ids = model.concrete_signature(signature)
    nodes = model.object_graph.nodes
    names = model.variable_names()  # the static pass's names of the same variables
    bound: list[BoundVariable | None] = []
    for position, node_id in enumerate(bound_ids):
        node = nodes[node_id]
        if node.WhichOneof("kind") == "variable":
            bound.append(BoundVariable(position, node_id, names[node_id], node.variable.trainable))
        else:
            bound.append(None)
    op_types, custom = model.runnable_ops(function)
    return SavedModelInfo(path=path or model.path, proto=model.proto, meta_graph=model.meta_graph, signature=signature,
                          function=function, bound=bound, op_types=op_types, custom_gradients=custom)


def read_saved_model(path: str, tags: tuple[str, ...], signature: str) -> SavedModelInfo:
    """saved_model_info of a model parsed here, for running the checks without the static pass (benchmarks,
    tests): the same parse and meta-graph choice as the static pass's."""
    from ..targets.saved_model import SavedModelFile

    return saved_model_info(SavedModelFile(path, tags or ("serve",)), signature)


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
