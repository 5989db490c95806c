"""What values each signature input is made for, read from the static pass's graph: token ids below the
size of the table they index, a padding mask, class-probability labels of a softmax cross-entropy.

The synthesised point must be an input the model was made for: all-zero token ids are all padding (a
masked recurrent model then outputs NaN), and N(0, 1) labels make TensorFlow's registered gradient of
`softmax_cross_entropy_with_logits` differ from the derivative of its forward value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..graph.dataflow import METADATA_OPS
from ..model import OpRef

# Op type -> the input whose registered gradient assumes it is a distribution (non-negative rows summing
# to 1): the kernel's backprop is softmax(logits) - labels, the derivative only when sum(labels) = 1.
DISTRIBUTION_LABELS = {"SoftmaxCrossEntropyWithLogits": 1}
# Op type -> the input that holds class indices into the last dimension of the logits at input 0: the kernel
# refuses a label outside [0, classes).
CLASS_LABELS = {"SparseSoftmaxCrossEntropyWithLogits": 1}
# Op type -> the input that holds indices into the table at input 0.
GATHERS = {"GatherV2": 1, "Gather": 1, "ResourceGather": 1, "GatherNd": 1, "ResourceGatherNd": 1}
# Op type -> the input whose last dimension holds one coordinate per leading dimension of the table at input 0.
ND_INDEXES = {"GatherNd": 1, "ResourceGatherNd": 1, "TensorScatterUpdate": 1, "ScatterNdUpdate": 1,
              "ResourceScatterNdUpdate": 1}
# Op type -> the input that holds the indices whose rows an update writes (last write wins): with two equal
# indices one update is lost from the forward while TensorFlow's registered gradient still hands each its part,
# so the gradient is the derivative only for distinct indices, the inputs such a model is made for.
SCATTER_UPDATES = {"TensorScatterUpdate": 1, "ScatterNdUpdate": 1, "ResourceScatterNdUpdate": 1, "ScatterUpdate": 1,
                   "ResourceScatterUpdate": 1}
# Op type -> the input that holds partition indices, in [0, the op's number of partitions: its outputs).
PARTITIONS = {"DynamicPartition": 1}
# Keys of a lookup table: the values it returns say nothing about the keys' range, which is the table's
# content (not read here): such an input keeps 0, as before.
LOOKUPS = {"LookupTableFind", "LookupTableFindV2"}
# A value compared with 0 by these is a padding mask (Keras `mask_zero=True` writes NotEqual(ids, 0)).
MASKS = {"NotEqual", "Equal"}
# An integer compared by these with a Range (tf.sequence_mask: Range(maxlen) < lengths) is a length bounded by
# that axis: 1 is always inside it, and keeps a CTC loss's label and logit lengths feasible (1 <= 1).
COMPARES = {"Less", "LessEqual", "Greater", "GreaterEqual"}
# Op type -> (input holding segment ids, input holding the number of segments, or None: sorted ids from 0).
SEGMENTS = {**dict.fromkeys(("UnsortedSegmentSum", "UnsortedSegmentMax", "UnsortedSegmentMin", "UnsortedSegmentProd"),
                            (1, 2)),
            **dict.fromkeys(("SegmentSum", "SegmentMean", "SegmentMax", "SegmentMin", "SegmentProd", "SegmentSumV2",
                             "SegmentMeanV2", "SegmentMaxV2", "SegmentMinV2", "SegmentProdV2"), (1, None)),
            **dict.fromkeys(("SparseSegmentSum", "SparseSegmentMean", "SparseSegmentSqrtN"), (2, None))}
# Float ops that hand a value on unchanged: labels that pass only through them are the input itself.
_PASS = {"Identity", "IdentityN", "Snapshot", "EnsureShape", "Reshape", "ExpandDims", "Squeeze", "Cast",
         "StopGradient", "PreventGradient"}
_INTEGER = {3, 4, 5, 6, 9, 17, 22, 23}  # int32, uint8, int16, int8, int64, uint16, uint32, uint64
_FLOAT = {1, 2, 14, 19}
COUNT_HIGH = 5  # integers whose use is unknown: [1, 5)
# the name scope of tf.RaggedTensor.from_row_splits' own ops (its checks and the row partition it makes)
_SPLITS_SCOPE = "RowPartitionFromRowSplits/"


@dataclass(frozen=True)
class InputDomain:
    kind: str  # "ids" | "classes" | "count" | "index" | "distribution" | "length" | "position" | "segments"
    # | "partitions" | "splits" (a ragged tensor's row splits: offsets from 0 to the number of values)
    # ids in [1, high): the size of the table indexed; classes in [0, high); segment ids in [0, high) (None:
    # sorted ids, all 0); partition indices in [0, high)
    high: int | None = None
    padded: bool = False  # a mask reads the input: a little padding (0) is part of its domain
    op: OpRef | None = None  # the op that tells the domain (the gather, the loss)
    distinct: OpRef | None = None  # a scatter update writes the rows these index: no two of them equal

    def describe(self) -> str:
        said = self._described()
        if self.distinct is not None:
            said += f"; distinct, as {self.distinct.op_type} '{self.distinct.op_name}' writes the rows they index"
        return said

    def _ids(self) -> str:
        if self.op is not None and self.op.op_type in ND_INDEXES:
            return (f"indices in [1, {self.high}), below each dimension of the table {self.op.op_type} "
                    f"'{self.op.op_name}' indexes")
        return (f"token ids in [1, {self.high})" + (" with some padding (0)" if self.padded else "")
                + (f", the rows of the table {self.op.op_type} '{self.op.op_name}' reads" if self.op else ""))

    def _described(self) -> str:
        if self.kind == "ids":
            return self._ids()
        if self.kind == "distribution":
            return "rows of class probabilities (non-negative, summing to 1)"
        if self.kind == "classes":
            return f"class labels in [0, {self.high})" + (f", the classes of {self.op.op_type} '{self.op.op_name}'"
                                                          if self.op else "")
        if self.kind == "index":
            return "0 (a valid index into a table of unknown size, or a lookup-table key)"
        if self.kind == "length":
            return (f"lengths of 1, bounded by the axis {self.op.op_type} '{self.op.op_name}' compares them with"
                    if self.op else "lengths of 1")
        if self.kind == "position":
            return (f"1, a position in [0, {self.high}) along the axis of {self.op.op_type} '{self.op.op_name}' (the "
                    "shortest length that is not empty)" if self.op else f"1, a position in [0, {self.high})")
        if self.kind == "partitions":
            return f"partition indices in [0, {self.high})" + (f" of {self.op.op_type} '{self.op.op_name}'"
                                                               if self.op else "")
        if self.kind == "splits":
            return ("the row splits 0, 1, 2, ... of a ragged tensor (one value a row)"
                    + (f", read by {self.op.op_type} '{self.op.op_name}'" if self.op else ""))
        if self.kind == "segments":
            where = f" of {self.op.op_type} '{self.op.op_name}'" if self.op else ""
            return (f"segment ids in [0, {self.high}){where}" if self.high else f"sorted segment ids (all 0){where}")
        return f"small positive integers in [1, {COUNT_HIGH})" + (" with some padding (0)" if self.padded else "")


@dataclass(frozen=True)
class Uncertain:
    """A float input reaches the labels of `op` through computations gradaudit does not invert: whether
    its synthesised values make them a distribution is unknown."""

    input: str
    op: OpRef
    sources: frozenset[str]  # sources whose gradient passes through `op`
    outputs: frozenset[str]  # outputs `op` reaches


# Ops whose registered gradient is not the derivative of their forward value everywhere: it assumes
# something of an input (a distribution, an index range) or is a surrogate, or comes from another
# framework's compiled module.
ASSUMING = frozenset({*DISTRIBUTION_LABELS, "SparseSoftmaxCrossEntropyWithLogits", "CTCLoss", "CTCLossV2",
                      "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
                      "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4",
                      "XlaCallModule",
                      # registered gradients that TensorFlow documents as undefined or wrong at degenerate inputs:
                      # repeated singular values or eigenvalues, a factor exactly zero, a singular or non-positive
                      # matrix, a rank-deficient QR
                      "Svd", "SelfAdjointEigV2", "Eig", "Cumprod", "Qr", "MatrixDeterminant",
                      "LogMatrixDeterminant", "Cholesky", "MatrixSquareRoot",
                      # a scatter update's gradient hands every update its part: the derivative for distinct rows only
                      *SCATTER_UPDATES})


# Op types whose forward has a kink or a jump at some inputs (its slope changes there): the only ops that can
# explain a gradient that disagrees with finite differences at one point and agrees at a nearby one. Data-dependent
# control flow and a compiled module gradaudit cannot read are counted too (what they hold is not known).
KINK_OPS = frozenset({
    "Relu", "Relu6", "LeakyRelu", "Elu", "Selu", "Abs", "Maximum", "Minimum", "ClipByValue", "Floor", "Ceil",
    "Round", "Rint", "Sign", "FloorMod", "Mod", "FloorDiv", "TruncateDiv", "TruncateMod", "Max", "Min",
    "MaxPool", "MaxPoolV2", "MaxPool3D", "MaxPoolWithArgmax", "FractionalMaxPool", "Select", "SelectV2",
    "TopKV2", "Sort", "Bucketize", "SegmentMax", "SegmentMin", "UnsortedSegmentMax", "UnsortedSegmentMin",
    "CropAndResize", "While", "StatelessWhile", "If", "StatelessIf", "Case",
    "StatelessCase", "XlaCallModule", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars",
    "FakeQuantWithMinMaxVarsPerChannel", "QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3",
    "QuantizeAndDequantizeV4",
    # a comparison of a source's value: the mask it makes (cast to float, multiplied in) jumps where it flips (tester
    # 24: keys masked by x != 0 are all masked at exactly inputs x 0, and none is a step away)
    "Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "ApproximateEqual",
})


@dataclass(frozen=True)
class Kink:
    """An op of KINK_OPS on a forward path from `sources` to `outputs`."""

    op: OpRef
    sources: frozenset[str]
    outputs: frozenset[str]


@dataclass
class Domains:
    inputs: dict[str, InputDomain] = field(default_factory=dict)
    uncertain: list[Uncertain] = field(default_factory=list)
    # ops of ASSUMING types: where to look first when a gradient without a custom gradient is wrong
    assuming: list[OpRef] = field(default_factory=list)
    # (sources, outputs) each ASSUMING op and custom-gradient op lies on a path between (empty: not read)
    reach: dict[OpRef, tuple[frozenset[str], frozenset[str]]] = field(default_factory=dict)
    # the ops with a kink on a forward path; None when the graph was not read (any op may have one)
    kinks: list[Kink] | None = None
    # ops whose registered gradient, as their attrs configure it, is a surrogate: op -> what it does, in the order
    # of `assuming` (graph.dataflow.SURROGATE_GRADIENTS: a nearest-neighbour CropAndResize's boxes)
    surrogates: dict[OpRef, str] = field(default_factory=dict)

    def kink_on(self, sources: tuple[str, ...] | list[str], outputs: tuple[str, ...] | list[str]
                ) -> tuple[bool, OpRef | None]:
        """(whether an op with a kink may lie on a forward path from `sources` to `outputs`, the first such op
        found; None with True when the graph was not read)."""
        if self.kinks is None:
            return True, None
        for k in self.kinks:
            if k.sources & set(sources) and k.outputs & set(outputs):
                return True, k.op
        return False, None

    def on_path(self, refs: list[OpRef], sources: tuple[str, ...] | list[str],
                outputs: tuple[str, ...] | list[str]) -> list[OpRef]:
        """Those of `refs` on a path from `sources` to `outputs`, in their order; when the graph did not tell
        where some of them lie (a custom gradient's op may reach no output by the static masks), those on the
        path first and all the others after."""
        known = {r for r in refs if r in self.reach and all(self.reach[r])}  # both ends read from the graph
        on = [r for r in refs if r in known and self.reach[r][0] & set(sources) and self.reach[r][1] & set(outputs)]
        if len(known) == len(set(refs)):
            return on
        return on + [r for r in refs if r not in on]

    def doubtful(self, sources: tuple[str, ...] | list[str], outputs: tuple[str, ...] | list[str],
                 given: set[str]) -> Uncertain | None:
        """The op through which a mismatch between these sources and outputs may come from labels that
        are not a distribution (None when no such op, or the user gave that input with --inputs)."""
        for u in self.uncertain:
            if u.input not in given and u.sources & set(sources) and u.outputs & set(outputs):
                return u
        return None


def _suspects_reach(analysis) -> dict[OpRef, tuple[frozenset[str], frozenset[str]]]:
    """(sources, outputs) that each ASSUMING op, each op whose gradient is a surrogate and each custom-gradient op
    lies between."""
    reach = {}
    for node in analysis.graph.ops.values():
        if node.ref.op_type in ASSUMING or node.custom_gradient or node.surrogate:
            src, out = analysis.op_masks(node)
            reach[node.ref] = (frozenset(analysis.source_names(src)), frozenset(analysis.output_names(out)))
    return reach


def _op_domains(analysis) -> Domains:
    """What the graph's ops tell: those whose registered gradient assumes something or is a surrogate (as their
    attrs configure it), the custom gradients' and those ops' pairs, the ops with a kink on a forward path."""
    g = analysis.graph
    surrogates = {n.ref: n.surrogate for n in sorted(g.ops.values(), key=lambda n: (n.ref.function, n.ref.op_name))
                  if n.surrogate}
    domains = Domains(assuming=sorted({n.ref for n in g.ops.values() if n.ref.op_type in ASSUMING} | set(surrogates),
                                      key=lambda r: (r.function, r.op_name)), kinks=[], surrogates=surrogates)
    domains.reach.update(_suspects_reach(analysis))
    for node in sorted((n for n in g.ops.values() if n.ref.op_type in KINK_OPS),
                       key=lambda n: (n.ref.function, n.ref.op_name)):
        src, out = analysis.op_masks(node)
        if src and out:
            assert domains.kinks is not None
            domains.kinks.append(Kink(node.ref, frozenset(analysis.source_names(src)),
                                      frozenset(analysis.output_names(out))))
    return domains


def infer(analysis) -> Domains:
    """Domains of the signature inputs of a finished StaticAnalysis (empty without one)."""
    if analysis is None or getattr(analysis, "graph", None) is None:
        return Domains()
    g = analysis.graph
    domains = _op_domains(analysis)
    if not getattr(analysis, "input_tensor", None):
        return domains
    variable_shapes = {t: analysis.sources[i].shape for i, t in analysis.source_tensor.items()
                       if analysis.sources[i].kind == "variable"}
    for spec in analysis.signature.inputs:
        t = analysis.input_tensor.get(spec.name)
        if t is None:
            continue
        if spec.dtype in _INTEGER:
            domains.inputs[spec.name] = _integer_domain(g, t, variable_shapes)
        elif spec.dtype in _FLOAT:
            direct, through = _labels_reached(g, t)
            if direct is not None:
                domains.inputs[spec.name] = InputDomain("distribution", op=direct.ref)
            for node in through:
                src, out = analysis.op_masks(node)
                domains.uncertain.append(Uncertain(spec.name, node.ref, frozenset(analysis.source_names(src)),
                                                   frozenset(analysis.output_names(out))))
    return domains


def _readers(g, t: int):
    """(op node, input index) pairs reading tensor `t` or a tensor aliased to it (call arguments)."""
    for b, i in g.consumers(t):
        yield g.ops[b], i


@dataclass
class _IntegerUses:
    """What the readers of an integer input's values tell of its domain, gathered by `_integer_domain`."""

    high: int | None = None  # the rows of the smallest table indexed
    table: OpRef | None = None  # the gather reading that table
    unknown_table: bool = False
    padded: bool = False
    classes: tuple[int, OpRef] | None = None
    length: OpRef | None = None
    segments: InputDomain | None = None
    position: InputDomain | None = None
    distinct: OpRef | None = None  # a scatter update writing the rows they index
    splits: OpRef | None = None  # an op of RaggedTensor.from_row_splits reading them

    def domain(self) -> InputDomain:
        """The domain they tell, in order of precedence; indices a scatter update writes are distinct."""
        found = self._domain()
        if self.distinct is not None and found.kind in ("ids", "count", "index"):
            return replace(found, distinct=self.distinct)
        return found

    def _domain(self) -> InputDomain:
        if self.splits is not None:
            return InputDomain("splits", op=self.splits)
        if self.segments is not None:
            return self.segments
        if self.length is not None and self.high is None:
            return InputDomain("length", op=self.length)
        if self.position is not None and self.high is None:
            return self.position
        if self.classes is not None and self.high is None:
            return InputDomain("classes", high=self.classes[0], op=self.classes[1])
        if self.unknown_table and self.high is None:
            return InputDomain("index")
        if self.high is not None and self.high > 1:
            return InputDomain("ids", high=self.high, padded=self.padded, op=self.table)
        if self.high == 1:  # a table of one row: 0 is its only index
            return InputDomain("index")
        return InputDomain("count", padded=self.padded)


