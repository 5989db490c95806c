"""GA1xx detection: the static gradient-flow findings, from a finished StaticAnalysis (flow.py)."""

from __future__ import annotations

from ..flow import PYFUNC_OPS, breaks_the_function
from ..graph.dataflow import STATE_WRITES
from ..graph.dtypes import carries_gradient, dtype_name
from ..model import Finding, Severity
from ..rules.base import Reason
from ..rules.flow import (
    ACTIVATION_BACKWARD,
    COMPILED_GRADIENT_DEAD,
    CUSTOM_GRADIENT_DEAD,
    NOT_IMPLEMENTED,
    RULES,
    ZERO_GRADIENT_UNMEASURED,
    CustomGradient,
    DisconnectedSource,
    PyFunction,
    SamplerGradient,
    UnknownOp,
    WritesVariable,
)
from ..safety.package_ops import PACKAGE_OPS

# Op type prefixes of well-known op libraries: the package --load-ops should import.
OP_PACKAGES: tuple[tuple[str, str], ...] = (
    ("SimpleML", "tensorflow_decision_forests"),
    ("YggdrasilDecisionForest", "tensorflow_decision_forests"),
    ("YggdrasilModel", "tensorflow_decision_forests"),
    ("Addons>", "tensorflow_addons"),
    ("IO>", "tensorflow_io"),
    ("Scann", "scann"),
    ("Sentencepiece", "tensorflow_text (or sentencepiece)"),
    ("WhitespaceTokenize", "tensorflow_text"),
    ("UnicodeScriptTokenize", "tensorflow_text"),
    ("WordpieceTokenize", "tensorflow_text"),
    ("FastWordpiece", "tensorflow_text"),
    ("FastBertNormalize", "tensorflow_text"),
    ("RegexSplitWithOffsets", "tensorflow_text"),
    ("NormalizeUTF8", "tensorflow_text"),
    ("SplitMergeTokenize", "tensorflow_text"),
    ("TFText>", "tensorflow_text"),
    ("Mst", "tensorflow_text"),
    ("MaxSpanningTree", "tensorflow_text"),
    ("ConstrainedSequence", "tensorflow_text"),
    ("SentenceFragments", "tensorflow_text"),
    ("UnicodeNormalize", "tensorflow_text"),
    ("BoiseOffset", "tensorflow_text"),
    ("RoundRobin", "tensorflow_text"),
    ("Ngrams", "tensorflow_text"),
    ("SequenceStringProjection", "tensorflow_text / tf-models"),
)


def op_package(op_type: str) -> str | None:
    """The package that defines a well-known custom op type, if its name tells."""
    for prefix, package in OP_PACKAGES:
        if op_type.startswith(prefix):
            return package
    return None


# -- detection ------------------------------------------------------------------------------


def _pairs(analysis, pairs: set[tuple[int, int]]) -> str:
    """`from x, w to y` for a set of (source, output) index pairs, grouped by output set."""
    by_outputs: dict[tuple[int, ...], list[int]] = {}
    for i in sorted({i for i, _ in pairs}):
        by_outputs.setdefault(tuple(sorted(j for k, j in pairs if k == i)), []).append(i)
    return "; ".join(f"from {_names(analysis.source_names(sum(1 << i for i in srcs)))} to "
                     f"{_names(analysis.output_names(sum(1 << j for j in outs)))}" for outs, srcs in by_outputs.items())


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else ", ".join(names[:4]) + f" and {len(names) - 4} more"


def check(analysis) -> list:
    """Static GA1xx findings from a finished StaticAnalysis."""
    reported: set[tuple[str, object]] = set()  # (rule slug, op) already reported, so that no op is reported twice
    findings = []
    for ref, cut in analysis.cuts.items():
        findings.append(_cut_finding(analysis, ref, cut))
        reported.add((cut.rule, ref))
    findings += _pyfunc_and_custom_gradient_findings(analysis, reported)
    findings += _unknown_op_findings(analysis, reported)
    findings += _sampler_findings(analysis)
    findings += _variable_write_findings(analysis)
    findings += _disconnected_variable_findings(analysis)
    findings += _unlocated_cut_findings(analysis)
    return findings


