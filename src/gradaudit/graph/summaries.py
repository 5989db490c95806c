"""Each function analysed once, calls composed from summaries: the functions a root runs are put in call order
(callees first; a function that calls itself is a malformed model), each body is built once per argument dtypes
with its calls as summary edges, and the composed graph holds a copy of a body per distinct calling context.

A calling context is what the caller's masks say at the call: which sources reach each argument (by value,
along gradient edges) and which outputs each result reaches (by value, along gradient edges, converted). Calls
with the same context give every node of the body the same masks, so one copy can serve them all and the
composed graph's masks are those of the graph with every call inlined. Nothing here recurses on depth."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from .dataflow import (
    SUMMARY,
    VALUE,
    Budget,
    Dataflow,
    DataflowBuilder,
    FunctionKey,
    OpNode,
    Site,
    Summary,
    Targets,
    call_targets,
    set_bits,
)
from .gradients import GradientOracle
from .library import Library
from .reach import (
    GRADIENT_EDGES,
    Order,
    ReachMasks,
    Seeds,
    backward_masks,
    converted_masks,
    forward_masks,
    reach_masks,
    topological_order,
)

# Calls in the same context with different input tensors get copies of their own up to this many: the masks
# would be the same in one copy, but the lints that look across a call at what its arguments are (a constant, the
# op computing them) see each caller's own. Beyond it, calls in that context share the copies (hostile sizes).
COPIES_PER_CONTEXT = 8


class RecursiveCall(ValueError):
    """A function that calls itself, directly or through others: TensorFlow cannot run it."""


@dataclass
class Body:
    """One function body (or the root graph) built once: its Dataflow with calls as Sites."""

    g: Dataflow
    args: list[int]
    rets: list[int]
    sites: list[Site]
    order: Order
    own: list[int] = field(default_factory=list)  # local node -> index among the body's own nodes, -1 for sites
    n_own: int = 0
    site_of: dict[int, tuple[int, bool, int]] = field(default_factory=dict)  # site node -> (site, is_arg, index)

    def __post_init__(self) -> None:
        for s, site in enumerate(self.sites):
            for k, a in enumerate(site.args):
                self.site_of[a] = (s, True, k)
            for m, r in enumerate(site.rets):
                self.site_of[r] = (s, False, m)
        self.own = [-1] * len(self.g.dtype)
        for x in range(len(self.g.dtype)):
            if x not in self.site_of:
                self.own[x] = self.n_own
                self.n_own += 1


# what a call's masks say at its arguments (value, grad) and results (value, grad, converted)
Context = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]


@dataclass
class Instance:
    """One copy of a body in the composed graph: for the root, or for a callee in one calling context."""

    body: Body
    masks: ReachMasks | None = None  # over its body's nodes, in its context
    base: int = -1  # its first node in the composed graph
    callees: list[Instance] = field(default_factory=list)  # per site of its body


@dataclass(frozen=True)
class Composed:
    """The composed graph, the root body's node -> its node there, and the masks of every node (each copy's
    own, computed in its context: those of the graph with every call inlined)."""

    graph: Dataflow
    root_nodes: list[int]
    masks: ReachMasks


class Program:
    """The bodies and summaries of every function a root runs, and their composition into one Dataflow."""

    def __init__(self, library: Library, oracle: GradientOracle, budget: Budget):
        self.lib = library
        self.oracle = oracle
        self.budget = budget
        self.bodies: dict[FunctionKey, Body] = {}
        self.summaries: dict[FunctionKey, Summary] = {}  # computed when a caller first needs one
        self.ret_dtypes: dict[FunctionKey, tuple[int, ...]] = {}
        self._targets: dict[FunctionKey, Targets] = {}

    # -- bodies and summaries, callees first --------------------------------------------------
    def root_graph(self, nodes, where: str) -> tuple[Body, dict[str, list[int]]]:
        """The body of a root GraphDef's nodes, and node name -> its output tensors."""
        nodes = list(nodes)
        targets = [call_targets(self.lib, node) for node in nodes]
        self._summarise(c for calls in targets for c in calls)
        builder = self._builder()
        outs = builder.add_graph_nodes(nodes, where, targets)
        return self._body(builder, [], []), outs

    def root_function(self, name: str) -> Body:
        key = FunctionKey(name, tuple(self.lib.input_dtypes(self.lib.functions[name])))
        self._summarise([(key, True)])
        return self.bodies[key]

    def _builder(self) -> DataflowBuilder:
        return DataflowBuilder(self.lib, self.oracle, self.summary_of, self.ret_dtypes, self.budget)

    def summary_of(self, key: FunctionKey) -> Summary:
        if key not in self.summaries:
            body = self.bodies[key]
            self.budget.charge_masks(len(body.g.dtype), len(body.args), 2 * len(body.rets))
            self.summaries[key] = _summary(body)
        return self.summaries[key]

    def _body(self, builder: DataflowBuilder, args: list[int], rets: list[int]) -> Body:
        return Body(builder.g, args, rets, builder.sites, topological_order(builder.g))

    def _callees(self, key: FunctionKey) -> list[tuple[FunctionKey, bool]]:
        if key not in self._targets:
            self._targets[key] = [call_targets(self.lib, node) for node in self.lib.functions[key.name].node_def]
        return [c for calls in self._targets[key] for c in calls]

    def _summarise(self, roots) -> None:
        """Build and summarise every function reachable from `roots`, callees before callers (an iterative
        depth-first search over the calls; a call back into a function still open is a recursion)."""
        pending = list(roots)
        open_: set[FunctionKey] = set()
        while pending:
            key, _ = pending.pop()
            if key in self.bodies or key in open_:
                continue
            stack = [(key, iter(self._callees(key)))]
            open_.add(key)
            while stack:
                current, calls = stack[-1]
                for callee, wired in calls:
                    if callee in self.bodies:
                        continue
                    if not wired:  # only named by an attr: no result flows back, no order needed
                        if callee not in open_:
                            pending.append((callee, False))
                        continue
                    if callee in open_:
                        path = [k.name for k, _ in stack]
                        cycle = " -> ".join(path[path.index(callee.name):] + [callee.name])
                        raise RecursiveCall(f"function {callee.name} calls itself ({cycle})")
                    open_.add(callee)
                    stack.append((callee, iter(self._callees(callee))))
                    break
                else:
                    stack.pop()
                    open_.discard(current)
                    self._build_function(current)

    def _build_function(self, key: FunctionKey) -> None:
        builder = self._builder()
        args = [builder.g.new_node(d) for d in key.arg_dtypes]
        rets = builder.add_function(key.name, args, self._targets.pop(key))
        body = self._body(builder, args, rets)
        self.bodies[key] = body
        self.ret_dtypes[key] = tuple(body.g.dtype[r] for r in rets)

    # -- composition ------------------------------------------------------------------------
    def compose(self, root: Body, seeds: Seeds, arg_seed: int = 0) -> Composed:
        """The composed Dataflow of `root` with these seeds (one bit per source where it enters, per output where
        it leaves). `arg_seed` is the value mask given to the arguments of functions only named by an attr (and nothing
        else): 0 in a signature, 1 in a custom-gradient function, whose free arguments all vary."""
        top = Instance(root)
        instances = [top]
        work = [(top, seeds)]
        copies: dict[tuple[FunctionKey, Context], list[Instance]] = {}
        by_inputs: dict[tuple, Instance] = {}
        while work:
            inst, inst_seeds = work.pop()
            self.budget.charge(inst.body.n_own)
            self.budget.charge_masks(len(inst.body.g.dtype), _width(inst_seeds.value, inst_seeds.grad),
                                     _width(inst_seeds.out_value, inst_seeds.out_grad, inst_seeds.converted))
            masks = inst.masks = reach_masks(inst.body.g, inst_seeds, inst.body.order)
            for site in inst.body.sites:
                ctx = _site_context(site, masks, arg_seed)
                fed = tuple(tuple(inst.body.g.aliased_from.get(a, ())) for a in site.args)
                inputs = (site.callee, ctx, id(inst), fed)  # the same tensors of the same caller copy
                callee = by_inputs.get(inputs)
                if callee is None:
                    same = copies.setdefault((site.callee, ctx), [])
                    if len(same) < COPIES_PER_CONTEXT:
                        callee = Instance(self.bodies[site.callee])
                        same.append(callee)
                        instances.append(callee)
                        work.append((callee, _callee_seeds(callee.body, ctx)))
                    else:
                        callee = same[0]
                    by_inputs[inputs] = callee
                inst.callees.append(callee)
        g, masks = _assemble(instances, self.budget)
        return Composed(g, _node_map(top), masks)

    def add_gradient_graphs(self, g: Dataflow) -> None:
        """g.gradient_graphs: the composed graph of each saved gradient function g's custom-gradient ops use
        (the hazard lints read inside it; every argument of it varies)."""
        for node in g.ops.values():
            fn = self.lib.registered_gradients.get(node.custom_gradient or "") or ""
            if node.custom_gradient_saved and fn in self.lib.functions and fn not in g.gradient_graphs:
                body = self.bodies[FunctionKey(fn, tuple(self.lib.input_dtypes(self.lib.functions[fn])))]
                g.gradient_graphs[fn] = self.compose(body, Seeds(value=dict.fromkeys(body.args, 1)), arg_seed=1).graph


