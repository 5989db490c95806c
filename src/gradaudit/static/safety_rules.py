"""GA4xx detection: what TensorFlow would run for the audited signature, judged by the safety gate."""

from __future__ import annotations

from ..model import Finding, OpRef
from ..rules.safety import UnprovenOp, UnsafeAsset, UnsafeOp
from ..safety import assets, gate

_UNSAFE = ("io", "network", "process", "python")


def unsafe_findings(model, sig) -> list[Finding]:
    """unsafe-op findings (one per op), unproven-op findings (one per op type: a tokenizer's ops are one
    finding, not one per node) and unsafe-asset findings."""
    findings = []
    unproven: dict[str, list] = {}
    for v in gate.check(model, sig):
        if v.cls in _UNSAFE:
            findings.append(UnsafeOp.finding(
                f"{v.op.label} {v.why}; it runs from {v.root}", op=v.op))
        else:
            unproven.setdefault(v.op.op_type, []).append(v)
    if unproven:  # one finding for them all: a tokenizer's ops are one fact, not a warning per op
        first = next(iter(unproven.values()))[0]
        others = [f"{t} ({len(vs)})" if len(vs) > 1 else t for t, vs in list(unproven.items())[1:]]
        more = f"; also not proven safe: {', '.join(others)}" if others else ""
        count = sum(len(vs) for vs in unproven.values())
        findings.append(UnprovenOp.finding(
            f"{first.op.label} {first.why}; it runs from {first.root}{more} ({count} op(s) in all)", op=first.op))
    findings.extend(UnsafeAsset.finding(p.message, op=OpRef("asset", p.name, "<assets>")) for p in assets.check(model))
    return findings


def check(analysis) -> list[Finding]:
    return unsafe_findings(analysis.model, analysis.signature)
