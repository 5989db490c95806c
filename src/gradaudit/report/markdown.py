"""Markdown for a pull-request comment: verdict, counts, the flow matrix, findings with their fixes, and a
Mermaid flowchart of each broken path (sources -> ... -> cutting op -> outputs), which code hosts draw."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model import Finding, FlowEntry, OpRef, Report, Severity, combined_verdict
from .common import MAX_ROWS, display_path, md_code, md_text, model_label, visible
from .numeric_rows import numeric_rows
from .precision_rows import PrecisionTable, cell_text, point_label, power_of_two, precision_tables

if TYPE_CHECKING:
    from ..model import AuditFailure

_MARK = {Severity.ERROR: "❌", Severity.WARNING: "⚠️", Severity.INFO: "ℹ️"}
MAX_NODES = 12  # sources or outputs drawn in one chart; the rest are counted in one node


# Names and messages from the model, as text and as code (common.md_text, common.md_code): op and function
# names are full of underscores, and a name may hold `|`, HTML, a link or a mention.
_esc = md_text


def _cell_code(text: str) -> str:
    """A name in a table cell: a `|` in it must not start a new cell."""
    return md_code(text, cell=True)


_code = md_code


def _counts(report: Report) -> str:
    c = report.summary()
    parts = [f"{c['error']} error(s)", f"{c['warning']} warning(s)", f"{c['info']} info"]
    return ", ".join(f"**{p}**" if not p.startswith("0 ") else p for p in parts)


def _verdict(verdict: str) -> str:
    return {"fail": "❌ fail", "incomplete": "⚠️ incomplete", "pass": "✅ pass"}[verdict]


def _cell(entry: FlowEntry | None) -> str:
    if entry is None:
        return ""
    if entry.status == "unknown":
        return "❓ unknown: " + _esc(", ".join(sorted({r.op_type for r in entry.unknown_by})) or "?")
    if entry.status == "blocked":
        head = "❌ raises: " if entry.raises else "❌ blocked: "
        return head + _esc(", ".join(sorted({c.op.op_type for c in entry.blocked_by})) or "?")
    return "✅ connected" if entry.status == "connected" else "no path"


def _flow_table(report: Report) -> list[str]:
    outputs = [o.name for o in report.outputs if any(f.output == o.name for f in report.flow)]
    cells = {(f.source, f.output): f for f in report.flow}
    sources = [s for s in report.sources if s.differentiable]
    many = sum(s.kind == "variable" for s in sources) > MAX_ROWS
    lines = ["| source | " + " | ".join(_cell_code(o) for o in outputs) + " |",
             "| --- |" + " --- |" * len(outputs)]
    hidden = 0
    for s in sources:
        row = [cells.get((s.name, o)) for o in outputs]
        if many and s.kind == "variable" and all(e is not None and e.status == "connected" for e in row):
            hidden += 1
            continue
        name = _cell_code(s.name) + (" (variable)" if s.kind == "variable" else "")
        lines.append(f"| {name} | " + " | ".join(_cell(e) for e in row) + " |")
    if hidden:
        lines.append(f"| {hidden} more variables | " + " | ".join("✅ connected" for _ in outputs) + " |")
    return lines


def _finding(f: Finding) -> list[str]:
    return [f"- {_MARK[f.severity]} **{f.code}** {_code(f.rule)} ({f.severity.value}): {_esc(f.message)}",
            f"  - **Fix:** {_esc(f.fix)}"]


def _label(*lines: str) -> str:
    """A Mermaid node label: quoted, the characters Mermaid parses replaced by entity codes, one line each."""
    def esc(text: str) -> str:
        return (text.replace("#", "#35;").replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")
                .replace("`", "#96;"))  # a label starting with a backtick would be a Markdown string

    return '"' + "<br/>".join(esc(line) for line in lines) + '"'


def _nodes(prefix: str, names: Sequence[str]) -> list[tuple[str, str]]:
    shown = [(f"{prefix}{i}", _label(n)) for i, n in enumerate(names[:MAX_NODES])]
    if len(names) > MAX_NODES:
        shown.append((f"{prefix}{MAX_NODES}", _label(f"{len(names) - MAX_NODES} more")))
    return shown


def broken_paths(report: Report) -> list[tuple[Finding, list[str], list[str]]]:
    """Each active finding whose op blocks pairs of the flow, with the sources and outputs it cuts apart."""
    cut: dict[tuple[OpRef, str], tuple[dict[str, None], dict[str, None]]] = {}
    for e in report.flow:
        for c in e.blocked_by:
            sources, outputs = cut.setdefault((c.op, c.rule), ({}, {}))
            sources[e.source] = outputs[e.output] = None
    return [(f, list(cut[f.op, f.rule][0]), list(cut[f.op, f.rule][1]))
            for f in report.findings if not f.suppressed and f.op and (f.op, f.rule) in cut]


def mermaid(f: Finding, sources: Sequence[str], outputs: Sequence[str]) -> list[str]:
    """A broken path: the sources reach the op through other ops, the op cuts the gradient to the outputs."""
    assert f.op is not None
    op = _label(f"{f.op.op_type} '{f.op.op_name}'", f"in {f.op.function}", f"{f.code} {f.rule}")
    lines = ["```mermaid", "flowchart LR", f"  cut{{{{{op}}}}}"]
    for node, text in _nodes("s", sources):
        lines.append(f"  {node}[{text}] -.->|…| cut")
    for node, text in _nodes("o", outputs):
        lines.append(f"  cut --x|no gradient| {node}[{text}]")
    lines += ["  classDef cutop fill:#fdd,stroke:#c00,stroke-width:2px", "  class cut cutop", "```"]
    return lines


_NUMERIC_ORDER = ("fail", "error", "inconclusive", "skipped", "pass")


def _numeric(report: Report) -> list[str]:
    """The numeric checks, folded under one line of counts: a failure is already a finding above."""
    if not report.numeric:
        return []
    counts = Counter(n.status for n in report.numeric)
    head = ", ".join(f"{counts[s]} {s}" for s in sorted(counts, key=lambda s: (
        _NUMERIC_ORDER.index(s) if s in _NUMERIC_ORDER else len(_NUMERIC_ORDER), s)))
    out = [f"<details><summary>Numeric gradient checks: {head}</summary>", "",
           "| source → output | status | rel. error | dtype | reason |", "| --- | --- | --- | --- | --- |"]
    for row in numeric_rows(report.numeric):
        n = row.result
        at = f" at {row.where}" if row.where else ""
        error = "" if n.rel_error is None or row.folded else f"{n.rel_error:.1e}"
        out.append(f"| {_cell_code(n.source)} → {_cell_code(row.output)}{_esc(at)} | {_esc(n.status)} | {error} "
                   f"| {_esc(n.dtype or '')} | {_esc(row.details())} |")
    return out + ["", "</details>", ""]


def _precision_rows(table: PrecisionTable) -> list[str]:
    head = "source" if table.kind == "gradient" else "op (forward)"
    lines = [f"| {head} | " + " | ".join(point_label(sc) for sc in table.points) + " |",
             "| --- |" + " --- |" * len(table.points)]
    for row in table.rows:
        lines.append(f"| {_cell_code(row.name)} | " + " | ".join(_esc(cell_text(p)) for p in row.cells) + " |")
    if table.hidden:
        lines.append(f"| {table.hidden} more | none zero or inf |" + " |" * (len(table.points) - 1))
    if table.kind == "gradient":
        lines.append("| loss scale | " + " | ".join(_code(power_of_two(s)) if s else "" for s in table.loss_scales)
                     + " |")
        lines.append("| one scale serves every source | "
                     + " | ".join("" if b is None else "yes" if b else "no" for b in table.one_scale) + " |")
    return lines


def _precision(report: Report) -> list[str]:
    """--precision: the share of each source's gradient entries (and of each listed op's outputs) zero,
    subnormal or inf after the cast, per point, folded under one line of counts."""
    tables = precision_tables(report)
    if not tables:
        return []
    heads = [f"{t.lossy} of {t.total} {'source(s)' if t.kind == 'gradient' else 'op(s)'} "
             f"{'lose gradient entries' if t.kind == 'gradient' else 'overflow or underflow'}" for t in tables]
    out = [f"<details><summary>Precision {_esc(tables[0].dtype)}: {'; '.join(heads)}</summary>", "",
           "Columns: the model's own point, then each probe scale.", ""]
    for t in tables:
        out += [*_precision_rows(t), ""]
    return out + ["</details>", ""]


def _section(report: Report, fail_on: str, level: str) -> list[str]:
    t = report.target
    out = [f"{level} {_verdict(report.verdict(fail_on))} {_code(display_path(t.path))}"
           + (f" signature {_code(t.signature)}" if t.signature else ""), ""]
    statuses = Counter(f.status for f in report.flow)
    flow = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items())) or "none"
    suppressed = [f for f in report.findings if f.suppressed]
    out += [f"{_counts(report)} · flow: {flow} · fail-on: {_code(fail_on)}"
            + (f" · {len(suppressed)} suppressed" if suppressed else ""), ""]
    if report.flow:
        out += [f"{level}# Gradient flow (source → output)", "", *_flow_table(report), ""]
    active = [f for f in report.findings if not f.suppressed]
    if active:
        out += [f"{level}# Findings", ""]
        for f in active:
            out += _finding(f)
        out.append("")
    broken = broken_paths(report)
    if broken:
        out += [f"{level}# Broken paths", ""]
        for f, sources, outputs in broken:
            out += mermaid(f, sources, outputs) + [""]
    out += _numeric(report)
    out += _precision(report)
    if suppressed:
        out += [f"<details><summary>{len(suppressed)} suppressed or known finding(s)</summary>", ""]
        out += [f"- {f.code} {_code(f.rule)}: {_esc(f.message)} ({_esc(f.suppressed or '')})" for f in suppressed]
        out += ["", "</details>", ""]
    out += [f"> note: {_esc(n.text)}" for n in report.notes]
    out += [f"> **not checked:** {_esc(n)}" for n in report.incomplete]
    return out


def render(report: Report, fail_on: str = "error") -> str:
    return "\n".join(_section(visible(report), fail_on, "##")).rstrip() + "\n"


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    reports, failures = visible(list(reports)), visible(list(failures))  # a newline would break the tables
    verdict = combined_verdict(reports, fail_on, bool(failures))
    out = [f"## {_verdict(verdict)} gradaudit: {len(reports)} audited, {len(failures)} not audited", "",
           "| model | verdict | errors | warnings | info | blocked pairs |", "| --- | --- | --- | --- | --- | --- |"]
    for r in reports:
        c = r.summary()
        blocked = sum(f.status == "blocked" for f in r.flow)
        out.append(f"| {_cell_code(model_label(r))} | {_verdict(r.verdict(fail_on))} | {c['error']} | {c['warning']} "
                   f"| {c['info']} | {blocked} |")
    for f in failures:
        out.append(f"| {_cell_code(display_path(f.path))} | 💥 not audited: {_esc(f.error)} | | | | |")
    out.append("")
    for r in reports:
        out += _section(r, fail_on, "###")
    return "\n".join(out).rstrip() + "\n"
