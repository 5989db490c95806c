"""Helpers of the stability tests; the `audited` fixture (whole audits, cached) is in tests/conftest.py."""

from __future__ import annotations


def finding(report, rule: str):
    found = [f for f in report.findings if f.rule == rule]
    assert len(found) == 1, f"{rule}: {[(f.rule, f.message) for f in report.findings]}"
    return found[0]


def rules_of(report) -> set[str]:
    return {f.rule for f in report.findings}


def stability(report, source: str, output: str, scale: float):
    (row,) = [s for s in report.stability if (s.source, s.output, s.scale) == (source, output, scale)]
    return row
