"""The changes between two audits (diff.py) as text, Markdown (a pull-request comment), JSON and HTML."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..model import Report
from .common import md_code, md_text, visible
from .diff import Diff, ModelChanges, PairChange
from .json_report import SCHEMA_VERSION, tool_info

if TYPE_CHECKING:
    from ..model import AuditFailure


def _cuts(p: PairChange) -> str:
    return ", ".join(f"{c.op.short} ({c.rule})" for c in p.cuts)


def _pair(p: PairChange) -> str:
    text = f"{p.source} → {p.output}: {p.old} → {p.new}"
    if p.cuts:
        text += f", cut by {_cuts(p)}"
    return text


def _other_lines(m: ModelChanges, bullet: str, code: Callable[[str], str],
                 text: Callable[[str], str] = str) -> list[str]:
    """Everything but the pairs: sources, outputs and findings that came or went."""
    out = []
    for what, names in (("source appeared", m.sources_added), ("source disappeared", m.sources_removed),
                        ("output appeared", m.outputs_added), ("output disappeared", m.outputs_removed)):
        out += [f"{bullet}{what}: {code(n)}" for n in names]
    out += [f"{bullet}new finding {f.code} {f.rule}: {text(f.message)}" for f in m.findings_new]
    out += [f"{bullet}gone finding {f.code} {f.rule}: {text(f.message)}" for f in m.findings_gone]
    return out


def _headline(d: Diff) -> str:
    lost = len(d.lost())
    changed = sum(m.state != "unchanged" for m in d.models)
    return (f"{'FAIL' if d.fails() else 'PASS'}: {lost} pair(s) lost their gradient; "
            f"{changed} of {len(d.models)} model(s) changed ({d.old} → {d.new})")


def render_text(d: Diff) -> str:
    d = visible(d)  # the reports compared name the models' ops: no control character reaches the terminal
    out = [f"Changes {d.old} → {d.new}"]
    for m in d.models:
        out.append(f"{m.label}: {m.state}")
        out += [f"  {'LOST ' if p.lost else ''}{_pair(p)}" for p in m.pairs] + _other_lines(m, "  ", str)
    out.append(_headline(d))
    return "\n".join(out) + "\n"


def render_markdown(d: Diff) -> str:
    d = visible(d)
    out = [f"## {'❌' if d.fails() else '✅'} gradaudit: changes {md_code(d.old)} → {md_code(d.new)}", "",
           md_text(_headline(d)), ""]
    for m in d.models:
        out.append(f"### {md_code(m.label)}: {md_text(m.state)}")
        if m.pairs:
            out += ["", "| source | output | before | now | cut by |", "| --- | --- | --- | --- | --- |"]
            out += [f"| {md_code(p.source, cell=True)} | {md_code(p.output, cell=True)} | {md_text(p.old)} "
                    f"| {'❌ ' if p.lost else ''}{md_text(p.new)} | {md_text(_cuts(p))} |" for p in m.pairs]
        rest = _other_lines(m, "- ", md_code, md_text)
        if rest:
            out += [""] + rest
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def render_json(d: Diff) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, "tool": tool_info(), **d.to_dict()}, indent=2) + "\n"


def render_html(d: Diff) -> str:
    from .html import render_diff

    return render_diff(d)


DIFF_REPORTERS: dict[str, Callable[[Diff], str]] = {
    "text": render_text,
    "markdown": render_markdown,
    "json": render_json,
    "html": render_html,
}


def render_run(fmt: str, reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = (),
               changes: Diff | None = None) -> str:
    """A run's report in `fmt`. With --baseline, what changed since it follows the text and Markdown reports
    and is a section of the HTML one; the JSON, SARIF, JUnit and GitHub documents keep their contracts
    (`gradaudit diff` writes the changes as JSON)."""
    from . import html, render

    if changes is None or not changes.changed():
        return render(fmt, reports, fail_on, failures)
    if fmt == "html":
        return html.page(reports, fail_on, failures, changes)
    text = render(fmt, reports, fail_on, failures)
    if fmt == "text":
        return text + "\n" + render_text(changes)
    if fmt == "markdown":
        return text + "\n" + render_markdown(changes)
    if not changes.fails():
        return text
    # A pair lost its gradient since the baseline: the run fails, and the machine-read reports say so (a
    # dashboard must not show green beside a red job): JSON under an added key, JUnit as failing cases,
    # GitHub as an error annotation.
    if fmt == "json":
        doc = json.loads(text)
        doc["since_baseline"] = changes.to_dict()
        return json.dumps(doc, indent=2) + "\n"
    if fmt == "junit":
        from .junit import with_lost_pairs

        return with_lost_pairs(text, changes)
    if fmt == "github":
        from .github import annotation

        return text + "".join(annotation("error", f"{m.label}: {p.source} -> {p.output} was connected in the "
                                         f"baseline and is now {p.new}", title="gradaudit: gradient lost since "
                                         "the baseline") + "\n" for m, p in changes.lost())
    return text
