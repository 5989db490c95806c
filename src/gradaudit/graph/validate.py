"""What TensorFlow checks of a graph when it loads it, checked without TensorFlow's importer: each node against its
op's definition (attrs present and of the declared kind, allowed types, minimums, as many inputs as the op takes)
and each edge against the node it names (it exists, has that output, and that output's dtype is the one the input
takes); names unique in a body, and the functions a function's attrs call present in the library (the loader
sorts functions by them). A static verdict on a graph TensorFlow would refuse to load would vouch for a model that
cannot run. Ops this TensorFlow does not know are not checked here (the static pass reports them)."""

from __future__ import annotations

from typing import NamedTuple

from .dtypes import DT_INVALID
from .library import Library, OutputLayout

# OpDef attr type -> the AttrValue field that holds it
_KINDS = {"string": "s", "int": "i", "float": "f", "bool": "b", "type": "type", "shape": "shape", "tensor": "tensor",
          "func": "func"}
_LIST_KINDS = ("s", "i", "f", "b", "type", "shape", "tensor", "func")
_KIND_NAMES = {v: k for k, v in _KINDS.items()} | {"list": "list", "placeholder": "placeholder"}
_DTYPE_NAMES: dict[int, str] = {}


class RejectedGraph(Exception):
    """TensorFlow would refuse to load this graph: the reason."""


def _dtype_name(dtype: int) -> str:
    if not _DTYPE_NAMES:
        from tensorflow.core.framework import types_pb2

        _DTYPE_NAMES.update({v: k[3:].lower() for k, v in types_pb2.DataType.items()})
    return _DTYPE_NAMES.get(dtype, str(dtype))


def _where(node, fname: str | None) -> str:
    return f"node {node.name!r} ({node.op}) in {'function ' + repr(fname) if fname else 'the graph'}"


class _AttrSpec(NamedTuple):
    name: str
    required: bool  # no default value
    kind: str | None  # the AttrValue field that holds it (of its elements for a list), None: not checked
    is_list: bool
    allowed: frozenset[int] | None
    minimum: int | None


def _specs(op_def) -> tuple[list[_AttrSpec], list[str]]:
    """What `_check_attrs` checks of an op's attrs, and the names of those that hold functions."""
    specs, funcs = [], []
    for a in op_def.attr:
        is_list = a.type.startswith("list(")
        kind = _KINDS.get(a.type[5:-1] if is_list else a.type)
        allowed = frozenset(a.allowed_values.list.type) if a.HasField("allowed_values") and kind == "type" else None
        specs.append(_AttrSpec(a.name, not a.HasField("default_value"), kind, is_list, allowed,
                               a.minimum if a.has_minimum else None))
        if kind == "func":
            funcs.append(a.name)
    return specs, funcs


def _check_attrs(node, specs: list[_AttrSpec], fname: str | None) -> bool:
    """Attrs of `node` against its OpDef; False when one is a placeholder (a polymorphic function's attr), which
    leaves its counts and dtypes to the call."""
    concrete = True
    attrs = node.attr
    for a in specs:
        if a.name not in attrs:
            if a.required:
                raise RejectedGraph(f"{_where(node, fname)} lacks attr {a.name!r}, which its op requires")
            continue
        value = attrs[a.name]
        kind = value.WhichOneof("value")
        if kind == "placeholder":
            concrete = False
        elif kind is None or a.kind is None:
            continue
        elif a.is_list:
            _check_list_attr(node, a, value, kind, fname)
        else:
            _check_single_attr(node, a, value, kind, fname)
    return concrete


def _check_list_attr(node, a: _AttrSpec, value, kind: str, fname: str | None) -> None:
    """A list attr: a list of its declared kind only, of allowed types, with at least its minimum of values."""
    assert a.kind is not None  # _check_attrs skips an attr whose kind is not checked
    if kind != "list" or any(len(getattr(value.list, k)) for k in _LIST_KINDS if k != a.kind):
        raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} holds a {_KIND_NAMES[kind]}, not a "
                            f"list of {_KIND_NAMES[a.kind]}")
    if a.allowed is not None:
        for t in value.list.type:
            if t not in a.allowed:
                raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} holds {_dtype_name(t)}, which "
                                    "its op does not allow")
    if a.minimum is not None and len(getattr(value.list, a.kind)) < a.minimum:
        raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} has fewer than {a.minimum} values")


