"""Which op made the first non-finite value at a failing probe point, and what it received there.

The signature's function is frozen (variables as constants, calls inlined) and imported into a graph
where TensorFlow differentiates the output with respect to every intermediate tensor. Going from the
output back, the culprit is the first op whose outputs' gradients are finite while its backward gives an
input a NaN or Inf. Saved custom gradients are re-bound to the frozen graph's tensors; when one is the
culprit, its gradient function is run on the same values to name the op inside it that overflowed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph.dataflow import TOP, Dataflow
from ..model import OpRef

CONTROL_FLOW = frozenset({"While", "StatelessWhile", "If", "StatelessIf", "Case", "StatelessCase"})
# Ops whose backward turns a finite upstream gradient into NaN or Inf at some finite inputs.
SINGULAR_BACKWARD = frozenset({"Sqrt", "Rsqrt", "Pow", "Log", "Log1p", "RealDiv", "Div", "DivNoNan", "Reciprocal",
                               "Inv", "Xlogy", "Xdivy", "Atan2", "Acos", "Asin", "Atanh", "Acosh", "Lgamma",
                               "Digamma", "Igamma", "Igammac", "Betainc", "Mul", "Square", "Exp"})


@dataclass(frozen=True)
class Culprit:
    op: OpRef
    detail: str  # "Sqrt received 0", "Exp received 100 and returned inf"
    # a control-flow culprit (a While whose backward made the NaN): the ops in its body and branches whose
    # backward can make one, the first to look at
    suspects: tuple[OpRef, ...] = ()


def _fmt(x: Any) -> str:
    if np.iscomplexobj(x):  # a complex intermediate (tf.complex, an FFT): both parts
        z = complex(x)
        return f"{_fmt(z.real)}{'' if _fmt(z.imag).startswith('-') else '+'}{_fmt(z.imag)}j"
    x = float(x)
    return f"{x:.4g}" if np.isfinite(x) else ("nan" if np.isnan(x) else ("inf" if x > 0 else "-inf"))


def _first_bad(values: np.ndarray) -> int | None:
    bad = np.flatnonzero(~np.isfinite(np.asarray(values)))  # a complex value: either part
    return int(bad[0]) if bad.size else None


def _at(values: np.ndarray, index: int, shape: tuple[int, ...]) -> str:
    """The element of `values` at flat `index` of an array of `shape` (broadcast), or a summary."""
    v = np.asarray(values)
    if v.size == 1:
        return _fmt(v.reshape(()))
    try:
        return _fmt(np.broadcast_to(v, shape).reshape(-1)[index])
    except ValueError:
        finite = v[np.isfinite(v)]
        return f"values in [{_fmt(finite.min())}, {_fmt(finite.max())}]" if finite.size else "non-finite values"


def _received(inputs: list[np.ndarray], index: int, shape: tuple[int, ...]) -> str:
    shown = [_at(v, index, shape) for v in inputs]
    text = shown[0] if len(shown) == 1 else "(" + ", ".join(shown) + ")"
    return text + _fill_value(inputs)


def _fill_value(inputs: list[np.ndarray]) -> str:
    """Where an input holds its dtype's largest magnitude exactly: a fill value (the max of an empty segment, a
    mask's tf.float32.min), which the op then overflows (tester 21)."""
    for v in inputs:
        a = np.asarray(v)
        if a.dtype.kind == "f" and a.size and np.any(np.abs(a) == np.finfo(a.dtype).max):
            return (f" (±{_fmt(np.finfo(a.dtype).max)} is {a.dtype.name}'s largest magnitude: a fill value, such as "
                    "the max of an empty segment or a mask's dtype.min)")
    return ""


def _is_float(t) -> bool:
    return t.dtype.is_floating


def _carries_gradient(t) -> bool:
    """A tensor the backward gives a gradient: a float one, or a complex one (whose gradient is complex: a NaN made
    in the backward of Angle or ComplexAbs travels through complex tensors before it reaches a float one)."""
    return t.dtype.is_floating or t.dtype.is_complex


