"""Names from the model cannot inject into what gradaudit writes: an op name holding ESC and a newline and a
folder name holding '\\n::error::' stay inert in every format (no raw control character in text formats,
well-formed XML, JSON that parses, no workflow-command line that gradaudit did not write)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
import tensorflow as tf
from click.testing import CliRunner

from gradaudit.batch import AuditFailure
from gradaudit.cli import main
from gradaudit.model import CheckedOutputs, NumericResult, Report
from gradaudit.report import FORMATS, render
from gradaudit.report.common import md_code, md_text, printable
from gradaudit.report.terminal import print_report

EVIL_OP = "evil\x1b[2J\x1b]0;owned\x07\n::error::op-injected"
EVIL_FOLDER = "model\n::error::folder-injected"


def _rename(fdef, old: str, new: str) -> None:
    for node in fdef.node_def:
        if node.name == old:
            node.name = new
        node.input[:] = [("^" + new if i == "^" + old else new + i[len(old):] if i.split(":")[0] == old else i)
                         for i in node.input]
    for key, value in list(fdef.control_ret.items()):
        if value == old:
            fdef.control_ret[key] = new


@pytest.fixture(scope="module")
def evil(tmp_path_factory) -> str:
    """A SavedModel in a folder named EVIL_FOLDER whose WriteFile op (GA401) is named EVIL_OP."""
    from tensorflow.core.protobuf import saved_model_pb2

    class Writer(tf.Module):
        def __init__(self):
            self.w = tf.Variable(1.0, name="w")

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
        def __call__(self, x):
            tf.io.write_file("/nonexistent/never", tf.strings.as_string(tf.reduce_sum(x)))
            return {"y": x * self.w}

    module = Writer()
    path = str(tmp_path_factory.mktemp("inject") / EVIL_FOLDER)
    tf.saved_model.save(module, path, signatures={"serving_default": module.__call__})
    pb = os.path.join(path, "saved_model.pb")
    sm = saved_model_pb2.SavedModel()
    with open(pb, "rb") as f:
        sm.ParseFromString(f.read())
    for fdef in sm.meta_graphs[0].graph_def.library.function:
        if any(n.op == "WriteFile" for n in fdef.node_def):
            _rename(fdef, next(n.name for n in fdef.node_def if n.op == "WriteFile"), EVIL_OP)
    with open(pb, "wb") as f:
        f.write(sm.SerializeToString())
    return path


def _strings(doc) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, dict):
        doc = list(doc.values())
    return [s for item in doc for s in _strings(item)] if isinstance(doc, list) else []


def _injected(text: str) -> list[str]:
    """Lines a CI runner or terminal would act on that gradaudit did not mean to write."""
    # gradaudit's own commands always carry properties (`::error file=...,title=...::`); an injected one
    # starts a line with a bare command
    bad = [line for line in text.splitlines()
           if line.startswith("::") and not line.startswith(("::error ", "::warning ", "::notice "))]
    return bad + (["raw ESC"] if "\x1b" in text else []) + (["raw BEL"] if "\x07" in text else [])


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_format_lets_a_name_inject(evil, fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, [evil, "--static-only", "--format", fmt], catch_exceptions=False)
    assert result.exit_code == 1, result.output  # the GA401 finding
    out = result.stdout
    assert "op-injected" in out and not _injected(out), _injected(out)
    if fmt in ("json", "sarif"):
        assert any(EVIL_OP in text for text in _strings(json.loads(out)))  # the exact name, escaped by JSON
    if fmt == "junit":
        root = ET.fromstring(out)  # well-formed
        assert any("op-injected" in (el.text or "") + (el.get("message") or "") for el in root.iter())


def test_error_lines_and_failures_cannot_inject(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    broken = tmp_path / EVIL_FOLDER
    broken.mkdir()
    (broken / "saved_model.pb").write_bytes(b"\x0a\xff\xff")
    for fmt in ("github", "text", "junit", "markdown"):
        result = CliRunner().invoke(main, [str(broken), "--static-only", "--format", fmt])
        assert result.exit_code == 2
        assert not _injected(result.stderr) and not _injected(result.stdout), (fmt, result.stderr, result.stdout)


# Names carrying what each format reads: a table cell separator, HTML, a link, XML-invalid noncharacters, a
# bidi override, a workflow command, an escape sequence, a backtick, a mention, rich markup, and a lone
# surrogate (what a folder name that is not UTF-8 decodes to).
HOSTILE = ("|<img src=x>[a](http://x)\ufffe\uffff\u202e::error::pwned\x1b[31m`@octocat[link=http://x]click[/link]"
           "\u2066\u200f\x00\udcff")
_RAW = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
                  "\ufffe\uffff]")
_NAMED = {"name", "source", "output", "op_name", "function", "signature", "path", "message", "fix", "error",
          "sources", "outputs", "reason", "names"}  # names: a numeric check's outputs (CheckedOutputs)


def _hostile(value, named: bool = False):
    """A copy of a Report with HOSTILE appended to every name (the same way everywhere, so that the flow still
    matches its sources and outputs) and to every message."""
    if isinstance(value, str):
        return value + HOSTILE if named else value
    if isinstance(value, (list, tuple)):
        return type(value)(_hostile(v, named) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: _hostile(getattr(value, f.name), f.name in _NAMED)
                                             for f in dataclasses.fields(value) if f.init})
    return value


@pytest.fixture(scope="module")
def hostile_report(argmax_report) -> Report:
    numeric = NumericResult("x", CheckedOutputs(("cls",)), "fail", 0.5, 1e-3, "float32", 4, reason="differs")
    return _hostile(dataclasses.replace(argmax_report, numeric=[numeric]))


def _outside_code(markdown_text: str) -> str:
    """The Markdown text GitHub renders as Markdown: without the Mermaid blocks and the code spans."""
    text = re.sub(r"^```mermaid\n.*?^```$", "", markdown_text, flags=re.S | re.M)
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":  # an escaped character, a backtick too, is text
            out.append(text[i:i + 2])
            i += 2
            continue
        if text[i] == "`":
            run = re.match("`+", text[i:]).group()
            close = re.compile(f"(?<!`){run}(?!`)").search(text, i + len(run))
            if close:  # a code span, shown literally
                i = close.end()
                continue
            out.append(run)
            i += len(run)
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _cell_count(row: str) -> int:
    """Cells of a GFM table row: pipes not escaped by a backslash (which escapes any character after it)."""
    pipes, i = 0, 0
    while i < len(row):
        if row[i] == "\\":
            i += 2
            continue
        pipes += row[i] == "|"
        i += 1
    return pipes - 1


def _tables(text: str) -> list[list[str]]:
    tables: list[list[str]] = []
    previous = False
    for line in text.splitlines():
        row = line.startswith("|")
        if row and not previous:
            tables.append([])
        if row:
            tables[-1].append(line)
        previous = row
    return tables


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("many", [False, True])
def test_hostile_names_stay_inert_in_every_format(hostile_report, fmt, many):
    failures = [AuditFailure("models/bad" + HOSTILE, "models/bad: malformed " + HOSTILE)] if many else []
    out = render(fmt, [hostile_report, hostile_report] if many else [hostile_report], "error", failures)
    out.encode("utf-8")  # strict: no lone surrogate
    assert not _RAW.findall(out), sorted(set(_RAW.findall(out)))
    assert not _injected(out), _injected(out)
    if fmt in ("json", "sarif"):  # JSON escapes them itself, and keeps the exact names
        assert any(HOSTILE in text for text in _strings(json.loads(out)))
        return
    assert "\\u202e" in out and "\\ufffe" in out and "\\uffff" in out  # shown, as escapes
    if fmt == "junit":
        root = ET.fromstring(out.encode("utf-8"))
        assert any("\\u202e" in (el.text or "") + (el.get("message") or "") + (el.get("name") or "")
                   for el in root.iter())
    if fmt == "markdown":
        tables = _tables(out)
        assert len(tables) >= 2 + many
        for table in tables:
            assert len({_cell_count(row) for row in table}) == 1, table
        rendered = _outside_code(out)
        assert not re.search(r"(?<!\\)<img", rendered) and not re.search(r"(?<!\\)\[a", rendered)
        assert "@octocat" not in rendered and "http://x" not in rendered  # in code spans only
    if fmt == "html":
        assert "<img src=x>" not in out and "&lt;img src=x&gt;" in out


def test_rich_markup_in_a_name_is_shown_not_applied(argmax_report):
    report = _hostile(argmax_report)
    from rich.console import Console

    buf = io.StringIO()
    print_report(report, Console(file=buf, width=1000, color_system=None), "error")
    sources = [s.name for s in report.sources]
    assert all(s in buf.getvalue() or printable(s) in buf.getvalue() for s in sources)
    assert buf.getvalue().count("[link=http://x]click[/link]") >= len(report.sources) + len(report.outputs)


def test_markdown_code_spans_and_text():
    assert md_code("a|b", cell=True) == "`a\\|b`" and md_code("a|b") == "`a|b`"
    assert _cell_count("| " + md_code("a\\|b", cell=True) + " |") == 1
    assert md_code("x`y") == "``x`y``" and md_code("`x") == "`` `x ``"
    assert md_text("<img src=x> [a](y) **b**") == "\\<img src=x\\> \\[a\\](y) \\*\\*b\\*\\*"
    assert md_text("ping @octocat about #12") == "ping `@octocat` about `#12`"
    assert md_text("\u202e") == "\\\\u202e"  # the escape, its backslash escaped: GitHub shows \u202e


def test_diff_reports_escape_names(hostile_report, argmax_report):
    from gradaudit.report.changes import DIFF_REPORTERS
    from gradaudit.report.diff import compare

    gone = dataclasses.replace(hostile_report, flow=[dataclasses.replace(e, status="blocked")
                                                     for e in hostile_report.flow])
    changes = compare([hostile_report], [gone], "old" + HOSTILE, "new")
    for fmt, reporter in DIFF_REPORTERS.items():
        out = reporter(changes)
        out.encode("utf-8")
        assert not _RAW.findall(out), (fmt, sorted(set(_RAW.findall(out))))
        if fmt == "markdown":
            for table in _tables(out):
                assert len({_cell_count(row) for row in table}) == 1, table
