"""GA1xx: static gradient-flow rules, decided from the graph and TensorFlow's gradient registry."""

from __future__ import annotations

from ..model import Severity
from .base import Rule, rule


@rule("GA101", "no-gradient", Severity.ERROR,
      fix="Register a gradient for this op type (tf.RegisterGradient), wrap the computation in "
          "tf.custom_gradient, or replace the op with differentiable TensorFlow ops.")
class NoGradient:
    """An op with no registered gradient lies on a path from a source to an output.

    ## What it does
    Finds ops whose type has no entry in TensorFlow's gradient registry (differentiating
    through them raises `LookupError: No gradient defined for operation ...`) and that sit
    between a differentiable source and an output.

    ## Why is this bad?
    Training fails at the first `tape.gradient` call. With a loaded SavedModel the error is
    raised by the function call itself, and it breaks the gradients of every variable of
    that function, not only those on the cut path.

    ## Example
    ```python
    y = tf.raw_ops.Mod(x=x, y=3.0)   # Mod has no registered gradient
    ```

    ## Use instead
    ```python
    y = tf.math.floormod(x, 3.0)     # FloorMod has a gradient
    ```
    or give the op a gradient with `tf.RegisterGradient("Mod")` / `tf.custom_gradient`.
    """


@rule("GA102", "not-differentiable", Severity.ERROR,
      fix="Use a differentiable formulation, or if the cut is intended, make it explicit with "
          "tf.stop_gradient and ignore this op in the configuration.")
class NotDifferentiable:
    """An op registered with `tf.NotDifferentiable` cuts a path from a source to an output.

    ## What it does
    Finds ops whose type is registered as not differentiable (its gradient entry is `None`),
    whose input comes from a differentiable source and whose output reaches an output.

    ## Why is this bad?
    TensorFlow silently returns no gradient through such an op: the part of the model
    before it never learns from that output, and no error tells you.

    ## Example
    ```python
    rgb = tf.image.hsv_to_rgb(hsv)   # HSVToRGB is registered as not differentiable
    ```

    ## Use instead
    A differentiable op with the same forward meaning, or an explicit `tf.stop_gradient`
    when the cut is intended.
    """


@rule("GA103", "zero-gradient", Severity.ERROR,
      fix="Use a smooth surrogate (softmax instead of argmax, a straight-through estimator "
          "x + tf.stop_gradient(tf.round(x) - x) instead of round).")
class ZeroGradient:
    """A piecewise-constant op (argmax, round, floor, sign, ...) cuts a path: its gradient is None or zero.

    ## What it does
    Builds a replica of the op and calls the gradient TensorFlow registered for it. When
    that gradient is `None`, or does not depend on the incoming gradient at all (so it is
    identically zero), and the op lies on a path from a source to an output, the path is cut.

    ## Why is this bad?
    The function is flat almost everywhere: gradient descent gets zero signal through it,
    and whatever comes before it stops learning from that output.

    ## Example
    ```python
    cls = tf.cast(tf.argmax(logits, -1), tf.float32)   # no gradient reaches logits
    q = tf.round(x * 127.0) / 127.0                     # zero gradient w.r.t. x
    ```

    ## Use instead
    ```python
    probs = tf.nn.softmax(logits)                       # differentiable scores
    q = x + tf.stop_gradient(tf.round(x * 127.0) / 127.0 - x)   # straight-through
    ```
    """


@rule("GA104", "integer-path", Severity.ERROR,
      fix="Keep the value in floating point (use tf.round / a straight-through estimator "
          "instead of a cast to int), or compute this output from float tensors.")
class IntegerPath:
    """A float value derived from a source is converted to an integer or bool, and the result reaches a float output.

    ## What it does
    Follows values, not shapes: a `Cast` to an integer or a comparison producing a bool on a
    path whose integer result is turned back into a float output. Integer tensors that only
    hold shapes, sizes or indices are not reported.

    ## Why is this bad?
    Gradients only travel along floating-point tensors: the conversion cuts the path, and
    the output looks differentiable while it is not.

    ## Example
    ```python
    q = tf.cast(tf.cast(x * 127.0, tf.int32), tf.float32) / 127.0
    ```

    ## Use instead
    ```python
    q = x + tf.stop_gradient(tf.round(x * 127.0) / 127.0 - x)
    ```
    """


@rule("GA105", "py-function", Severity.ERROR,
      fix="Rewrite the Python body with TensorFlow ops; a PyFunc body is not saved, so the "
          "loaded model can neither run nor differentiate it.")
