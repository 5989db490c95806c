"""Which (source, output) pairs carry a gradient, and which ops cut the others."""

from __future__ import annotations

from dataclasses import dataclass, field

from .graph.dataflow import CONVERT, GRAD, MAYBE, VALUE, Dataflow, DataflowBuilder, OpNode
from .graph.dtypes import DT_BOOL, DT_RESOURCE, carries_gradient, dtype_name, is_float
from .graph.gradfn import GradFnAnalyzer
from .graph.gradients import GradientOracle, GradKind
from .graph.reach import backward_masks, forward_masks, topological_order
from .model import Cut, FlowEntry, OpRef, Output, Source
from .targets.saved_model import SavedModelFile, SignatureGraph, VariableInfo

PYFUNC_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
STOP_OPS = {"StopGradient", "PreventGradient"}


@dataclass
class OpCut:
    """Everything known about one op that cuts gradient paths."""

    node: OpNode
    rule: str
    blocked_pairs: set[tuple[int, int]] = field(default_factory=set)  # pairs it fully blocks (with others)
    partial_pairs: set[tuple[int, int]] = field(default_factory=set)  # pairs still connected elsewhere


@dataclass
class Uncertain:
    """An op whose gradient cannot be known here, and the (source, output) pairs whose paths it lies on."""

    node: OpNode
    pairs: set[tuple[int, int]] = field(default_factory=set)


@dataclass
class StaticAnalysis:
    graph: Dataflow
    sources: list[Source]
    outputs: list[Output]
    source_tensor: dict[int, int]  # index in `sources` -> tensor id (differentiable sources only)
    output_tensor: dict[int, int]  # index in `outputs` -> tensor id (float outputs: gradient targets)
    other_output_tensor: dict[int, int]  # index in `outputs` -> tensor id (integer, bool, string outputs)
    reach_value: list[int]  # sources reaching each node by value
    # sources reaching each node along edges that carry (or, through an op whose gradient cannot be known
    # here, may carry) a gradient
    reach_grad: list[int]
    to_output_value: list[int]  # outputs each node reaches by value
    to_output_grad: list[int]  # outputs each node reaches along edges that carry (or may carry) a gradient
    flow: list[FlowEntry]
    cuts: dict[OpRef, OpCut]
    uncaptured_trainable: list[VariableInfo]
    gradient_functions: dict[str, str]  # gradient_op_type -> saved gradient function
    model: SavedModelFile
    signature: SignatureGraph
    uncertain: dict[OpRef, Uncertain] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # every signature input (integer ones too) -> its tensor: the numeric checks read what an input feeds
    input_tensor: dict[str, int] = field(default_factory=dict)

    def source_names(self, mask: int) -> list[str]:
        return [self.sources[i].name for i in self.source_tensor if mask >> i & 1]

    def output_names(self, mask: int) -> list[str]:
        return [self.outputs[j].name for j in self.output_tensor if mask >> j & 1]

    def op_masks(self, node: OpNode, grad: bool = False) -> tuple[int, int]:
        """(sources reaching the op, outputs its results reach): by value, or along gradient edges."""
        reach, to_output = (self.reach_grad, self.to_output_grad) if grad else (self.reach_value,
                                                                                  self.to_output_value)
        src = 0
        for t, _ in node.inputs:
            src |= reach[t]
        out = 0
        for o in node.outputs:
            out |= to_output[o]
        return src, out


def cut_rule(node: OpNode, g: Dataflow) -> str:
    t = node.ref.op_type
    if t in PYFUNC_OPS:
        return "py-function"
    if t in STOP_OPS and node.grad_kind is not GradKind.RAISES:
        return "stop-gradient"
    if node.grad_kind is GradKind.RAISES:
        return "gradient-raises"
    if not node.known:
        # an op this TensorFlow does not know is a cut only where all its results are integers or bools
        # (their dtypes read from the known ops that use them); elsewhere its pairs are "unknown"
        return "integer-path" if not any(carries_gradient(g.dtype[o]) for o in node.outputs) else "unknown-op"
    if node.custom_gradient:
        return "custom-gradient"
    if not any(carries_gradient(g.dtype[o]) for o in node.outputs):
        # No gradient is ever asked of an op with only integer/bool results, so a missing gradient
        # cannot raise: the cut is the conversion itself (ArgMax's registered gradient says so).
        registered = node.grad_kind is GradKind.REGISTERED and t != "Cast"
        return "zero-gradient" if registered else "integer-path"
    if node.grad_kind is GradKind.MISSING:
        return "no-gradient"
    if node.grad_kind is GradKind.NOT_DIFFERENTIABLE:
        return "not-differentiable"
    return "zero-gradient"


