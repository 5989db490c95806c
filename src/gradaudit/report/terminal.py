"""The report a person reads in a terminal (rich): sources, outputs, flow matrix, findings, verdict."""

from __future__ import annotations

import io
import os
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ..model import FlowEntry, PrecisionResult, Report, Severity
from .common import MAX_ROWS, display_path, model_label, visible
from .numeric_rows import numeric_rows
from .precision_rows import lost, percent, point_label, power_of_two, precision_table

if TYPE_CHECKING:
    from ..model import AuditFailure

_SEV_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
_NUM_STYLE = {"pass": "green", "fail": "bold red", "inconclusive": "yellow", "skipped": "dim", "error": "red"}


def _shape(shape: Sequence[int | None] | None) -> str:
    return "?" if shape is None else "[" + ", ".join("None" if d is None else str(d) for d in shape) + "]"


def _cell(entry: FlowEntry | None) -> Text:
    if entry is None:
        return Text("")
    if entry.status == "connected":
        return Text("connected", style="green")
    if entry.status == "disconnected":
        return Text("no path", style="dim")
    if entry.status == "unknown":
        return Text("unknown: " + ", ".join(sorted({r.op_type for r in entry.unknown_by}) or ["?"]),
                    style="bold yellow")
    ops = sorted({c.op.op_type for c in entry.blocked_by}) or ["?"]
    return Text(("raises: " if entry.raises else "blocked: ") + ", ".join(ops), style="bold red")


def _flow_table(report: Report) -> RenderableType:
    outputs = [o.name for o in report.outputs if any(f.output == o.name for f in report.flow)]
    cells = {(f.source, f.output): f for f in report.flow}
    sources = [s for s in report.sources if s.differentiable]
    table = Table(title="Gradient flow: source (row) to output (column)", title_justify="left")
    table.add_column("source")
    for o in outputs:
        table.add_column(Text(o))  # Text, not str: rich reads a str as markup ("[link=...]" in a name)
    hidden = 0
    many = sum(s.kind == "variable" for s in sources) > MAX_ROWS
    for s in sources:
        row = [cells.get((s.name, o)) for o in outputs]
        if many and s.kind == "variable" and all(e is not None and e.status == "connected" for e in row):
            hidden += 1
            continue
        table.add_row(Text(s.name + (" (var)" if s.kind == "variable" else "")), *[_cell(e) for e in row])
    if hidden:
        table.add_row(Text(f"{hidden} more variables", style="italic"),
                      *[Text("connected", style="green") for _ in outputs])
    return table


def _sources_table(report: Report) -> RenderableType:
    table = Table(title="Sources and outputs", title_justify="left")
    for col in ("name", "kind", "dtype", "shape", "gradient"):
        table.add_column(col)
    variables = [s for s in report.sources if s.kind == "variable"]
    for s in report.sources:
        if s.kind == "variable" and len(variables) > MAX_ROWS:
            continue
        table.add_row(Text(s.name), Text(s.kind), Text(s.dtype), _shape(s.shape),
                      "differentiable" if s.differentiable else Text("not differentiable (by dtype)", style="dim"))
    if len(variables) > MAX_ROWS:
        table.add_row(f"{len(variables)} trainable variables", "variable",
                      Text(", ".join(sorted({v.dtype for v in variables}))), "", "differentiable")
    for o in report.outputs:
        table.add_row(Text(o.name), "output", Text(o.dtype), _shape(o.shape), "")
    return table


def _findings(report: Report) -> list[RenderableType]:
    out: list[RenderableType] = []
    for sev in (Severity.ERROR, Severity.WARNING, Severity.INFO):
        group = [f for f in report.findings if f.severity is sev and not f.suppressed]
        if not group:
            continue
        out.append(Text(f"{sev.value.upper()}S ({len(group)})", style=_SEV_STYLE[sev]))
        for f in group:
            out.append(Text.assemble((f"  {f.code} ", _SEV_STYLE[sev]), (f.rule, "bold")))
            out.append(Text("    " + f.message))
            out.append(Text("    fix: " + f.fix, style="green"))
    suppressed = [f for f in report.findings if f.suppressed]
    if suppressed:
        out.append(Text(f"{len(suppressed)} finding(s) suppressed or in the baseline", style="dim"))
    return out


