"""The dataflow graph of one function body (or a signature's root graph): tensor and op nodes joined by edges
that say what they carry. A call (function call, While body, If and Case branch) becomes a Site: argument and
result nodes joined by the called function's summary edges (graph/summaries.py composes the bodies)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tensorflow.python.framework import tensor_util

from ..model import OpRef
from .dtypes import DT_INVALID, carries_gradient
from .gradients import GradientOracle, GradKind, registry_kind
from .library import MAX_COUNT_ATTR, Library, OutputLayout, function_attrs
from .xla_module import module_dependencies

# Edge flags
VALUE = 1  # the target's value depends on the source's value
GRAD = 2  # a gradient reaching the target flows back to the source
CONVERT = 4  # a non-float value enters a float result as data (Cast, Select condition)
BACK = 8  # a While loop's carried value (body result back to body argument)
# a gradient may flow back here, or not: the op's gradient cannot be known (an op type this TensorFlow does
# not know, a gradient replica that cannot be built). Pairs whose paths need such an edge are "unknown".
MAYBE = 16
# A called function's summary edge (argument -> result), standing for every path through its body; it says with
# CONVERT and VALUE_CHAIN how a non-float argument reaches that result (see reach.converted_masks).
SUMMARY = 32
VALUE_CHAIN = 64  # summary edge: a non-float argument reaches this non-float result through non-float values

CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}
WHILE_OPS = {"While", "StatelessWhile", "_While"}
IF_OPS = {"If", "StatelessIf", "_If"}
CASE_OPS = {"Case", "StatelessCase"}
# Ops whose result depends on the shape of their input, not on its values.
METADATA_OPS = {"Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "VariableShape",
                "TensorListLength", "TensorListElementShape"}
# Ops that write a variable through its handle (input 0), by the input whose value they write (or add, subtract,
# scatter) into it, and the ops that read a variable's value back.
STATE_WRITES = {"AssignVariableOp": 1, "AssignAddVariableOp": 1, "AssignSubVariableOp": 1,
                "ResourceScatterUpdate": 2, "ResourceScatterAdd": 2, "ResourceScatterSub": 2,
                "ResourceScatterMul": 2, "ResourceScatterDiv": 2, "ResourceScatterMin": 2, "ResourceScatterMax": 2,
                "ResourceScatterNdUpdate": 2, "ResourceScatterNdAdd": 2, "ResourceScatterNdSub": 2}
STATE_READS = {"ReadVariableOp", "ResourceGather", "ResourceGatherNd"}
# (op type, attr, value) -> what TensorFlow's registered gradient of the op so configured does instead of the
# derivative: a surrogate for a forward that is piecewise constant in those inputs
SURROGATE_GRADIENTS = {
    ("CropAndResize", "method", b"nearest"):
        "with method='nearest' its forward is piecewise constant in the boxes, and TensorFlow's registered gradient "
        "hands the boxes the bilinear crop's gradient instead (its image_grad.py says so)",
}
CONVERTING_INPUTS = {"Cast": (0,), "Select": (0,), "SelectV2": (0,), "OneHot": (0,), "Bitcast": (0,)}
TOP = "<graph>"


@dataclass
class OpNode:
    ref: OpRef
    inputs: list[tuple[int, int]]  # (tensor id, edge flags)
    outputs: list[int]
    grad_kind: GradKind | None  # None for ops with a custom gradient or an unknown type
    custom_gradient: str | None = None  # gradient_op_type when the op's gradient is overridden
    custom_gradient_saved: bool = True
    # inputs a saved custom gradient gives no gradient for this output (None, zeros, or a value that
    # does not depend on the incoming gradient)
    dead_inputs: tuple[int, ...] = ()
    known: bool = True
    uncertain: str | None = None  # why whether a gradient passes this op cannot be known (MAYBE edges)
    grad_error: str | None = None  # the registered gradient function raises: TensorFlow's message
    # a variable read that comes after writes of the same variable in its body: the ops that wrote it, whose
    # written values reach this read's result by value along edges that carry no gradient (a variable's state)
    written_by: tuple[OpRef, ...] = ()
    written_values: tuple[int, ...] = ()
    # TensorFlow's registered gradient of the op, as configured (its attrs), is a surrogate, not the derivative:
    # what it does (SURROGATE_GRADIENTS); None for every other op
    surrogate: str | None = None


@dataclass
class Dataflow:
    dtype: list[int] = field(default_factory=list)  # per node; DT_INVALID for op nodes
    succ: list[list[int]] = field(default_factory=list)
    flags: list[list[int]] = field(default_factory=list)
    ops: dict[int, OpNode] = field(default_factory=dict)
    has_back_edges: bool = False
    producer: dict[int, int] = field(default_factory=dict)  # tensor -> op node that computes it
    aliased_from: dict[int, list[int]] = field(default_factory=dict)  # tensor -> tensors it takes the value of
    const_value: dict[int, float] = field(default_factory=dict)  # tensor -> value, for scalar numeric Consts
    shape: dict[int, object] = field(default_factory=dict)  # tensor -> TensorShapeProto saved with the graph
    # saved custom-gradient function -> its own composed Dataflow (the hazard lints read inside it)
    gradient_graphs: dict[str, Dataflow] = field(default_factory=dict)

    def producers(self, tensor: int) -> list[int]:
        """The op nodes whose result `tensor` is, looking through function calls, loops and branches."""
        out, seen, stack = [], set(), [tensor]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in self.producer:
                out.append(self.producer[t])
            stack.extend(self.aliased_from.get(t, ()))
        return out

    def consumers(self, tensor: int) -> list[tuple[int, int]]:
        """(op node, input index) pairs that read `tensor`, looking through calls, loops and branches."""
        out: list[tuple[int, int]] = []
        seen: set[int] = set()
        stack = [tensor]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            for b in self.succ[t]:
                node = self.ops.get(b)
                if node is not None:
                    out.extend((b, i) for i, (x, _) in enumerate(node.inputs) if x == t)
                elif t in self.aliased_from.get(b, ()):
                    stack.append(b)
        return out

    def new_node(self, dtype: int = DT_INVALID) -> int:
        self.dtype.append(dtype)
        self.succ.append([])
        self.flags.append([])
        return len(self.dtype) - 1

    def edge(self, a: int, b: int, flags: int) -> None:
        if flags:
            self.succ[a].append(b)
            self.flags[a].append(flags)
            if flags & BACK:
                self.has_back_edges = True

    def alias(self, a: int, b: int, extra: int = 0) -> None:
        """b takes a's value (function argument or result, loop variable)."""
        self.edge(a, b, VALUE | (GRAD if carries_gradient(self.dtype[a]) else 0) | extra)
        self.aliased_from.setdefault(b, []).append(a)


