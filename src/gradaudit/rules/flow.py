"""GA1xx: static gradient-flow rules, decided from the graph and TensorFlow's gradient registry."""

from __future__ import annotations

from ..model import Severity
from .base import Reason, Rule, define

NoGradient = define(
    "GA101", "no-gradient", Severity.ERROR,
    reasons=(Reason("{t} has no registered gradient: differentiating through it raises LookupError"),),
    fix="Register a gradient for this op type (tf.RegisterGradient), wrap the computation in "
        "tf.custom_gradient, or replace the op with differentiable TensorFlow ops.",
    explains_mismatch=True,
    doc="""An op with no registered gradient lies on a path from a source to an output.

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
    """,
)


# a smooth op whose registered gradient gives an input none (measured on its kernel): not piecewise constant
NOT_IMPLEMENTED = Reason(
    "{t} is smooth in the input this path enters by (its value moves with it), but the gradient TensorFlow "
    "registered for it gives that input none: TensorFlow does not implement this derivative")

NotDifferentiable = define(
    "GA102", "not-differentiable", Severity.ERROR,
    reasons=(Reason("{t} is registered with tf.NotDifferentiable: no gradient flows through it"), NOT_IMPLEMENTED),
    fix="Use a differentiable formulation, or if the cut is intended, make it explicit with "
        "tf.stop_gradient and ignore this op in the configuration.",
    explains_mismatch=True, partial_severity=Severity.WARNING,
    doc="""An op whose gradient TensorFlow does not implement cuts a path from a source to an output.

    ## What it does
    Finds ops whose type is registered as not differentiable (its gradient entry is `None`), or
    smooth ops whose registered gradient gives an input none (the op's own kernel, nudged in that
    input on synthetic values, moves: `Betainc`'s a and b, `Zeta`'s x), whose input comes from a
    differentiable source and whose output reaches an output. A piecewise-constant op is GA103.

    ## Why is this bad?
    TensorFlow silently returns no gradient through such an op although the value depends on
    that input: the part of the model before it never learns from that output (or, where other
    paths connect the pair, the gradient misses this path's part), and no error tells you.

    ## Example
    ```python
    rgb = tf.image.hsv_to_rgb(hsv)   # HSVToRGB is registered as not differentiable
    p = tf.math.betainc(a, b, x)     # no gradient for a and b
    ```

    ## Use instead
    A differentiable op with the same forward meaning, or an explicit `tf.stop_gradient`
    when the cut is intended.
    """,
)


# a cut whose op's kernel could not be run to tell whether its value is piecewise constant there
ZERO_GRADIENT_UNMEASURED = Reason(
    "{t}'s registered gradient gives the input this path enters by None or zero (whether its value is piecewise "
    "constant there could not be measured)")
# a gradient kernel (ReluGrad, LeakyReluGrad, ...) piecewise constant in its forward input: a gradient penalty
ACTIVATION_BACKWARD = Reason(
    "{t} is the backward of a piecewise-linear activation: it is piecewise constant in the activation's input, "
    "so the true derivative through it is zero almost everywhere and TensorFlow's zero gradient there is exact")

ZeroGradient = define(
    "GA103", "zero-gradient", Severity.ERROR,
    reasons=(Reason("{t} is piecewise constant: its registered gradient is None or zero"),
             ZERO_GRADIENT_UNMEASURED, ACTIVATION_BACKWARD),
    fix="Use a smooth surrogate (softmax instead of argmax, a straight-through estimator "
        "x + tf.stop_gradient(tf.round(x) - x) instead of round).",
    explains_mismatch=True, partial_severity=Severity.WARNING,
    doc="""A piecewise-constant op (argmax, round, floor, sign, ...) cuts a path: its gradient is None or zero.

    ## What it does
    Builds a replica of the op and calls the gradient TensorFlow registered for it. When
    that gradient is `None`, or does not depend on the incoming gradient at all (so it is
    identically zero), and the op lies on a path from a source to an output, the path is cut.
    Its value is piecewise constant there (an integer result, or the op's kernel does not move
    when that input is nudged), so the true derivative along the cut is zero almost everywhere:
    a cut of one path of a pair other paths connect (`x * w + round(x)`, the `Floor` inside
    `tf.linalg.expm`) loses nothing and is info, as is the backward of a piecewise-linear
    activation (`LeakyReluGrad` in a gradient penalty).

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
    """,
)


IntegerPath = define(
    "GA104", "integer-path", Severity.ERROR,
    reasons=(Reason("{t} converts a float value to {dtype}: gradients stop at integer and bool tensors"),),
    fix="Keep the value in floating point (use tf.round / a straight-through estimator "
        "instead of a cast to int), or compute this output from float tensors.",
    explains_mismatch=True, partial_severity=Severity.WARNING,
    doc="""A float value from a source is converted to an integer or bool, and the result reaches a float output.

    ## What it does
    Follows values, not shapes: a `Cast` to an integer or a comparison producing a bool on a
    path whose integer result is turned back into a float output, or an op that computes an
    integer from a float value (`Bucketize`, `tf.searchsorted`, a histogram): its result is
    piecewise constant in that value, and the finding's fix says how to keep or replace it.
    Integer tensors that only hold shapes or sizes, or indices read from integer inputs, are
    not reported.

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
    """,
)


