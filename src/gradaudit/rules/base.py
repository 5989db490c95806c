"""The Rule type: a stable code, a slug, a default severity and the documentation `explain` prints."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..model import Finding, OpRef, Severity

DOC_SECTIONS = ("What it does", "Why is this bad?", "Example", "Use instead")

# The facts a cut reason's template may name: the op's type, the integer dtypes it converts a float to, its
# custom gradient, the function that gradient is saved as, the compiled module that function runs, and what
# the gradient TensorFlow registered for the op raised.
REASON_FIELDS = ("t", "dtype", "cg", "fn", "module", "err")


@dataclass(frozen=True)
class Reason:
    """Why an op cuts gradient paths, in the words a finding of the rule that owns it opens with: a template
    over the cut's facts (REASON_FIELDS)."""

    template: str

    def text(self, op_type: str, *, dtype: str = "", custom_gradient: object = None, function: str = "",
             module: object = None, error: object = None) -> str:
        return self.template.format(t=op_type, dtype=dtype, cg=custom_gradient, fn=function, module=module,
                                    err=error)


@dataclass(frozen=True)
class Rule:
    code: str
    slug: str
    severity: Severity
    summary: str
    doc: str
    fix: str  # the default fix hint a finding carries
    blocks_execution: bool = False  # a finding of this rule: nothing of the model runs without --allow-unsafe-ops
    # its findings name an op that makes TensorFlow's gradient differ from the forward's derivative on purpose
    # or already reported (a cut, a sampler), so a numeric mismatch on those pairs is expected (a custom
    # gradient is not one: it is what the numeric checks test)
    explains_mismatch: bool = False
    # the severity of a cut found only on a path of a pair that other paths still connect (None: as always)
    partial_severity: Severity | None = None
    probes: bool = False  # the stability probes or second-order checks find it (on a probed copy too)
    # why an op cuts a gradient path, as this rule's findings say it: the first is the rule's own, the others
    # the special cases its documentation describes (named beside the rule in its family module)
    reasons: tuple[Reason, ...] = ()

    @property
    def reason(self) -> Reason:
        """The rule's own cut reason (a rule without one is no cut rule: IndexError)."""
        return self.reasons[0]

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


def define(code: str, slug: str, severity: Severity, *, fix: str, doc: str, **attributes) -> Rule:
    """A rule as plain data: `doc` (sections What it does, Why is this bad?, Example, Use instead) is what
    `gradaudit explain` prints, its first line the summary; `attributes` are the Rule's properties."""
    text = inspect.cleandoc(doc)
    return Rule(code=code, slug=slug, severity=severity, summary=text.splitlines()[0] if text else slug,
                doc=text, fix=fix, **attributes)


def rule(code: str, slug: str, severity: Severity, fix: str, **attributes):
    """Class decorator (the older spelling of `define`): the class docstring is the rule's documentation."""

    def make(cls: type) -> Rule:
        return define(code, slug, severity, fix=fix, doc=cls.__doc__ or "", **attributes)

    return make
