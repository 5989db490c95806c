"""A float64 copy of a SavedModel: the same graph and custom gradients, with float32 (and float16,
bfloat16) made float64.

The rewrite works on the protobuf, so TensorFlow's own loader wires functions, captured tensors and the
saved custom-gradient functions exactly as it does for the original; only the variable values come from
the original checkpoint (cast), because the copy is loaded without one.

Fused batch norms (`FusedBatchNorm`, V2, V3: tf-keras' BatchNormalization and LayerNormalization) have float32
kernels only; in the copy each becomes the float64 primitives it computes (`_expand_batch_norm`), with TensorFlow's
own gradients of those primitives: the derivative of the same forward, which the fused op's registered gradient
also is, for the same inputs (none to its mean and variance inputs, none back from its statistics outputs).
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
# Fused batch norms, rewritten into float64 primitives in the copy (their kernels are float32 only), by data format:
# the rank of x and the channel axis.
_BATCH_NORMS = frozenset({"FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3"})
_LAYOUTS = {"NHWC": (4, 3), "NCHW": (4, 1), "NDHWC": (5, 4), "NCDHW": (5, 1)}
_DT_INT32 = 3


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

    if node.op == "Bitcast" and _narrowed(node) is not None:
        return None  # the copy casts its float input back to the saved dtype first (_narrow_bitcasts)
    if node.op in _WIDTH_DEPENDENT:
        return f"{node.op} reinterprets the bytes of a float"
    if node.op in _BATCH_NORMS and _batch_norm_attrs(node)["data_format"] in _LAYOUTS:
        return None  # the copy computes it with float64 primitives (_expand_batch_norm)
    op_def = op_def_registry.get(node.op)
    if op_def is None:
        return f"{node.op} is not a TensorFlow op known here"
    fixed = _fixed_to_float32(node.op, op_def)
    if fixed is not None:
        return fixed
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


def _fixed_to_float32(op: str, op_def) -> str | None:
    """What of the op is fixed to float32 (its arguments of a float32 type, not a type attr), or None: CropAndResize's
    image may be float64, its boxes and crops not."""
    fixed_in = [a.name for a in op_def.input_arg if a.type in _LOW]
    fixed_out = [a.name for a in op_def.output_arg if a.type in _LOW]
    if not fixed_in and not fixed_out:
        return None
    said = ([f"takes {' and '.join(fixed_in)}"] if fixed_in else []) + (
        [f"returns {' and '.join(fixed_out)}"] if fixed_out else [])
    return f"{op} {' and '.join(said)} in float32 only"


def _attr_types(node, attr) -> tuple[int, ...]:
    """The dtypes a type or list(type) attr of the op takes at `node` (its default when the node does not set it)."""
    value = node.attr.get(attr.name)
    if attr.type == "type":
        return (value.type,) if value is not None else (attr.default_value.type,)
    return tuple(value.list.type) if value is not None else tuple(attr.default_value.list.type)


def _without_cuts(meta, behind: frozenset[tuple[str, str]]) -> None:
    """In place: every StopGradient and PreventGradient becomes an Identity, so that the copy's gradient is the
    derivative of its forward. Custom gradients stay as they are, except those `behind` the cuts ((function, node)
    of the ones the model never runs: TensorFlow differentiates their forward instead, as the finite differences
    see it), which would otherwise be run by this copy alone."""
    nodes = [("", n) for n in meta.graph_def.node]
    nodes += [(f.signature.name, n) for f in meta.graph_def.library.function for n in f.node_def]
    for function, node in nodes:
        if node.op in STOP_OPS:
            node.op = "Identity"
            if "message" in node.attr:
                del node.attr["message"]
        elif (function, node.name) in behind and "_gradient_op_type" in node.attr:
            del node.attr["_gradient_op_type"]


def write_float64_copy(info: SavedModelInfo, destination: str, without_cuts: bool = False,
                       behind: frozenset[tuple[str, str]] = frozenset()) -> None:
    """Write saved_model.pb (and assets) of the float64 copy; it has no checkpoint: load it with
    `experimental_skip_checkpoint=True` and fill the variables with `float64_values`. `without_cuts`: with
    every stop_gradient made an identity, and the custom gradients `behind` them differentiated as their forward
    (`_without_cuts`)."""
    from tensorflow.core.protobuf import saved_model_pb2

    copy = saved_model_pb2.SavedModel(saved_model_schema_version=info.proto.saved_model_schema_version)
    meta = copy.meta_graphs.add()
    meta.CopyFrom(info.meta_graph)
    narrowed = {(f.signature.name, n.name): _narrowed(n) for f in meta.graph_def.library.function
                for n in f.node_def if n.op == "Bitcast" and _narrowed(n) is not None}
    _rewrite(meta)
    for fdef in meta.graph_def.library.function:
        _replace_batch_norms(fdef)
        _narrow_bitcasts(fdef, narrowed)
    if without_cuts:
        _without_cuts(meta, behind)
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


def _narrowed(node) -> int | None:
    """The saved float dtype of a Bitcast's input that the float64 copy can cast back to before it (a float turned
    into an integer's bits: Keras 3's argmax of a softmax, an int path), None when the copy cannot keep its meaning
    (a result that is a float itself, or a complex input)."""
    src, dst = node.attr["T"].type, node.attr["type"].type
    if dst in _LOW or src in (_DT_COMPLEX64, _DT_COMPLEX128):
        return None
    return src if src in _LOW else None


def _narrow_bitcasts(fdef, narrowed: dict[tuple[str, str], int | None]) -> None:
    """In place: each Bitcast of `narrowed` reads its float input cast back to its saved dtype, so that the bits it
    reinterprets are the saved model's (the float64 value rounded to it) and its result keeps its shape."""
    from tensorflow.core.framework import node_def_pb2

    for node in list(fdef.node_def):
        dtype = narrowed.get((fdef.signature.name, node.name))
        if node.op != "Bitcast" or dtype is None or not node.input:
            continue
        cast = node_def_pb2.NodeDef(name=f"{node.name}/gradaudit_narrow", op="Cast", input=[node.input[0]],
                                    device=node.device)
        cast.attr["SrcT"].type, cast.attr["DstT"].type, cast.attr["Truncate"].b = _DT_DOUBLE, dtype, False
        fdef.node_def.append(cast)
        node.input[0] = f"{cast.name}:y:0"
        node.attr["T"].type = dtype


