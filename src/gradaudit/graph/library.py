"""The function library of a GraphDef and the op definitions its nodes need: output layouts and dtypes."""

from __future__ import annotations

from dataclasses import dataclass

from tensorflow.core.framework import attr_value_pb2, function_pb2, graph_pb2, op_def_pb2
from tensorflow.python.framework import op_def_registry

from .dtypes import DT_INVALID

MAX_COUNT_ATTR = 1_000_000  # an op's `num`/`N`-style attribute: how many inputs or outputs it has


@dataclass(frozen=True)
class OutputLayout:
    """Flat output dtypes of a node, and where each named output arg starts in the flat list."""

    dtypes: tuple[int, ...]
    arg_offsets: dict[str, int]
    known: bool  # False for an op type TensorFlow does not know here


def _attr(node, op_def: op_def_pb2.OpDef, name: str) -> attr_value_pb2.AttrValue | None:
    if name in node.attr:
        return node.attr[name]
    for a in op_def.attr:  # SavedModels strip attrs equal to their default
        if a.name == name and a.HasField("default_value"):
            return a.default_value
    return None


def _arg_dtypes(node, op_def: op_def_pb2.OpDef, arg: op_def_pb2.OpDef.ArgDef) -> list[int]:
    if arg.type_list_attr:
        a = _attr(node, op_def, arg.type_list_attr)
        return list(a.list.type) if a is not None else []
    if arg.type:
        dtype = arg.type
    else:
        a = _attr(node, op_def, arg.type_attr)
        dtype = a.type if a is not None else DT_INVALID
    count = 1
    if arg.number_attr:
        a = _attr(node, op_def, arg.number_attr)
        count = a.i if a is not None else 0
    ref = 100 if arg.is_ref and dtype and dtype < 100 else 0
    return [dtype + ref] * count


def _signature_dtypes(node, args) -> list[int]:
    """Dtypes of a FunctionDef's args; polymorphic args take their type from the call's attrs."""
    out = []
    for arg in args:
        if arg.type:
            out.append(arg.type)
        elif arg.type_attr and arg.type_attr in node.attr:
            out.append(node.attr[arg.type_attr].type)
        else:
            out.append(DT_INVALID)
    return out


class Library:
    """Function definitions by name, the saved custom gradients, and cached op definitions."""

    def __init__(self, graph_def: graph_pb2.GraphDef):
        lib = graph_def.library
        self.functions: dict[str, function_pb2.FunctionDef] = {f.signature.name: f for f in lib.function}
        # gradient_op_type -> name of the saved gradient function (tf.custom_gradient)
        self.registered_gradients: dict[str, str] = {
            g.registered_op_type: g.gradient_func for g in lib.registered_gradients}
        # saved gradient function -> for each of its results, the input of the op it is the gradient of
        # (TensorFlow records the function's results with a None for every input that gets no gradient;
        # the FunctionDef itself keeps only the tensors). Filled from the object graph by the reader.
        self.gradient_result_inputs: dict[str, tuple[int, ...]] = {}
        # legacy Defun-style gradients: function name -> gradient function name
        self.function_gradients: dict[str, str] = {g.function_name: g.gradient_func for g in lib.gradient}
        self._op_defs: dict[str, op_def_pb2.OpDef | None] = {}

    def add(self, fdefs, registered: dict[str, str]) -> None:
        """Add functions (and custom gradients: gradient_op_type -> function) traced in this process."""
        for f in fdefs:
            self.functions.setdefault(f.signature.name, f)
        self.registered_gradients.update(registered)

    def op_def(self, op_type: str) -> op_def_pb2.OpDef | None:
        if op_type not in self._op_defs:
            self._op_defs[op_type] = op_def_registry.get(op_type)
        return self._op_defs[op_type]

    def is_known(self, op_type: str) -> bool:
        return op_type in self.functions or self.op_def(op_type) is not None

    def layout(self, node) -> OutputLayout:
        """Flat output dtypes of `node`: from its OpDef, or from the function it names as its type."""
        fdef = self.functions.get(node.op)
        if fdef is not None:
            dts = _signature_dtypes(node, fdef.signature.output_arg)
            return OutputLayout(tuple(dts), {a.name: i for i, a in enumerate(fdef.signature.output_arg)}, True)
        op_def = self.op_def(node.op)
        if op_def is None:
            return OutputLayout((), {}, False)
        dtypes: list[int] = []
        offsets: dict[str, int] = {}
        for arg in op_def.output_arg:
            offsets[arg.name] = len(dtypes)
            dtypes.extend(_arg_dtypes(node, op_def, arg))
        return OutputLayout(tuple(dtypes), offsets, True)

    def expected_input_dtypes(self, node) -> list[int] | None:
        """Flat dtypes `node` expects of its (non-control) inputs, from its OpDef or called function."""
        fdef = self.functions.get(node.op)
        if fdef is not None:
            return _signature_dtypes(node, fdef.signature.input_arg)
        op_def = self.op_def(node.op)
        if op_def is None:
            return None
        out: list[int] = []
        for arg in op_def.input_arg:
            out.extend(_arg_dtypes(node, op_def, arg))
        return [d - 100 if d > 100 else d for d in out]

    def input_dtypes(self, fdef: function_pb2.FunctionDef, call_node=None) -> list[int]:
        return _signature_dtypes(call_node, fdef.signature.input_arg) if call_node is not None else [
            a.type for a in fdef.signature.input_arg]


def function_attrs(node) -> list[tuple[str, list[str]]]:
    """Every attr of `node` that names functions: (attr name, function names)."""
    out = []
    for key, value in node.attr.items():
        if value.HasField("func"):
            out.append((key, [value.func.name]))
        elif value.HasField("list") and value.list.func:
            out.append((key, [f.name for f in value.list.func]))
    return out