def _unlocated_cut_findings(analysis) -> list:
    """One error per output whose blocked pairs name no cutting op (the gradient is None in TensorFlow, and the
    static pass could not say where it dies: a gradient override or custom gradient returning None, for
    instance). A blocked pair never passes the gate silently; the written gradients on its forward path are named
    as the places to look."""
    from ..rules import flow as rules

    by_output: dict[str, list[str]] = {}
    for entry in analysis.flow:
        if entry.status == "blocked" and not entry.blocked_by and not entry.raises:
            by_output.setdefault(entry.output, []).append(entry.source)
    written = sorted({n.ref for n in analysis.graph.ops.values() if n.custom_gradient},
                     key=lambda r: (r.function, r.op_name))
    look = (f" Gradients written in the model, where to look first: {', '.join(r.label for r in written[:3])}"
            f"{' ...' if len(written) > 3 else ''}." if written else "")
    return [rules.ZeroGradient.finding(
        f"Every gradient path from {_names(sources)} to {output} is cut (TensorFlow gives them no gradient), and the "
        f"static pass could not locate the op that cuts it.{look}",
        sources=tuple(sources), outputs=(output,),
        fix="Find where the gradient becomes None: a gradient function (tf.custom_gradient, tf.RegisterGradient "
            "with gradient_override_map) that returns None for an input, or a non-differentiable op; return the "
            "input's gradient, or tf.zeros_like it if no gradient is meant.")
        for output, sources in by_output.items()]


_RULE_BY_SLUG = {r.slug: r for r in RULES}


def _activation_backward(cut) -> bool:
    """A gradient kernel (ReluGrad, LeakyReluGrad, ...) that is piecewise constant in its forward input: the
    second derivative of a piecewise-linear activation, which is zero almost everywhere (a gradient penalty)."""
    return cut.piecewise is True and cut.node.ref.op_type.endswith("Grad")


# GA104's advice for an op that computes an integer from a float value other than a cast (Bucketize, searchsorted's
# LowerBound, HistogramFixedWidth, a comparison): rounding it in float is no answer there (tester 23)
_INDEX_FIX = ("{op} gives an integer (a bucket, an index, a count, a bool) that is piecewise constant in the float "
              "value: its true derivative is zero almost everywhere. If that value is data that needs no gradient (a "
              "bucketized feature for an embedding), the cut is expected: mark it intended (--ignore-ops '{glob}', "
              "or ignore-ops in the configuration). To train through it, use a soft surrogate: weights from a softmax "
              "over the distances to the boundaries, or interpolation between neighbouring buckets.")


def _cut_finding(analysis, ref, cut) -> Finding:
    """The finding of an op that cuts (source, output) pairs, blocked or in part, with the cut's own rule. Where
    the true derivative along the cut is zero (the op is piecewise constant there) a partial cut loses nothing
    and is info; so is the backward of a piecewise-linear activation, blocked or not."""
    pairs = cut.blocked_pairs | cut.partial_pairs
    srcs = analysis.source_names(sum({1 << i for i, _ in pairs}))
    outs = analysis.output_names(sum({1 << j for _, j in pairs}))
    dead = cut.rule == "custom-gradient" and cut.node.custom_gradient_saved
    rule_ = _RULE_BY_SLUG[cut.rule]
    severity = Severity.ERROR if cut.rule == "custom-gradient" else None
    if not cut.blocked_pairs and rule_.partial_severity is not None:
        severity = rule_.partial_severity  # the same whatever cuts it: round(x) or float(int(x))
    if _activation_backward(cut) or (cut.piecewise is True and not cut.blocked_pairs):
        severity = Severity.INFO
    fix = ("Make the gradient function return dy times the derivative for every input the output "
           "depends on (dy * f'(x)); return a zero gradient only through tf.stop_gradient in the "
           "forward pass.") if dead else None
    if dead and _compiled_module(analysis, cut):
        fix = ("If the cut is intended (a stop_gradient in the exported program), keep it and suppress this "
               "finding; otherwise remove the stop_gradient or fix the custom VJP in the exported function and "
               "export again.")
    if cut.piecewise is False:
        fix = ("Differentiate only through the inputs TensorFlow implements, or give the op a gradient for this "
               "input (tf.custom_gradient, from a series or a finite difference); no smooth surrogate is needed: "
               "the op is not piecewise constant.")
    elif _activation_backward(cut):
        fix = "Nothing to do: the zero is the true derivative (a gradient penalty through ReLU-like activations)."
    elif cut.piecewise is True and not cut.blocked_pairs:
        fix = "Nothing to do for the gradient: the cut path's true derivative is zero almost everywhere."
    elif cut.rule == "integer-path" and cut.node.known and ref.op_type != "Cast":
        fix = _INDEX_FIX.format(op=ref.op_type, glob=f"integer-path:*{ref.op_name.rsplit('/', 1)[-1]}")
    return rule_.finding(_cut_message(analysis, ref, cut, dead), op=ref, sources=srcs, outputs=outs,
                         severity=severity, fix=fix)


