"""The HTML report: one self-contained page (inline CSS and JavaScript, no network), rendered with Jinja2
from templates/. The static content (heatmap, findings, paths, numeric checks, probes) reads without
JavaScript; the script only adds the status filter, the name search and the cell details on click.

This module turns Reports into plain view data (what each cell, bar and chain node shows and where);
the templates only lay it out."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING

from ..model import BlockedPath, Finding, FlowEntry, FlowStatus, NumericResult, Report
from .common import display_path, model_label, visible, where
from .numeric_rows import NumericRow, numeric_rows
from .precision_rows import PrecisionTable, cell_text, lost, point_label, power_of_two, precision_tables

if TYPE_CHECKING:
    from jinja2 import Environment

    from ..model import AuditFailure
    from .diff import Diff

# Statuses in the order the filter lists them; a status not listed (a newer gradaudit's) follows them.
STATUS_ORDER = ("connected", "blocked", "disconnected", "unknown")
STATUS_MARK = {"connected": "✓", "blocked": "✕", "disconnected": "·", "unknown": "?"}
LOG_MIN, LOG_MAX = -16, 0  # numeric bars: relative errors from 1e-16 to 1 on a log scale
INPUTS_GROUP = "inputs"
UNGROUPED = "(top level)"


def css_class(value: str) -> str:
    """A status or verdict as a CSS class suffix: any string the JSON may hold becomes a safe one."""
    return re.sub(r"[^a-z0-9_-]+", "-", value.lower()) or "none"


@dataclass(frozen=True)
class Cell:
    output: str
    status: str
    title: str
    path_id: str | None  # the anchor of this pair's drawn path, for blocked pairs


@dataclass(frozen=True)
class Row:
    source: str
    kind: str
    cells: tuple[Cell, ...]


@dataclass
class Group:
    name: str
    rows: list[Row] = field(default_factory=list)

    @property
    def counts(self) -> list[tuple[str, int]]:
        c = Counter(cell.status for row in self.rows for cell in row.cells)
        return sorted(c.items(), key=lambda kv: _status_rank(kv[0]))

    @property
    def healthy(self) -> bool:
        return all(cell.status == "connected" for row in self.rows for cell in row.cells)


@dataclass(frozen=True)
class ChainNode:
    kind: str  # "source" | "op" | "cut" | "output"
    x: int
    y: int
    line1: str
    line2: str
    title: str
    gap_before: int  # ops left out between this node and the previous one


@dataclass(frozen=True)
class ChainEdge:
    points: str  # an SVG polyline, ending at the next node
    dead: bool  # after the cut: no gradient flows back along it
    label: str  # "… N ops …" where a stretch is left out
    label_x: int
    label_y: int


@dataclass(frozen=True)
class PathView:
    id: str
    source: str
    output: str
    cut: str  # "OpType 'name'"
    nodes: tuple[ChainNode, ...]
    edges: tuple[ChainEdge, ...]
    width: int
    height: int


@dataclass(frozen=True)
class RuleGroup:
    code: str
    slug: str
    severity: str
    summary: str
    doc: str
    fix: str
    findings: tuple[Finding, ...]


@dataclass(frozen=True)
class Bar:
    row: NumericRow  # the check (or folded checks): its outputs, probe points, and for a folded line its count
    percent: float | None  # position of rel_error on the log axis, 0..100
    bound: float | None = None  # position of the check's error bound on the same axis

    @property
    def result(self) -> NumericResult:
        return self.row.result


@dataclass(frozen=True)
class Ladder:
    output: str
    scales: tuple[float, ...]
    rows: tuple[tuple[str, tuple[object | None, ...]], ...]  # source, StabilityResult per scale


@dataclass
class ModelView:
    id: str
    report: Report
    label: str
    verdict: str
    summary: dict[str, int]
    statuses: list[tuple[FlowStatus, int]]
    outputs: list[str]
    groups: list[Group]
    fold: bool  # fold the healthy layers: the eye goes to the others
    header_px: int  # height of the rotated output names above the heatmap
    rules: list[RuleGroup]
    suppressed: list[Finding]
    paths: list[PathView]
    paths_not_drawn: int  # blocked pairs past MAX_DRAWN: their cells still name the cut
    bars: list[Bar]
    ladders: list[Ladder]
    precision: list[PrecisionTable]  # --precision: the gradients' table, then the forward side's; [] without it


def _status_rank(status: str) -> tuple[int, str]:
    return (STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER), status)


def layer_of(name: str) -> str:
    """A variable's layer: its name without the last part (`block1/conv/kernel` -> `block1/conv`)."""
    head, sep, _ = name.rpartition("/")
    return head if sep else UNGROUPED