class PyFunction:
    """`tf.numpy_function` / `tf.py_function` (PyFunc, PyFuncStateless, EagerPyFunc) in the audited function.

    ## What it does
    Reports every Python-function op reachable from the audited signature.

    ## Why is this bad?
    The Python body is not part of the SavedModel: after loading, calling the model fails
    ("Could not find callback with key=pyfunc_0"), and `tf.numpy_function` never had a
    gradient in the first place.

    ## Example
    ```python
    y = tf.numpy_function(np.sinh, [x], tf.float32) + x
    ```

    ## Use instead
    ```python
    y = tf.math.sinh(x) + x
    ```
    """


@rule("GA106", "stop-gradient", Severity.INFO,
      fix="Nothing to do if the cut is intended; otherwise remove tf.stop_gradient.")
class StopGradient:
    """`tf.stop_gradient` (StopGradient / PreventGradient) cuts a path from a source to an output.

    ## What it does
    Reports explicit gradient stops on paths that would otherwise carry a gradient.

    ## Why is this bad?
    Usually it is not: stop_gradient is how straight-through estimators and target networks
    are written. It is listed so that a reader can check each cut is intended.

    ## Example
    ```python
    y = tf.stop_gradient(encoder(x))
    ```

    ## Use instead
    Keep it if intended; remove it where the gradient is wanted.
    """


@rule("GA107", "custom-gradient", Severity.INFO,
      fix="Save the model with tf.saved_model.SaveOptions(experimental_custom_gradients=True) "
          "so the custom gradient travels with it; check it numerically.")
class CustomGradient:
    """A `tf.custom_gradient` replaces an op's gradient.

    ## What it does
    Finds ops carrying a `_gradient_op_type` attribute. The saved gradient function (listed
    in the function library's `registered_gradients`) is analysed in place of the op's own
    gradient. Info when it was saved; error when it was not, because the loaded model then
    cannot compute that gradient.

    ## Why is this bad?
    A hand-written gradient is code TensorFlow cannot check. gradaudit's numeric checks
    compare it with finite differences.

    ## Example
    ```python
    @tf.custom_gradient
    def log1pexp(x):
        e = tf.exp(x)
        return tf.math.log(1 + e), lambda dy: dy * (1 - 1 / (1 + e))
    ```

    ## Use instead
    Keep it, save it with `experimental_custom_gradients=True`, and let the numeric checks
    confirm it.
    """


@rule("GA108", "disconnected-source", Severity.WARNING,
      fix="Remove the unused variable, or connect it to an output; if it is used by another "
          "signature, audit that signature (--all-signatures).")
class DisconnectedSource:
    """A trainable variable of the saved object reaches no output of the audited signature.

    ## What it does
    Lists trainable variables that no output of the signature depends on.

    ## Why is this bad?
    This is Keras' warning "Gradients do not exist for variables ...": the optimizer will
    never update them, usually because a layer was built but not called, or its output is
    dropped.

    ## Example
    ```python
    self.unused = tf.Variable(tf.ones([3]))   # never read in __call__
    ```

    ## Use instead
    Remove the variable or use it; mark it `trainable=False` if it is state.
    """


@rule("GA109", "unknown-op", Severity.ERROR,
      fix="Load the package or library that defines the op before auditing: --load-ops PACKAGE (a Python "
          "package such as tensorflow_text) or --load-ops path/to/ops.so (tf.load_op_library).")
class UnknownOp:
    """An op type this TensorFlow does not know lies on a float path (a custom op whose package is not loaded).

    ## What it does
    Reports ops whose type is not in this TensorFlow's op registry. Whether a gradient passes
    them depends on the package that defines them (it may register one, or none), so every
    (source, output) pair whose float path runs through one has the status `unknown`: an
    error, because the audit cannot vouch for the model. Unknown ops that touch only string or
    integer paths (tokenizers, lookups) decide no gradient: they are listed in one info line.

    ## Why is this bad?
    Neither "connected" nor "blocked" can be said: a decision-forest inference op has no
    gradient at all, a text op's package may register one. The model cannot run here either.

    ## Example
    A model exported with `import tensorflow_decision_forests` or
    `tf.load_op_library("my_ops.so")`, audited where that package is not imported.

    ## Use instead
    `gradaudit MODEL --load-ops tensorflow_decision_forests` (or `--load-ops my_ops.so`), so the op
    and its gradient are known and the pairs get real statuses.
    """