def _check_single_attr(node, a: _AttrSpec, value, kind: str, fname: str | None) -> None:
    """An attr that is not a list: of its declared kind, an allowed type, an int not below its minimum."""
    assert a.kind is not None  # _check_attrs skips an attr whose kind is not checked
    if kind != a.kind:
        raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} holds a {_KIND_NAMES[kind]}, not a "
                            f"{_KIND_NAMES[a.kind]}")
    if a.allowed is not None and value.type not in a.allowed:
        raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} holds {_dtype_name(value.type)}, which its "
                            "op does not allow")
    if a.kind == "i" and a.minimum is not None and value.i < a.minimum:
        raise RejectedGraph(f"{_where(node, fname)}: attr {a.name!r} is {value.i}, below its minimum {a.minimum}")


def _body(library: Library, nodes, fname: str | None, args: dict[str, int],
          specs: dict[str, tuple[list[_AttrSpec], list[str]]]) -> None:
    """One body: the graph's nodes (fname None) or a function's, whose arguments (name -> dtype) are tensors too."""
    by_name = {}
    for node in nodes:
        if node.name in by_name:
            raise RejectedGraph(f"two nodes are named {node.name!r} in "
                                f"{'function ' + repr(fname) if fname else 'the graph'}")
        by_name[node.name] = node
    layouts = _layouts(library, nodes, fname, specs)
    for node in nodes:
        _check_inputs(library, node, by_name, layouts, args, fname)


def _layouts(library: Library, nodes, fname: str | None,
             specs: dict[str, tuple[list[_AttrSpec], list[str]]]) -> dict[str, tuple[bool, OutputLayout]]:
    """Name -> (concrete: counts and dtypes are the node's own, layout) for each node whose op is known here (a
    library function or a registered op, whose node is checked on the way)."""
    layouts = {}
    for node in nodes:
        fdef = library.functions.get(node.op)
        if fdef is not None:
            sig_args = (*fdef.signature.input_arg, *fdef.signature.output_arg)
            concrete = not any(a.number_attr or a.type_list_attr for a in sig_args)
        else:
            op_def = library.op_def(node.op)
            if op_def is None:
                continue  # an op this TensorFlow does not know: the static pass reports it
            concrete = _check_op_node(library, node, op_def, fname, specs)
        layouts[node.name] = (concrete, library.layout(node))
    return layouts


def _check_op_node(library: Library, node, op_def, fname: str | None,
                   specs: dict[str, tuple[list[_AttrSpec], list[str]]]) -> bool:
    """A node of a registered op: its attrs, the functions they call and its saved gradient; returns whether
    its attrs are concrete (`_check_attrs`). `specs` caches each op's attr specs."""
    if node.op not in specs:
        specs[node.op] = _specs(op_def)
    attr_specs, func_attrs = specs[node.op]
    concrete = _check_attrs(node, attr_specs, fname)
    if func_attrs:
        _check_called_functions(library, node, fname, func_attrs)
    _check_saved_gradient(library, node, fname)
    return concrete


def _check_inputs(library: Library, node, by_name, layouts, args: dict[str, int], fname: str | None) -> None:
    """A node's inputs: control inputs after the data inputs and from nodes of the body; each data input a
    tensor of the body, of the dtype its op takes there, as many as the op takes."""
    entry = layouts.get(node.name)
    expected = library.expected_input_dtypes(node) if entry is not None and entry[0] else None
    data = 0
    seen_control = False
    for ref in node.input:
        if ref.startswith("^"):
            seen_control = True
            source = ref[1:]
            if source not in by_name and source not in args:
                raise RejectedGraph(f"{_where(node, fname)} has a control input from {source!r}, which is "
                                    "not in it")
            continue
        if seen_control:
            raise RejectedGraph(f"{_where(node, fname)} has data input {ref!r} after a control input")
        dtype = _source_dtype(ref, by_name, layouts, args, node, fname)
        if expected is not None:
            _check_input_dtype(node, fname, data, ref, dtype, expected)
        data += 1
    if expected is not None and data < len(expected):
        raise RejectedGraph(f"{_where(node, fname)} has {data} inputs where its op takes {len(expected)}")


def _check_input_dtype(node, fname: str | None, data: int, ref: str, dtype: int, expected) -> None:
    """Data input number `data` (`ref`, of `dtype`): one the op takes, of the dtype it takes there."""
    if data >= len(expected):
        raise RejectedGraph(f"{_where(node, fname)} has more inputs than the {len(expected)} its op takes")
    want = expected[data]
    if dtype != DT_INVALID and want != DT_INVALID and dtype % 100 != want % 100:
        raise RejectedGraph(f"{_where(node, fname)}: input {data} ({ref!r}) is {_dtype_name(dtype % 100)} "
                            f"where its op takes {_dtype_name(want % 100)}")