def _value_to_outputs(g: Dataflow, order, to_out: list[int]) -> list[int]:
    """For non-float tensors: the outputs their *value* reaches by being converted back into a float
    (Cast, a Select condition), possibly after integer arithmetic. Shapes and indices do not count."""
    masks = [0] * len(g.dtype)
    is_op = g.ops
    for a in reversed(order.nodes):
        if a in is_op:
            m = 0
            for o in is_op[a].outputs:
                if not carries_gradient(g.dtype[o]):
                    m |= masks[o]
            masks[a] = m
        elif not carries_gradient(g.dtype[a]):
            m = 0
            for b, f in zip(g.succ[a], g.flags[a]):
                if f & CONVERT:
                    m |= to_out[b]
                elif f & VALUE:
                    m |= masks[b]
            masks[a] = m
    return masks


# Name scopes of library functions whose stop_gradient changes no gradient: tf.nn.moments (batch and layer
# normalisation) computes the variance around stop_gradient(mean), whose derivative there is zero;
# reduce_logsumexp (TensorFlow's and TensorFlow Probability's) shifts by stop_gradient(max) and adds it back,
# so the shift's derivative cancels exactly. Reporting them on every such model would be noise.
_EXACT_STOP_SCOPES = ("moments", "ReduceLogSumExp", "reduce_logsumexp")


def _exact_stop(node: OpNode) -> bool:
    name = node.ref.op_name
    if node.ref.op_type != "StopGradient" or "/" not in name:
        return False
    scope = name.rsplit("/", 2)[-2]
    return any(scope == s or scope.startswith(s + "_") for s in _EXACT_STOP_SCOPES)


def _shadowed(g: Dataflow, tiers, output_tensor: dict[int, int]) -> set[tuple[int, int]]:
    """(id(op), output) for candidate cuts whose every forward path to the output runs through another
    candidate of that output: Keras' argmax, say, checks for -0.0 with Equal and Bitcast before
    the ArgMax that really decides; naming ArgMax alone says it."""
    by_output: dict[int, dict[int, OpNode]] = {}
    for (_, j), found in tiers.items():
        for nodes in found[1:]:
            for node in nodes:
                by_output.setdefault(j, {})[id(node)] = node
    ids = {id(node): op_id for op_id, node in g.ops.items()}
    out = set()
    for j, nodes in by_output.items():
        if len(nodes) < 2:
            continue
        blockers = {ids[k] for k in nodes}
        target = output_tensor[j]
        for key, node in nodes.items():
            stack, seen, reached = list(node.outputs), set(), False
            while stack and not reached:
                a = stack.pop()
                if a == target:
                    reached = True
                    break
                for b, f in zip(g.succ[a], g.flags[a]):
                    if f & VALUE and b not in seen and b not in blockers:
                        seen.add(b)
                        stack.append(b)
            if not reached:
                out.add((key, j))
    return out