@rule("GA110", "gradient-raises", Severity.ERROR,
      fix="Replace the op on the differentiated path, or give it a gradient that works for these attributes "
          "(tf.custom_gradient); tf.raw_ops.PreventGradient is meant to make differentiation fail.")
class GradientRaises:
    """An op's registered gradient function raises when it is called: differentiating through it fails.

    ## What it does
    Calls the gradient TensorFlow registered for the op on a replica with the saved attributes.
    When it raises `LookupError` or `NotImplementedError` (`PreventGradient`, gradient functions
    that refuse some attributes), the op cuts every path through it, and TensorFlow's message is
    quoted.

    ## Why is this bad?
    "Registered" does not mean "differentiable": training raises at the first `tape.gradient`
    that reaches the op, and with a loaded model the call itself raises.

    ## Example
    ```python
    y = tf.raw_ops.PreventGradient(input=x * w, message="not for training")
    ```

    ## Use instead
    A differentiable formulation, or `tf.stop_gradient` where a cut is intended.
    """


RULES: tuple[Rule, ...] = (
    NoGradient, NotDifferentiable, ZeroGradient, IntegerPath, PyFunction, StopGradient,
    CustomGradient, DisconnectedSource, UnknownOp, GradientRaises,
)

# Cuts that, on one path of a pair other paths still connect, leave a gradient that is the derivative of the
# value almost everywhere but misses that path: a warning. The others (no gradient at all, a gradient that
# raises, a Python function) break training wherever they are.
PARTIAL_WARNING = frozenset({"zero-gradient", "integer-path", "not-differentiable"})

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

_REASONS = {
    "no-gradient": "{t} has no registered gradient: differentiating through it raises LookupError",
    "not-differentiable": "{t} is registered with tf.NotDifferentiable: no gradient flows through it",
    "zero-gradient": "{t} is piecewise constant: its registered gradient is None or zero",
    "integer-path": "{t} converts a float value to {dtype}: gradients stop at integer and bool tensors",
    "py-function": "{t} runs a Python function that is not saved with the model",
    "stop-gradient": "{t} (tf.stop_gradient) stops the gradient",
    "custom-gradient": "the custom gradient {cg} of {t} was not saved with the model: differentiating "
                       "the loaded model raises LookupError",
    "custom-gradient-dead": "the custom gradient {cg} of {t} (saved as {fn}) returns, for an input this "
                            "output depends on, None, zeros or a value that ignores the incoming gradient "
                            "dy: that gradient is always zero or wrong",
    "unknown-op": "op type {t} is not registered in this TensorFlow",
    "gradient-raises": "the gradient function TensorFlow registered for {t} raises when called ({err})",
}


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 4 else ", ".join(names[:4]) + f" and {len(names) - 4} more"