PyFunction = define(
    "GA105", "py-function", Severity.ERROR,
    reasons=(Reason("{t} runs a Python function that is not saved with the model"),),
    fix="Rewrite the Python body with TensorFlow ops; a PyFunc body is not saved, so the "
        "loaded model can neither run nor differentiate it.",
    explains_mismatch=True,
    doc="""`tf.numpy_function` / `tf.py_function` (PyFunc, PyFuncStateless, EagerPyFunc) in the audited function.

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
    """,
)


StopGradient = define(
    "GA106", "stop-gradient", Severity.INFO,
    reasons=(Reason("{t} (tf.stop_gradient) stops the gradient"),),
    fix="Nothing to do if the cut is intended; otherwise remove tf.stop_gradient.",
    explains_mismatch=True,
    doc="""`tf.stop_gradient` (StopGradient / PreventGradient) cuts a path from a source to an output.

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
    """,
)


# a saved custom gradient that gives an input the output depends on None, zeros or a value that ignores dy
CUSTOM_GRADIENT_DEAD = Reason(
    "the custom gradient {cg} of {t} (saved as {fn}) returns, for an input this output depends on, None, zeros "
    "or a value that ignores the incoming gradient dy: that gradient is always zero or wrong")
# the same, where the saved gradient's function runs a compiled module (JAX's exporter)
COMPILED_GRADIENT_DEAD = Reason(
    "the saved gradient of the compiled module (XlaCallModule '{module}' in {fn}, the custom gradient {cg} of {t}) "
    "gives an input this output depends on exactly zero: a stop_gradient in the exported program "
    "(lax.stop_gradient) or a custom VJP that returns zeros")

CustomGradient = define(
    "GA107", "custom-gradient", Severity.INFO,
    reasons=(Reason("the custom gradient {cg} of {t} was not saved with the model: differentiating the loaded "
                    "model raises LookupError"), CUSTOM_GRADIENT_DEAD, COMPILED_GRADIENT_DEAD),
    fix="Save the model with tf.saved_model.SaveOptions(experimental_custom_gradients=True) "
        "so the custom gradient travels with it; check it numerically.",
    doc="""A `tf.custom_gradient` replaces an op's gradient.

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
    """,
)


DisconnectedSource = define(
    "GA108", "disconnected-source", Severity.WARNING,
    fix="Remove the unused variable, or connect it to an output; if it is used by another "
        "signature, audit that signature (--all-signatures).",
    doc="""A trainable variable of the saved object reaches no output of the audited signature.

    ## What it does
    Lists trainable variables that no output of the signature depends on, and those whose value
    reaches the outputs only through `tf.stop_gradient` (the cut itself is GA106, info: it may be
    intended, but the variable is then never trained through this signature).

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
    """,
)


UnknownOp = define(
    "GA109", "unknown-op", Severity.ERROR,
    reasons=(Reason("op type {t} is not registered in this TensorFlow"),),
    fix="Load the package or library that defines the op before auditing: --load-ops PACKAGE (a Python "
        "package such as tensorflow_text) or --load-ops path/to/ops.so (tf.load_op_library).",
    explains_mismatch=True,
    doc="""An op type this TensorFlow does not know lies on a float path (a custom op whose package is not loaded).

    ## What it does
    Reports ops whose type is not in this TensorFlow's op registry. Whether a gradient passes
    them depends on the package that defines them (it may register one, or none), so every
    (source, output) pair whose float path runs through one has the status `unknown`: an
    error, because the audit cannot vouch for the model. Unknown ops that touch only string or
    integer paths (tokenizers, lookups) decide no gradient: they are listed in one info line.
    Ops of a package whose ops gradaudit has reviewed (tensorflow-text, tensorflow-decision-forests)
    are one info line per package instead, `needs tensorflow-text: --load-ops tensorflow_text`:
    without it the model cannot be loaded, so nothing of it runs; with it, it runs without
    `--allow-unsafe-ops`.

    ## Why is this bad?
    Neither "connected" nor "blocked" can be said: a decision-forest inference op has no
    gradient at all, a text op's package may register one. The model cannot run here either.

    ## Example
    A model exported with `import tensorflow_decision_forests` or
    `tf.load_op_library("my_ops.so")`, audited where that package is not imported.

    ## Use instead
    `gradaudit MODEL --load-ops tensorflow_decision_forests` (or `--load-ops my_ops.so`), so the op
    and its gradient are known and the pairs get real statuses.
    """,
)


GradientRaises = define(
    "GA110", "gradient-raises", Severity.ERROR,
    reasons=(Reason("the gradient function TensorFlow registered for {t} raises when called ({err})"),),
    fix="Replace the op on the differentiated path, or give it a gradient that works for these attributes "
        "(tf.custom_gradient); tf.raw_ops.PreventGradient is meant to make differentiation fail.",
    explains_mismatch=True,
    doc="""An op's registered gradient function raises when it is called: differentiating through it fails.

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
    """,
)


