"""Read a SavedModel's protobuf without executing anything: meta graph, signature, variables."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace

from google.protobuf import message, text_format
from tensorflow.core.protobuf import meta_graph_pb2, saved_model_pb2

from ..errors import GradauditError
from ..graph.dataflow import CALL_OPS
from ..graph.library import Library
from ..graph.validate import RejectedGraph, check_graph, check_object_graph
from ..model import OpRef, TargetKind
from ..safety.budget import MAX_PARSED_MESSAGES, MAX_TEXT_GRAPH_BYTES, check_count_attrs, read_capped
from ..safety.protoscan import message_count_bound

INIT_OP_KEY = "__saved_model_init_op"


@dataclass(frozen=True)
class TensorSpec:
    name: str  # signature key
    tensor: str  # graph tensor name, `node:idx`
    dtype: int
    shape: tuple[int | None, ...] | None


@dataclass(frozen=True)
class VariableInfo:
    name: str  # SavedVariable name, e.g. dense/kernel
    trainable: bool
    dtype: int
    shape: tuple[int | None, ...] | None
    # its node in the SavedModel's object graph: what tells apart variables that share a name (every tf.Variable
    # created without one is 'Variable'); None where there is no object graph (a traced function, a TF1 model)
    node_id: int | None = None

    @property
    def identity(self) -> int | str:
        """What makes this variable one variable: its object-graph node, else its name."""
        return self.node_id if self.node_id is not None else self.name


def variable_display_names(object_graph, node_ids) -> dict[int, str]:
    """A name for each variable node of `node_ids` (the saved object's variables): its SavedVariable
    name (dense/kernel), or, where several of them share that name (every tf.Variable created without one
    is 'Variable'), that name with the variable's path in the object graph ('Variable (w1)'), so that each
    source of a report is one variable."""
    nodes = object_graph.nodes
    variables = {i: nodes[i].variable.name for i in node_ids
                 if 0 <= i < len(nodes) and nodes[i].WhichOneof("kind") == "variable"}
    counts: dict[str, int] = {}
    for name in variables.values():
        counts[name] = counts.get(name, 0) + 1
    if all(c == 1 for c in counts.values()):
        return variables
    paths: dict[int, str] = {0: ""}
    queue = [0]
    while queue:  # breadth first: the shortest attribute path to each node
        i = queue.pop(0)
        for child in nodes[i].children if i < len(nodes) else ():
            if child.node_id not in paths:
                paths[child.node_id] = f"{paths[i]}.{child.local_name}" if paths[i] else child.local_name
                queue.append(child.node_id)
    return {i: name if counts[name] == 1 else f"{name} ({paths.get(i) or f'object {i}'})"
            for i, name in variables.items()}


@dataclass
class SignatureGraph:
    """What the static pass needs of one signature (or one saved function)."""

    key: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    # root: either top-level nodes (graph) or a function name whose args are the inputs
    nodes: list | None
    function: str | None
    variables: dict[str, VariableInfo]  # top-level node name or function arg name -> variable
    where: str = "<graph>"  # how findings name the location of top-level nodes


def _shape(proto) -> tuple[int | None, ...] | None:
    if proto.unknown_rank:
        return None
    return tuple(None if d.size < 0 else d.size for d in proto.dim)


def closure(graph_def, tensors: list[str], control: bool = False) -> list:
    """Top-level nodes the given tensors depend on (data inputs, and control inputs if asked), in
    graph order."""
    nodes = {n.name: n for n in graph_def.node}
    keep: set[str] = set()
    stack = [t.split(":")[0] for t in tensors]
    while stack:
        name = stack.pop()
        if name in keep or name not in nodes:
            continue
        keep.add(name)
        stack.extend(i.lstrip("^").split(":")[0] for i in nodes[name].input if control or not i.startswith("^"))
    return [n for n in graph_def.node if n.name in keep]


def _given_positions(structure) -> tuple[int, ...]:
    """Positions of the tensors in a saved function's recorded (flattened) result structure, where None
    marks an input of the op that gets no gradient."""
    leaves: list[bool] = []

    def walk(value) -> None:
        kind = value.WhichOneof("kind")
        if kind in ("list_value", "tuple_value"):
            for v in getattr(value, kind).values:
                walk(v)
        elif kind == "dict_value":
            for key in sorted(value.dict_value.fields):
                walk(value.dict_value.fields[key])
        elif kind == "named_tuple_value":
            for pair in value.named_tuple_value.values:
                walk(pair.value)
        else:
            leaves.append(kind != "none_value")

    walk(structure)
    return tuple(i for i, tensor in enumerate(leaves) if tensor)


def _result_names(structure) -> list[str] | None:
    """The names a saved function gives its results (the keys of a returned dict, flattened in TensorFlow's
    sorted order), or None when it returns something else."""
    if structure.WhichOneof("kind") != "dict_value":
        return None
    fields = structure.dict_value.fields
    if any(fields[k].WhichOneof("kind") != "tensor_spec_value" for k in fields):
        return None
    return sorted(fields)


KERAS_LAYER_TRACES = frozenset({"call_and_return_conditional_losses", "call_and_return_all_conditional_losses"})
# The root attributes under which an exporter saves a second copy of the weights (Keras 3's ExportArchive).
EXPORT_COPY_LISTS = frozenset({"_all_variables"})


class SavedModelFile:
    kind: TargetKind = "saved_model"

    def __init__(self, path: str, tags: tuple[str, ...] = ("serve",)):
        self.path = path  # as given: what messages and reports say
        self.location = os.path.abspath(path)  # where the runtime loads it from, in any working folder
        self.started = time.monotonic()  # the static pass's deadline counts from here: parsing is part of it
        self.proto = self.parse(path)  # read once: the runtime stages take it from here
        self.meta_graph = self.choose_meta_graph(self.proto, tags)
        self.graph_def = self.meta_graph.graph_def
        self.library = Library(self.graph_def)
        check_count_attrs(self.graph_def, self.library.op_def)
        try:
            check_graph(self.graph_def, self.library)
            check_object_graph(self.meta_graph.object_graph_def, self.library)
        except RejectedGraph as exc:
            raise GradauditError(f"{path}: TensorFlow would reject this graph: {exc}") from None
        self.object_graph = self.meta_graph.object_graph_def
        self._listed_trainable = self._root_trainable_list()  # Keras' export: its trainable variables
        self._nodes = {n.name: n for n in self.graph_def.node}
        for fn in self.library.registered_gradients.values():
            cf = self.object_graph.concrete_functions.get(fn)
            if cf is not None and cf.HasField("output_signature"):
                self.library.gradient_result_inputs[fn] = _given_positions(cf.output_signature)

    # -- loading ---------------------------------------------------------------------------
    @staticmethod
    def parse(path: str) -> saved_model_pb2.SavedModel:
        if not os.path.exists(path):
            raise GradauditError(f"{path}: no such file or directory")
        if not os.path.isdir(path):
            raise GradauditError(f"{path}: not a SavedModel folder (a SavedModel is a directory "
                                 "holding saved_model.pb)")
        pb, pbtxt = os.path.join(path, "saved_model.pb"), os.path.join(path, "saved_model.pbtxt")
        sm = saved_model_pb2.SavedModel()
        name = "saved_model.pb"
        for graph_file in (pb, pbtxt):
            _inside(graph_file, path)
        try:
            if os.path.exists(pb):
                data = read_capped(pb, name)
                if message_count_bound(data, saved_model_pb2.SavedModel.DESCRIPTOR,
                                       MAX_PARSED_MESSAGES) > MAX_PARSED_MESSAGES:
                    raise GradauditError(f"{path}: cannot load {name}: it holds more than {MAX_PARSED_MESSAGES:,} "
                                         "protobuf messages, more than the static pass analyses; not parsed")
                sm.ParseFromString(data)
            elif os.path.exists(pbtxt):
                # text parses some 300 times slower than binary (in Python): a much lower cap bounds its time
                name = "saved_model.pbtxt"
                text_format.Parse(read_capped(pbtxt, name, MAX_TEXT_GRAPH_BYTES).decode("utf-8"), sm)
            else:
                raise GradauditError(f"{path}: not a SavedModel (no saved_model.pb inside; --recursive "
                                     "searches a folder for SavedModels)")
        except (message.DecodeError, text_format.ParseError, UnicodeDecodeError, ValueError) as exc:
            raise GradauditError(f"{path}: {name} cannot be parsed ({_where(exc)})") from None
        except RecursionError:
            raise GradauditError(f"{path}: cannot load {name}: its messages are nested too deeply "
                                 "to be parsed") from None
        except MemoryError:
            raise GradauditError(f"{path}: cannot load {name}: parsing it ran out of memory") from None
        except OSError as exc:
            raise GradauditError(f"{path}: cannot load {name}: {exc.strerror or exc}") from None
        if not sm.meta_graphs:
            raise GradauditError(f"{path}: saved_model.pb holds no meta graph")
        return sm

    @staticmethod
    def choose_meta_graph(sm: saved_model_pb2.SavedModel, tags: tuple[str, ...]) -> meta_graph_pb2.MetaGraphDef:
        wanted = set(tags)
        for mg in sm.meta_graphs:
            if set(mg.meta_info_def.tags) == wanted:
                return mg
        have = "; ".join(",".join(mg.meta_info_def.tags) or "(none)" for mg in sm.meta_graphs)
        raise GradauditError(f"no meta graph with tags {','.join(tags)!r}; this model has: {have} (use --tag)")

    # -- what running a signature involves (the runtime reads it from this parse) ----------------
    def concrete_signature(self, key: str) -> tuple[str | None, list[int]]:
        """The concrete function behind signature `key` and the object-graph node ids of its bound (captured)
        inputs; (None, []) for a TF1 model, whose signatures are graph nodes."""
        og = self.object_graph
        if not og.nodes:
            return None, []
        signatures = [c.node_id for c in og.nodes[0].children if c.local_name == "signatures"]
        if not signatures:
            return None, []
        entry = [c.node_id for c in og.nodes[signatures[0]].children if c.local_name == key]
        if not entry:
            return None, []
        node = og.nodes[entry[0]]
        if node.WhichOneof("kind") != "bare_concrete_function":
            return None, []
        name = node.bare_concrete_function.concrete_function_name
        return name, list(og.concrete_functions[name].bound_inputs)

    def runnable_ops(self, root: str | None) -> tuple[frozenset[str], list[OpRef]]:
        """Op types function `root` can run (following calls, loop bodies, branches and saved custom-gradient
        functions; every function's and the graph's when `root` is None), and the ops whose gradient is a saved
        custom gradient."""
        library = self.graph_def.library
        functions = {f.signature.name: f for f in library.function}
        gradients = {g.registered_op_type: g.gradient_func for g in library.registered_gradients}
        todo = [root] if root is not None else list(functions)
        seen: set[str] = set()
        ops: set[str] = set() if root is not None else {n.op for n in self.graph_def.node}
        custom: list[OpRef] = []
        while todo:
            name = todo.pop()
            if name in seen or name not in functions:
                continue
            seen.add(name)
            for node in functions[name].node_def:
                ops.add(node.op)
                todo.append(node.op)
                for key, attr in node.attr.items():
                    if attr.HasField("func"):
                        todo.append(attr.func.name)
                    elif attr.list.func:
                        todo.extend(f.name for f in attr.list.func)
                    elif key == "_gradient_op_type" and node.op not in ("PartitionedCall", "StatefulPartitionedCall"):
                        custom.append(OpRef(node.op, node.name, name))
                        todo.append(gradients.get(attr.s.decode(), ""))
        return frozenset(op for op in ops if op not in functions), custom

    # -- signatures ------------------------------------------------------------------------
    def signature_keys(self) -> list[str]:
        return [k for k in self.meta_graph.signature_def if k != INIT_OP_KEY]

    def other_signatures(self, key: str) -> list[str]:
        """The signatures beside `key` that run another function: Keras' `serve` beside `serving_default`, two
        wrappers calling the same function, is not one."""
        mine = self._runs(key)
        return [k for k in self.signature_keys() if k != key and self._runs(k) != mine]

    def _runs(self, key: str) -> tuple[str, ...]:
        """What signature `key` runs: the functions its wrapper calls (or the wrapper, or the key itself)."""
        name = self.concrete_signature(key)[0] if key in self.meta_graph.signature_def else None
        fdef = self.library.functions.get(name) if name else None
        if name is None or fdef is None:
            return (key,)
        called = sorted(n.attr["f"].func.name for n in fdef.node_def if n.op in CALL_OPS)
        return tuple(called) or (name,)

    def saved_functions(self) -> dict[str, str]:
        """Concrete functions the object graph exposes (for models saved without signatures), by their
        stable name: the attribute path from the root object (`decode`, `encoder.decode`), which does not
        change between exports as the generated `__inference_decode_22` does. A tf.function traced more
        than once gives `decode#0`, `decode#1`, ... in the saved order."""
        nodes = self.object_graph.nodes
        if not nodes:
            return {}
        paths: dict[int, str] = {0: ""}
        queue = [0]
        while queue:  # breadth first: the shortest attribute path names a node reachable several ways
            i = queue.pop(0)
            for child in nodes[i].children:
                if child.node_id not in paths and child.node_id < len(nodes):
                    paths[child.node_id] = f"{paths[i]}.{child.local_name}" if paths[i] else child.local_name
                    queue.append(child.node_id)
        out: dict[str, str] = {}
        for i, path in sorted(paths.items(), key=lambda kv: kv[1]):
            node = nodes[i]
            kind = node.WhichOneof("kind")
            if kind == "function":
                names = [n for n in node.function.concrete_functions if n in self.library.functions]
            elif kind == "bare_concrete_function":
                names = [node.bare_concrete_function.concrete_function_name]
                names = [n for n in names if n in self.library.functions]
            else:
                continue
            if not path or path.startswith(("signatures.", "_")) or ".__" in path:
                continue  # signature wrappers and Keras/TF internals are not the model's entry points
            for k, name in enumerate(names):
                key = path if len(names) == 1 else f"{path}#{k}"
                if name not in out.values():
                    out[key] = name
        return out

    def entry_point_readers(self) -> dict[int | str, set[str]]:
        """Variable (its identity) -> the signatures and saved functions that capture it. Keras' own per-layer traces
        (`call_and_return_conditional_losses`, `call_and_return_all_conditional_losses`: tf-keras saves one per
        layer and per training mode) are the library's, not entry points a user serves or trains through."""
        readers: dict[int | str, set[str]] = {}
        for key in self.signature_keys():
            for v in self.signature(key).variables.values():
                readers.setdefault(v.identity, set()).add(key)
        for path, fn in self.saved_functions().items():
            if path.split("#")[0].rsplit(".", 1)[-1] in KERAS_LAYER_TRACES:
                continue
            for v in self._function_graph(fn).variables.values():
                readers.setdefault(v.identity, set()).add(path)
        return readers

    def all_variables(self) -> list[VariableInfo]:
        """Every variable of the saved object, named once over the whole object (variable_display_names)."""
        nodes = self.object_graph.nodes
        return [VariableInfo(name, self._trainable(i), nodes[i].variable.dtype,
                             _shape(nodes[i].variable.shape), i) for i, name in self.variable_names().items()]

    def _trainable(self, node_id: int) -> bool:
        """A variable's own `trainable` flag, unless the root object lists its trainable variables (Keras'
        `model.export` saves `trainable_variables`): a layer frozen with `trainable=False` keeps the flag True on
        its tf.Variables, and only that list leaves it out."""
        if not self.object_graph.nodes[node_id].variable.trainable:
            return False
        return self._listed_trainable is None or node_id in self._listed_trainable

    def _root_trainable_list(self) -> set[int] | None:
        """The variable node ids the root object lists as `trainable_variables`, None when it lists none."""
        nodes = self.object_graph.nodes
        listed = next((c.node_id for c in nodes[0].children if c.local_name == "trainable_variables"), None) \
            if nodes else None
        if listed is None or nodes[listed].WhichOneof("kind") != "user_object":
            return None
        return {c.node_id for c in nodes[listed].children}

    def variable_names(self) -> dict[int, str]:
        """Each variable node's one name over the whole saved object: an entry point's sources and the variables
        it leaves out are named alike, so 'Variable (w)' is the same variable in every row. An exporter's second
        copy of the weights (export_copies) is not one of the object's variables."""
        nodes = self.object_graph.nodes
        copies = self.export_copies()
        return variable_display_names(self.object_graph, [i for i, node in enumerate(nodes)
                                                          if node.WhichOneof("kind") == "variable" and i not in copies])

    def export_copies(self) -> frozenset[int]:
        """The variable nodes an exporter saves as a second copy of weights the object holds under the same name:
        Keras 3's ExportArchive tracks every weight in `variables` (which its signatures capture) and again, as
        separate variables, in `_all_variables`. A variable reached only through such an attribute and named like
        one reached otherwise is that weight's copy, not a variable the signatures leave untrained."""
        nodes = self.object_graph.nodes
        reached, queue = {0}, [0]
        while queue:  # every node reached from the root without passing through an exporter's copy list
            i = queue.pop()
            for child in nodes[i].children if i < len(nodes) else ():
                if child.node_id not in reached and not (i == 0 and child.local_name in EXPORT_COPY_LISTS):
                    reached.add(child.node_id)
                    queue.append(child.node_id)
        variables = [i for i, node in enumerate(nodes) if node.WhichOneof("kind") == "variable"]
        names = {nodes[i].variable.name for i in variables if i in reached}
        return frozenset(i for i in variables if i not in reached and nodes[i].variable.name in names)

    def signature(self, key: str) -> SignatureGraph:
        sigs = self.meta_graph.signature_def
        if key in sigs and key != INIT_OP_KEY:
            return self._signature_graph(key, sigs[key])
        funcs = self.saved_functions()
        if key in funcs:
            return replace(self._function_graph(funcs[key]), key=key)
        if key in self.library.functions:
            return self._function_graph(key)
        keys = self.signature_keys()
        if keys:
            raise GradauditError(f"no signature {key!r}; this model has: {', '.join(keys)} (use --signature)")
        hint = (f"pass --signature with one of its saved functions ({', '.join(funcs)}) or use --all-signatures"
                if funcs else "it has no saved functions either")
        raise GradauditError(f"{self.path}: this model has no signatures; {hint}")

    def _variables_of_objects(self, refs: list[tuple[str, int]]) -> dict[str, VariableInfo]:
        """(tensor, object node id) of an entry point's captured inputs -> the variables among them, each
        named once (variable_display_names)."""
        names = self.variable_names()
        out = {}
        for ref, obj_id in refs:
            if obj_id in names:
                v = self.object_graph.nodes[obj_id].variable
                out[ref] = VariableInfo(names[obj_id], self._trainable(obj_id), v.dtype, _shape(v.shape), obj_id)
        return out

    def _tf1_trainable(self) -> set[str]:
        """Trainable variable names from a TF1 meta graph's collection."""
        from tensorflow.core.framework import variable_pb2

        coll = self.meta_graph.collection_def.get("trainable_variables")
        names = set()
        if coll is not None:
            for raw in coll.bytes_list.value:
                vd = variable_pb2.VariableDef()
                vd.ParseFromString(raw)
                names.add(vd.variable_name.split(":")[0])
        return names

    def _signature_graph(self, key: str, sig) -> SignatureGraph:
        def specs(m) -> list[TensorSpec]:
            return [TensorSpec(k, v.name, v.dtype, _shape(v.tensor_shape)) for k, v in sorted(m.items())]

        inputs, outputs = specs(sig.inputs), specs(sig.outputs)
        for spec in inputs + outputs:
            if spec.tensor.split(":")[0] not in self._nodes:
                raise GradauditError(f"signature {key!r} names tensor {spec.tensor!r}, which is not in the graph")
        nodes = closure(self.graph_def, [o.tensor for o in outputs])
        return SignatureGraph(key, inputs, outputs, nodes, None, self._top_level_variables(nodes))

    def _top_level_variables(self, nodes) -> dict[str, VariableInfo]:
        variables: dict[str, VariableInfo] = {}
        cfs = self.object_graph.concrete_functions
        refs: list[tuple[str, int]] = []
        for node in nodes:  # captured variables of top-level calls, via the object graph
            fname = node.attr["f"].func.name if "f" in node.attr else node.op
            if fname in cfs and cfs[fname].bound_inputs:
                bound = list(cfs[fname].bound_inputs)
                data_inputs = [i for i in node.input if not i.startswith("^")]
                refs += [(ref.split(":")[0], obj_id)
                         for ref, obj_id in zip(data_inputs[len(data_inputs) - len(bound):], bound)]
        variables.update(self._variables_of_objects(refs))
        tf1_trainable = None
        nodes_graph = self.object_graph.nodes
        by_name = {nodes_graph[v.node_id].variable.name: v for v in self.all_variables() if v.node_id is not None}
        for node in nodes:  # variable nodes the object graph does not describe (TF1 models)
            if node.op in ("VarHandleOp", "VariableV2", "Variable") and node.name not in variables:
                shared = node.attr["shared_name"].s.decode() if "shared_name" in node.attr else ""
                if shared in by_name:
                    variables[node.name] = by_name[shared]
                    continue
                if tf1_trainable is None:
                    tf1_trainable = self._tf1_trainable()
                dtype = node.attr["dtype"].type if "dtype" in node.attr else 0
                shape = _shape(node.attr["shape"].shape) if "shape" in node.attr else None
                variables[node.name] = VariableInfo(node.name, node.name in tf1_trainable, dtype, shape)
        return variables

    def _function_graph(self, fname: str) -> SignatureGraph:
        fdef = self.library.functions[fname]
        args = list(fdef.signature.input_arg)
        cf = self.object_graph.concrete_functions.get(fname)
        bound = list(cf.bound_inputs) if cf is not None else []
        captured = args[len(args) - len(bound):] if bound else []
        variables = self._variables_of_objects([(arg.name, obj_id) for arg, obj_id in zip(captured, bound)])
        inputs = [TensorSpec(a.name, a.name, a.type, None) for a in args[:len(args) - len(bound)]]
        names = _result_names(cf.output_signature) if cf is not None and cf.HasField("output_signature") else None
        if names is None or len(names) != len(fdef.signature.output_arg):
            names = [a.name for a in fdef.signature.output_arg]
        outputs = [TensorSpec(n, a.name, a.type, None) for n, a in zip(names, fdef.signature.output_arg)]
        return SignatureGraph(fname, inputs, outputs, None, fname, variables)


def _inside(graph_file: str, folder: str) -> None:
    """A graph file that is a link must stay inside the model folder, as assets must (GA403): a link to a file
    elsewhere (a token, a key) would be read, and its first words shown in the parse error."""
    if os.path.islink(graph_file):  # a link to a device or FIFO is refused as such when it is read
        target, root = os.path.realpath(graph_file), os.path.realpath(folder)
        if os.path.isfile(target) and os.path.commonpath([target, root]) != root:
            raise GradauditError(f"{folder}: cannot load {os.path.basename(graph_file)}: it is a link to a file "
                                 "outside the model folder; not read")


def _where(exc: BaseException) -> str:
    """Why a graph file does not parse, without the text it holds (a parse error quotes the offending token)."""
    if isinstance(exc, text_format.ParseError):
        line, column = exc.GetLine(), exc.GetColumn()
        return f"ParseError at line {line}, column {column}" if line is not None else "ParseError"
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text at byte {exc.start}"
    return f"{exc.__class__.__name__}: corrupt protobuf"

