"""What several reporters need: paths as a reader of the repository sees them, the model's graph file,
labels, and which findings concern a (source, output) pair or fail the run."""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from typing import Any, TypeVar

from ..kinds import named
from ..model import Finding, Report, Severity

T = TypeVar("T")
# What no report may carry raw from a name of the model (op, function, signature, output, folder):
# - C0 and C1 control characters and the Unicode line separators, which move the cursor, recolour a
#   terminal or start a new workflow-command line;
# - the bidirectional controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069), which make a name read
#   differently from what it is ("Trojan Source");
# - lone surrogates and the noncharacters (U+FDD0-U+FDEF, U+xFFFE/U+xFFFF of every plane): XML 1.0 cannot
#   hold surrogates, U+FFFE or U+FFFF, and a UTF-8 writer cannot encode a lone surrogate.
_NONCHARACTERS = "".join(f"{chr(plane + 0xFFFE)}{chr(plane + 0xFFFF)}" for plane in range(0, 0x110000, 0x10000))
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff"
                      "\ufdd0-\ufdef" + _NONCHARACTERS + "]")
# Markdown: the characters that start emphasis, code, links and images, HTML, headings, strikethrough,
# entities and math, and (in a table) a new cell; each is written with a backslash.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|#~!&$])")
# What GitHub links or notifies even when escaped: @mentions, issue references and bare URLs. In a code span
# they are shown, not acted on (a pull-request comment must not ping a user a model's op name names).
_MD_LINKISH = re.compile(r"@[A-Za-z0-9][\w-]*(?:/[\w.-]+)?|(?<![\w&])#\d+|(?:https?://|ftp://|mailto:|www\.)[^\s|\\`]*",
                         re.IGNORECASE)

MAX_ROWS = 24  # above this many variables (or precision rows), the rows with nothing to say are summarised


def display_path(path: str) -> str:
    """`path` relative to the working directory when it lies under it (POSIX separators), else absolute."""
    absolute = os.path.abspath(path)
    try:
        rel = os.path.relpath(absolute)
    except ValueError:  # another drive (Windows)
        return absolute.replace(os.sep, "/")
    return (absolute if rel == ".." or rel.startswith(".." + os.sep) else rel).replace(os.sep, "/")


def graph_file(report: Report) -> str:
    """The file a code host can point at for the model, as its kind names it (kinds.Kind.graph_file): a
    SavedModel's saved_model.pb (or .pbtxt), a Keras file, or the module of a `file.py:attr` / `module:attr`
    target; the target's path for a kind this process does not know."""
    kind = named(report.target.kind)
    return kind.graph_file(report.target.path) if kind is not None else report.target.path


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
    """`text` with every control character, bidirectional control, lone surrogate and noncharacter written
    as a visible escape (`\\x1b`, `\\n`, `\\u202e`, `\\ufffe`): the escaping of every text format (terminal,
    GitHub, JUnit XML, HTML, Markdown, error lines), which `visible` applies to a whole Report."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def md_code(text: str, cell: bool = False) -> str:
    """`text` (made printable) as a Markdown code span, which GitHub shows literally: no emphasis, HTML,
    link, image or mention. The fence is longer than any run of backticks in `text`. In a table `cell` a
    `|` is written `\\|`; a name holding a backslash and a `|` is written as escaped text instead (GFM
    splits a cell at the `|` of `\\\\|` even in a code span)."""
    text = printable(text)
    if cell and "|" in text:
        if "\\" in text:
            return md_text(text)
        text = text.replace("|", "\\|")
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if not text or text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_text(text: str) -> str:
    """`text` (made printable) as plain Markdown text, also inside a table cell: every character Markdown
    or a GFM table reads is backslash-escaped, so an `<img>`, a `[link](...)`, `**` or a `|` stay text, and
    @mentions, #123 references and bare URLs are shown in code spans, so they neither notify nor link."""
    text = printable(text)
    out, last = [], 0
    for m in _MD_LINKISH.finditer(text):
        out += [_MD_SPECIAL.sub(r"\\\1", text[last:m.start()]), md_code(m.group(), cell=True)]
        last = m.end()
    out.append(_MD_SPECIAL.sub(r"\\\1", text[last:]))
    return "".join(out)


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