def _integer_domain(g, t: int, variable_shapes: dict) -> InputDomain:
    """Follow the integer values computed from the input (casts, reshapes, Keras' negative-index fix-up)
    to the tables they index and the masks that read them."""
    seen: set[int] = set()
    stack = [t]
    uses = _IntegerUses()
    while stack and len(seen) < 512:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        for node, i in _readers(g, x):
            stack.extend(_read_by(g, node, i, x, variable_shapes, uses))
    return uses.domain()


def _read_by(g, node, i: int, x: int, variable_shapes: dict, uses: _IntegerUses) -> list[int]:
    """Note in `uses` what `node`, reading integer tensor `x` at its input `i`, tells of the values; the
    integer tensors it computes from them, to follow next."""
    op = node.ref.op_type
    if op in METADATA_OPS:  # its shape, not its values
        return []
    if _SPLITS_SCOPE in node.ref.op_name:  # the offsets of a ragged tensor's rows, however they are read
        uses.splits = uses.splits or node.ref
        return []
    if _indexes(g, node, i, variable_shapes, uses):
        return []
    if op == "OneHot" and i == 0:  # a position along an axis of `depth` (CTC's label lengths)
        _position(g, node, uses)
    elif op in COMPARES and any(_from_range(g, y) for y, _ in node.inputs if y != x):
        uses.length = uses.length or node.ref
    elif op in MASKS and _compared_with_zero(g, node, x):
        uses.padded = True
    elif op not in MASKS:
        return [o for o in node.outputs if g.dtype[o] in _INTEGER]
    return []