def _numeric_table(report: Report) -> RenderableType:
    table = Table(title=f"Numeric gradient checks (seed {report.seed})", title_justify="left")
    for col in ("source", "output", "status", "rel. error", "step", "dtype", "evals", "reason"):
        table.add_column(col)
    for row in numeric_rows(report.numeric):
        n = row.result
        at = f" ({row.where})" if row.where else ""
        table.add_row(Text(n.source + at), Text(row.output), Text(n.status, style=_NUM_STYLE.get(n.status, "")),
                      "" if n.rel_error is None or row.folded else f"{n.rel_error:.2e}",
                      "" if n.step is None or row.folded else f"{n.step:.1e}", Text(n.dtype or ""),
                      str(row.evaluations), Text(row.details()))
    return table


def _stability_table(report: Report) -> RenderableType:
    scales = sorted({s.scale for s in report.stability})
    table = Table(title="Stability probes (rows: source -> output, columns: input scale)", title_justify="left")
    table.add_column("source -> output")
    for sc in scales:
        table.add_column(f"{sc:g}")
    cells = {(s.source, s.output, s.scale): s for s in report.stability}
    expected = False
    for src, out in dict.fromkeys((s.source, s.output) for s in report.stability):
        row = []
        for sc in scales:
            s = cells.get((src, out, sc))
            if s is None:
                row.append(Text(""))
            elif s.status == "ok":
                row.append(Text("ok", style="green"))
            elif not s.held:  # the float64 copy explains it: outside the domain, or a true overflow
                expected = True
                row.append(Text("inf/nan, not judged", style="dim"))
            else:
                row.append(Text("NaN/Inf grad" if s.status == "nonfinite_gradient" else "NaN/Inf fwd",
                                style="bold red" if s.status == "nonfinite_gradient" else "yellow"))
        table.add_row(Text(f"{src} -> {out}"), *row)
    if expected:
        table.caption = ("inf/nan, not judged: non-finite in the float64 reference as well, or a true value "
                         "beyond the dtype's range; not a finding by itself (see the JSON detail)")
        table.caption_justify = "left"
    return table


def _precision_cell(p: PrecisionResult | None) -> Text:
    bad = [f"{word} {percent(v)}" for word, v in lost(p)]
    if bad:
        return Text(", ".join(bad), style="yellow")
    return Text("" if p is None else "ok", style="green")


def _precision_table(report: Report) -> RenderableType:
    """--precision: per source, the share of gradient entries zero (or inf) after the cast, at each point; with
    more than MAX_ROWS sources, those fine at every point are counted, not listed."""
    grid = precision_table(report, "gradient")
    assert grid is not None  # shown only when the report has precision results
    table = Table(title=f"Precision {grid.dtype}: gradient entries zero or inf after the cast (columns: input scale)",
                  title_justify="left")
    table.add_column("source")
    for sc in grid.points:
        table.add_column(point_label(sc))
    for row in grid.rows:
        table.add_row(Text(row.name), *(_precision_cell(p) for p in row.cells))
    if grid.hidden:
        table.add_row(Text(f"{grid.hidden} more source(s)", style="dim"),
                      *(Text("ok", style="dim") for _ in grid.points))
    own = grid.points.index(None) if None in grid.points else None
    loss_scale = None if own is None else grid.loss_scales[own]
    if own is not None and loss_scale:
        table.caption = (f"own point: the model's synthesised or --inputs point; a dynamic loss scale settles on "
                         f"{power_of_two(loss_scale)} there, which "
                         f"{'serves' if grid.one_scale[own] else 'cannot serve'} every source at once")
        table.caption_justify = "left"
    return table


def renderables(report: Report, fail_on: str = "error") -> list[RenderableType]:
    report = visible(report)  # no escape sequence from the model reaches the terminal
    t = report.target
    parts: list[RenderableType] = [
        Text.assemble(("gradaudit ", "bold"), t.path,
                      f"  ({t.kind}, " + (f"signature {t.signature}, " if t.signature else "")
                      + f"tags {','.join(t.tags) or '-'})"),
        _sources_table(report),
    ]
    if report.flow:
        parts.append(_flow_table(report))
    else:
        parts.append(Text("No (differentiable source, float output) pair to check.", style="yellow"))
    parts.extend(_findings(report) or [Text("No findings.", style="green")])
    if report.numeric:
        parts.append(_numeric_table(report))
    if report.stability:
        parts.append(_stability_table(report))
    if report.precision:
        parts.append(_precision_table(report))
    for note in report.notes:
        parts.append(Text("note: " + note.text, style="yellow"))
    if report.isolation and report.isolation.missing:  # what confined the model is said when something did not
        parts.append(Text("isolation: " + "; ".join(report.isolation.missing), style="yellow"))
    for line in report.incomplete:
        parts.append(Text("not checked: " + line, style="bold yellow"))
    parts.append(verdict_line(report, fail_on))
    return parts