def analyse(model: SavedModelFile, sig: SignatureGraph, oracle: GradientOracle) -> StaticAnalysis:
    builder = DataflowBuilder(model.library, oracle, GradFnAnalyzer(model.library, oracle))
    if sig.nodes is not None:
        outs = builder.add_graph_nodes(sig.nodes, sig.where)

        def tensor(name: str) -> int:
            node, _, idx = name.partition(":")
            return outs[node][int(idx or 0)]

        var_tensors = {outs[n][0]: v for n, v in sig.variables.items() if n in outs and outs[n]}
    else:
        root = sig.function or ""
        args = builder.new_arg_tensors(root)
        rets = builder.add_function(root, args)
        fdef = model.library.functions[root]
        by_name = {a.name: t for a, t in zip(fdef.signature.input_arg, args)}
        by_name |= {a.name: t for a, t in zip(fdef.signature.output_arg, rets)}

        def tensor(name: str) -> int:
            return by_name[name]

        var_tensors = {by_name[n]: v for n, v in sig.variables.items()}
    g = builder.g

    sources: list[Source] = []
    source_tensor: dict[int, int] = {}
    for spec in sig.inputs:
        diff = carries_gradient(spec.dtype) and spec.dtype != DT_RESOURCE
        if diff:
            source_tensor[len(sources)] = tensor(spec.tensor)
        sources.append(Source(spec.name, "input", dtype_name(spec.dtype), spec.shape, diff))
    for t, v in sorted(var_tensors.items(), key=lambda kv: kv[1].name):
        if v.trainable:
            source_tensor[len(sources)] = t
            sources.append(Source(v.name, "variable", dtype_name(v.dtype), v.shape, is_float(v.dtype)))
    outputs = [Output(o.name, dtype_name(o.dtype), o.shape) for o in sig.outputs]
    output_tensor = {j: tensor(o.tensor) for j, o in enumerate(sig.outputs) if is_float(o.dtype)}
    other_output_tensor = {j: tensor(o.tensor) for j, o in enumerate(sig.outputs) if j not in output_tensor}

    order = topological_order(g)
    seeds = {t: 1 << i for i, t in source_tensor.items()}
    F = forward_masks(g, seeds, VALUE, order)
    # Ops whose gradient cannot be known here pass as if they carried one: the pairs that need them are
    # then "unknown" (below), and every other pair's status and cuts are exactly what they would be.
    G = forward_masks(g, seeds, GRAD | MAYBE, order)
    out_seeds: dict[int, int] = {}
    for j, t in output_tensor.items():
        out_seeds[t] = out_seeds.get(t, 0) | 1 << j
    B = backward_masks(g, out_seeds, VALUE, order)
    C = backward_masks(g, out_seeds, GRAD | MAYBE, order)
    V = _value_to_outputs(g, order, B)

    status: dict[tuple[int, int], str] = {}
    for i in source_tensor:
        for j, t in output_tensor.items():
            status[i, j] = ("connected" if G[t] >> i & 1 else "blocked" if F[t] >> i & 1 else "disconnected")
    uncertain = _uncertain_pairs(g, G, C, source_tensor, output_tensor)
    for u in uncertain.values():
        for pair in u.pairs:
            status[pair] = "unknown"

    # Candidate cuts per pair, in three tiers: (0) the op's float result still reaches the output along
    # gradient-carrying edges; (1) its integer/bool result is turned back into a float value of the
    # output; (2) any forward path. A blocked pair is explained by its first non-empty tier; a
    # connected pair by tiers 0 and 1 (a path that is cut while others carry a gradient: round(x) and
    # float(int(x)) alike), except a comparison's bool result, which gates a path (a ReLU-style mask
    # x * cast(x > 0) has the gradient of its value almost everywhere) rather than cutting one.
    cuts: dict[OpRef, OpCut] = {}
    tiers: dict[tuple[int, int], list[list[OpNode]]] = {}
    for op_id, node in g.ops.items():
        src = 0
        if node.custom_gradient and node.custom_gradient_saved:
            # The saved gradient function decides; it cuts where it gives an argument no gradient
            # although the output's value depends on that argument's sources.
            value = 0
            for t, f in node.inputs:
                if f & VALUE:
                    value |= F[t]
            for t in node.dead_inputs:
                src |= G[t] & value
        elif not _exact_stop(node):
            for t, f in node.inputs:
                if f & VALUE and not f & (GRAD | MAYBE) and carries_gradient(g.dtype[t]):  # shape reads: no cut
                    src |= G[t]
        if G[op_id] and node.outputs and not any(carries_gradient(g.dtype[o]) for o in node.outputs):
            src |= G[op_id]  # a gradient enters, but no output can carry one back: a dead end
        if not src:
            continue
        reach = [0, 0, 0]
        by_number = 0  # outputs an integer result reaches as a value (a bool one only gates)
        for o in node.outputs:
            reach[0] |= C[o]
            if not carries_gradient(g.dtype[o]):
                reach[1] |= V[o]
                if g.dtype[o] != DT_BOOL:
                    by_number |= V[o]
            reach[2] |= B[o]
        for i in source_tensor:
            if src >> i & 1:
                for j in output_tensor:
                    blocked = status[i, j] == "blocked"
                    for tier in range(3 if blocked else 2):  # unknown pairs: as connected
                        if tier == 1 and not blocked and not by_number >> j & 1:
                            continue
                        if reach[tier] >> j & 1:
                            tiers.setdefault((i, j), [[], [], []])[tier].append(node)
                            break
    shadowed = _shadowed(g, tiers, output_tensor)
    for (i, j), found in tiers.items():
        for nodes in found:
            if nodes:
                kept = [n for n in nodes if (id(n), j) not in shadowed] or nodes
                for node in kept:
                    cut = cuts.get(node.ref) or cuts.setdefault(node.ref, OpCut(node, cut_rule(node, g)))
                    (cut.blocked_pairs if status[i, j] == "blocked" else cut.partial_pairs).add((i, j))
                break

    flow = []
    for i in source_tensor:
        for j in output_tensor:
            blocked_by = tuple(Cut(ref, c.rule) for ref, c in sorted(cuts.items(), key=lambda kv: (
                kv[0].function, kv[0].op_name)) if (i, j) in c.blocked_pairs)
            unknown_by = tuple(sorted((ref for ref, u in uncertain.items() if (i, j) in u.pairs),
                                      key=lambda r: (r.function, r.op_name)))
            partial_by = tuple(Cut(ref, c.rule) for ref, c in sorted(cuts.items(), key=lambda kv: (
                kv[0].function, kv[0].op_name)) if (i, j) in c.partial_pairs and status[i, j] == "connected")
            flow.append(FlowEntry(sources[i].name, outputs[j].name, status[i, j], blocked_by, unknown_by,
                                  partial_by))

    captured = {v.name for v in sig.variables.values()}
    uncaptured = [v for v in model.all_variables() if v.trainable and v.name not in captured]
    if uncaptured and hasattr(model, "entry_point_variables"):  # used by another signature or saved function
        elsewhere = model.entry_point_variables()
        uncaptured = [v for v in uncaptured if v.name not in elsewhere]
    return StaticAnalysis(g, sources, outputs, source_tensor, output_tensor, other_output_tensor, F, G, B, C,
                          flow, cuts,
                          list({v.name: v for v in uncaptured}.values()), model.library.registered_gradients,
                          model, sig, uncertain, _uncertain_notes(uncertain),
                          {spec.name: tensor(spec.tensor) for spec in sig.inputs})


