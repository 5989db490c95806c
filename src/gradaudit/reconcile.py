"""The one place where what the static pass found meets what running the model measured: `reconcile(static,
gate, runtime) -> Report`. Every rule of how one explains or judges the other is here, in this order:

1. the static findings, then the numeric checks' findings (where differentiating the loaded model raised as the
   static pass foresaw, the static finding of the op that makes it raise records TensorFlow's error and the
   checks' GA204 is left out: one cause, one finding);
2. the stability probes judge the static hazard lints (confirmed: an error that says where; reached and not
   seen to fail: info; out of their reach: the lint's own severity, saying so), and add their own findings,
   less the wrong gradients the checks already reported, and less the points where differentiating the model
   raised for the reason it raised at the checks' own point (one cause, the checks' GA204: a note);
3. the precision stage's findings;
4. requested checks that could not run or decided nothing make the audit incomplete;
5. a gradient mismatch on a pair that a static cut crosses is what the cut does (info, or a warning when a
   custom gradient shares the pair), and its numeric row says so;
6. findings sorted by severity, code and op.

It reads values only (results.py): no TensorFlow, no graph, no stage.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .model import ALL_VARIABLES, Finding, FlowEntry, LocalCheck, Note, NumericResult, OpRef, Report, Severity
from .results import Gate, HazardVerdict, NumericPart, RaisedAt, RuntimeResult, StaticResult
from .rules import get_rule

FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64", "half", "double"})


def reconcile(static: StaticResult, gate: Gate, runtime: RuntimeResult | None = None) -> Report:
    """The Report of one audit, from its stages' values (runtime None: nothing ran)."""
    runtime = runtime or RuntimeResult()
    findings: list[Finding] = list(static.findings)
    numeric: list[NumericResult] = []
    notes: list[Note] = list(static.notes)
    incomplete: list[str] = list(gate.reasons)

    def note(made: Iterable[Note]) -> None:  # each line once, with the stage that wrote it first
        seen = {n.text for n in notes}
        for n in made:
            if n.text not in seen:
                notes.append(n)
                seen.add(n.text)

    if runtime.numeric is not None:
        numeric.extend(runtime.numeric.results)
        findings = refuted_disconnections(foreseen_raise(findings, runtime.numeric, static))
        note(runtime.numeric.notes)
    probes = runtime.probes
    if probes is not None:
        numeric.extend(probes.numeric)
        findings = judge_hazards(findings, probes.verdicts) + not_yet_reported(findings, probes.findings)
        note(probes.notes)
        raised, same = raising_points(probes.raised, runtime.numeric.raised if runtime.numeric else None)
        findings.extend(raised)
        note(same)
        if probes.stopped:
            incomplete.append(f"stability probes stopped: {probes.stopped}")
        _extend_once(incomplete, probes.incomplete)
    if runtime.precision is not None:
        findings.extend(runtime.precision.findings)
        note(runtime.precision.notes)
        incomplete.extend(runtime.precision.incomplete)
    if runtime.stopped:
        incomplete.append(runtime.stopped)
    report = Report(target=static.target, sources=list(static.sources), outputs=list(static.outputs),
                    flow=list(static.flow), findings=findings, numeric=numeric,
                    stability=list(probes.results) if probes else [], notes=notes,
                    seed=gate.seed, paths=list(static.paths), incomplete=incomplete, isolation=runtime.isolation,
                    precision=list(runtime.precision.results) if runtime.precision else [], local=_local(runtime),
                    runtime_stopped=runtime.stopped is not None)
    _extend_once(report.incomplete, not_checked(report, gate.inputs_given))
    if report.numeric:
        report = _with_cuts_explained(report)
    report.findings.sort(key=lambda f: (-f.severity.rank, f.code, f.op.function if f.op else "",
                                        f.op.op_name if f.op else "", f.message))
    return report