def _frozen_graph_def(fn) -> tuple[Any, list[str], list[str], dict[str, np.ndarray | None]]:
    """The signature function with calls inlined and variables as constants, as a GraphDef with the names of its
    input and output tensors, and every variable's tensor name with the value of the large ones (LIFT_BYTES or
    more; None for the small ones, constants there), which are placeholders
    of the same name there, fed at every run: TensorFlow's convert_variables_to_constants_v2 without the
    ConcreteFunction it builds from the result (a second import of the whole graph), and without writing the large
    variables into the GraphDef (a session materialises every constant of its graph on its first run: 8 s for
    the 440 MB of a 110M-parameter language model)."""
    from tensorflow.python.framework import convert_to_constants as c
    from tensorflow.python.util import object_identity

    data = c._FunctionConverterDataInEager(func=fn, lower_control_flow=False, aggressive_inlining=False)  # noqa: SLF001
    tensors = data.tensor_data
    large = {name: t for name, t in tensors.items() if getattr(t.numpy, "nbytes", 0) >= LIFT_BYTES}
    for name, t in large.items():  # written as a scalar, then made a placeholder of its shape below
        tensors[name] = t._replace(numpy=np.zeros((), dtype=t.numpy.dtype))
    graph_def, converted = c._replace_variables_by_constants(converter_data=data)  # noqa: SLF001
    lifted: dict[str, np.ndarray | None] = {}
    for node in graph_def.node:
        if node.op == "Const" and node.name in large:
            value = large[node.name].numpy
            dtype = node.attr["dtype"].type
            node.op = "Placeholder"
            node.attr.clear()
            node.attr["dtype"].type = dtype
            node.attr["shape"].shape.CopyFrom(_shape_proto(value.shape))
            lifted[f"{node.name}:0"] = value
    captures = fn.graph.internal_captures
    frozen = object_identity.ObjectIdentitySet([captures[i] for i in converted])
    lifted.update({f"{name}:0": None for name in tensors if f"{name}:0" not in lifted})  # the small ones: constants
    return graph_def, [t.name for t in fn.inputs if t not in frozen], [t.name for t in fn.outputs], lifted


# A frozen variable of this size (bytes) or more is fed as a placeholder instead of a constant (_frozen_graph_def).
LIFT_BYTES = 1 << 20


def _shape_proto(shape: tuple[int, ...]):
    from tensorflow.core.framework import tensor_shape_pb2

    return tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=int(d)) for d in shape])