def _uncertain_pairs(g: Dataflow, reach_grad: list[int], to_output_grad: list[int], source_tensor: dict[int, int],
                     output_tensor: dict[int, int]) -> dict[OpRef, Uncertain]:
    """Each op whose gradient cannot be known here, with the pairs whose float paths run through it: a source
    reaches one of its float inputs, and one of its results reaches the output, along (possible) gradient
    edges."""
    out: dict[OpRef, Uncertain] = {}
    for node in g.ops.values():
        if node.uncertain is None:
            continue
        src = 0
        for t, f in node.inputs:
            if f & MAYBE:
                src |= reach_grad[t]
        dst = 0
        for o in node.outputs:
            dst |= to_output_grad[o]
        pairs = {(i, j) for i in source_tensor if src >> i & 1 for j in output_tensor if dst >> j & 1}
        if pairs:
            out.setdefault(node.ref, Uncertain(node)).pairs |= pairs
    return out


def _uncertain_notes(uncertain: dict[OpRef, Uncertain]) -> list[str]:
    """One note per known op type whose gradient could not be verified (unknown op types are findings)."""
    by_type: dict[str, list[Uncertain]] = {}
    for u in uncertain.values():
        if u.node.known:
            by_type.setdefault(u.node.ref.op_type, []).append(u)
    return [f"whether a gradient passes {t} ({len(us)} op(s), e.g. '{us[0].node.ref.op_name}' in "
            f"{us[0].node.ref.function}) cannot be verified here: {us[0].node.uncertain}; the pairs through it "
            "are unknown" for t, us in sorted(by_type.items())]
