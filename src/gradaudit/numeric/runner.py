"""The loaded model as the checks see it: one traced gradient function and one traced evaluation function.

Both are traced once; steps, points, directions and cotangents are tensor arguments, so a whole audit
costs one trace of each, whatever the number of steps and checks.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import raised_by_tensorflow
from ..graph.dataflow import STATE_WRITES
from .savedmodel import SavedModelInfo, checkpoint_values
from .upcast import write_float64_copy


class ModelError(RuntimeError):
    """The model cannot be loaded (stage "load"), run ("forward") or differentiated ("gradient")."""

    def __init__(self, message: str, stage: str):
        super().__init__(message)
        self.stage = stage


def describe(exc: BaseException) -> str:
    """TensorFlow's one-line reason for an exception (its `message` without the traceback part)."""
    if isinstance(exc, RecursionError):  # TensorFlow's Python walks nested function calls recursively
        return ("TensorFlow cannot load or differentiate a model whose function calls nest this deep "
                "(RecursionError in TensorFlow's own code): the model's limit here, not gradaudit's")
    text = getattr(exc, "message", None) or str(exc)
    if not text:  # an `assert` in TensorFlow's own code: say which, and the op it was differentiating
        return _unworded(exc)
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    for ln in lines:  # keep TensorFlow's useful sentence, not its advice
        if "Could not find callback" in ln or "No gradient defined" in ln:
            return ln.split(". ")[0].rstrip(".")[:300]
    # A graph execution error says where first ("Detected at node X ...") and what after the stack.
    node = next((ln.split()[3] for ln in lines if ln.startswith("Detected at node") and len(ln.split()) > 3), None)
    said = [ln for ln in lines if not ln.startswith(_BOILERPLATE)]
    head = f"{type(exc).__name__}: {said[0] if said else lines[0] if lines else ''}".rstrip(": ")
    # a Python object's address ("<IndexedSlices object at 0x7faa18d31f10>") differs at every call: without it one
    # cause reads as one reason wherever it is raised, and is said once
    head = _ADDRESS.sub("", head)
    return (f"{head[:260]} (op {node})" if node else head)[:300]


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _unworded(exc: BaseException) -> str:
    """An exception without a message (a failed `assert` in TensorFlow's own code): its type, TensorFlow's line
    that raised it, and the op whose gradient TensorFlow was building there (the loaded model's functions are
    renamed by the loader, so their names would not be the saved ones the other findings name)."""
    import traceback

    in_tf = f"{os.sep}tensorflow{os.sep}"
    said = f"{type(exc).__name__} (without a message)"
    stack = traceback.extract_tb(exc.__traceback__)
    if stack:
        last = stack[-1]
        owner = "TensorFlow's " if in_tf in last.filename else ""
        said += f" from {owner}{os.path.basename(last.filename)}:{last.lineno} {last.name}: {last.line}"
    ops: list[Any] = []  # the ops TensorFlow's gradients_util was differentiating, outermost first
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name != "_GradientsHelper" or in_tf not in frame.f_code.co_filename:
            continue
        op = frame.f_locals.get("op")
        if op is not None and hasattr(op, "type") and (not ops or ops[-1] is not op):
            ops.append(op)
    if ops:
        said += f", building the gradient of op '{ops[-1].name}' ({ops[-1].type})"
    return said[:300]


_BOILERPLATE = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "File ", "Stack trace")


@dataclass
class Loaded:
    obj: Any  # keep the loaded object alive while its functions are used
    fn: Any  # the signature's ConcreteFunction
    tmpdir: tempfile.TemporaryDirectory | None = None

    def close(self) -> None:
        if self.tmpdir is not None:
            self.tmpdir.cleanup()