def _compiled_module(analysis, cut) -> str | None:
    """The compiled module (XlaCallModule) a saved custom gradient's function runs, if it runs one."""
    fdef = analysis.model.library.functions.get(analysis.gradient_functions.get(cut.node.custom_gradient or "", ""))
    return next((n.name for n in fdef.node_def if n.op == "XlaCallModule"), None) if fdef is not None else None


def _reason(cut, dead: bool, module: str | None) -> Reason:
    """The rule's reason for the cut, or the special case its documentation describes."""
    if dead:
        return COMPILED_GRADIENT_DEAD if module else CUSTOM_GRADIENT_DEAD
    if cut.piecewise is False:
        return NOT_IMPLEMENTED
    if _activation_backward(cut):
        return ACTIVATION_BACKWARD
    if cut.rule == "zero-gradient" and cut.piecewise is None:
        return ZERO_GRADIENT_UNMEASURED
    return _RULE_BY_SLUG[cut.rule].reason


def _cut_message(analysis, ref, cut, dead: bool) -> str:
    """What the op does to the gradient, which pairs it cuts fully and which in part, and, for a cut that makes
    TensorFlow raise, that the whole function's backward fails."""
    g = analysis.graph
    out_dtypes = {dtype_name(g.dtype[o]) for o in cut.node.outputs if not carries_gradient(g.dtype[o])}
    module = _compiled_module(analysis, cut) if dead else None
    reason = _reason(cut, dead, module).text(
        ref.op_type, dtype="/".join(sorted(out_dtypes)) or "an integer", custom_gradient=cut.node.custom_gradient,
        function=analysis.gradient_functions.get(cut.node.custom_gradient or "", "?"), error=cut.node.grad_error,
        module=module)
    parts = []
    if breaks_the_function(cut):  # TensorFlow raises: no pair is cut or loses a part, every pair's gradient fails
        on_path = set(cut.blocked_pairs) | set(cut.partial_pairs)
        return (f"{ref.label}: {reason}; it lies on the gradient's path {_pairs(analysis, on_path)}, and TensorFlow "
                "builds the backward of the loaded signature as a whole (nested functions included), so "
                "differentiating it raises for every pair of the signature, not only these: their flow status is "
                "blocked (raises)")
    if cut.blocked_pairs:
        parts.append(f"it cuts the gradient {_pairs(analysis, cut.blocked_pairs)}")
    if cut.partial_pairs:
        if cut.piecewise is True:
            part = ("but that path's true derivative is zero almost everywhere (the value is piecewise constant "
                    "there), so the gradient misses nothing except at its jumps")
        else:
            part = "so the gradient misses this path's part"
        parts.append(("and " if parts else "it ") + "cuts one path of the gradient while other paths still "
                     f"carry one {_pairs(analysis, cut.partial_pairs)}, {part}")
    if cut.node.written_by:  # the write whose value the read gives back: where the code to change is
        reason += f" (written by {', '.join(w.label for w in cut.node.written_by)})"
    return f"{ref.label}: {reason}; {' '.join(parts)}"


