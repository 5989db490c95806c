"""Which (source, output) pairs carry a gradient, and which ops cut the others."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from .graph.dataflow import MAYBE, VALUE, Budget, Dataflow, OpNode
from .graph.dtypes import DT_BOOL, DT_RESOURCE, carries_gradient, dtype_name, is_float
from .graph.gradients import GradientOracle, GradKind
from .graph.reach import GRADIENT_EDGES, ReachMasks, Seeds
from .graph.summaries import Body, Program
from .model import Cut, FlowEntry, FlowStatus, OpRef, Output, Source
from .targets import AuditTarget
from .targets.saved_model import SignatureGraph, VariableInfo

PYFUNC_OPS = {"PyFunc", "PyFuncStateless", "EagerPyFunc"}
STOP_OPS = frozenset({"StopGradient", "PreventGradient"})
# Cuts that make TensorFlow raise when it builds the backward of the loaded function that holds them: it builds
# the backward of the whole signature function (nested calls included) as soon as the call runs under a tape.
BREAKS_THE_FUNCTION = frozenset({"no-gradient", "gradient-raises"})


@dataclass
class OpCut:
    """Everything known about one op that cuts gradient paths."""

    node: OpNode
    rule: str
    blocked_pairs: set[tuple[int, int]] = field(default_factory=set)  # pairs it fully blocks (with others)
    partial_pairs: set[tuple[int, int]] = field(default_factory=set)  # pairs still connected elsewhere
    # the op's value is piecewise constant in the inputs it cuts (an integer result, or measured on its kernel):
    # the true derivative along the cut path is zero almost everywhere. False: smooth there (TensorFlow does
    # not implement that derivative); None: not known
    piecewise: bool | None = None


def breaks_the_function(cut: OpCut) -> bool:
    """Whether differentiating the loaded signature raises because of this cut (a model saved without the
    custom gradient it uses raises LookupError for its IdentityN as well)."""
    return cut.rule in BREAKS_THE_FUNCTION or (cut.rule == "custom-gradient" and not cut.node.custom_gradient_saved)


@dataclass(frozen=True)
class UncapturedVariable:
    """A trainable variable the audited signature does not capture, and the other entry points that do."""

    variable: VariableInfo
    read_by: tuple[str, ...] = ()


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
    uncaptured_trainable: list[UncapturedVariable]
    gradient_functions: dict[str, str]  # gradient_op_type -> saved gradient function
    model: AuditTarget
    signature: SignatureGraph
    uncertain: dict[OpRef, Uncertain] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # every signature input (integer ones too) -> its tensor: the numeric checks read what an input feeds
    input_tensor: dict[str, int] = field(default_factory=dict)

    def source_names(self, mask: int) -> list[str]:
        return [self.sources[i].name for i in self.source_tensor if mask >> i & 1]

    def output_names(self, mask: int) -> list[str]:
        return [self.outputs[j].name for j in self.output_tensor if mask >> j & 1]

    def custom_gradients_behind_cuts(self) -> list[OpRef]:
        """The saved custom gradients whose results reach an output by value but along no gradient-carrying edge:
        behind a cut (a stop_gradient), where the model never runs them."""
        return [node.ref for node in self.graph.ops.values() if node.custom_gradient and node.custom_gradient_saved
                and self.op_masks(node)[1] and not self.op_masks(node, grad=True)[1]]

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
    if node.written_by:
        return "variable-state"
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


# Name scopes of library functions whose stop_gradient changes no gradient: tf.nn.moments (batch and layer
# normalisation) computes the variance around stop_gradient(mean), whose derivative there is zero;
# reduce_logsumexp (TensorFlow's and TensorFlow Probability's) shifts by stop_gradient(max) and adds it back,
# so the shift's derivative cancels exactly. Reporting them on every such model would be noise.
_EXACT_STOP_SCOPES = ("moments", "ReduceLogSumExp", "reduce_logsumexp")


def _exact_stop(node: OpNode, g: Dataflow) -> bool:
    name = node.ref.op_name
    if node.ref.op_type != "StopGradient":
        return False
    if _shift_added_back(node, g):
        return True
    if "/" not in name:
        return False
    scope = name.rsplit("/", 2)[-2]
    return any(scope == s or scope.startswith(s + "_") for s in _EXACT_STOP_SCOPES)


# Ops a shift passes through unchanged in value (reshaped, broadcast, selected where finite)
_PASS_THROUGH = frozenset({"Identity", "Reshape", "ExpandDims", "Squeeze", "SelectV2", "Select", "BroadcastTo",
                           "StopGradient"})


def _shift_added_back(node: OpNode, g: Dataflow) -> bool:
    """The logsumexp trick, whoever wrote it: s = stop_gradient(max(z)) is subtracted from z and added back to
    the result (log(sum(exp(z - s))) + s). The result does not depend on s, so the path through s carries a
    true derivative of zero and the stop loses nothing."""
    def from_max(t: int, depth: int) -> bool:
        for p in g.producers(t):
            op = g.ops[p]
            if op.ref.op_type == "Max":
                return True
            if depth and op.ref.op_type in _PASS_THROUGH and any(
                    from_max(u, depth - 1) for u, f in op.inputs if f & VALUE and carries_gradient(g.dtype[u])):
                return True
        return False

    if not node.outputs or not any(from_max(t, 4) for t, f in node.inputs if f & VALUE):
        return False
    subtracted = added = False
    stack, seen = list(node.outputs), set[int]()
    while stack:
        t = stack.pop()
        if t in seen or len(seen) > 64:
            continue
        seen.add(t)
        for op_id, k in g.consumers(t):
            op = g.ops[op_id]
            kind = op.ref.op_type
            subtracted |= kind == "Sub" and k == 1
            added |= kind in ("Add", "AddV2")
            if kind in _PASS_THROUGH:
                stack.extend(op.outputs)
    return subtracted and added


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


@dataclass(frozen=True)
class _Root:
    """The signature's root body: a tensor by its name in the signature, and the captured variables' tensors."""

    body: Body
    tensor: Callable[[str], int]
    variables: dict[int, VariableInfo]


def analyse(model: AuditTarget, sig: SignatureGraph, oracle: GradientOracle,
            budget: Budget | None = None) -> StaticAnalysis:
    """The static pass on one signature: its functions composed from their summaries, each (source, output)
    pair's status, and the ops that cut or may cut each pair. `budget` bounds the nodes and time it spends; by
    default its deadline counts from when the model began to be read (a SavedModel's parse is part of it)."""
    with _no_cyclic_gc():
        return _analyse(model, sig, oracle, budget or Budget(started=getattr(model, "started", None)))


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The pass allocates a few small objects per node, none in reference cycles; the cyclic collector's full
    scans of a growing heap made its time grow faster than the graph (a third of it on 40,000 ops)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _analyse(model: AuditTarget, sig: SignatureGraph, oracle: GradientOracle, budget: Budget) -> StaticAnalysis:
    program = Program(model.library, oracle, budget)
    root = _root(program, model, sig)
    sources, root_sources = _sources(sig, root)
    outputs = [Output(o.name, dtype_name(o.dtype), o.shape) for o in sig.outputs]
    root_outputs = {j: root.tensor(o.tensor) for j, o in enumerate(sig.outputs) if is_float(o.dtype)}
    composed = program.compose(root.body, _seeds(root_sources, root_outputs))
    g, to, masks = composed.graph, composed.root_nodes, composed.masks
    program.add_gradient_graphs(g)
    source_tensor = {i: to[t] for i, t in root_sources.items()}
    output_tensor = {j: to[t] for j, t in root_outputs.items()}
    other_output_tensor = {j: to[root.tensor(o.tensor)] for j, o in enumerate(sig.outputs) if j not in output_tensor}

    status = _pair_status(masks, source_tensor, output_tensor)
    uncertain = _uncertain_pairs(g, masks, source_tensor, output_tensor)
    for u in uncertain.values():
        for pair in u.pairs:
            status[pair] = "unknown"
    cuts = _cuts(g, masks, status, source_tensor, output_tensor, _node_attrs(model, sig, oracle))
    flow = _flow_entries(sources, outputs, status, cuts, uncertain)
    return StaticAnalysis(g, sources, outputs, source_tensor, output_tensor, other_output_tensor,
                          masks.reach_value, masks.reach_grad, masks.to_output_value, masks.to_output_grad,
                          flow, cuts, _uncaptured_trainable(model, sig), model.library.registered_gradients,
                          model, sig, uncertain, _uncertain_notes(uncertain),
                          {spec.name: to[root.tensor(spec.tensor)] for spec in sig.inputs})


def _root(program: Program, model: AuditTarget, sig: SignatureGraph) -> _Root:
    """The body the signature starts from: its own GraphDef nodes, or its root function."""
    if sig.nodes is not None:
        body, outs = program.root_graph(sig.nodes, sig.where)

        def node_output(name: str) -> int:
            node, _, idx = name.partition(":")
            return outs[node][int(idx or 0)]

        return _Root(body, node_output, {outs[n][0]: v for n, v in sig.variables.items() if n in outs and outs[n]})
    root = sig.function or ""
    body = program.root_function(root)
    fdef = model.library.functions[root]
    by_name = {a.name: t for a, t in zip(fdef.signature.input_arg, body.args)}
    by_name |= {a.name: t for a, t in zip(fdef.signature.output_arg, body.rets)}
    return _Root(body, by_name.__getitem__, {by_name[n]: v for n, v in sig.variables.items()})


def _sources(sig: SignatureGraph, root: _Root) -> tuple[list[Source], dict[int, int]]:
    """The signature's inputs and trainable variables, and each differentiable one's tensor."""
    sources: list[Source] = []
    source_tensor: dict[int, int] = {}
    for spec in sig.inputs:
        diff = carries_gradient(spec.dtype) and spec.dtype != DT_RESOURCE
        if diff:
            source_tensor[len(sources)] = root.tensor(spec.tensor)
        sources.append(Source(spec.name, "input", dtype_name(spec.dtype), spec.shape, diff))
    for t, v in sorted(root.variables.items(), key=lambda kv: kv[1].name):
        if v.trainable:
            source_tensor[len(sources)] = t
            sources.append(Source(v.name, "variable", dtype_name(v.dtype), v.shape, is_float(v.dtype)))
    return sources, source_tensor


def _seeds(source_tensor: dict[int, int], output_tensor: dict[int, int]) -> Seeds:
    """One bit per source where it enters, one per output where it leaves."""
    sources = {t: 1 << i for i, t in source_tensor.items()}
    outputs: dict[int, int] = {}
    for j, t in output_tensor.items():
        outputs[t] = outputs.get(t, 0) | 1 << j
    return Seeds(value=sources, grad=dict(sources), out_value=outputs, out_grad=dict(outputs))


def _pair_status(masks: ReachMasks, source_tensor: dict[int, int],
                 output_tensor: dict[int, int]) -> dict[tuple[int, int], FlowStatus]:
    status: dict[tuple[int, int], FlowStatus] = {}
    for i in source_tensor:
        for j, t in output_tensor.items():
            status[i, j] = ("connected" if masks.reach_grad[t] >> i & 1 else
                            "blocked" if masks.reach_value[t] >> i & 1 else "disconnected")
    return status


def _cut_sources(g: Dataflow, masks: ReachMasks, node: OpNode, op_id: int) -> int:
    """The sources whose gradient this op stops: they reach an input whose edge carries their value but no
    gradient (shape reads aside), or a saved custom gradient gives that input none."""
    src = 0
    if node.custom_gradient and node.custom_gradient_saved:
        # The saved gradient function decides; it cuts where it gives an argument no gradient
        # although the output's value depends on that argument's sources.
        value = 0
        for t, f in node.inputs:
            if f & VALUE:
                value |= masks.reach_value[t]
        for t in node.dead_inputs:
            src |= masks.reach_grad[t] & value
    elif not _exact_stop(node, g):
        for t, f in node.inputs:
            if f & VALUE and not f & GRADIENT_EDGES and carries_gradient(g.dtype[t]):  # shape reads: no cut
                src |= masks.reach_grad[t]
    # what a variable read gives back of a value written into it carries no gradient; the variable's own part
    # (a trainable variable written with itself, kernel * mask) is GA112's, which the read still differentiates
    own = masks.reach_grad[node.inputs[0][0]] if node.written_values and node.inputs else 0
    for t in node.written_values:
        if carries_gradient(g.dtype[t]):
            src |= masks.reach_grad[t] & ~own
    if masks.reach_grad[op_id] and node.outputs and not any(carries_gradient(g.dtype[o]) for o in node.outputs):
        src |= masks.reach_grad[op_id]  # a gradient enters, but no output can carry one back: a dead end
    return src


def _cut_candidates(g: Dataflow, masks: ReachMasks, status: dict[tuple[int, int], FlowStatus],
                    source_tensor: dict[int, int], output_tensor: dict[int, int]) -> dict[tuple[int, int], list]:
    """Candidate cuts per pair, in four tiers: (0) the op's float result still reaches the output along
    gradient-carrying edges; (1) its integer result is turned back into a float value of the output; (2) its
    bool result is; (3) any forward path. Tiers 0 and 1 cut paths of their own, round(x) and float(int(x))
    alike; a comparison's bool result gates a path (a ReLU-style mask x * cast(x > 0) has the gradient of its
    value almost everywhere, a cond's predicate picks a branch) rather than cutting one, so it explains a
    blocked pair only when no number path does, and a connected pair never."""
    tiers: dict[tuple[int, int], list[list[OpNode]]] = {}
    for op_id, node in g.ops.items():
        src = _cut_sources(g, masks, node, op_id)
        if not src:
            continue
        reach = [0, 0, 0, 0]
        for o in node.outputs:
            reach[0] |= masks.to_output_grad[o]
            if not carries_gradient(g.dtype[o]):
                reach[2 if g.dtype[o] == DT_BOOL else 1] |= masks.converted_to_output[o]
            reach[3] |= masks.to_output_value[o]
        for i in source_tensor:
            if src >> i & 1:
                for j in output_tensor:
                    for tier in range(4 if status[i, j] == "blocked" else 2):  # unknown pairs: as connected
                        if reach[tier] >> j & 1:
                            tiers.setdefault((i, j), [[], [], [], []])[tier].append(node)
                            break
    return tiers


def _cuts(g: Dataflow, masks: ReachMasks, status: dict[tuple[int, int], FlowStatus], source_tensor: dict[int, int],
          output_tensor: dict[int, int], flat: Callable[[OpNode, Dataflow], tuple]) -> dict[OpRef, OpCut]:
    """Each pair's cuts: every candidate whose result reaches the output as a number (tiers 0 and 1: each cuts a
    path of its own, so stop_gradient(h) + float(argmax(h)) names both), or else its first non-empty tier of
    gates and forward paths, without those another candidate shadows."""
    tiers = _cut_candidates(g, masks, status, source_tensor, output_tensor)
    shadowed = _shadowed(g, tiers, output_tensor)
    cuts: dict[OpRef, OpCut] = {}
    for (i, j), found in tiers.items():
        nodes = found[0] + found[1] or found[2] or found[3]
        kept = [n for n in nodes if (id(n), j) not in shadowed] or nodes
        for node in kept:
            cut = cuts.get(node.ref) or cuts.setdefault(node.ref, _new_cut(node, g, flat))
            (cut.blocked_pairs if status[i, j] == "blocked" else cut.partial_pairs).add((i, j))
    return cuts


def _new_cut(node: OpNode, g: Dataflow, flat: Callable[[OpNode, Dataflow], tuple]) -> OpCut:
    """The cut's rule, and whether its op is piecewise constant where it cuts: an integer result always is; a
    float op whose registered gradient gives an input none is asked of its own kernel (`flat`). One that is
    smooth there (Betainc's a and b) is not piecewise constant: TensorFlow does not implement that derivative."""
    rule = cut_rule(node, g)
    if rule == "integer-path":
        return OpCut(node, rule, piecewise=True)
    if rule != "zero-gradient":
        return OpCut(node, rule)
    if not any(carries_gradient(g.dtype[o]) for o in node.outputs):
        return OpCut(node, rule, piecewise=True)
    cut_inputs = [k for k, (t, f) in enumerate(node.inputs)
                  if f & VALUE and not f & GRADIENT_EDGES and carries_gradient(g.dtype[t])]
    per_input = flat(node, g)
    measured = [per_input[k] for k in cut_inputs if k < len(per_input)]
    if measured and any(m is False for m in measured):
        return OpCut(node, "not-differentiable", piecewise=False)
    return OpCut(node, rule, piecewise=True if measured and all(measured) else None)


def _node_attrs(model: AuditTarget, sig: SignatureGraph, oracle: GradientOracle) -> Callable[[OpNode, Dataflow], tuple]:
    """Per input of a cut op: is its value piecewise constant there (GradientOracle.flat_inputs), the op's
    attributes read from its NodeDef in the model (looked up only for the few ops that cut)."""
    by_name: dict[str, dict] = {}

    def flat(node: OpNode, g: Dataflow) -> tuple:
        ref = node.ref
        if ref.function not in by_name:
            fdef = model.library.functions.get(ref.function)
            by_name[ref.function] = {n.name: n for n in (fdef.node_def if fdef is not None else (sig.nodes or []))}
        nd = by_name[ref.function].get(ref.op_name)
        if nd is None:
            return ()
        return oracle.flat_inputs(ref.op_type, tuple(g.dtype[t] for t, _ in node.inputs),
                                  tuple(g.dtype[o] for o in node.outputs), nd.attr,
                                  tuple(g.shape.get(t) for t, _ in node.inputs))

    return flat


def _flow_entries(sources: list[Source], outputs: list[Output], status: dict[tuple[int, int], FlowStatus],
                  cuts: dict[OpRef, OpCut], uncertain: dict[OpRef, Uncertain]) -> list[FlowEntry]:
    """One FlowEntry per (differentiable source, float output) pair, its cuts ordered by function and op."""
    by_place = sorted(cuts.items(), key=lambda kv: (kv[0].function, kv[0].op_name))
    # TensorFlow builds the signature's backward as a whole: one op whose gradient raises (or is missing) on any
    # path makes differentiating it raise for every pair, also those that never reach that op
    breaking = [(ref, c) for ref, c in by_place if breaks_the_function(c)]
    flow = []
    for (i, j), pair_status in status.items():
        blocked_by = tuple(Cut(ref, c.rule, c.piecewise) for ref, c in by_place
                           if (i, j) in c.blocked_pairs or (breaking and breaks_the_function(c)))
        if breaking:
            flow.append(FlowEntry(sources[i].name, outputs[j].name, "blocked", blocked_by, raises=True))
            continue
        unknown_by = tuple(sorted((ref for ref, u in uncertain.items() if (i, j) in u.pairs),
                                  key=lambda r: (r.function, r.op_name)))
        partial_by = tuple(Cut(ref, c.rule, c.piecewise) for ref, c in by_place
                           if (i, j) in c.partial_pairs and pair_status == "connected")
        flow.append(FlowEntry(sources[i].name, outputs[j].name, pair_status, blocked_by, unknown_by, partial_by))
    return flow


def _uncaptured_trainable(model: AuditTarget, sig: SignatureGraph) -> list[UncapturedVariable]:
    """Trainable variables of the saved object that this signature does not capture: training through it gives
    them no gradient (Keras: "Gradients do not exist for variables"), with the other entry points that read
    them."""
    captured = {v.identity for v in sig.variables.values()}
    uncaptured = [v for v in model.all_variables() if v.trainable and v.identity not in captured]
    readers = model.entry_point_readers() if uncaptured and hasattr(model, "entry_point_readers") else {}
    return [UncapturedVariable(v, tuple(sorted(readers.get(v.identity, set()) - {sig.key}))) for v in uncaptured]


def _uncertain_pairs(g: Dataflow, masks: ReachMasks, source_tensor: dict[int, int],
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
                src |= masks.reach_grad[t]
        dst = 0
        for o in node.outputs:
            dst |= masks.to_output_grad[o]
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
