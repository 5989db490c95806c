"""Python targets: `module:attr` / `file.py:attr` objects and Keras models or files, traced into a
concrete function whose graph the static pass reads directly."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import GradauditError
from ..graph.library import Library
from ..model import TargetKind
from .saved_model import SignatureGraph, TensorSpec, VariableInfo, closure

_SPEC = re.compile(r"^(?P<name>[A-Za-z_][\w./-]*)=(?P<dtype>[a-z0-9]+)\[(?P<dims>[^\]]*)\]$")


def parse_input_spec(text: str):
    """`NAME=DTYPE[D0,D1,...]` (a dimension may be `None` or `?`) -> tf.TensorSpec."""
    import tensorflow as tf

    m = _SPEC.match(text.replace(" ", ""))
    if not m:
        raise GradauditError(f"--input-spec {text!r}: expected NAME=DTYPE[D0,D1,...], e.g. x=float32[None,4]")
    try:
        dtype = tf.dtypes.as_dtype(m["dtype"])
    except TypeError:
        raise GradauditError(f"--input-spec {text!r}: unknown dtype {m['dtype']!r}") from None
    dims = [None if d in ("None", "?", "") else int(d) for d in m["dims"].split(",")] if m["dims"] else []
    return tf.TensorSpec(dims, dtype, name=m["name"])


def resolve(target: str) -> Any:
    """Import `package.module:attr` or `path/file.py:attr` (attr may be dotted) and return the object."""
    module_part, _, attr = target.rpartition(":")
    if not module_part or not attr:
        raise GradauditError(f"{target}: expected module:attribute or file.py:attribute")
    try:
        if module_part.endswith(".py") or os.sep in module_part:
            if not os.path.isfile(module_part):
                raise GradauditError(f"{module_part}: no such file")
            name = "_gradaudit_target_" + re.sub(r"\W", "_", os.path.abspath(module_part))
            spec = importlib.util.spec_from_file_location(name, module_part)
            if spec is None or spec.loader is None:  # a file Python cannot import (no .py suffix)
                raise GradauditError(f"{module_part}: not a Python file gradaudit can import (expected file.py)")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path and "" not in sys.path:
                sys.path.insert(0, os.getcwd())  # like `python -m`: modules of the working folder import
            module = importlib.import_module(module_part)
    except GradauditError:
        raise
    except ModuleNotFoundError as exc:
        raise GradauditError(f"{target}: module not found ({exc.name})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import
        raise GradauditError(f"{target}: importing {module_part} failed: {exc.__class__.__name__}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GradauditError(f"{target}: {module_part} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


# What a Keras file's variables may take beyond the bytes of the file itself (variables the file does not store:
# seed generators' states, counters). The config declares every variable's shape, and Keras allocates each one
# before it reads its weights: a config can declare gigabytes in a file of a few kilobytes.
KERAS_VARIABLE_SLACK = 64 << 20


class _Allocations:
    """The bytes of the variables Keras creates while it loads a file, refused beyond `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.refused: str | None = None  # the first variable refused, for the error line


def _variable_bytes(shape, dtype) -> int:
    import numpy as np

    count = 1
    for d in shape or ():
        count *= max(int(d or 0), 0)
    try:
        return count * np.dtype(str(dtype)).itemsize
    except TypeError:
        return count * 8


@contextlib.contextmanager
def _bounded_variables(limit: int) -> Iterator[_Allocations]:
    """While Keras loads a file, each variable it makes from an initializer (from the shapes its config
    declares, before the weights are read) is counted first, and refused once they add up beyond `limit`."""
    state = _Allocations(limit)
    try:
        from keras.src.backend.tensorflow.core import Variable
    except ImportError:  # pragma: no cover - another Keras backend or layout: not bounded here
        yield state
        return
    original = Variable._initialize_with_initializer  # noqa: SLF001 - where Keras allocates from a shape

    def bounded(self, initializer):
        state.used += _variable_bytes(self._shape, self._dtype)
        if state.used > state.limit:
            if state.refused is None:
                state.refused = f"{getattr(self, 'path', None) or self.name} of shape {tuple(self._shape)}"
            raise MemoryError(f"variable {state.refused} is beyond the Keras file's size")
        return original(self, initializer)

    Variable._initialize_with_initializer = bounded  # noqa: SLF001
    try:
        yield state
    finally:
        Variable._initialize_with_initializer = original  # noqa: SLF001


def _keras_file_bytes(path: str) -> int:
    """The bytes a Keras file holds: a .keras archive's members (refused when they decompress to more than
    the archive's own size allows: Keras stores them uncompressed), an .h5 file's own size."""
    from ..safety.budget import _regular

    size = _regular(path, "the Keras file")
    if not zipfile.is_zipfile(path):
        return size
    try:
        with zipfile.ZipFile(path) as archive:
            declared = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise GradauditError(f"{path}: cannot load the Keras file: {exc}") from None
    if declared > size + KERAS_VARIABLE_SLACK:
        raise GradauditError(f"{path}: cannot load the Keras file: its members decompress to {declared:,} bytes, "
                             f"far more than the {size:,} bytes of the archive (Keras stores them uncompressed)")
    return declared


def load_keras_file(path: str, allow_unsafe: bool = False) -> Any:
    """A Keras file, loaded with its variables bounded by its own size (plus KERAS_VARIABLE_SLACK): a config
    that declares larger variables than the file holds weights for is refused before they are allocated."""
    import keras

    if not os.path.isfile(path):
        raise GradauditError(f"{path}: no such file")
    limit = _keras_file_bytes(path) + KERAS_VARIABLE_SLACK
    with _bounded_variables(limit) as state:
        try:
            return keras.models.load_model(path, safe_mode=not allow_unsafe, compile=False)
        except Exception as exc:  # noqa: BLE001 - any reader failure is a load error
            if state.refused is not None:
                raise GradauditError(f"{path}: cannot load the Keras file: its config declares variables larger "
                                     f"than the file holds ({state.refused}; beyond {limit:,} bytes)") from None
            if isinstance(exc, ValueError) and ("safe_mode" in str(exc) or "unsafe" in str(exc).lower()
                                                or "lambda" in str(exc).lower()):
                raise GradauditError(f"{path}: this Keras file needs unsafe deserialisation (it holds Python "
                                     "code, e.g. a Lambda layer); pass --allow-unsafe-ops only if you trust "
                                     "it") from None
            if isinstance(exc, ValueError):
                raise GradauditError(f"{path}: Keras cannot load it: {str(exc).splitlines()[0]}") from None
            raise GradauditError(f"{path}: Keras cannot load it: {exc.__class__.__name__}: "
                                 f"{str(exc).splitlines()[0] if str(exc) else ''}") from None


@dataclass
class Traced:
    """A concrete function and what to call its variables and outputs."""

    fn: Any  # ConcreteFunction
    kind: TargetKind  # "python" | "keras"
    label: str
    variable_names: dict[int, VariableInfo]  # id(variable handle) -> what to call the variable
    output_names: list[str] | None
    owner_variables: list[VariableInfo]  # trainable variables of the module/model, for disconnected-source
    owner: Any = None  # keep the module / model alive


def _is_keras_model(obj) -> bool:
    try:
        import keras

        return isinstance(obj, keras.Model)
    except ImportError:  # pragma: no cover
        return False


def _keras_concrete(model, label: str) -> Traced:
    import tensorflow as tf

    inputs = getattr(model, "inputs", None)
    if not inputs:
        raise GradauditError(f"{label}: the Keras model has no defined inputs (build it or use a functional model)")
    specs = [tf.TensorSpec(tuple(t.shape), t.dtype, name=(t.name or f"input_{i}").split(":")[0])
             for i, t in enumerate(inputs)]

    structure = getattr(model, "_inputs_struct", None)

    def call(*xs):
        if isinstance(structure, (dict, list, tuple)) and len(xs) > 1:
            import keras

            # a dict-input model wants its dict back (inputs are flattened in the same key order)
            return model(keras.tree.pack_sequence_as(structure, list(xs)), training=False)
        return model(list(xs) if len(xs) > 1 else xs[0], training=False)

    fn = traced_by(label, tf.function(call, input_signature=specs).get_concrete_function)
    names = {}
    for v in model.variables:
        tfv = getattr(v, "value", v)
        handle = getattr(tfv, "handle", None)
        if handle is not None:
            names[id(handle)] = _info(tfv, getattr(v, "path", None), v.trainable)
    output_names = list(getattr(model, "output_names", None) or [])
    owner_vars = [names[id(v.value.handle)] for v in model.trainable_variables
                  if id(getattr(getattr(v, "value", v), "handle", None)) in names]
    return Traced(fn, "keras", label, names, output_names or None, owner_vars, model)


def _info(v, name: str | None, trainable: bool) -> VariableInfo:
    """VariableInfo of a tf.Variable; `name` defaults to its name without `:0`."""
    if name is None:
        name = v.name[:-2] if v.name.endswith(":0") else v.name
    shape = None if v.shape.rank is None else tuple(v.shape.as_list())
    return VariableInfo(name, bool(trainable), v.dtype.as_datatype_enum, shape)


def trace(obj: Any, label: str, input_specs: list | None = None, kind: TargetKind = "python") -> Traced:
    """Turn a tf.function, ConcreteFunction, tf.Module, keras.Model (or a no-argument function
    returning one of these) into a Traced concrete function."""
    import tensorflow as tf
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    if _is_keras_model(obj):
        return _keras_concrete(obj, label)
    owner = None
    if isinstance(obj, tf.Module) and not isinstance(obj, tf.types.experimental.GenericFunction):
        owner, obj = obj, _module_call(obj, label)
    if isinstance(obj, tf.types.experimental.ConcreteFunction):
        fn = obj
    elif isinstance(obj, (tf.types.experimental.GenericFunction, polymorphic_function.Function)):
        fn = _concrete_function(obj, label, input_specs)
    elif callable(obj) and not isinstance(obj, type):
        made = _call_factory(obj, label)
        if callable(made) or isinstance(made, tf.Module):
            return trace(made, label, input_specs, kind)
        raise GradauditError(f"{label}: it returned a {type(made).__name__}, not something to audit")
    else:
        what = type(obj).__name__
        raise GradauditError(f"{label}: {'an' if what[:1].lower() in 'aeiou' else 'a'} {what} cannot be audited "
                             "(expected a tf.function, ConcreteFunction, tf.Module or keras.Model)")
    names = {id(v.handle): _info(v, None, v.trainable) for v in fn.variables}
    owner_vars = [_info(v, None, True) for v in owner.trainable_variables] if owner is not None else []
    return Traced(fn, kind, label, names, None, owner_vars, owner)


def traced_by(label: str, make: Any) -> Any:
    """`make()`, which traces the target's own Python code: what that code raises is the model's error, said with
    its own message (tester 25: it was "internal error in gradaudit ... ValueError: in user code:")."""
    try:
        return make()
    except GradauditError:
        raise
    except Exception as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        said = [ln for ln in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", ln)]
        reason = said[-1] if said else f"{type(exc).__name__}: {lines[-1] if lines else ''}".rstrip(": ")
        raise GradauditError(f"{label}: tracing it raised {reason} (the model's own code; --debug shows where)") \
            from exc


def _module_call(module: Any, label: str) -> Any:
    """The tf.function a tf.Module's __call__ is; refuses a module whose __call__ is not one."""
    import tensorflow as tf

    call = module.__call__ if callable(module) else None
    if not isinstance(call, (tf.types.experimental.GenericFunction, tf.types.experimental.ConcreteFunction)):
        named = sorted(n for n, v in vars(module).items() if isinstance(v, tf.types.experimental.GenericFunction))
        named += sorted(n for n in dir(type(module)) if not n.startswith("_")
                        and isinstance(getattr(type(module), n, None), tf.types.experimental.GenericFunction))
        hint = (f"; audit one of its tf.functions as a target of its own ({', '.join(f'{label}.{n}' for n in named)})"
                if named else "")
        raise GradauditError(f"{label}: the tf.Module's __call__ is not a tf.function{hint}")
    return call


def _concrete_function(fn: Any, label: str, input_specs: list | None) -> Any:
    """The concrete function of a tf.function for `input_specs`, or for its own input_signature."""
    if input_specs:
        return traced_by(label, lambda: fn.get_concrete_function(*input_specs))
    if getattr(fn, "input_signature", None) is not None:
        return traced_by(label, fn.get_concrete_function)
    raise GradauditError(f"{label}: this tf.function has no input_signature; pass "
                         "--input-spec NAME=DTYPE[D0,D1,...] for each argument")


def _call_factory(factory: Any, label: str) -> Any:
    """What a plain function returns when called without arguments; refuses one that needs arguments."""
    import inspect

    try:
        params = list(inspect.signature(factory).parameters.values())
        needs_arguments = any(p.default is inspect.Parameter.empty
                              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)
    except (TypeError, ValueError):
        needs_arguments = True
    if needs_arguments:
        raise GradauditError(f"{label}: a {type(factory).__name__} that is not a tf.function, ConcreteFunction, "
                             "tf.Module or keras.Model (a plain function must take no arguments and "
                             "return one of these)")
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed
        raise GradauditError(f"{label}: calling it failed: {exc.__class__.__name__}: {exc}") from None


def _trace_custom_gradients(fn) -> tuple[list, dict[str, str]]:
    """FunctionDefs of the custom gradients the graph uses, traced as TensorFlow does when it saves them."""
    import tensorflow as tf
    from tensorflow.python.framework import ops

    graphs = [fn.graph] + [f.graph for f in fn.graph._functions.values() if hasattr(f, "graph")]  # noqa: SLF001
    fdefs, registered, seen = [], {}, set()
    for g in graphs:
        for op in g.get_operations():
            try:
                op_type = op.get_attr("_gradient_op_type").decode()
            except ValueError:
                continue
            if op_type in seen:
                continue
            seen.add(op_type)
            try:
                grad = ops.gradient_registry.lookup(op_type)
                cf = tf.function(grad).get_concrete_function(None, *op.inputs)
            except Exception:  # noqa: BLE001 - not traceable: analysed as "every input gets a gradient"
                continue
            library = cf.graph.as_graph_def().library
            fdefs.extend(library.function)
            fdefs.append(cf.function_def)
            registered[op_type] = cf.function_def.signature.name
    return fdefs, registered


class TracedModel:
    """A traced concrete function seen as the static pass sees a SavedModel."""

    def __init__(self, traced: Traced):
        self.traced = traced
        self.kind: TargetKind = traced.kind
        self.path = traced.label
        self.meta_graph = None  # nothing loads a traced function: no loader, assets or object graph
        self.object_graph = None
        self.graph_def = traced.fn.graph.as_graph_def()
        self.library = Library(self.graph_def)
        fdefs, registered = _trace_custom_gradients(traced.fn)
        self.library.add(fdefs, registered)

    def all_variables(self) -> list[VariableInfo]:
        return self.traced.owner_variables

    def other_signatures(self, key: str) -> list[str]:  # one traced function: nothing beside it
        return []

    def signature(self, key: str | None = None) -> SignatureGraph:  # one function: no key
        fn = self.traced.fn
        captured = {id(t): i for i, t in enumerate(fn.graph.internal_captures)}
        handles = list(fn.captured_inputs)
        inputs, variables = [], {}
        for t in fn.inputs:
            if id(t) in captured:
                handle = handles[captured[id(t)]]
                info = self.traced.variable_names.get(id(handle))
                if info is not None:
                    variables[t.op.name] = info
                continue
            shape = None if t.shape.rank is None else tuple(t.shape.as_list())
            inputs.append(TensorSpec(t.op.name, t.name, t.dtype.as_datatype_enum, shape))
        outputs = []
        flat_names = _output_names(fn.structured_outputs, self.traced.output_names)
        for name, t in zip(flat_names, fn.outputs):
            shape = None if t.shape.rank is None else tuple(t.shape.as_list())
            outputs.append(TensorSpec(name, t.name, t.dtype.as_datatype_enum, shape))
        nodes = closure(self.graph_def, [o.tensor for o in outputs])
        name = fn.name.decode() if isinstance(fn.name, bytes) else str(fn.name)
        return SignatureGraph(self.traced.label, inputs, outputs, nodes, None, variables, where=name)


def _output_names(structure, preferred: list[str] | None) -> list[str]:
    import tensorflow as tf

    flat = tf.nest.flatten(structure)
    if isinstance(structure, dict):
        return [str(k) for k in sorted(structure)]
    if preferred and len(preferred) == len(flat):
        return list(preferred)
    return [f"output_{i}" for i in range(len(flat))]


def _tf_variable(v: Any) -> Any:
    """The tf.Variable itself: a Keras variable holds one as `value` (a tf.Variable's `value` is a method)."""
    import tensorflow as tf

    return v if isinstance(v, tf.Variable) else getattr(v, "value", v)


def _holder(owner: Any, variables: list) -> Any:
    """A tf.Module holding `variables` (each once) at their object paths in a tf.Module owner ("w1", "block.w"), as
    the owner's own SavedModel would name them apart where two share a name (tester 25: "Variable (captured.0)" for
    "Variable (w1)"), a Keras model's at "variables.N" as model.export does; at "captured.N" where the owner gives none
    (a plain function)."""
    import tensorflow as tf

    paths: dict[int, str] = {}
    if _is_keras_model(owner):  # as model.export tracks them: its variables list
        for k, v in enumerate(owner.variables):
            paths.setdefault(id(_tf_variable(v)), f"variables.{k}")
    elif isinstance(owner, tf.Module):
        for path, v in owner._flatten(predicate=lambda x: isinstance(x, tf.Variable), with_path=True):  # noqa: SLF001
            paths.setdefault(id(v), ".".join(str(p) for p in path))
    holder = tf.Module()
    placed: set[int] = set()
    for i, v in enumerate(variables):
        if id(v) not in placed:
            placed.add(id(v))
            name = paths.get(id(v), "")
            setattr(holder, name if name and not hasattr(holder, name) else f"captured.{i}", v)
    return holder


def save_copy(traced: Traced, folder: str) -> str | None:
    """Save the traced function into `folder` as a SavedModel whose serving_default signature has the traced graph's
    input and output names (a Keras model's outputs by its output names, not output_0, ...) and whose object graph
    holds the function's variables and the owner's other trainable ones, with its custom gradients: the audit then
    reads and runs it as any SavedModel (one static pass, no names mapped back). None when saved; else why TensorFlow
    cannot save it."""
    import tensorflow as tf

    fn = traced.fn
    names = _output_names(fn.structured_outputs, traced.output_names)
    captured = {id(t) for t in fn.graph.internal_captures}
    specs = [tf.TensorSpec(t.shape, t.dtype, name=t.op.name) for t in fn.inputs if id(t) not in captured]
    structure = fn.structured_input_signature

    def serve(*xs):
        args, kwargs = tf.nest.pack_sequence_as(structure, list(xs), expand_composites=True)
        return dict(zip(names, tf.nest.flatten(fn(*args, **kwargs), expand_composites=True)))

    owner = traced.owner
    owned = [_tf_variable(v) for v in (getattr(owner, "trainable_variables", None) or [])]
    holder = _holder(owner, list(fn.variables) + [v for v in owned if isinstance(v, tf.Variable)])
    try:
        signature = tf.function(serve, input_signature=specs, autograph=False).get_concrete_function()
        tf.saved_model.save(holder, folder, signatures={"serving_default": signature},
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=True))
    except Exception as exc:  # noqa: BLE001 - a function TensorFlow cannot save is audited as traced
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"cannot be saved as a SavedModel ({exc.__class__.__name__}: {first})"
    return None