def _pyfunc_and_custom_gradient_findings(analysis, reported: set) -> list:
    """Python-function ops and saved custom gradients on a gradient path that no cut reported already."""
    findings = []
    # A multi-result op is one node per result (jax2tf's IdentityN carries every output of its module): its finding
    # lists the sources and outputs of all of them.
    masks: dict = {}
    for node in analysis.graph.ops.values():
        if node.custom_gradient and node.custom_gradient_saved:
            src, out = analysis.op_masks(node, grad=True)
            was = masks.get(node.ref, (0, 0))
            masks[node.ref] = (was[0] | src, was[1] | out)
    for node in analysis.graph.ops.values():
        ref = node.ref
        if ref.op_type in PYFUNC_OPS and ("py-function", ref) not in reported:
            src, out = analysis.op_masks(node)
            findings.append(PyFunction.finding(
                f"{ref.label}: {PyFunction.reason.text(ref.op_type)}; the loaded model can "
                "neither run nor differentiate it", op=ref,
                sources=analysis.source_names(src), outputs=analysis.output_names(out)))
            reported.add(("py-function", ref))
        elif node.custom_gradient and node.custom_gradient_saved and ("custom-gradient", ref) not in reported:
            src, out = masks[ref]
            if src and out and not tensorflow_own_custom_gradient(analysis.graph, node):
                findings.append(CustomGradient.finding(
                    f"{ref.label}: custom gradient {node.custom_gradient} replaces the op's gradient "
                    f"(saved as {analysis.gradient_functions.get(node.custom_gradient, '?')}); check it "
                    "numerically", op=ref,
                    sources=analysis.source_names(src), outputs=analysis.output_names(out),
                    fix="Nothing to do if the numeric checks pass: they compare it with finite differences "
                        "(use --order 2 for its second derivative)."))
                reported.add(("custom-gradient", ref))
    return findings


def _conversions(analysis, i: int, t: int) -> list:
    """The ops on source i's value paths into tensor `t` that take a float value of it and return only integer or
    bool results: where its value stops carrying a gradient (the ArgMax before a class-id output); at most 3."""
    g = analysis.graph
    found: dict = {}
    stack, seen = [t], set()
    while stack and len(found) < 3:
        a = stack.pop()
        if a in seen:
            continue
        seen.add(a)
        for p in g.producers(a):
            node = g.ops[p]
            ins = [u for u, _ in node.inputs if analysis.reach_value[u] >> i & 1]
            if node.outputs and any(carries_gradient(g.dtype[u]) for u in ins) and not any(
                    carries_gradient(g.dtype[o]) for o in node.outputs):
                found.setdefault(node.ref, None)
            else:
                stack.extend(ins)
    return list(found)


def _producer_op(g, t: int):
    ps = g.producers(t)
    return g.ops[ps[0]] if len(ps) == 1 else None


def tensorflow_own_custom_gradient(g, node) -> str | None:
    """The TensorFlow API whose own tf.custom_gradient this is, recognised by the forward it saves, or None.
    tf.nn.silu (swish) saves IdentityN(x * sigmoid(beta * x), x, beta) with a Const `beta`; tf.nn.ctc_loss on dense
    labels saves an IdentityN in its own name scope `ctc_loss_dense`, beside the log-softmax of the logits it takes
    there: TensorFlow's code, not the user's (the numeric checks still compare it with finite
    differences)."""
    if node.ref.op_type == "IdentityN" and _in_ctc_loss_dense(g, node):
        return "tf.nn.ctc_loss"
    if node.ref.op_type != "IdentityN" or len(node.inputs) != 3:
        return None
    beta = _producer_op(g, node.inputs[2][0])
    value = _producer_op(g, node.inputs[0][0])
    if beta is None or value is None or beta.ref.op_type != "Const" or beta.ref.op_name.rsplit("/", 1)[-1] != "beta":
        return None
    if value.ref.op_type != "Mul":
        return None
    factors = [_producer_op(g, t) for t, _ in value.inputs]
    return "tf.nn.silu" if any(f is not None and f.ref.op_type == "Sigmoid" for f in factors) else None