def _parse_ref(ref: str, in_function: bool) -> tuple[str, str | None, int] | None:
    """`node:out_arg:idx` (FunctionDef) or `node:idx` (GraphDef) -> (node, out_arg, idx); None for ^ctrl."""
    if ref.startswith("^"):
        return None
    parts = ref.split(":")
    if in_function:
        if len(parts) == 1:
            return parts[0], None, 0  # a function argument
        if len(parts) == 3:
            return parts[0], parts[1], int(parts[2])
        return parts[0], parts[1], 0
    return parts[0], None, int(parts[1]) if len(parts) > 1 else 0


class OutputIndexTooLarge(ValueError):
    """A use of an unknown op's output at an index beyond any op's (MAX_COUNT_ATTR): a malformed model."""


def _layouts_from_uses(unknown: set[str], nodes, extra_refs, in_function: bool, budget: Budget | None = None,
                       op_types: dict[str, str] | None = None) -> dict[str, OutputLayout]:
    """Output layouts of ops TensorFlow does not know, from how the graph uses their outputs. No op has more
    outputs than a count attribute may give it (MAX_COUNT_ATTR): a use beyond that is a malformed model, and
    the outputs of all of them are charged to the node budget before any is made."""
    counts: dict[str, dict[str | None, int]] = {name: {} for name in unknown}
    for ref in [r for node in nodes for r in node.input] + list(extra_refs):
        parsed = _parse_ref(ref, in_function)
        if parsed is not None and parsed[0] in counts:
            if not 0 <= parsed[2] < MAX_COUNT_ATTR:
                kind = (op_types or {}).get(parsed[0], "an unknown op")
                raise OutputIndexTooLarge(f"{kind} {parsed[0]!r} is used at output {parsed[2]}, beyond the "
                                          f"{MAX_COUNT_ATTR:,} outputs an op may have")
            args = counts[parsed[0]]
            args[parsed[1]] = max(args.get(parsed[1], 0), parsed[2] + 1)
    totals = {name: sum(args.values()) for name, args in counts.items()}
    for name, total in totals.items():
        if total > MAX_COUNT_ATTR:
            kind = (op_types or {}).get(name, "an unknown op")
            raise OutputIndexTooLarge(f"{kind} {name!r} is used at {total:,} outputs, beyond the "
                                      f"{MAX_COUNT_ATTR:,} outputs an op may have")
    if budget is not None:
        budget.ensure(sum(totals.values()))
    layouts = {}
    for name, args in counts.items():
        offsets, total = {}, 0
        for arg, n in args.items():
            offsets[arg or ""] = total
            total += n
        layouts[name] = OutputLayout((DT_INVALID,) * total, offsets, False)
    return layouts


