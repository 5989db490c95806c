"""What a lower precision does to float values: which flush to zero, which lose bits as subnormals, which
overflow, the loss scale a dynamic loss scaler settles on, and the dtype a model computes in. Plain numpy
(ml_dtypes for bfloat16): the casts are numpy's own round-to-nearest-even, the arithmetic TensorFlow's Cast kernel
does."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

TARGETS = ("float16", "bfloat16")
# A share of a source's nonzero gradient entries (or an op's nonzero outputs) below this is not a cause: a few
# entries twelve orders of magnitude below the largest move nothing in training.
LOST = 0.01
# The loss scale is a float32 value (Keras keeps it in a float32 variable): at most 2**127.
MAX_EXPONENT = 127
# Ops whose output is not computed: the frozen graph's inputs and its variables as constants.
NOT_COMPUTED = frozenset({"Const", "Placeholder"})
HALF_DTYPES = {19: "float16", 14: "bfloat16"}  # DT_HALF, DT_BFLOAT16


def numpy_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@dataclass(frozen=True)
class Limits:
    name: str
    smallest_subnormal: float  # below about half of it a value is zero after the cast
    smallest_normal: float  # below it a value keeps fewer significant bits
    largest: float  # above it (rounded) a value is inf after the cast

    @property
    def dynamic_range(self) -> float:
        """How far apart two magnitudes can be and both survive one cast (largest / smallest subnormal)."""
        return self.largest / self.smallest_subnormal


def limits(name: str) -> Limits:
    info = np.finfo(numpy_dtype(name))
    return Limits(name, float(info.smallest_subnormal), float(info.smallest_normal), float(info.max))


@dataclass(frozen=True)
class Classes:
    """The nonzero finite entries of a float array and what one cast to a lower precision makes of them."""

    entries: int  # nonzero finite entries (the others are zero or non-finite already)
    underflow: float  # fraction of them that are zero after the cast
    subnormal: float  # fraction that are subnormal after the cast (bits of precision lost)
    overflow: float  # fraction that are inf after the cast
    largest: float | None  # largest magnitude among them (None: no entry)
    smallest: float | None  # smallest magnitude among them

    @property
    def fits(self) -> bool:
        return self.underflow < LOST and self.overflow == 0


def magnitudes(values) -> np.ndarray:
    """The magnitudes of the nonzero finite entries of `values`, flat, in float64: what `classify` counts (pass
    them with `prepared=True` to classify one array at several scales)."""
    a = np.abs(np.asarray(values, dtype=np.float64)).reshape(-1)
    return a[np.isfinite(a) & (a > 0)]


@cache
def bounds(target: str) -> tuple[float, float, float]:
    """(the largest float64 magnitude that casts to zero in `target`, the largest that casts below its smallest
    normal, the largest that casts to a finite value): found on numpy's own cast, by bisection over the float64
    values (each class is an interval, the cast being monotonic), so that comparing with them is the cast."""
    dtype = numpy_dtype(target)
    lim = limits(target)

    def largest(keeps) -> float:
        lo, hi = 0, int(np.array(np.inf).view(np.int64))  # positive float64s ordered as their bit patterns
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if keeps(float(np.array(mid, np.int64).view(np.float64))):
                lo = mid
            else:
                hi = mid
        return float(np.array(lo, np.int64).view(np.float64))

    def cast(x: float) -> float:
        with np.errstate(over="ignore"):
            return float(np.asarray(x).astype(dtype).astype(np.float64))

    return (largest(lambda x: cast(x) == 0), largest(lambda x: cast(x) < lim.smallest_normal),
            largest(lambda x: math.isfinite(cast(x))))


def classify(values, target: str, scale: float = 1.0, prepared: bool = False) -> Classes:
    """Cast `values` × `scale` (computed in float64) to `target` and count what became of the nonzero entries
    (`prepared`: `values` are `magnitudes(...)` already). The cast is done by comparing with its `bounds`."""
    a = values if prepared else magnitudes(values)
    if not a.size:
        return Classes(0, 0.0, 0.0, 0.0, None, None)
    zero, subnormal, finite = bounds(target)
    v = a if scale == 1.0 else a * scale
    n = a.size
    under = int(np.count_nonzero(v <= zero))
    return Classes(n, under / n, (int(np.count_nonzero(v <= subnormal)) - under) / n,
                   float(np.count_nonzero(v > finite)) / n, float(a.max()), float(a.min()))


def settled_loss_scale(largest: float | None, target: str) -> float | None:
    """The power of two a dynamic loss scaler (Keras' LossScaleOptimizer: it starts at 2**15, halves the scale
    on a step with a non-finite gradient and doubles it after a run of finite steps) settles on when the largest
    gradient magnitude is `largest`: the largest power of two whose product with it still casts to a finite
    value (at most 2**127, float32's largest power of two). None when there is no nonzero gradient."""
    if not largest or not math.isfinite(largest):
        return None
    dtype = numpy_dtype(target)
    k = min(MAX_EXPONENT, math.floor(math.log2(limits(target).largest / largest)))
    with np.errstate(over="ignore"):
        while not np.isfinite(np.asarray(largest * 2.0 ** k).astype(dtype)):
            k -= 1
        while k < MAX_EXPONENT and np.isfinite(np.asarray(largest * 2.0 ** (k + 1)).astype(dtype)):
            k += 1
    return 2.0 ** k


def came_back(scaled) -> np.ndarray:
    """The entries of a gradient taken at a loss scale that are finite and nonzero: the ones the scale brought
    back (a zero at scale 1 that stays zero is a rounding, not an underflow)."""
    return np.isfinite(np.asarray(scaled, np.float64)) & (np.asarray(scaled) != 0)


def rescue_scale(loss_scale: float | None, u: dict[str, np.ndarray], target: str) -> float | None:
    """The power of two a model computing in `target` has its cotangent `u` scaled by, to tell an entry of its
    own gradient that underflowed to zero (it comes back) from one it rounded to zero (a power-of-two scale
    changes nothing but under- and overflow: it stays zero): the loss scale, kept below what overflows the largest
    cotangent entry in `target`. None without a loss scale."""
    if loss_scale is None:
        return None
    top = max((float(np.max(np.abs(v), initial=0.0)) for v in u.values()), default=0.0)
    room = limits(target).largest / (4 * top) if top > 0 else loss_scale
    return float(min(loss_scale, 2.0 ** math.floor(math.log2(room))))


def power_of_two(scale: float) -> str:
    """`2**15`, `2**-3`: how a loss scale is written."""
    return f"2**{round(math.log2(scale))}"


def pct(x: float) -> str:
    """A fraction or relative gap as a percentage in messages; "infinitely" for a non-finite one."""
    return "infinitely" if not np.isfinite(x) else f"{100 * x:.3g}%"


def compute_dtype(analysis) -> tuple[str, int, str] | None:
    """(dtype, count, what is counted) of the Cast ops to float16 or bfloat16 in the static graph: a model that
    already computes in mixed precision (Keras' mixed_float16 policy casts each layer's inputs to float16); without
    any, the ops whose outputs are float16 or bfloat16 (a model in a half precision throughout); None without any."""
    casts: dict[str, int] = {}
    ops: dict[str, int] = {}
    graph = analysis.graph
    for node in graph.ops.values():
        if node.ref.op_type in NOT_COMPUTED:
            continue
        for t in node.outputs:
            name = HALF_DTYPES.get(graph.dtype[t])
            if name:
                counts = casts if node.ref.op_type == "Cast" else ops
                counts[name] = counts.get(name, 0) + 1
                break
    counts, what = (casts, "Cast op(s) to {}") if casts else (ops, "op(s) computing in {}")
    if not counts:
        return None
    name = max(counts, key=lambda k: counts[k])
    return name, counts[name], what.format(name)
