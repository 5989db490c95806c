"""Every op reachable from some root nodes, through any function an op names (calls, loop bodies,
branches, dataset functions), each function visited once."""

from __future__ import annotations

from collections.abc import Iterator

from ..model import OpRef
from .dataflow import TOP
from .library import Library, function_attrs


def walk_ops(library: Library, nodes, where: str = TOP) -> Iterator[tuple[OpRef, object]]:
    seen: set[str] = set()
    stack: list[tuple[str, list]] = [(where, list(nodes))]
    while stack:
        fname, batch = stack.pop()
        for node in batch:
            yield OpRef(node.op, node.name, fname), node
            names = [n for _, ns in function_attrs(node) for n in ns]
            if node.op in library.functions:
                names.append(node.op)
            for name in names:
                if name in library.functions and name not in seen:
                    seen.add(name)
                    stack.append((name, list(library.functions[name].node_def)))
