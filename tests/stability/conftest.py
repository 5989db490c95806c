"""Full audits (static pass, numeric checks, stability probes) of the sample models, each run once."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def audited(samples):
    """audited(name, **AuditOptions fields) -> Report of the whole audit (cached)."""
    from gradaudit.api import AuditOptions, audit_saved_model

    cache = {}

    def get(name: str, **options):
        key = (name, tuple(sorted(options.items())))
        if key not in cache:
            cache[key] = audit_saved_model(os.path.join(samples, name), AuditOptions(**options))
        return cache[key]

    return get


def finding(report, rule: str):
    found = [f for f in report.findings if f.rule == rule]
    assert len(found) == 1, f"{rule}: {[(f.rule, f.message) for f in report.findings]}"
    return found[0]


def rules_of(report) -> set[str]:
    return {f.rule for f in report.findings}


def stability(report, source: str, output: str, scale: float):
    (row,) = [s for s in report.stability if (s.source, s.output, s.scale) == (source, output, scale)]
    return row
