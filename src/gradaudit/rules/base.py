"""The Rule type: a stable code, a slug, a default severity and the documentation `explain` prints."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..model import Finding, OpRef, Severity

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")


@dataclass(frozen=True)
class Rule:
    code: str
    slug: str
    severity: Severity
    summary: str
    doc: str
    fix: str  # the default fix hint a finding carries
    blocks_execution: bool = False  # a finding of this rule: nothing of the model runs without --allow-unsafe-ops

    def finding(
        self,
        message: str,
        *,
        op: OpRef | None = None,
        sources: tuple[str, ...] | list[str] = (),
        outputs: tuple[str, ...] | list[str] = (),
        fix: str | None = None,
        severity: Severity | None = None,
    ) -> Finding:
        return Finding(
            code=self.code,
            rule=self.slug,
            severity=severity or self.severity,
            message=message,
            fix=fix or self.fix,
            op=op,
            sources=tuple(sources),
            outputs=tuple(outputs),
        )


def rule(code: str, slug: str, severity: Severity, fix: str, blocks_execution: bool = False):
    """Class decorator: the class docstring is the rule's documentation, its first line the summary."""

    def make(cls: type) -> Rule:
        doc = inspect.cleandoc(cls.__doc__ or "")
        return Rule(code=code, slug=slug, severity=severity,
                    summary=doc.splitlines()[0] if doc else slug, doc=doc, fix=fix,
                    blocks_execution=blocks_execution)

    return make