def _indexes(g, node, i: int, variable_shapes: dict, uses: _IntegerUses) -> bool:
    """Whether `node` reads its input `i` as indices (table keys, segment ids, partitions, rows a scatter
    writes, class labels, rows a gather reads), noting in `uses` what they are bounded by."""
    op = node.ref.op_type
    if op in LOOKUPS:
        uses.unknown_table = True
    elif op in SEGMENTS and SEGMENTS[op][0] == i:
        _segments(g, node, uses)
    elif PARTITIONS.get(op) == i:
        uses.segments = uses.segments or InputDomain("partitions", high=len(node.outputs), op=node.ref)
    elif SCATTER_UPDATES.get(op) == i:
        uses.distinct = uses.distinct or node.ref
        _gathered(g, node, variable_shapes, uses)
    elif CLASS_LABELS.get(op) == i:
        _classes(g, node, uses)
    elif GATHERS.get(op) == i:
        _gathered(g, node, variable_shapes, uses)
    else:
        return False
    return True


def _segments(g, node, uses: _IntegerUses) -> None:
    """A segment op reading the values as its segment ids: their range is its number of segments (a constant),
    or sorted from 0 when it takes none."""
    count = SEGMENTS[node.ref.op_type][1]
    n = g.const_value.get(node.inputs[count][0]) if count is not None else None
    nseg = int(n) if isinstance(n, (int, float)) and n >= 1 else None
    if count is None or nseg is not None:
        uses.segments = uses.segments or InputDomain("segments", high=nseg, op=node.ref)


