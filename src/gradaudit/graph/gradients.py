"""Ask TensorFlow's own gradient registry which inputs of an op receive a gradient.

For a registered gradient we build a replica of the op in a scratch graph, call the registered
function, and look at each input's result: None, or a tensor that does not depend on the incoming
gradient (a gradient is linear in it, so such a result is identically zero), means the input
gets no gradient. This follows the installed TensorFlow, not a list frozen to one version.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import indexed_slices, op_def_registry, ops

from .dtypes import DT_INVALID, carries_gradient

log = logging.getLogger(__name__)


class GradKind(str, enum.Enum):
    REGISTERED = "registered"
    NOT_DIFFERENTIABLE = "not_differentiable"  # registered as None: tf.NotDifferentiable
    MISSING = "missing"  # no entry: differentiating raises LookupError
    RAISES = "raises"  # registered, but the function raises when called (PreventGradient, some attrs/shapes)


@dataclass(frozen=True)
class GradInfo:
    kind: GradKind
    passes: tuple[bool, ...]  # per input: does a (non-zero) gradient reach it
    verified: bool  # False when the replica could not be built: whether a gradient passes is not known
    reason: str | None = None  # why not verified, or (RAISES) TensorFlow's message


@functools.cache
def registry_kind(op_type: str) -> GradKind:
    try:
        fn = ops._gradient_registry.lookup(op_type)  # noqa: SLF001 - TF has no public accessor
    except LookupError:
        return GradKind.MISSING
    return GradKind.NOT_DIFFERENTIABLE if fn is None else GradKind.REGISTERED


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {text[0][:200]}" if text else exc.__class__.__name__


def _depends_on(tensor: tf.Tensor, targets: set) -> bool:
    if tensor.ref() in targets:
        return True
    seen = set()
    stack = [tensor.op]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        for t in op.inputs:
            if t.ref() in targets:
                return True
            stack.append(t.op)
    return False


class GradientOracle:
    """Cached answers to "does op type T, with these dtypes, pass a gradient to input i?"."""

    def __init__(self, may_run: Callable[[str], bool] = lambda _op_type: False) -> None:
        """`may_run(op_type)`: whether that op's kernel may run on synthetic values to tell a piecewise
        constant op from a smooth one (`flat_inputs`); the caller says which (the safety gate's pure ops)."""
        self._cache: dict[tuple, GradInfo] = {}
        self._flat: dict[tuple, tuple[bool | None, ...]] = {}
        self._may_run = may_run

    def info(self, op_type: str, in_dtypes: tuple[int, ...], out_dtypes: tuple[int, ...],
             attrs, in_shapes: tuple | None = None) -> GradInfo:
        """`in_shapes` (TensorShapeProtos or None, per input) are used only when the gradient function fails
        on a replica without shapes: some raise only for shapes they cannot read statically (QrGrad)."""
        kind = registry_kind(op_type)
        if kind is not GradKind.REGISTERED:
            return GradInfo(kind, (False,) * len(in_dtypes), True)
        key = (op_type, in_dtypes, out_dtypes)
        found = self._cache.get(key)
        if found is None:
            found = self._probe(op_type, in_dtypes, out_dtypes, attrs)
            self._cache[key] = found
        if (found.kind is GradKind.RAISES or not found.verified) and in_shapes and any(in_shapes):
            shaped = key + (tuple(s.SerializeToString() if s is not None else b"" for s in in_shapes),)
            if shaped not in self._cache:
                self._cache[shaped] = self._probe(op_type, in_dtypes, out_dtypes, attrs, in_shapes)
            found = self._cache[shaped]
        return found

    def flat_inputs(self, op_type: str, in_dtypes: tuple[int, ...], out_dtypes: tuple[int, ...], attrs,
                    in_shapes: tuple | None = None) -> tuple[bool | None, ...]:
        """Per input: is the op's value piecewise constant in it (True: a small change of that input changes
        no output at several random points, as for Floor, Round or the slope mask of ReluGrad), smooth in it
        (False: the value moves, as for Betainc's a and b) or not measured (None: not a float input, a
        stateful op, or the replica does not run on synthetic values). Only the op's own kernel runs, on
        synthetic values in a scratch graph: nothing of the model is executed."""
        key = (op_type, in_dtypes, out_dtypes,
               tuple(s.SerializeToString() if s is not None else b"" for s in (in_shapes or ())))
        found = self._flat.get(key)
        if found is None and not self._may_run(op_type):
            found = self._flat[key] = (None,) * len(in_dtypes)
        if found is None:
            found = self._flat[key] = self._measure_flat(op_type, in_dtypes, out_dtypes, attrs, in_shapes)
        return found

    @staticmethod
    def _measure_flat(op_type, in_dtypes, out_dtypes, attrs, in_shapes) -> tuple[bool | None, ...]:
        """Per input, whether nudging it left every output unchanged at three random points (flat_inputs)."""
        unknown: tuple[bool | None, ...] = (None,) * len(in_dtypes)
        float_in = _measurable_float_inputs(op_type, in_dtypes, out_dtypes)
        if not float_in:
            return unknown
        known = [_dims(in_shapes, i) for i in float_in]
        fallback = next((d for d in known if d is not None), [3])
        if any(np.prod(d or fallback) > 4096 for d in known):
            return unknown
        placeholder_shapes = [_dims(in_shapes, i) if i in float_in else None for i in range(len(in_dtypes))]
        fed_shapes = [_dims(in_shapes, i) or fallback if i in float_in else [] for i in range(len(in_dtypes))]
        graph = tf.Graph()
        try:
            with graph.as_default():
                holders = [tf.compat.v1.placeholder(tf.dtypes.as_dtype(d), shape=placeholder_shapes[i])
                           for i, d in enumerate(in_dtypes)]
                op = _replica_op(graph, op_type, holders, out_dtypes, attrs)
            with tf.compat.v1.Session(graph=graph) as sess:
                moved = _moved_inputs(sess, op, holders, _random_feeds(holders, in_dtypes, float_in, fed_shapes),
                                      float_in)
        except Exception as exc:  # noqa: BLE001 - synthetic values the kernel refuses say nothing
            log.debug("forward replica of %s did not run: %s", op_type, exc)
            return unknown
        result: list[bool | None] = list(unknown)
        for i in float_in:
            result[i] = not moved[i]
        return tuple(result)

    def _probe(self, op_type, in_dtypes, out_dtypes, attrs, in_shapes=None) -> GradInfo:
        """What the registered gradient function of `op_type` returns on a replica of the op: which inputs get a
        gradient that depends on the incoming one; RAISES when the function refuses, unverified when the
        replica cannot tell."""
        if DT_INVALID in in_dtypes or DT_INVALID in out_dtypes:
            return _unverified(in_dtypes, "the dtypes of its inputs or outputs are not known here")
        grad_fn = ops._gradient_registry.lookup(op_type)  # noqa: SLF001
        graph = tf.Graph()
        try:
            op, grads = _gradient_replica(graph, op_type, in_dtypes, out_dtypes, attrs, in_shapes)
        except Exception as exc:  # noqa: BLE001 - the replica says nothing about the gradient
            log.debug("gradient replica of %s failed: %s", op_type, exc)
            return _unverified(in_dtypes, f"a replica of the op cannot be built here ({_first_line(exc)})")
        try:
            with graph.as_default():
                result = grad_fn(op, *grads)
        except (LookupError, NotImplementedError) as exc:  # the gradient function refuses: training raises
            return GradInfo(GradKind.RAISES, (False,) * len(in_dtypes), True, _first_line(exc))
        except Exception as exc:  # noqa: BLE001 - may depend on shapes the replica does not have
            if in_shapes and all(s is not None for s in in_shapes):
                # the replica has the saved shapes, which are what TensorFlow sees when it builds this
                # gradient for the loaded function: its failure is the real one
                return GradInfo(GradKind.RAISES, (False,) * len(in_dtypes), True, _first_line(exc))
            log.debug("gradient function of %s failed on the replica: %s", op_type, exc)
            return _unverified(in_dtypes, f"its registered gradient function fails on a replica without the saved "
                                          f"shapes ({_first_line(exc)})")
        return GradInfo(GradKind.REGISTERED, _passes(result, grads, in_dtypes, out_dtypes), True)


def _unverified(in_dtypes, reason: str) -> GradInfo:
    """A registered gradient the replica could not check: every float input may get one."""
    return GradInfo(GradKind.REGISTERED, tuple(carries_gradient(d) for d in in_dtypes), False, reason)


def _clean_attrs(attrs) -> dict:
    """A saved node's attrs for a replica: copies, without internal (`_`) attrs and unbound placeholders."""
    return {k: attr_value_pb2.AttrValue.FromString(v.SerializeToString()) for k, v in attrs.items()
            if not k.startswith("_") and not v.HasField("placeholder")}


def _replica_op(graph: tf.Graph, op_type: str, inputs: list, out_dtypes, attrs):
    """A replica of a saved node in `graph`, reading `inputs`."""
    clean = _clean_attrs(attrs)
    return graph._create_op_internal(  # noqa: SLF001 - replica of a saved node
        op_type, inputs, dtypes=[tf.dtypes.as_dtype(d) for d in out_dtypes], attrs=clean)


def _gradient_replica(graph: tf.Graph, op_type: str, in_dtypes, out_dtypes, attrs, in_shapes) -> tuple:
    """A replica of the op in `graph` on placeholders (with the saved shapes, when given), and a placeholder
    for the incoming gradient of each of its outputs."""
    with graph.as_default():
        shapes = in_shapes or (None,) * len(in_dtypes)
        inputs = [tf.compat.v1.placeholder(tf.dtypes.as_dtype(d if d < 100 else d - 100),
                                           shape=tf.TensorShape(s) if s is not None else None)
                  for d, s in zip(in_dtypes, shapes)]
        op = _replica_op(graph, op_type, inputs, out_dtypes, attrs)
        grads = [tf.compat.v1.placeholder(tf.dtypes.as_dtype(d)) for d in out_dtypes]
    return op, grads


def _passes(result, grads: list, in_dtypes, out_dtypes) -> tuple[bool, ...]:
    """Per input: the gradient function's `result` for it is a tensor depending on an incoming gradient."""
    if not isinstance(result, (list, tuple)):
        result = [result]
    # Only an incoming gradient on a float output can carry anything back.
    targets = {g.ref() for g, d in zip(grads, out_dtypes) if carries_gradient(d)}
    passes = []
    for i, dtype in enumerate(in_dtypes):
        g = result[i] if i < len(result) else None
        if isinstance(g, indexed_slices.IndexedSlices):
            g = g.values
        passes.append(bool(carries_gradient(dtype) and g is not None and _depends_on(g, targets)))
    return tuple(passes)


def _measurable_float_inputs(op_type: str, in_dtypes, out_dtypes) -> list[int]:
    """The float inputs whose flatness can be measured: none for an op that is stateful or not registered,
    has dtypes not known here, or has a result that is not a float."""
    op_def = op_def_registry.get(op_type)
    if op_def is None or op_def.is_stateful or DT_INVALID in in_dtypes or DT_INVALID in out_dtypes:
        return []
    float_in = [i for i, d in enumerate(in_dtypes) if carries_gradient(d) and tf.as_dtype(d).is_floating]
    if not float_in or any(not tf.as_dtype(d).is_floating for d in out_dtypes):
        return []
    return float_in


def _dims(in_shapes, i: int) -> list[int] | None:
    """The saved shape of input `i`, an unknown dimension taken as 2; None when its rank is not known."""
    shape = in_shapes[i] if in_shapes and i < len(in_shapes) else None
    if shape is None or shape.unknown_rank:
        return None
    return [d.size if d.size >= 0 else 2 for d in shape.dim]


def _random_feeds(holders: list, in_dtypes, float_in: list[int], shapes: list):
    """Three feeds of the replica: values drawn in [0.2, 0.8] for the float inputs, zeros for the others
    (seeded: the same points on every run)."""
    rng = np.random.default_rng(0)
    for _ in range(3):
        feed = {}
        for i, d in enumerate(in_dtypes):
            dt = tf.dtypes.as_dtype(d)
            feed[holders[i]] = (rng.uniform(0.2, 0.8, shapes[i]).astype(dt.as_numpy_dtype)
                                if i in float_in else np.zeros(shapes[i], dt.as_numpy_dtype))
        yield feed


def _moved_inputs(sess, op, holders: list, feeds, float_in: list[int]) -> dict[int, bool]:
    """Per float input: whether multiplying it by 1.001 changed any output at one of the `feeds`."""
    moved = dict.fromkeys(float_in, False)
    for feed in feeds:
        base = sess.run(op.outputs, feed)
        for i in float_in:
            nudged = dict(feed)
            nudged[holders[i]] = feed[holders[i]] * (1 + 1e-3)
            after = sess.run(op.outputs, nudged)
            moved[i] |= any(not np.array_equal(a, b) for a, b in zip(base, after))
    return moved