def _in_ctc_loss_dense(g, node) -> bool:
    """Whether `node` sits in a `ctc_loss_dense` name scope of its function beside the LogSoftmax TensorFlow's
    ctc_loss_dense takes of the logits in that scope."""
    scope, _, _ = node.ref.op_name.rpartition("/")
    if scope.rsplit("/", 1)[-1] != "ctc_loss_dense":
        return False
    return any(other.ref.function == node.ref.function and other.ref.op_type == "LogSoftmax"
               and other.ref.op_name.startswith(scope + "/") for other in g.ops.values())


def _disconnected_variable_findings(analysis) -> list:
    """Trainable variables that no gradient-carrying output of the signature depends on, or that it never uses."""
    findings = []
    out_value = 0
    for t in analysis.output_tensor.values():
        out_value |= analysis.reach_value[t]
    for i in analysis.source_tensor:
        src = analysis.sources[i]
        if src.kind == "variable" and not out_value >> i & 1:
            others = [analysis.outputs[j] for j, o in analysis.other_output_tensor.items()
                      if analysis.reach_value[o] >> i & 1]
            ops = [ref for j, o in analysis.other_output_tensor.items() if analysis.reach_value[o] >> i & 1
                   for ref in _conversions(analysis, i, o)]
            through = (f" through {', '.join(dict.fromkeys(r.label for r in ops))}, whose integer or bool result"
                       if ops else ", which")
            where_to = (f"reaches only {', '.join(f'{o.name} ({o.dtype})' for o in others)}{through} carries no "
                        "gradient" if others else "reaches no output of the signature")
            findings.append(DisconnectedSource.finding(
                f"trainable variable {src.name} {where_to}: it never gets a gradient", sources=[src.name]))
    findings += _stopped_variable_findings(analysis)
    for u in analysis.uncaptured_trainable:
        name = u.variable.name
        if u.read_by:  # another entry point reads it: not dead, but training through this one leaves it out
            findings.append(DisconnectedSource.finding(
                f"trainable variable {name} is not read by the audited signature (only by {_names(list(u.read_by))}): "
                "training through this signature gives it no gradient (Keras: \"Gradients do not exist for "
                "variables\")", sources=[name], severity=Severity.INFO,
                fix=f"Nothing to do if it is meant to be trained through {_names(list(u.read_by))}; audit that "
                    "entry point too (--all-signatures, --signature)."))
        else:
            findings.append(DisconnectedSource.finding(
                f"trainable variable {name} of the saved object is read neither by the audited signature nor by "
                "any other entry point (Keras' own layer traces aside): training through this signature gives it "
                "no gradient (Keras: \"Gradients do not exist for variables\")", sources=[name]))
    return findings


def _stopped_variable_findings(analysis) -> list:
    """Trainable variables whose value reaches the outputs but whose every path is cut by tf.stop_gradient alone: the
    cut is GA106 (info, as it may be intended), but the variable never gets a gradient from this signature, as
    Keras' "Gradients do not exist for variables" warns (a variable cut by another op is that op's finding)."""
    from ..rules.flow import StopGradient

    entries: dict[str, list] = {}
    for e in analysis.flow:
        entries.setdefault(e.source, []).append(e)
    findings = []
    for i in analysis.source_tensor:
        src = analysis.sources[i]
        mine = entries.get(src.name, [])
        blocked = [e for e in mine if e.status == "blocked"]
        if (src.kind != "variable" or not blocked or any(e.status != "blocked" and e.status != "disconnected"
                                                         for e in mine) or any(e.raises for e in blocked)):
            continue
        cuts = {c.op for e in blocked for c in e.blocked_by}
        if not cuts or any(c.rule != StopGradient.slug for e in blocked for c in e.blocked_by):
            continue
        ops = sorted(cuts, key=lambda r: (r.function, r.op_name))
        findings.append(DisconnectedSource.finding(
            f"trainable variable {src.name} reaches {_names([e.output for e in blocked])} only through "
            f"tf.stop_gradient ({_names([r.label for r in ops])}): it never gets a gradient from this signature "
            "(Keras: \"Gradients do not exist for variables\")", sources=[src.name], op=ops[0],
            fix="Nothing to do if the variable is trained elsewhere (a target network updated by copying); "
                "otherwise remove the tf.stop_gradient on its path, or mark it trainable=False."))
    return findings


