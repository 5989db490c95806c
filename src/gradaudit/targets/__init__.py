"""Targets: what gradaudit can audit, each read into the same graph description.

`AuditTarget` is what the static pass, the safety gate and the rules read from a model, whatever its kind:
a SavedModel folder (`saved_model.SavedModelFile`) or a traced Python function or Keras model
(`python.TracedModel`). A new kind of target implements it and nothing else changes; the runtime stages
then run the model through a SavedModel (a traced target is saved to a temporary folder for the probes).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Protocol

from ..model import TargetKind

if TYPE_CHECKING:
    from ..graph.library import Library
    from .saved_model import SignatureGraph, VariableInfo

# Which kind a target named by a string is, told without TensorFlow (the cache tells it before any import)
KERAS_SUFFIXES = (".keras", ".h5", ".hdf5")


def is_python_target(target: str) -> bool:
    return ":" in target and not os.path.isdir(target) and not target.endswith(KERAS_SUFFIXES)


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