def _summary(body: Body) -> Summary:
    """The body's arguments -> results masks (bit m: result m)."""
    g, order, n_ret = body.g, body.order, len(body.rets)
    arg_bits = {a: 1 << k for k, a in enumerate(body.args)}
    value = forward_masks(g, arg_bits, VALUE, order)
    grad = forward_masks(g, arg_bits, GRADIENT_EDGES, order)
    ret_bits: dict[int, int] = {}
    chain_bits: dict[int, int] = {}
    for m, r in enumerate(body.rets):
        ret_bits[r] = ret_bits.get(r, 0) | 1 << m
        chain_bits[r] = chain_bits.get(r, 0) | 1 << (n_ret + m)
    to_ret = backward_masks(g, ret_bits, VALUE, order)
    converted = converted_masks(g, order, to_ret, chain_bits)
    low = (1 << n_ret) - 1

    def per_arg(masks: list[int]) -> tuple[int, ...]:  # masks over args at each result -> masks over results
        out = [0] * len(body.args)
        for m, r in enumerate(body.rets):
            for k in set_bits(masks[r]):
                out[k] |= 1 << m
        return tuple(out)

    return Summary(per_arg(value), per_arg(grad), tuple(converted[a] & low for a in body.args),
                   tuple(converted[a] >> n_ret for a in body.args))