class Forensics:
    """One frozen copy of the signature's graph, differentiated lazily per output."""

    def __init__(self, fn, graph: Dataflow, gradient_functions: dict[str, str]):
        self.fn = fn
        self._refs: dict[tuple[str, str], list[OpRef]] = {}
        self._by_function: dict[str, list[OpRef]] = {}
        for node in graph.ops.values():
            self._by_function.setdefault(node.ref.function, []).append(node.ref)
        self._custom_fn: dict[OpRef, str] = {}  # custom-gradient op -> its saved gradient function
        for node in graph.ops.values():
            self._refs.setdefault((node.ref.op_type, node.ref.op_name), []).append(node.ref)
            if node.custom_gradient:
                self._custom_fn[node.ref] = gradient_functions.get(node.custom_gradient, node.custom_gradient)
        self._graph: Any = None  # the model's graph, built on first use
        self._lifted: dict[str, np.ndarray] = {}  # tensor name -> value of a large constant fed as a placeholder
        # (a digest of the last point recorded, tensor name -> value there): `recorded_values`' cache
        self._recorded: tuple[Any, dict[str, np.ndarray]] = (None, {})
        self._sources: set[str] = set()  # op names of the inputs and of the variables (constants or placeholders)
        self._session: Any = None  # a session on it, made again after the graph changed (`_stale`)
        self._by_output: dict[str, tuple] = {}
        self._custom_calls: dict[str, tuple[Any, list]] = {}  # op name -> (gradient function, its inputs)
        self._parts: dict[tuple[str, str], tuple] = {}  # (op, input) -> what op's backward alone gives it

    # -- the frozen graph ------------------------------------------------------------------------
    def _build(self) -> None:
        import tensorflow as tf

        graph_def, inputs, outputs, variables = _frozen_graph_def(self.fn)
        self._lifted = {name: v for name, v in variables.items() if v is not None}
        self._sources = {name.split(":")[0] for name in variables} | {name.split(":")[0] for name in inputs}
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        self._graph = graph
        self._ops = graph.get_operations()
        self._pos = {op.name: i for i, op in enumerate(self._ops)}
        specs = self.fn.structured_input_signature[1]
        by_name = {name.split(":")[0]: graph.get_tensor_by_name(name) for name in inputs}
        self._inputs = {k: by_name.get(s.name or k, by_name.get(k)) for k, s in specs.items()}
        keys = sorted(self.fn.structured_outputs)
        self._outputs = {k: graph.get_tensor_by_name(name) for k, name in zip(keys, outputs)}
        self._read = _needed(self._outputs.values())
        for op in self._ops:
            self._rebind_custom_gradient(op)

    def _rebind_custom_gradient(self, op) -> None:
        """Point a loaded custom gradient at this graph's tensors: its gradient function captures tensors
        of the loaded forward function, which do not exist here. The loader registers a closure over that
        ConcreteFunction (function_deserialization._gen_gradient_func); TensorFlow offers no accessor."""
        from tensorflow.python.framework import ops

        try:
            op_type = op.get_attr("_gradient_op_type").decode()
            registered = ops.gradient_registry.lookup(op_type)
        except (ValueError, LookupError):
            return
        cells = [c.cell_contents for c in (getattr(registered, "__closure__", None) or ())]
        funcs = [c for c in cells if hasattr(c, "captured_inputs") and hasattr(c, "graph")]
        if not funcs:
            return
        func = funcs[0]
        captures = [self._bind(op, op_type, c) for c in func.graph.external_captures]
        if any(c is None for c in captures):
            return
        op._gradient_function = functools.partial(self._call_custom, func, captures)  # noqa: SLF001

    def _bind(self, op, op_type: str, capture):
        """The tensor of this graph holding what `capture` holds in the loaded forward function: an input
        of the custom-gradient op, or the tensor of the same name under the op's call prefix."""
        try:
            forward = capture.graph
        except AttributeError:  # an eager tensor the gradient function captured: a constant, or a variable's handle
            return self._constant(capture)
        parts = op.name.split("/")
        for k in range(len(parts)):
            local = "/".join(parts[k:])
            try:
                twin = forward.get_operation_by_name(local)
                same = twin.get_attr("_gradient_op_type").decode() == op_type
            except (KeyError, ValueError):
                continue
            if not same:
                continue
            for i, t in enumerate(twin.inputs):
                if t is capture:
                    return op.inputs[i]
            name = "/".join(parts[:k] + [capture.name])
            try:
                return self._graph.get_tensor_by_name(name)
            except (KeyError, ValueError):
                return None
        return None

    def _constant(self, capture):
        """An eager value a custom gradient captured, as a constant of this graph; None for a resource (a variable's
        handle: the frozen graph has no variables to hand it)."""
        import tensorflow as tf

        if capture.dtype == tf.resource or capture.dtype == tf.variant:
            return None
        with self._graph.as_default():
            return tf.constant(capture.numpy(), dtype=capture.dtype)

    def _call_custom(self, func, captures, op, *grads):
        import tensorflow as tf

        grads = [g if g is not None else tf.zeros_like(o) for g, o in zip(grads, op.outputs)]
        self._custom_calls.setdefault(op.name, (func, grads + list(captures)))
        return func._call_flat(grads, captures)  # noqa: SLF001 - the loader calls it the same way

    def custom_gradient_functions(self) -> dict[OpRef, str]:
        """Each op with a saved custom gradient -> the saved function that computes it."""
        return dict(self._custom_fn)

    def _ref(self, op) -> OpRef:
        parts = op.name.split("/")
        for k in range(len(parts)):
            refs = self._refs.get((op.type, "/".join(parts[k:])))
            if refs:
                return refs[0]
        if op.type in CONTROL_FLOW:
            # The static graph expands loops and branches: no node stands for the op itself. It lives in the
            # function that makes its inputs, under the name it has there (the frozen graph's call prefix off).
            for t in op.inputs:
                made = self._ref(t.op)
                prefix = t.op.name[:len(t.op.name) - len(made.op_name)]
                if made.function != TOP and t.op.name.endswith(made.op_name) and op.name.startswith(prefix):
                    return OpRef(op.type, op.name[len(prefix):], made.function)
        return OpRef(op.type, op.name, TOP)

    def _stale(self) -> None:
        """Gradients were added to the graph. Differentiating a While loop (while_v2) rewrites the loop op in
        place to output the intermediates its backward needs; a session that has run the graph before keeps
        the old op ("Connecting to invalid output 13 of source node ... which has 13 outputs"), so the next
        run needs a new session."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def _run(self, fetches, feed: dict[str, np.ndarray], extra: dict | None = None):
        import tensorflow as tf

        if self._session is None:
            config = tf.compat.v1.ConfigProto()
            # Raw kernels: Grappler would rewrite log(softmax) and hide the op at fault.
            config.graph_options.rewrite_options.disable_meta_optimizer = True
            self._session = tf.compat.v1.Session(graph=self._graph, config=config)
        feed_dict = {self._inputs[k]: v for k, v in feed.items() if self._inputs.get(k) is not None}
        lifted = {self._graph.get_tensor_by_name(name): value for name, value in self._lifted.items()}
        return self._session.run(fetches, feed_dict={**lifted, **feed_dict, **(extra or {})})

    def source_ops(self) -> set[str]:
        """The frozen graph's ops that stand for the signature's inputs and the model's variables."""
        if self._graph is None:
            self._build()
        return self._sources

    def recorded_values(self, tensors: list[Any], feed: dict[str, np.ndarray], key: Any) -> dict[str, np.ndarray]:
        """The values of `tensors` (of the frozen graph) at `feed`, whose digest is `key`. The last point's values are
        kept: a later request at the same point (the float32 comparison after the local checks recorded it) runs only
        the tensors not recorded yet (a ResNet50's recording: about 5 s)."""
        last_key, last = self._recorded
        known: dict[str, np.ndarray] = last if last_key == key else {}
        by_name = {t.name: t for t in tensors}
        names = sorted(set(by_name) - set(known))
        got = self._run([by_name[n] for n in names], feed) if names else []
        fresh = {n: np.asarray(v) for n, v in zip(names, got)}
        self._recorded = (key, {**known, **fresh})
        return {n: self._recorded[1][n] for n in by_name}

    def lifted(self, name: str) -> np.ndarray | None:
        """The value of a frozen variable fed as a placeholder (`_lift_constants`), by tensor name."""
        return self._lifted.get(name)

    def _differentiable_tensors(self):
        """The tensors the backward gives a gradient: float and complex ones (_carries_gradient)."""
        return [t for op in self._ops for t in op.outputs if _carries_gradient(t)]

    def _float_tensors(self, complex_too: bool = False):
        """The float tensors (`complex_too`: and the complex ones) of the forward pass the function's outputs
        depend on: another value is no value of the model's (a FusedBatchNormV3's reserve spaces in inference,
        kept only for a backward, hold whatever memory they were given)."""
        kept = _carries_gradient if complex_too else _is_float
        return [t for op in self._ops for t in op.outputs if kept(t) and t.name in self._read]

    # -- forward: the first op that returned a non-finite value from finite inputs ---------------
    def forward(self, feed: dict[str, np.ndarray]) -> Culprit | None:
        if self._graph is None:
            self._build()
        return self._first_overflow_of(lambda tensors: self._run(tensors, feed))

    def float_values(self, feed: dict[str, np.ndarray]) -> list[tuple[OpRef, Any, list, list]]:
        """Every op of the forward pass in the order it runs, as (its OpRef, the op, the values of its float
        inputs, the values of its float outputs) at `feed`: what --precision casts to a lower precision."""
        if self._graph is None:
            self._build()
        tensors = self._float_tensors()
        values = dict(zip((t.name for t in tensors), self._run(tensors, feed)))
        return [(self._ref(op), op, [values[t.name] for t in op.inputs if t.name in values],
                 [values[t.name] for t in op.outputs if t.name in values]) for op in self._ops]

    def _first_overflow_of(self, run) -> Culprit | None:
        """The first op of the forward pass that returned a non-finite value from finite inputs, every float
        tensor of the graph fetched with `run`."""
        tensors = self._float_tensors(complex_too=True)  # a complex Exp overflows to inf+infj
        return self._first_overflow(self._ops, dict(zip((t.name for t in tensors), run(tensors))), self._ref)

    @staticmethod
    def _first_overflow(ops_, values: dict[str, np.ndarray], ref) -> Culprit | None:
        for op in ops_:
            ins = [values[t.name] for t in op.inputs if t.name in values]
            if not ins or not all(np.all(np.isfinite(v)) for v in ins):
                continue
            for out in op.outputs:
                if out.name not in values:
                    continue
                index = _first_bad(values[out.name])
                if index is not None:
                    shape = np.shape(values[out.name])
                    return Culprit(ref(op), f"{op.type} received {_received(ins, index, shape)} and returned "
                                            f"{_fmt(np.reshape(values[out.name], -1)[index])}")
        return None

    # -- backward: the first op, from the output back, whose backward made a NaN or Inf ---------
    def backward(self, feed: dict[str, np.ndarray], output: str, cotangent: np.ndarray) -> Culprit | None:
        import tensorflow as tf

        if self._graph is None:
            self._build()
        if output not in self._by_output:
            with self._graph.as_default():
                out = self._outputs[output]
                u = tf.compat.v1.placeholder(tf.float64, shape=out.shape)
                target = tf.reduce_sum(tf.cast(out, tf.float64) * u)
                tensors = self._differentiable_tensors()
                grads = [None if g is None else tf.convert_to_tensor(g)  # IndexedSlices from a gather
                         for g in tf.gradients(target, tensors)]
            self._by_output[output] = (u, [(t, g) for t, g in zip(tensors, grads) if g is not None])
            self._stale()
        u, pairs = self._by_output[output]

        def run(fetches, more: dict | None = None):
            return self._run(fetches, feed, {u: cotangent, **(more or {})})

        fetched = run([(t, g) for t, g in pairs])
        values = {t.name: v for (t, _), (v, _) in zip(pairs, fetched)}
        grad_values = {t.name: gv for (t, _), (_, gv) in zip(pairs, fetched)}

        def finite(t) -> bool:
            return t.name not in grad_values or bool(np.all(np.isfinite(grad_values[t.name])))

        for op in reversed(self._ops):
            if not all(finite(o) for o in op.outputs):
                continue
            for t in op.inputs:
                if finite(t):
                    continue
                readers = [c for c in t.consumers() if c.name in self._pos]  # not the gradient ops
                contribution = grad_values[t.name] if len(readers) == 1 else self._contribution(op, t, grad_values, run)
                index = None if contribution is None else _first_bad(contribution)
                if index is not None:
                    return self._blame(op, values, index, np.shape(contribution), run)
        return None

    def own_backward_finite(self, feed: dict[str, np.ndarray], output: str, cotangent: np.ndarray) -> bool:
        """Whether the backward of `output` alone (its gradient with respect to every tensor of the frozen graph,
        the other outputs left out) is finite at `feed`: where it is and the loaded signature's gradient of
        `output` is not, the NaN/Inf comes from another output's backward, which TensorFlow runs with zero
        cotangents as part of the signature's (0 × inf). Call after `backward` for the same output."""
        u, pairs = self._by_output[output]
        return all(bool(np.all(np.isfinite(g))) for g in self._run([g for _, g in pairs], feed, {u: cotangent}))

    def _contribution(self, op, t, grads, run):
        """What op's own backward gives input t (t has other consumers too). The paths from t to op through
        op's other inputs are stopped: in `where(x > 20, x, log(1 + exp(x)))` the NaN that reaches x is Exp's
        (0 * inf), not SelectV2's, whose own backward gives x a finite gradient."""
        import tensorflow as tf

        outs = [o for o in op.outputs if o.name in grads]
        if not outs:
            return None
        key = (op.name, t.name)
        if key not in self._parts:
            others = [i for i in op.inputs if i is not t and _carries_gradient(i)]
            with self._graph.as_default():
                ys = [tf.compat.v1.placeholder(o.dtype, shape=o.shape) for o in outs]
                self._parts[key] = (ys, tf.gradients(outs, [t], grad_ys=ys, stop_gradients=others)[0])
            self._stale()
        ys, part = self._parts[key]
        if part is None:
            return None
        return run(part, {y: grads[o.name] for y, o in zip(ys, outs)})

    def _inside(self, op) -> tuple[OpRef, ...]:
        """The ops of a While/If/Case op's bodies and branches (and the functions they call) whose
        backward can make a NaN or Inf; graph-mode gradients do not reach inside a loaded loop."""
        todo = []
        for key in ("body", "cond", "then_branch", "else_branch", "branches"):
            try:
                value = op.get_attr(key)
            except ValueError:
                continue
            todo += [f.name for f in value] if isinstance(value, list) else [value.name]
        library = {f.signature.name: f for f in self._graph.as_graph_def().library.function}
        seen: set[str] = set()
        found: list[OpRef] = []
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            found += [r for r in self._by_function.get(self._saved_name(name), [])
                      if r.op_type in SINGULAR_BACKWARD - {"Mul", "Square", "Exp"}]
            for node in library[name].node_def if name in library else ():  # calls inside the bodies
                todo += [a.func.name for a in node.attr.values() if a.HasField("func")]
        return tuple(dict.fromkeys(found))

    def _saved_name(self, loaded: str) -> str:
        """The saved function a loaded one was made from: the loader names while_body_5
        __inference_while_body_5_105, with "_rewritten" each time a gradient of the loop was built."""
        if loaded in self._by_function:
            return loaded
        match = re.fullmatch(r"__inference_(.*)_\d+(?:_rewritten)*", loaded)
        return match.group(1) if match and match.group(1) in self._by_function else loaded

    def _blame(self, op, values, index: int, shape, run) -> Culprit:
        ref = self._ref(op)
        ins = [values[t.name] if t.name in values else run(t) for t in op.inputs if _carries_gradient(t)]
        received = _received(ins, index, shape)
        if op.type in CONTROL_FLOW:
            suspects = self._inside(op)
            if len(suspects) == 1:  # the one op in the loop or branch whose backward can make a NaN/Inf
                (inner,) = suspects
                return Culprit(inner, f"{op.type} '{ref.op_name}' received {received} and its backward made the "
                                      f"NaN/Inf from finite upstream gradients; {inner.op_type} '{inner.op_name}' is "
                                      "the only op in its body whose backward can", suspects)
            shown = ", ".join(f"{r.op_type} '{r.op_name}' in {r.function}" for r in suspects[:4])
            return Culprit(ref, f"{op.type} received {received}; the backward of its body made the NaN/Inf"
                                + (f" (ops there whose backward can: {shown}{', ...' if len(suspects) > 4 else ''})"
                                   if suspects else ""), suspects)
        grad_fn = self._custom_fn.get(ref)
        if grad_fn is not None and op.name in self._custom_calls:
            inside = self._inside_custom(op, grad_fn, run)
            if inside is not None:
                return inside
            return Culprit(ref, f"the custom gradient {grad_fn} of {op.type} '{ref.op_name}' received "
                                f"{received} and returned a non-finite gradient from finite upstream gradients")
        if not all(np.all(np.isfinite(v)) for v in ins):
            # A non-finite forward value (an overflow upstream, which the outputs did not show: a saturating
            # tanh after it) made the NaN here, as inf * 0: the op to fix is the one that overflowed.
            origin = self._first_overflow_of(run)  # every forward value (`values` holds those with a gradient)
            if origin is not None and origin.op != ref:
                return Culprit(origin.op, f"{origin.detail} in the forward pass; that value reaches {op.type} "
                                          f"'{ref.op_name}', whose backward turned finite upstream gradients into "
                                          "NaN/Inf", (ref,))
        return Culprit(ref, f"{op.type} received {received}; its backward turned finite upstream gradients "
                            "into NaN/Inf")

    def _inside_custom(self, op, grad_fn: str, run) -> Culprit | None:
        """Run the saved gradient function on the values it got, and find the op in it that overflowed."""
        import tensorflow as tf
        from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

        func, args = self._custom_calls[op.name]
        arg_values = run(args)
        inner = tf.Graph()
        with inner.as_default():
            fg = function_def_to_graph(func.function_def)
            tf.graph_util.import_graph_def(fg.as_graph_def(), name="")
        placeholders = [inner.get_tensor_by_name(t.name) for t in fg.inputs]
        tensors = [t for o in inner.get_operations() for t in o.outputs if _is_float(t)]
        with tf.compat.v1.Session(graph=inner) as sess:
            fetched = sess.run(tensors, feed_dict=dict(zip(placeholders, arg_values)))
        values = dict(zip((t.name for t in tensors), fetched))
        found = self._first_overflow(inner.get_operations(), values, lambda o: OpRef(o.type, o.name, grad_fn))
        if found is None:
            return None
        owner = self._ref(op)
        return Culprit(found.op, f"{found.detail}, in the custom gradient {grad_fn} of {owner.op_type} "
                                 f"'{owner.op_name}' in {owner.function}")

    def close(self) -> None:
        self._stale()


def _needed(outputs) -> set[str]:
    """The names of the tensors `outputs` depend on, through the inputs of the ops that make them."""
    needed: set[str] = set()
    stack = list(outputs)
    while stack:
        t = stack.pop()
        if t.name in needed:
            continue
        needed.add(t.name)
        stack.extend(t.op.inputs)
    return needed