def load(info: SavedModelInfo, tags: tuple[str, ...], float64: bool, without_cuts: bool = False,
         behind: frozenset[tuple[str, str]] = frozenset()) -> Loaded:
    import tensorflow as tf

    tag_list = list(tags) if tags else None
    if not float64:
        obj = tf.saved_model.load(info.path, tags=tag_list)
        return Loaded(obj, holding_state(obj.signatures[info.signature], info.op_types))
    tmp = tempfile.TemporaryDirectory(prefix="gradaudit-f64-")
    try:
        write_float64_copy(info, tmp.name, without_cuts, behind)
        obj = tf.saved_model.load(tmp.name, tags=tag_list,
                                  options=tf.saved_model.LoadOptions(experimental_skip_checkpoint=True))
        fn = obj.signatures[info.signature]
        values = checkpoint_values(info)
        by_handle = {id(v.handle): v for v in fn.variables}
        for b in info.bound:
            if b is not None:
                var = by_handle[id(fn.captured_inputs[b.position])]
                var.assign(values[b.node_id].astype(var.dtype.as_numpy_dtype))
    except BaseException:
        tmp.cleanup()
        raise
    return Loaded(obj, holding_state(fn, info.op_types), tmp)


# Ops that write a variable (the static pass's list): a signature that runs one may carry state from one call to the
# next.
VARIABLE_WRITES = frozenset(STATE_WRITES)


class HeldState:
    """A signature function whose non-trainable variables (a cache, a counter, a recurrent state, batch-norm
    statistics in training mode) are put back after each call: every evaluation of the checks sees the function of
    the inputs and weights that one call is, not a state the calls before it left (a stateful RNN's two calls at the
    same point differ otherwise, and the checks would call the model nondeterministic). Everything else is the
    function's own."""

    def __init__(self, fn: Any, state: list[Any]):
        self._fn, self._state = fn, state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fn, name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        kept = [v.read_value() for v in self._state]
        out = self._fn(*args, **kwargs)
        for v, k in zip(self._state, kept):
            v.assign(k)
        return out


def holding_state(fn: Any, op_types: frozenset[str]) -> Any:
    """`fn`, or a HeldState of it when it writes variables and holds non-trainable ones."""
    if not op_types & VARIABLE_WRITES:
        return fn
    state = [v for v in getattr(fn, "variables", ()) if not v.trainable]
    return HeldState(fn, state) if state else fn


def signature_variables(info: SavedModelInfo, fn) -> dict[str, Any]:
    """SavedVariable name -> loaded variable, via the object graph's bound inputs (exact even when two
    variables share a name); models without an object graph fall back to `var.name` minus ':0'."""
    by_handle = {id(v.handle): v for v in fn.variables}
    names = info.variable_names()
    if names and len(fn.captured_inputs) == len(info.bound):
        return {names[i]: by_handle[id(h)] for i, h in enumerate(fn.captured_inputs)
                if i in names and id(h) in by_handle}
    return {v.name.split(":")[0]: v for v in fn.variables}


class PositionalFunction:
    """A concrete function with positional inputs and any output structure, called with inputs by name
    and returning outputs by name (the names the static pass gives them)."""

    def __init__(self, fn, input_names: list[str], output_names: list[str]):
        self.fn, self.input_names, self.output_names = fn, input_names, output_names

    def __call__(self, **inputs):
        import tensorflow as tf

        flat = tf.nest.flatten(self.fn(*[inputs[n] for n in self.input_names]))
        return dict(zip(self.output_names, flat))