def foreseen_raise(findings: list[Finding], part: NumericPart, static: StaticResult) -> list[Finding]:
    """The static findings and the numeric checks' findings, where differentiating the loaded model raised as the
    static pass said it would (pairs `raises`: an op whose gradient raises or is missing makes TensorFlow refuse
    the whole signature's backward): one cause, so the static finding of that op records the run's evidence
    (`confirmed_by`, TensorFlow's reason) and the checks' GA204 is left out (their note says it too)."""
    raising = {c.op for e in static.flow if e.raises for c in e.blocked_by}
    cause = [f for f in findings if f.op in raising and f.severity is Severity.ERROR]
    if part.raised is None or not cause:
        return [*findings, *part.findings]
    evidence = f"differentiating the loaded model raises at the numeric checks' point: {part.raised}"
    confirmed = [replace(f, confirmed_by=evidence, message=f"{f.message}. Confirmed at run time: {evidence}")
                 if f in cause else f for f in findings]
    return [*confirmed, *(f for f in part.findings if f.rule != "missing-gradient")]


def unseen_parts(findings: list[Finding], flow: list[FlowEntry], rows: list[NumericResult],
                 variables: set[str]) -> list[Finding]:
    """A cut the static pass warns about because it leaves one path's part out of a connected pair's gradient
    (the op's gradient is missing for that input), where the numeric check of every such pair passed at the
    checks' own point: the part is not seen there (zero, as through `0 * x`, or below the check's resolution).
    Info then, with the checks that say so as its evidence (`probed`)."""
    partial: dict[OpRef, set[tuple[str, str]]] = {}
    blocking: set[OpRef] = set()
    for e in flow:
        for c in e.partial_by:
            partial.setdefault(c.op, set()).add((e.source, e.output))
        blocking.update(c.op for c in e.blocked_by)

    def passed(source: str, output: str) -> NumericResult | None:
        return next((n for n in rows if n.scale is None and n.status == "pass" and not n.expected_by
                     and not n.every_source
                     and (n.source == source or (n.source == ALL_VARIABLES and source in variables))
                     and (n.outputs.every or output in n.outputs.names)), None)

    out = []
    for f in findings:
        # a partial cut's warning, or a read-back's error (GA113 is an error where it cuts a part: the numeric checks
        # then decide whether that part is there, as tf.stop_gradient's straight-through h - stop_gradient(h) makes up)
        lowered = f.severity is Severity.WARNING or f.rule == "variable-state"
        pairs = partial.get(f.op) if f.op is not None and lowered else None
        checks = [passed(s, o) for s, o in sorted(pairs)] if pairs and f.op not in blocking else []
        if not checks or any(c is None for c in checks):
            out.append(f)
            continue
        said = "; ".join(dict.fromkeys(
            f"{c.source} to {c.outputs.label}: rel. error {c.rel_error:.1e} in {c.dtype}" if c.rel_error is not None
            else f"{c.source} to {c.outputs.label}" for c in checks if c is not None))
        evidence = f"the numeric checks at the synthesised point agree with the derivative ({said})"
        out.append(replace(f, severity=Severity.INFO, probed=evidence, message=(
            f"{f.message}. Not seen by the numeric checks: {evidence}, so the part this path leaves out is zero "
            "there or below their resolution")))
    return out


def raising_points(raised: tuple[RaisedAt, ...], at_checks: str | None) -> tuple[list[Finding], list[Note]]:
    """The findings of the probe points where differentiating the model raised, and a note instead of each whose
    reason is the one it raised for at the numeric checks' own point (`at_checks`: one cause, their GA204)."""
    findings, notes = [], []
    for r in raised:
        if at_checks is not None and r.reason == at_checks:
            notes.append(Note("stability", f"Stability probes: TensorFlow raises differentiating the model at "
                              f"{len(r.points)} probe point(s) for the reason it raises at the numeric checks' point "
                              "(the missing-gradient finding): nothing else could be observed there."))
        else:
            findings.append(r.finding)
    return findings, notes


def _local(runtime: RuntimeResult) -> list[LocalCheck]:
    """The local checks at the numeric checks' point, then at the probe points."""
    return [*(runtime.numeric.local if runtime.numeric else ()), *(runtime.probes.local if runtime.probes else ())]


