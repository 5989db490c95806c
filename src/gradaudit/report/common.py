"""What several reporters need: paths as a reader of the repository sees them, the model's graph file,
labels, and which findings concern a (source, output) pair or fail the run."""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from typing import Any, TypeVar

from ..model import Finding, Report, Severity

T = TypeVar("T")
# C0 and C1 control characters and the Unicode line separators: a name from the model (op, function,
# folder) holding them could move the cursor, recolour a terminal, or start a new workflow-command line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")

GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it (POSIX separators), else absolute."""
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute)
    except ValueError:  # another drive (Windows)
        return absolute.replace(os.sep, "/")
    return (absolute if rel == ".." or rel.startswith(".." + os.sep) else rel).replace(os.sep, "/")


def graph_file(report: Report) -> str:
    """The file a code host can point at for the model: a SavedModel's saved_model.pb (or .pbtxt), a Keras
    file, or the module of a `file.py:attr` / `module:attr` target."""
    t = report.target
    if t.kind == "keras":
        return t.path
    if t.kind != "saved_model":
        return t.path.rpartition(":")[0] or t.path
    for name in GRAPH_FILES:
        candidate = os.path.join(t.path, name)
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(t.path, GRAPH_FILES[0])


def model_label(report: Report) -> str:
    t = report.target
    return f"{display_path(t.path)} [{t.signature}]" if t.signature else display_path(t.path)


def where(finding: Finding) -> str:
    op = finding.op
    return op.label if op else ""


def with_fix(finding: Finding) -> str:
    """One line for places that have no room for a separate fix: the message, then the fix."""
    return f"{finding.message.rstrip('.')}. Fix: {finding.fix}"


def fails(finding: Finding, fail_on: str) -> bool:
    """The per-finding form of Report.fails: active and at or above the threshold."""
    return (not finding.suppressed and fail_on != "never"
            and finding.severity.rank >= Severity(fail_on).rank)


def concerns(finding: Finding, source: str, output: str) -> bool:
    return source in finding.sources and output in finding.outputs


def printable(text: str) -> str:
    """`text` with every control character written as a visible escape (`\\x1b`, `\\n`)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def visible(value: T) -> T:
    """A copy of a Report, a failure or any value built of dataclasses, tuples, lists and dicts, with every
    string made printable: what the text reporters render, so that no name from the model reaches a
    terminal, an XML file or a CI log raw."""
    if isinstance(value, enum.Enum):
        return value
    if isinstance(value, str):
        return printable(value)  # type: ignore[return-value]
    if isinstance(value, (list, tuple)):
        return type(value)(visible(v) for v in value)
    if isinstance(value, dict):
        return {visible(k): visible(v) for k, v in value.items()}  # type: ignore[return-value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes: dict[str, Any] = {f.name: visible(getattr(value, f.name)) for f in dataclasses.fields(value)
                                   if f.init}
        return dataclasses.replace(value, **changes)
    return value