class _NotRetracing(logging.Filter):
    """TensorFlow warns when tf.functions retrace often; each Runner traces its own two functions once, by
    design (one per model copy and point shape), so the warning says nothing to a user of gradaudit."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


def _quiet_retracing() -> None:
    logger = logging.getLogger("tensorflow")
    if not any(isinstance(f, _NotRetracing) for f in logger.filters):
        logger.addFilter(_NotRetracing())


class Runner:
    """Evaluates and differentiates u·f at a point (input values, variable values) and along lines."""

    def __init__(self, fn: Any, inputs: dict[str, np.ndarray], input_sources: list[str],
                 variables: list[tuple[str, Any]], float_outputs: list[str], specs: dict[str, Any] | None = None):
        """`fn(**inputs)` returns the outputs by name; `specs` are its inputs' TensorSpecs by name (by
        default the signature's, `fn.structured_input_signature`)."""
        import tensorflow as tf

        self.fn = fn
        specs = specs if specs is not None else fn.structured_input_signature[1]
        self.input_dtypes = {k: specs[k].dtype for k in specs}
        self.inputs = {k: tf.constant(inputs[k], dtype=self.input_dtypes[k]) for k in specs}
        self.input_sources = input_sources
        self.var_names = [n for n, _ in variables]
        self.vars = [v for _, v in variables]
        self.var_base = [tf.identity(v) for v in self.vars]
        self.float_outputs = float_outputs
        self._zero_in = {n: tf.zeros_like(self.inputs[n]) for n in input_sources}
        self._zero_var = [tf.zeros_like(b) for b in self.var_base]
        _quiet_retracing()
        # No autograph: the bodies are plain Python loops over a fixed structure.
        self._gradient = tf.function(self._gradient_impl, autograph=False)
        self._evaluate = tf.function(self._evaluate_impl, autograph=False)
        self._evaluate_inputs = tf.function(self._evaluate_inputs_impl, autograph=False)

    # -- traced bodies -------------------------------------------------------------------------
    def _gradient_impl(self, inputs, u):
        import tensorflow as tf

        with tf.GradientTape(watch_accessed_variables=False) as tape:
            for n in self.input_sources:
                tape.watch(inputs[n])
            for v in self.vars:
                tape.watch(v)
            out = self.fn(**inputs)
            phi = tf.add_n([tf.reduce_sum(tf.cast(out[o], tf.float64) * u[o]) for o in self.float_outputs])
        g_in, g_var = tape.gradient(phi, ([inputs[n] for n in self.input_sources], self.vars))

        def dense(g):  # embedding lookups give IndexedSlices
            return None if g is None else tf.convert_to_tensor(g)

        return out, {n: dense(g) for n, g in zip(self.input_sources, g_in)}, [dense(g) for g in g_var]

    def _evaluate_impl(self, t, inputs, in_dirs, g_in, var_line):
        """<g, p(t) - base> and the outputs at p(t) for a line that moves the variables too: `var_line` is
        (their base values, their directions, their gradients at the base)."""
        import tensorflow as tf

        def change(g, p, base):  # <g, p - base>, exact: p - base is computed in float64
            return tf.reduce_sum(tf.cast(g, tf.float64) * (tf.cast(p, tf.float64) - tf.cast(base, tf.float64)))

        moved = dict(inputs)
        lin = tf.constant(0.0, tf.float64)
        for n in self.input_sources:
            moved[n] = inputs[n] + tf.cast(t, inputs[n].dtype) * in_dirs[n]
            lin += change(g_in[n], moved[n], inputs[n])
        var_base, var_dirs, g_var = var_line
        for v, b, d, g in zip(self.vars, var_base, var_dirs, g_var):
            p = b + tf.cast(t, b.dtype) * d
            v.assign(p)
            lin += change(g, p, b)
        return lin, self.fn(**moved)

    def _evaluate_inputs_impl(self, t, inputs, in_dirs, g_in):
        """`_evaluate_impl` for a line that moves the inputs only: the variables stay where they are (a
        ResNet50's 25M parameters are neither moved nor read for <g, p - base>)."""
        import tensorflow as tf

        moved = dict(inputs)
        lin = tf.constant(0.0, tf.float64)
        for n in self.input_sources:
            moved[n] = inputs[n] + tf.cast(t, inputs[n].dtype) * in_dirs[n]
            lin += tf.reduce_sum(tf.cast(g_in[n], tf.float64)
                                 * (tf.cast(moved[n], tf.float64) - tf.cast(inputs[n], tf.float64)))
        return lin, self.fn(**moved)

    # -- calls -----------------------------------------------------------------------------------
    def gradient(self, u: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, Any], list[Any]]:
        """(outputs, input gradients, variable gradients) of u·f at the base point, gradients as tensors
        in the model's dtype; None where TensorFlow finds no gradient."""
        import tensorflow as tf

        try:
            out, g_in, g_var = self._gradient(self.inputs, {o: tf.constant(u[o]) for o in self.float_outputs})
        except Exception as exc:  # TensorFlow refusing to differentiate the model, in whatever words it uses
            # (a failed `assert` in cond_v2's gradient of a loaded If, too); anything else is gradaudit's own
            if not (isinstance(exc, (LookupError, tf.errors.OpError, ValueError, TypeError))
                    or raised_by_tensorflow(exc)):
                raise
            raise ModelError(describe(exc), "gradient") from exc
        return {k: np.asarray(v) for k, v in out.items()}, g_in, g_var

    def prepare(self, in_dirs: dict[str, np.ndarray], var_dirs: dict[int, np.ndarray],
                g_in: dict[str, Any], g_var: list[Any]) -> tuple:
        """Arguments of `evaluate` for one line: directions (zero where not given) and the gradients at
        the base point (only those along the line count)."""
        import tensorflow as tf

        def pick(g, zero, moving):
            return g if moving and g is not None else zero

        in_d = {n: tf.constant(in_dirs[n], self.input_dtypes[n]) if n in in_dirs else self._zero_in[n]
                for n in self.input_sources}
        in_g = {n: pick(g_in.get(n), self._zero_in[n], n in in_dirs) for n in self.input_sources}
        if not var_dirs:
            return in_d, None, in_g, None
        return (
            in_d,
            [tf.constant(var_dirs[i], b.dtype) if i in var_dirs else z
             for i, (z, b) in enumerate(zip(self._zero_var, self.var_base))],
            in_g,
            [pick(g, z, i in var_dirs) for i, (g, z) in enumerate(zip(g_var, self._zero_var))],
        )

    def evaluate(self, t: float, prepared: tuple) -> tuple[float, dict[str, np.ndarray]]:
        """(<g, p(t) - base>, outputs at p(t)) with p(t) = base + t * direction; variables stay moved
        until `restore()`."""
        import tensorflow as tf

        in_d, var_d, in_g, var_g = prepared
        try:
            if var_d is None:  # the line moves the inputs only
                lin, out = self._evaluate_inputs(tf.constant(t, tf.float64), self.inputs, in_d, in_g)
            else:
                lin, out = self._evaluate(tf.constant(t, tf.float64), self.inputs, in_d, in_g,
                                          (self.var_base, var_d, var_g))
        except (tf.errors.OpError, ValueError, TypeError) as exc:
            raise ModelError(describe(exc), "forward") from exc
        return float(lin), {k: np.asarray(v) for k, v in out.items()}

    def snapshot(self) -> tuple[dict[str, Any], list[Any]]:
        return dict(self.inputs), list(self.var_base)

    def move_to(self, inputs: dict[str, Any], var_base: list[Any]) -> None:
        """Make (inputs, variable values) the base point; arrays or tensors."""
        import tensorflow as tf

        self.inputs = {k: tf.convert_to_tensor(v, self.input_dtypes[k]) for k, v in inputs.items()}
        self.var_base = [tf.convert_to_tensor(v, b.dtype) for v, b in zip(var_base, self.var_base)]
        self.restore()

    def restore(self) -> None:
        """Variables back to the base point after a line was evaluated."""
        for v, b in zip(self.vars, self.var_base):
            v.assign(b)