def _batch_norm_attrs(node) -> dict:
    """A fused batch norm's epsilon, exponential_avg_factor, data_format and is_training (their defaults when
    the saver left them out)."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(node.op)
    defaults = {a.name: a.default_value for a in op_def.attr} if op_def is not None else {}
    values = {}
    for name, field in (("epsilon", "f"), ("exponential_avg_factor", "f"), ("data_format", "s"),
                        ("is_training", "b")):
        attr = node.attr[name] if name in node.attr else defaults.get(name)
        values[name] = getattr(attr, field) if attr is not None else None
    values["data_format"] = (values["data_format"] or b"NHWC").decode()
    return values


class _Emitter:
    """Appends float64 primitives to a FunctionDef, named under `prefix`; each call returns its output's edge
    (`node:output_arg:0`)."""

    def __init__(self, nodes: list, prefix: str, device: str):
        self.nodes, self.prefix, self.device = nodes, prefix, device

    def op(self, op_type: str, name: str, inputs: list[str], **attrs) -> str:
        from tensorflow.core.framework import node_def_pb2
        from tensorflow.python.framework import op_def_registry

        node = node_def_pb2.NodeDef(name=f"{self.prefix}/{name}", op=op_type, input=inputs, device=self.device)
        for key, value in attrs.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            elif isinstance(value, int):
                node.attr[key].type = value
            else:
                node.attr[key].tensor.CopyFrom(value)
        self.nodes.append(node)
        return f"{node.name}:{op_def_registry.get(op_type).output_arg[0].name}:0"

    def const(self, name: str, value) -> str:
        import tensorflow as tf

        array = np.asarray(value)
        return self.op("Const", name, [], dtype=_DT_INT32 if array.dtype == np.int32 else _DT_DOUBLE,
                       value=tf.make_tensor_proto(array))

    def math(self, op_type: str, name: str, *inputs: str) -> str:
        return self.op(op_type, name, list(inputs), T=_DT_DOUBLE)

    def reshape(self, name: str, tensor: str, shape: str) -> str:
        return self.op("Reshape", name, [tensor, shape], T=_DT_DOUBLE, Tshape=_DT_INT32)

    def mean(self, name: str, tensor: str, axes: str) -> str:
        return self.op("Mean", name, [tensor, axes], T=_DT_DOUBLE, Tidx=_DT_INT32, keep_dims=True)


def _replace_batch_norms(fdef) -> None:
    """In place: every fused batch norm of `fdef` becomes float64 primitives (`_expand_batch_norm`), and the edges
    that read its outputs read theirs."""
    if not any(node.op in _BATCH_NORMS for node in fdef.node_def):
        return
    nodes: list = []
    renamed: dict[str, str] = {}
    for node in fdef.node_def:
        if node.op in _BATCH_NORMS and _batch_norm_attrs(node)["data_format"] in _LAYOUTS:
            renamed.update(_expand_batch_norm(node, nodes))
        else:
            nodes.append(node)
    for node in nodes:
        node.input[:] = [renamed.get(edge, edge) for edge in node.input]
    for key in list(fdef.ret):
        fdef.ret[key] = renamed.get(fdef.ret[key], fdef.ret[key])
    for key in list(fdef.control_ret):
        edge = renamed.get("^" + fdef.control_ret[key])
        if edge is not None:
            fdef.control_ret[key] = edge[1:]
    del fdef.node_def[:]
    fdef.node_def.extend(nodes)


def _expand_batch_norm(node, nodes: list) -> dict[str, str]:
    """Append to `nodes` the float64 primitives that compute the fused batch norm `node` as TensorFlow's CPU kernel
    does (training: normalised by the batch's mean and biased variance, the unbiased variance as the batch_variance
    output, blended with the running statistics when exponential_avg_factor is not 1; inference: by the mean and
    variance inputs), and return the renamed edges: `node:output_arg:0` (and `^node`) -> the primitives' own.
    The statistics (its mean and variance inputs, all but its y output) pass no gradient, as with the fused op's
    registered gradient."""
    attrs = _batch_norm_attrs(node)
    rank, channel = _LAYOUTS[attrs["data_format"]]
    e = _Emitter(nodes, f"{node.name}/gradaudit_float64", node.device)
    x, scale, offset, mean, variance = node.input[:5]
    axes = e.const("axes", np.array([d for d in range(rank) if d != channel], np.int32))
    broadcast = e.const("broadcast", np.array([-1 if d == channel else 1 for d in range(rank)], np.int32))
    flat = e.const("flat", np.array([-1], np.int32))
    eps = e.const("epsilon", np.float64(attrs["epsilon"]))
    mean_in = e.math("StopGradient", "mean_input", mean)
    variance_in = e.math("StopGradient", "variance_input", variance)
    if attrs["is_training"]:
        centre = e.mean("batch_mean_kept", x, axes)
        centred = e.math("Sub", "centred", x, centre)
        spread = e.mean("batch_variance_kept", e.math("Square", "squares", centred), axes)
        saved = (e.reshape("saved_mean", centre, flat), e.reshape("saved_variance", spread, flat))
        stats = _blended(e, saved, (mean_in, variance_in), x, attrs["exponential_avg_factor"])
    else:
        centred = e.math("Sub", "centred", x, e.reshape("mean_broadcast", mean_in, broadcast))
        spread = e.reshape("variance_broadcast", variance_in, broadcast)
        stats = saved = (mean_in, variance_in)
    factor = e.math("Mul", "factor", e.math("Rsqrt", "inverse_std", e.math("AddV2", "variance_eps", spread, eps)),
                    e.reshape("scale_broadcast", scale, broadcast))
    y = e.math("AddV2", "normalised", e.math("Mul", "scaled", centred, factor),
               e.reshape("offset_broadcast", offset, broadcast))
    controls = [edge for edge in node.input if edge.startswith("^")]
    outputs = {"y": e.op("Identity", "y", [y, *controls], T=_DT_DOUBLE)}
    for arg, value in zip(("batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"), (*stats, *saved)):
        outputs[arg] = e.op("StopGradient", arg, [value, *controls], T=_DT_DOUBLE)
    if node.op == "FusedBatchNormV3":  # on CPU empty for 4-d x, a scalar for 5-d (cuDNN's workspace on GPU)
        workspace = e.const("workspace", np.zeros(0 if rank == 4 else ()))
        outputs["reserve_space_3"] = e.op("Identity", "reserve_space_3", [workspace, *controls], T=_DT_DOUBLE)
    renamed = {f"{node.name}:{arg}:0": edge for arg, edge in outputs.items()}
    renamed["^" + node.name] = "^" + outputs["y"].split(":")[0]
    return renamed


def _blended(e: _Emitter, batch: tuple[str, str], running: tuple[str, str], x: str, factor: float) -> tuple[str, str]:
    """The batch_mean and batch_variance outputs in training: the batch's mean and unbiased variance (n / (n - 1)
    times the biased one, n the values per channel, 1 when n is 1), blended as (1 - f) running + f batch when the
    exponential_avg_factor f is not 1."""
    mean, biased = batch
    size = e.op("Cast", "values", [e.op("Size", "size", [x], T=_DT_DOUBLE, out_type=_DT_INT32)],
                SrcT=_DT_INT32, DstT=_DT_DOUBLE)
    channels = e.op("Cast", "channels", [e.op("Size", "channel_count", [mean], T=_DT_DOUBLE, out_type=_DT_INT32)],
                    SrcT=_DT_INT32, DstT=_DT_DOUBLE)
    n = e.math("RealDiv", "per_channel", size, channels)
    one = e.const("one", np.float64(1.0))
    adjust = e.math("RealDiv", "bessel", n, e.math("Maximum", "n_minus_one", e.math("Sub", "n_less", n, one), one))
    unbiased = e.math("Mul", "unbiased_variance", biased, adjust)
    if factor == 1.0:
        return mean, unbiased
    keep, take = e.const("keep", np.float64(1.0 - factor)), e.const("take", np.float64(factor))

    def blend(i: int, old: str, new: str) -> str:
        return e.math("AddV2", f"blended_{i}", e.math("Mul", f"kept_{i}", keep, old),
                      e.math("Mul", f"taken_{i}", take, new))

    return blend(0, running[0], mean), blend(1, running[1], unbiased)