def _extend_once(lines: list[str], more: Iterable[str]) -> None:
    lines.extend(line for line in more if line not in lines)


def refuted_disconnections(findings: list[Finding]) -> list[Finding]:
    """The findings without a GA108 that calls a variable disconnected where a missing-gradient finding shows an
    output moving with it (numeric/unseen.py): the static claim is refuted, the GA204 says what is true."""
    moving = {s for f in findings if f.rule == "missing-gradient" for s in f.sources}
    return [f for f in findings if not (f.rule == "disconnected-source" and f.severity is not Severity.INFO
                                        and f.sources and set(f.sources) <= moving)]


def judge_hazards(findings: list[Finding], verdicts: tuple[HazardVerdict, ...]) -> list[Finding]:
    """The findings, with each static hazard the probes saw fail raised to an error that says where, and each
    one they reached without seeing it fail lowered to info (a --static-only run keeps its warning)."""
    by_key = {v.key: v for v in verdicts}

    def judged(f: Finding) -> Finding:
        v = by_key.get(HazardVerdict.key_of(f))
        if v is None:
            return f
        if v.confirmed_by is not None:
            return replace(f, severity=Severity.ERROR, confirmed_by=v.confirmed_by,
                           message=f"{f.message}. Confirmed by the stability probes: {v.confirmed_by}.")
        if v.probed is not None:
            return replace(f, severity=Severity.INFO, probed=v.probed,
                           message=f"{f.message}. Not confirmed by the stability probes ({v.probed})")
        if v.unreached is not None:  # no evidence either way: the static lint's own severity stands, and says why
            return replace(f, message=f"{f.message}. Not judged by the stability probes: {v.unreached}")
        return f

    return [judged(f) for f in findings]


def not_yet_reported(known: list[Finding], findings: tuple[Finding, ...]) -> list[Finding]:
    """The probes' findings without the gradient mismatches already reported for the same sources and op: one
    wrong gradient seen at the synthesised point and again at a probe point is one finding (the probe point's
    row stays in the numeric table)."""

    def op_key(f: Finding) -> tuple[str, str] | None:
        return (f.op.op_type, f.op.op_name) if f.op else None

    # an error already reported; a warning (an op's own error the model masks at one point) does not hide one
    seen = {(op_key(f), s) for f in known if f.rule == "gradient-mismatch" and f.severity is Severity.ERROR
            for s in f.sources}
    return [f for f in findings if f.rule != "gradient-mismatch" or not f.sources
            or not all((op_key(f), s) in seen for s in f.sources)]


def not_checked(report: Report, inputs_given: bool) -> list[str]:
    """Requested checks that could not run, or ran without deciding anything: one incomplete line per kind."""
    lines = []
    errors = [n for n in report.numeric if n.status == "error"]
    if errors:
        first = next((n.reason for n in errors if n.reason), "no reason given")
        lines.append(f"{len(errors)} numeric check(s) could not run (first: {first})")
    unbuilt = [n for n in report.numeric if n.status == "skipped" and n.cause == "no_input"]
    if unbuilt:  # the checks were requested and never ran: no point to run them at
        lines.append(f"numeric checks did not run: {unbuilt[0].reason}")
    undecided = undecided_sources(report)
    if undecided:
        row = next((n for n in report.numeric if n.source in undecided and n.reason), None)
        why = row.reason if row is not None else None
        # real examples decide unless two runs at the same point differ; a reason about the synthesised inputs
        # already says to give them
        hint = ("" if inputs_given or (row is not None and row.cause in ("nondeterministic", "synthesised_inputs"))
                else "; pass real examples with --inputs")
        lines.append(f"no numeric check could decide the gradient of {', '.join(undecided)}"
                     + (f" ({why})" if why else "") + hint)
    return lines