@contextmanager
def graphs_as_written() -> Iterator[None]:
    """Grappler and TensorFloat-32 off while the audit runs the model, and as they were after. Each function the
    audit traces runs a handful of times, so optimising it costs more than it saves (a ResNet50's gradient
    graph: about 2 s each, a few times per audit), and the ops that run are the ones the graph holds, the ones
    findings name. Functions instantiated before keep their optimisations."""
    import tensorflow as tf

    before = bool(tf.config.optimizer.get_experimental_options().get("disable_meta_optimizer", False))
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})
    # TensorFloat-32 (on by default on Ampere and newer GPUs) computes float32 matmuls and convolutions with a
    # 10-bit mantissa: about 1e-3 relative, far above what float32 differences resolve. Off for the checks.
    tf.config.experimental.enable_tensor_float_32_execution(False)
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": before})
        tf.config.experimental.enable_tensor_float_32_execution(tf32)


class UncutDerivative:
    """<grad(u·f), v> on the float64 copy with every stop_gradient made an identity (`ModelLoads.uncut`), at a
    point given by its input and variable values: the derivative of the forward, computed with the model's own
    custom gradients. On a pair that a cut crosses, a mismatch is the cut's alone when this agrees with the
    finite differences."""

    def __init__(self, loads: ModelLoads, input_sources: list[str], var_names: list[str], float_outputs: list[str],
                 behind: frozenset[tuple[str, str]] = frozenset()):
        """`behind`: (function, node) of the custom gradients the model never runs (behind a cut): the copy
        differentiates their forward, since making the cut an identity would run them there alone."""
        self.loads, self.input_sources = loads, input_sources
        self.var_names, self.float_outputs, self.behind = var_names, float_outputs, behind
        self._runners: dict[tuple, Runner] = {}  # by the inputs' shapes

    def __call__(self, u: dict[str, np.ndarray], inputs: dict[str, Any], var_values: list[Any],
                 in_dirs: dict[str, np.ndarray], var_dirs: dict[int, np.ndarray]) -> float:
        loaded = self.loads.uncut(self.behind)
        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        key = tuple(sorted((k, v.shape) for k, v in arrays.items()))
        if key not in self._runners:
            by_name = signature_variables(self.loads.info, loaded.fn)
            self._runners[key] = Runner(loaded.fn, arrays, self.input_sources,
                                        [(n, by_name[n]) for n in self.var_names], self.float_outputs)
        runner = self._runners[key]
        runner.move_to(arrays, [np.asarray(v) for v in var_values])
        _, g_in, g_var = runner.gradient(u)
        total = sum(float(np.sum(np.asarray(g_in[n], np.float64) * d)) for n, d in in_dirs.items()
                    if g_in.get(n) is not None)
        return total + sum(float(np.sum(np.asarray(g_var[i], np.float64) * d)) for i, d in var_dirs.items()
                           if g_var[i] is not None)


