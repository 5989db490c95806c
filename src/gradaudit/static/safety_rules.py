"""GA4xx detection: what TensorFlow would run for the audited signature, judged by the safety gate."""

from __future__ import annotations

from ..model import Finding, OpRef, Severity
from ..rules.flow import UnknownOp
from ..rules.safety import UnprovenOp, UnsafeAsset, UnsafeOp
from ..safety import assets, gate
from ..safety.package_ops import PACKAGE_OPS

_UNSAFE = ("io", "network", "process", "python")


def unsafe_findings(model, sig) -> list[Finding]:
    """unsafe-op findings (one per op), unproven-op findings (one per op type: a tokenizer's ops are one
    finding, not one per node) and unsafe-asset findings."""
    findings = []
    unproven: dict[str, list] = {}
    missing: dict[str, list] = {}
    for v in gate.check(model, sig):
        if v.cls == "missing":  # a reviewed package's op, not loaded: it cannot run here at all
            missing.setdefault(v.why, []).append(v)
        elif v.cls in _UNSAFE:
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
    for why, vs in missing.items():  # one line per package: a tokenizer's missing package is one fact
        types = sorted({v.op.op_type for v in vs})
        findings.append(UnknownOp.finding(
            f"{why} (the model holds {len(vs)} op(s) of it that this TensorFlow does not know: {', '.join(types)}); "
            "without it the model cannot be loaded here", op=vs[0].op, severity=Severity.INFO,
            fix=f"Audit with {PACKAGE_OPS[vs[0].op.op_type].load} where the package is installed for this "
                "TensorFlow: its ops are on gradaudit's reviewed list, so the model then runs without "
                "--allow-unsafe-ops."))
    findings.extend(UnsafeAsset.finding(p.message, op=OpRef("asset", p.name, "<assets>")) for p in assets.check(model))
    return findings


def check(analysis) -> list[Finding]:
    return unsafe_findings(analysis.model, analysis.signature)