def _cell_title(entry: FlowEntry) -> str:
    text = f"{entry.source} → {entry.output}: {entry.status}"
    if entry.raises:
        text += " (TensorFlow raises when it builds this function's backward)"
    if entry.blocked_by:
        text += " by " + "; ".join(f"{c.op.short} ({c.rule})" for c in entry.blocked_by)
    if entry.unknown_by:
        text += " at " + "; ".join(r.short for r in entry.unknown_by)
    return text


MAX_DRAWN = 200  # chains drawn per model: past that the page grows by megabytes to say the same again
FOLD_ABOVE = 24  # sources: above this many, layers whose every pair is connected start folded


def _heatmap(report: Report, path_ids: dict[tuple[str, str], str]) -> tuple[list[str], list[Group]]:
    cells = {(f.source, f.output): f for f in report.flow}
    outputs = [o.name for o in report.outputs if any(f.output == o.name for f in report.flow)]
    groups: dict[str, Group] = {}
    for s in report.sources:
        row_cells = []
        for o in outputs:
            entry = cells.get((s.name, o))
            if entry is not None:
                row_cells.append(Cell(o, entry.status, _cell_title(entry), path_ids.get((s.name, o))))
        if not row_cells:
            continue
        name = INPUTS_GROUP if s.kind == "input" else layer_of(s.name)
        groups.setdefault(name, Group(name)).rows.append(Row(s.name, s.kind, tuple(row_cells)))
    return outputs, list(groups.values())


# Chain layout: nodes of NODE_W x NODE_H, PER_ROW to a row, rows ROW_H apart (a long path wraps).
NODE_W, NODE_H, GAP, PER_ROW, ROW_H, TOP = 132, 46, 40, 7, 84, 22


def _short(text: str, limit: int = 19) -> str:
    """The end of a long op name: the last parts say which op it is."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def chain(path: BlockedPath, anchor: str) -> PathView:
    """Lay out a path as rows of nodes: the source, its ops (the cut marked), the output."""
    items = [("source", path.source, "source", path.source, 0)]
    for k, step in enumerate(path.steps):
        items.append(("cut" if k == path.cut else "op", step.op_type, step.op_name,
                      f"{step.op_type} '{step.op_name}' in {step.function}", step.skipped))
    items.append(("output", path.output, "output", path.output, 0))
    nodes = []
    for k, (kind, line1, line2, title, gap) in enumerate(items):
        row, col = divmod(k, PER_ROW)
        nodes.append(ChainNode(kind, col * (NODE_W + GAP), TOP + row * ROW_H, _short(line1), _short(line2),
                               title, gap))
    edges = []
    for k in range(1, len(nodes)):
        a, b = nodes[k - 1], nodes[k]
        mid_y = b.y + NODE_H // 2
        if a.y == b.y:  # same row: left to right
            points = f"{a.x + NODE_W},{mid_y} {b.x - 2},{mid_y}"
            label_x, label_y = (a.x + NODE_W + b.x) // 2, mid_y - 8
        else:  # wrap: down from the row's last node, back left, down into the next row's first
            turn = a.y + NODE_H + (ROW_H - NODE_H) // 2
            points = (f"{a.x + NODE_W // 2},{a.y + NODE_H} {a.x + NODE_W // 2},{turn} "
                      f"{b.x + NODE_W // 2},{turn} {b.x + NODE_W // 2},{b.y - 2}")
            label_x, label_y = (a.x + b.x + NODE_W) // 2, turn - 5
        edges.append(ChainEdge(points, k > path.cut + 1, f"… {b.gap_before} ops …" if b.gap_before else "",
                               label_x, label_y))
    cut = path.steps[path.cut]
    columns = min(len(nodes), PER_ROW)
    return PathView(anchor, path.source, path.output, f"{cut.op_type} '{cut.op_name}'", tuple(nodes),
                    tuple(edges), columns * NODE_W + (columns - 1) * GAP + 4, nodes[-1].y + NODE_H + 4)


def _rule_groups(findings: Sequence[Finding]) -> list[RuleGroup]:
    from ..rules import get_rule

    by_code: dict[str, list[Finding]] = {}
    for f in findings:
        by_code.setdefault(f.code, []).append(f)
    groups = []
    for code, items in by_code.items():
        try:
            rule = get_rule(code)
            summary, doc, fix = rule.summary, rule.doc, rule.fix
        except KeyError:  # a report from another gradaudit version
            summary, doc, fix = items[0].rule, "", ""
        worst = max(items, key=lambda f: f.severity.rank).severity.value
        groups.append(RuleGroup(code, items[0].rule, worst, summary, doc, fix, tuple(items)))
    return groups


def _bar(rel_error: float | None) -> float | None:
    if rel_error is None or not math.isfinite(rel_error):
        return None
    exponent = math.log10(rel_error) if rel_error > 0 else LOG_MIN
    return round(100 * (min(max(exponent, LOG_MIN), LOG_MAX) - LOG_MIN) / (LOG_MAX - LOG_MIN), 2)


def _numeric_bar(row: NumericRow) -> Bar:
    """A check's bar; a folded line of inconclusive probe-point checks has none (no one error to show)."""
    if row.folded:
        return Bar(row, None, None)
    return Bar(row, _bar(row.result.rel_error), _bar(row.result.bound))


