"""Local checks: each op's gradient at the values the model's own forward gave it.

TensorFlow composes registered gradients by the chain rule; what can be wrong is one gradient at the values it
meets: a gradient somebody wrote (a saved custom gradient, a gradient override) or TensorFlow's own gradient of an
op at those inputs. Checked one op at a time, a wrong gradient is not diluted by the rest of the network, and the
check names its op without bisection.

The signature's function is frozen (stability.forensics: calls inlined, variables as constants) and run once to
record what every op receives. Each op is then copied on its own into a check graph, in float64 where its kernel
has a float64 version (its own dtype otherwise), fed the recorded values, and its registered gradient <g, d> along
a random direction d compared with central differences of u·op(x + t·d) over numeric.sweep's ladder of steps,
with sweep's error bound. All ops of a chunk run together: one session run per step, fetching only the ops still
undecided. An op with a custom gradient is checked in the frozen graph itself (its gradient function is bound
there): the region it replaces, from its inputs that receive a gradient to its outputs.

What decides: an op passes when its differences agree within the bound; it fails when they converge away from its
gradient at every step (sweep's `fail`); a kink at the recorded value (ReLU at 0, a max-pool tie) passes only when
its gradient's slope lies between the one-sided slopes there (a subgradient), recorded as evidence. Anything else
is undecided, and the whole-model checks decide instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from ..model import Finding, LocalCheck, OpRef, Severity
from . import sweep
from .domains import ASSUMING, KINK_OPS
from .forensics import CONTROL_FLOW
from .memory import give_back
from .session import EPS as _EPS
from .session import floor_for

# Ops with nothing to check: structure, constants, identities, and the ones whose gradient is a cut the static
# pass reports (stop_gradient).
_NOTHING = frozenset({
    "Const", "Placeholder", "PlaceholderWithDefault", "Identity", "NoOp", "StopGradient", "PreventGradient",
    "Shape", "ShapeN", "Size", "Rank", "ZerosLike", "OnesLike", "Snapshot", "EnsureShape", "CheckNumerics",
    "Assert", "Print", "PrintV2", "StringFormat", "VarHandleOp", "ReadVariableOp", "DebugIdentity",
})
_CALLS = CONTROL_FLOW | {"PartitionedCall", "StatefulPartitionedCall", "XlaCallModule", "PyFunc", "EagerPyFunc",
                         "PyFuncStateless"}
# Fed values per chunk of the check graph (float64 bytes): a large model's weights are checked a chunk at a time.
# Each chunk holds its values' float64 copies, directions and gradients at once (about five times these bytes):
# at 256 MiB a ResNet50's local checks peaked at 2.8 GiB, twice the rest of the audit.
CHUNK_BYTES = 64 << 20
# Standard normals drawn once per checker, at most (float64): the directions are windows of them.
_POOL = 1 << 22
# How far from the recorded values (relative to their magnitude) an op that sits on its kink there is checked again.
NEARBY = 1e-3
# Ops linear (or bilinear) in their float inputs: their registered gradient is a formula of shapes and attributes,
# not of values, so one instance checks every instance of the same type, attributes and input shapes. Every other
# op (ReLU at 0, a max-pool tie, rsqrt near 0, softmax saturated) is checked at each of its instances' own values.
VALUE_FREE = frozenset({
    "Reshape", "Squeeze", "ExpandDims", "Transpose", "Pad", "PadV2", "MirrorPad", "ConcatV2", "Concat", "Slice",
    "StridedSlice", "Pack", "Unpack", "Split", "SplitV", "Tile", "BroadcastTo", "GatherV2", "GatherNd",
    "AddV2", "Add", "Sub", "Mul", "BiasAdd", "Neg", "AddN", "MatMul", "BatchMatMulV2", "BatchMatMulV3", "Conv2D",
    "Conv3D", "DepthwiseConv2dNative", "Conv2DBackpropInput", "Einsum", "Sum", "Mean", "Cumsum", "Cast",
    "ReverseV2", "SpaceToDepth", "DepthToSpace", "SpaceToBatchND", "BatchToSpaceND", "Roll", "AvgPool",
    "AvgPool3D", "ResizeBilinear", "ResizeNearestNeighbor", "SegmentSum", "UnsortedSegmentSum", "ScatterNd",
})
# Piecewise-linear ops: their gradient passes, masks or routes the upstream one (a ReLU's mask, a max-pool's argmax),
# the same in any precision; the float32 comparison leaves them out.
_ROUTING = frozenset({
    "Relu", "Relu6", "LeakyRelu", "Abs", "Maximum", "Minimum", "ClipByValue", "Max", "Min", "MaxPool", "MaxPoolV2",
    "MaxPool3D", "MaxPoolWithArgmax", "Select", "SelectV2", "TopKV2", "Sort", "Floor", "Ceil", "Round", "Rint",
    "Sign",
})
_FLOAT64 = 2  # DT_DOUBLE
_LOW = frozenset({1, 19, 14})  # DT_FLOAT, DT_HALF, DT_BFLOAT16
# OpGap.comparable: an op's float32 outputs further than this from its float64 kernel's (relative) are another result
OUTPUTS_APART = 1e-2


@dataclass(frozen=True)
class OpGap:
    """One op's float32 gradient against its float64 one at the values the model gave it, along one direction d
    (scaled to those values) for one cotangent u of random signs: <g64, d>, <g32, d>, sum |g64 d| and ||op(x)||."""

    op: OpRef
    float64: float
    float32: float
    scale: float
    output_norm: float
    # how far <g, d> moves, at most, when each of the op's outputs is one float32 rounding unit off, where TensorFlow's
    # gradient reads the op's own output (a softmax's, a tanh's): sum |d<g, d>/dy| |y| eps, in float64. A saturated
    # softmax's float32 output is 1 - 2**-24 where the exact one is 1 - 1e-81, and its float32 gradient is off by that
    rounding: float = 0.0
    # ||op32(x) - op64(x)|| / ||op64(x)||: how far the op's own float32 outputs are from its float64 kernel's at the
    # same inputs (tester 21: float32 and float64 eigh pick other signs for an eigenvector)
    outputs_apart: float = 0.0

    @property
    def comparable(self) -> bool:
        """The op's float32 outputs are its float64 ones to within 1%: its two gradients are of the same result. An op
        whose result is defined only up to a sign or a basis (eigenvectors, singular vectors) can give other outputs in
        each precision, and one float32 cannot resolve at these values gives different ones: their gradients differ
        without either being wrong, so they are not compared."""
        return self.outputs_apart <= OUTPUTS_APART

    @property
    def flagged(self) -> bool:
        """Off by more than 1% of the exact value, than float32 rounding of the terms explains, than the op's
        float32 output resolves (a saturated tanh's float32 gradient is 0 where the true one is 1e-9), and than
        float32 rounding of the output its gradient reads accounts for."""
        gap = abs(self.float32 - self.float64)
        eps = float(np.finfo(np.float32).eps)
        return (gap > 1e-2 * abs(self.float64) and gap > 100 * eps * self.scale
                and gap > 100 * eps * self.output_norm and gap > 10 * self.rounding)

    def text(self) -> str:
        return (f"TensorFlow's float32 gradient of {self.op.label} is off at the values the model gives it: along one "
                f"direction it gives {self.float32:.6g} where its float64 kernel gives {self.float64:.6g}")

    def apart_text(self) -> str:
        return (f"{self.op.label}'s own float32 outputs are {self.outputs_apart:.2%} off its float64 kernel's at the "
                "values the model gives it (a result defined only up to a sign or a basis, such as eigenvectors, or "
                "one float32 cannot resolve there): its two gradients are of different results, and are not compared "
                f"(along one direction {self.float32:.6g} in float32, {self.float64:.6g} in float64)")


@dataclass
class LocalOutcome:
    """Every local check of one point, and the differentiable ops that could not be checked here (a loop body, a
    compiled module, a custom gradient the frozen graph cannot rebind), with the reason."""

    checks: list[LocalCheck] = field(default_factory=list)
    unchecked: list[tuple[OpRef, str]] = field(default_factory=list)
    runs: int = 0  # session runs spent
    # custom gradients checked with the cotangent the model's backward hands them, moving only inputs made from the
    # sources: a failure there is the model's gradient being wrong (no other op's zero can mask it downstream)
    decisive: set[OpRef] = field(default_factory=set)

    @property
    def failed(self) -> list[LocalCheck]:
        return [c for c in self.checks if c.status == "fail"]

    @property
    def undecided(self) -> list[LocalCheck]:
        return [c for c in self.checks if c.status == "undecided"]

    @property
    def complete(self) -> bool:
        """Every differentiable op was checked and passed: the model's gradient is the chain rule over them."""
        return bool(self.checks) and not self.unchecked and all(c.status == "pass" for c in self.checks)

    def complete_beside(self, failed: list[LocalCheck]) -> bool:
        """Every differentiable op was checked, and all but `failed` passed."""
        return not self.unchecked and all(c.status == "pass" for c in self.checks if c not in failed)


@dataclass
class _CheckGraph:
    """One chunk's ops copied alone into a graph, with its session: what each item is fed and fetched."""

    session: Any
    feeds: list[list[Any]]  # per item copied: the placeholders of the inputs it moves
    phis: list[Any]
    grads: list[list[Any]]
    held: list[dict]  # per item: its fixed cotangent's placeholders and values
    cut: list[list[bool]]  # per item, per input moved: its registered gradient gives none (held at its value)
    dropped: list[int]  # positions of the items that could not be copied on their own


class CheckGraphs:
    """Check graphs kept for the next point that checks the same ops at the same shapes (the probe points: building
    a graph and its gradients costs more than its runs); `close()` ends their sessions."""

    def __init__(self) -> None:
        self.graphs: dict[tuple, _CheckGraph] = {}

    def close(self) -> None:
        for g in self.graphs.values():
            g.session.close()
        self.graphs.clear()


@dataclass
class _Item:
    """One op under check: its frozen-graph op, the inputs moved and their recorded values and directions,
    the outputs projected, and the line its differences are read on."""

    op: Any
    moved: list[int]  # input positions moved along the line
    x: list[np.ndarray]
    d: list[np.ndarray]
    outputs: list[int]  # output positions projected on u
    dtype: str
    kind: Literal["op", "custom_gradient"]
    g: list[np.ndarray] = field(default_factory=list)
    line: Any = None
    est: Any = None
    verdict: str = ""
    exact: bool = False  # a value-free op: central differences at one step are exact up to rounding
    nearby: bool = False  # checked at a point next to the recorded one (the recorded one sits on a kink)
    rel: float | None = None  # the exact check's relative error
    held: dict = field(default_factory=dict)  # the check graph's placeholders of its fixed cotangent, and their values
    fed: list[np.ndarray] | None = None  # the arrays fed at the step evaluated last (rounded to the placeholders')
    lin: float | None = None  # or the change the gradient predicts for them, read as they were made


def _is_float(t) -> bool:
    return t.dtype.is_floating


def _consumed(op, outputs: frozenset[str]) -> list[int]:
    """The float outputs of `op` something downstream reads, or the signature returns: what its gradient is asked
    about (an output nothing reads, such as a batch norm's saved statistics, has no gradient to give)."""
    return [i for i, t in enumerate(op.outputs) if _is_float(t) and (t.consumers() or t.name in outputs)]


def _has_gradient(op) -> bool | None:
    """True: a registered gradient; False: TensorFlow says not differentiable (None), a cut the static pass
    reports; None: nothing registered (TensorFlow raises differentiating it: also the static pass's)."""
    from tensorflow.python.framework import ops

    try:
        return ops.gradient_registry.lookup(op.type) is not None
    except LookupError:
        return None


def _custom(op) -> bool:
    try:
        op.get_attr("_gradient_op_type")
    except ValueError:
        return False
    return True


def _float64_kernel(op) -> bool:
    """A CPU kernel of the op's type takes float64 for every type attribute that is a float type in the op."""
    from tensorflow.python.framework import kernels

    floats = {k for k, a in op.node_def.attr.items()
              if (a.HasField("type") and a.type in _LOW) or (a.HasField("list") and set(a.list.type) & _LOW)}
    try:
        found = kernels.get_registered_kernels_for_op(op.type).kernel
    except Exception:  # noqa: BLE001 - an op TensorFlow's registry cannot list is checked as it is
        return False
    for k in found:
        if k.device_type != "CPU":
            continue
        if all(_FLOAT64 in c.allowed_values.list.type for c in k.constraint
               if c.name in floats and c.allowed_values.list.type):
            return True
    return False


def _value_free(op) -> bool:
    """Linear or bilinear in its float inputs (an einsum of three operands is not: one step is not exact there)."""
    return op.type in VALUE_FREE and (op.type != "Einsum" or sum(_is_float(t) for t in op.inputs) <= 2)


def _shape_key(op) -> tuple:
    """What a value-free op's gradient depends on: its type, attributes and input shapes and dtypes."""
    attrs = tuple(sorted((k, v.SerializeToString(deterministic=True)) for k, v in op.node_def.attr.items()
                         if not k.startswith("_")))
    return (op.type, attrs, tuple((t.dtype.name, tuple(t.shape.as_list()) if t.shape.rank is not None else None)
                                  for t in op.inputs))


class LocalChecker:
    """The local checks of one frozen graph (a stability.forensics.Forensics), at points fed to it."""

    def __init__(self, forensics, rng: np.random.Generator, progress: Callable[[str], None] | None = None,
                 analysis=None, value_free: bool = True, graphs: CheckGraphs | None = None):
        """`analysis`: the static pass's StaticAnalysis; with it, only ops on a gradient path from a source to an
        output are checked (a batch norm's moving statistics are not). `value_free`: also check the ops linear in
        their inputs (once per type, attributes and shapes); False at a probe point, where their gradient is the
        formula already checked at the numeric checks' point. `graphs`: check graphs kept across the points that
        share it (else each chunk's graph is closed after its checks)."""
        self.forensics = forensics
        self.graphs = graphs
        self.analysis, self.value_free = analysis, value_free
        self.rng = rng
        self.progress = progress or (lambda _m: None)
        self._f64: dict[tuple, bool] = {}
        self.shared: dict[str, int] = {}
        self._nodes: dict[OpRef, Any] | None = None
        self._pool: np.ndarray | None = None
        self._pool_signs = np.empty(0)
        self.float32_checked = 0  # ops the last float32_gaps compared
        # the float32 comparison's check graphs (float64, float32) by ops, shapes and constant inputs
        self._float32_graphs: dict[tuple, tuple[_GradientGraph | None, _GradientGraph | None]] = {}

    # -- which ops ------------------------------------------------------------------------------
    def _ops(self, outcome: LocalOutcome) -> tuple[list[Any], list[Any]]:
        """(plain ops, custom-gradient ops) of the frozen graph to check; the rest that a gradient crosses but
        nothing here can check go to `outcome.unchecked`."""
        f = self.forensics
        if f._graph is None:  # noqa: SLF001 - the frozen graph is built on first use
            f._build()  # noqa: SLF001
        plain, custom = [], []
        self.shared = {}  # op name checked -> how many value-free instances it stands for
        seen: dict[tuple, str] = {}
        for op in f._ops:  # noqa: SLF001
            kind = self._kind(op)
            if kind == "custom":
                custom.append(op)
            elif kind == "call":
                why = (f"{op.type} holds ops of its own that are not checked one by one here" if op.type in _CALLS
                       else "it reads a resource (a variable or table the frozen graph keeps)")
                outcome.unchecked.append((f._ref(op), why))  # noqa: SLF001
            elif kind == "plain" and not self._shared_with(op, seen):
                plain.append(op)
        return plain, custom

    def _kind(self, op) -> str:
        """"custom" (a gradient somebody wrote: always checked, the static masks of a custom gradient's IdentityN
        need not reach an output by value), "call" (ops of its own inside, or a resource read: not checkable here),
        "plain", or "" (nothing to check)."""
        if not any(_is_float(t) for t in op.inputs) or not any(_is_float(t) for t in op.outputs):
            return ""
        if _custom(op):  # before the ops with nothing to check: gradient_override_map on an Identity is written
            return "custom"
        if op.type in _NOTHING:
            return ""
        if not self._on_path(op) or (_value_free(op) and not self.value_free):
            return ""
        if op.type in _CALLS or any(t.dtype.name == "resource" for t in op.inputs):
            return "call"
        return "plain" if _has_gradient(op) else ""

    def _shared_with(self, op, seen: dict[tuple, str]) -> bool:
        """A value-free op of the type, attributes and input shapes of one already taken: counted on that one."""
        if not _value_free(op):
            return False
        key = _shape_key(op)
        if key in seen:
            self.shared[seen[key]] += 1
            return True
        seen[key] = op.name
        self.shared[op.name] = 1
        return False

    def _on_path(self, op) -> bool:
        """The static pass puts the op on a gradient path from a source to an output (an op it has no node for
        counts as on one)."""
        if self.analysis is None:
            return True
        if self._nodes is None:
            self._nodes = {n.ref: n for n in self.analysis.graph.ops.values()}
        node = self._nodes.get(self.forensics._ref(op))  # noqa: SLF001
        if node is None:
            return True
        src, out = self.analysis.op_masks(node, grad=True)
        return bool(src and out)

    # -- the checks -----------------------------------------------------------------------------
    def run(self, feed: dict[str, np.ndarray]) -> LocalOutcome:
        outcome = LocalOutcome()
        plain, custom = self._ops(outcome)
        if not plain and not custom:
            return outcome
        try:
            self._run(plain, custom, feed, outcome)
        finally:
            give_back()  # the recorded values and the float64 chunks are freed: the probes' passes come next
        return outcome

    def _run(self, plain: list[Any], custom: list[Any], feed: dict[str, np.ndarray], outcome: LocalOutcome) -> None:
        self.progress(f"local checks: recording {len(plain) + len(custom)} ops")
        values = self._record(plain + custom, feed)
        outcome.runs += 1
        for chunk in self._chunks(plain, values):
            self._check_plain(chunk, values, outcome)
        for op in custom:
            self._check_custom(op, values, feed, outcome)

    def _record(self, ops: list[Any], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What the ops receive at `feed`. The last point's values are kept on the shared frozen graph: the float32
        comparison at a point the local checks just recorded reads them instead of running the model again (a
        ResNet50's recording: about 5 s)."""
        tensors = {t.name: t for op in ops for t in op.inputs if t.dtype.name not in ("resource", "variant")}
        kept = {n: v for n in tensors if (v := self.forensics.lifted(n)) is not None}  # a weight: already at hand
        key = tuple(sorted((k, _digest(np.asarray(v))) for k, v in feed.items()))
        return {**kept, **self.forensics.recorded_values([t for n, t in tensors.items() if n not in kept], feed, key)}

    def _chunks(self, ops: list[Any], values: dict[str, np.ndarray]) -> list[list[Any]]:
        chunks: list[list[Any]] = [[]]
        size = 0
        for op in ops:
            nbytes = sum(values[t.name].size * 8 for t in op.inputs if t.name in values and _is_float(t))
            if chunks[-1] and size + nbytes > CHUNK_BYTES:
                chunks.append([])
                size = 0
            chunks[-1].append(op)
            size += nbytes
        return [c for c in chunks if c]

    def _direction(self, x: np.ndarray) -> np.ndarray:
        """A random direction in x's dtype, scaled entry by entry to the value it moves (plus the typical magnitude,
        the median of a sample), so that a relative step moves every entry in its own regime: an attention mask's
        -1e9 beside logits of order 1."""
        a = np.abs(x)
        flat = a.reshape(-1)
        sample = flat if flat.size <= 65536 else flat[self.rng.integers(0, flat.size, 65536)]
        typical = float(np.median(sample)) if sample.size else 0.0
        if not (typical > 0 and math.isfinite(typical)):
            typical = float(flat.max()) if flat.size and np.isfinite(flat.max()) and flat.max() > 0 else 1.0
        a += x.dtype.type(typical)
        a *= self._normals(a.size).reshape(x.shape).astype(x.dtype, copy=False)
        return a

    def _normals(self, n: int) -> np.ndarray:
        """`n` standard normals: a window, at a random offset, of a pool drawn once per checker (drawing them afresh
        for every op was most of a ResNet50's direction cost; the directions of different ops need not be
        independent, each op is checked on its own); drawn afresh beyond the pool's largest size."""
        if n > _POOL:
            return self.rng.standard_normal(n, dtype=np.float32)
        return self._window(n)[0]

    def _window(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """A window of `n` entries, at a random offset, of the pool of normals and of their signs."""
        if self._pool is None or self._pool.size < n:
            self._pool = self.rng.standard_normal(min(_POOL, max(4 * n, 1 << 16)))
            self._pool_signs = np.where(self._pool >= 0, 1.0, -1.0)
        start = int(self.rng.integers(0, self._pool.size - n + 1))
        return self._pool[start:start + n], self._pool_signs[start:start + n]

    def _signs(self, n: int) -> np.ndarray:
        """`n` random signs (float64), for a check graph's fixed cotangent: a window of the same pool at an offset
        of its own (independent of a direction's entry by entry), read from the pool's signs taken once (taking them
        for every window cost a ResNet50's check graphs more than building them)."""
        if n > _POOL:
            return np.where(self.rng.standard_normal(n, dtype=np.float32) >= 0, 1.0, -1.0)
        return self._window(n)[1]

    def _item(self, op, values: dict[str, np.ndarray], kind, dtype: str, moved: list[int],
              exact: bool = False) -> _Item | None:
        """The op under check at its recorded values: float64 copies of them, or (`exact`, a value-free op checked
        in its own dtype) the recorded arrays themselves."""
        x = [np.asarray(values[op.inputs[i].name], None if exact else np.float64) for i in moved]
        if any(not np.all(np.isfinite(a)) for a in x):
            return None
        outputs = frozenset(t.name for t in self.forensics._outputs.values())  # noqa: SLF001
        return _Item(op, moved, x, [self._direction(a) for a in x], _consumed(op, outputs), dtype, kind, exact=exact)

    def _check_plain(self, ops: list[Any], values: dict[str, np.ndarray], outcome: LocalOutcome) -> None:
        items = self._plain_items(ops, values, outcome)
        if not items:
            return
        built = self._graph_for(items, values)
        for k in built.dropped:
            outcome.unchecked.append((self.forensics._ref(items[k].op), "it cannot be copied on its own"))  # noqa: SLF001
        dropped = set(built.dropped)
        items = [it for k, it in enumerate(items) if k not in dropped]
        for it, cut, held in zip(items, built.cut, built.held):
            it.held = held
            it.d = [np.zeros_like(d) if c else d for d, c in zip(it.d, cut)]
        try:
            if items:
                self._run_checks(items, built, outcome)
        finally:
            if self.graphs is None:
                built.session.close()
        outcome.checks.extend(self._judged(it) for it in items)

    def _run_checks(self, items: list[_Item], built: _CheckGraph, outcome: LocalOutcome) -> None:
        session, feeds, phis, grads = built.session, built.feeds, built.phis, built.grads

        def run(which: list[int], t: float) -> list[float]:
            feed: dict[Any, np.ndarray] = {}
            for j in which:
                it = items[j]
                stepped = [_stepped(x, d, t, p.dtype.as_numpy_dtype, None if it.exact else g)
                           for p, x, d, g in zip(feeds[j], it.x, it.d, it.g)]
                feed.update(zip(feeds[j], [a for a, _ in stepped]))
                feed.update(it.held)
                if not it.exact:  # the change the gradient predicts for the arrays fed (_add_point)
                    it.lin = float(sum(lin for _, lin in stepped))
            outcome.runs += 1
            return [float(v) for v in session.run([phis[j] for j in which], feed)]

        def start(which: list[int]) -> None:
            """Each item's gradient and phi(0) at its point, one run, and its line from there."""
            at0 = {p: x.astype(p.dtype.as_numpy_dtype) for j in which for p, x in zip(feeds[j], items[j].x)}
            for j in which:
                at0.update(items[j].held)
            got = session.run([(phis[j], grads[j]) for j in which], at0)
            outcome.runs += 1
            for j, (phi0, g) in zip(which, got):
                it = items[j]
                it.g = [np.zeros_like(x) if gi is None else np.asarray(gi) for gi, x in zip(g, it.x)]
                _start_line(it, float(phi0))

        every = list(range(len(items)))
        start(every)
        self._sweep(items, every, run)
        kinked = [j for j in every if items[j].verdict != "pass" and items[j].op.type in KINK_OPS]
        if kinked:  # a tie or a zero exactly at the kink: TensorFlow's gradient there is one subgradient
            for j in kinked:
                items[j].nearby = True
                items[j].x = [x + NEARBY * self._direction(x) for x in items[j].x]
            start(kinked)
            self._sweep(items, kinked, run)

    def _plain_items(self, ops: list[Any], values: dict[str, np.ndarray], outcome: LocalOutcome) -> list[_Item]:
        """The ops to check at their recorded values; those that cannot be go to `outcome.unchecked`."""
        items = []
        for op in ops:
            exact = _value_free(op)
            dtype = "float64" if not exact and self._upcast(op) else op.outputs[0].dtype.name
            moved = [i for i, t in enumerate(op.inputs) if _is_float(t)]
            item = self._item(op, values, "op", dtype, moved, exact)
            if item is None:
                outcome.unchecked.append((self.forensics._ref(op), "its inputs are not finite at the recorded values"))  # noqa: SLF001
            elif item.outputs:
                items.append(item)
        return items

    def _graph_for(self, items: list[_Item], values: dict[str, np.ndarray]) -> _CheckGraph:
        """The check graph of `items`: the kept one when an earlier point built it for the same ops, dtypes, shapes
        and constant inputs, else a new one."""
        key = tuple((it.op.name, it.dtype, tuple(it.outputs), tuple(x.shape for x in it.x),
                     tuple(_digest(values[t.name]) for i, t in enumerate(it.op.inputs) if i not in it.moved))
                    for it in items)
        if self.graphs is not None and key in self.graphs.graphs:
            return self.graphs.graphs[key]
        built = self._build(items, values)
        if self.graphs is not None:
            self.graphs.graphs[key] = built
        return built

    def _build(self, items: list[_Item], values: dict[str, np.ndarray]) -> _CheckGraph:
        import tensorflow as tf

        graph = tf.Graph()
        feeds, phis, held, dropped = [], [], [], []
        with graph.as_default():
            for k, it in enumerate(items):
                copied = _copy_op(it.op, k, values, it, it.dtype, self._signs)
                if copied is None:
                    dropped.append(k)
                    continue
                feeds.append(copied[0])
                phis.append(copied[1])
                held.append(it.held)
            left_out = set(dropped)
            kept = [it for k, it in enumerate(items) if k not in left_out]
            grads, cut = _gradients(kept, feeds, phis) if kept else ([], [])
        config = tf.compat.v1.ConfigProto()
        config.graph_options.rewrite_options.disable_meta_optimizer = True
        return _CheckGraph(tf.compat.v1.Session(graph=graph, config=config), feeds, phis, grads, held, cut, dropped)

    def close(self) -> None:
        """End the float32 comparison's sessions."""
        for pair in self._float32_graphs.values():
            for g in pair:
                if g is not None:
                    g.session.close()
        self._float32_graphs.clear()

    # -- the float32 gradient of each op against its float64 one (own_precision names the op with it) ------------
    def float32_gaps(self, feed: dict[str, np.ndarray]) -> list[OpGap]:
        """Each float32 op on a gradient path that has a float64 kernel and is not linear in its inputs: its float32
        gradient against its float64 one at the values the model's forward gave it (one run per chunk, the same
        cotangent and direction for both); only the gaps own_precision would report (OpGap.flagged), and the ops
        whose own float32 outputs are another result (not OpGap.comparable), which it says are not compared."""
        plain, _ = self._ops(LocalOutcome())
        ops = [op for op in plain if not _value_free(op) and op.type not in _ROUTING and self._upcast(op)
               and all(t.dtype.name == "float32" for t in op.outputs if _is_float(t))]
        if not ops:
            return []
        values = self._record(ops, feed)
        gaps: list[OpGap] = []
        self.float32_checked = len(ops)
        for chunk in self._chunks(ops, values):
            gaps += [g for g in self._float32_chunk(chunk, values) if g.flagged or not g.comparable]
        return gaps

    def _float32_pairs(self, ops: list[Any], values: dict[str, np.ndarray]) -> list[tuple[_Item, _Item]]:
        """Each op as a float64 item and a float32 item at its recorded values, along the same direction."""
        pairs = []
        for op in ops:
            moved = [i for i, t in enumerate(op.inputs) if _is_float(t)]
            it64 = self._item(op, values, "op", "float64", moved)
            if it64 is None or not it64.outputs:
                continue
            it32 = _Item(op, moved, [np.asarray(values[op.inputs[i].name]) for i in moved],
                         [d.astype(np.float32) for d in it64.d], it64.outputs, "float32", "op", exact=True)
            pairs.append((it64, it32))
        return pairs

    def _float32_chunk(self, ops: list[Any], values: dict[str, np.ndarray]) -> list[OpGap]:
        pairs = self._float32_pairs(ops, values)
        g64, g32 = self._float32_graphs_of(pairs, values)
        if g64 is None or g32 is None:
            return []
        (run64, off), (run32, _) = _gradient_run(g64, [a for a, _ in pairs]), _gradient_run(g32, [b for _, b in pairs])
        gaps = []
        for k, (a, _) in enumerate(pairs):
            if k not in run64 or k not in run32:
                continue
            (grad64, _, out64), (grad32, y32, out32) = run64[k], run32[k]
            terms = [(_dot64(g, d), _dot64(h, d)) for g, h, d in zip(grad64, grad32, a.d)]
            gaps.append(OpGap(self.forensics._ref(a.op), float(sum(t[0][0] for t in terms)),  # noqa: SLF001
                              float(sum(t[1][0] for t in terms)), float(sum(t[0][1] for t in terms)), y32,
                              off.get(k, 0.0), _apart(out32, out64)))
        return gaps

    def _float32_graphs_of(self, pairs: list[tuple[_Item, _Item]], values: dict[str, np.ndarray]) -> tuple:
        """The float64 gradient graph of the pairs (with their OpGap.rounding) and the float32 one: the same ops at
        the same shapes at the next point use the ones built for the first."""
        key = tuple((a.op.name, tuple(x.shape for x in a.x),
                     tuple(_digest(values[t.name]) for i, t in enumerate(a.op.inputs) if i not in a.moved))
                    for a, _ in pairs)
        if key not in self._float32_graphs:
            g64 = _gradient_graph([a for a, _ in pairs], values, "float64", self._signs, rounding=True)
            held = {k: list(a.held.values()) for k, (a, _) in enumerate(pairs)}
            g32 = _gradient_graph([b for _, b in pairs], values, "float32", self._signs, held)
            self._float32_graphs[key] = (g64, g32)
        return self._float32_graphs[key]

    def _upcast(self, op) -> bool:
        key = _shape_key(op)[:2]
        if key not in self._f64:
            self._f64[key] = _float64_kernel(op)
        return self._f64[key]

    def _sweep(self, items: list[_Item], pending: list[int], run: Callable[[list[int], float], list[float]]) -> None:
        """numeric.sweep's ladder for the items `pending` at once: each step evaluated (both signs) for the items
        still undecided, in one run per sign."""
        ladders = {j: _EXACT_LADDER if items[j].exact else
                   sweep.ladder_for(_EPS[items[j].dtype], items[j].dtype == "float64") for j in pending}
        depth = max(len(ladder.steps) for ladder in ladders.values())
        for i in range(depth):
            pending = [j for j in pending if i < len(ladders[j].steps)]
            if not pending:
                break
            for sign in (1.0, -1.0):
                by_step: dict[float, list[int]] = {}
                for j in pending:
                    by_step.setdefault(ladders[j].steps[i], []).append(j)
                for h, which in by_step.items():
                    for j, phi in zip(which, run(which, sign * h)):
                        _add_point(items[j], sign * h, phi)
            still = []
            for j in pending:
                if items[j].exact:
                    _exact_verdict(items[j])
                    continue
                if i + 1 >= ladders[j].min_steps:
                    it = items[j]
                    it.est = sweep.analyse(it.line)
                    it.verdict = _classify(it.est, it.dtype)
                    if it.est.nonfinite or it.verdict != "unresolved":
                        continue
                still.append(j)
            pending = still

    def _judged(self, it: _Item) -> LocalCheck:
        check = self._judgement(it)
        shared = self.shared.get(it.op.name, 1)
        return replace(check, shared=shared) if shared > 1 else check

    def _judgement(self, it: _Item) -> LocalCheck:
        ref = self.forensics._ref(it.op)  # noqa: SLF001
        est = it.est
        evals = it.line.evaluations + 1
        if it.exact:
            tol = _EXACT_TOL[it.dtype]
            why = None if it.verdict == "pass" else (
                "outputs not finite along the line" if it.rel is None else
                f"linear in its inputs, its differences are exact up to rounding: {it.rel:.3g} relative" +
                (" apart" if it.verdict == "fail" else f", above rounding ({tol:g}) and below a clear error (1e-2)"))
            return LocalCheck(ref, it.kind, it.verdict, it.dtype, it.rel, tol, evals, why)  # type: ignore[arg-type]
        if est is None:
            return LocalCheck(ref, it.kind, "undecided", it.dtype, None, None, evals, "no step evaluated")
        # relative to the directional derivatives themselves (the sweep decides on the terms' magnitude, which a
        # custom gradient's region can make far larger: a 1% error would read as 2e-4)
        denominator = max(abs(est.autodiff), abs(est.numeric))
        rel, bound = ((abs(est.delta) / denominator, (est.bound + _floor(it.dtype) * est.scale) / denominator)
                      if denominator > 0 else (est.rel_error, est.rel_threshold(_floor(it.dtype))))
        if it.verdict == "pass":
            return LocalCheck(ref, it.kind, "pass", it.dtype, rel, bound, evals, None if not it.nearby else
                              f"the recorded values sit on a kink of {it.op.type} (a tie or a zero: TensorFlow's "
                              f"gradient there is one subgradient); at a point {NEARBY:g} away, relative, it agrees")
        if it.verdict == "fail" and it.kind == "op" and it.dtype != "float64":
            # TensorFlow's own op, in float32 because its kernel has no float64 version: its forward may cancel there
            # (a batch norm's variance of large inputs), and differences of a rounded forward are not evidence
            # against an exact gradient formula; the whole-model checks (float64 where they can) decide
            return LocalCheck(ref, it.kind, "undecided", it.dtype, rel, bound, evals,
                              f"differences converge to {est.numeric:.6g} while the gradient gives {est.autodiff:.6g}, "
                              f"in {it.dtype} (no {it.op.type} kernel takes float64 here): its forward's own rounding "
                              "can make that, so it is not evidence against TensorFlow's gradient")
        if it.verdict == "fail":
            return LocalCheck(ref, it.kind, "fail", it.dtype, rel, bound, evals,
                              f"differences converge to {est.numeric:.6g} while the gradient gives {est.autodiff:.6g}")
        why = ("outputs not finite along the line" if est.nonfinite else
               "the differences did not settle within the steps" if it.verdict == "unresolved" else
               f"the sweep says {it.verdict}")
        return LocalCheck(ref, it.kind, "undecided", it.dtype, rel, bound, evals, why)

    # -- custom gradients, in the frozen graph ----------------------------------------------------
    def _check_custom(self, op, values: dict[str, np.ndarray], feed: dict[str, np.ndarray],
                      outcome: LocalOutcome) -> None:
        f = self.forensics
        ref = f._ref(op)  # noqa: SLF001
        found = self._custom_inputs(op, ref, outcome)
        if found is None:
            return
        moved, results = found
        item = self._item(op, values, "custom_gradient", op.outputs[0].dtype.name, moved)
        if item is None or not moved:
            outcome.unchecked.append((ref, "its custom gradient gives no input made from a source a gradient"
                                      if item is not None else "its inputs are not finite at the recorded values"))
            return
        item.outputs = [i for i in range(results) if _is_float(op.outputs[i])]
        reads = self._reads_beside(op, results, moved) if op.type == "IdentityN" else None
        if reads is not None:
            outcome.unchecked.append((ref, f"the forward its custom gradient replaces also reads {reads}, which its "
                                      "gradient does not receive: checked with the whole model"))
            return
        f._stale()  # noqa: SLF001 - gradients were added to the graph
        self._custom_line(item, feed, outcome)
        check = self._judged(item)
        if check.status != "undecided" and len(moved) > 1:
            check = self._one_at_a_time(item, (values, feed), outcome, check)
        outcome.checks.append(check)

    def _one_at_a_time(self, item: _Item, at: tuple, outcome: LocalOutcome, check: LocalCheck) -> LocalCheck:
        """A custom gradient of several inputs, checked again with each input moved alone (`at` = (recorded values,
        feed)): the inputs whose gradient is wrong, named in the check (and through them the sources), with their
        own error, which the others' right gradient no longer dilutes (a bias gradient 3% off beside a large input
        reads 1e-4 together); one that fails alone fails the check even where together it passed."""
        values, feed = at
        alone: list[tuple[int, LocalCheck]] = []
        for k, i in enumerate(item.moved):
            one = self._item(item.op, values, "custom_gradient", item.dtype, item.moved)
            if one is None:
                return check
            one.outputs = item.outputs
            one.d = [d if j == k else np.zeros_like(d) for j, d in enumerate(one.d)]
            self._custom_line(one, feed, outcome)
            alone.append((i, self._judged(one)))
        failing = [(i, c) for i, c in alone if c.status == "fail"]
        if not failing:
            if check.status == "pass":
                return check
            return replace(check, evidence=f"{check.evidence}; moved one at a time, no input disagrees on its own")
        worst = max((c for _, c in failing), key=lambda c: c.rel_error or 0.0)
        said = ", ".join(f"input {i}{self._input_sources(item.op, i)} {c.status} (rel. error {c.rel_error:.3g})"
                         for i, c in alone if c.rel_error is not None)
        together = check.evidence or (f"moved together they agree (rel. error {check.rel_error:.3g})"
                                      if check.rel_error is not None else "moved together they agree")
        return replace(check, status="fail", rel_error=worst.rel_error, bound=worst.bound,
                       evaluations=check.evaluations + sum(c.evaluations for _, c in alone),
                       failing_inputs=tuple(i for i, _ in failing), evidence=f"{together}; moved one at a time: {said}")

    def _custom_inputs(self, op, ref: OpRef, outcome: LocalOutcome) -> tuple[list[int], int] | None:
        """(the inputs to move: those its gradient gives a gradient and that are made from a source, the number of
        its results), or None (unchecked, said in `outcome`)."""
        import tensorflow as tf

        f = self.forensics
        floats = [i for i, t in enumerate(op.inputs) if _is_float(t)]
        with f._graph.as_default():  # noqa: SLF001
            try:
                probe = tf.gradients([op.outputs[i] for i in range(len(op.outputs)) if _is_float(op.outputs[i])],
                                     [op.inputs[i] for i in floats])
            except Exception as exc:  # noqa: BLE001 - a gradient function the frozen graph cannot call
                outcome.unchecked.append((ref, f"its custom gradient cannot run on the frozen graph ({exc})"))
                return None
        if any(t.dtype.name == "resource" for t in op.inputs):
            outcome.unchecked.append((ref, "the variables its custom gradient differentiates are not checked locally"))
            return None
        moved = [i for i, g in zip(floats, probe) if g is not None]
        # tf.custom_gradient's IdentityN: the results first, then the inputs its gradient function receives
        results = min(moved) if op.type == "IdentityN" and moved else len(op.outputs)
        return [i for i in moved if self._from_sources(op.inputs[i])], results

    def _upstream(self, outs: list, feed: dict[str, np.ndarray]) -> list[np.ndarray] | None:
        """The gradient of the model's projected outputs with respect to `outs` at `feed` (float64), what a custom
        gradient receives inside the model's backward (one that is not linear in it, zeroing small ones, is then
        checked as the model uses it); None where it is zero or TensorFlow gives none (a fixed cotangent then)."""
        import tensorflow as tf

        f = self.forensics
        with f._graph.as_default():  # noqa: SLF001
            phi = _projection(list(f._outputs.values()), 99)[0]  # noqa: SLF001
            dys = tf.gradients(phi, outs)
            dense = [_dense64(dy) for dy in dys if dy is not None]
        f._stale()  # noqa: SLF001
        if len(dense) < len(dys):
            return None
        got = [np.asarray(v, np.float64) for v in f._run(dense, feed)]  # noqa: SLF001
        return got if any(np.any(v) for v in got) else None

    def _input_sources(self, op, i: int) -> str:
        """" (x, w)": the sources whose gradient reaches input `i` of the op, from the static pass ("" without it)."""
        if self.analysis is None:
            return ""
        names = input_sources(self.analysis, self.forensics._ref(op), (i,))  # noqa: SLF001
        return f" ({', '.join(names)})" if names else ""

    def _reads_beside(self, op, results: int, moved: list[int]) -> str | None:
        """What the forward of a custom gradient's region reads from a source other than through the inputs its
        gradient receives (a tensor the function closes over, made from an input or a variable: its gradient
        through the region is lost, and moving the inputs alone cannot see it); None when nothing."""
        args = {op.inputs[i].name for i in moved}
        sources = self.forensics.source_ops()
        stack, seen = [op.inputs[i].op for i in range(results)], set()
        while stack:
            o = stack.pop()
            if o.name in seen:
                continue
            seen.add(o.name)
            if o.name in sources:
                return f"{o.type} '{o.name}'"
            stack.extend(t.op for t in o.inputs if t.name not in args)
        return None

    def _from_sources(self, t) -> bool:
        """Whether tensor `t` of the frozen graph is made from a source (an input or a variable): a constant input
        of a custom gradient is not moved (its gradient, right or not, reaches no source)."""
        sources = self.forensics.source_ops()
        stack, seen = [t.op], set()
        while stack:
            o = stack.pop()
            if o.name in sources:
                return True
            if o.name not in seen:
                seen.add(o.name)
                stack.extend(i.op for i in o.inputs)
        return False

    def _custom_line(self, it: _Item, feed: dict[str, np.ndarray], outcome: LocalOutcome) -> None:
        import tensorflow as tf

        f = self.forensics
        op = it.op
        outs = [op.outputs[i] for i in it.outputs]
        ins = [op.inputs[i] for i in it.moved]
        upstream = self._upstream(outs, feed)
        if upstream is not None:
            outcome.decisive.add(f._ref(op))  # noqa: SLF001
        with f._graph.as_default():  # noqa: SLF001
            if upstream is None:
                phi_t = _projection(outs, 0)[0]
            else:  # the cotangent the model's backward really hands the custom gradient at this point
                phi_t = tf.add_n([tf.reduce_sum(tf.cast(o, tf.float64) * dy) for o, dy in zip(outs, upstream)])
            grads = [_dense64(g) if g is not None else None for g in tf.gradients(phi_t, ins)]
        f._stale()  # noqa: SLF001

        def at(t: float) -> dict:
            return {ins[k]: (x + t * d).astype(ins[k].dtype.as_numpy_dtype) for k, (x, d) in enumerate(zip(it.x, it.d))}

        phi0, g = f._run([phi_t, [g for g in grads if g is not None]], feed, at(0.0))  # noqa: SLF001
        given = iter(g)
        g = [next(given) if gi is not None else None for gi in grads]
        outcome.runs += 1
        it.g = [np.zeros_like(x) if gi is None else np.asarray(gi, np.float64) for gi, x in zip(g, it.x)]
        _start_line(it, float(phi0))

        def run(_which: list[int], t: float) -> list[float]:
            outcome.runs += 1
            it.fed = [(x + t * d).astype(p.dtype.as_numpy_dtype) for p, x, d in zip(ins, it.x, it.d)]
            return [float(f._run(phi_t, feed, dict(zip(ins, it.fed))))]  # noqa: SLF001

        self._sweep([it], [0], run)


_EXACT_LADDER = sweep.Ladder(steps=(1.0,), min_steps=1)
# The relative error rounding explains in an exact check (sums of thousands of terms included), per dtype; above
# CLEAR the op's gradient is wrong; between, undecided.
_EXACT_TOL = {"float64": 1e-10, "float32": 1e-4, "float16": 3e-2, "bfloat16": 1e-1}
CLEAR = 1e-2


def _exact_verdict(it: _Item) -> None:
    """A value-free op's check from one step: its central difference of psi is psi'(0) up to rounding."""
    line = it.line
    (p_plus, lin_plus), (p_minus, lin_minus) = line.points[1.0], line.points[-1.0]
    delta = ((p_plus - lin_plus) - (p_minus - lin_minus)) / 2.0
    numeric = line.autodiff + delta
    denominator = max(line.scale, abs(numeric))
    if not all(math.isfinite(v) for v in (p_plus, p_minus, lin_plus, lin_minus)):
        it.rel, it.verdict = None, "undecided"
        return
    it.rel = abs(delta) / denominator if denominator > 0 else 0.0
    limit = _EXACT_TOL[it.dtype]
    it.verdict = "pass" if it.rel <= limit else "fail" if it.rel > max(CLEAR, 100 * limit) else "undecided"


def _classify(est, dtype: str) -> str:
    """numeric.sweep's verdict of one op's line, judged against the directional derivative itself rather than the
    magnitude of its terms (a custom gradient's region can make those far larger than what it returns, and an
    integer it computes from its input can make the differences jump: a bound that is a fraction of the terms
    would let a 10% error pass): a pass needs the bound within 1% of the derivative, a failure a difference beyond
    the bound; anything else is unresolved, and the whole-model checks decide."""
    verdict = sweep.classify(est, _floor(dtype), 1e-2)
    if verdict != "pass" or est.scale == 0.0:
        return verdict
    derivative = max(abs(est.autodiff), abs(est.numeric))
    if derivative == 0.0:
        return verdict
    return "pass" if est.bound + _floor(dtype) * derivative <= 1e-2 * derivative else "unresolved"


def _floor(dtype: str) -> float:
    return floor_for(dtype)


def _dot64(g: np.ndarray, d: np.ndarray) -> tuple[float, float]:
    """(sum(g·d), sum(|g·d|)) accumulated in float64, a million entries at a time (no float64 copy of a large
    weight)."""
    g, d = g.reshape(-1), d.reshape(-1)
    total = magnitude = 0.0
    for i in range(0, g.size, 1 << 20):
        p = g[i:i + (1 << 20)].astype(np.float64) * d[i:i + (1 << 20)]
        total += float(np.sum(p))
        magnitude += float(np.sum(np.abs(p)))
    return total, magnitude


# entries per block of the step's arithmetic: its temporaries stay small and are reused, and each block's inner
# product stays below the size at which numpy's BLAS shares a dot between threads (a ResNet50's 230M entries
# stepped took 4 times as long in 256K blocks on a busy 2-core machine, the dot's threads waiting on each other)
_BLOCK = 1 << 12


def _stepped(x: np.ndarray, d: np.ndarray, t: float, dtype, g: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(x + t·d (float64) rounded to `dtype`, and with `g` <g, fed - x>: the change the gradient predicts for the
    array really fed), a block at a time: the same numbers as `(x + t * d).astype(dtype)` without two float64
    temporaries of a large weight's size at every step, and the prediction read while each block is at hand; in
    x's own arithmetic otherwise."""
    if x.dtype != np.float64 or d.dtype != np.float64:
        fed = np.asarray(x + t * d, dtype=dtype)
        return fed, 0.0 if g is None else _moved_dot(g, x, fed)
    out = np.empty(x.shape, dtype)
    flat, xs, ds = out.reshape(-1), x.reshape(-1), d.reshape(-1)
    gs = None if g is None else g.reshape(-1)
    tmp = np.empty(min(xs.size, _BLOCK))
    lin = 0.0
    for i in range(0, xs.size, _BLOCK):
        n = min(_BLOCK, xs.size - i)
        np.multiply(ds[i:i + n], t, out=tmp[:n])
        np.add(tmp[:n], xs[i:i + n], out=tmp[:n])
        flat[i:i + n] = tmp[:n]
        if gs is not None:
            np.subtract(flat[i:i + n], xs[i:i + n], out=tmp[:n])
            lin += float(np.dot(gs[i:i + n], tmp[:n]))
    return out, lin


def _moved_dot(g: np.ndarray, x: np.ndarray, p: np.ndarray) -> float:
    """<g, p - x> in float64, p the array fed, a block at a time (no float64 copy of p nor of the difference)."""
    if x.dtype != np.float64:
        return float(np.vdot(g.reshape(-1), (p.astype(np.float64, copy=False) - x).reshape(-1)))
    gs, xs, ps = g.reshape(-1), x.reshape(-1), p.reshape(-1)
    tmp = np.empty(min(xs.size, _BLOCK))
    total = 0.0
    for i in range(0, xs.size, _BLOCK):
        n = min(_BLOCK, xs.size - i)
        np.subtract(ps[i:i + n], xs[i:i + n], out=tmp[:n])
        total += float(np.dot(gs[i:i + n], tmp[:n]))
    return total


def _start_line(it: _Item, phi0: float) -> None:
    """The line of `it` from its recorded point: <g, d> its gradient's slope, the terms' magnitude its scale."""
    sums = [_dot64(g, d) for g, d in zip(it.g, it.d)]
    autodiff, scale = float(sum(a for a, _ in sums)), float(sum(b for _, b in sums))
    eps = _EPS[it.dtype]
    phi_norm = abs(phi0) + 1e-300
    it.line = sweep.Line(evaluate=lambda _t: (math.nan, math.nan), autodiff=autodiff, scale=scale,
                         sigma_floor=eps * phi_norm, phi_norm=phi_norm,
                         low_precision_autodiff=it.dtype != "float64", phi0=phi0, rounding=eps)


def _add_point(it: _Item, t: float, phi: float) -> None:
    """phi(t) and the change the gradient predicts for the point really fed (the arrays the run fed, rounded to its
    placeholders' dtype; for a value-free op's one exact step, t·<g, d>: its rounding is far below
    the check's tolerance)."""
    if it.exact:
        lin = t * it.line.autodiff
    elif it.lin is not None:  # read while the arrays were made (_stepped)
        lin, it.lin = it.lin, None
    else:
        assert it.fed is not None, "every run of a non-exact item keeps the arrays it fed or their prediction"
        lin = float(sum(_moved_dot(g, x, p) for g, x, p in zip(it.g, it.x, it.fed)))
        it.fed = None
    it.line.points[t] = (phi - it.line.phi0, lin)
    it.line.evaluations += 1


def _copy_op(op, k: int, values: dict[str, np.ndarray], item: _Item, dtype: str,
             signs: Callable[[int], np.ndarray]):
    """The op copied alone into the default graph (placeholders for its float inputs in `dtype`, constants for the
    rest), with phi = sum(u·outputs) and its gradient: (placeholders, phi, gradients) or None."""
    import tensorflow as tf

    node = type(op.node_def)()
    node.CopyFrom(op.node_def)
    node.name = f"local{k}"
    del node.input[:]
    for key in [a for a in node.attr if a.startswith("_")]:
        del node.attr[key]
    if dtype == "float64":
        _to_float64(node)
    placeholders, inputs = [], []
    for i, t in enumerate(op.inputs):
        if i in item.moved:
            p = tf.compat.v1.placeholder(tf.float64 if dtype == "float64" else t.dtype, values[t.name].shape,
                                         name=f"local{k}_in{i}")
            placeholders.append(p)
            inputs.append(p)
        else:
            inputs.append(tf.constant(values[t.name], dtype=_out_dtype(t, dtype), name=f"local{k}_const{i}"))
    graph = tf.compat.v1.get_default_graph()
    try:
        copy = graph.create_op(node.op, inputs, [_out_dtype(t, dtype) for t in op.outputs], name=node.name,
                               attrs=dict(node.attr), compute_device=False)
    except Exception:  # noqa: BLE001 - an op whose attributes cannot stand alone is checked elsewhere
        return None
    phi, item.held = _projection([copy.outputs[i] for i in item.outputs], k, signs)
    return placeholders, phi


def _gradients(items: list[_Item], feeds: list[list[Any]], phis: list[Any]) -> tuple[list[list[Any]], list[list[bool]]]:
    """(each copy's registered gradient of its phi, from one tf.gradients call over the chunk (the copies are
    apart, so the sum's gradient at a copy's inputs is its own); per copy and input, whether it gives none). An
    input the registered gradient leaves out (a batch norm's statistics in inference) is held at its value: the
    static pass says what that cuts."""
    import tensorflow as tf

    flat = [p for ps in feeds for p in ps]
    got = iter(tf.gradients(tf.add_n(phis), flat))
    grads, cut = [], []
    for it, ps in zip(items, feeds):
        mine = [next(got) for _ in ps]
        cut.append([g is None for g in mine])
        cast = tf.convert_to_tensor if it.exact else _dense64
        grads.append([cast(g) if g is not None else tf.zeros_like(p) for g, p in zip(mine, ps)])
    return grads, cut


@dataclass
class _GradientGraph:
    """The items of one chunk copied in one dtype into a graph, with its session: what each kept item is fed (its
    moved inputs' placeholders and its fixed cotangent's) and fetched (its gradient and ||op output||), and, where
    asked and TensorFlow can differentiate the gradients, its direction's placeholders and OpGap.rounding."""

    session: Any
    kept: list[int]
    feeds: list[list[Any]]
    held: list[dict]
    fetches: list[Any]
    dirs: list[list[Any]] | None = None
    rounding: list[Any] | None = None


def _gradient_graph(items: list[_Item], values: dict[str, np.ndarray], dtype: str, signs,
                    held: dict[int, list[np.ndarray]] | None = None, rounding: bool = False) -> _GradientGraph | None:
    """The items copied in `dtype` into one graph; `held` gives an item's cotangent values (another graph's, the same
    u), else `signs` draws them; `rounding`: with each item's OpGap.rounding (`_rounding_fetches`). None when no item
    can be copied."""
    import tensorflow as tf

    graph = tf.Graph()
    kept, feeds, phis, outs, helds, ys = [], [], [], [], [], []
    with graph.as_default():
        for k, it in enumerate(items):
            copied = _copy_op(it.op, k, values, it, dtype, signs if held is None else _no_signs)
            if copied is None:
                continue
            if held is not None:
                if len(it.held) != len(held[k]):
                    continue  # an output of unknown shape draws its u in the graph: not the same u in both
                it.held = dict(zip(it.held, held[k]))
            kept.append(k)
            feeds.append(copied[0])
            phis.append(copied[1])
            helds.append(it.held)
            copy = graph.get_operation_by_name(f"local{k}")
            ys.append([copy.outputs[i] for i in it.outputs])
            outs.append(tf.sqrt(tf.add_n([tf.reduce_sum(tf.square(tf.cast(y, tf.float64))) for y in ys[-1]])))
        if not kept:
            return None
        grads, _ = _gradients([items[k] for k in kept], feeds, phis)
        fetches = [([tf.cast(g, tf.float64) for g in gs], norm, [tf.cast(y, tf.float64) for y in y_])
                   for gs, norm, y_ in zip(grads, outs, ys)]
        dirs, offs = _rounding_fetches(grads, feeds, ys) if rounding else (None, None)
    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    return _GradientGraph(tf.compat.v1.Session(graph=graph, config=config), kept, feeds, helds, fetches, dirs, offs)


def _rounding_fetches(grads: list[list[Any]], feeds: list[list[Any]], ys: list[list[Any]]
                      ) -> tuple[list[list[Any]] | None, list[Any] | None]:
    """Per item, placeholders for its directions d and eps32 * sum |d<g, d>/dy| |y| over its projected outputs y
    (OpGap.rounding), in the graph being built: the derivative is taken through TensorFlow's registered gradient,
    which reads y where it computes the gradient from the op's output (a softmax's, a tanh's); 0 where it does not.
    (None, None) when TensorFlow cannot differentiate the gradients (an op without a second-order gradient): no
    allowance is made then."""
    import tensorflow as tf

    eps = float(np.finfo(np.float32).eps)
    try:
        dirs = [[tf.compat.v1.placeholder(tf.float64, p.shape) for p in ps] for ps in feeds]
        fetches = []
        for gs, ds, outs in zip(grads, dirs, ys):
            moved = tf.add_n([tf.reduce_sum(tf.cast(g, tf.float64) * d) for g, d in zip(gs, ds)])
            by_y = tf.gradients(moved, outs)
            fetches.append(tf.add_n([tf.constant(0.0, tf.float64)] + [
                eps * tf.reduce_sum(tf.abs(tf.cast(r, tf.float64) * tf.cast(y, tf.float64)))
                for r, y in zip(by_y, outs) if r is not None]))
    except Exception:  # noqa: BLE001 - a gradient TensorFlow cannot differentiate again: no allowance
        return None, None
    return dirs, fetches


def _gradient_run(built: _GradientGraph, items: list[_Item]
                  ) -> tuple[dict[int, tuple[list[np.ndarray], float, list[np.ndarray]]], dict[int, float]]:
    """(item index -> (its gradient at its values, ||op output||, its projected outputs), item index -> OpGap.rounding
    where the graph has it), one run of the built graph; the rounding is left out (and the gradients run alone) where
    TensorFlow cannot run it."""
    feed: dict[Any, np.ndarray] = {}
    for k, ps, held in zip(built.kept, built.feeds, built.held):
        feed.update({p: x.astype(p.dtype.as_numpy_dtype) for p, x in zip(ps, items[k].x)})
        feed.update(held)
    got, off = None, None
    if built.rounding is not None and built.dirs is not None:
        for k, ds in zip(built.kept, built.dirs):
            feed.update({d: np.asarray(v, np.float64) for d, v in zip(ds, items[k].d)})
        try:
            got, off = built.session.run([built.fetches, built.rounding], feed)
        except Exception:  # noqa: BLE001 - as in building it: no allowance
            built.rounding = None
    if got is None:
        got = built.session.run(built.fetches, feed)
    runs = {k: ([np.asarray(g) for g in gs], float(norm), [np.asarray(y) for y in y_])
            for k, (gs, norm, y_) in zip(built.kept, got)}
    return runs, ({} if off is None else {k: float(v) for k, v in zip(built.kept, off)})


def _apart(out32: list[np.ndarray], out64: list[np.ndarray]) -> float:
    """||y32 - y64|| / ||y64|| over an op's projected outputs (OpGap.outputs_apart); 0 where they are not finite or
    have no size, whose gradients the other tests already judge."""
    pairs = [(a, b) for a, b in zip(out32, out64) if a.shape == b.shape and a.size]
    if not pairs or not all(np.all(np.isfinite(a)) and np.all(np.isfinite(b)) for a, b in pairs):
        return 0.0
    gap = math.sqrt(sum(float(np.sum(np.square(a - b))) for a, b in pairs))
    norm = math.sqrt(sum(float(np.sum(np.square(b))) for _, b in pairs))
    return gap / norm if norm > 0 else (math.inf if gap > 0 else 0.0)


def _no_signs(n: int) -> np.ndarray:
    """Placeholder cotangent values, replaced by another run's before anything is fed."""
    return np.ones(n)


def _digest(value: np.ndarray) -> str:
    """A constant input's identity for the check-graph cache (an axis, a shape, a gathered index)."""
    import hashlib

    a = np.ascontiguousarray(value)
    return f"{a.dtype}{a.shape}" + hashlib.blake2b(a.tobytes(), digest_size=16).hexdigest()


def _dense64(g):
    """A gradient as a dense float64 tensor (a gather's gradient is IndexedSlices)."""
    import tensorflow as tf

    return tf.cast(tf.convert_to_tensor(g), tf.float64)


def _projection(outputs: list, k: int, signs: Callable[[int], np.ndarray] | None = None) -> tuple[Any, dict]:
    """(phi, the placeholders to feed with their values): phi = sum(u · outputs) in float64 for a fixed
    pseudo-random signed cotangent u made in the graph (no output needs its shape known beforehand). With `signs`,
    an output of known shape takes its u as a placeholder fed `signs` instead (drawing u in the graph at every run
    cost a ResNet50's check runs more than their ops; feeding it costs a copy)."""
    import tensorflow as tf

    terms, held = [], {}
    for j, o in enumerate(outputs):
        if signs is not None and o.shape.is_fully_defined():
            u = tf.compat.v1.placeholder(tf.float64, o.shape, name=f"local{k}_u{j}")
            held[u] = signs(o.shape.num_elements()).reshape(o.shape.as_list())
        else:
            u = tf.sign(tf.random.stateless_uniform(tf.shape(o), seed=[k + 1, j], dtype=tf.float64) - 0.5)
        terms.append(tf.reduce_sum(tf.cast(o, tf.float64) * u))
    return tf.add_n(terms), held


def _out_dtype(t, dtype: str):
    import tensorflow as tf

    return tf.float64 if dtype == "float64" and t.dtype.as_datatype_enum in _LOW else t.dtype


def _to_float64(node) -> None:
    for a in node.attr.values():
        if a.HasField("type") and a.type in _LOW:
            a.type = _FLOAT64
        elif a.HasField("list") and a.list.type:
            a.list.type[:] = [_FLOAT64 if x in _LOW else x for x in a.list.type]


# -- the stage: when it decides, and what it says ------------------------------------------------------------
# Trainable parameters from which the local checks decide a model's numeric checks by default (--local-checks auto):
# below, the whole-model float64 checks cost little; above, a float64 copy and its sweeps cost several times the
# model's own forward and backward.
LARGE_MODEL = 1_000_000


def model_parameters(fn) -> int:
    """The trainable parameters the signature function captures."""
    return int(sum(v.shape.num_elements() or 0 for v in getattr(fn, "trainable_variables", ()) or ()))


def shared_forensics(loads, analysis):
    """One frozen copy of the loaded model per audit (its freeze costs about a forward and backward of a ResNet50),
    for the local checks and the probes' forensics."""
    from .forensics import Forensics

    if loads.forensics is None:
        loads.forensics = Forensics(loads.get(False).fn, analysis.graph, analysis.gradient_functions)
    return loads.forensics


def run_local(loads, analysis, point: dict[str, np.ndarray], seed: int,
              progress: Callable[[str], None] | None = None) -> LocalOutcome:
    """The local checks of every op at `point`: never raises for a model TensorFlow cannot freeze or run there
    (the outcome has no checks and says why in `unchecked`)."""
    from ..errors import raised_by_tensorflow
    from .runner import describe

    checker = LocalChecker(shared_forensics(loads, analysis), np.random.default_rng([seed, 7]), progress, analysis)
    try:
        return checker.run(point)
    except Exception as exc:
        if not raised_by_tensorflow(exc):
            raise
        return LocalOutcome(unchecked=[(OpRef("<graph>", "<graph>", "<graph>"),
                                        f"TensorFlow could not freeze or run the frozen graph: {describe(exc)}")])


def verdict(outcome: LocalOutcome, analysis=None):
    """The numeric.LocalVerdict the local checks give the whole model, None when they leave it undecided (an op
    undecided or not checkable here: the whole-model checks decide then). With `analysis`, a failure names the
    sources whose gradient crosses the failing inputs (`LocalVerdict.sources`), when the rest passed."""
    from .task import LocalVerdict

    failed = outcome.failed
    if failed and all(c.kind == "custom_gradient" and c.op in outcome.decisive for c in failed):
        return _failed_verdict(outcome, analysis)
    if not outcome.complete:  # TensorFlow's own op failed on its own: whether the model's gradient is wrong is the
        # whole model's to say (an op's wrong partial can meet a zero downstream: a cumprod's at a masked zero)
        return None
    ops = sum(c.shared for c in outcome.checks)
    exact = sum(c.shared for c in outcome.checks if c.bound is not None and c.evidence is None
                and c.op.op_type in VALUE_FREE)
    dtypes = sorted({c.dtype for c in outcome.checks})
    worst = max((c.rel_error or 0.0 for c in outcome.checks), default=0.0)
    evidence = (f"decided by local checks: {ops} ops, each checked on its own at the values the model's forward gave "
                f"it ({exact} linear in their inputs, checked once per type, attributes and shapes; the rest at "
                f"their own values; in {'/'.join(dtypes)}), composed by TensorFlow's chain rule; no whole-model "
                "differences were taken")
    least = min(dtypes, key=lambda d: -_EPS.get(d, 0.0))  # the row's dtype: the least precise any check ran in
    return LocalVerdict("pass", evidence, least, outcome.runs, worst)


def findings(outcome: LocalOutcome, analysis, confirmed: bool = True) -> list[Finding]:
    """One gradient-mismatch finding per op whose gradient failed its local check, naming the op, its sources and
    outputs (from the static masks of its node). `confirmed` False: the whole-model checks found the model's
    gradient right at that point, so an error of TensorFlow's own op does not reach it there: a warning that says
    so (a custom gradient's failure stays an error)."""
    from ..rules import numeric as rules

    pairs = op_pairs(analysis)
    found = []
    for c in outcome.failed:
        # a custom gradient is the author's code, judged with the cotangent the model hands it: an error whatever
        # the whole-model checks' own projection saw; TensorFlow's own op can be wrong where the model masks it
        masked = not confirmed and c.kind == "op"
        sources, outputs = pairs(c.op)
        sources = failing_sources(analysis, c) or sources
        what = "custom gradient" if c.kind == "custom_gradient" else "registered gradient (TensorFlow's own)"
        found.append(rules.GradientMismatch.finding(
            f"The {what} of {c.op.label} is not the derivative of its forward at the values the "
            f"model's forward gave it: checked on its own in {c.dtype}, relative error {c.rel_error:.3g} against a "
            f"bound of {c.bound:.3g} ({c.evidence})" + ("" if not masked else
            "; the model's gradient at this point agrees with its finite differences (the whole-model checks), so "
            "the op's error does not reach it here, but it would wherever its result is not masked downstream"),
            op=c.op, sources=sources, outputs=outputs, severity=Severity.WARNING if masked else None,
            fix=None if c.kind == "custom_gradient" else _ASSUMING_FIX if c.op.op_type in ASSUMING else _BUILTIN_FIX))
    return found


# what to do about TensorFlow's own gradient of an op that is not the op's derivative at the values it receives: an
# op whose gradient assumes something of its inputs (domains.ASSUMING), and any other
_ASSUMING_FIX = ("TensorFlow's registered gradient of this op assumes something of its inputs that these values do "
                 "not hold (labels that are a distribution, lengths or indices within their range, values away from a "
                 "degenerate point): give it inputs that hold it, or wrap the op in tf.custom_gradient with the "
                 "derivative the model needs.")
_BUILTIN_FIX = ("TensorFlow's registered gradient of this op is not its derivative at these values (a convention at "
                "a boundary, such as Xlogy's 0 at x = 0, or a kernel's error): keep the op's inputs away from those "
                "values, or wrap the op in tf.custom_gradient with the derivative the model needs.")


def _failed_verdict(outcome: LocalOutcome, analysis):
    """The fail verdict of custom gradients that failed their local checks, naming the sources they concern when
    every failure named its inputs and every other check passed."""
    from .task import LocalVerdict

    failed = outcome.failed
    first = max(failed, key=lambda c: c.rel_error or 0.0)
    names = ", ".join(c.op.short for c in failed[:3]) + (" ..." if len(failed) > 3 else "")
    rest = [c for c in outcome.checks if c.status != "fail"]
    named = analysis is not None and outcome.complete_beside(failed) and all(c.failing_inputs for c in failed)
    sources = tuple(dict.fromkeys(s for c in failed for s in failing_sources(analysis, c))) if named else None
    return LocalVerdict("fail", f"local checks: the custom gradient of {names} disagrees with its differences at "
                        "the values and with the cotangent the model's forward and backward gave it" + (
                            "" if sources is None else f" (for {', '.join(sources)}; the {len(rest)} other "
                            "check(s) pass)"), first.dtype, outcome.runs, first.rel_error, sources)


def failing_sources(analysis, check: LocalCheck) -> tuple[str, ...]:
    """The sources whose gradient reaches the check's op through its failing inputs (all the op's sources when
    none is named), from the static masks of its node."""
    if not check.failing_inputs:
        return op_pairs(analysis)(check.op)[0]
    return input_sources(analysis, check.op, check.failing_inputs)


def input_sources(analysis, ref: OpRef, inputs: tuple[int, ...]) -> tuple[str, ...]:
    """The sources whose gradient reaches the op `ref` through its inputs at those positions (static masks)."""
    src = 0
    for node in analysis.graph.ops.values():  # a function called in several contexts has a node per copy
        if node.ref == ref:
            for i in inputs:
                if i < len(node.inputs):
                    src |= analysis.reach_grad[node.inputs[i][0]]
    return tuple(analysis.source_names(src))


def op_pairs(analysis) -> Callable[[OpRef], tuple[tuple[str, ...], tuple[str, ...]]]:
    """op -> (the sources, the outputs) whose gradient paths cross it, from the static masks of its node."""
    nodes: dict[OpRef, list[Any]] = {}
    for n in analysis.graph.ops.values():  # a function called in several contexts has a node per copy
        nodes.setdefault(n.ref, []).append(n)
    names = [s.name for s in analysis.sources]
    outs = [o.name for o in analysis.outputs]

    def pairs(ref: OpRef) -> tuple[tuple[str, ...], tuple[str, ...]]:
        src = out = 0
        for node in nodes.get(ref, []):
            s_mask, o_mask = analysis.op_masks(node, grad=True)
            src, out = src | s_mask, out | o_mask
        return (tuple(n for i, n in enumerate(names) if src >> i & 1),
                tuple(n for j, n in enumerate(outs) if out >> j & 1))

    return pairs


def probe_note(checks: list[LocalCheck]) -> list[str]:
    """One line on the local checks at the probe points (the numeric checks' note counts their own point)."""
    if not checks:
        return []
    by = {s: sum(c.shared for c in checks if c.status == s) for s in ("pass", "fail", "undecided")}
    points = len({c.scale for c in checks})
    return [f"Local checks at {points} probe point(s): {sum(by.values())} op checks, {by['pass']} pass, {by['fail']} "
            f"fail, {by['undecided']} undecided (an undecided point is checked with the whole model)"]


def notes(outcome: LocalOutcome, decided: bool) -> list[str]:
    lines = []
    if outcome.checks:
        by = {s: sum(c.shared for c in outcome.checks if c.status == s) for s in ("pass", "fail", "undecided")}
        lines.append(f"Local checks: {sum(by.values())} ops at the values the model's forward gave them: {by['pass']} "
                     f"pass, {by['fail']} fail, {by['undecided']} undecided ({outcome.runs} runs)"
                     + ("; they decide the numeric checks" if decided else "; the whole-model checks decide"))
    for c in outcome.undecided[:3]:
        lines.append(f"Local checks: {c.op.label} undecided on its own: {c.evidence}")
    for ref, why in outcome.unchecked[:5]:
        lines.append(f"Local checks: {ref.label} not checked on its own: {why}")
    if len(outcome.unchecked) > 5:
        lines.append(f"Local checks: {len(outcome.unchecked) - 5} more ops not checked on their own")
    return lines
