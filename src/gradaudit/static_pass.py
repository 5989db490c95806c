"""The static pass, the audit's first stage: a target's graph in, a StaticResult out (the flow of every
(source, output) pair, every static rule family's findings, where blocked paths die). Nothing runs the model."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from .errors import GradauditError, InternalError
from .model import Finding, Note, Target
from .progress import say
from .results import StaticResult

if TYPE_CHECKING:
    from .flow import StaticAnalysis
    from .targets import AuditTarget
    from .targets.saved_model import SignatureGraph

# What a parsed but inconsistent graph raises inside the static pass (dangling references, missing
# outputs, wrong attribute kinds): reported as a load error, exit 2.
MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError, RecursionError, MemoryError,
             UnicodeDecodeError)


def run_static(model: AuditTarget, sig: SignatureGraph, target: Target) -> StaticResult:
    """The static pass on any target (`model`: its parse, a targets.AuditTarget; `sig`: the signature's graph).
    A graph too large or inconsistent to analyse is the model's fault (exit 2); a rule that raises is
    gradaudit's (InternalError, with the report as far as it got)."""
    from .flow import analyse
    from .graph.dataflow import GraphTooLarge
    from .graph.gradients import GradientOracle
    from .paths import blocked_paths
    from .safety.gate import is_pure

    say("static pass: gradient flow")
    try:
        # iterative: no recursion on the graph's depth; an op's kernel may run on synthetic values (to tell a
        # piecewise constant op from one whose derivative TensorFlow does not implement) only if it is pure
        analysis = analyse(model, sig, GradientOracle(may_run=is_pure))
    except GraphTooLarge as exc:
        raise GradauditError(f"{target.path}: the static pass cannot analyse {target.signature!r}: {exc}") from None
    except MALFORMED as exc:  # a protobuf that parses but does not describe a consistent graph
        detail = str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
        raise GradauditError(f"{target.path}: malformed model, the graph of {target.signature!r} cannot be "
                             f"analysed ({exc.__class__.__name__}: {detail})") from None
    notes = [*analysis.notes, *_left_out(model, target)]
    result = StaticResult(target=target, sources=tuple(analysis.sources), outputs=tuple(analysis.outputs),
                          flow=tuple(analysis.flow), findings=(), paths=(),
                          notes=tuple(Note("static", n) for n in notes), analysis=analysis, model=model)
    return replace(result, findings=tuple(_rules_check(analysis, result)), paths=tuple(blocked_paths(analysis)))


def _left_out(model: AuditTarget, target: Target) -> list[str]:
    """A note naming the model's other signatures, which this audit does not cover (a CI gate that audits
    serving_default says nothing of a `quantized` or `train` one)."""
    others = model.other_signatures(target.signature) if target.signature else []
    if not others:
        return []
    return [f"This audit covers signature {target.signature!r}; the model has {len(others)} other signature(s), "
            f"not audited here: {', '.join(others)} (audit one with --signature NAME, every one with "
            "--all-signatures)."]


def _rules_check(analysis: StaticAnalysis, partial: StaticResult) -> list[Finding]:
    """Every static rule family; a rule that raises is gradaudit's bug, not the model's."""
    from .reconcile import reconcile
    from .results import Gate
    from .static import STATIC_CHECKS

    findings: list[Finding] = []
    for check in STATIC_CHECKS:
        try:
            findings.extend(check(analysis))
        except Exception as exc:
            report = reconcile(replace(partial, findings=tuple(findings)), Gate(run=False))
            raise InternalError(f"running the static rules ({check.__module__}.{check.__name__})", exc,
                                report) from exc
    return findings