VERDICT_STYLE = {"fail": "bold red", "incomplete": "bold yellow", "pass": "bold green"}


def verdict_line(report: Report, fail_on: str = "error") -> Text:
    c = report.summary()
    counts = f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
    statuses = Counter(f.status for f in report.flow)
    flow = ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
    verdict = report.verdict(fail_on)
    return Text.assemble((f"{verdict.upper()}", VERDICT_STYLE[verdict]),
                         f": {counts}; flow: {flow or 'none'} (fail-on: {fail_on})")


def summary_table(reports: Sequence[Report], fail_on: str = "error",
                  failures: Sequence[AuditFailure] = ()) -> RenderableType:
    reports, failures = visible(list(reports)), visible(list(failures))
    table = Table(title=f"Summary (fail-on: {fail_on})", title_justify="left")
    table.add_column("model [signature]", overflow="fold")  # a path cut short is no use
    for col in ("verdict", "errors", "warnings", "info", "suppressed", "blocked pairs"):
        table.add_column(col)
    for r in reports:
        c, verdict = r.summary(), r.verdict(fail_on)
        # Text, not str: rich would read "[serving_default]" as markup and drop it.
        style = VERDICT_STYLE[verdict]
        table.add_row(Text(model_label(r)), Text(verdict.upper(), style=style),
                      str(c["error"]), str(c["warning"]), str(c["info"]),
                      str(sum(1 for f in r.findings if f.suppressed)),
                      str(sum(1 for f in r.flow if f.status == "blocked")))
    for f in failures:
        table.add_row(Text(display_path(f.path)), Text("ERROR", style="bold red"), "", "", "", "", "")
    return table


def print_report(report: Report, console: Console, fail_on: str = "error") -> None:
    console.print(Group(*renderables(report, fail_on)))


def print_reports(reports: Sequence[Report], console: Console, fail_on: str = "error",
                  failures: Sequence[AuditFailure] = ()) -> None:
    """Each report, then a summary table when there are several models (or one that failed to load)."""
    for r in reports:
        print_report(r, console, fail_on)
    if len(reports) > 1 or failures:
        console.print(summary_table(reports, fail_on, failures))


def console(stderr: bool = False) -> Console:
    """A console that adapts to where it writes: colour only on a terminal, NO_COLOR and FORCE_COLOR honoured
    (rich reads them), and in a CI log 120 columns instead of wrapping at 80."""
    con = Console(stderr=stderr)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con.width = 120
    return con


@contextmanager
def progress(total: int) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr while several models are audited; nothing when stderr is not a terminal
    (FORCE_COLOR asks for colour in a log, not for an animation)."""
    con = console(stderr=True)
    if total < 2 or not (con.is_interactive and sys.stderr.isatty()):
        yield lambda *_: None
        return
    with Progress(TextColumn("auditing"), BarColumn(), MofNCompleteColumn(), console=con, transient=True) as bar:
        task = bar.add_task("auditing", total=total)
        yield lambda *_: bar.advance(task)


@contextmanager
def status(active: bool) -> Iterator[None]:
    """For one audit: a status line on stderr naming the stage and the check under way, when stderr is a
    terminal; nothing when it is piped or `active` is False."""
    from ..progress import observed

    con = console(stderr=True)
    if not active or not (con.is_interactive and sys.stderr.isatty()):
        yield
        return
    with con.status("gradaudit: starting", spinner="dots") as line, observed(lambda m: line.update(f"gradaudit: {m}")):
        yield


def _plain(print_to: Callable[[Console], None]) -> str:
    buf = io.StringIO()
    print_to(Console(file=buf, width=120, color_system=None, force_terminal=False))
    return buf.getvalue()


def render_plain(report: Report, fail_on: str = "error") -> str:
    return _plain(lambda con: print_report(report, con, fail_on))


def render_plain_many(reports: Sequence[Report], fail_on: str = "error",
                      failures: Sequence[AuditFailure] = ()) -> str:
    return _plain(lambda con: print_reports(reports, con, fail_on, failures))