def _source_dtype(ref: str, by_name, layouts, args: dict[str, int], node, fname: str | None) -> int:
    """The dtype of the tensor `ref` names (DT_INVALID when it cannot be known here); refuses a name that is not
    in the body or an output its node does not have."""
    parts = ref.split(":")
    if fname is not None and len(parts) == 1 and parts[0] in args:
        return args[parts[0]]
    source = parts[0]
    if source not in by_name:
        raise RejectedGraph(f"{_where(node, fname)} has input {ref!r}, which names nothing in it")
    entry = layouts.get(source)
    if entry is None or not entry[0]:
        return DT_INVALID  # an unknown op, or counts the call decides
    layout = entry[1]
    try:
        if fname is None:
            index, start, count = int(parts[1]) if len(parts) > 1 else 0, 0, len(layout.dtypes)
        else:
            if len(parts) != 3:
                return DT_INVALID  # not TensorFlow's node:output:index: left to the static pass
            if parts[1] not in layout.arg_offsets:
                raise RejectedGraph(f"{_where(node, fname)} has input {ref!r}: {source!r} has no output "
                                    f"{parts[1]!r}")
            index, start = int(parts[2]), layout.arg_offsets[parts[1]]
            later = [o for o in layout.arg_offsets.values() if o > start]
            count = (min(later) if later else len(layout.dtypes)) - start
    except ValueError:
        raise RejectedGraph(f"{_where(node, fname)} has input {ref!r}, whose output index is not a number") from None
    if not 0 <= index < count:
        raise RejectedGraph(f"{_where(node, fname)} has input {ref!r}: {source!r} has no such output")
    return layout.dtypes[start + index]


def _check_saved_gradient(library: Library, node, fname: str | None) -> None:
    """A node's saved custom gradient: the loader orders the library by its gradient function too, and cannot
    resolve a function whose node's gradient function is missing ("There is a cyclic dependency between
    functions. Could not resolve ...")."""
    if "_gradient_op_type" not in node.attr:
        return
    gradient_type = node.attr["_gradient_op_type"].s.decode(errors="replace")
    grad_fn = library.registered_gradients.get(gradient_type)
    if grad_fn is not None and grad_fn not in library.functions:
        raise RejectedGraph(f"{_where(node, fname)}: its saved custom gradient {gradient_type!r} is the function "
                            f"{grad_fn!r}, which is not in the library")


def _check_called_functions(library: Library, node, fname: str | None, keys: list[str]) -> None:
    """The functions a node names in its attrs: TensorFlow's loader orders the library by them and refuses one
    that is not in it (the node's op is not a library function, as in its loader), as it does a graph's call of
    a function it does not have. Only the op's func attrs are looked at (TensorFlow also follows those whose name
    begins with an underscore, which no op declares)."""
    gradient_type = node.attr["_gradient_op_type"].s.decode(errors="replace") if "_gradient_op_type" in node.attr \
        else ""
    if gradient_type and gradient_type in library.registered_gradients:
        return
    for key in keys:
        if key not in node.attr:
            continue
        value = node.attr[key]
        kind = value.WhichOneof("value")
        names = [value.func.name] if kind == "func" else [f.name for f in value.list.func] if kind == "list" else []
        for name in names:
            if name not in library.functions:
                raise RejectedGraph(f"{_where(node, fname)}: attr {key!r} calls function {name!r}, which is not in "
                                    "the library")


def check_graph(graph_def, library: Library) -> None:
    """Raise RejectedGraph with the first reason TensorFlow would refuse to load `graph_def`."""
    specs: dict[str, tuple[list[_AttrSpec], list[str]]] = {}
    _body(library, graph_def.node, None, {}, specs)
    for fdef in graph_def.library.function:
        sig = fdef.signature
        args = {a.name: DT_INVALID if a.number_attr or a.type_list_attr else a.type for a in sig.input_arg}
        _body(library, fdef.node_def, sig.name, args, specs)


def check_object_graph(object_graph, library: Library) -> None:
    """The functions the object graph's saved functions name: tf.saved_model.load looks each up in the library."""
    for i, node in enumerate(object_graph.nodes):
        kind = node.WhichOneof("kind")
        if kind == "function":
            names = list(node.function.concrete_functions)
        elif kind == "bare_concrete_function":
            names = [node.bare_concrete_function.concrete_function_name]
        else:
            continue
        for name in names:
            if name not in library.functions:
                raise RejectedGraph(f"saved object {i} ({kind.replace('_', ' ')}) names function {name!r}, which "
                                    "is not in the library")