def check(analysis) -> list:
    """Static GA1xx findings from a finished StaticAnalysis."""
    # Imported here so that `gradaudit rules` / `explain` do not pay for importing TensorFlow.
    from ..flow import PYFUNC_OPS
    from ..graph.dtypes import carries_gradient, dtype_name

    by_slug = {r.slug: r for r in RULES}
    g = analysis.graph
    findings = []
    reported: set[tuple[str, object]] = set()

    def where(ref) -> str:
        return f"{ref.op_type} '{ref.op_name}' in {ref.function}"

    for ref, cut in analysis.cuts.items():
        pairs = cut.blocked_pairs | cut.partial_pairs
        srcs = analysis.source_names(sum({1 << i for i, _ in pairs}))
        outs = analysis.output_names(sum({1 << j for _, j in pairs}))
        out_dtypes = {dtype_name(g.dtype[o]) for o in cut.node.outputs if not carries_gradient(g.dtype[o])}
        dead = cut.rule == "custom-gradient" and cut.node.custom_gradient_saved
        reason = _REASONS["custom-gradient-dead" if dead else cut.rule].format(
            t=ref.op_type, dtype="/".join(sorted(out_dtypes)) or "an integer", cg=cut.node.custom_gradient,
            fn=analysis.gradient_functions.get(cut.node.custom_gradient or "", "?"), err=cut.node.grad_error)
        how = ("cuts the gradient" if cut.blocked_pairs else
               "cuts one path of the gradient while other paths still carry one, so the gradient misses "
               "this path's part")
        msg = f"{where(ref)}: {reason}; it {how} from {_names(srcs)} to {_names(outs)}"
        rule_ = by_slug[cut.rule]
        severity = Severity.ERROR if cut.rule == "custom-gradient" else None
        if not cut.blocked_pairs and cut.rule in PARTIAL_WARNING:
            severity = Severity.WARNING  # the same whatever cuts it: round(x) or float(int(x))
        fix = ("Make the gradient function return dy times the derivative for every input the output "
               "depends on (dy * f'(x)); return a zero gradient only through tf.stop_gradient in the "
               "forward pass.") if dead else None
        findings.append(rule_.finding(msg, op=ref, sources=srcs, outputs=outs, severity=severity, fix=fix))
        reported.add((cut.rule, ref))

    for node in g.ops.values():
        ref = node.ref
        if ref.op_type in PYFUNC_OPS and ("py-function", ref) not in reported:
            src, out = analysis.op_masks(node)
            findings.append(PyFunction.finding(
                f"{where(ref)}: {_REASONS['py-function'].format(t=ref.op_type)}; the loaded model can "
                "neither run nor differentiate it", op=ref,
                sources=analysis.source_names(src), outputs=analysis.output_names(out)))
            reported.add(("py-function", ref))
        elif node.custom_gradient and node.custom_gradient_saved and ("custom-gradient", ref) not in reported:
            src, out = analysis.op_masks(node, grad=True)
            if src and out:
                findings.append(CustomGradient.finding(
                    f"{where(ref)}: custom gradient {node.custom_gradient} replaces the op's gradient "
                    f"(saved as {analysis.gradient_functions.get(node.custom_gradient, '?')}); check it "
                    "numerically", op=ref,
                    sources=analysis.source_names(src), outputs=analysis.output_names(out),
                    fix="Nothing to do if the numeric checks pass: they compare it with finite differences "
                        "(use --order 2 for its second derivative)."))
                reported.add(("custom-gradient", ref))

    findings += _unknown_op_findings(analysis, reported, where)

    out_value = 0
    for t in analysis.output_tensor.values():
        out_value |= analysis.reach_value[t]
    for i, t in analysis.source_tensor.items():
        src = analysis.sources[i]
        if src.kind == "variable" and not out_value >> i & 1:
            others = [analysis.outputs[j] for j, o in analysis.other_output_tensor.items()
                      if analysis.reach_value[o] >> i & 1]
            where_to = (f"reaches only {', '.join(f'{o.name} ({o.dtype})' for o in others)}, which carries no "
                        "gradient" if others else "reaches no output of the signature")
            findings.append(DisconnectedSource.finding(
                f"trainable variable {src.name} {where_to}: it never gets a gradient", sources=[src.name]))
    for v in analysis.uncaptured_trainable:
        findings.append(DisconnectedSource.finding(
            f"trainable variable {v.name} is not used by the audited signature: it never gets a gradient "
            "from it", sources=[v.name]))
    return findings



def _unknown_op_findings(analysis, reported: set, where) -> list:
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
            idle[ref.op_type] = idle.get(ref.op_type, 0) + 1
            continue
        srcs = analysis.source_names(sum({1 << i for i, _ in u.pairs}))
        outs = analysis.output_names(sum({1 << j for _, j in u.pairs}))
        package = op_package(ref.op_type)
        load = f"--load-ops {package.split(' ')[0]}" if package else "--load-ops PACKAGE_OR_LIBRARY.so"
        origin = f" (it comes from {package})" if package else ""
        findings.append(UnknownOp.finding(
            f"{where(ref)}: {_REASONS['unknown-op'].format(t=ref.op_type)}{origin}; it lies on the float path "
            f"from {_names(srcs)} to {_names(outs)}, so whether a gradient flows there cannot be known "
            f"(status unknown); {load} makes it known", op=ref, sources=srcs, outputs=outs,
            fix=f"Audit with {load}, so that the op and the gradient its package registers (or does not) are "
                "known."))
        reported.add(("unknown-op", ref))
    if idle:
        kinds = ", ".join(f"{t} ({n})" if n > 1 else t for t, n in sorted(idle.items()))
        packages = sorted({p for t in idle if (p := op_package(t))})
        findings.append(UnknownOp.finding(
            f"{sum(idle.values())} op(s) of type(s) this TensorFlow does not know touch only string, integer or "
            f"unused paths and decide no gradient: {kinds}"
            + (f" (from {', '.join(packages)})" if packages else ""), severity=Severity.INFO,
            fix="Nothing to do for the gradient; --load-ops PACKAGE lets the numeric checks run the model."))
    return findings
