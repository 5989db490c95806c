"""The `--precision` results as the text, HTML and Markdown reports lay them out: one table of the gradients (a
row per source) and one of the forward side (a row per op whose output overflows or underflows), each with a
column per point (the model's own point, then each probe scale), and per point the loss scale and whether one
scale serves every source. With more than MAX_ROWS rows, those with no entry zero or inf at any point are
counted, not listed (the JSON report keeps every result)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model import PrecisionResult, Report
from .common import MAX_ROWS

KINDS = ("gradient", "activation")
# The fractions of a result a cell names, by the word it names them with.
FRACTIONS = (("zero", "underflow"), ("subnormal", "subnormal"), ("inf", "overflow"),
             ("not finite before the cast", "nonfinite"))


@dataclass(frozen=True)
class PrecisionRow:
    name: str  # the source; for an activation, the op as `Type 'name'`
    cells: tuple[PrecisionResult | None, ...]  # one per point of the table; None: no result there


@dataclass(frozen=True)
class PrecisionTable:
    kind: str  # "gradient" | "activation"
    dtype: str  # the target precision
    points: tuple[float | None, ...]  # the probe scales; None: the model's own (synthesised or --inputs) point
    rows: tuple[PrecisionRow, ...]
    hidden: int  # rows left out: no entry zero or inf at any point
    # per point, from its first result: the loss scale a dynamic loss scaler settles on, and whether it serves
    # every source at once (None: no scale, e.g. no nonzero entry there)
    loss_scales: tuple[float | None, ...]
    one_scale: tuple[bool | None, ...]

    @property
    def lossy(self) -> int:
        """Rows with an entry zero or inf after the cast at some point (the hidden rows have none)."""
        return sum(any(lost(p) for p in row.cells) for row in self.rows)

    @property
    def total(self) -> int:
        return len(self.rows) + self.hidden


def fractions(p: PrecisionResult | None, subnormal: bool = True) -> list[tuple[str, float]]:
    """The nonzero fractions of a result, as (word, fraction): zero, subnormal (unless left out), inf."""
    if p is None:
        return []
    found = [(word, float(getattr(p, name) or 0.0)) for word, name in FRACTIONS]
    return [(word, v) for word, v in found if v and (subnormal or word != "subnormal")]


def lost(p: PrecisionResult | None) -> list[tuple[str, float]]:
    """The entries lost after the cast: the nonzero zero and inf fractions."""
    return fractions(p, subnormal=False)


def percent(fraction: float) -> str:
    return f"{100 * fraction:.3g}%"


def point_label(scale: float | None) -> str:
    return "own point" if scale is None else f"{scale:g}"


def power_of_two(scale: float) -> str:
    """A loss scale as the power of two it is: `2**15`."""
    return f"2**{round(math.log2(scale))}"


def cell_text(p: PrecisionResult | None) -> str:
    """A cell of the HTML and Markdown tables: the nonzero fractions, and for a gradient that loses entries the
    share still zero at the loss scale; "ok" when nothing is zero, subnormal or inf; "" for no result."""
    if p is None:
        return ""
    found = fractions(p)
    if not p.entries and not found:
        return "no nonzero entry"
    if not found:
        return "ok"
    text = ", ".join(f"{word} {percent(v)}" for word, v in found)
    if p.underflow and p.underflow_scaled is not None and p.loss_scale:
        text += f" ({percent(p.underflow_scaled)} zero at the loss scale)"
    return text


def _per_point(results: list[PrecisionResult], points: tuple[float | None, ...]
               ) -> tuple[tuple[float | None, ...], tuple[bool | None, ...]]:
    first: dict[float | None, PrecisionResult] = {}
    for p in results:
        first.setdefault(p.scale, p)
    return tuple(first[sc].loss_scale for sc in points), tuple(first[sc].one_scale for sc in points)


def precision_table(report: Report, kind: str) -> PrecisionTable | None:
    """The table of one kind of result; None when the report has none of that kind. The dtype of a gradient
    table without rows is the report's first result's (the terminal still titles an empty table)."""
    results = [p for p in report.precision if p.kind == kind]
    if not results and (kind != "gradient" or not report.precision):
        return None
    points = tuple(dict.fromkeys(p.scale for p in results))
    cells = {(p.name, p.scale): p for p in results}
    names = list(dict.fromkeys(p.name for p in results))
    rows, hidden = [], 0
    for name in names:
        row = PrecisionRow(name, tuple(cells.get((name, sc)) for sc in points))
        if len(names) > MAX_ROWS and not any(lost(p) for p in row.cells):
            hidden += 1
        else:
            rows.append(row)
    dtype = (results or report.precision)[0].dtype
    loss_scales, one_scale = _per_point(results, points)
    return PrecisionTable(kind, dtype, points, tuple(rows), hidden, loss_scales, one_scale)


def precision_tables(report: Report) -> list[PrecisionTable]:
    """The gradient table, then the forward side's when the model has one; [] without --precision."""
    tables = [precision_table(report, kind) for kind in KINDS]
    return [t for t in tables if t is not None and t.total]
