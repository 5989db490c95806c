"""What changed between two audits of the same models: flow pairs whose status changed (with the ops that
cut them now), sources and outputs that appeared or disappeared, findings new or gone. A pair that lost its
gradient (connected before, blocked or disconnected now) fails by default."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..baseline import common_tail, identity, path_parts
from ..model import Cut, Finding, Report
from .common import display_path

LOST = ("blocked", "disconnected")  # statuses of a pair that no longer carries a gradient


@dataclass(frozen=True)
class PairChange:
    source: str
    output: str
    old: str
    new: str
    cuts: tuple[Cut, ...]  # what blocks the pair now

    @property
    def lost(self) -> bool:
        return self.old == "connected" and self.new in LOST

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "output": self.output, "old": self.old, "new": self.new,
                "lost": self.lost, "blocked_by": [c.to_dict() for c in self.cuts]}


@dataclass(frozen=True)
class ModelChanges:
    """One model (and signature): `old` or `new` is None when it is in one run only."""

    old: Report | None
    new: Report | None
    pairs: tuple[PairChange, ...] = ()
    sources_added: tuple[str, ...] = ()
    sources_removed: tuple[str, ...] = ()
    outputs_added: tuple[str, ...] = ()
    outputs_removed: tuple[str, ...] = ()
    findings_new: tuple[Finding, ...] = ()
    findings_gone: tuple[Finding, ...] = ()

    @property
    def label(self) -> str:
        report = self.new or self.old
        assert report is not None
        t = report.target
        return display_path(t.path) + (f" [{t.signature}]" if t.signature else "")

    @property
    def state(self) -> str:
        """`added`, `removed`, `changed` or `unchanged`."""
        if self.old is None:
            return "added"
        if self.new is None:
            return "removed"
        changed = (self.pairs or self.sources_added or self.sources_removed or self.outputs_added
                   or self.outputs_removed or self.findings_new or self.findings_gone)
        return "changed" if changed else "unchanged"

    @property
    def lost(self) -> list[PairChange]:
        return [p for p in self.pairs if p.lost]

    def to_dict(self) -> dict[str, Any]:
        def target(r: Report | None) -> dict[str, str | None] | None:
            return None if r is None else {"path": r.target.path, "signature": r.target.signature}

        return {"model": self.label, "state": self.state, "old": target(self.old), "new": target(self.new),
                "pairs": [p.to_dict() for p in self.pairs],
                "sources": {"added": list(self.sources_added), "removed": list(self.sources_removed)},
                "outputs": {"added": list(self.outputs_added), "removed": list(self.outputs_removed)},
                "findings": {"new": [f.to_dict() for f in self.findings_new],
                             "gone": [f.to_dict() for f in self.findings_gone]}}


@dataclass(frozen=True)
class Diff:
    old: str  # what the old run was (a JSON file), as the user named it
    new: str
    models: tuple[ModelChanges, ...]

    def lost(self) -> list[tuple[ModelChanges, PairChange]]:
        return [(m, p) for m in self.models for p in m.lost]

    def fails(self) -> bool:
        return bool(self.lost())

    def changed(self) -> bool:
        return any(m.state != "unchanged" for m in self.models)

    def to_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "verdict": "fail" if self.fails() else "pass",
                "lost_pairs": len(self.lost()), "models": [m.to_dict() for m in self.models]}


def _names_diff(old: Sequence[str], new: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    before, after = set(old), set(new)
    return tuple(n for n in new if n not in before), tuple(n for n in old if n not in after)


def _new_findings(findings: Sequence[Finding], other: Sequence[Finding]) -> tuple[Finding, ...]:
    """Findings whose identity (rule, function, op, source, output: baseline.py) the other run lacks."""
    known = frozenset().union(*(identity(f) for f in other))
    return tuple(f for f in findings if not identity(f) <= known)


def compare_reports(old: Report, new: Report) -> ModelChanges:
    before = {(f.source, f.output): f for f in old.flow}
    pairs = []
    for e in new.flow:
        prev = before.get((e.source, e.output))
        if prev is not None and prev.status != e.status:
            pairs.append(PairChange(e.source, e.output, prev.status, e.status, e.blocked_by))
    src_add, src_rm = _names_diff([s.name for s in old.sources], [s.name for s in new.sources])
    out_add, out_rm = _names_diff([o.name for o in old.outputs], [o.name for o in new.outputs])
    return ModelChanges(old, new, tuple(pairs), src_add, src_rm, out_add, out_rm,
                        _new_findings(new.findings, old.findings), _new_findings(old.findings, new.findings))


def _match(old: Sequence[Report], new: Sequence[Report]) -> list[tuple[Report | None, Report | None]]:
    """Pair each new report with the old one of the same signature whose path ends the same way (the runs
    may come from other checkouts); one report left on each side is the same model moved."""
    left = list(old)
    pairs: list[tuple[Report | None, Report | None]] = []
    unmatched = []
    for n in new:
        mine = path_parts(n.target.path)
        scored = [(common_tail(mine, path_parts(o.target.path)), k) for k, o in enumerate(left)
                  if o.target.signature == n.target.signature]
        best = max(scored, default=(0, -1))
        if best[0] > 0:
            pairs.append((left.pop(best[1]), n))
        else:
            unmatched.append(n)
    if len(unmatched) == 1 and len(left) == 1:
        pairs.append((left.pop(), unmatched.pop()))
    pairs += [(None, n) for n in unmatched] + [(o, None) for o in left]
    return pairs


def compare(old: Sequence[Report], new: Sequence[Report], old_label: str = "old", new_label: str = "new") -> Diff:
    models = []
    for o, n in _match(old, new):
        models.append(compare_reports(o, n) if o is not None and n is not None else ModelChanges(o, n))
    return Diff(old_label, new_label, tuple(models))


def since_baseline(baseline: Sequence[Report], reports: Sequence[Report], label: str) -> Diff:
    """`--baseline`: the changes of this run's models; a model of the baseline this run did not audit is not
    reported as removed (a run may audit a part of the models the baseline holds)."""
    d = compare(baseline, reports, label, "this run")
    return Diff(d.old, d.new, tuple(m for m in d.models if m.new is not None))