def _compared_with_zero(g, node, x: int) -> bool:
    return any(g.const_value.get(y) == 0.0 for y, _ in node.inputs if y != x)


def _position(g, node, uses: _IntegerUses) -> None:
    n = g.const_value.get(node.inputs[1][0]) if len(node.inputs) > 1 else None
    if isinstance(n, (int, float)) and n >= 1:
        uses.position = uses.position or InputDomain("position", high=int(n), op=node.ref)


def _classes(g, node, uses: _IntegerUses) -> None:
    """Class labels of the logits at input 0: in [0, their last dimension), the smallest over such ops."""
    n = _dim(g, node.inputs[0][0], -1)
    if n and (uses.classes is None or n < uses.classes[0]):
        uses.classes = (n, node.ref)


def _gathered(g, node, variable_shapes: dict, uses: _IntegerUses) -> None:
    """Indices into the table at input 0: below its rows, the smallest table's; unknown rows: an index. An N-d
    gather's or scatter's index holds one coordinate per leading dimension of its table (its last dimension tells
    how many): every coordinate stays below the smallest of those dimensions (a GatherNd into [5, 3, 4] takes
    indices in [0, 3), not [0, 5))."""
    leading = 1
    if node.ref.op_type in ND_INDEXES:
        leading = _dim(g, node.inputs[ND_INDEXES[node.ref.op_type]][0], -1) or 0  # 0: unknown, every dimension
    dims = _table_dims(g, node.inputs[0][0], variable_shapes, saved=_along_first_dim(g, node), leading=leading)
    rows = min(dims) if dims else None
    if rows is None:
        uses.unknown_table = True
    elif uses.high is None or rows < uses.high:
        uses.high, uses.table = rows, node.ref


