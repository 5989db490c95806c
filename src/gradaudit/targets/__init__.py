"""Targets: what gradaudit can audit, each read into the same graph description.

`AuditTarget` is what the static pass, the safety gate and the rules read from a model, whatever its kind:
a SavedModel folder (`saved_model.SavedModelFile`) or a traced Python function or Keras model
(`python.TracedModel`). A new kind of target implements it and registers itself (kinds.register: how its
name is told, how it is audited, what the cache hashes, what reports point at); nothing else changes. The runtime
stages then run the model through a SavedModel (a traced target is saved to a temporary folder for the probes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from ..model import TargetKind

if TYPE_CHECKING:
    from ..graph.library import Library
    from .saved_model import SignatureGraph, VariableInfo

# What tells a target's kind from the string that names it, without TensorFlow (the cache tells it before any
# import); api.py registers each kind with these (kinds.py)
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")
GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")
MAX_FILES = 100_000  # a model folder with more files than this is not cached (as the safety gate walks no further)


def is_keras_file(target: str) -> bool:
    return target.endswith(KERAS_SUFFIXES)


def is_python_target(target: str) -> bool:
    return ":" in target and not os.path.isdir(target) and not is_keras_file(target)


def is_saved_model(path: str) -> bool:
    """A folder holding a SavedModel's graph file."""
    return any(os.path.isfile(os.path.join(path, name)) for name in GRAPH_FILES)


def saved_model_graph_file(folder: str) -> str:
    """What reports point at for a SavedModel: its saved_model.pb (or .pbtxt)."""
    for name in GRAPH_FILES:
        candidate = os.path.join(folder, name)
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(folder, GRAPH_FILES[0])


def python_graph_file(target: str) -> str:
    """What reports point at for `file.py:attr` or `module:attr`: the file or module."""
    return target.rpartition(":")[0] or target


def _tree_files(root: str) -> list[str] | None:
    """The files under `root`, relative and sorted; None when a folder in it is a symlink (it could loop) or it
    holds more than MAX_FILES."""
    found: list[str] = []
    for folder, dirs, files in os.walk(root):
        if any(os.path.islink(os.path.join(folder, d)) for d in dirs):
            return None
        dirs.sort()
        found.extend(os.path.relpath(os.path.join(folder, f), root) for f in sorted(files))
        if len(found) > MAX_FILES:
            return None
    return found


def saved_model_files(folder: str) -> dict[str, str] | None:
    """The files of a SavedModel that TensorFlow's loader and gradaudit read (safety.assets: the graph, the
    fingerprint, variables/, assets/, assets.extra/), by their paths relative to the folder; None when it is no
    SavedModel or a folder in it cannot be walked safely. A file or a symlink where a folder belongs is listed
    (the cache then hashes it as a file, or caches nothing)."""
    from ..safety.assets import READ_FILES, READ_FOLDERS

    if not is_saved_model(folder):
        return None
    names = [n for n in READ_FILES if os.path.lexists(os.path.join(folder, n))]
    for sub in READ_FOLDERS:
        top = os.path.join(folder, sub)
        if os.path.islink(top) or not os.path.isdir(top):
            if os.path.lexists(top):
                names.append(sub)
            continue
        inside = _tree_files(top)
        if inside is None:
            return None
        names.extend(os.path.join(sub, f) for f in inside)
    return {name: os.path.join(folder, name) for name in names}


def keras_file_files(path: str) -> dict[str, str]:
    """A Keras file is its own bytes."""
    return {os.path.basename(path): path}


class AuditTarget(Protocol):
    """What the static pass, the safety gate and the runtime read from a model, whatever its kind."""

    kind: TargetKind
    path: str  # what the report names: the folder, or the Python object's label
    graph_def: Any  # the GraphDef holding the functions (tensorflow.core.framework.graph_pb2.GraphDef)
    library: Library  # its function library, saved gradient functions included
    # what TensorFlow's SavedModel loader reads besides the graph (its signatures, assets, saver and init op; the
    # object graph of functions, variables and resources); None for a traced function, which nothing loads
    meta_graph: Any | None
    object_graph: Any | None

    def signature(self, key: str) -> SignatureGraph:
        """The graph behind one entry point (a signature key or a saved function's name)."""
        ...

    def all_variables(self) -> list[VariableInfo]:
        """Every variable the model holds, trainable or not, captured by the entry point or not."""
        ...

    def other_signatures(self, key: str) -> list[str]:
        """The model's signatures beside `key` that run another function (what an audit of `key` leaves out)."""
        ...
