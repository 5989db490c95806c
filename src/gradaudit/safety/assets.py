"""The files TensorFlow's loader would open, checked before anything is opened: asset names that leave the
model folder, symlinks that resolve outside it, and special files (FIFOs, devices)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

# The parts of a SavedModel folder the loader (and gradaudit's float64 copy) reads.
READ_FOLDERS = ("assets", "assets.extra", "variables")
READ_FILES = ("saved_model.pb", "saved_model.pbtxt", "fingerprint.pb", "keras_metadata.pb")
MAX_ENTRIES = 100_000  # a folder holding more is not walked further; the entries seen so far are checked


@dataclass(frozen=True)
class Problem:
    name: str  # the asset name or the path relative to the model folder
    message: str


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def _special(path: str) -> bool:
    """A path that exists and is neither a folder nor a regular file (FIFO, device, socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _entry(root: str, rel: str) -> Problem | None:
    full = os.path.join(root, rel)
    if os.path.islink(full):
        target = os.path.realpath(full)
        if not _inside(target, root):
            return Problem(rel, f"'{rel}' is a symlink to {target}, outside the model folder")
    if _special(full):
        return Problem(rel, f"'{rel}' is not a regular file (a FIFO, device or socket); it is never opened")
    return None


def asset_defs(meta) -> list:
    """The AssetFileDefs the loader feeds: the meta graph's, and those of the TF1 builder's
    `saved_model_assets` collection."""
    from tensorflow.core.protobuf import meta_graph_pb2

    defs = list(meta.asset_file_def)
    coll = meta.collection_def.get("saved_model_assets")
    if coll is not None and coll.HasField("any_list"):
        for packed in coll.any_list.value:
            asset = meta_graph_pb2.AssetFileDef()
            if packed.Unpack(asset):
                defs.append(asset)
    return defs


def check(model) -> list[Problem]:
    """Problems of the model folder of a SavedModel; nothing for a traced Python target."""
    meta = getattr(model, "meta_graph", None)
    if meta is None or not os.path.isdir(getattr(model, "path", "")):
        return []
    root = os.path.realpath(model.path)
    problems: dict[str, Problem] = {}
    for asset in asset_defs(meta):
        name = asset.filename
        parts = name.replace("\\", "/").split("/")
        if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts:
            problems[name] = Problem(name, f"asset '{name}' names a path outside the model's assets/ folder "
                                           "(absolute or '..'); it is never opened")
            continue
        found = _entry(root, os.path.join("assets", name))
        if found is None and not _inside(os.path.realpath(os.path.join(root, "assets", name)), root):
            found = Problem(name, f"asset '{name}' resolves outside the model folder")
        if found is not None:
            problems[found.name] = found
    seen = 0
    for name in READ_FILES + READ_FOLDERS:  # what the loader opens at the top level, links included
        found = _entry(root, name) if os.path.lexists(os.path.join(root, name)) else None
        if found is not None:
            problems.setdefault(found.name, found)
    for top in READ_FOLDERS:  # a symlinked folder is reported above, not walked
        if not os.path.isdir(os.path.join(root, top)) or os.path.islink(os.path.join(root, top)):
            continue
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            for name in dirs + files:
                seen += 1
                if seen > MAX_ENTRIES:
                    return list(problems.values())
                found = _entry(root, os.path.relpath(os.path.join(folder, name), root))
                if found is not None:
                    problems.setdefault(found.name, found)
    return list(problems.values())