SamplerGradient = define(
    "GA111", "sampler-gradient", Severity.INFO,
    fix="Nothing to do if the sampler is meant to be differentiated (a reparameterized distribution); check "
        "the model at its deterministic parts, or give --inputs where the sample is not needed.",
    explains_mismatch=True,
    doc="""A random sampler whose distribution depends on a source: its gradient is an estimator, not a derivative.

    ## What it does
    Finds random ops (`RandomGamma`, `StatelessRandomGammaV3`, multinomial and parameterized samplers)
    with a float input that a differentiable source reaches, on a path to an output. The gradient
    TensorFlow (or a library's saved custom gradient) gives through them is a reparameterization
    estimator: the right gradient in expectation, but not the derivative of the output with the seed
    held fixed, which is what finite differences measure.

    ## Why is this bad?
    It is not: it is how reparameterized samplers (TensorFlow Probability's Gamma, Beta, Dirichlet)
    train. It is listed so that a numeric mismatch on these pairs is read as expected, not as a wrong
    gradient.

    ## Example
    ```python
    z = tfd.Gamma(concentration, rate).sample(seed=seed)   # StatelessRandomGammaV3 under a custom gradient
    ```

    ## Use instead
    Keep it. A sampler whose parameters need no gradient can take `tf.stop_gradient` on them.
    """,
)


WritesVariable = define(
    "GA112", "writes-variable", Severity.ERROR,
    fix="Do not write weights in a serving signature: export the inference function, not a training step "
        "(optimizer.apply / assign in the signature); for a pruned Keras model, export "
        "tfmot.sparsity.keras.strip_pruning(model) instead of the wrapped model; call layers with training=False; "
        "keep state that must change (counters, statistics) in non-trainable variables.",
    explains_mismatch=True,
    doc="""The audited signature writes a trainable variable it also reads.

    ## What it does
    Finds `AssignVariableOp` (and the add, sub and scatter variants) on a trainable variable's handle inside
    the functions the signature runs. Writes to non-trainable variables (batch-norm moving statistics in a
    training-mode call, step counters) are state, not weights, and are not reported.

    ## Why is this bad?
    Every call changes the deployed model's weights: two requests with the same input can get different
    answers, and the model drifts from the one that was validated. For a pre-deployment check that is an
    error. The gradient TensorFlow gives with respect to the variable is also taken through the value read
    after the write (a pruning mask multiplied in, say), not the stored value, so a numeric difference for
    that variable is expected and not reported again as a mismatch.

    ## Example
    ```python
    model = tfmot.sparsity.keras.prune_low_magnitude(base)
    model.export(path)                      # the pruning wrapper assigns kernel * mask at every call
    ```

    ## Use instead
    ```python
    tfmot.sparsity.keras.strip_pruning(model).export(path)
    ```
    """,
)


ThroughVariableState = define(
    "GA113", "variable-state", Severity.ERROR,
    reasons=(Reason("{t} reads back a variable this signature wrote a value into first: no gradient flows through a "
                    "variable's state, so what was written gets none from what is read"),),
    fix="Compute the outputs from the value itself (h = f(x); self.cache.assign(h); y = g(h)), not from the "
        "variable read back after the write; keep a variable for state that needs no gradient, and wrap a "
        "deliberate cut in tf.stop_gradient.",
    # an error where other paths carry a gradient too: the read-back's part is lost, never by design (a
    # deliberate cut is tf.stop_gradient), so the numeric difference it explains is this finding's, not a pass
    explains_mismatch=True,
    doc="""A value reaches an output only through a variable: written into it, then read back.

    ## What it does
    Finds variable reads (`ReadVariableOp`, `ResourceGather`) that come after a write of the same variable
    in the same function (`AssignVariableOp` and its add, sub and scatter variants; automatic control
    dependencies order the two), where the value written depends on a source and the value read reaches
    an output.

    ## Why is this bad?
    The output depends on the inputs and weights that made the written value, but TensorFlow's gradient
    does not flow through a variable's state: the tape gives them `None` through this path, so they never
    learn from it, and nothing raises. Where other paths carry their gradient too (a recurrent state kept in a
    variable), the gradient misses the read-back's part: still an error, since no design loses it silently
    (info where the numeric checks show the part is made up, as `h - tf.stop_gradient(h)` added back does).
    A cache, a buffer or a running state read back in the same call is
    the usual cause; `v.assign(h)` used as a value reads the variable back too.

    ## Example
    ```python
    self.cache.assign(tf.tanh(x @ self.w))
    return self.cache @ self.v              # x and w get no gradient
    ```

    ## Use instead
    ```python
    h = tf.tanh(x @ self.w)
    self.cache.assign(h)                    # the state, if it is needed
    return h @ self.v
    ```
    """,
)


RULES: tuple[Rule, ...] = (
    NoGradient, NotDifferentiable, ZeroGradient, IntegerPath, PyFunction, StopGradient,
    CustomGradient, DisconnectedSource, UnknownOp, GradientRaises, SamplerGradient, WritesVariable,
    ThroughVariableState,
)
