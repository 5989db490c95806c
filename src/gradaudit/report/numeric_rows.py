"""The numeric checks as the text and HTML reports list them: every check at the synthesised point and every
pass or fail at a stability probe point on its own line; the inconclusive probe-point checks of one source
folded into one line that names their outputs, scales and reason (the JSON report keeps every check)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..model import CheckedOutputs, NumericResult


@dataclass(frozen=True)
class NumericRow:
    result: NumericResult  # the check shown; for a folded line, the first of the checks it stands for
    outputs: tuple[str, ...]  # the outputs of the checks it stands for, as shown ("*": every float output)
    scales: tuple[float, ...]  # the probe points (signed scales) of those checks; () at the synthesised point
    count: int = 1  # how many checks it stands for
    evaluations: int = 0  # their evaluations together

    @property
    def folded(self) -> bool:
        return self.count > 1

    @property
    def output(self) -> str:
        return ", ".join(self.outputs)

    @property
    def where(self) -> str:
        """'' at the synthesised point, else "inputs × 100" or "inputs × 100, -600"."""
        return f"inputs × {', '.join(f'{s:g}' for s in self.scales)}" if self.scales else ""

    @property
    def reason(self) -> str:
        """The reason, and for a folded line how many checks it stands for and that each is in the JSON."""
        n = self.result
        said = n.reason or ""
        if n.evidence and n.evidence not in said:  # what a difference was judged on (a kink, or why not one)
            said = "; ".join(x for x in (said, f"evidence: {n.evidence}") if x)
        if self.folded:
            said = (f"{self.count} probe-point checks, all inconclusive" + (f"; the first: {said}" if said else "")
                    + " (the JSON report lists each)")
        return said

    def details(self) -> str:
        """reason and precision reason on one line; a long precision reason (TensorFlow's error when the float64
        copy cannot run) in its first two clauses: the notes give it whole, once, and the JSON in every row."""
        return "; ".join(r for r in (self.reason, _short(self.result.precision_reason)) if r)


def _short(precision: str | None, width: int = 80) -> str | None:
    """"the model's own precision: the float64 copy does not run: InvalidArgumentError: ..." ->
    "the model's own precision: the float64 copy does not run (the notes say why)"."""
    if precision is None or len(precision) <= width:
        return precision
    head, _, rest = precision.partition(": ")
    cause = rest.split(": ")[0]
    return f"{head}: {cause} (the notes say why)" if cause and len(head) + len(cause) < width else precision


def _shown(outputs: CheckedOutputs) -> tuple[str, ...]:
    """A check's outputs as the tables name them: each by its name, every float output by its label ("*")."""
    return (outputs.label,) if outputs.every else outputs.names


def numeric_rows(results: Sequence[NumericResult]) -> list[NumericRow]:
    """One row per check, in the report's order, except that the inconclusive probe-point checks of a source
    become one row where the first of them stood. A healthy model's probe points in float32 are often
    inconclusive (saturated or oscillating outputs at large scales): a line per check and scale would bury
    the checks that decided something."""
    folded: dict[tuple[str, bool], list[NumericResult]] = {}  # by source: a row for every source is not the
    # variables' check, though both are "*"
    for n in results:
        if n.scale is not None and n.status == "inconclusive":
            folded.setdefault((n.source, n.every_source), []).append(n)
    rows: list[NumericRow] = []
    for n in results:
        group = folded.get((n.source, n.every_source)) if n.scale is not None and n.status == "inconclusive" else None
        if group is None:
            at: tuple[float, ...] = () if n.scale is None else (n.scale,)
            rows.append(NumericRow(n, _shown(n.outputs), at, 1, n.evaluations))
            continue
        if group[0] is not n:
            continue  # already stood for by the first of its group
        outputs = tuple(dict.fromkeys(o for g in group for o in _shown(g.outputs)))
        scales = tuple(dict.fromkeys(g.scale for g in group if g.scale is not None))
        rows.append(NumericRow(n, outputs, scales, len(group), sum(g.evaluations for g in group)))
    return rows