def undecided_sources(report: Report) -> list[str]:
    """Differentiable sources with a connected output that numeric checks ran for, none of which decided
    (pass, fail, or a difference a named cut or sampler explains): inconclusive everywhere, or not reported."""
    if not report.numeric or all(n.status == "error" for n in report.numeric):
        return []
    every = {s.name for s in report.sources}
    variables = {s.name for s in report.sources if s.kind == "variable"}
    connected = {e.source for e in report.flow if e.status == "connected"}
    decided: set[str] = set()
    checked: set[str] = set()
    unsettled: set[str] = set()  # undecided at the inputs given, whatever other points decide
    for n in report.numeric:  # a row for every source at once (skipped, error) is not the variables' check
        names = every if n.every_source else variables if n.source == ALL_VARIABLES else {n.source}
        if n.status != "skipped":
            checked |= names
        if n.status in ("pass", "fail") or n.expected_by:
            decided |= names
        if n.unsettled:
            unsettled |= names
    decided -= unsettled
    for f in report.findings:  # a straight-through estimator found: the check did decide what the gradient is
        if f.rule == "surrogate-gradient":
            decided |= variables if ALL_VARIABLES in f.sources else set(f.sources)
    return sorted((checked & connected) - decided)


def _custom_gradient_beside(findings: list[Finding], mismatch: Finding, cut: Finding) -> Finding | None:
    """The custom-gradient finding (GA107) on a path of the mismatch's pairs, if any, when the cut is a
    stop_gradient (a sampler's own saved gradient is the estimator its cut stands for)."""
    if cut.rule != "stop-gradient":
        return None
    for f in findings:
        if f.rule == "custom-gradient" and f.op is not None and set(f.sources) & set(mismatch.sources) and (
                not mismatch.outputs or set(f.outputs) & set(mismatch.outputs)):
            return f
    return None


def _missed_part_measured(cut: Finding, measurement: str) -> Finding:
    """A cut the static pass warned leaves out a real part of a pair's gradient (an op whose derivative
    TensorFlow does not implement for that input, not a piecewise-constant one), where the numeric checks measure
    that part missing: an error, the measurement its evidence (`confirmed_by`). The mismatch it explains is info,
    naming it: one cause, one error. A deliberate cut (stop_gradient) and a zero-derivative one stay as they are."""
    if cut.rule != "not-differentiable" or cut.severity is not Severity.WARNING:
        return cut
    evidence = f"the numeric checks measure the part it leaves out: {measurement}"
    return replace(cut, severity=Severity.ERROR, confirmed_by=evidence, message=f"{cut.message}. Confirmed: {evidence}")


def _measurement(f: Finding) -> str:
    """A finding's message without its advice on where to look (`advice`, the message's last part)."""
    if f.advice and f.message.endswith(f.advice):
        return f.message[:len(f.message) - len(f.advice)]
    return f.message


def _explained(f: Finding, cut: Finding, findings: list[Finding]) -> Finding:
    """A gradient mismatch that `cut` explains: info naming the cut, or a warning when a custom gradient on the
    pair's other paths may add a difference of its own (the check measures their sum)."""
    assert cut.op is not None
    measured = _measurement(f).rstrip(".")
    custom = _custom_gradient_beside(findings, f, cut)
    if custom is not None and custom.op is not None:
        return replace(f, severity=Severity.WARNING, advice=None, message=(
            f"{measured}. {cut.op.op_type} '{cut.op.op_name}' ({cut.code} {cut.rule}) makes the gradient differ "
            f"from the derivative on purpose, and the custom gradient of {custom.op.short} lies on the pair's other "
            f"paths: the check cannot tell a difference of the cut from a wrong custom gradient."), fix=(
            f"Check the custom gradient of {custom.op.short} on its own (a model without {cut.op.short}, or the "
            f"function alone); nothing else to do if both are right."))
    return replace(f, severity=Severity.INFO, advice=None, message=(
        f"{measured}. Expected: {cut.op.op_type} '{cut.op.op_name}' explains it ({cut.code} {cut.rule}: "
        f"{get_rule(cut.rule).summary})"), fix=f"Nothing to do if {cut.op.short} is intended: the difference is "
                                               f"what it does (see {cut.code}).")


