"""From probe observations to findings: one unstable-gradient or nonfinite-forward finding per op at fault
(listing the outputs and sources it reaches), and the static hazards whose ops the probes saw fail."""

from __future__ import annotations

from dataclasses import replace

from ..model import Finding, OpRef, Severity
from ..results import HazardVerdict
from ..rules import hazards as rules
from ..static.hazards import Hazard
from .probes import GIVEN, GRADIENT, Observation


def values_text(values: set[str]) -> str:
    """{"nan", "-inf"} -> "NaN or -inf"."""
    parts = ["NaN"] if "nan" in values else []
    infs = values & {"inf", "-inf"}
    parts += ["±inf"] if len(infs) == 2 else sorted(infs)
    return " or ".join(parts)


# The fix for the op a probe names, where the rule's general one (stable forms of exp and log) does not fit.
_DIVISION = ("Keep the denominator away from zero: add an epsilon (x / (s + eps)), or use tf.math.divide_no_nan "
             "where a zero denominator should give a zero result.")
_FIX_BY_OP = {
    **dict.fromkeys(("RealDiv", "Div", "DivNoNan", "Reciprocal", "Inv", "Xdivy", "FloorDiv", "TruncateDiv"),
                    _DIVISION),
    **dict.fromkeys(("Sqrt", "Rsqrt"), "Add an epsilon under the square root (sqrt(s + eps)), or take the square "
                                       "root only where the argument is positive (a double tf.where)."),
    **dict.fromkeys(("Log", "Xlogy"), "Keep the argument of the log positive (log(x + eps), a clip), or use the "
                                      "log-space form of what it computes (log_sigmoid, log_softmax, logsumexp)."),
}


def _scales(obs: list[Observation]) -> str:
    """"100, 300", with "the inputs given with --inputs" for an observation made there."""
    said = [f"{s:g}" for s in sorted({o.scale for o in obs} - {GIVEN})]
    return ", ".join(said + (["the inputs given with --inputs"] if any(o.scale == GIVEN for o in obs) else []))


def ladder_findings(reported: list[tuple[str, str, Observation]], inputs: list[str],
                    hazards: list[Hazard], scales: list[float] | None = None
                    ) -> tuple[list[Finding], list[HazardVerdict]]:
    """(findings, verdicts): the ladder's own findings, and what it saw of each static hazard lint: confirmed
    (the evidence), or reached (an input it scaled feeds the hazard) and not confirmed (where it probed)."""
    # One cause, one finding: the same kind of failure first made by the same op is one finding that lists the
    # outputs and sources it reaches (an overflow inside expm reaches every output computed from it). Where no op
    # was located, the cause is unknown: one finding per output.
    groups: dict[tuple[int, OpRef | None, str | None], list[tuple[str, str, Observation]]] = {}
    for source, output, obs in reported:
        op = obs.culprit.op if obs.culprit else None
        groups.setdefault((obs.kind, op, None if op is not None else output), []).append((source, output, obs))
    return _ladder_findings(groups, inputs, hazards), _hazard_verdicts(reported, inputs, hazards, scales)


def _hazard_verdicts(reported: list[tuple[str, str, Observation]], inputs: list[str], hazards: list[Hazard],
                     scales: list[float] | None) -> list[HazardVerdict]:
    """Per hazard lint (by its finding's identity, the first of equal ones): where the probes saw it fail,
    else where they reached it."""
    ladder = f"scales ±{', ±'.join(f'{s:g}' for s in scales)}" if scales else "the probe ladder"
    verdicts: dict[tuple, HazardVerdict] = {}
    for h in hazards:
        f = h.finding()
        key = HazardVerdict.key_of(f)
        if key in verdicts:
            continue
        seen = [obs for _, _, obs in reported if _confirms(obs, h)]
        culprit = seen[0].culprit if seen else None
        scaled = [s for s in h.sources if s in inputs]
        if seen and culprit is not None:
            what = "gradient" if seen[0].kind == GRADIENT else "value"
            verdicts[key] = HazardVerdict(*key, confirmed_by=(
                f"{values_text({seen[0].value})} {what} at {seen[0].where(inputs)}, first from "
                f"{culprit.op.label}: {culprit.detail}"))
        elif scaled:
            verdicts[key] = HazardVerdict(*key, probed=f"{', '.join(scaled)} at {ladder}")
        else:  # its op reads only what the ladder does not scale (variables, integer inputs): not judged
            what = ", ".join(h.sources) if h.sources else "no differentiable source"
            verdicts[key] = HazardVerdict(*key, unreached=(
                f"they scale the float inputs ({', '.join(inputs)}), and its op is reached from {what} only"))
    return list(verdicts.values())


def _confirms(obs: Observation, h: Hazard) -> bool:
    """Whether the op the forensics located for `obs` is the hazard lint `h`'s (or the one suspect inside the function
    it ran is): the lint is then confirmed, an error with this observation as its evidence."""
    c = obs.culprit
    return c is not None and (c.op in h.involved or (len(c.suspects) == 1 and c.suspects[0] in h.involved))


