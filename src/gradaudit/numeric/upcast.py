"""A float64 copy of a SavedModel: the same graph and custom gradients, with float32 (and float16,
bfloat16) made float64.

The rewrite works on the protobuf, so TensorFlow's own loader wires functions, captured tensors and the
saved custom-gradient functions exactly as it does for the original; only the variable values come from
the original checkpoint (cast), because the copy is loaded without one.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from ..flow import STOP_OPS
from .savedmodel import SavedModelInfo

_DT_FLOAT, _DT_DOUBLE, _DT_HALF, _DT_BFLOAT16, _DT_COMPLEX64, _DT_COMPLEX128 = 1, 2, 19, 14, 8, 18
# Each low-precision type and its float64 counterpart: complex64 (a pair of float32) becomes complex128, so
# that an op from a float to a complex type (Complex, RFFT) or back (Angle, ComplexAbs, IRFFT) stays valid.
_WIDER = {_DT_FLOAT: _DT_DOUBLE, _DT_HALF: _DT_DOUBLE, _DT_BFLOAT16: _DT_DOUBLE, _DT_COMPLEX64: _DT_COMPLEX128}
_LOW = frozenset(_WIDER)
# Ops whose meaning depends on the width of the float type (they reinterpret bytes).
_WIDTH_DEPENDENT = frozenset({"Bitcast", "DecodeRaw", "DecodePaddedRaw", "ParseTensor"})


def _upcast_tensor(tp) -> None:
    import tensorflow as tf

    if tp.dtype in _LOW:
        wide = np.complex128 if tp.dtype == _DT_COMPLEX64 else np.float64
        tp.CopyFrom(tf.make_tensor_proto(tf.make_ndarray(tp).astype(wide)))


def _add_default_type_attrs(node) -> None:
    # Savers strip attrs equal to their default (MaxPool's T=float): make them explicit before rewriting.
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return
    for attr in op_def.attr:
        if attr.name in node.attr or not attr.HasField("default_value"):
            continue
        if attr.type == "type" and attr.default_value.type in _LOW:
            node.attr[attr.name].type = _WIDER[attr.default_value.type]
        elif attr.type == "list(type)" and _LOW & set(attr.default_value.list.type):
            node.attr[attr.name].CopyFrom(attr.default_value)


def _rewrite(msg) -> None:
    """In place: every DataType field that is a low float becomes DT_DOUBLE, with constants converted."""
    for field, value in msg.ListFields():
        if field.type == field.TYPE_ENUM and field.enum_type.full_name == "tensorflow.DataType":
            if field.is_repeated:
                for i, v in enumerate(value):
                    if v in _LOW:
                        value[i] = _WIDER[v]
            elif value in _LOW:
                setattr(msg, field.name, _WIDER[value])
        elif field.type == field.TYPE_MESSAGE:
            name = field.message_type.full_name
            items = value if field.is_repeated else [value]
            if field.is_repeated and field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                if value_field.type != value_field.TYPE_MESSAGE:
                    continue
                items = [value[k] for k in value]
                name = value_field.message_type.full_name
            for item in items:
                if name == "tensorflow.TensorProto":
                    _upcast_tensor(item)
                    continue
                if name == "tensorflow.NodeDef":
                    _add_default_type_attrs(item)
                _rewrite(item)


def _kernel_accepts(op_type: str, attrs: dict[str, tuple[int, ...]], cache: dict) -> bool:
    from tensorflow.python.framework import kernels

    key = (op_type, tuple(sorted(attrs.items())))
    if key not in cache:
        cpu = [k for k in kernels.get_registered_kernels_for_op(op_type).kernel if k.device_type == "CPU"]
        if not cpu:  # ops the runtime handles itself (_Arg, function calls, ...)
            cache[key] = True
        else:
            cache[key] = any(
                all(set(attrs.get(c.name, ())) <= set(c.allowed_values.list.type)
                    for c in k.constraint if c.name in attrs)
                for k in cpu)
    return cache[key]


def float64_blockers(info: SavedModelInfo) -> list[str]:
    """Why the float64 copy could not run (empty when it can): fixed-float32 ops, missing float64 kernels."""
    library = info.meta_graph.graph_def.library
    function_names = {f.signature.name for f in library.function}
    blockers: dict[str, str] = {}
    cache: dict = {}
    for fdef in library.function:
        for node in fdef.node_def:
            if node.op in function_names or node.op in blockers:
                continue
            blocker = _blocker(node, cache)
            if blocker is not None:
                blockers[node.op] = blocker
    return sorted(blockers.values())


def _blocker(node, cache: dict) -> str | None:
    """Why the op of `node` cannot run in the float64 copy, or None when it can."""
    from tensorflow.python.framework import op_def_registry

    if node.op in _WIDTH_DEPENDENT:
        return f"{node.op} reinterprets the bytes of a float"
    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return f"{node.op} is not a TensorFlow op known here"
    if any(arg.type in _LOW for arg in (*op_def.input_arg, *op_def.output_arg)):
        return f"{node.op} only accepts float32"
    doubled: dict[str, tuple[int, ...]] = {}
    for attr in op_def.attr:
        if attr.type not in ("type", "list(type)"):
            continue
        types = _attr_types(node, attr)
        if not _LOW & set(types):
            continue
        types = tuple(_WIDER.get(t, t) for t in types)
        allowed = set(attr.allowed_values.list.type)
        if allowed and not set(types) <= allowed:
            return f"{node.op} has no float64 version"
        doubled[attr.name] = types
    if doubled and not _kernel_accepts(node.op, doubled, cache):
        return f"{node.op} has no float64 kernel"
    return None


def _attr_types(node, attr) -> tuple[int, ...]:
    """The dtypes a type or list(type) attr of the op takes at `node` (its default when the node does not set it)."""
    value = node.attr.get(attr.name)
    if attr.type == "type":
        return (value.type,) if value is not None else (attr.default_value.type,)
    return tuple(value.list.type) if value is not None else tuple(attr.default_value.list.type)


def _without_cuts(meta) -> None:
    """In place: every StopGradient and PreventGradient becomes an Identity, so that the copy's gradient is the
    derivative of its forward (custom gradients stay as they are)."""
    nodes = list(meta.graph_def.node) + [n for f in meta.graph_def.library.function for n in f.node_def]
    for node in nodes:
        if node.op in STOP_OPS:
            node.op = "Identity"
            if "message" in node.attr:
                del node.attr["message"]


def write_float64_copy(info: SavedModelInfo, destination: str, without_cuts: bool = False) -> None:
    """Write saved_model.pb (and assets) of the float64 copy; it has no checkpoint: load it with
    `experimental_skip_checkpoint=True` and fill the variables with `float64_values`. `without_cuts`: with
    every stop_gradient made an identity (`_without_cuts`)."""
    from tensorflow.core.protobuf import saved_model_pb2

    copy = saved_model_pb2.SavedModel(saved_model_schema_version=info.proto.saved_model_schema_version)
    meta = copy.meta_graphs.add()
    meta.CopyFrom(info.meta_graph)
    _rewrite(meta)
    if without_cuts:
        _without_cuts(meta)
    os.makedirs(destination, exist_ok=True)
    with open(os.path.join(destination, "saved_model.pb"), "wb") as fh:
        fh.write(copy.SerializeToString())
    assets = os.path.join(info.path, "assets")
    if os.path.isdir(assets):
        # The copy reads the model's own assets in place: no byte of them is copied, so an asset that is a
        # link to a device (/dev/zero) cannot fill the temporary folder (a copy that followed links did).
        try:
            os.symlink(os.path.abspath(assets), os.path.join(destination, "assets"), target_is_directory=True)
        except OSError:
            shutil.copytree(assets, os.path.join(destination, "assets"), symlinks=True, dirs_exist_ok=True)
