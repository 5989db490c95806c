"""The safety gate: every op TensorFlow would run, at load or at call, checked against the reviewed op classes
(op_classes.py). Only a model whose ops are all pure may be loaded; nothing here executes anything."""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from typing import Any

from ..model import OpRef
from .assets import asset_defs
from .op_classes import CLASSES, TF_VERSION
from .package_ops import PACKAGE_OPS, PackageOp, reviewed

TOP = "<graph>"
INIT_OP_KEY = "__saved_model_init_op"
# TF1 collections whose ops the loader runs after restoring the variables: load_v1_in_v2's
# _EagerSavedModelLoader.load runs loader_impl.get_init_op (the __saved_model_init_op signature, else the
# saved_model_main_op, else the legacy_init_op collection) or, when the model has none of them,
# monitored_session.Scaffold.default_local_init_op (tables_initializer(): the table_initializer collection).
TF1_INIT_COLLECTIONS = ("saved_model_main_op", "legacy_init_op", "table_initializer")
# Scaffold.default_local_init_op also runs local_variables_initializer(): the initializer op of each VariableDef
# of this collection (its `initializer_name`), as import_meta_graph deserialises it. Its third part, the
# local_resources collection's creators, is never written into a MetaGraphDef (no proto function).
TF1_LOCAL_VARIABLES = "local_variables"
# Grappler's implementation selector (implementation_selector.cc, function_api_info.cc) swaps a call of a
# function for another library function with the same `api_implements` attribute (its string value; empty is
# no interface) whose `api_preferred_device` is the call's device type (tf.keras 2's cuDNN/standard LSTM and
# GRU; Keras 3 does not use it). Nothing calls the sibling in the graph: the gate walks it as a root.
API_IMPLEMENTS = "api_implements"
_PASS_THROUGH = {"Identity", "IdentityN", "Snapshot", "StopGradient"}
_MAX_DEPTH = 64  # provenance of a tensor through identities and call arguments


@dataclass(frozen=True)
class Verdict:
    """One op that is not proven harmless: its class (io, network, process, python, unproven or unknown; missing:
    a reviewed package's op whose package is not loaded, which cannot run here at all), why, and the place
    TensorFlow would run it from."""

    op: OpRef
    cls: str
    why: str
    root: str


@dataclass(frozen=True)
class _Root:
    label: str  # where TensorFlow runs it from, for the message
    where: str  # TOP or a function name
    nodes: tuple
    saver: bool = False  # the saver's restore: its RestoreV2 of the fed file name is expected


_WHY = {"io": "reads or writes files", "network": "talks to the network", "process": "acts on the process",
        "python": "runs Python code"}


def is_pure(op_type: str) -> bool:
    """Whether the reviewed classes prove the op harmless: its kernel may run, on anything."""
    return CLASSES.get(op_type) == "pure"


def _ref_node(ref: str) -> str:
    return ref.lstrip("^").split(":")[0]