def _from_range(g, t: int) -> bool:
    """Whether tensor `t` is a Range's result, through casts, reshapes and identities."""
    for _ in range(6):
        producer = g.producer.get(t)
        node = g.ops.get(producer) if producer is not None else None
        if node is None:
            src = g.aliased_from.get(t)
            if src and len(src) == 1:
                t = src[0]
                continue
            return False
        if node.ref.op_type == "Range":
            return True
        if node.ref.op_type not in ("Cast", "ExpandDims", "Reshape", "Identity") or not node.inputs:
            return False
        t = node.inputs[0][0]
    return False


def _dim(g, t: int, axis: int) -> int | None:
    """Dimension `axis` of tensor `t` as saved with the graph (`_output_shapes`), None when unknown."""
    shape = g.shape.get(t)
    dims = list(getattr(shape, "dim", ()))
    if not dims or getattr(shape, "unknown_rank", False) or dims[axis].size < 1:
        return None
    return int(dims[axis].size)


def _along_first_dim(g, node) -> bool:
    """Whether the op's indices index its table's first dimension: the N-d gathers and scatters (their first
    coordinates), Gather, and GatherV2 with a constant axis 0."""
    op = node.ref.op_type
    if op == "GatherV2":
        return len(node.inputs) > 2 and g.const_value.get(node.inputs[2][0]) == 0.0
    return op != "ResourceGather"