def _site_context(site: Site, masks, arg_seed: int) -> Context:
    if not site.wired:
        return (arg_seed,) * len(site.args), (0,) * len(site.args), (), (), ()
    return (tuple(masks.reach_value[a] for a in site.args), tuple(masks.reach_grad[a] for a in site.args),
            tuple(masks.to_output_value[r] for r in site.rets), tuple(masks.to_output_grad[r] for r in site.rets),
            tuple(masks.converted_to_output[r] for r in site.rets))


def _callee_seeds(body: Body, ctx: Context) -> Seeds:
    seeds = Seeds()
    value, grad, out_value, out_grad, converted = ctx
    for k, a in enumerate(body.args):
        seeds.value[a] = seeds.value.get(a, 0) | value[k]
        seeds.grad[a] = seeds.grad.get(a, 0) | grad[k]
    for r, to_value, to_grad, to_converted in zip(body.rets, out_value, out_grad, converted):  # none: unwired
        seeds.out_value[r] = seeds.out_value.get(r, 0) | to_value
        seeds.out_grad[r] = seeds.out_grad.get(r, 0) | to_grad
        seeds.converted[r] = seeds.converted.get(r, 0) | to_converted
    return seeds


def _node_map(inst: Instance) -> list[int]:
    """Each node of the instance's body -> its node in the composed graph (site nodes: the callee's own)."""
    body = inst.body
    out = []
    for x in range(len(body.g.dtype)):
        if body.own[x] >= 0:
            out.append(inst.base + body.own[x])
            continue
        s, is_arg, k = body.site_of[x]
        callee = inst.callees[s]
        node = callee.body.args[k] if is_arg else callee.body.rets[k]
        out.append(callee.base + callee.body.own[node])
    return out