def _out_index(ref: str) -> int:
    """The flat output index of an edge, when it is explicit at its end (`n:0`, `n:output:1`)."""
    tail = ref.rsplit(":", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else 0


def closure(graph_def, names: list[str]) -> tuple:
    """Top-level nodes that running `names` (tensors or ops) runs: data and control inputs."""
    nodes = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    stack = [_ref_node(n) for n in names]
    while stack:
        name = stack.pop()
        if name in keep or name not in nodes:
            continue
        keep.add(name)
        stack.extend(_ref_node(i) for i in nodes[name].input)
    return tuple(n for n in graph_def.node if n.name in keep)


def roots(model, sig) -> list[_Root]:
    """What TensorFlow runs: the audited signature, and for a SavedModel everything its loader runs."""
    graph_def = model.graph_def
    meta = model.meta_graph
    label = f"signature {sig.key!r}"
    if meta is None:  # a traced function: its whole graph runs
        return [_Root(label, TOP, tuple(graph_def.node))]
    out = []
    if sig.function is not None:
        fdef = model.library.functions[sig.function]
        out.append(_Root(label, sig.function, tuple(fdef.node_def)))
    else:
        out.append(_Root(label, TOP, closure(graph_def, [o.tensor for o in sig.outputs])))
    init = meta.signature_def.get(INIT_OP_KEY)
    if init is not None:
        out.append(_Root(f"the model initializer ({INIT_OP_KEY})", TOP,
                         closure(graph_def, [v.name for v in init.outputs.values()])))
    for key in TF1_INIT_COLLECTIONS:
        coll = meta.collection_def.get(key)
        if coll is not None and coll.HasField("node_list"):
            out.append(_Root(f"the {key} collection", TOP, closure(graph_def, list(coll.node_list.value))))
    # Walked whether or not the model has an init op (the loader then runs them only without one).
    for variable, initializer in _local_initializers(meta):
        out.append(_Root(f"the initializer of local variable {variable!r} (the {TF1_LOCAL_VARIABLES} collection)",
                         TOP, closure(graph_def, [initializer])))
    saver = meta.saver_def
    if saver.restore_op_name:
        out.append(_Root("the saver's restore op", TOP, closure(graph_def, [saver.restore_op_name]), saver=True))
    out.extend(_object_graph_roots(model))
    return out


def _local_initializers(meta) -> list[tuple[str, str]]:
    """(variable name, initializer op name) of each VariableDef of the TF1 local_variables collection."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.framework import variable_pb2

    coll = meta.collection_def.get(TF1_LOCAL_VARIABLES)
    if coll is None or not coll.HasField("bytes_list"):
        return []
    out = []
    for raw in coll.bytes_list.value:
        variable = variable_pb2.VariableDef()
        try:
            variable.ParseFromString(raw)
        except DecodeError:
            continue  # the loader's import_meta_graph fails on it before anything runs
        if variable.initializer_name:
            out.append((variable.variable_name, variable.initializer_name))
    return out


def _interface(fdef) -> str:
    """The `api_implements` interface a FunctionDef declares, as the implementation selector reads it."""
    return fdef.attr[API_IMPLEMENTS].s.decode(errors="replace") if API_IMPLEMENTS in fdef.attr else ""


def _concrete_names(model, node_id: int) -> list[str]:
    nodes = model.object_graph.nodes
    if not 0 <= node_id < len(nodes):
        return []
    node = nodes[node_id]
    kind = node.WhichOneof("kind")
    if kind == "function":
        return list(node.function.concrete_functions)
    if kind == "bare_concrete_function":
        return [node.bare_concrete_function.concrete_function_name]
    return []


def _object_graph_roots(model) -> list[_Root]:
    """Resource creator, initializer and destroyer functions, and saveable objects' save and restore
    functions: the loader runs them (the destroyer when the object is freed)."""
    out = []
    for node in model.object_graph.nodes:
        named: list[tuple[str, int]] = []
        if node.WhichOneof("kind") == "resource":
            named += [(c.local_name, c.node_id) for c in node.children]
        for key, saveable in node.saveable_objects.items():
            named += [(f"{key} save function", saveable.save_function),
                      (f"{key} restore function", saveable.restore_function)]
        owner = "a resource's" if node.WhichOneof("kind") == "resource" else "a saved object's"
        for local, node_id in named:
            for fname in _concrete_names(model, node_id):
                if fname in model.library.functions:
                    out.append(_Root(f"{owner} {local}", fname, tuple(model.library.functions[fname].node_def)))
    return out


class _Provenance:
    """Whether a tensor is, on every path, exactly one of the model's asset paths or the saver's fed file
    name: followed through identities and call arguments, never computed."""

    def __init__(self, model):
        self.model = model
        self.calls: dict[str, list[tuple[str, Any]]] = {}  # function -> (caller, call NodeDef)
        self.nodes: dict[str, dict[str, Any]] = {}
        meta = model.meta_graph
        self.asset_nodes = {_ref_node(a.tensor_info.name) for a in asset_defs(meta)} if meta else set()
        self.saver_node = _ref_node(meta.saver_def.filename_tensor_name) if meta else None
        og = model.object_graph
        self.bound: dict[str, list[int]] = (
            {k: list(cf.bound_inputs) for k, cf in og.concrete_functions.items()} if og is not None else {})
        self.asset_objects = ({i for i, n in enumerate(og.nodes) if n.WhichOneof("kind") == "asset"}
                              if og is not None else set())
        self._holds: dict[str, bool] = {}  # variable handle node -> whether it holds an asset path
        self._by_handle: dict[str, list[Any]] | None = None

    def call(self, caller: str, node, fname: str) -> None:
        self.calls.setdefault(fname, []).append((caller, node))

    def node(self, where: str, name: str):
        if where not in self.nodes:
            body = self.model.graph_def.node if where == TOP else self.model.library.functions[where].node_def
            self.nodes[where] = {n.name: n for n in body}
        return self.nodes[where].get(name)

    def is_(self, kind: str, where: str, ref: str, depth: int = 0) -> bool:
        if depth > _MAX_DEPTH or ref.startswith("^"):
            return False
        name = _ref_node(ref)
        node = self.node(where, name)
        if node is None and where != TOP:  # a function argument: every caller must pass one
            return self._argument(kind, where, name, depth)
        if node is None:
            return False
        if where == TOP and self._named(kind, name):
            return True
        return self._through(kind, where, ref, node, depth)

    def _named(self, kind: str, name: str) -> bool:
        """Whether the top-level node `name` is the saver's file name or an asset's path placeholder."""
        if name == (self.saver_node if kind == "saver" else None):
            return True
        return kind == "asset" and name in self.asset_nodes

    def _through(self, kind: str, where: str, ref: str, node, depth: int) -> bool:
        """Whether `node`, producing `ref`, hands on one: an identity of it, or the variable holding an asset."""
        data = [i for i in node.input if not i.startswith("^")]
        if node.op in _PASS_THROUGH and data:
            source = data[_out_index(ref)] if node.op == "IdentityN" and _out_index(ref) < len(data) else data[0]
            return self.is_(kind, where, source, depth + 1)
        if node.op == "ReadVariableOp" and where == TOP and kind == "asset":
            return self._variable_holds_asset(data[0] if data else "", depth)
        return False

    def _variable_holds_asset(self, handle: str, depth: int) -> bool:
        """TF2's init op keeps an asset path in a variable assigned once from the asset placeholder. Each variable's
        answer is found once, from an index of the top-level nodes by the handle they take first: a model with
        thousands of table initializers reading variables costs one pass over its nodes, not one per initializer
        (the red team's 20,000 initializers took 254 s of the parent's CPU)."""
        key = _ref_node(handle)
        if key not in self._holds:
            self._holds[key] = False  # a cycle through the variable proves nothing
            writes = self._writes().get(key, [])
            self._holds[key] = bool(writes) and all(
                w.op == "AssignVariableOp" and len(w.input) > 1 and self.is_("asset", TOP, w.input[1], depth + 1)
                for w in writes)
        return self._holds[key]

    def _writes(self) -> dict[str, list[Any]]:
        """Top-level nodes other than reads by the node of their first input (what may write a variable)."""
        if self._by_handle is None:
            self._by_handle = {}
            for n in self.model.graph_def.node:
                if n.input and n.op not in ("ReadVariableOp", "VarIsInitializedOp"):
                    self._by_handle.setdefault(_ref_node(n.input[0]), []).append(n)
        return self._by_handle

    def _argument(self, kind: str, fname: str, arg: str, depth: int) -> bool:
        fdef = self.model.library.functions[fname]
        names = [a.name for a in fdef.signature.input_arg]
        if arg not in names:
            return False
        position = names.index(arg)
        answers = []
        bound = self.bound.get(fname, [])
        captured_from = len(names) - len(bound)
        if kind == "asset" and bound and position >= captured_from:
            answers.append(bound[position - captured_from] in self.asset_objects)
        for caller, node in self.calls.get(fname, []):
            if node.op not in ("PartitionedCall", "StatefulPartitionedCall") and node.op != fname:
                return False  # a loop body or branch: its arguments are not the call's inputs one to one
            data = [i for i in node.input if not i.startswith("^")]
            answers.append(position < len(data) and self.is_(kind, caller, data[position], depth + 1))
        return bool(answers) and all(answers)


def _gradient_function(node, library) -> str | None:
    """The saved custom gradient (tf.custom_gradient) a node's `_gradient_op_type` names."""
    if "_gradient_op_type" not in node.attr:
        return None
    return library.registered_gradients.get(node.attr["_gradient_op_type"].s.decode(errors="replace"))


def _function_names(node, library) -> list[str]:
    from ..graph.library import function_attrs

    names = [n for _, ns in function_attrs(node) for n in ns]
    if node.op in library.functions:
        names.append(node.op)
    gradient = _gradient_function(node, library)
    if gradient is not None:  # a saved custom gradient runs when gradients are taken
        names.append(gradient)
    # a legacy (Defun) gradient function of a called function
    names += [library.function_gradients[n] for n in list(names) if n in library.function_gradients]
    return names


def _attr_text(node, name: str) -> str:
    return node.attr[name].s.decode(errors="replace") if name in node.attr else ""


def _placeholder(node, names: tuple[str, ...]) -> str | None:
    """The first of the attributes `names` that is a placeholder (a function's attribute the node calling that
    function fills in, at each call site, with any value: a file path among them), None when each is literal."""
    return next((n for n in names if n in node.attr and node.attr[n].placeholder), None)


# The attributes the gate reads to decide an op's harm (a file it prints to or reads, a folder or pattern it reads
# under): given as placeholders, they are not proven harmless whatever they hold here.
_DECIDING_ATTRS: dict[str, tuple[str, ...]] = {
    "PrintV2": ("output_stream",), "FixedUnigramCandidateSampler": ("vocab_file",),
    "DecodeProtoV2": ("descriptor_source",), "EncodeProto": ("descriptor_source",),
    "XlaCallModule": ("has_token_input_output",),
}
# StaticRegexReplace is pure string computation; its attributes decide only whether TF-DF's model folder is the
# model's own (_assets_folder).
_REGEX_ATTRS = ("pattern", "rewrite", "replace_global")


def _judge(node, library, cls: str | None, saver: bool, where: str, prov: _Provenance) -> tuple[str, str] | None:
    """(class, why) of an op that is not proven harmless here, or None when it is."""
    if node.op in library.functions:
        return None  # a call of a library function, whose body is walked
    if cls is None:
        return _unlisted(node, library, where, prov)
    decided, verdict = _by_node(node, saver, where, prov)
    if decided:
        return verdict
    if cls == "pure":
        return None
    if cls == "unproven":
        return cls, "is not on the reviewed list of pure computation"
    return cls, _WHY[cls]


def _unlisted(node, library, where: str, prov: _Provenance) -> tuple[str, str] | None:
    """(class, why) of an op that is not on TensorFlow's reviewed list: unknown here, a package's (missing,
    reviewed or registered under another definition), or a custom op."""
    op = node.op
    package = PACKAGE_OPS.get(op)
    if library.op_def(op) is None:
        if package is not None:  # cannot run here at all: GA109 names the package, nothing is executed
            return "missing", f"needs {package.dist}: {package.load}"
        return "unknown", "is not an op this TensorFlow knows"
    entry = reviewed(op, library.op_def(op))
    if entry is not None:
        return _package_op(node, entry, where, prov)
    if package is not None:
        return "unproven", (f"is registered with another definition than the reviewed {package.dist} "
                            f"{package.version}'s")
    return "unproven", (f"is not on the reviewed list of pure computation (a custom op, or one newer than "
                        f"TensorFlow {TF_VERSION})")


def _by_node(node, saver: bool, where: str, prov: _Provenance) -> tuple[bool, tuple[str, str] | None]:
    """(True, the verdict) for a listed op whose harm is decided by this node's attributes and inputs (a print
    to a file, a table read from one of the model's assets, the saver restoring its own variables), else
    (False, None): its class decides."""
    op = node.op
    data = [i for i in node.input if not i.startswith("^")]
    bound = _placeholder(node, _DECIDING_ATTRS.get(op, ()))
    if bound is not None:
        return True, ("io", f"takes its {bound} attribute from the node that calls its function (a placeholder), "
                            "which can name a file: not proven harmless")
    if op == "PrintV2":
        stream = _attr_text(node, "output_stream")
        return True, (("io", f"prints to a file ({stream})") if stream.startswith("file://") else None)
    if op == "XlaCallModule" and "has_token_input_output" in node.attr and node.attr["has_token_input_output"].b:
        return True, ("unproven", "orders host side effects (token input and output)")
    if op == "FixedUnigramCandidateSampler" and not _attr_text(node, "vocab_file"):
        return True, None
    if op in ("DecodeProtoV2", "EncodeProto") and _attr_text(node, "descriptor_source") in ("", "local://"):
        return True, None
    if op in ("InitializeTableFromTextFile", "InitializeTableFromTextFileV2"):
        if len(data) > 1 and prov.is_("asset", where, data[1]):
            return True, None
        return True, ("io", "reads a file that is not one of the model's assets")
    if op in ("RestoreV2", "Restore", "RestoreSlice") and saver and data and prov.is_("saver", where, data[0]):
        return True, None  # the saver restoring the model's own variables/
    return False, None


# StaticRegexReplace patterns that are literal text in RE2 and in Python's re alike.
_LITERAL = re.compile(r"[A-Za-z0-9_-]+")
# The folders the model is loaded from besides its own: the float64 copy (numeric/runner.py) in the child's
# temporary folder (isolate.py), each name these words and random letters.
_COPY_FOLDERS = ("gradaudit-run-", "gradaudit-f64-")


def _package_op(node, entry: PackageOp, where: str, prov: _Provenance) -> tuple[str, str] | None:
    """A reviewed op of a --load-ops package: pure, or reading only under the model's own assets folder."""
    if entry.cls == "pure":
        return None
    if _placeholder(node, (entry.prefix_attr,)) is not None:
        return "io", (f"takes its {entry.prefix_attr} attribute from the node that calls its function (a "
                      "placeholder), which can name any file: not proven harmless")
    prefix = _attr_text(node, entry.prefix_attr)
    if "/" in prefix or "\\" in prefix or "\0" in prefix:
        return "io", f"reads files named by its {entry.prefix_attr} attribute {prefix!r}, which leaves the folder"
    data = [i for i in node.input if not i.startswith("^")]
    names = list(entry.inputs)
    ref = data[names.index(entry.path_input)] if len(data) == len(names) else ""
    if ref and (prov.is_("asset", where, ref) or _assets_folder(prov, where, ref)):
        return None
    return "io", (f"reads files under its {entry.path_input} input, which is not proven to be the model's own "
                  "assets folder")


def _assets_folder(prov: _Provenance, where: str, ref: str) -> bool:
    """TF-DF's folder: StaticRegexReplace(an asset's path, pattern=that asset's file name, rewrite="") is
    `<model>/assets/`. Whichever asset feeds it, the result must stay inside the assets folder, and the
    pattern must not match the folder the model is loaded from (nor the float64 copy's)."""
    node = prov.node(where, _ref_node(ref))
    if node is None or node.op != "StaticRegexReplace" or _attr_text(node, "rewrite") or _placeholder(
            node, _REGEX_ATTRS) is not None:
        return False
    pattern = _attr_text(node, "pattern")
    data = [i for i in node.input if not i.startswith("^")]
    meta = prov.model.meta_graph
    names = [a.filename for a in asset_defs(meta)] if meta is not None else []
    if not (_LITERAL.fullmatch(pattern) and pattern in names and data and prov.is_("asset", where, data[0])):
        return False
    given = getattr(prov.model, "path", "") or "."
    root = os.path.realpath(given)
    if any(pattern in p for p in (root, os.path.abspath(given), tempfile.gettempdir(), *_COPY_FOLDERS)):
        return False  # removing it would change the folder, not only the file name
    folder = os.path.join(root, "assets")
    once = "replace_global" in node.attr and not node.attr["replace_global"].b
    for name in names:  # the path the kernel is given, for each asset that may feed the op
        result = os.path.normpath(os.path.join(folder, name).replace(pattern, "", 1 if once else -1))
        if os.path.commonpath([result, folder]) != folder:
            return False
    return True


def check(model, sig) -> list[Verdict]:
    """Every op, in every function reachable from what TensorFlow runs, that is not proven harmless."""
    library = model.library
    prov = _Provenance(model)
    all_roots = roots(model, sig)
    # First the whole call graph (for argument provenance), then the judgement.
    calls = _CallGraph()
    interfaces: dict[str, list[str]] = {}  # api_implements -> the library functions that declare it
    for fname, fdef in library.functions.items():
        if _interface(fdef):
            interfaces.setdefault(_interface(fdef), []).append(fname)
    scanned = 0  # how many of the functions walked have had their siblings looked up
    pending = list(all_roots)
    while pending:
        root = pending.pop(0)
        _walk(root, library, prov, calls)
        if not pending:  # the implementation selector's swaps: their callees may swap again
            pending, scanned = _swapped_in(calls.walked[scanned:], interfaces, library, calls.seen), len(calls.walked)
    via = calls.via
    found: dict[OpRef, Verdict] = {}
    for root, where, batch in calls.visits:
        for node in batch:
            ref = OpRef(node.op, node.name, where)
            if ref in found:
                continue
            judged = _judge(node, library, CLASSES.get(node.op), root.saver, where, prov)
            if judged is not None:
                label = f"{root.label}, as {via[where]}" if where in via else root.label
                found[ref] = Verdict(ref, judged[0], judged[1], label)
    return list(found.values())


@dataclass
class _CallGraph:
    """What walking the functions reachable from the roots found, over all roots."""

    visits: list[tuple[_Root, str, tuple]] = field(default_factory=list)  # (root, function, its nodes)
    seen: set[tuple[str, bool]] = field(default_factory=set)  # (function, saver flag) walked
    via: dict[str, str] = field(default_factory=dict)  # function -> how a gradient brought it in, for the message
    walked: list[str] = field(default_factory=list)  # every function walked, in order


def _walk(root: _Root, library, prov: _Provenance, calls: _CallGraph) -> None:
    """Every function reachable from `root`, each (with its saver flag) once over all roots, into `calls`."""
    visits, seen, via, walked = calls.visits, calls.seen, calls.via, calls.walked
    if root.where != TOP:
        walked.append(root.where)
    stack = [(root.where, root.nodes)]
    while stack:
        where, batch = stack.pop()
        visits.append((root, where, batch))
        for node in batch:
            gradient = _gradient_function(node, library)
            for fname in _function_names(node, library):
                prov.call(where, node, fname)
                if fname in library.functions and (fname, root.saver) not in seen:
                    seen.add((fname, root.saver))
                    walked.append(fname)
                    if fname == gradient:
                        via.setdefault(fname, f"the saved custom gradient of {node.op} '{node.name}'")
                    elif where in via:
                        via.setdefault(fname, via[where])
                    stack.append((fname, tuple(library.functions[fname].node_def)))


def _swapped_in(walked: list[str], interfaces: dict[str, list[str]], library, seen: set) -> list[_Root]:
    """Roots for the library functions TensorFlow's implementation selector may run instead of a walked one:
    every function sharing a walked function's `api_implements`, whatever its preferred device (the device
    a call runs on decides) or function type (inference, forward, backward: the selector keeps them apart, the
    gate does not), unless it is walked already."""
    out = []
    for fname in walked:
        name = _interface(library.functions[fname])
        for sibling in interfaces.get(name, []) if name else []:
            if sibling != fname and (sibling, False) not in seen:
                seen.add((sibling, False))
                out.append(_Root(f"the function {sibling}, swapped in by TensorFlow's implementation selector for "
                                 f"{fname} ({API_IMPLEMENTS} {name!r})", sibling,
                                 tuple(library.functions[sibling].node_def)))
    return out