class ModelLoads:
    """The audited SavedModel read once and loaded at most once in each precision, shared by the numeric
    checks and the stability probes (loading ResNet50 costs about as much as five gradient passes).

    `get(float64)` loads on first use; a load that failed, or a copy dropped with `fail` because it loads
    but cannot run (a compiled XlaCallModule fixed to float32), raises the same error again without
    retrying. `close()` removes the float64 copy's folder."""

    def __init__(self, path: str, tags: tuple[str, ...], signature: str, model: Any = None):
        """`model`: the static pass's parse (targets.SavedModelFile); without it the model is parsed here."""
        self.path, self.tags, self.signature, self._model = path, tags, signature, model
        self._info: SavedModelInfo | None = None
        self._loaded: dict[bool | str, Loaded] = {}
        self._failed: dict[bool | str, BaseException] = {}
        # the frozen copy of the loaded model its stages share (stability.local.shared_forensics), made on first use
        self.forensics: Any = None
        # (point, cotangent, {source: gradient}) of the loaded model at the stability probes' base point, every input
        # and variable differentiated, when the probes computed it: the precision stage's own point, not run again
        self.base_gradients: tuple[dict, dict, dict] | None = None

    @property
    def info(self) -> SavedModelInfo:
        if self._info is None:
            from .savedmodel import read_saved_model, saved_model_info

            self._info = (saved_model_info(self._model, self.signature, self.path) if self._model is not None
                          else read_saved_model(self.path, self.tags, self.signature))
        return self._info

    def get(self, float64: bool) -> Loaded:
        return self._once(float64, lambda: load(self.info, self.tags, float64))

    def has(self, float64: bool) -> bool:
        """Whether that model is loaded already (nothing is loaded here)."""
        return float64 in self._loaded

    def uncut(self, behind: frozenset[tuple[str, str]] = frozenset()) -> Loaded:
        """The float64 copy with every stop_gradient made an identity and the custom gradients `behind` them
        ((function, node)) differentiated as their forward (`upcast.write_float64_copy`), loaded on first use:
        whether a cut explains a mismatch is checked on it."""
        return self._once("uncut", lambda: load(self.info, self.tags, True, without_cuts=True, behind=behind))

    def _once(self, key: bool | str, make) -> Loaded:
        """The copy `key`, made by `make()` on first use; a copy that failed raises the same error again."""
        if key in self._failed:
            raise self._failed[key]
        if key not in self._loaded:
            try:
                self._loaded[key] = make()
            except Exception as exc:
                self._failed[key] = exc
                raise
        return self._loaded[key]

    def fail(self, float64: bool, exc: BaseException) -> None:
        """The model in this precision loads but cannot run: close it, and let every later `get` raise."""
        loaded = self._loaded.pop(float64, None)
        if loaded is not None:
            loaded.close()
        self._failed[float64] = exc

    def close(self) -> None:
        for loaded in self._loaded.values():
            loaded.close()
        self._loaded.clear()