def _with_cuts_explained(report: Report) -> Report:
    """The report with its numeric mismatches explained by the flow's cuts, and the parts they leave out."""
    variables = {s.name for s in report.sources if s.kind == "variable"}
    floats = tuple(o.name for o in report.outputs if o.dtype in FLOAT_DTYPES)
    partial = frozenset((f.source, c.op) for f in report.flow for c in f.partial_by)
    flat = frozenset(c.op for f in report.flow for c in f.partial_by + f.blocked_by if c.piecewise is True)
    explained, rows = explain_mismatches(report.findings, report.numeric, variables, floats, partial, flat)
    return replace(report, findings=unseen_parts(explained, report.flow, rows, variables), numeric=rows)


def explain_mismatches(findings: list[Finding], numeric: list[NumericResult], variables: set[str],
                       float_outputs: tuple[str, ...] = (), partial: frozenset[tuple[str, OpRef]] = frozenset(),
                       flat: frozenset[OpRef] = frozenset()) -> tuple[list[Finding], list[NumericResult]]:
    """A gradient-mismatch on a pair where the static pass found a cut on one of the paths is what that
    cut does: `y = f(x) + tf.stop_gradient(g(x))` has a gradient that leaves out g on purpose. Such a
    mismatch becomes info, naming the cut; the numeric result keeps `fail` with the explanation. `partial`:
    (source, cut op) of the flow's partial cuts (a cut crossing a pair that other paths still connect); a check
    of the variables together ("*") is explained by such a cut only when it crosses one of them partially (a
    variable the cut blocks entirely is not in that check). Cuts the flow does not record (a sampler's
    estimator, a variable the signature writes) explain it as before. `flat`: the cuts' ops that are piecewise
    constant where they cut: their zero gradient is the derivative finite differences see too, so they explain
    no mismatch (round(3x) + f(x) with a wrong custom gradient for f differs by f's error, not by the Round)."""
    # static cuts make TensorFlow's gradient differ from the forward's derivative on purpose (or are
    # already reported by the static pass)
    cuts = [f for f in findings if get_rule(f.rule).explains_mismatch and f.op is not None and f.op not in flat]

    def cut_for(source: str, outputs: tuple[str, ...]) -> Finding | None:
        for c in cuts:
            flow_cut = any(op == c.op for _, op in partial)
            src_ok = source in c.sources or (source == ALL_VARIABLES and any(
                s in variables and (not flow_cut or (s, c.op) in partial) for s in c.sources))
            # every output the check combined must be one the cut explains: a cut on a second output
            # must not excuse a wrong gradient of the first
            checked = outputs or float_outputs
            if src_ok and all(o in c.outputs for o in checked):
                return c
        return None

    out_findings = []
    measured: dict[OpRef, str] = {}  # a cut's op -> the mismatch it explains, as measured
    for f in findings:
        cut = cut_for(f.sources[0], f.outputs) if (
            f.rule == "gradient-mismatch" and f.sources and f.severity == Severity.ERROR
            and not f.confirmed_by) else None
        if cut is not None and cut.op is not None:
            measured.setdefault(cut.op, _measurement(f).rstrip(". "))
        out_findings.append(_explained(f, cut, findings) if cut is not None else f)
    out_findings = [_missed_part_measured(f, measured[f.op]) if f.op in measured else f for f in out_findings]
    out_numeric = [_row_explained(n, cut_for(n.source, n.outputs.names))
                   if n.status == "fail" and n.expected_by is None else n for n in numeric]
    return out_findings, out_numeric


def _row_explained(n: NumericResult, cut: Finding | None) -> NumericResult:
    """A failing numeric row that `cut` explains (None: none does) says so; a sampler's estimator cannot be judged
    by differences at a fixed seed: inconclusive, not a fail."""
    if cut is None or cut.op is None:
        return n
    return replace(n, status="inconclusive" if cut.rule == "sampler-gradient" else n.status,
                   reason=f"expected: {cut.op.short} ({cut.rule}) explains it",
                   expected_by=f"{cut.op.short} ({cut.rule})")