def _table_dims(g, params: int, variable_shapes: dict, saved: bool = False, leading: int = 1) -> list[int] | None:
    """The first `leading` dimensions (0: all of them) of the table a gather reads: a captured variable (directly,
    or through ReadVariableOp), or, with `saved`, a tensor whose dimensions are saved with the graph; None when
    one of them is not known."""
    for _ in range(8):
        shape = variable_shapes.get(params)
        if shape:
            dims = list(shape) if leading == 0 else list(shape[:leading])
            return dims if len(dims) == (leading or len(shape)) and all(d and d > 0 for d in dims) else None
        if saved and (rows := _saved_dims(g, params, leading)) is not None:
            return rows
        src = g.aliased_from.get(params)
        if src and len(src) == 1:
            params = src[0]
            continue
        producer = g.producer.get(params)
        node = g.ops.get(producer) if producer is not None else None
        if node is None or node.ref.op_type not in ("ReadVariableOp", "Identity") or not node.inputs:
            return None
        params = node.inputs[0][0]
    return None


def _saved_dims(g, t: int, leading: int) -> list[int] | None:
    """The first `leading` (0: all) dimensions of tensor `t` as saved with the graph, None when one is unknown."""
    shape = g.shape.get(t)
    if shape is None or getattr(shape, "unknown_rank", False):
        return None
    dims = list(getattr(shape, "dim", ()))
    dims = dims if leading == 0 else dims[:leading]
    if not dims or len(dims) < leading or any(d.size < 1 for d in dims):
        return None
    return [int(d.size) for d in dims]


def _labels_reached(g, t: int):
    """(the distribution op whose labels are the input itself, the ones it reaches through other ops)."""
    direct = None
    through = []
    seen: set[tuple[int, bool]] = set()
    stack = [(t, True)]
    while stack and len(seen) < 4096:
        x, unchanged = stack.pop()
        if (x, unchanged) in seen:
            continue
        seen.add((x, unchanged))
        for node, i in _readers(g, x):
            op = node.ref.op_type
            if DISTRIBUTION_LABELS.get(op) == i:
                if unchanged:
                    direct = direct or node
                elif node not in through:
                    through.append(node)
                continue
            floats = [o for o in node.outputs if g.dtype[o] in _FLOAT]
            stack.extend((o, unchanged and op in _PASS) for o in floats)
    return direct, [n for n in through if n is not direct]