def _ladder_findings(groups, inputs: list[str], hazards: list[Hazard]) -> list[Finding]:
    """One finding per group of non-finite observations with one cause."""
    findings = []
    for (kind, op, _), items in groups.items():
        observed = [o for _, _, o in items]
        outputs = tuple(dict.fromkeys(o for _, o, _ in items))
        if kind == GRADIENT:
            sources = tuple(dict.fromkeys(s for s, _, _ in items))
            text, rule = _gradient_text(items, inputs, outputs), rules.UnstableGradient
        else:
            sources = tuple(dict.fromkeys(n for o in observed for n in o.config))
            text, rule = _forward_text(observed, inputs, outputs), rules.NonfiniteForward
        text += _cause_text(observed[0], op, hazards) + _through_text(items)
        severity = None
        if op is not None and any(_confirms(observed[0], h) for h in hazards):
            # the lint on the op is the error (confirmed, with this evidence): one cause, one error
            text += " That hazard is the error; this finding is its evidence."
            severity = Severity.INFO
        # the true result is an ordinary number of the model's dtype while the gradient there is NaN/Inf too: the
        # written form overflows, not the value, and a training step on such an input breaks
        fitting = next((o for o in observed if o.fits and o.gradient), None) if kind != GRADIENT else None
        if fitting is not None and severity is None and not _linted(fitting, op, hazards):
            text += (f" The true value there is finite and fits in the model's dtype ({fitting.fits} by the float64 "
                     f"copy at {fitting.where(inputs)}), and the gradient is {fitting.gradient} there: an intermediate "
                     "of this form overflows where the result does not, so training on such an input fails where "
                     "a stable form would not.")
            severity = Severity.ERROR
        finding = rule.finding(text, op=op, sources=sources, outputs=outputs, severity=severity)
        fix = _FIX_BY_OP.get(op.op_type) if op is not None else None
        findings.append(replace(finding, fix=fix) if fix else finding)
    return findings


def _where_seen(observed, inputs: list[str]) -> str:
    """"at input scale(s) 100, 300 (e.g. ...)", or "at the inputs given with --inputs" when only seen there."""
    if all(o.scale == GIVEN for o in observed):
        return "at the inputs given with --inputs"
    return f"at input scale(s) {_scales(observed)} (e.g. {observed[0].where(inputs)})"


def _gradient_text(items, inputs: list[str], outputs: tuple[str, ...]) -> str:
    """What non-finite gradients of finite outputs were seen, and where."""
    observed = [o for _, _, o in items]
    named = ", ".join(outputs)
    several = len(outputs) > 1
    sources = tuple(dict.fromkeys(s for s, _, _ in items))
    return (f"The gradient{'s' if several else ''} of {named} with respect to {', '.join(sources)} "
            f"{'are' if several else 'is'} {values_text({o.value for o in observed})} while "
            f"{'those outputs are' if several else f'{named} is'} finite, {_where_seen(observed, inputs)}")


def _forward_text(observed, inputs: list[str], outputs: tuple[str, ...]) -> str:
    """What non-finite outputs were seen, where, and whether their gradients stayed finite."""
    named = ", ".join(outputs)
    several = len(outputs) > 1
    text = f"{named} {'are' if several else 'is'} {values_text({o.value for o in observed})} " + _where_seen(
        observed, inputs)
    if not any(o.gradient for o in observed):
        text += f"; {'their gradients stay' if several else 'its gradient stays'} finite there"
    return text


def _through_text(items) -> str:
    """For outputs whose own backward is finite where their gradient is not: which output's backward made it."""
    through: dict[str, str] = {}
    for _, output, obs in items:
        if obs.through:
            through.setdefault(output, obs.through)
    return "".join(f" {output}'s own backward is finite there: TensorFlow runs the signature's whole backward (zero "
                   f"cotangents for the other outputs), so the NaN/Inf made in {other}'s backward reaches it (0 × inf)."
                   for output, other in through.items())


def _linted(first, op, hazards: list[Hazard]) -> list[Hazard]:
    """The static hazard lints reported on the op at fault, as the first observation's forensics located it (the
    op, or the suspects inside the function it ran)."""
    if first.culprit is None or op is None:
        return []
    inside = set(first.culprit.suspects)
    return [h for h in hazards if op in h.involved or inside & h.involved]


def _cause_text(first, op, hazards: list[Hazard]) -> str:
    """The op at fault as the first observation's forensics located it (or that they could not), and the static
    hazards reported on it."""
    if first.culprit is None or op is None:
        return ". The op at fault could not be located" + (f": {first.note}." if first.note else ".")
    text = f". First non-finite value from {op.label}: {first.culprit.detail}."
    linted = sorted({f"{h.rule.code} {h.rule.slug}" for h in _linted(first, op, hazards)})
    if linted:
        text += f" The hazard {', '.join(linted)} is reported there."
    return text
