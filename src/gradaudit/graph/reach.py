"""Reachability over the dataflow graph as bitmasks (one bit per source or output), in topological
order, repeated over While loops' back edges until nothing changes."""

from __future__ import annotations

from dataclasses import dataclass, field

from .dataflow import BACK, CONVERT, GRAD, MAYBE, SUMMARY, VALUE, VALUE_CHAIN, Dataflow
from .dtypes import carries_gradient

# Edges that carry a gradient, or may carry one through an op whose gradient cannot be known here: pairs that
# need such an edge are then "unknown", and every other pair's status and cuts are what they would be.
GRADIENT_EDGES = GRAD | MAYBE


@dataclass(frozen=True)
class Order:
    nodes: list[int]
    # edges (a, b, flags) that point backwards in `nodes`: While back edges and TF1 loop cycles
    loops: list[tuple[int, int, int]]


def topological_order(g: Dataflow) -> Order:
    """Kahn's order ignoring back edges; nodes left in cycles (TF1 loops) are appended."""
    n = len(g.dtype)
    indeg = [0] * n
    for a in range(n):
        for b, f in zip(g.succ[a], g.flags[a]):
            if not f & BACK:
                indeg[b] += 1
    order = [i for i in range(n) if indeg[i] == 0]
    head = 0
    while head < len(order):
        a = order[head]
        head += 1
        for b, f in zip(g.succ[a], g.flags[a]):
            if not f & BACK:
                indeg[b] -= 1
                if indeg[b] == 0:
                    order.append(b)
    if len(order) < n:
        placed = set(order)
        order.extend(i for i in range(n) if i not in placed)
    loops = []
    if g.has_back_edges or len(order) > head:
        pos = [0] * n
        for i, a in enumerate(order):
            pos[a] = i
        loops = [(a, b, f) for a in range(n) for b, f in zip(g.succ[a], g.flags[a]) if pos[b] <= pos[a]]
    return Order(order, loops)


def forward_masks(g: Dataflow, seeds: dict[int, int], flag: int, order: Order | None = None) -> list[int]:
    """masks[n]: bits of the seeds from which n is reached along edges carrying `flag`."""
    order = order or topological_order(g)
    masks = [0] * len(g.dtype)
    for node, bits in seeds.items():
        masks[node] |= bits
    if not seeds:
        return masks
    succ, flags = g.succ, g.flags
    for a in order.nodes:
        m = masks[a]
        if m:
            for b, f in zip(succ[a], flags[a]):
                if f & flag:
                    masks[b] |= m
    # a loop edge may have written into a node already passed: carry what it added on, node by node
    work = [b for _, b, f in order.loops if f & flag and masks[b]]
    while work:
        a = work.pop()
        m = masks[a]
        for b, f in zip(succ[a], flags[a]):
            if f & flag and m & ~masks[b]:
                masks[b] |= m
                work.append(b)
    return masks


def backward_masks(g: Dataflow, seeds: dict[int, int], flag: int, order: Order) -> list[int]:
    """masks[n]: bits of the seeds that n reaches along edges carrying `flag`."""
    masks = [0] * len(g.dtype)
    for node, bits in seeds.items():
        masks[node] |= bits
    if not seeds:
        return masks
    succ, flags = g.succ, g.flags
    for a in reversed(order.nodes):
        m = masks[a]
        for b, f in zip(succ[a], flags[a]):
            if f & flag:
                m |= masks[b]
        masks[a] = m
    work = [a for a, b, f in order.loops if f & flag and masks[b] & ~masks[a]]
    if not work:
        return masks
    pred: list[list[int]] = [[] for _ in masks]
    for a in range(len(masks)):
        for b, f in zip(succ[a], flags[a]):
            if f & flag:
                pred[b].append(a)
    for a, b, f in order.loops:
        if f & flag:
            masks[a] |= masks[b]
    while work:
        b = work.pop()
        m = masks[b]
        for a in pred[b]:
            if m & ~masks[a]:
                masks[a] |= m
                work.append(a)
    return masks


def converted_masks(g: Dataflow, order: Order, to_output_value: list[int],
                    seeds: dict[int, int] | None = None) -> list[int]:
    """For non-float tensors: the outputs their *value* reaches by being converted back into a float
    (Cast, a Select condition), possibly after integer arithmetic. Shapes and indices do not count.
    A called function's summary edge says the same with CONVERT (converted inside it, then reaching that
    result by value) and VALUE_CHAIN (reaching that non-float result through non-float values only)."""
    masks = [0] * len(g.dtype)
    seeds = seeds or {}
    is_op = g.ops
    for a in reversed(order.nodes):
        if a in is_op:
            m = 0
            for o in is_op[a].outputs:
                if not carries_gradient(g.dtype[o]):
                    m |= masks[o]
            masks[a] = m
        elif not carries_gradient(g.dtype[a]):
            m = seeds.get(a, 0)
            for b, f in zip(g.succ[a], g.flags[a]):
                if f & BACK:  # a loop's carried value: what the loop's end converts is counted there
                    continue
                if f & CONVERT:
                    m |= to_output_value[b]
                elif f & VALUE_CHAIN or f & VALUE and not f & SUMMARY:
                    m |= masks[b]
            masks[a] = m
    return masks


@dataclass
class Seeds:
    """Where each mask family starts: source bits (forward), output bits (backward)."""

    value: dict[int, int] = field(default_factory=dict)
    grad: dict[int, int] = field(default_factory=dict)
    out_value: dict[int, int] = field(default_factory=dict)
    out_grad: dict[int, int] = field(default_factory=dict)
    converted: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ReachMasks:
    """Per node of a Dataflow, as bitmasks over the sources (reach_*) or the outputs (to_output_*)."""

    reach_value: list[int]  # sources whose value reaches the node
    reach_grad: list[int]  # sources reaching it along edges that carry (or may carry) a gradient
    to_output_value: list[int]  # outputs the node's value reaches
    to_output_grad: list[int]  # outputs it reaches along edges that carry (or may carry) a gradient
    # non-float tensors: outputs their value reaches by being converted back into a float
    converted_to_output: list[int]


def reach_masks(g: Dataflow, seeds: Seeds, order: Order) -> ReachMasks:
    to_output_value = backward_masks(g, seeds.out_value, VALUE, order)
    return ReachMasks(forward_masks(g, seeds.value, VALUE, order),
                      forward_masks(g, seeds.grad, GRADIENT_EDGES, order),
                      to_output_value,
                      backward_masks(g, seeds.out_grad, GRADIENT_EDGES, order),
                      converted_masks(g, order, to_output_value, seeds.converted))
