"""The registry of target kinds: how a target named by a string is told (without TensorFlow: the cache decides
before any import), how it is audited, what --cache hashes of it and which file reports point at. A new kind
registers one `Kind` from its own module; nothing else dispatches on a kind's name or a target's suffix.

The built-in kinds (SavedModel, Python object, Keras file) register themselves in api.py, beside the pipelines
that audit them; importing `gradaudit` imports it, so every reporter finds them here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Report
    from .results import AuditOptions


def _same(path: str) -> str:
    return path


@dataclass(frozen=True)
class Kind:
    """One kind of target. `name` is the `Target.kind` its reports carry (a kind that wraps another may leave
    its reports the other's kind)."""

    name: str
    recognises: Callable[[str], bool]  # a target string is of this kind: os.path only, never TensorFlow
    audit: Callable[[str, AuditOptions], Report]  # the audit of the target's default entry point
    # the audits of a run of many models (batch): every entry point with `all_signatures`; None: the one audit
    audit_each: Callable[[str, AuditOptions, bool], tuple[Report, ...]] | None = None
    # what --cache hashes: each file that decides the report, by the name its entry records, to its path (None:
    # this target cannot be cached, and its audit says why); `files` None: the kind is never cached, `uncached`
    # says why (once a run)
    files: Callable[[str], dict[str, str] | None] | None = None
    uncached: str = ""
    graph_file: Callable[[str], str] = _same  # from a report's Target.path: the file a code host points at
    # loading it runs code it holds: with --allow-unsafe-ops its reports are not cached (the key cannot hash it)
    runs_code: bool = False


_KINDS: list[Kind] = []


def register(kind: Kind) -> Kind:
    """Add `kind`; a kind registered later is asked first whether a target is its own."""
    if any(k.name == kind.name for k in _KINDS):
        raise ValueError(f"a target kind {kind.name!r} is registered already")
    _KINDS.append(kind)
    return kind


def kind_of(target: str) -> Kind:
    """The kind of a target named by a string: the last registered that recognises it."""
    for kind in reversed(_KINDS):
        if kind.recognises(target):
            return kind
    raise LookupError(f"no target kind recognises {target!r}")


def named(name: str) -> Kind | None:
    """The kind registered as `name` (a report's Target.kind); None for one this process does not know."""
    return next((k for k in _KINDS if k.name == name), None)