def _scalar_const(node) -> float | None:
    """The value of a Const node holding one number (the 1 in `1 + exp(x)`, the 0.5 in `pow(x, 0.5)`)."""
    proto = node.attr["value"].tensor
    if any(d.size != 1 for d in proto.tensor_shape.dim):
        return None
    try:
        value = tensor_util.MakeNdarray(proto)
    except (TypeError, ValueError):
        return None
    if value.size != 1 or value.dtype.kind not in "fiu":
        return None
    return float(value.reshape(()))


class _OpGradient(NamedTuple):
    """What the wiring of one op knows of its gradient (DataflowBuilder._op_gradient)."""

    kind: GradKind | None
    passes: tuple[bool, ...]  # per input: a gradient passes to it
    uncertain: str | None = None  # why whether a gradient passes cannot be known
    maybe: bool = False  # float inputs get MAYBE edges: a gradient may pass, or not
    grad_error: str | None = None  # the registered gradient function raises


def _surrogate(node) -> str | None:
    """What TensorFlow's registered gradient of `node` does instead of its derivative, as its attrs configure it
    (SURROGATE_GRADIENTS), or None."""
    for (op, attr, value), what in SURROGATE_GRADIENTS.items():
        if node.op == op and attr in node.attr and node.attr[attr].s == value:
            return what
    return None


def _input_flags(value: int, grad: _OpGradient, i: int, converts: bool, dtype: int) -> int:
    """The flags of the edge from input `i` (of `dtype`) to its op: its value (unless the op reads only its
    shape), a gradient if one passes (or MAYBE), CONVERT for a non-float value entering a float result."""
    flags = value | (GRAD if grad.passes[i] and carries_gradient(dtype) else 0)
    if grad.maybe and value and carries_gradient(dtype):
        flags |= MAYBE
    if converts and not carries_gradient(dtype):
        flags |= CONVERT
    return flags


def _result_groups(node, inputs: list[int], outputs: list[int]) -> list[tuple[range | frozenset[int], list[int]]]:
    """Which inputs each group of results depends on: all of them, except for a compiled module whose saved
    StableHLO says per result (a JAX function's results need not read every argument)."""
    if node.op == "XlaCallModule" and outputs:
        deps = module_dependencies(node.attr["module"].s)
        if deps is not None and len(deps) == len(outputs) and all(i < len(inputs) for d in deps for i in d):
            return [(d, [o]) for d, o in zip(deps, outputs)]
    return [(range(len(inputs)), list(outputs))]


def _written_before(read, writes: dict, resolved: dict[str, list[int]]) -> list[tuple[Any, int]]:
    """(write, the value it writes) for each write of the read's variable (the same handle) the read's control
    inputs order before it."""
    handle = resolved[read.name][0]
    out = []
    for ref in read.input:
        w = writes.get(ref[1:]) if ref.startswith("^") else None
        args = resolved.get(w.name, []) if w is not None else []
        if w is not None and args and args[0] == handle and STATE_WRITES[w.op] < len(args):
            out.append((w, args[STATE_WRITES[w.op]]))
    return out


class GraphTooLarge(Exception):
    """The graphs would exceed the node budget: the static pass cannot analyse this model."""


class StaticPassTooSlow(GraphTooLarge):
    """The static pass ran past its time budget."""


# The static pass holds about 4 KB per node (a chain of 1,000,000 Identity ops: 3.85 GB, 117 s here): this
# bounds its memory to about 4 GB. Keras ResNet50 has 8,300 nodes; a 1,000-step unrolled LSTM about 100,000.
MAX_STATIC_NODES = 1_000_000
# The reachability masks hold one bit per source (and per output) on every node, five families of them: a
# signature of 40,000 inputs over a chain of 200,000 nodes (an 18 MB file, within every other budget) held 6.8 GB
# in gradaudit's own process. Their total is bounded here, counted before each function copy's masks are made.
MAX_MASK_BYTES = 2 << 30


