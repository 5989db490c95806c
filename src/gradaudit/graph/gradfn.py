"""What a saved gradient function's results depend on: which upstream gradients reach which results."""

from __future__ import annotations

from .dataflow import VALUE, Dataflow, DataflowBuilder
from .gradients import GradientOracle
from .library import Library
from .reach import forward_masks


class GradFnAnalyzer:
    """Which results of a saved gradient function depend on which of its arguments (upstream grads)."""

    def __init__(self, library: Library, oracle: GradientOracle):
        self.lib = library
        self.oracle = oracle
        self._cache: dict[str, list[list[bool]]] = {}
        self.graphs: dict[str, Dataflow] = {}  # the Dataflow built for each analysed function

    def dependencies(self, fn: str) -> list[list[bool]]:
        """deps[k][j]: result j of `fn` depends on the value of argument k."""
        if fn not in self._cache:
            b = DataflowBuilder(self.lib, self.oracle, self)
            args = b.new_arg_tensors(fn)
            rets = b.add_function(fn, args)
            masks = forward_masks(b.g, {t: 1 << k for k, t in enumerate(args)}, VALUE)
            self.graphs[fn] = b.g
            self._cache[fn] = [[bool(masks[r] >> k & 1) for r in rets] for k in range(len(args))]
        return self._cache[fn]