def _assemble(instances: list[Instance], budget: Budget) -> tuple[Dataflow, ReachMasks]:
    """One Dataflow with a copy of each instance's body, the calls joined to the callees' copies; and the
    copies' masks side by side."""
    g = Dataflow()
    for inst in instances:
        inst.base = len(g.dtype)
        body = inst.body.g
        g.dtype.extend(body.dtype[x] for x in range(len(body.dtype)) if inst.body.own[x] >= 0)
    n = len(g.dtype)
    g.succ = [[] for _ in range(n)]
    g.flags = [[] for _ in range(n)]
    families: list[list[int]] = [[0] * n for _ in fields(ReachMasks)]
    for inst in instances:
        budget.check_time()
        to = _node_map(inst)
        _copy_masks(families, inst, to)
        _copy_edges(g, inst.body.g, to)
        _copy_facts(g, inst.body, to)
    return g, ReachMasks(*families)


def _copy_masks(families: list[list[int]], inst: Instance, to: list[int]) -> None:
    """Put the instance's masks of its own nodes at their copies' places (`to`), one list per mask family."""
    own = [x for x in range(len(inst.body.g.dtype)) if inst.body.own[x] >= 0]
    for family, spec in zip(families, fields(ReachMasks)):
        local = getattr(inst.masks, spec.name)
        for x in own:
            family[to[x]] = local[x]


def _copy_edges(g: Dataflow, body: Dataflow, to: list[int]) -> None:
    """Copy the body's edges into `g` through `to`, but for its summary edges: the callees' copies stand for
    them."""
    for a, (succ, flags) in enumerate(zip(body.succ, body.flags)):
        if succ:
            kept = [(to[b], f) for b, f in zip(succ, flags) if not f & SUMMARY]
            g.succ[to[a]].extend(b for b, _ in kept)
            g.flags[to[a]].extend(f for _, f in kept)
    for b, sources in body.aliased_from.items():
        g.aliased_from.setdefault(to[b], []).extend(to[a] for a in sources)
    g.has_back_edges |= body.has_back_edges


def _copy_facts(g: Dataflow, body: Body, to: list[int]) -> None:
    """Copy what the body knows of its nodes into `g` through `to`: its ops, producers, constants and shapes."""
    src = body.g
    for op_id, node in src.ops.items():
        g.ops[to[op_id]] = OpNode(node.ref, [(to[t], f) for t, f in node.inputs], [to[o] for o in node.outputs],
                                  node.grad_kind, node.custom_gradient, node.custom_gradient_saved,
                                  tuple(to[t] for t in node.dead_inputs), node.known, node.uncertain,
                                  node.grad_error, node.written_by, tuple(to[t] for t in node.written_values),
                                  node.surrogate)
    for t, op_id in src.producer.items():
        g.producer[to[t]] = to[op_id]
    for t, number in src.const_value.items():
        g.const_value[to[t]] = number
    for t, shape in src.shape.items():
        if body.own[t] >= 0:
            g.shape[to[t]] = shape


def _width(*families: dict[int, int]) -> int:
    """The bits the masks seeded by `families` take: the highest bit any seed sets."""
    return max((m.bit_length() for f in families for m in f.values()), default=0)
