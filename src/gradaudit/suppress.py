"""Which findings a run reports and which may fail it, applied to a finished Report: rule selection
(--select / --ignore), intended cuts (--ignore-ops) and the baseline."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .baseline import Baseline, Key, identity
from .model import Finding, Report
from .rules import ALL_RULES, get_rule

_PREFIX = re.compile(r"GA\d{0,2}", re.IGNORECASE)


class UnknownRule(ValueError):
    def __init__(self, selector: str):
        super().__init__(f"unknown rule {selector!r} (see `gradaudit rules`)")


def rule_codes(selector: str) -> frozenset[str]:
    """The codes a selector names: a code (`GA103`), a code prefix (`GA1`, `GA10`) or a slug (`zero-gradient`)."""
    text = selector.strip()
    try:
        return frozenset({get_rule(text).code})
    except KeyError:
        pass
    codes = frozenset(r.code for r in ALL_RULES if r.code.startswith(text.upper()))
    if not codes or not _PREFIX.fullmatch(text):
        raise UnknownRule(selector)
    return codes


def split_values(values: Iterable[str]) -> list[str]:
    """Repeated options and comma-separated lists are the same: `--select GA1,GA3` is `--select GA1 --select GA3`."""
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def parse_rules(values: Iterable[str]) -> frozenset[str]:
    return frozenset(c for v in split_values(values) for c in rule_codes(v))


@dataclass(frozen=True)
class IgnoreOp:
    """`GLOB` (every rule) or `RULE:GLOB`, matched against the op name of a finding."""

    text: str
    glob: str
    codes: frozenset[str] | None

    @classmethod
    def parse(cls, text: str) -> IgnoreOp:
        # TensorFlow op names cannot hold a colon, so one before the glob always names a rule.
        rule, sep, glob = text.strip().rpartition(":")
        if not glob or (sep and not rule.strip()):
            raise ValueError(f"{text!r}: expected GLOB or RULE:GLOB")
        return cls(text.strip(), glob, parse_rules([rule]) if sep else None)

    def matches(self, finding: Finding) -> bool:
        return (finding.op is not None and (self.codes is None or finding.code in self.codes)
                and fnmatch.fnmatchcase(finding.op.op_name, self.glob))


@dataclass(frozen=True)
class Policy:
    select: frozenset[str] | None = None  # None: every rule
    ignore: frozenset[str] = frozenset()
    ignore_ops: tuple[IgnoreOp, ...] = ()
    baseline: Baseline | None = None

    def selects(self, code: str) -> bool:
        return (self.select is None or code in self.select) and code not in self.ignore

    def apply(self, report: Report) -> Report:
        """A copy of `report` without unselected rules' findings, and with ignored-op and baseline findings
        marked suppressed (they are still reported, as known, and never fail the run)."""
        known = self.baseline.keys_for(report) if self.baseline else frozenset()
        findings = []
        for f in report.findings:
            if not self.selects(f.code):
                continue
            reason = f.suppressed or self._reason(f, known)
            findings.append(dataclasses.replace(f, suppressed=reason) if reason != f.suppressed else f)
        return dataclasses.replace(report, findings=findings)

    def _reason(self, finding: Finding, known: frozenset[Key]) -> str | None:
        for ig in self.ignore_ops:
            if ig.matches(finding):
                return f"ignore-ops {ig.text}"
        if known and identity(finding) <= known:
            return "baseline"
        return None
