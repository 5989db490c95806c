"""Where a blocked pair's gradient dies: for each (source, output) pair and each op that cuts it, one
shortest path source -> ... -> cutting op -> ... -> output through the static pass's dataflow graph."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from .model import BlockedPath, OpRef, PathStep

if TYPE_CHECKING:
    from .flow import StaticAnalysis

KEEP = 2  # ops kept at each end of a segment (source to cut, cut to output); the middle is counted
MAX_PATHS = 1000  # per report: a blocked pair beyond this has its cut in the flow, not a drawn path


def _steps(ops: list[OpRef]) -> list[PathStep]:
    """A segment of the path, its middle left out when long: the ops next to the source, the cut and the
    output say where the gradient dies; the count says how far apart they are."""
    if len(ops) <= 2 * KEEP + 1:
        return [PathStep(r.op_type, r.op_name, r.function) for r in ops]
    head, tail = ops[:KEEP], ops[-KEEP:]
    skipped = len(ops) - 2 * KEEP
    return ([PathStep(r.op_type, r.op_name, r.function) for r in head]
            + [PathStep(r.op_type, r.op_name, r.function, skipped if k == 0 else 0) for k, r in enumerate(tail)])


def _bfs(start: int, adjacency: list[list[int]]) -> dict[int, int]:
    """Breadth-first from `start`: node -> the node it was reached from (shortest hops)."""
    came = {start: start}
    queue = deque([start])
    while queue:
        a = queue.popleft()
        for b in adjacency[a]:
            if b not in came:
                came[b] = a
                queue.append(b)
    return came


def _walk(came: dict[int, int], end: int) -> list[int]:
    """The nodes from `end` back to the search's start (start excluded), nearest `end` first."""
    out = []
    while came[end] != end:
        out.append(end)
        end = came[end]
    return out


def blocked_paths(analysis: StaticAnalysis) -> list[BlockedPath]:
    """One path per blocked (source, output) pair and cutting op, along value-carrying edges: the
    shortest from the source to the op, then the shortest from the op to the output."""
    from .graph.dataflow import VALUE

    g = analysis.graph
    wanted = [(ref, cut) for ref, cut in sorted(analysis.cuts.items(), key=lambda kv: (kv[0].function,
                                                                                        kv[0].op_name))
              if cut.blocked_pairs]
    if not wanted:
        return []
    succ = [[b for b, f in zip(g.succ[a], g.flags[a]) if f & VALUE] for a in range(len(g.dtype))]
    pred: list[list[int]] = [[] for _ in succ]
    for a, bs in enumerate(succ):
        for b in bs:
            pred[b].append(a)
    op_ids = {id(node): op_id for op_id, node in g.ops.items()}

    def ops_of(nodes: list[int]) -> list[OpRef]:
        return [g.ops[n].ref for n in nodes if n in g.ops]

    paths: list[BlockedPath] = []
    for ref, cut in wanted:
        op_id = op_ids[id(cut.node)]
        back = _bfs(op_id, pred)  # every node that reaches the cut, with its next hop towards it
        ahead = _bfs(op_id, succ)
        for i, j in sorted(cut.blocked_pairs):
            s, t = analysis.source_tensor[i], analysis.output_tensor[j]
            if s not in back or t not in ahead or len(paths) >= MAX_PATHS:
                continue
            before = ops_of(_walk(back, s))  # from the source towards the cut
            after = ops_of(_walk(ahead, t)[::-1])  # from the cut towards the output
            steps = _steps(before) + [PathStep(ref.op_type, ref.op_name, ref.function)] + _steps(after)
            paths.append(BlockedPath(analysis.sources[i].name, analysis.outputs[j].name, tuple(steps),
                                     len(_steps(before))))
    return paths