class Budget:
    """One node budget and one deadline shared by every graph the static pass builds: function bodies,
    their summaries' edges, the composed graph and the custom-gradient functions' graphs."""

    def __init__(self, max_nodes: int = MAX_STATIC_NODES, seconds: float = 300.0, started: float | None = None):
        self.max_nodes = max_nodes
        self.seconds = seconds
        self.used = 0
        self.mask_bytes = 0
        # `started`: when the model began to be read (time.monotonic()), so that parsing counts too
        self._deadline = (time.monotonic() if started is None else started) + seconds

    def charge(self, nodes: int) -> None:
        self.used += nodes
        if self.used > self.max_nodes:
            raise GraphTooLarge(f"its graphs exceed the static pass's budget of {self.max_nodes:,} nodes "
                                "(each function is analysed once per distinct calling context)")
        self.check_time()

    def ensure(self, nodes: int) -> None:
        """Refuse, before making them, `nodes` more nodes than the budget has left."""
        if self.used + nodes > self.max_nodes:
            raise GraphTooLarge(f"its graphs exceed the static pass's budget of {self.max_nodes:,} nodes "
                                "(each function is analysed once per distinct calling context)")
        self.check_time()

    def charge_masks(self, nodes: int, source_bits: int, output_bits: int) -> None:
        """Refuse, before making them, reachability masks beyond MAX_MASK_BYTES in all: `nodes` nodes with two
        families over `source_bits` sources and three over `output_bits` outputs."""
        self.mask_bytes += nodes * (2 * (source_bits // 8 + 28) + 3 * (output_bits // 8 + 28))
        if self.mask_bytes > MAX_MASK_BYTES:
            raise GraphTooLarge(f"its flow analysis would hold more than {MAX_MASK_BYTES >> 30} GiB of reachability "
                                f"masks ({source_bits:,} sources and {output_bits:,} outputs over the nodes of its "
                                "graphs)")

    def check_time(self) -> None:
        if time.monotonic() > self._deadline:
            raise StaticPassTooSlow(f"it ran past the static pass's time budget of {self.seconds:g} s")


class FunctionKey(NamedTuple):
    """A function with the dtypes of its arguments at a call (a polymorphic signature takes them from it)."""

    name: str
    arg_dtypes: tuple[int, ...]


@dataclass(frozen=True)
class Summary:
    """What a function body does between its arguments and results, as bitmasks over the results (one per
    argument): every path through it, with the calls inside it composed from their own summaries."""

    value: tuple[int, ...]  # results the argument's value reaches
    grad: tuple[int, ...]  # results it reaches along edges that carry (or may carry) a gradient
    converted: tuple[int, ...]  # non-float argument: converted into a float that reaches the result by value
    value_chain: tuple[int, ...]  # non-float argument: reaches the non-float result through non-float values

    def edges(self, arg: int) -> list[tuple[int, int]]:
        """(result, edge flags) for each result the argument reaches at all."""
        masks = ((self.value[arg], VALUE), (self.grad[arg], GRAD), (self.converted[arg], CONVERT),
                 (self.value_chain[arg], VALUE_CHAIN))
        out = []
        for ret in set_bits(self.value[arg] | self.grad[arg] | self.converted[arg] | self.value_chain[arg]):
            flags = SUMMARY
            for mask, flag in masks:
                if mask >> ret & 1:
                    flags |= flag
            out.append((ret, flags))
        return out


def set_bits(mask: int) -> list[int]:
    """The positions of the bits set in `mask`, lowest first (in time proportional to their number)."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


@dataclass
class Site:
    """Where a body makes TensorFlow run another function: argument and result nodes of this body that stand
    for the callee's own. `wired` is False for a function only named by an attr (a dataset function): it is
    walked for its ops, its arguments and results are joined to nothing."""

    callee: FunctionKey
    args: list[int]
    rets: list[int]
    wired: bool = True


def call_targets(lib: Library, node) -> list[tuple[FunctionKey, bool]]:
    """Each function `node` makes TensorFlow run, and whether its results flow into this body (a call, a loop
    body or condition, a branch, a saved gradient function) or it is only named by an attr."""
    op = node.op
    functions = lib.functions

    def key(name: str, with_node: bool = True) -> FunctionKey:
        return FunctionKey(name, tuple(lib.input_dtypes(functions[name], node if with_node else None)))

    if op in functions:
        return [(key(op), True)]
    if op in CALL_OPS and node.attr["f"].func.name in functions:
        return [(key(node.attr["f"].func.name), True)]
    if op in WHILE_OPS:
        return [(key(node.attr["body"].func.name), True), (key(node.attr["cond"].func.name), True)]
    if op in IF_OPS:
        return [(key(node.attr["then_branch"].func.name), True), (key(node.attr["else_branch"].func.name), True)]
    if op in CASE_OPS:
        return [(key(f.name), True) for f in node.attr["branches"].list.func]
    if op == "IdentityN" and "_gradient_op_type" not in node.attr:
        return []
    out = []
    if "_gradient_op_type" in node.attr:
        grad_fn = lib.registered_gradients.get(node.attr["_gradient_op_type"].s.decode()) or ""
        if grad_fn in functions:
            out.append((key(grad_fn, False), True))
    out.extend((key(name, False), False) for _, names in function_attrs(node) for name in names
               if name in functions)
    return out


# per node of a body, in order: the functions it makes TensorFlow run (call_targets)
Targets = list[list[tuple[FunctionKey, bool]]]


class DataflowBuilder:
    """Builds the Dataflow of one body: a root GraphDef (a signature's nodes) or one FunctionDef. The functions
    it calls must already be summarised (`summaries`): each call becomes a Site joined by summary edges."""

    def __init__(self, library: Library, oracle: GradientOracle, summary_of: Callable[[FunctionKey], Summary],
                 ret_dtypes: dict[FunctionKey, tuple[int, ...]], budget: Budget):
        self.lib = library
        self.oracle = oracle
        self.g = Dataflow()
        self.summary_of = summary_of
        self.ret_dtypes = ret_dtypes
        self.budget = budget
        self.sites: list[Site] = []

    # -- roots -----------------------------------------------------------------------------
    def add_graph_nodes(self, nodes, where: str = TOP, targets: Targets | None = None) -> dict[str, list[int]]:
        """Wire top-level GraphDef nodes (flat `node:idx` references); returns node -> output tensors.
        `where` names their location in findings (a traced function's name, or `<graph>`). `targets`: each
        node's call_targets, when the caller has them already."""
        return self._wire_nodes(list(nodes), where, {}, False, targets)[0]

    def add_function(self, name: str, args: list[int], targets: Targets | None = None) -> list[int]:
        """Wire the body of function `name` with its arguments bound to `args`; returns its result tensors."""
        fdef = self.lib.functions[name]
        for i, t in enumerate(args):
            shapes = fdef.arg_attr[i].attr["_output_shapes"].list.shape if i in fdef.arg_attr else ()
            if shapes and t not in self.g.shape:
                self.g.shape[t] = shapes[0]
        bound = {a.name: [t] for a, t in zip(fdef.signature.input_arg, args)}
        outs, layouts = self._wire_nodes(list(fdef.node_def), name, bound, True, targets, extra_refs=fdef.ret.values())
        return [self._resolve_parsed(_parse_ref(fdef.ret[arg.name], True), outs, layouts)
                for arg in fdef.signature.output_arg]

    def new_arg_tensors(self, fdef_name: str, call_node=None) -> list[int]:
        fdef = self.lib.functions[fdef_name]
        return [self.g.new_node(d) for d in self.lib.input_dtypes(fdef, call_node)]

    # -- wiring ----------------------------------------------------------------------------
    def _wire_nodes(self, nodes, fname: str, bound: dict[str, list[int]], in_function: bool,
                    targets: Targets | None, extra_refs=()):
        g = self.g
        if targets is None:
            targets = [call_targets(self.lib, node) for node in nodes]
        outs: dict[str, list[int]] = dict(bound)
        layouts: dict[str, OutputLayout] = {}
        for node in nodes:
            layouts[node.name] = self.lib.layout(node)
        unknown = {name for name, lay in layouts.items() if not lay.known}
        if unknown:
            op_types = {node.name: node.op for node in nodes if node.name in unknown}
            layouts.update(_layouts_from_uses(unknown, nodes, extra_refs, in_function, self.budget, op_types))
        before = len(g.dtype)
        self.budget.ensure(sum(len(layouts[node.name].dtypes) for node in nodes))
        for node in nodes:
            outs[node.name] = [g.new_node(d) for d in layouts[node.name].dtypes]
            if "_output_shapes" in node.attr:
                for t, shape in zip(outs[node.name], node.attr["_output_shapes"].list.shape):
                    g.shape[t] = shape
        self.budget.charge(len(g.dtype) - before)
        if unknown:
            self._dtypes_from_consumers(nodes, outs, layouts, in_function)
        resolved: dict[str, list[int]] = {}
        for node, calls in zip(nodes, targets):
            inputs = []
            for ref in node.input:
                parsed = _parse_ref(ref, in_function)
                if parsed is not None:
                    inputs.append(self._resolve_parsed(parsed, outs, layouts))
            resolved[node.name] = inputs
            self._wire_node(node, fname, inputs, outs[node.name], layouts[node.name], calls)
        self._wire_state(nodes, fname, resolved, outs)
        return outs, layouts

    def _wire_state(self, nodes, fname: str, resolved: dict[str, list[int]], outs: dict[str, list[int]]) -> None:
        """A variable read ordered after a write of the same variable in this body (the control input automatic
        control dependencies give it: `self.cache.assign(h); y = f(self.cache)`, or `assign`'s own value) reads
        what was written: the written value reaches the read's result by value, along an edge that carries no
        gradient, for TensorFlow's gradient does not flow through a variable's state."""
        writes = {node.name: node for node in nodes if node.op in STATE_WRITES}
        if not writes:
            return
        g = self.g
        for node in nodes:
            if node.op not in STATE_READS or not resolved[node.name] or not outs[node.name]:
                continue
            written = _written_before(node, writes, resolved)
            op_id = g.producer.get(outs[node.name][0])
            if not written or op_id is None or op_id not in g.ops:
                continue
            for _, value in written:
                g.edge(value, op_id, VALUE)
            read = g.ops[op_id]
            read.written_by = tuple(OpRef(w.op, w.name, fname) for w, _ in written)
            read.written_values = tuple(v for _, v in written)

    def _dtypes_from_consumers(self, nodes, outs, layouts, in_function: bool) -> None:
        """The results of an op this TensorFlow does not know get their dtypes from the known ops that read
        them: an integer result (token ids) then carries no gradient, a float one may."""
        for node in nodes:
            expected = self.lib.expected_input_dtypes(node)
            if not expected:
                continue
            refs = [r for r in node.input if not r.startswith("^")]
            for ref, dtype in zip(refs, expected):
                parsed = _parse_ref(ref, in_function)
                if parsed is None or parsed[0] not in layouts or layouts[parsed[0]].known or dtype == DT_INVALID:
                    continue
                t = self._resolve_parsed(parsed, outs, layouts)
                if self.g.dtype[t] == DT_INVALID:
                    self.g.dtype[t] = dtype

    def _resolve_parsed(self, parsed, outs, layouts: dict[str, OutputLayout]) -> int:
        name, arg, idx = parsed
        layout = layouts.get(name)
        tensors = outs.get(name)
        if tensors is None:
            raise ValueError(f"input refers to unknown node {name!r}")
        flat = idx
        if layout is not None and (arg is not None or not layout.known):
            key = arg if layout.known else (arg or "")
            if key not in layout.arg_offsets:
                raise ValueError(f"node {name!r} has no output {arg!r}")
            flat = layout.arg_offsets[key] + idx
        if flat >= len(tensors):
            raise ValueError(f"node {name!r} has no output {flat}")
        return tensors[flat]

    def _site(self, callee: FunctionKey, args: list[int], wired: bool = True) -> Site:
        """A site running `callee` with argument nodes `args`: result nodes joined to them by its summary (none
        for a function only named by an attr: it may be built after this body)."""
        g = self.g
        if not wired:
            self.budget.charge(len(args))
            site = Site(callee, args, [], wired)
            self.sites.append(site)
            return site
        rets = [g.new_node(d) for d in self.ret_dtypes[callee]]
        summary = self.summary_of(callee)
        self.budget.charge(len(args) + len(rets))
        for k, a in enumerate(args):
            edges = summary.edges(k)
            for m, flags in edges:
                g.edge(a, rets[m], flags)
            self.budget.charge(len(edges))
        site = Site(callee, args, rets, wired)
        self.sites.append(site)
        return site

    def _call(self, callee: str, node, inputs: list[int], outputs: list[int]) -> Site:
        """A call whose inputs bind the callee's arguments and whose results are the op's outputs."""
        g = self.g
        args = self.new_arg_tensors(callee, node)
        for t, a in zip(inputs, args):
            g.alias(t, a)
        site = self._site(FunctionKey(callee, tuple(g.dtype[a] for a in args)), args)
        for r, o in zip(site.rets, outputs):
            g.alias(r, o)
        return site

    def _wire_node(self, node, fname: str, inputs: list[int], outputs: list[int], layout,
                   calls: list[tuple[FunctionKey, bool]]) -> None:
        """Wire one node of a body between its input and output tensors."""
        if self._wire_control_flow(node, inputs, outputs):
            return
        self._wire_op(node, fname, inputs, outputs, layout)
        # Functions named by other attrs (dataset map functions, ...) are walked for their ops only.
        for key, wired in calls:
            if not wired:
                self._site(key, self.new_arg_tensors(key.name), wired=False)

    def _wire_control_flow(self, node, inputs: list[int], outputs: list[int]) -> bool:
        """Wire a call of a library function, a While loop, an If or Case, or an IdentityN without a custom
        gradient; returns False for any other op (it is wired as an op of its own)."""
        op_type = node.op
        callee = self._callee(node)
        if callee is not None:
            self._call(callee, node, inputs, outputs)
        elif op_type in WHILE_OPS:
            self._wire_while(node, inputs, outputs)
        elif op_type in IF_OPS or op_type in CASE_OPS:
            branches = ([node.attr["then_branch"].func.name, node.attr["else_branch"].func.name]
                        if op_type in IF_OPS else [f.name for f in node.attr["branches"].list.func])
            for branch in branches:
                self._call(branch, node, inputs[1:], outputs)
            for o in outputs:
                self.g.edge(inputs[0], o, VALUE | CONVERT)
        elif op_type == "IdentityN" and "_gradient_op_type" not in node.attr:
            for t, o in zip(inputs, outputs):
                self.g.alias(t, o)
        else:
            return False
        return True

    def _callee(self, node) -> str | None:
        """The library function a call op runs: the op type itself, or the `f` of a (Stateful)PartitionedCall;
        None for any other op, or a callee the library does not hold."""
        if node.op in self.lib.functions:
            return node.op
        if node.op in CALL_OPS and node.attr["f"].func.name in self.lib.functions:
            return node.attr["f"].func.name
        return None

    def _wire_while(self, node, inputs: list[int], outputs: list[int]) -> None:
        """A While loop: its inputs enter the body, whose results go back to its arguments (BACK edges)."""
        g = self.g
        body, cond = node.attr["body"].func.name, node.attr["cond"].func.name
        args = self.new_arg_tensors(body, node)
        for t, a in zip(inputs, args):
            g.alias(t, a)
        rets = self._site(FunctionKey(body, tuple(g.dtype[a] for a in args)), args).rets
        for r, a in zip(rets, args):
            g.alias(r, a, BACK)
        # The loop's results are the body's last results: we assume the body runs at least
        # once, so a cut inside the body is not bypassed by the zero-iteration case.
        for r, o in zip(rets, outputs):
            g.alias(r, o)
        # the condition reads the loop's values; its bool result carries no gradient
        self._call(cond, node, args, [])

    def _wire_op(self, node, fname, inputs, outputs, layout) -> None:
        """An op: its inputs join a node of its own (one per group of results) along edges saying whether a
        gradient passes, that node joins its results; a custom gradient is wired by what its function does."""
        g = self.g
        ref = OpRef(node.op, node.name, fname)
        gradient_op_type = node.attr["_gradient_op_type"].s.decode() if "_gradient_op_type" in node.attr else None
        if gradient_op_type:
            self._wire_custom_gradient(node, ref, inputs, outputs, gradient_op_type)
            return
        op_id = g.new_node()
        grad = self._op_gradient(node, inputs, outputs, layout)
        value = 0 if node.op in METADATA_OPS else VALUE
        conv = CONVERTING_INPUTS.get(node.op, ())
        for n, (used, group_outputs) in enumerate(_result_groups(node, inputs, outputs)):
            if n:
                op_id = g.new_node()
            op_inputs = [(t, _input_flags(value, grad, i, i in conv, g.dtype[t]))
                         for i, t in enumerate(inputs) if i in used]
            for t, flags in op_inputs:
                g.edge(t, op_id, flags)
            self._produce(op_id, group_outputs)
            g.ops[op_id] = OpNode(ref, op_inputs, list(group_outputs), grad.kind, known=layout.known,
                                  uncertain=grad.uncertain if grad.maybe else None, grad_error=grad.grad_error,
                                  surrogate=_surrogate(node))
        if node.op == "Const" and outputs:
            number = _scalar_const(node)
            if number is not None:
                g.const_value[outputs[0]] = number

    def _op_gradient(self, node, inputs: list[int], outputs: list[int], layout) -> _OpGradient:
        """What is known of an op's gradient: from the oracle when a float input may get one, from the
        registry when none can; uncertain (MAYBE edges) for an op type this TensorFlow does not know or a
        gradient the oracle could not verify, unless only integer, bool or string results come out of it."""
        g = self.g
        op_type = node.op
        n_in = len(inputs)
        in_dtypes = tuple(g.dtype[t] for t in inputs)
        out_dtypes = tuple(g.dtype[o] for o in outputs) if not layout.known else layout.dtypes
        if not layout.known:
            grad = _OpGradient(None, (False,) * n_in, f"op type {op_type} is not known to this TensorFlow", True)
        elif any(carries_gradient(d) for d in in_dtypes):
            info = self.oracle.info(op_type, in_dtypes, layout.dtypes, node.attr,
                                    tuple(g.shape.get(t) for t in inputs))
            if info.kind is GradKind.RAISES:
                grad = _OpGradient(info.kind, info.passes, grad_error=info.reason)
            elif not info.verified:
                grad = _OpGradient(info.kind, (False,) * n_in, info.reason, True)
            else:
                grad = _OpGradient(info.kind, info.passes)
        else:
            grad = _OpGradient(registry_kind(op_type), (False,) * n_in)
        if grad.maybe and not any(carries_gradient(d) for d in out_dtypes):
            grad = grad._replace(maybe=False)  # no gradient can come back through it
        return grad

    def _produce(self, op_id: int, outputs: list[int]) -> None:
        """Join op node `op_id` to the results it computes."""
        for o in outputs:
            self.g.edge(op_id, o, VALUE | (GRAD if carries_gradient(self.g.dtype[o]) else 0))
            self.g.producer[o] = op_id

    def _wire_custom_gradient(self, node, ref, inputs, outputs, gradient_op_type) -> None:
        """A custom gradient: output k's gradient goes to the inputs its saved gradient function
        makes depend on upstream gradient k. Which input each of the function's results is the gradient of
        is recorded with the saved function (a None for each input that gets none, such as integer seeds);
        without that record, the results are taken to belong to the last inputs.
        Each output gets a node of its own, because the gradient mapping differs per output."""
        g = self.g
        grad_fn = self.lib.registered_gradients.get(gradient_op_type) or ""
        saved = grad_fn in self.lib.functions
        deps = self._gradient_dependencies(grad_fn) if saved else None
        unreadable = self._unreadable_module(grad_fn) if saved else None
        identity = node.op == "IdentityN"
        for k, o in enumerate(outputs):
            pseudo = g.new_node()
            flags = dict.fromkeys(inputs, 0)
            for t in ([inputs[k]] if identity and k < len(inputs) else inputs):
                flags[t] |= VALUE
            dead: list[int] = []
            if deps is not None and k < len(deps):
                reached, dead = self._custom_gradient_reach(grad_fn, deps[k], inputs, k)
                for t in reached:
                    flags[t] |= GRAD
            if unreadable:  # the gradient function's compiled module decides, and it cannot be read here
                flags = {t: f | MAYBE if f & GRAD else f for t, f in flags.items()}
            for t, f in flags.items():
                g.edge(t, pseudo, f)
            self._produce(pseudo, [o])
            g.ops[pseudo] = OpNode(ref, list(flags.items()), [o], None, custom_gradient=gradient_op_type,
                                   custom_gradient_saved=saved, dead_inputs=tuple(dead), uncertain=unreadable)

    def _gradient_dependencies(self, grad_fn: str) -> list[list[bool]]:
        """deps[k][j]: result j of the saved gradient function `grad_fn` depends on its argument k."""
        key = FunctionKey(grad_fn, tuple(self.lib.input_dtypes(self.lib.functions[grad_fn])))
        summary, n_ret = self.summary_of(key), len(self.ret_dtypes[key])
        return [[bool(mask >> j & 1) for j in range(n_ret)] for mask in summary.value]

    def _custom_gradient_reach(self, grad_fn: str, dep: list[bool], inputs: list[int],
                               k: int) -> tuple[list[int], list[int]]:
        """The float inputs that upstream gradient k reaches through the saved gradient function (`dep[j]`:
        its result j depends on it), and those it leaves without a gradient (dead)."""
        g = self.g
        n_in, n_ret = len(inputs), len(dep)
        positions = self.lib.gradient_result_inputs.get(grad_fn)
        if positions is None or len(positions) != n_ret:
            positions = tuple(range(n_in - n_ret, n_in))
        if n_ret == 0:  # the gradient function returns nothing: no input gets a gradient
            dead = [t for i, t in enumerate(inputs) if i != k and carries_gradient(g.dtype[t])]
        else:  # arguments the function gives None get no gradient from it; for tf.custom_gradient's
            # IdentityN the leading Nones are the forward results themselves (their gradient is the
            # custom one), so only Nones after the first given result are arguments left without one
            given = set(positions)
            dead = [t for i, t in enumerate(inputs) if i not in given and i > min(given)
                    and carries_gradient(g.dtype[t])]
        reached = []
        for idx, depends in zip(positions, dep):
            if 0 <= idx < n_in and carries_gradient(g.dtype[inputs[idx]]):
                if depends:
                    reached.append(inputs[idx])
                else:
                    dead.append(inputs[idx])
        return reached, dead

    def _unreadable_module(self, grad_fn: str) -> str | None:
        """Why the saved gradient function's results cannot be traced to its arguments: a compiled module
        (XlaCallModule) in it whose StableHLO this TensorFlow cannot read (everything would look connected)."""
        for nd in self.lib.functions[grad_fn].node_def:
            if nd.op == "XlaCallModule" and module_dependencies(nd.attr["module"].s) is None:
                return (f"the compiled module of XlaCallModule '{nd.name}' in {grad_fn} (the saved gradient) "
                        "cannot be read here, so which inputs it gives a gradient is not known")
        return None