def _unknown_op_findings(analysis, reported: set) -> list:
    """An error per unknown op on a float path of a pair (that pair is `unknown`); one info line for all the
    unknown ops that touch only string or integer paths and so decide no gradient."""
    findings = []
    idle: dict[str, int] = {}
    for node in analysis.graph.ops.values():
        ref = node.ref
        if node.known or ("unknown-op", ref) in reported or ("integer-path", ref) in reported:
            continue
        u = analysis.uncertain.get(ref)
        if u is None:
            if ref.op_type not in PACKAGE_OPS:  # a reviewed package's op: the gate's line names the package
                idle[ref.op_type] = idle.get(ref.op_type, 0) + 1
            continue
        srcs = analysis.source_names(sum({1 << i for i, _ in u.pairs}))
        outs = analysis.output_names(sum({1 << j for _, j in u.pairs}))
        package = op_package(ref.op_type)
        load = f"--load-ops {package.split(' ')[0]}" if package else "--load-ops PACKAGE_OR_LIBRARY.so"
        origin = f" (it comes from {package})" if package else ""
        findings.append(UnknownOp.finding(
            f"{ref.label}: {UnknownOp.reason.text(ref.op_type)}{origin}; it lies on the float path "
            f"from {_names(srcs)} to {_names(outs)}, so whether a gradient flows there cannot be known "
            f"(status unknown); {load} makes it known", op=ref, sources=srcs, outputs=outs,
            fix=f"Audit with {load} in an environment where that package works with this TensorFlow (a package "
                "built for another TensorFlow version does not load), so that the op and the gradient its package "
                "registers (or does not) are known."))
        reported.add(("unknown-op", ref))
    if idle:
        kinds = ", ".join(f"{t} ({n})" if n > 1 else t for t, n in sorted(idle.items()))
        packages = sorted({p for t in idle if (p := op_package(t))})
        findings.append(UnknownOp.finding(
            f"{sum(idle.values())} op(s) of type(s) this TensorFlow does not know decide no gradient here (they "
            f"touch only string or integer values, lie under a custom gradient that replaces theirs, or reach no "
            f"output): {kinds}"
            + (f" (from {', '.join(packages)})" if packages else ""), severity=Severity.INFO,
            fix="Nothing to do for the gradient. --load-ops PACKAGE makes the ops known to this TensorFlow; running "
                "the model (numeric checks, probes) also needs --allow-unsafe-ops, as ops outside the reviewed list "
                "are not proven safe."))
    return findings


_SAMPLER_WORDS = ("Random", "Multinomial", "TruncatedNormal")


def _is_random(op_type: str) -> bool:
    return any(w in op_type for w in _SAMPLER_WORDS) and not op_type.endswith("Grad")


def _draws_inside(g, node, drawn: list[int]) -> bool:
    """Whether a custom gradient replaces the derivative of a computation that draws at random: a random op
    that its arguments (a seed, a distribution's parameters) feed, whose draw reaches the forward result it
    differentiates. A custom gradient applied to a value drawn earlier (z = mu + sigma * eps; f(z)) is an
    ordinary one: the forward is smooth in z with the seed held fixed."""
    from ..graph.dataflow import VALUE
    from ..graph.reach import forward_masks

    results = [t for t, f in node.inputs if f & VALUE]
    if not any(drawn[t] for t in results):
        return False
    args = {t: 1 for t, f in node.inputs if not f & VALUE}
    from_args = forward_masks(g, args, VALUE)
    inside = {o: 1 for op_id, op in g.ops.items() if _is_random(op.ref.op_type) and from_args[op_id]
              for o in op.outputs}
    if not inside:
        return False
    drawn_inside = forward_masks(g, inside, VALUE)
    return any(drawn_inside[t] for t in results)


