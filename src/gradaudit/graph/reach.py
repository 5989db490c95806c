"""Reachability over the dataflow graph as bitmasks (one bit per source or output), in topological
order, repeated over While loops' back edges until nothing changes."""

from __future__ import annotations

from dataclasses import dataclass

from .dataflow import BACK, Dataflow


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
    succ, flags = g.succ, g.flags
    targets = [b for _, b, f in order.loops if f & flag]
    while True:
        before = [masks[b] for b in targets]
        for a in order.nodes:
            m = masks[a]
            if m:
                for b, f in zip(succ[a], flags[a]):
                    if f & flag:
                        masks[b] |= m
        # a loop edge wrote into a node already passed: its successors need another pass
        if before == [masks[b] for b in targets]:
            return masks


def backward_masks(g: Dataflow, seeds: dict[int, int], flag: int, order: Order) -> list[int]:
    """masks[n]: bits of the seeds that n reaches along edges carrying `flag`."""
    masks = [0] * len(g.dtype)
    for node, bits in seeds.items():
        masks[node] |= bits
    succ, flags = g.succ, g.flags
    rev = order.nodes[::-1]
    while True:
        for a in rev:
            m = masks[a]
            for b, f in zip(succ[a], flags[a]):
                if f & flag:
                    m |= masks[b]
            masks[a] = m
        if not any(f & flag and masks[b] & ~masks[a] for a, b, f in order.loops):
            return masks