def _ladders(report: Report) -> list[Ladder]:
    scales = tuple(sorted({s.scale for s in report.stability}))
    cells = {(s.source, s.output, s.scale): s for s in report.stability}
    ladders = []
    for output in dict.fromkeys(s.output for s in report.stability):
        sources = dict.fromkeys(s.source for s in report.stability if s.output == output)
        ladders.append(Ladder(output, scales, tuple(
            (src, tuple(cells.get((src, output, sc)) for sc in scales)) for src in sources)))
    return ladders


def model_view(report: Report, index: int, fail_on: str) -> ModelView:
    mid = f"m{index}"
    path_views = [chain(p, f"{mid}-path{k}") for k, p in enumerate(report.paths[:MAX_DRAWN])]
    first_path: dict[tuple[str, str], str] = {}
    for p in path_views:
        first_path.setdefault((p.source, p.output), p.id)
    outputs, groups = _heatmap(report, first_path)
    statuses = sorted(Counter(f.status for f in report.flow).items(), key=lambda kv: _status_rank(kv[0]))
    return ModelView(
        id=mid, report=report, label=model_label(report), verdict=report.verdict(fail_on),
        summary=report.summary(), statuses=statuses, outputs=outputs, groups=groups,
        fold=sum(len(g.rows) for g in groups) > FOLD_ABOVE,
        header_px=min(120, 8 * max((len(o) for o in outputs), default=0) + 12),
        rules=_rule_groups([f for f in report.findings if not f.suppressed]),
        suppressed=[f for f in report.findings if f.suppressed], paths=path_views,
        paths_not_drawn=len(report.paths) - len(path_views),
        bars=[_numeric_bar(row) for row in numeric_rows(report.numeric)], ladders=_ladders(report),
        precision=precision_tables(report))


@lru_cache(maxsize=1)
def environment() -> Environment:
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    env = Environment(loader=PackageLoader("gradaudit.report", "templates"),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["css"] = css_class
    env.filters["where"] = where
    env.globals.update(STATUS_MARK=STATUS_MARK, NODE_W=NODE_W, NODE_H=NODE_H, LOG_MIN=LOG_MIN, LOG_MAX=LOG_MAX,
                       display_path=display_path, cell_text=cell_text, lost=lost, point_label=point_label,
                       power_of_two=power_of_two)
    return env


def page(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = (),
         changes: Diff | None = None) -> str:
    """The whole page: an index when there are several models, then one section per model, then the
    changes since a baseline when there are any."""
    from .json_report import tool_info

    reports, failures = visible(list(reports)), visible(list(failures))  # no raw control character from names
    changes = visible(changes)
    views = [model_view(r, k, fail_on) for k, r in enumerate(reports)]
    verdicts = [r.verdict(fail_on) for r in reports]
    if failures or "fail" in verdicts or (changes is not None and changes.fails()):
        verdict = "fail"
    else:  # "incomplete", or whatever else a report says that is not a pass
        verdict = next((v for v in verdicts if v != "pass"), "pass")
    return environment().get_template("report.html.j2").render(
        models=views, failures=failures, fail_on=fail_on, verdict=verdict, tool=tool_info(),
        changes=changes, show_index=len(views) + len(failures) > 1)


def render(report: Report, fail_on: str = "error") -> str:
    return page([report], fail_on)


def render_many(reports: Sequence[Report], fail_on: str = "error", failures: Sequence[AuditFailure] = ()) -> str:
    return page(reports, fail_on, failures)


def render_diff(changes: Diff) -> str:
    """`gradaudit diff --format html`: the changes alone."""
    from .json_report import tool_info

    changes = visible(changes)  # no raw control or bidirectional character from the compared reports' names
    return environment().get_template("diff.html.j2").render(
        changes=changes, verdict="fail" if changes.fails() else "pass", tool=tool_info())