def _sampler_findings(analysis) -> list:
    """Gradients through random draws: a sampler whose distribution a source sets (`RandomGamma`'s alpha), or a
    custom gradient over a value drawn at random (TensorFlow Probability's rejection samplers). Either is a
    reparameterization estimator, not the derivative of the output with the seed held fixed, which is what
    finite differences measure."""
    from ..graph.dataflow import VALUE
    from ..graph.reach import forward_masks

    g = analysis.graph
    random_outputs = {o: 1 for node in g.ops.values() if _is_random(node.ref.op_type) for o in node.outputs}
    if not random_outputs:
        return []
    drawn = forward_masks(g, random_outputs, VALUE)  # 1 where a value depends on a random draw
    connected = {(e.source, e.output) for e in analysis.flow if e.status == "connected"}
    findings, seen = [], set()
    for node in g.ops.values():
        if node.ref in seen:
            continue
        reach = _sampler_reach(analysis, node, drawn)
        if reach is None:
            continue
        src, out = reach
        srcs = [x for x in analysis.source_names(src) if any((x, o) in connected for o in analysis.output_names(out))]
        outs = [o for o in analysis.output_names(out) if any((x, o) in connected for x in srcs)]
        if srcs and outs:
            seen.add(node.ref)
            findings.append(_sampler_finding(node, srcs, outs))
    return findings


def _sampler_reach(analysis, node, drawn: list[int]) -> tuple[int, int] | None:
    """For a random op: the sources its float inputs' values depend on, and the outputs its draws reach by
    value; for a saved custom gradient over a random draw: the sources and outputs its gradient joins (masks).
    None for any other op."""
    g = analysis.graph
    if _is_random(node.ref.op_type):
        ins = [t for t, _ in node.inputs if carries_gradient(g.dtype[t])]
        src_masks, out_masks = analysis.reach_value, analysis.to_output_value
    elif node.custom_gradient and node.custom_gradient_saved and _draws_inside(g, node, drawn):
        ins = [t for t, _ in node.inputs]
        src_masks, out_masks = analysis.reach_grad, analysis.to_output_grad
    else:
        return None
    src = 0
    for t in ins:
        src |= src_masks[t]
    out = 0
    for o in node.outputs:
        out |= out_masks[o]
    return src, out


def _sampler_finding(node, srcs: list[str], outs: list[str]):
    """The sampler-gradient finding of a random op or a custom gradient over a draw, on the pairs it joins."""
    ref = node.ref
    what = ("draws samples whose distribution depends on" if _is_random(ref.op_type) else
            f"is a custom gradient ({node.custom_gradient}) over a value drawn at random from")
    return SamplerGradient.finding(
        f"{ref.label} {what} {_names(srcs)}: the gradient through it to {_names(outs)} is a "
        "reparameterization estimator, not the derivative with the seed held fixed, so a numeric "
        "difference on these pairs is expected", op=ref, sources=srcs, outputs=outs)


# the resource variables' writes, and TensorFlow 1's on reference variables
_WRITES = frozenset(STATE_WRITES) | {"Assign", "AssignAdd", "AssignSub"}


def _variable_write_findings(analysis) -> list:
    """Ops that write a trainable variable the signature reads (its handle, a source, reaches the write)."""
    variables = 0
    for i, s in enumerate(analysis.sources):
        if s.kind == "variable" and i in analysis.source_tensor:
            variables |= 1 << i
    findings = []
    for node in analysis.graph.ops.values():
        if node.ref.op_type not in _WRITES or not node.inputs:
            continue
        written = analysis.reach_value[node.inputs[0][0]] & variables
        if not written:
            continue
        out = 0
        for i in analysis.source_tensor:
            if written >> i & 1:
                out |= analysis.to_output_value[analysis.source_tensor[i]]
        srcs, outs = analysis.source_names(written), analysis.output_names(out)
        findings.append(WritesVariable.finding(
            f"{node.ref.label} writes trainable variable(s) {_names(srcs)} when the signature runs: every call "
            "changes the deployed weights (a serving signature must not write them), and each evaluation of "
            f"{_names(outs) or 'its outputs'} starts from the weights the one before wrote, so finite differences "
            "for these variables do not measure the gradient: a numeric difference for them is expected",
            op=node.ref,
            sources=srcs, outputs=outs))
    return findings
